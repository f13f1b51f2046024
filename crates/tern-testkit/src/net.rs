//! Loopback ports and connections.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

/// A free 127.0.0.1 port for TCP (and UDP, which tern cache and memcached bind beside it), for a server
/// under test to take.
///
/// Handed out from outside the kernel's ephemeral range, one after another, not by binding port 0: a port
/// from `bind(0)` is released before the server binds it, and in between any outgoing connection of a test
/// running alongside (every `wait_for_port` poll is one) may be given it as its local port; CI saw a server
/// fail to start that way. Ports outside the range are never given to a connection or to `bind(0)`.
pub fn free_port() -> u16 {
    next_port(
        |port| {
            TcpListener::bind(("127.0.0.1", port)).is_ok()
                && UdpSocket::bind(("127.0.0.1", port)).is_ok()
        },
        || TcpListener::bind("127.0.0.1:0")?.local_addr(),
    )
}

/// A free 127.0.0.1 UDP port, taken as [`free_port`] takes one.
pub fn free_udp_port() -> u16 {
    next_port(
        |port| UdpSocket::bind(("127.0.0.1", port)).is_ok(),
        || UdpSocket::bind("127.0.0.1:0")?.local_addr(),
    )
}

/// The first port of the range outside the ephemeral one, after the last one handed out, that `is_free`
/// accepts; the range starts at an offset drawn from the process id, so two test processes at once start
/// far apart. Where the ephemeral range leaves no such room (1,000 ports below or above it), a port from
/// `bind_any`.
fn next_port(
    is_free: impl Fn(u16) -> bool,
    bind_any: impl Fn() -> std::io::Result<SocketAddr>,
) -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::OnceLock;
    static RANGE: OnceLock<Option<(u32, u32)>> = OnceLock::new();
    static NEXT: OnceLock<AtomicU32> = OnceLock::new();
    let range = RANGE.get_or_init(|| {
        let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
        let mut bounds = ephemeral.split_whitespace().map(|b| b.parse::<u32>().ok());
        let (first, last) = (bounds.next()??, bounds.next()??);
        const LOW: u32 = 10_000;
        if first >= LOW + 1000 {
            Some((LOW, first - LOW))
        } else if last + 1000 < 65_536 {
            Some((last + 1, 65_535 - last))
        } else {
            None
        }
    });
    let Some((low, span)) = *range else {
        return bind_any().expect("a free loopback port").port();
    };
    let next =
        NEXT.get_or_init(|| AtomicU32::new(std::process::id().wrapping_mul(2_654_435_761) % span));
    for _ in 0..span {
        let port = (low + next.fetch_add(1, Ordering::Relaxed) % span) as u16;
        if is_free(port) {
            return port;
        }
    }
    panic!("no free loopback port between {low} and {}", low + span - 1)
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
