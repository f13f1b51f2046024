//! The per-turn budget weighed by [`Service::weight`]: two connections that pipeline batches which each
//! fill the budget are handled one batch each, in turn, never two batches of one while the other waits
//! (counting a batch as one request, the loop handled 64 of one connection's batches in a row).

#[macro_use]
mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tern_runtime::{Cx, Outcome, Output, Rejection, RuntimeConfig, Server, Service};

/// A line protocol: `BATCH <n>` stands for n requests of work and is answered `OK`.
struct Batches {
    handled: Arc<Mutex<Vec<u64>>>,
}

impl Service for Batches {
    line_service!();

    fn weight(&self, line: &&[u8]) -> usize {
        std::str::from_utf8(line)
            .ok()
            .and_then(|l| l.strip_prefix("BATCH "))
            .and_then(|n| n.parse().ok())
            .unwrap_or(1)
    }

    fn handle(&self, cx: &mut Cx<'_, Self>, _line: &[u8], out: &mut Output) -> Outcome {
        self.handled.lock().unwrap().push(cx.conn);
        out.extend_from_slice(b"OK\n");
        Outcome::Reply
    }

    fn reject(&self, _line: &&[u8], _why: Rejection, out: &mut Vec<u8>) {
        out.extend_from_slice(b"BUSY\n");
    }
}

#[test]
fn connections_pipelining_full_batches_take_turns_one_batch_each() {
    const BATCHES: usize = 2_000;
    let handled = Arc::new(Mutex::new(Vec::new()));
    let cfg = RuntimeConfig {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        io_threads: 1,
        max_requests_per_turn: 64,
        ..RuntimeConfig::default()
    };
    let service = Batches {
        handled: Arc::clone(&handled),
    };
    let server = Server::new(cfg, service).start().expect("server starts");
    let addr = server.local_addr().expect("a TCP listener");
    let pipeline = "BATCH 64\n".repeat(BATCHES);
    let clients: Vec<_> = (0..2)
        .map(|_| {
            let pipeline = pipeline.clone();
            let mut conn = TcpStream::connect(addr).unwrap();
            conn.set_read_timeout(Some(Duration::from_secs(20)))
                .unwrap();
            std::thread::spawn(move || {
                conn.write_all(pipeline.as_bytes()).unwrap();
                let mut replies = vec![0u8; 3 * BATCHES];
                conn.read_exact(&mut replies).expect("every reply");
                assert!(replies.chunks(3).all(|r| r == b"OK\n"));
            })
        })
        .collect();
    for client in clients {
        client.join().unwrap();
    }
    server.shutdown();

    let handled = handled.lock().unwrap();
    assert_eq!(handled.len(), 2 * BATCHES);
    // From the first batch of the later connection to the last batch of the one that finishes first, both
    // had batches waiting: no run of one connection's batches may be longer than one.
    let later = handled[handled.iter().position(|&c| c != handled[0]).unwrap()];
    let from = handled.iter().position(|&c| c == later).unwrap();
    let to = handled.len()
        - handled
            .iter()
            .rev()
            .position(|&c| c != *handled.last().unwrap())
            .unwrap();
    let longest = handled[from..to]
        .chunk_by(|a, b| a == b)
        .map(<[u64]>::len)
        .max()
        .unwrap();
    assert!(
        longest <= 1,
        "a connection had {longest} batches handled in a row while the other waited"
    );
}
