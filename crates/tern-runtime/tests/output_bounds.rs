//! Output bounded within a request: a reply too big to build at once (ping's `BIG`, streamed by the service)
//! is produced only as fast as the peer reads, in order with the replies around it, and to the last byte.
//! One test per file section; they run in this binary alone so the RSS figures are the server's.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

use tern_ping::Ping;
use tern_runtime::{RunningServer, RuntimeConfig, Server};

const BIG: usize = 64 << 20;

fn start(io_threads: usize) -> RunningServer {
    let cfg = RuntimeConfig {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        io_threads,
        ..RuntimeConfig::default()
    };
    Server::new(cfg, Ping).start().expect("server starts")
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    statm
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 4096
}

/// Reads one `BIG` reply of `len` bytes and checks every byte.
fn read_big(s: &mut TcpStream, len: usize) {
    let mut buf = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        let n = left.min(buf.len());
        s.read_exact(&mut buf[..n]).expect("reply bytes");
        assert!(buf[..n].iter().all(|&b| b == b'x'), "a BIG reply is all x");
        left -= n;
    }
    let mut end = [0u8; 2];
    s.read_exact(&mut end).unwrap();
    assert_eq!(&end, b"\r\n");
}

fn read_line(s: &mut TcpStream, want: &[u8]) {
    let mut got = vec![0u8; want.len()];
    s.read_exact(&mut got).unwrap();
    assert_eq!(got, want);
}

#[test]
fn output_stays_bounded_in_order_and_complete() {
    let server = start(1);
    let addr = server.local_addr().unwrap();

    // A client asks for 256 MiB in four replies and reads nothing: the server produces only what the
    // socket takes plus `max_output_bytes`, not the replies.
    let before = rss_bytes();
    let mut hog = connect(addr);
    hog.write_all(&b"BIG 67108864\r\n".repeat(4)).unwrap();
    hog.write_all(b"PING\r\n").unwrap();
    let mut other = connect(addr);
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(10));
        // The loop the hog is on still answers others.
        other.write_all(b"PING\r\n").unwrap();
        read_line(&mut other, b"PONG\r\n");
    }
    let grown = rss_bytes().saturating_sub(before);
    assert!(
        grown < 32 << 20,
        "a reader that never reads held {} MiB of 256 MiB of replies in the server",
        grown >> 20
    );
    // Once it reads, it gets every byte, in order.
    for _ in 0..4 {
        read_big(&mut hog, BIG);
    }
    read_line(&mut hog, b"PONG\r\n");

    // A streamed reply behind a deferred one waits its turn, and so do the replies after it.
    let mut s = connect(addr);
    s.write_all(b"SLEEP 50\r\nBIG 3000000\r\nECHO after\r\n")
        .unwrap();
    read_line(&mut s, b"SLEPT\r\n");
    read_big(&mut s, 3_000_000);
    read_line(&mut s, b"after\r\n");

    // A client that sends its requests and closes its side still gets every reply, then EOF.
    let mut s = connect(addr);
    s.write_all(b"BIG 5000000\r\nBIG 5000000\r\nECHO last\r\n")
        .unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    read_big(&mut s, 5_000_000);
    read_big(&mut s, 5_000_000);
    read_line(&mut s, b"last\r\n");
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "EOF after the last reply");

    server.shutdown();
    server.join();
}
