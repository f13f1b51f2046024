//! What the crash journal costs the hot path: the same decisions with and without it, as decisions per
//! CPU-second of the deciding thread and of the whole process (which adds the journal's thread: msync,
//! spare segments, compaction). Each batch is a BIDS frame of 10 requests with 3 candidates, decoded,
//! decided and answered, then a NOTICES frame billing each bid: two journal records per decision.
//!
//! `cargo bench -p tern-pacer --bench journal` (options: `--batches N`, default 200000; `--rounds N`,
//! default 3, the median is reported).

use std::time::Duration;

use tern_pacer::coordinator::{Coordinator, CoordinatorConfig};
use tern_pacer::journal::{Durable, JournalConfig};
use tern_pacer::ledger::LedgerConfig;
use tern_pacer::money::{Cpm, Micros, Usd};
use tern_pacer::pacer::LoopPacer;
use tern_pacer::proto::{
    decode_frame, encode_bids, encode_notices, CampaignId, Candidate, Device, Frame, Geo, ImpKey,
    Limits, Notice, NoticeKind, NoticeStatus, RequestHeader,
};
use tern_pacer::snapshot::{Campaign, Flight, Snapshot, Targeting};
use tern_pacer::strategy::Strategy;
use tern_runtime::Decode;

const BATCH: usize = 10;
/// Frames are built before the clock starts, in chunks of this many batches.
const CHUNK: usize = 10_000;

fn cpu_seconds(clock: libc::clockid_t) -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a pointer to a timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn snapshot() -> Snapshot<Usd> {
    Snapshot::new(
        1,
        (0..100u32).map(|id| Campaign::<Usd> {
            id: CampaignId(id),
            budget: Micros::from_units(1_000_000_000),
            flight: Flight {
                start_ms: 0,
                end_ms: u64::MAX / 2,
            },
            max_cpm: Cpm::from_units(3),
            targeting: Targeting::default(),
            strategy: Strategy::HardCap,
        }),
    )
}

/// A chunk of (BIDS, NOTICES) frame pairs for auctions after `*auction_id`.
fn frames(auction_id: &mut u64) -> Vec<(Vec<u8>, Vec<u8>)> {
    (0..CHUNK)
        .map(|_| {
            let requests: Vec<_> = (0..BATCH)
                .map(|i| {
                    *auction_id += 1;
                    let header = RequestHeader::<Usd> {
                        key: ImpKey {
                            auction_id: *auction_id,
                            imp_id: 0,
                        },
                        floor: Cpm::from_micros(500_000),
                        deadline_ms: u64::MAX,
                        hour: 12,
                        device: Device::Phone,
                        geo: Geo(*b"US"),
                        site_id: 9,
                    };
                    let first = (*auction_id % 98) as u32;
                    let candidates: Vec<_> = (first..first + 3)
                        .map(|id| Candidate {
                            campaign: CampaignId(id),
                            max_bid: Cpm::from_units(2 + i as u64 % 2),
                        })
                        .collect();
                    (header, candidates)
                })
                .collect();
            let mut bids = Vec::new();
            encode_bids(
                &mut bids,
                *auction_id,
                requests.iter().map(|(h, c)| (h, c.as_slice())),
            );
            let notices: Vec<Notice<Usd>> = requests
                .iter()
                .map(|(h, c)| Notice {
                    kind: NoticeKind::Billing,
                    key: h.key,
                    campaign: c[0].campaign,
                    price: Cpm::from_units(1),
                })
                .collect();
            let mut notice_frame = Vec::new();
            encode_notices(&mut notice_frame, &notices);
            (bids, notice_frame)
        })
        .collect()
}

/// Decisions per CPU-second of this thread and of the process.
fn run(batches: usize, journal: Option<&Durable>) -> (f64, f64) {
    let snapshot = snapshot();
    let mut coordinator = Coordinator::new(CoordinatorConfig::default());
    for campaign in snapshot.campaigns() {
        coordinator.set_base_budget(campaign.id, campaign.budget);
    }
    let mut pacer = LoopPacer::new(LedgerConfig::default());
    if let Some(journal) = journal {
        journal.attach(&mut pacer.ledger, 0, 1, 1_000_000);
    }
    coordinator.sync(0, &mut pacer.ledger);
    let limits = Limits::default();
    let mut out = Vec::with_capacity(4096);
    let mut auction_id = 0;
    let (mut thread_cpu, mut process_cpu) = (0.0, 0.0);
    for _ in 0..batches.div_ceil(CHUNK) {
        let chunk = frames(&mut auction_id);
        let (t0, p0) = (
            cpu_seconds(libc::CLOCK_THREAD_CPUTIME_ID),
            cpu_seconds(libc::CLOCK_PROCESS_CPUTIME_ID),
        );
        for (i, (bids, notices)) in chunk.iter().enumerate() {
            let now_ms = 1_000_000 + i as u64 / 100;
            out.clear();
            let Decode::Frame {
                request: Frame::Bids(batch),
                ..
            } = decode_frame::<Usd>(bids, &limits)
            else {
                panic!("frame");
            };
            pacer.decide_batch(&snapshot, &batch, now_ms, &mut out);
            let Decode::Frame {
                request: Frame::Notices(batch),
                ..
            } = decode_frame::<Usd>(notices, &limits)
            else {
                panic!("frame");
            };
            out.clear();
            pacer.apply_notices(&batch, now_ms, &mut out, |_| NoticeStatus::Unknown);
            if i % 100 == 0 {
                pacer.tick(&snapshot, now_ms);
                coordinator.sync(0, &mut pacer.ledger);
            }
        }
        thread_cpu += cpu_seconds(libc::CLOCK_THREAD_CPUTIME_ID) - t0;
        process_cpu += cpu_seconds(libc::CLOCK_PROCESS_CPUTIME_ID) - p0;
    }
    let decisions = (batches.div_ceil(CHUNK) * CHUNK * BATCH) as f64;
    (decisions / thread_cpu, decisions / process_cpu)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut batches = 200_000;
    let mut rounds = 3;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().and_then(|v| v.parse().ok());
        match arg.as_str() {
            "--batches" => batches = value().expect("--batches N"),
            "--rounds" => rounds = value().expect("--rounds N"),
            // Flags cargo passes to every bench (`--bench`, filters) are not ours.
            _ => {}
        }
    }
    let dir = std::env::temp_dir().join(format!("tern-pacer-journal-bench-{}", std::process::id()));
    let mut without = (Vec::new(), Vec::new());
    let mut with = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let (t, p) = run(batches, None);
        without.0.push(t);
        without.1.push(p);
        let _ = std::fs::remove_dir_all(&dir);
        let journal = Durable::open(
            JournalConfig {
                sync_interval: Duration::from_millis(100),
                ..JournalConfig::new(dir.clone())
            },
            1_000_000,
        )
        .expect("journal");
        let (t, p) = run(batches, Some(&journal));
        with.0.push(t);
        with.1.push(p);
        let stats = journal.journal().stats();
        eprintln!("journal: {stats:?}");
        drop(journal);
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "decisions per CPU-second, {} batches of {BATCH} x 3 candidates + billing, median of {rounds}:",
        batches.div_ceil(CHUNK) * CHUNK
    );
    let row = |name: &str, (t, p): (Vec<f64>, Vec<f64>)| {
        println!(
            "  {name:<16} deciding thread {:>10.0}   whole process {:>10.0}",
            median(t),
            median(p)
        );
    };
    row("without journal", without);
    row("with journal", with);
}
