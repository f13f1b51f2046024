//! The pacer service on the tern runtime, over real TCP sockets on 127.0.0.1.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use common::{bids_frame, candidates, connect, notice, request};
use tern_pacer::ads::Ads;
use tern_pacer::coordinator::CoordinatorConfig;
use tern_pacer::money::{Cpm, Micros, Usd};
use tern_pacer::proto::{
    encode_notices, CampaignId, Decision, Device, Notice, NoticeKind, NoticeStatus, Reply,
    RequestHeader, Status,
};
use tern_pacer::service::{PacerConfig, PacerService};
use tern_pacer::snapshot::{Campaign, Flight, Snapshot, Targeting};
use tern_pacer::strategy::Strategy;
use tern_runtime::{RunningServer, RuntimeConfig, Server};

const CAMPAIGN: CampaignId = CampaignId(5);

fn snapshot(version: u64, budget_units: u64) -> Snapshot<Usd> {
    Snapshot::new(
        version,
        [Campaign {
            id: CAMPAIGN,
            budget: Micros::from_units(budget_units),
            flight: Flight {
                start_ms: 0,
                end_ms: u64::MAX,
            },
            max_cpm: Cpm::from_units(1_000),
            targeting: Targeting::default(),
            strategy: Strategy::HardCap,
            ads: Ads::default(),
        }],
    )
}

/// The pacer service on the runtime, shut down and joined on drop.
struct Node {
    server: Option<RunningServer>,
    service: Arc<PacerService<Usd>>,
}

impl Node {
    fn connect(&self) -> TcpStream {
        connect(self.server.as_ref().unwrap().local_addr().unwrap())
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            server.shutdown();
            server.join();
        }
    }
}

/// A server with `loops` loops that sync on every frame, with slices of `slice_ppm` of the budget.
fn start(loops: usize, budget_units: u64, slice_ppm: u64) -> Node {
    start_with(loops, budget_units, slice_ppm, |_| {})
}

fn start_with(
    loops: usize,
    budget_units: u64,
    slice_ppm: u64,
    tweak: impl FnOnce(&mut RuntimeConfig),
) -> Node {
    let mut cfg = RuntimeConfig {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        io_threads: loops,
        ..RuntimeConfig::default()
    };
    tweak(&mut cfg);
    let config = PacerConfig {
        sync_interval_ms: 0,
        coordinator: CoordinatorConfig {
            slice_ppm,
            ..CoordinatorConfig::default()
        },
        ..PacerConfig::default()
    };
    let server = Server::new(cfg, PacerService::new(config, snapshot(1, budget_units)));
    let service = Arc::clone(server.service());
    Node {
        server: Some(server.start().expect("server starts")),
        service,
    }
}

fn read_reply(s: &mut TcpStream) -> Reply<Usd> {
    common::read_reply(s).expect("a reply")
}

/// One BIDS frame of `ids`, each for CAMPAIGN at 1,000 USD CPM (1 USD per impression), over a 1 USD floor.
fn bids(batch_id: u64, ids: &[u64]) -> Vec<u8> {
    let requests: Vec<_> = ids
        .iter()
        .map(|&auction_id| {
            let header = RequestHeader {
                floor: Cpm::from_units(1),
                ..request(auction_id, b"NL", Device::Desktop)
            };
            (header, candidates(CAMPAIGN.0, 1_000_000_000))
        })
        .collect();
    bids_frame(batch_id, &requests)
}

/// The DECISIONS reply to batch `batch_id`.
fn decisions(s: &mut TcpStream, batch_id: u64) -> Vec<Decision<Usd>> {
    match read_reply(s) {
        Reply::Decisions {
            batch_id: answered,
            decisions,
        } => {
            assert_eq!(answered, batch_id);
            decisions
        }
        other => panic!("not decisions: {other:?}"),
    }
}

/// Sends `bids(batch_id, ids)` and reads the decisions.
fn decide(s: &mut TcpStream, batch_id: u64, ids: &[u64]) -> Vec<Decision<Usd>> {
    s.write_all(&bids(batch_id, ids)).unwrap();
    decisions(s, batch_id)
}

fn billing(auction_id: u64, cpm_units: u64) -> Notice<Usd> {
    notice(
        NoticeKind::Billing,
        auction_id,
        CAMPAIGN.0,
        cpm_units * 1_000_000,
    )
}

/// Sends one NOTICES frame and reads the acknowledgements.
fn acks(s: &mut TcpStream, notices: &[Notice<Usd>]) -> Vec<NoticeStatus> {
    let mut frame = Vec::new();
    encode_notices(&mut frame, notices);
    s.write_all(&frame).unwrap();
    match read_reply(s) {
        Reply::Acks(acks) => acks,
        other => panic!("not acks: {other:?}"),
    }
}

const BID: Decision<Usd> = Decision::Bid {
    campaign: CAMPAIGN,
    price: Cpm::from_units(1_000),
};
const EXHAUSTED: Decision<Usd> = Decision::NoBid(Status::BudgetExhausted);

#[test]
fn batches_are_decided_and_budget_holds_over_tcp() {
    let node = start(1, 3, 1_000_000);
    let mut s = node.connect();
    // Five bids of 1 USD against a 3 USD budget, split over two pipelined frames.
    let mut frames = bids(1, &[1, 2, 3]);
    frames.extend(bids(2, &[4, 5]));
    s.write_all(&frames).unwrap();
    assert_eq!(decisions(&mut s, 1), [BID; 3]);
    assert_eq!(decisions(&mut s, 2), [EXHAUSTED; 2]);
    // Billing one at 400 CPM frees 0.6 USD: still not enough for another 1 USD bid; billing a second one
    // too frees 1.2 in all, and one more bid fits.
    assert_eq!(
        acks(&mut s, &[billing(1, 400), billing(1, 400), billing(2, 400)]),
        [
            NoticeStatus::Applied,
            NoticeStatus::Duplicate,
            NoticeStatus::Applied
        ]
    );
    assert_eq!(decide(&mut s, 3, &[6, 7]), [BID, EXHAUSTED]);
    let coordinator = node.service.state().coordinator();
    assert!(coordinator.spent(CAMPAIGN) <= Micros::from_units(3));
    assert_eq!(coordinator.granted(CAMPAIGN), Micros::from_units(3));
}

#[test]
fn a_malformed_frame_closes_only_its_connection() {
    let node = start(2, 100, 100_000);
    let mut good = node.connect();
    let mut bad = node.connect();
    bad.write_all(b"TP\x01\x09\0\0\0\0").unwrap();
    match read_reply(&mut bad) {
        Reply::Error { message, .. } => assert_eq!(message, "unexpected frame kind"),
        other => panic!("{other:?}"),
    }
    let mut rest = Vec::new();
    assert_eq!(
        bad.read_to_end(&mut rest).unwrap(),
        0,
        "closed after the error frame"
    );
    decide(&mut good, 9, &[1]);
}

#[test]
fn notices_on_any_connection_reach_the_reservation() {
    let node = start(2, 100, 100_000);
    // Several connections, so that some land on the other loop.
    let mut conns: Vec<TcpStream> = (0..6).map(|_| node.connect()).collect();
    for (i, c) in conns.iter_mut().enumerate() {
        let i = i as u64;
        assert!(matches!(decide(c, i, &[100 + i])[0], Decision::Bid { .. }));
    }
    // Every bill goes through connection 0.
    let bills: Vec<_> = (0..6).map(|i| billing(100 + i, 500)).collect();
    let acks = acks(&mut conns[0], &bills);
    assert!(
        acks.iter()
            .all(|a| matches!(a, NoticeStatus::Applied | NoticeStatus::Forwarded)),
        "{acks:?}"
    );
    // Any traffic on each connection makes its loop sync, which applies what was forwarded to it.
    for (i, c) in conns.iter_mut().enumerate() {
        decide(c, 50 + i as u64, &[]);
    }
    let coordinator = node.service.state().coordinator();
    assert_eq!(
        coordinator.spent(CAMPAIGN),
        Micros::from_micros(6 * 500_000)
    );
    let stats = coordinator.forward_stats();
    assert_eq!(stats.resolved, stats.forwarded);
}

#[test]
fn a_new_snapshot_applies_to_the_next_batch() {
    let node = start(1, 100, 100_000);
    let mut s = node.connect();
    assert_eq!(decide(&mut s, 1, &[1]), [BID]);
    // The campaign leaves the configuration: the next batch does not know it.
    node.service.state().install(Snapshot::new(2, []));
    assert_eq!(
        decide(&mut s, 2, &[2]),
        [Decision::NoBid(Status::UnknownCampaign)]
    );
    node.service.state().install(snapshot(3, 100));
    assert_eq!(decide(&mut s, 3, &[3]), [BID]);
}

#[test]
fn a_slice_below_one_bid_is_topped_up_at_the_next_sync() {
    // Slices of 0.1% of 3 USD are far below a 1 USD bid: the refusal is remembered and the next sync grants
    // at least one bid's worth.
    let node = start(1, 3, 1_000);
    let mut s = node.connect();
    assert_eq!(decide(&mut s, 1, &[1]), [EXHAUSTED]);
    assert_eq!(decide(&mut s, 2, &[2]), [BID]);
}

/// Held by the tests that refuse work, so that one's count of `Overloaded` decisions (metrics are per
/// process) is not moved by the other's.
static REFUSING: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn refused_work_is_answered_in_the_protocol() {
    let _alone = REFUSING.lock().unwrap_or_else(|e| e.into_inner());
    // One frame per second: of three pipelined frames, the last two are refused by the runtime.
    let node = start_with(1, 100, 100_000, |c| c.rate_limit = 1);
    let mut s = node.connect();
    let mut frames = bids(1, &[1]);
    frames.extend(bids(2, &[2, 3]));
    encode_notices(&mut frames, &[billing(1, 500), billing(2, 500)]);
    s.write_all(&frames).unwrap();
    assert_eq!(decisions(&mut s, 1), [BID]);
    let overloaded = Decision::NoBid(Status::Overloaded);
    assert_eq!(decisions(&mut s, 2), [overloaded; 2]);
    assert_eq!(
        read_reply(&mut s),
        Reply::Acks(vec![NoticeStatus::Refused; 2])
    );
    // Nothing was reserved for the refused requests, nor billed by the refused notices.
    assert_eq!(
        node.service.state().coordinator().spent(CAMPAIGN),
        Micros::ZERO
    );
}

/// Reads one HTTP/1.1 response (headers and a `Content-Length` body) from `s`: its head and body.
fn http_response(s: &mut TcpStream) -> (String, Vec<u8>) {
    let mut bytes = Vec::new();
    let mut byte = [0u8; 1];
    while !bytes.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).unwrap();
        bytes.push(byte[0]);
    }
    let head = String::from_utf8(bytes).unwrap();
    let length = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse::<usize>().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    s.read_exact(&mut body).unwrap();
    (head, body)
}

#[test]
fn refused_http_work_is_a_no_bid_that_says_overloaded_and_a_notice_to_retry() {
    let _alone = REFUSING.lock().unwrap_or_else(|e| e.into_inner());
    // One request per second: of three pipelined HTTP requests, the last two are refused by the runtime.
    let node = start_with(1, 100, 100_000, |c| c.rate_limit = 1);
    let mut s = node.connect();
    let body = r#"{"id":"a1","imp":[{"id":"1","banner":{"w":300,"h":250}}]}"#;
    let auction = format!(
        "POST /openrtb2/auction HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let notice =
        "GET /billing?auction=a1&imp=1&campaign=1&chk=0&price=1 HTTP/1.1\r\nHost: x\r\n\r\n";
    let before = tern_metrics::snapshot()
        .counter_with("tern_pacer_decisions_total", Some("Overloaded"))
        .unwrap_or(0);
    s.write_all(format!("{auction}{auction}{notice}").as_bytes())
        .unwrap();
    let (first, _) = http_response(&mut s);
    assert!(!first.contains("Overloaded"), "{first}");
    let (second, body) = http_response(&mut s);
    assert!(second.starts_with("HTTP/1.1 204"), "{second}");
    assert!(second.contains("X-Tern-No-Bid: Overloaded"), "{second}");
    assert!(body.is_empty());
    let (third, body) = http_response(&mut s);
    assert!(third.starts_with("HTTP/1.1 503"), "{third}");
    assert_eq!(body, b"overloaded\n");
    assert_eq!(
        tern_metrics::snapshot()
            .counter_with("tern_pacer_decisions_total", Some("Overloaded"))
            .unwrap_or(0),
        before + 1
    );
}
