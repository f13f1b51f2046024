//! `-m` is a hard bound on the memory a real `tern cache` process uses: writing several times `-m` worth of
//! items evicts (no errors) and keeps the process's RSS within 10% of `-m` above its resident size when it
//! started; with `-M` the same writes are refused with memcached's out-of-memory error instead.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use tern_bench::process::{rss_bytes, ChildGuard};

const LIMIT_MIB: u64 = 32;

fn start(extra: &[&str]) -> (ChildGuard, SocketAddr) {
    let port = tern_bench::process::free_port().to_string();
    let limit = LIMIT_MIB.to_string();
    let mut args = vec!["cache", "-p", &port, "-t", "2", "-m", &limit];
    args.extend_from_slice(extra);
    let mut child = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains("listening"), "{first}");
    (
        ChildGuard(child),
        ([127, 0, 0, 1], port.parse().unwrap()).into(),
    )
}

/// Sets `count` items of `value_len` bytes in pipelined batches and returns the replies' counts:
/// (stored, out of memory).
fn fill(conn: &mut TcpStream, first: usize, count: usize, value_len: usize) -> (usize, usize) {
    let value = vec![b'v'; value_len];
    let (mut stored, mut oom) = (0, 0);
    let mut replies = Vec::new();
    for batch in (first..first + count).collect::<Vec<_>>().chunks(64) {
        let mut req = Vec::new();
        for i in batch {
            req.extend_from_slice(format!("set key:{i:09} 0 0 {value_len}\r\n").as_bytes());
            req.extend_from_slice(&value);
            req.extend_from_slice(b"\r\n");
        }
        conn.write_all(&req).unwrap();
        let mut lines = 0;
        while lines < batch.len() {
            let mut buf = [0u8; 4096];
            let n = conn.read(&mut buf).unwrap();
            assert!(n > 0, "server closed the connection");
            replies.extend_from_slice(&buf[..n]);
            while let Some(nl) = replies.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = replies.drain(..=nl).collect();
                match &line[..] {
                    b"STORED\r\n" => stored += 1,
                    b"SERVER_ERROR out of memory storing object\r\n" => oom += 1,
                    other => panic!("unexpected reply {:?}", String::from_utf8_lossy(other)),
                }
                lines += 1;
            }
        }
    }
    (stored, oom)
}

fn stat(conn: &mut TcpStream, name: &str) -> u64 {
    let prefix = format!("STAT {name} ");
    tern_testkit::stats_reply(conn, "")
        .lines()
        .find_map(|l| l.strip_prefix(&prefix).map(|v| v.parse().unwrap()))
        .unwrap_or_else(|| panic!("no stat {name}"))
}

fn connect(addr: SocketAddr) -> TcpStream {
    let conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    conn
}

#[test]
fn writing_four_times_dash_m_evicts_and_rss_stays_within_the_bound() {
    let (server, addr) = start(&[]);
    let mut conn = connect(addr);
    let base = rss_bytes(server.pid()).unwrap();
    // 4x the limit, in 1000-byte values.
    let count = (4 * LIMIT_MIB as usize) << 10;
    let (stored, oom) = fill(&mut conn, 0, count, 1000);
    assert_eq!((stored, oom), (count, 0), "without -M every set is stored");
    assert!(stat(&mut conn, "evictions") > 0);
    // The newest items are there; the oldest were evicted.
    conn.write_all(format!("get key:{:09}\r\n", count - 1).as_bytes())
        .unwrap();
    let mut reply = vec![0u8; 2048];
    let n = conn.read(&mut reply).unwrap();
    assert!(reply[..n].starts_with(b"VALUE"), "the newest item is kept");
    let rss = rss_bytes(server.pid()).unwrap();
    let bound = base + LIMIT_MIB * (1 << 20) * 11 / 10;
    assert!(
        rss <= bound,
        "RSS {} MiB over the bound {} MiB (base {} MiB + 1.1 x -m {LIMIT_MIB} MiB)",
        rss >> 20,
        bound >> 20,
        base >> 20
    );
}

#[test]
fn with_dash_capital_m_a_full_cache_refuses_writes_instead_of_evicting() {
    let (server, addr) = start(&["-M"]);
    let mut conn = connect(addr);
    let base = rss_bytes(server.pid()).unwrap();
    let count = (2 * LIMIT_MIB as usize) << 10;
    let (stored, oom) = fill(&mut conn, 0, count, 1000);
    assert_eq!(stored + oom, count);
    assert!(oom > 0 && stored > 0, "stored {stored}, refused {oom}");
    assert_eq!(stat(&mut conn, "evictions"), 0);
    // The first items written are all still there.
    conn.write_all(b"get key:000000000\r\n").unwrap();
    let mut reply = vec![0u8; 2048];
    let n = conn.read(&mut reply).unwrap();
    assert!(reply[..n].starts_with(b"VALUE"));
    assert!(rss_bytes(server.pid()).unwrap() <= base + LIMIT_MIB * (1 << 20) * 11 / 10);
}
