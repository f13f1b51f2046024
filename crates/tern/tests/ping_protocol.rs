//! tern ping's line protocol, as crates/tern-ping's crate doc and docs/architecture.md ("tern ping") describe
//! it, request by request against the real `tern ping` over TCP and UDP: each command's answer, the
//! `WITHIN` deadline, every error line and every limit.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tern_testkit::ChildGuard;

struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Conn {
    fn open(addr: SocketAddr) -> Conn {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Conn {
            reader: BufReader::new(s.try_clone().unwrap()),
            writer: s,
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).unwrap();
    }

    /// One reply line, without its `\r\n`.
    fn line(&mut self) -> String {
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        assert!(
            line.ends_with("\r\n"),
            "a reply line ends in CRLF: {line:?}"
        );
        line.truncate(line.len() - 2);
        line
    }

    fn ask(&mut self, request: &str) -> String {
        self.send(format!("{request}\r\n").as_bytes());
        self.line()
    }
}

#[test]
fn tern_ping_answers_its_protocol_as_documented() {
    let (tcp, udp) = (tern_testkit::free_port(), tern_testkit::free_udp_port());
    let listen = format!("127.0.0.1:{tcp}");
    let udp_addr = format!("127.0.0.1:{udp}");
    let _child = ChildGuard(
        Command::new(env!("CARGO_BIN_EXE_tern"))
            .args(["ping", "--listen", &listen, "--udp", &udp_addr])
            .args(["--io-threads", "1", "--cpu-workers", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let addr: SocketAddr = listen.parse().unwrap();
    assert!(tern_testkit::wait_for_port(addr, Duration::from_secs(20)));
    let mut c = Conn::open(addr);

    // Each command and its answer; `\n` alone ends a line too.
    assert_eq!(c.ask("PING"), "PONG");
    c.send(b"PING\n");
    assert_eq!(c.line(), "PONG");
    assert_eq!(c.ask("ECHO hello, world"), "hello, world");
    assert_eq!(c.ask("SPIN 100"), "DONE");
    assert_eq!(c.ask("WORK 100"), "DONE");
    let start = Instant::now();
    assert_eq!(c.ask("SLEEP 50"), "SLEPT");
    assert!(start.elapsed() >= Duration::from_millis(50));
    assert_eq!(c.ask("BIG 5"), "xxxxx");
    // A BIG reply larger than the connection's output room is streamed whole.
    c.send(b"BIG 1000000\r\n");
    let mut big = vec![0; 1_000_002];
    c.reader.read_exact(&mut big).unwrap();
    assert!(big[..1_000_000].iter().all(|&b| b == b'x') && big.ends_with(b"\r\n"));
    // Pipelined requests are answered in order, the slow one first.
    c.send(b"SLEEP 20\r\nPING\r\nECHO after\r\n");
    assert_eq!(
        [c.line(), c.line(), c.line()],
        ["SLEPT", "PONG", "after"].map(String::from)
    );

    // WITHIN: a deadline that long after the request was read; one past it when its turn comes is refused
    // without running (here: it waited behind a 50 ms SPIN of the same read).
    assert_eq!(c.ask("WITHIN 1000 PING"), "PONG");
    c.send(b"WITHIN 1000 SPIN 50000\r\nWITHIN 5 ECHO late\r\n");
    assert_eq!(c.line(), "DONE");
    assert_eq!(c.line(), "-ERR overloaded (deadline expired)");

    // Errors: the connection stays usable.
    for (request, error) in [
        ("NOPE", "-ERR unknown command"),
        ("ping", "-ERR unknown command"),
        ("PING now", "-ERR wrong number of arguments"),
        ("ECHO", "-ERR wrong number of arguments"),
        ("SPIN", "-ERR wrong number of arguments"),
        ("SPIN ten", "-ERR bad number"),
        ("SPIN -1", "-ERR bad number"),
        ("WORK 10000001", "-ERR bad number"), // at most 10 s
        ("SPIN 10000001", "-ERR bad number"),
        ("SLEEP 10001", "-ERR bad number"),  // at most 10 s
        ("BIG 67108865", "-ERR bad number"), // at most 64 MiB
        ("WITHIN soon PING", "-ERR bad deadline"),
        ("WITHIN 10001 PING", "-ERR bad deadline"), // at most 10 s
        ("WITHIN 5", "-ERR WITHIN needs a request"),
        ("WITHIN 5 NOPE", "-ERR unknown command"),
    ] {
        assert_eq!(c.ask(request), error, "{request}");
    }
    assert_eq!(c.ask("PING"), "PONG");
    // A line of 1024 bytes is taken; a longer one closes the connection after saying why.
    let longest = format!("ECHO {}", "y".repeat(1024 - 5));
    assert_eq!(c.ask(&longest), "y".repeat(1019));
    c.send("z".repeat(1100).as_bytes());
    assert_eq!(c.line(), "-ERR line too long");
    let mut rest = Vec::new();
    assert_eq!(
        c.reader.read_to_end(&mut rest).unwrap(),
        0,
        "closed: {rest:?}"
    );

    // UDP: a PING datagram gets PONG, anything else an error.
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let mut buf = [0u8; 64];
    for (datagram, reply) in [
        (&b"PING\r\n"[..], &b"PONG\r\n"[..]),
        (b"PING", b"PONG\r\n"),
        (b"ECHO x\r\n", b"-ERR unknown command\r\n"),
    ] {
        // UDP may drop a datagram: a few tries.
        let got = (0..5).find_map(|_| {
            socket.send_to(datagram, &udp_addr).unwrap();
            socket.recv(&mut buf).ok().map(|n| buf[..n].to_vec())
        });
        assert_eq!(got.as_deref(), Some(reply), "{datagram:?}");
    }
}
