//! Golden replays: each strategy decides the same scripted day of requests through the real decision code
//! (snapshot, loop pacer, ledger, coordinator), and its hour-by-hour bids, spend and control rate must match
//! the recorded file in `tests/golden/`. A change in a strategy's behaviour shows up here as a diff; when the
//! change is intended, re-record with `TERN_PACER_BLESS=1 cargo test -p tern-pacer --test golden`.

use std::fmt::Write;

use tern_pacer::ads::Ads;
use tern_pacer::coordinator::{Coordinator, CoordinatorConfig};
use tern_pacer::ledger::LedgerConfig;
use tern_pacer::money::{Cpm, Micros, Usd};
use tern_pacer::pacer::LoopPacer;
use tern_pacer::proto::{
    decode_frame, encode_bids, CampaignId, Candidate, Decision, Device, Frame, Geo, ImpKey, Limits,
    Notice, NoticeKind, RequestHeader,
};
use tern_pacer::snapshot::{Campaign, Flight, Snapshot, Targeting};
use tern_pacer::strategy::{Even, Pi, Shaped, Strategy, Throttle};
use tern_runtime::Decode;

const HOUR_MS: u64 = 3_600_000;
const DAY_START_MS: u64 = 1_700_006_400_000; // A UTC midnight.
const CAMPAIGN: CampaignId = CampaignId(1);

/// Replays one day: a request every 20 s (more at midday), each won and billed at once at 70% of the bid.
fn replay(strategy: Strategy) -> String {
    let campaign = Campaign::<Usd> {
        id: CAMPAIGN,
        budget: Micros::from_units(3),
        flight: Flight {
            start_ms: DAY_START_MS,
            end_ms: DAY_START_MS + 24 * HOUR_MS,
        },
        max_cpm: Cpm::from_units(2),
        targeting: Targeting::default(),
        strategy,
        ads: Ads::default(),
    };
    let snapshot = Snapshot::new(1, [campaign]);
    let mut coordinator = Coordinator::<Usd>::new(CoordinatorConfig::default());
    coordinator.set_base_budget(CAMPAIGN, Micros::from_units(3));
    let mut pacer = LoopPacer::new(LedgerConfig::default());
    let mut log = String::new();
    let (mut bids, mut last_tick) = (0u32, 0u64);
    let mut auction_id = 0u64;
    for hour in 0..24u64 {
        let per_hour = if (10..14).contains(&hour) { 360 } else { 180 };
        for i in 0..per_hour {
            let now = DAY_START_MS + hour * HOUR_MS + i * HOUR_MS / per_hour;
            if now >= last_tick + 60_000 {
                pacer.tick(&snapshot, now);
                coordinator.sync(0, &mut pacer.ledger);
                last_tick = now;
            }
            auction_id += 1;
            let header = RequestHeader::<Usd> {
                key: ImpKey {
                    auction_id,
                    imp_id: 1,
                },
                floor: Cpm::from_micros(100_000),
                deadline_ms: now + 100,
                hour: hour as u8,
                device: Device::Phone,
                geo: Geo(*b"DE"),
                site_id: 7,
            };
            let candidates = [Candidate {
                campaign: CAMPAIGN,
                max_bid: Cpm::from_units(2),
            }];
            let mut frame = Vec::new();
            encode_bids(
                &mut frame,
                auction_id,
                [(&header, &candidates[..])].into_iter(),
            );
            let Decode::Frame {
                request: Frame::Bids(batch),
                ..
            } = decode_frame::<Usd>(&frame, &Limits::default())
            else {
                panic!("frame does not decode");
            };
            let request = batch.requests().next().unwrap().unwrap();
            if let Decision::Bid { campaign, price } = pacer.decide(&snapshot, &request, now) {
                bids += 1;
                let clearing = Cpm::from_micros(price.micros() * 7 / 10);
                let billing = Notice {
                    kind: NoticeKind::Billing,
                    key: header.key,
                    campaign,
                    price: clearing,
                };
                pacer.notice(now, &billing);
            }
        }
        let slice = pacer.ledger.slice(CAMPAIGN).unwrap();
        writeln!(
            log,
            "hour {hour:2} bids {bids:4} spent {:>9} rate_ppm {}",
            slice.spent.micros(),
            pacer.control(CAMPAIGN).rate_ppm
        )
        .unwrap();
    }
    log
}

fn check(name: &str, strategy: Strategy) -> String {
    let got = replay(strategy);
    let path = format!("{}/tests/golden/{name}.txt", env!("CARGO_MANIFEST_DIR"));
    if std::env::var_os("TERN_PACER_BLESS").is_some() {
        std::fs::write(&path, &got).unwrap();
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e} (record with TERN_PACER_BLESS=1)"));
    assert_eq!(got, want, "{name} replay differs from {path}");
    got
}

fn final_spent(log: &str) -> u64 {
    let last = log.lines().last().unwrap();
    last.split_whitespace().nth(5).unwrap().parse().unwrap()
}

#[test]
fn hard_cap() {
    let log = check("hard_cap", Strategy::HardCap);
    // Spends as fast as allowed: the whole budget is gone by hour 10.
    assert_eq!(final_spent(&log), 3_000_000 / 1400 * 1400);
    assert!(log
        .lines()
        .nth(10)
        .is_some_and(|l| l.contains(&format!("spent {:>9}", 3_000_000 / 1400 * 1400))));
}

#[test]
fn even() {
    let log = check("even", Strategy::Even(Even::default()));
    assert!(final_spent(&log) >= 2_990_000);
}

#[test]
fn shaped() {
    let mut curve = [1; 24];
    curve[10..14].copy_from_slice(&[2; 4]);
    let log = check(
        "shaped",
        Strategy::Shaped(Shaped {
            curve,
            lookahead_ms: 60_000,
        }),
    );
    assert!(final_spent(&log) >= 2_990_000);
}

#[test]
fn throttle() {
    let log = check("throttle", Strategy::Throttle(Throttle::default()));
    assert!(final_spent(&log) >= 2_900_000);
}

#[test]
fn pi() {
    let log = check("pi", Strategy::Pi(Pi::default()));
    assert!(final_spent(&log) >= 2_900_000);
}
