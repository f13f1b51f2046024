//! The pacer protocol over real sockets: against a fake pacer that answers wrongly, the wrong
//! decisions and the wrong counts are caught (against a real `tern pacer serve`, every reply
//! validates: `crates/tern/tests/load_pacer.rs`, since this crate depends on no service).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tern_load::{run_load, Config, IdRange, Mode, Outcome, PacerWorkload, Protocol, Report};
use tern_pacer_proto::gateway::{decode_frame, Decision, DecisionsWriter, Frame, Limits};
use tern_pacer_proto::money::{Cpm, Usd};
use tern_wire::Decode;

fn pacer_config(addr: SocketAddr, notices: f64) -> Config {
    Config {
        server: addr,
        protocol: Protocol::Pacer,
        connections: 4,
        pipeline: 2,
        mode: Mode::Closed,
        duration_s: Some(1.0),
        warmup_s: 0.2,
        timeout_s: 1.0,
        pacer: PacerWorkload {
            campaigns: IdRange { first: 1, last: 20 },
            notices,
            ..PacerWorkload::default()
        },
        ..Config::default()
    }
}

/// How the fake pacer answers each BIDS frame.
#[derive(Clone, Copy, PartialEq)]
enum Answer {
    /// Bid the first candidate at its maximum bid: always valid.
    Honest,
    /// Bid the first candidate one micro-unit above its maximum bid.
    Overbid,
    /// One decision too few.
    ShortCount,
}

/// A pacer stand-in on its own threads, stopped on drop.
struct FakePacer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FakePacer {
    fn start(answer: Answer) -> FakePacer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut connections = Vec::new();
            while !stopping.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((socket, _)) => {
                        let stopping = stopping.clone();
                        connections
                            .push(std::thread::spawn(move || serve(socket, answer, &stopping)));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
            for c in connections {
                c.join().unwrap();
            }
        });
        FakePacer {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for FakePacer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap();
    }
}

fn serve(mut socket: TcpStream, answer: Answer, stop: &AtomicBool) {
    socket.set_nonblocking(false).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    socket.set_nodelay(true).unwrap();
    let limits = Limits::default();
    let mut input = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    while !stop.load(Ordering::Relaxed) {
        match socket.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => input.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(_) => return,
        }
        let mut out = Vec::new();
        loop {
            let (batch, consumed) = match decode_frame::<Usd>(&input, &limits) {
                Decode::Frame {
                    request: Frame::Bids(batch),
                    consumed,
                } => (batch, consumed),
                Decode::Incomplete { .. } => break,
                _ => return,
            };
            let mut writer = DecisionsWriter::begin(&mut out, batch.batch_id);
            let count = match answer {
                Answer::ShortCount => batch.len() - 1,
                Answer::Honest | Answer::Overbid => batch.len(),
            };
            for request in batch.requests().take(count) {
                let first = request.unwrap().candidates.next().unwrap();
                let extra = u64::from(answer == Answer::Overbid);
                writer.push(Decision::Bid {
                    campaign: first.campaign,
                    price: Cpm::<Usd>::from_micros(first.max_bid.micros() + extra),
                });
            }
            writer.finish();
            input.drain(..consumed);
        }
        if socket.write_all(&out).is_err() {
            return;
        }
    }
}

fn run_against(answer: Answer) -> Report {
    let fake = FakePacer::start(answer);
    let report = run_load(&Config {
        connections: 2,
        duration_s: Some(0.5),
        ..pacer_config(fake.addr, 0.0)
    })
    .unwrap();
    drop(fake);
    report
}

#[test]
fn validation_passes_honest_answers_and_catches_wrong_ones() {
    let honest = run_against(Answer::Honest);
    assert_eq!(honest.errors, 0, "{}", honest.table());
    assert!(honest.requests > 10, "{}", honest.table());
    assert_eq!(honest.outcome(Outcome::Bid), honest.keys);

    let overbid = run_against(Answer::Overbid);
    assert!(overbid.requests > 10, "{}", overbid.table());
    assert_eq!(overbid.outcome(Outcome::WrongDecision), overbid.keys);
    assert_eq!(overbid.outcome(Outcome::Bid), 0);
    assert_eq!(overbid.errors, overbid.keys);

    let short = run_against(Answer::ShortCount);
    assert!(short.requests > 10, "{}", short.table());
    assert_eq!(short.outcome(Outcome::WrongBatch), short.requests);
    assert_eq!(short.outcome(Outcome::Bid), 0);
}
