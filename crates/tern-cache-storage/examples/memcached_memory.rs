//! The comparison figure for `examples/memory.rs`: loads the same 1M items
//! (16-byte keys, 100-byte values) into a running memcached over its text
//! protocol and reports its RSS per item from /proc/<pid>/status.
//!
//! ```text
//! memcached -m 1024 -p 39517 -U 0 -l 127.0.0.1 -u nobody &
//! cargo run --release -p tern-cache-storage --example memcached_memory -- 39517 $! [items]
//! ```

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

fn vm_rss(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("memcached pid");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS");
    let kb: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

fn main() {
    let mut args = std::env::args().skip(1);
    let port: u16 = args.next().expect("port").parse().expect("port");
    let pid: u32 = args.next().expect("memcached pid").parse().expect("pid");
    let items: usize = args
        .next()
        .map(|a| a.parse().expect("items"))
        .unwrap_or(1_000_000);
    let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to memcached");
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = std::io::BufWriter::with_capacity(1 << 16, stream);
    let mut line = String::new();
    let before = vm_rss(pid);
    let value = [b'v'; 100];
    for i in 0..items {
        write!(writer, "set key:{i:012} 0 0 100 noreply\r\n").unwrap();
        writer.write_all(&value).unwrap();
        writer.write_all(b"\r\n").unwrap();
        if i % 10_000 == 9_999 {
            // A round trip now and then keeps the server's buffers small.
            writer.write_all(b"version\r\n").unwrap();
            writer.flush().unwrap();
            line.clear();
            reader.read_line(&mut line).unwrap();
            assert!(line.starts_with("VERSION"), "{line}");
        }
    }
    writer.write_all(b"stats\r\n").unwrap();
    writer.flush().unwrap();
    let mut curr_items = 0;
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        if line.starts_with("END") {
            break;
        }
        if let Some(v) = line.strip_prefix("STAT curr_items ") {
            curr_items = v.trim().parse().unwrap();
        }
    }
    assert_eq!(curr_items, items, "memcached evicted or refused items");
    let after = vm_rss(pid);
    println!("items                 {items}");
    println!("memcached rss before  {before}");
    println!("memcached rss after   {after}");
    println!("rss bytes/item        {:.1}", after as f64 / items as f64);
    println!(
        "rss growth bytes/item {:.1}",
        (after - before) as f64 / items as f64
    );
}
