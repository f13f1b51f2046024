//! A deferred reply that closes its connection (`Deferred::then_close`, an HTTP/1.0 or `Connection: close`
//! request answered later): the replies before it and it go out in order, then the connection closes, and
//! the requests sent after it are not run.

#[macro_use]
mod common;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tern_runtime::{Cx, Deferred, Outcome, Output, Rejection, RuntimeConfig, Server, Service};

/// Lines: `SLOW` answers `A` after 20 ms, `LAST` answers `B` after 20 ms and closes, `PING` answers `P`.
struct Lines {
    pings: AtomicUsize,
}

impl Service for Lines {
    line_service!();

    fn handle(&self, _cx: &mut Cx<'_, Self>, request: &[u8], out: &mut Output) -> Outcome {
        let later = |reply: &'static [u8]| {
            Deferred::new(async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                reply.to_vec()
            })
        };
        match request {
            b"SLOW" => Outcome::Defer(later(b"A\n")),
            b"LAST" => Outcome::Defer(later(b"B\n").then_close()),
            _ => {
                self.pings.fetch_add(1, Ordering::Relaxed);
                out.extend_from_slice(b"P\n");
                Outcome::Reply
            }
        }
    }

    fn reject(&self, _request: &&[u8], _why: Rejection, out: &mut Vec<u8>) {
        out.extend_from_slice(b"X\n");
    }
}

#[test]
fn a_deferred_reply_can_close_its_connection_after_it_is_written() {
    let cfg = RuntimeConfig {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        io_threads: 1,
        ..RuntimeConfig::default()
    };
    let server = Server::new(
        cfg,
        Lines {
            pings: AtomicUsize::new(0),
        },
    );
    let service = Arc::clone(server.service());
    let server = server.start().unwrap();
    let mut conn = std::net::TcpStream::connect(server.local_addr().unwrap()).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    conn.write_all(b"PING\nSLOW\nLAST\nPING\nPING\n").unwrap();
    let mut got = Vec::new();
    conn.read_to_end(&mut got).expect("the server closes");
    assert_eq!(got, b"P\nA\nB\n");
    assert_eq!(
        service.pings.load(Ordering::Relaxed),
        1,
        "nothing after LAST ran"
    );
    server.shutdown();
    server.join();
}
