//! A connection that becomes a feed (`Outcome::Feed`): what another thread produces reaches it, in order and
//! whole, however long the feed sleeps between lines; what the peer sends after is dropped; the feed is
//! dropped when the peer closes; and the loop's other connections are served meanwhile.

#[macro_use]
mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::{Duration, Instant};

use tern_runtime::{
    Cx, Feed, FeedStep, Outcome, Output, Rejection, RuntimeConfig, Server, Service,
};

/// Lines queued by the test's producer thread, and the feed's waker while it waits.
#[derive(Default)]
struct Queue {
    lines: Vec<Vec<u8>>,
    waker: Option<Waker>,
}

/// `FEED` makes the connection a feed of the shared queue; anything else answers `P`.
#[derive(Default)]
struct Feeds {
    queue: Arc<Mutex<Queue>>,
    /// Feeds alive (dropped with their connection).
    alive: Arc<AtomicUsize>,
    pings: Arc<AtomicUsize>,
}

struct Alive(Arc<AtomicUsize>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Service for Feeds {
    line_service!();

    fn handle(&self, _cx: &mut Cx<'_, Self>, request: &[u8], out: &mut Output) -> Outcome {
        if request != b"FEED" {
            self.pings.fetch_add(1, Ordering::SeqCst);
            out.extend_from_slice(b"P\n");
            return Outcome::Reply;
        }
        out.extend_from_slice(b"OK\n");
        let queue = self.queue.clone();
        self.alive.fetch_add(1, Ordering::SeqCst);
        let alive = Alive(self.alive.clone());
        Outcome::Feed(Feed::new(move |out, waker| {
            let _alive = &alive;
            let mut queue = queue.lock().unwrap();
            if queue.lines.is_empty() {
                queue.waker = Some(waker.clone());
                return FeedStep::Idle;
            }
            for line in queue.lines.drain(..) {
                out.extend_from_slice(&line);
            }
            FeedStep::Wrote
        }))
    }

    fn reject(&self, _request: &&[u8], _why: Rejection, out: &mut Vec<u8>) {
        out.extend_from_slice(b"X\n");
    }
}

fn push(queue: &Mutex<Queue>, line: String) {
    let mut queue = queue.lock().unwrap();
    queue.lines.push(line.into_bytes());
    if let Some(waker) = queue.waker.take() {
        waker.wake();
    }
}

#[test]
fn a_feed_carries_another_threads_lines_until_its_peer_closes() {
    let service = Feeds::default();
    let (queue, alive, pings) = (
        service.queue.clone(),
        service.alive.clone(),
        service.pings.clone(),
    );
    let cfg = RuntimeConfig {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        io_threads: 1,
        ..RuntimeConfig::default()
    };
    let server = Server::new(cfg, service).start().unwrap();
    let addr = server.local_addr().unwrap();
    let mut watcher = std::net::TcpStream::connect(addr).unwrap();
    watcher
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    // The rest of the read after FEED is dropped, never answered.
    watcher.write_all(b"FEED\nPING\n").unwrap();
    let mut lines = BufReader::new(watcher.try_clone().unwrap());
    let mut line = String::new();
    lines.read_line(&mut line).unwrap();
    assert_eq!(line, "OK\n");

    // A producer on another thread, sleeping between bursts so the feed goes idle and is woken again.
    let producer = {
        let queue = queue.clone();
        std::thread::spawn(move || {
            for burst in 0..20 {
                for i in 0..50 {
                    push(&queue, format!("line {}\n", burst * 50 + i));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    // Meanwhile the peer's input is read and dropped, and another client of the same loop is served.
    watcher.write_all(b"PING\nPING\n").unwrap();
    let mut other = std::net::TcpStream::connect(addr).unwrap();
    other.write_all(b"PING\n").unwrap();
    let mut reply = [0u8; 2];
    other.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"P\n");
    for expected in 0..1000 {
        line.clear();
        lines.read_line(&mut line).unwrap();
        assert_eq!(line, format!("line {expected}\n"));
    }
    producer.join().unwrap();
    assert_eq!(
        pings.load(Ordering::SeqCst),
        1,
        "only the other client's PING ran: the feed's three were dropped"
    );
    assert_eq!(alive.load(Ordering::SeqCst), 1);

    drop(lines);
    drop(watcher);
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive.load(Ordering::SeqCst) != 0 {
        assert!(
            Instant::now() < deadline,
            "the feed outlived its connection"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    server.shutdown();
    server.join();
}
