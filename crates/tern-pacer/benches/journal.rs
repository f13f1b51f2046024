//! What the crash journal costs the hot path: the same decisions with and without it, as decisions per
//! CPU-second of the deciding thread and of the whole process (which adds the journal's thread: msync,
//! spare segments, compaction). Each batch is a BIDS frame of 10 requests with 3 candidates, decoded,
//! decided and answered, then a NOTICES frame billing each bid: two journal records per decision.
//!
//! `cargo bench -p tern-pacer --bench journal` (options: `--batches N`, default 200000; `--rounds N`,
//! default 3, the median is reported).

mod common;

use std::time::Duration;

use common::{batch_frames, decide_and_bill, hundred_campaigns, tick_and_sync, BATCH};
use tern_pacer::journal::{Durable, JournalConfig};
use tern_pacer::ledger::LedgerConfig;
use tern_pacer::pacer::LoopPacer;
use tern_pacer::strategy::Strategy;

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

/// Decisions per CPU-second of this thread and of the process.
fn run(batches: usize, journal: Option<&Durable>) -> (f64, f64) {
    let snapshot = hundred_campaigns(|_| Strategy::HardCap);
    let mut coordinator = tern_pacer::fixtures::coordinator(&snapshot);
    let mut pacer = LoopPacer::new(LedgerConfig::default());
    if let Some(journal) = journal {
        journal.attach(&mut pacer.ledger, 0, 1, 1_000_000);
    }
    coordinator.sync(0, &mut pacer.ledger);
    let mut out = Vec::with_capacity(4096);
    let mut auction_id = 0;
    let (mut thread_cpu, mut process_cpu) = (0.0, 0.0);
    for _ in 0..batches.div_ceil(CHUNK) {
        let chunk: Vec<_> = (0..CHUNK)
            .map(|_| batch_frames(&mut auction_id, u64::MAX))
            .collect();
        let (t0, p0) = (
            cpu_seconds(libc::CLOCK_THREAD_CPUTIME_ID),
            cpu_seconds(libc::CLOCK_PROCESS_CPUTIME_ID),
        );
        for (i, (bids, notices)) in chunk.iter().enumerate() {
            let now_ms = 1_000_000 + i as u64 / 100;
            decide_and_bill(&mut pacer, &snapshot, (bids, notices), now_ms, &mut out);
            if i % 100 == 0 {
                tick_and_sync(&mut pacer, &mut coordinator, &snapshot, now_ms);
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
