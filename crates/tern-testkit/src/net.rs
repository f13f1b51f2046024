//! Loopback ports and connections.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

/// A free 127.0.0.1 TCP port (bound, then released for the server under test to take).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// A free 127.0.0.1 UDP port.
pub fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("a free loopback UDP port")
        .port()
}

/// Waits up to `within` for something to accept connections on `addr`; whether it did.
pub fn wait_for_port(addr: SocketAddr, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if TcpStream::connect(addr).is_ok() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A client connection with a 5-second read timeout and Nagle off, as every test wants one.
pub fn connect(addr: SocketAddr) -> TcpStream {
    let conn = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    conn.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("read timeout");
    conn.set_nodelay(true).expect("nodelay");
    conn
}

/// Sends memcached's `stats <group>` (`group` empty for plain `stats`) on `conn` and answers the reply's
/// text through its `END` line.
pub fn stats_reply(conn: &mut TcpStream, group: &str) -> String {
    let command = if group.is_empty() {
        "stats\r\n".to_owned()
    } else {
        format!("stats {group}\r\n")
    };
    conn.write_all(command.as_bytes()).expect("send stats");
    let mut reply = Vec::new();
    let mut buf = [0u8; 8192];
    while !reply.ends_with(b"END\r\n") {
        let n = conn.read(&mut buf).expect("read stats");
        assert!(
            n > 0,
            "closed before END: {}",
            String::from_utf8_lossy(&reply)
        );
        reply.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&reply).into_owned()
}
