//! The pacer service on the tern runtime, over real TCP sockets on 127.0.0.1.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tern_pacer::coordinator::CoordinatorConfig;
use tern_pacer::money::{Cpm, Micros, Usd};
use tern_pacer::proto::{
    decode_reply, encode_bids, encode_notices, CampaignId, Candidate, Decision, Device, Geo,
    ImpKey, Limits, Notice, NoticeKind, NoticeStatus, Reply, RequestHeader, Status, HEADER_LEN,
};
use tern_pacer::service::{PacerConfig, PacerService};
use tern_pacer::snapshot::{Campaign, Flight, Snapshot, Targeting};
use tern_pacer::strategy::Strategy;
use tern_runtime::{Decode, RunningServer, RuntimeConfig, Server};

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
        }],
    )
}

/// A server with `loops` loops that sync on every frame, with slices of `slice_ppm` of the budget.
fn start(
    loops: usize,
    budget_units: u64,
    slice_ppm: u64,
) -> (RunningServer, Arc<PacerService<Usd>>) {
    start_with(loops, budget_units, slice_ppm, |_| {})
}

fn start_with(
    loops: usize,
    budget_units: u64,
    slice_ppm: u64,
    tweak: impl FnOnce(&mut RuntimeConfig),
) -> (RunningServer, Arc<PacerService<Usd>>) {
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
    let service = PacerService::new(config, snapshot(1, budget_units));
    let server = Server::new(cfg, service);
    let service = Arc::clone(server.service());
    (server.start().expect("server starts"), service)
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

fn read_reply(s: &mut TcpStream) -> Reply<Usd> {
    let mut header = [0u8; HEADER_LEN];
    s.read_exact(&mut header).expect("reply header");
    let body_len = u32::from_le_bytes(header[4..8].try_into().unwrap()) as usize;
    let mut frame = header.to_vec();
    frame.resize(HEADER_LEN + body_len, 0);
    s.read_exact(&mut frame[HEADER_LEN..]).expect("reply body");
    match decode_reply::<Usd>(&frame, &Limits::default()) {
        Decode::Frame { request, .. } => request,
        other => panic!("bad reply: {other:?}"),
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// One BIDS frame of `ids`, each for CAMPAIGN at 1,000 USD CPM (1 USD per impression).
fn bids(batch_id: u64, ids: &[u64]) -> Vec<u8> {
    let requests: Vec<_> = ids
        .iter()
        .map(|&auction_id| {
            (
                RequestHeader::<Usd> {
                    key: ImpKey {
                        auction_id,
                        imp_id: 0,
                    },
                    floor: Cpm::from_units(1),
                    deadline_ms: now_ms() + 10_000,
                    hour: 12,
                    device: Device::Desktop,
                    geo: Geo(*b"NL"),
                    site_id: 1,
                },
                vec![Candidate {
                    campaign: CAMPAIGN,
                    max_bid: Cpm::from_units(1_000),
                }],
            )
        })
        .collect();
    let mut frame = Vec::new();
    encode_bids(
        &mut frame,
        batch_id,
        requests.iter().map(|(h, c)| (h, c.as_slice())),
    );
    frame
}

fn billing(auction_id: u64, cpm_units: u64) -> Notice<Usd> {
    Notice {
        kind: NoticeKind::Billing,
        key: ImpKey {
            auction_id,
            imp_id: 0,
        },
        campaign: CAMPAIGN,
        price: Cpm::from_units(cpm_units),
    }
}

#[test]
fn batches_are_decided_and_budget_holds_over_tcp() {
    let (server, service) = start(1, 3, 1_000_000);
    let mut s = connect(server.local_addr().unwrap());
    // Five bids of 1 USD against a 3 USD budget, split over two pipelined frames.
    let exhausted = Decision::NoBid(Status::BudgetExhausted);
    let mut frames = bids(1, &[1, 2, 3]);
    frames.extend(bids(2, &[4, 5]));
    s.write_all(&frames).unwrap();
    let bid = Decision::Bid {
        campaign: CAMPAIGN,
        price: Cpm::from_units(1_000),
    };
    assert_eq!(
        read_reply(&mut s),
        Reply::Decisions {
            batch_id: 1,
            decisions: vec![bid; 3]
        }
    );
    assert_eq!(
        read_reply(&mut s),
        Reply::Decisions {
            batch_id: 2,
            decisions: vec![exhausted; 2]
        }
    );
    // Billing one at 400 CPM frees 0.6 USD: still not enough for another 1 USD bid; billing a second one
    // too frees 1.2 in all, and one more bid fits.
    let mut notices = Vec::new();
    encode_notices(
        &mut notices,
        &[billing(1, 400), billing(1, 400), billing(2, 400)],
    );
    s.write_all(&notices).unwrap();
    assert_eq!(
        read_reply(&mut s),
        Reply::Acks(vec![
            NoticeStatus::Applied,
            NoticeStatus::Duplicate,
            NoticeStatus::Applied
        ])
    );
    s.write_all(&bids(3, &[6, 7])).unwrap();
    assert_eq!(
        read_reply(&mut s),
        Reply::Decisions {
            batch_id: 3,
            decisions: vec![bid, exhausted]
        }
    );
    let coordinator = service.coordinator();
    assert!(coordinator.spent(CAMPAIGN) <= Micros::from_units(3));
    assert_eq!(coordinator.granted(CAMPAIGN), Micros::from_units(3));
    drop(coordinator);
    server.shutdown();
    server.join();
}

#[test]
fn a_malformed_frame_closes_only_its_connection() {
    let (server, _service) = start(2, 100, 100_000);
    let addr = server.local_addr().unwrap();
    let mut good = connect(addr);
    let mut bad = connect(addr);
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
    good.write_all(&bids(9, &[1])).unwrap();
    assert!(matches!(
        read_reply(&mut good),
        Reply::Decisions { batch_id: 9, .. }
    ));
    server.shutdown();
    server.join();
}

#[test]
fn notices_on_any_connection_reach_the_reservation() {
    let (server, service) = start(2, 100, 100_000);
    let addr = server.local_addr().unwrap();
    // Several connections, so that some land on the other loop.
    let mut conns: Vec<TcpStream> = (0..6).map(|_| connect(addr)).collect();
    for (i, c) in conns.iter_mut().enumerate() {
        c.write_all(&bids(i as u64, &[100 + i as u64])).unwrap();
        assert!(
            matches!(read_reply(c), Reply::Decisions { decisions, .. } if matches!(decisions[0], Decision::Bid { .. }))
        );
    }
    // Every bill goes through connection 0.
    let mut notices = Vec::new();
    encode_notices(
        &mut notices,
        &(0..6).map(|i| billing(100 + i, 500)).collect::<Vec<_>>(),
    );
    conns[0].write_all(&notices).unwrap();
    let Reply::Acks(acks) = read_reply(&mut conns[0]) else {
        panic!("acks")
    };
    assert!(
        acks.iter()
            .all(|a| matches!(a, NoticeStatus::Applied | NoticeStatus::Forwarded)),
        "{acks:?}"
    );
    // Any traffic on each connection makes its loop sync, which applies what was forwarded to it.
    for (i, c) in conns.iter_mut().enumerate() {
        c.write_all(&bids(50 + i as u64, &[])).unwrap();
        read_reply(c);
    }
    let coordinator = service.coordinator();
    assert_eq!(
        coordinator.spent(CAMPAIGN),
        Micros::from_micros(6 * 500_000)
    );
    let stats = coordinator.forward_stats();
    assert_eq!(stats.resolved, stats.forwarded);
    drop(coordinator);
    server.shutdown();
    server.join();
}

#[test]
fn a_new_snapshot_applies_to_the_next_batch() {
    let (server, service) = start(1, 100, 100_000);
    let mut s = connect(server.local_addr().unwrap());
    s.write_all(&bids(1, &[1])).unwrap();
    assert!(
        matches!(read_reply(&mut s), Reply::Decisions { decisions, .. } if matches!(decisions[0], Decision::Bid { .. }))
    );
    // The campaign leaves the configuration: the next batch does not know it.
    service.install(Snapshot::new(2, []));
    s.write_all(&bids(2, &[2])).unwrap();
    assert_eq!(
        read_reply(&mut s),
        Reply::Decisions {
            batch_id: 2,
            decisions: vec![Decision::NoBid(Status::UnknownCampaign)]
        }
    );
    service.install(snapshot(3, 100));
    s.write_all(&bids(3, &[3])).unwrap();
    assert!(
        matches!(read_reply(&mut s), Reply::Decisions { decisions, .. } if matches!(decisions[0], Decision::Bid { .. }))
    );
    server.shutdown();
    server.join();
}

#[test]
fn a_slice_below_one_bid_is_topped_up_at_the_next_sync() {
    // Slices of 0.1% of 3 USD are far below a 1 USD bid: the refusal is remembered and the next sync grants
    // at least one bid's worth.
    let (server, _service) = start(1, 3, 1_000);
    let mut s = connect(server.local_addr().unwrap());
    s.write_all(&bids(1, &[1])).unwrap();
    assert_eq!(
        read_reply(&mut s),
        Reply::Decisions {
            batch_id: 1,
            decisions: vec![Decision::NoBid(Status::BudgetExhausted)]
        }
    );
    s.write_all(&bids(2, &[2])).unwrap();
    let bid = Decision::Bid {
        campaign: CAMPAIGN,
        price: Cpm::from_units(1_000),
    };
    assert_eq!(
        read_reply(&mut s),
        Reply::Decisions {
            batch_id: 2,
            decisions: vec![bid]
        }
    );
    server.shutdown();
    server.join();
}

#[test]
fn refused_work_is_answered_in_the_protocol() {
    // One frame per second: of three pipelined frames, the last two are refused by the runtime.
    let (server, service) = start_with(1, 100, 100_000, |c| c.rate_limit = 1);
    let mut s = connect(server.local_addr().unwrap());
    let mut frames = bids(1, &[1]);
    frames.extend(bids(2, &[2, 3]));
    encode_notices(&mut frames, &[billing(1, 500), billing(2, 500)]);
    s.write_all(&frames).unwrap();
    assert!(
        matches!(read_reply(&mut s), Reply::Decisions { batch_id: 1, decisions } if matches!(decisions[0], Decision::Bid { .. }))
    );
    let overloaded = Decision::NoBid(Status::Overloaded);
    assert_eq!(
        read_reply(&mut s),
        Reply::Decisions {
            batch_id: 2,
            decisions: vec![overloaded; 2]
        }
    );
    assert_eq!(
        read_reply(&mut s),
        Reply::Acks(vec![NoticeStatus::Refused; 2])
    );
    // Nothing was reserved for the refused requests, nor billed by the refused notices.
    assert_eq!(service.coordinator().spent(CAMPAIGN), Micros::ZERO);
    server.shutdown();
    server.join();
}
