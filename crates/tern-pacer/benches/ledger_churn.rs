//! The ledger's worst case under steady churn: batches of reservations at a fixed rate, each impression
//! forgotten `forget_after_ms` later, so the ledger holds `rate x forget_after` impressions and replaces
//! them constantly. Prints the distribution of each batch's cost in thread CPU time (so the OS preempting
//! the bench does not count): the tail is where a map's all-at-once growth or rehash would show.
//!
//! `cargo bench -p tern-pacer --bench ledger_churn -- [per_ms] [forget_after_ms] [seconds]`
//! (defaults: 400 reservations per simulated ms, 1000 ms, 60 simulated seconds).

use hdrhistogram::Histogram;
use tern_pacer::coordinator::{Coordinator, CoordinatorConfig};
use tern_pacer::ledger::{Ledger, LedgerConfig};
use tern_pacer::money::{Cpm, Micros, Usd};
use tern_pacer::proto::{CampaignId, ImpKey};

const BATCH: u64 = 10;

fn thread_cpu_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec to write to; CLOCK_THREAD_CPUTIME_ID always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// The process's peak resident memory, in bytes.
fn max_rss_bytes() -> u64 {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    usage.ru_maxrss as u64 * 1024
}

fn main() {
    // `cargo bench` passes `--bench`; the numbers are the positional arguments.
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let per_ms = args.first().copied().unwrap_or(400);
    let forget_after_ms = args.get(1).copied().unwrap_or(1000);
    let seconds = args.get(2).copied().unwrap_or(60);

    let campaign = CampaignId(1);
    let mut coordinator = Coordinator::new(CoordinatorConfig::default());
    coordinator.set_base_budget(campaign, Micros::from_units(1_000_000_000_000));
    let mut ledger = Ledger::<Usd>::new(LedgerConfig {
        reservation_ttl_ms: forget_after_ms,
        forget_after_ms,
        max_tracked: usize::MAX,
    });
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3).expect("bounds");
    let mut auction_id = 0u64;
    let start_ms = 1_000_000;
    let mut refused = 0u64;
    for ms in 0..seconds * 1000 {
        let now_ms = start_ms + ms;
        coordinator.sync(0, &mut ledger);
        for _ in 0..per_ms.div_ceil(BATCH) {
            let started = thread_cpu_ns();
            for _ in 0..BATCH {
                auction_id += 1;
                let key = ImpKey {
                    auction_id: auction_id.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                    imp_id: 0,
                };
                refused += u64::from(
                    ledger
                        .reserve(now_ms, key, campaign, Cpm::from_micros(1000))
                        .is_err(),
                );
            }
            histogram
                .record((thread_cpu_ns() - started).max(1))
                .expect("in bounds");
        }
    }
    let us = |q: f64| histogram.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "ledger churn: {per_ms} reservations/ms, forget after {forget_after_ms} ms, {seconds} s, {} tracked at the end, {refused} refused",
        ledger.tracked()
    );
    println!(
        "per batch of {BATCH} (thread CPU): p50 {:.1} us, p99 {:.1} us, p99.9 {:.1} us, p99.99 {:.1} us, max {:.1} us; batches over 1 ms: {}",
        us(0.5),
        us(0.99),
        us(0.999),
        us(0.9999),
        histogram.max() as f64 / 1000.0,
        histogram.count_between(1_000_000, u64::MAX)
    );
    println!(
        "peak RSS {:.0} MiB: {:.0} bytes per tracked impression",
        max_rss_bytes() as f64 / (1 << 20) as f64,
        max_rss_bytes() as f64 / ledger.tracked().max(1) as f64
    );
}
