//! Hot-path cost of recording: per-thread counters and histograms against a shared
//! `AtomicU64::fetch_add`, alone and with two threads hammering at once.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use tern_metrics::{Counter, CounterFamily, Histogram};

static REQUESTS: Counter = Counter::new("bench_requests_total", "bench counter");
static COMMANDS: CounterFamily = CounterFamily::new(
    "bench_commands_total",
    "bench family",
    "cmd",
    &["get", "set"],
);
static LATENCY: Histogram = Histogram::new("bench_latency_ns", "bench histogram");
static SHARED: AtomicU64 = AtomicU64::new(0);

/// Runs `op` `iters` times on each of `threads` threads started together; returns the wall
/// time of the slowest, so the result is time per op per thread under contention.
fn on_threads(threads: usize, iters: u64, op: fn(u64)) -> Duration {
    let start = Barrier::new(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    start.wait();
                    let began = Instant::now();
                    for i in 0..iters {
                        op(black_box(i));
                    }
                    began.elapsed()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .max()
            .unwrap()
    })
}

fn record(c: &mut Criterion) {
    let mut group = c.benchmark_group("record");
    // The floor for any per-thread scheme: a plain thread-local integer.
    thread_local! { static PLAIN: std::cell::Cell<u64> = const { std::cell::Cell::new(0) }; }
    group.bench_function("thread_local_cell_add_baseline", |b| {
        b.iter(|| PLAIN.with(|c| c.set(black_box(c.get()) + 1)))
    });
    group.bench_function("counter_incr", |b| b.iter(|| REQUESTS.incr()));
    group.bench_function("counter_family_incr", |b| {
        b.iter(|| COMMANDS.incr(black_box(1)))
    });
    group.bench_function("histogram_record", |b| {
        let mut v = 0u64;
        b.iter(|| {
            v = (v + 7919) % 1_000_000;
            LATENCY.record(black_box(v));
        })
    });
    // What a per-thread `hdrhistogram` behind an uncontended lock would cost instead.
    let locked = parking_lot::Mutex::new(tern_metrics::HistogramConfig::LATENCY_NS.new_histogram());
    group.bench_function("locked_hdrhistogram_record_baseline", |b| {
        let mut v = 0u64;
        b.iter(|| {
            v = (v + 7919) % 1_000_000;
            locked.lock().saturating_record(black_box(v));
        })
    });
    group.bench_function("shared_atomic_fetch_add_1_thread", |b| {
        b.iter(|| SHARED.fetch_add(1, Ordering::Relaxed))
    });
    group.bench_function("shared_atomic_fetch_add_2_threads", |b| {
        b.iter_custom(|iters| {
            on_threads(2, iters, |_| {
                SHARED.fetch_add(1, Ordering::Relaxed);
            })
        })
    });
    group.bench_function("counter_incr_2_threads", |b| {
        b.iter_custom(|iters| on_threads(2, iters, |_| REQUESTS.incr()))
    });
    group.bench_function("histogram_record_2_threads", |b| {
        b.iter_custom(|iters| on_threads(2, iters, |i| LATENCY.record(i % 1_000_000)))
    });
    group.finish();
}

fn snapshot(c: &mut Criterion) {
    // A scrape with the metrics above recorded on a few threads, rendered as Prometheus text.
    on_threads(4, 1000, |i| {
        REQUESTS.incr();
        LATENCY.record(i);
    });
    c.bench_function("snapshot_to_prometheus", |b| {
        b.iter(|| tern_metrics::snapshot().to_prometheus(false).len())
    });
}

criterion_group!(benches, record, snapshot);
criterion_main!(benches);
