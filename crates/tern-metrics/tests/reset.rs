//! `reset()` zeroes counters and histograms process-wide, so it lives in its own test binary.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use tern_metrics::{reset, snapshot, Counter, Gauge, Histogram};

static REQUESTS: Counter = Counter::new("r_requests_total", "requests");
static CONNECTIONS: Gauge = Gauge::new("r_connections", "connections");
static LATENCY: Histogram = Histogram::new("r_latency_ns", "latency");

#[test]
fn reset_zeroes_counters_and_histograms_keeps_gauges_and_tolerates_writers() {
    // Exited thread, live thread and this thread all contribute before the reset.
    thread::spawn(|| {
        REQUESTS.add(100);
        LATENCY.record(5);
        CONNECTIONS.add(4);
    })
    .join()
    .unwrap();
    let parked = Arc::new(Barrier::new(2));
    let resume = Arc::new(Barrier::new(2));
    let live = {
        let (parked, resume) = (parked.clone(), resume.clone());
        thread::spawn(move || {
            REQUESTS.add(50);
            LATENCY.record(7);
            parked.wait();
            resume.wait();
            REQUESTS.add(3);
            LATENCY.record(9);
        })
    };
    parked.wait();
    REQUESTS.add(1);
    assert_eq!(snapshot().counter("r_requests_total"), Some(151));

    reset();
    let snap = snapshot();
    assert_eq!(snap.counter("r_requests_total"), Some(0));
    assert_eq!(snap.histogram("r_latency_ns", None).unwrap().count(), 0);
    assert_eq!(snap.gauge("r_connections"), Some(4), "gauges are not reset");

    resume.wait();
    live.join().unwrap();
    REQUESTS.add(2);
    let snap = snapshot();
    assert_eq!(snap.counter("r_requests_total"), Some(5));
    let latency = snap.histogram("r_latency_ns", None).unwrap();
    assert_eq!(latency.count(), 1);
    assert_eq!(latency.sum(), 9);

    // Resets racing with writers: every later increment must still be counted exactly, and no
    // reset may leave a wrapped (negative) value behind.
    static RACED: Counter = Counter::new("r_raced_total", "raced");
    RACED.register();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    RACED.incr();
                }
            })
        })
        .collect();
    for _ in 0..200 {
        reset();
        let value = snapshot().counter("r_raced_total").unwrap();
        assert!(value < 1 << 40, "wrapped value {value} after reset");
    }
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.join().unwrap();
    }
    reset();
    assert_eq!(snapshot().counter("r_raced_total"), Some(0));
    RACED.add(11);
    assert_eq!(snapshot().counter("r_raced_total"), Some(11));
}
