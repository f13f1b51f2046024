//! Replies larger than a connection's output room (multi-gets of many large values, dumps of many keys):
//! streamed as the client reads, large values sent from the store without a copy, and byte for byte what
//! memcached 1.6.18 sends.

mod common;

use common::{connect, exchange, have, Memcached, Tern};
use std::io::{Read, Write};
use std::net::SocketAddr;

/// Stores `count` values: every third one 30 KiB (sent by reference), the others 1 KiB (copied).
fn fill(addr: SocketAddr, count: usize) {
    let mut conn = connect(addr);
    let mut batch = Vec::new();
    for i in 0..count {
        let len = if i % 3 == 0 { 30 << 10 } else { 1 << 10 };
        let byte = b'a' + (i % 26) as u8;
        batch.extend_from_slice(format!("set key{i} {i} 0 {len} noreply\r\n").as_bytes());
        batch.extend(std::iter::repeat_n(byte, len));
        batch.extend_from_slice(b"\r\n");
    }
    conn.write_all(&batch).unwrap();
    let (replies, closed) = exchange(&mut conn, b"");
    assert!(replies.is_empty() && !closed, "noreply sets answer nothing");
}

/// One multi-get of every key (a ~2.7 MB reply, ten times the output room), followed on the same connection
/// by requests whose replies must come after it.
fn multiget(addr: SocketAddr, count: usize) -> Vec<u8> {
    let keys: Vec<String> = (0..count).map(|i| format!("key{i}")).collect();
    let mut request = format!("get {}\r\n", keys.join(" ")).into_bytes();
    request.extend_from_slice(b"get key1 missing key0\r\nmg key3 v f\r\nversion\r\n");
    exchange(&mut connect(addr), &request).0
}

#[test]
fn a_multiget_past_the_output_room_arrives_whole_and_as_memcached_sends_it() {
    if !have("memcached") {
        return;
    }
    let count = 240;
    let tern = Tern::start(&["-m", "64"]);
    let memcached = Memcached::start(&["-m", "64"]);
    fill(tern.addr, count);
    fill(memcached.addr, count);
    let ours = multiget(tern.addr, count);
    let theirs = multiget(memcached.addr, count);
    assert!(ours.len() > 2_000_000, "{} bytes", ours.len());
    assert!(
        ours == theirs,
        "replies differ: {} vs {} bytes, first difference at {:?}",
        ours.len(),
        theirs.len(),
        ours.iter().zip(&theirs).position(|(a, b)| a != b)
    );
}

/// The keys a metadump lists, sorted.
fn metadump_keys(addr: SocketAddr) -> Vec<String> {
    // memcached hands the connection to its crawler for the dump: nothing may follow it in the pipeline.
    let mut conn = connect(addr);
    conn.write_all(b"lru_crawler metadump all\r\n").unwrap();
    let mut replies = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    while !replies.ends_with(b"END\r\n") {
        let n = conn.read(&mut buf).expect("the dump goes on to END");
        assert!(n > 0, "closed before END");
        replies.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8(replies).unwrap();
    let mut keys: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("key="))
        .map(|l| l.split(' ').next().unwrap().to_string())
        .collect();
    keys.sort();
    keys
}

#[test]
fn a_metadump_of_many_keys_lists_each_once_as_memcached_does() {
    if !have("memcached") {
        return;
    }
    let tern = Tern::start(&["-m", "64"]);
    let memcached = Memcached::start(&["-m", "64"]);
    for addr in [tern.addr, memcached.addr] {
        let mut conn = connect(addr);
        let mut batch = Vec::new();
        for i in 0..8_000 {
            batch.extend_from_slice(format!("set dumped:{i:06} 0 0 1 noreply\r\nx\r\n").as_bytes());
        }
        conn.write_all(&batch).unwrap();
        exchange(&mut conn, b"");
    }
    let ours = metadump_keys(tern.addr);
    assert_eq!(ours.len(), 8_000);
    assert_eq!(ours, metadump_keys(memcached.addr));
}

#[test]
fn cachedump_stops_at_two_mebibytes_as_memcached_does() {
    let tern = Tern::start(&["-m", "256"]);
    let mut conn = connect(tern.addr);
    let mut batch = Vec::new();
    for i in 0..60_000 {
        batch.extend_from_slice(
            format!("set a-long-key-name-for-the-dump-{i:08} 0 0 1 noreply\r\nx\r\n").as_bytes(),
        );
    }
    conn.write_all(&batch).unwrap();
    exchange(&mut conn, b"");
    // New items are in class 1 (tern's probationary queue).
    let (reply, _) = exchange(&mut conn, b"stats cachedump 1 0\r\n");
    assert!(reply.ends_with(b"END\r\n"));
    assert!(reply.len() < 2 << 20, "{} bytes", reply.len());
    let items = reply
        .split(|&b| b == b'\n')
        .filter(|l| l.starts_with(b"ITEM "))
        .count();
    assert!(items > 20_000 && items < 60_000, "{items} items listed");
}
