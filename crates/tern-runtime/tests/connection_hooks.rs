//! `Service::connection_opened` / `connection_closed` and `Cx::conn` over real sockets, in both ways of
//! spreading connections: each connection is reported open once before its requests and closed once
//! after them, under the number its requests carry, however it ends.

#[macro_use]
mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tern_runtime::{
    Cx, Outcome, Output, Rejection, RunningServer, RuntimeConfig, Server, Service, Spread,
};

/// What the hooks and the handler saw, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Opened(u64),
    Request(u64),
    Closed(u64),
}

/// A line protocol: any line is answered `OK <connection number>`; `QUIT` closes the connection.
struct Hooks {
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Service for Hooks {
    line_service!();

    fn handle(&self, cx: &mut Cx<'_, Self>, line: &[u8], out: &mut Output) -> Outcome {
        self.seen.lock().unwrap().push(Seen::Request(cx.conn));
        out.extend_from_slice(format!("OK {}\n", cx.conn).as_bytes());
        if line == b"QUIT" {
            Outcome::Close
        } else {
            Outcome::Reply
        }
    }

    fn reject(&self, _line: &&[u8], _why: Rejection, out: &mut Vec<u8>) {
        out.extend_from_slice(b"BUSY\n");
    }

    fn connection_opened(&self, _state: &std::rc::Rc<()>, conn: u64) {
        self.seen.lock().unwrap().push(Seen::Opened(conn));
    }

    fn connection_closed(
        &self,
        _state: &std::rc::Rc<()>,
        conn: u64,
        _why: tern_runtime::CloseReason,
    ) {
        self.seen.lock().unwrap().push(Seen::Closed(conn));
    }
}

fn start(spread: Spread, seen: &Arc<Mutex<Vec<Seen>>>) -> RunningServer {
    let cfg = RuntimeConfig {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        io_threads: 1,
        spread,
        ..RuntimeConfig::default()
    };
    let service = Hooks {
        seen: Arc::clone(seen),
    };
    Server::new(cfg, service).start().expect("server starts")
}

/// Sends `line` and returns the connection number the server answered with.
fn ask(s: &mut TcpStream, line: &[u8]) -> u64 {
    s.write_all(line).unwrap();
    let mut reply = Vec::new();
    let mut byte = [0u8; 1];
    while !reply.ends_with(b"\n") {
        s.read_exact(&mut byte).expect("a reply");
        reply.push(byte[0]);
    }
    let text = String::from_utf8(reply).unwrap();
    text.trim_end()
        .strip_prefix("OK ")
        .unwrap()
        .parse()
        .unwrap()
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

#[test]
fn every_connection_is_reported_opened_and_closed_once_under_its_number() {
    for spread in [Spread::Reuseport, Spread::Acceptor] {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let server = start(spread, &seen);
        let addr = server.local_addr().unwrap();
        // Three ways to end: the server closes after QUIT, the client closes, the client vanishes with
        // a request half sent.
        let mut quits = connect(addr);
        let mut closes = connect(addr);
        let mut vanishes = connect(addr);
        let numbers = [
            ask(&mut quits, b"hello\n"),
            ask(&mut closes, b"hello\n"),
            ask(&mut vanishes, b"hello\n"),
        ];
        assert_eq!(ask(&mut quits, b"QUIT\n"), numbers[0]);
        drop(closes);
        vanishes.write_all(b"half a li").unwrap();
        drop(vanishes);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let closed = seen
                .lock()
                .unwrap()
                .iter()
                .filter(|s| matches!(s, Seen::Closed(_)))
                .count();
            if closed == 3 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{spread:?}: {:?}",
                seen.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let seen = seen.lock().unwrap().clone();
        for n in numbers {
            let of_n: Vec<&Seen> = seen
                .iter()
                .filter(|s| matches!(s, Seen::Opened(c) | Seen::Request(c) | Seen::Closed(c) if *c == n))
                .collect();
            let requests = if n == numbers[0] { 2 } else { 1 };
            assert_eq!(of_n.len(), requests + 2, "{spread:?} {n}: {seen:?}");
            assert_eq!(
                of_n.first(),
                Some(&&Seen::Opened(n)),
                "{spread:?}: {seen:?}"
            );
            assert_eq!(of_n.last(), Some(&&Seen::Closed(n)), "{spread:?}: {seen:?}");
        }
        server.shutdown();
    }
}
