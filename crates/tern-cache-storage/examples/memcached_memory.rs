//! The comparison figure for `examples/memory.rs`: starts `memcached -m 1024`
//! on a free 127.0.0.1 port, loads the same 1M items (16-byte keys, 100-byte
//! values) over its text protocol, reports its RSS per item from
//! /proc/<pid>/status, and stops it.
//!
//! `cargo run --release -p tern-cache-storage --example memcached_memory [items]`

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

fn vm_rss(pid: u32) -> usize {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).expect("memcached is running");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS");
    let kb: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// Kills memcached however `main` ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn main() {
    let items: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("items"))
        .unwrap_or(1_000_000);
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = Command::new("memcached");
    cmd.args([
        "-m",
        "1024",
        "-U",
        "0",
        "-l",
        "127.0.0.1",
        "-p",
        &port.to_string(),
    ]);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        cmd.args(["-u", "nobody"]);
    }
    let server = Server(cmd.spawn().expect("memcached on PATH"));
    let pid = server.0.id();
    let deadline = Instant::now() + Duration::from_secs(5);
    let stream = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("memcached did not start: {e}"),
        }
    };
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
