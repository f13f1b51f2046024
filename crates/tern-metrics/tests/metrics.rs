//! Recording on many threads and merging: exact totals, exited threads, gauges, histograms,
//! labels, per-thread series, and the Prometheus / JSON renderings.
//! Every test uses its own metric names because the registry is process-wide.

mod common;

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use common::{parse_prometheus, sample};
use tern_metrics::{
    snapshot, Counter, CounterFamily, Gauge, Histogram, HistogramConfig, HistogramFamily,
    MetricKind, Value,
};

#[test]
fn counters_from_live_and_exited_threads_sum_exactly() {
    static OPS: Counter = Counter::new("t_sum_ops_total", "ops");
    const THREADS: u64 = 6;
    const PER_THREAD: u64 = 100_000;

    // Half the threads exit before the snapshot, half are still alive (parked on a barrier).
    let exited: Vec<_> = (0..THREADS / 2)
        .map(|_| thread::spawn(|| (0..PER_THREAD).for_each(|_| OPS.incr())))
        .collect();
    for handle in exited {
        handle.join().unwrap();
    }
    let recorded = Arc::new(Barrier::new(THREADS as usize / 2 + 1));
    let release = Arc::new(Barrier::new(THREADS as usize / 2 + 1));
    let live: Vec<_> = (0..THREADS / 2)
        .map(|_| {
            let (recorded, release) = (recorded.clone(), release.clone());
            thread::spawn(move || {
                (0..PER_THREAD / 2).for_each(|_| OPS.add(2));
                recorded.wait();
                release.wait();
            })
        })
        .collect();
    recorded.wait();
    assert_eq!(
        snapshot().counter("t_sum_ops_total"),
        Some(THREADS * PER_THREAD)
    );
    release.wait();
    for handle in live {
        handle.join().unwrap();
    }
    // Their slots are now retired; the total must not move.
    assert_eq!(
        snapshot().counter("t_sum_ops_total"),
        Some(THREADS * PER_THREAD)
    );
}

#[test]
fn concurrent_snapshots_never_see_counters_go_backwards() {
    static TICKS: Counter = Counter::new("t_monotonic_ticks_total", "ticks");
    let writers: Vec<_> = (0..3)
        .map(|_| thread::spawn(|| (0..200_000).for_each(|_| TICKS.incr())))
        .collect();
    let mut last = 0;
    while !writers.iter().all(|w| w.is_finished()) {
        let now = snapshot().counter("t_monotonic_ticks_total").unwrap_or(0);
        assert!(now >= last, "counter went backwards: {last} -> {now}");
        last = now;
    }
    for writer in writers {
        writer.join().unwrap();
    }
    assert_eq!(snapshot().counter("t_monotonic_ticks_total"), Some(600_000));
}

#[test]
fn gauge_parts_from_different_threads_sum() {
    static OPEN: Gauge = Gauge::new("t_gauge_open_connections", "open");
    // Opened on one thread, closed on another: per-thread parts are +5 and -3.
    thread::spawn(|| (0..5).for_each(|_| OPEN.incr()))
        .join()
        .unwrap();
    thread::spawn(|| (0..3).for_each(|_| OPEN.decr()))
        .join()
        .unwrap();
    assert_eq!(snapshot().gauge("t_gauge_open_connections"), Some(2));
    OPEN.add(-10);
    assert_eq!(snapshot().gauge("t_gauge_open_connections"), Some(-8));
}

#[test]
fn gauge_set_replaces_this_threads_part() {
    static DEPTH: Gauge = Gauge::new("t_gauge_set_depth", "depth");
    thread::spawn(|| DEPTH.add(7)).join().unwrap();
    let sampler = thread::spawn(|| {
        DEPTH.set(100);
        DEPTH.set(40);
    });
    sampler.join().unwrap();
    assert_eq!(snapshot().gauge("t_gauge_set_depth"), Some(47));
}

#[test]
fn histogram_merged_count_and_quantiles_match_recorded_values() {
    static LATENCY: Histogram = Histogram::new("t_hist_latency_ns", "latency");
    // Thread t records t*1000+1 ..= t*1000+1000 (µs range values, exact at 3 significant figures
    // up to 2048 and within 0.1% above).
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            thread::spawn(move || {
                for v in 1..=1000 {
                    LATENCY.record(t * 1000 + v);
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    LATENCY.record_duration(Duration::from_micros(3));
    let snap = snapshot();
    let h = snap
        .histogram("t_hist_latency_ns", None)
        .expect("registered");
    assert_eq!(h.count(), 4001);
    let exact_sum: u64 = (1..=4000u64).sum::<u64>() + 3000;
    assert_eq!(h.sum(), exact_sum);
    assert_eq!(h.min(), Some(1));
    let max = h.max().unwrap();
    assert!((3998..=4003).contains(&max), "max {max}");
    let p50 = h.quantile(0.5).unwrap() as f64;
    assert!((p50 - 2000.0).abs() <= 2000.0 * 0.002, "p50 {p50}");
    let p99 = h.quantile(0.99).unwrap() as f64;
    assert!((p99 - 3960.0).abs() <= 3960.0 * 0.002, "p99 {p99}");
}

#[test]
fn histogram_values_above_range_are_clamped_not_lost() {
    static SIZES: Histogram = Histogram::with_config(
        "t_hist_clamped_bytes",
        "sizes",
        HistogramConfig::new(1, 1000, 2),
    );
    SIZES.record(5);
    SIZES.record(u64::MAX);
    let snap = snapshot();
    let h = snap.histogram("t_hist_clamped_bytes", None).unwrap();
    assert_eq!(h.count(), 2);
    assert!(h.max().unwrap() >= 1000 && h.max().unwrap() < 1100);
    assert_eq!(h.sum(), u64::MAX, "sum saturates instead of wrapping");
}

#[test]
fn histogram_buckets_count_the_values_at_or_below_each_bound() {
    static WAIT: Histogram = Histogram::new("t_buckets_wait_ns", "wait");
    // Below the first bound, at bounds, just above them (2,502 ns is in the HDR bucket after
    // 2,500's), beyond the last bound, and beyond the histogram's range (recorded as 60 s but
    // summed as recorded).
    const VALUES: [u64; 8] = [
        500,
        1_000,
        1_001,
        2_500,
        2_502,
        7_000_000,
        20_000_000_000,
        70_000_000_000,
    ];
    thread::spawn(|| VALUES.iter().for_each(|&v| WAIT.record(v)))
        .join()
        .unwrap();
    let bounds: Vec<u64> = HistogramConfig::LATENCY_NS.bucket_bounds().collect();
    assert_eq!(bounds.len(), 22);
    assert_eq!(bounds[..3], [1_000, 2_500, 5_000]);
    assert_eq!(bounds.last(), Some(&10_000_000_000));

    let text = snapshot().to_prometheus(false);
    parse_prometheus(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(text.contains("# TYPE t_buckets_wait_ns histogram\n"));
    let at_or_below = |bound: u64| VALUES.iter().filter(|&&v| v <= bound).count();
    let mut expected: Vec<String> = bounds
        .iter()
        .map(|&b| format!("t_buckets_wait_ns_bucket{{le=\"{b}\"}} {}", at_or_below(b)))
        .collect();
    expected.push("t_buckets_wait_ns_bucket{le=\"+Inf\"} 8".into());
    expected.push(format!(
        "t_buckets_wait_ns_sum {}",
        VALUES.iter().sum::<u64>()
    ));
    expected.push("t_buckets_wait_ns_count 8".into());
    let written: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("t_buckets_wait_ns"))
        .collect();
    assert_eq!(written, expected);
    assert_eq!(
        written[..5],
        [
            "t_buckets_wait_ns_bucket{le=\"1000\"} 2",
            "t_buckets_wait_ns_bucket{le=\"2500\"} 4",
            "t_buckets_wait_ns_bucket{le=\"5000\"} 5",
            "t_buckets_wait_ns_bucket{le=\"10000\"} 5",
            "t_buckets_wait_ns_bucket{le=\"25000\"} 5",
        ]
    );
}

#[test]
fn labelled_histogram_buckets_carry_the_family_label_then_thread_then_le() {
    static SIZES: HistogramFamily = HistogramFamily::new(
        "t_buckets_item_bytes",
        "item sizes",
        "cmd",
        &["get", "set"],
        HistogramConfig::SIZE_BYTES,
    );
    thread::spawn(|| {
        tern_metrics::set_thread_name("t-buckets-io-0");
        SIZES.record(1, 100);
        SIZES.record(1, 5_000);
        SIZES.record(1, 1 << 29);
    })
    .join()
    .unwrap();
    let bounds: Vec<u64> = HistogramConfig::SIZE_BYTES.bucket_bounds().collect();
    assert_eq!(bounds.first(), Some(&16));
    assert_eq!(bounds.last(), Some(&(256 << 20)));

    let text = snapshot().to_prometheus(true);
    let samples = parse_prometheus(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let set_labels = ["cmd=\"set\",", "cmd=\"set\",thread=\"t-buckets-io-0\","];
    for labels in set_labels {
        let expected: Vec<String> = bounds
            .iter()
            .map(|&b| {
                let count = [100, 5_000].iter().filter(|&&v| v <= b).count();
                format!("t_buckets_item_bytes_bucket{{{labels}le=\"{b}\"}} {count}")
            })
            .chain([format!(
                "t_buckets_item_bytes_bucket{{{labels}le=\"+Inf\"}} 3"
            )])
            .collect();
        let prefix = format!("t_buckets_item_bytes_bucket{{{labels}le=");
        let written: Vec<&str> = text.lines().filter(|l| l.starts_with(&prefix)).collect();
        assert_eq!(written, expected);
    }
    let set = [("cmd", "set")];
    assert_eq!(
        sample(&samples, "t_buckets_item_bytes_sum", &set),
        Some((100 + 5_000 + (1u64 << 29)) as f64)
    );
    assert_eq!(
        sample(&samples, "t_buckets_item_bytes_count", &set),
        Some(3.0)
    );
    // The series never recorded into is exported whole, at 0, and has no per-thread series.
    let get = [("cmd", "get"), ("le", "+Inf")];
    assert_eq!(
        sample(&samples, "t_buckets_item_bytes_bucket", &get),
        Some(0.0)
    );
    assert!(!text.contains("t_buckets_item_bytes_bucket{cmd=\"get\",thread="));
}

#[test]
fn custom_shapes_export_one_two_five_buckets_within_their_range() {
    let bounds = |config: HistogramConfig| config.bucket_bounds().collect::<Vec<_>>();
    assert_eq!(
        bounds(HistogramConfig::new(1, 100_000, 3)),
        [1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000]
    );
    assert_eq!(
        bounds(HistogramConfig::new(1_000, 60_000, 2)),
        [1_000, 2_000, 5_000, 10_000, 20_000, 50_000]
    );
}

#[test]
fn labelled_families_keep_series_apart() {
    static COMMANDS: CounterFamily = CounterFamily::new(
        "t_family_commands_total",
        "commands",
        "cmd",
        &["get", "set", "delete"],
    );
    static COMMAND_LATENCY: HistogramFamily = HistogramFamily::new(
        "t_family_latency_ns",
        "latency",
        "cmd",
        &["get", "set"],
        HistogramConfig::LATENCY_NS,
    );
    thread::spawn(|| {
        COMMANDS.add(0, 10);
        COMMANDS.incr(2);
        COMMAND_LATENCY.record(1, 500);
    })
    .join()
    .unwrap();
    COMMANDS.add(0, 5);
    let snap = snapshot();
    assert_eq!(
        snap.counter_with("t_family_commands_total", Some("get")),
        Some(15)
    );
    assert_eq!(
        snap.counter_with("t_family_commands_total", Some("set")),
        Some(0)
    );
    assert_eq!(
        snap.counter_with("t_family_commands_total", Some("delete")),
        Some(1)
    );
    assert_eq!(
        snap.histogram("t_family_latency_ns", Some("get"))
            .unwrap()
            .count(),
        0
    );
    assert_eq!(
        snap.histogram("t_family_latency_ns", Some("set"))
            .unwrap()
            .count(),
        1
    );
    assert_eq!(COMMANDS.label_values(), ["get", "set", "delete"]);
}

#[test]
fn out_of_range_label_index_panics_with_a_clear_message() {
    static TWO: CounterFamily =
        CounterFamily::new("t_family_two_total", "two", "kind", &["a", "b"]);
    let panic = std::panic::catch_unwind(|| TWO.incr(2)).unwrap_err();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(
        message.contains("label index 2 out of range for metric t_family_two_total"),
        "{message}"
    );
}

#[test]
fn same_metric_declared_twice_shares_one_series() {
    static FIRST: Counter = Counter::new("t_shared_declared_total", "shared");
    static SECOND: Counter = Counter::new("t_shared_declared_total", "shared");
    FIRST.add(3);
    SECOND.add(4);
    assert_eq!(snapshot().counter("t_shared_declared_total"), Some(7));
}

#[test]
fn conflicting_declarations_are_rejected() {
    static AS_COUNTER: Counter = Counter::new("t_conflict_total", "a");
    static AS_FAMILY: CounterFamily = CounterFamily::new("t_conflict_total", "a", "x", &["y"]);
    AS_COUNTER.incr();
    let panic = std::panic::catch_unwind(|| AS_FAMILY.incr(0)).unwrap_err();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(message.contains("declared twice"), "{message}");
}

#[test]
fn names_clashing_with_histogram_samples_are_rejected() {
    static WAIT: Histogram = Histogram::new("t_clash_wait_ns", "wait");
    static WAIT_COUNT: Gauge = Gauge::new("t_clash_wait_ns_count", "clashes with WAIT's _count");
    static WAIT_BUCKET: Gauge = Gauge::new("t_clash_wait_ns_bucket", "clashes with WAIT's _bucket");
    WAIT.register();
    for clash in [(|| WAIT_COUNT.incr()) as fn(), || WAIT_BUCKET.incr()] {
        let panic = std::panic::catch_unwind(clash).unwrap_err();
        let message = panic.downcast_ref::<String>().unwrap();
        assert!(
            message.contains("clashes with the _bucket/_sum/_count samples of t_clash_wait_ns"),
            "{message}"
        );
    }
}

#[test]
fn named_threads_get_per_thread_series_that_survive_restarts() {
    static WORK: Counter = Counter::new("t_named_work_total", "work");
    static SERVICE: Histogram = Histogram::new("t_named_service_ns", "service time");
    for round in 0..2 {
        thread::spawn(move || {
            tern_metrics::set_thread_name("t-named-io-0");
            WORK.add(10 + round);
            SERVICE.record(100);
        })
        .join()
        .unwrap();
    }
    thread::spawn(|| WORK.add(1000)).join().unwrap(); // unnamed: totals only
    let snap = snapshot();
    let series = snap.series("t_named_work_total", None).unwrap();
    assert!(matches!(series.total, Value::Counter(1021)));
    let io0 = series
        .threads
        .iter()
        .find(|(name, _)| name == "t-named-io-0")
        .unwrap();
    assert!(matches!(io0.1, Value::Counter(21)), "{:?}", io0.1);
    let hist = snap.series("t_named_service_ns", None).unwrap();
    let (_, per_thread) = hist
        .threads
        .iter()
        .find(|(name, _)| name == "t-named-io-0")
        .unwrap();
    match per_thread {
        Value::Histogram(h) => assert_eq!(h.count(), 2),
        other => panic!("expected histogram, got {other:?}"),
    }
    let text = snap.to_prometheus(true);
    let samples = parse_prometheus(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(sample(&samples, "t_named_work_total", &[]), Some(1021.0));
    assert_eq!(
        sample(
            &samples,
            "t_named_work_total",
            &[("thread", "t-named-io-0")]
        ),
        Some(21.0)
    );
    assert_eq!(
        sample(
            &samples,
            "t_named_service_ns_count",
            &[("thread", "t-named-io-0")]
        ),
        Some(2.0)
    );
}

thread_local! {
    static RECORDS_ON_DROP: RecordOnDrop = const { RecordOnDrop };
}

struct RecordOnDrop;

static TEARDOWN: Counter = Counter::new(
    "t_teardown_records_total",
    "records made by TLS destructors",
);

impl Drop for RecordOnDrop {
    fn drop(&mut self) {
        TEARDOWN.incr();
    }
}

#[test]
fn records_made_during_thread_teardown_are_kept() {
    // Thread-local destructors run in reverse order of first use: touching RECORDS_ON_DROP
    // first makes its destructor run after the metrics slot is gone (the fallback path);
    // touching it second makes it run while the slot is still there.
    let handles: Vec<_> = (0..4)
        .map(|i| {
            thread::spawn(move || {
                if i % 2 == 0 {
                    RECORDS_ON_DROP.with(|_| {});
                    TEARDOWN.incr();
                } else {
                    TEARDOWN.incr();
                    RECORDS_ON_DROP.with(|_| {});
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    assert_eq!(snapshot().counter("t_teardown_records_total"), Some(8));
}

#[test]
fn prometheus_output_is_valid_and_carries_the_totals() {
    static REQUESTS: Counter = Counter::new(
        "t_prom_requests_total",
        "Requests served\nby \"tern\" \\ all",
    );
    static CONNECTIONS: Gauge = Gauge::new("t_prom_connections", "Open connections");
    static LATENCY: Histogram = Histogram::new("t_prom_latency_ns", "Request latency");
    static EMPTY: Histogram = Histogram::new("t_prom_empty_ns", "Never recorded");
    static ODD: CounterFamily = CounterFamily::new(
        "t_prom_odd_labels_total",
        "odd",
        "key",
        &["quote\"", "back\\slash", "new\nline"],
    );
    EMPTY.register();
    thread::spawn(|| {
        REQUESTS.add(42);
        CONNECTIONS.add(3);
        (1..=100).for_each(|v| LATENCY.record(v));
        ODD.incr(0);
        ODD.add(2, 9);
    })
    .join()
    .unwrap();
    let text = snapshot().to_prometheus(false);
    let samples = parse_prometheus(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(text.contains("# HELP t_prom_requests_total Requests served\\nby \"tern\" \\\\ all\n"));
    assert!(text.contains("# TYPE t_prom_requests_total counter\n"));
    assert!(text.contains("# TYPE t_prom_connections gauge\n"));
    assert!(text.contains("# TYPE t_prom_latency_ns histogram\n"));
    assert_eq!(sample(&samples, "t_prom_requests_total", &[]), Some(42.0));
    assert_eq!(sample(&samples, "t_prom_connections", &[]), Some(3.0));
    assert_eq!(
        sample(&samples, "t_prom_latency_ns_count", &[]),
        Some(100.0)
    );
    assert_eq!(sample(&samples, "t_prom_latency_ns_sum", &[]), Some(5050.0));
    assert_eq!(
        sample(&samples, "t_prom_latency_ns_bucket", &[("le", "1000")]),
        Some(100.0)
    );
    // An empty histogram has all its buckets, at 0, rather than no samples or NaNs.
    for le in ["1000", "10000000000", "+Inf"] {
        assert_eq!(
            sample(&samples, "t_prom_empty_ns_bucket", &[("le", le)]),
            Some(0.0)
        );
    }
    assert_eq!(sample(&samples, "t_prom_empty_ns_sum", &[]), Some(0.0));
    assert_eq!(sample(&samples, "t_prom_empty_ns_count", &[]), Some(0.0));
    assert_eq!(
        sample(&samples, "t_prom_odd_labels_total", &[("key", "quote\"")]),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &samples,
            "t_prom_odd_labels_total",
            &[("key", "back\\slash")]
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(&samples, "t_prom_odd_labels_total", &[("key", "new\nline")]),
        Some(9.0)
    );
}

#[test]
fn json_rendering_has_types_totals_and_quantiles() {
    static HITS: CounterFamily =
        CounterFamily::new("t_json_hits_total", "hits", "tier", &["l1", "l2"]);
    static WAIT: Histogram = Histogram::new("t_json_wait_ns", "wait");
    static NEVER: Histogram = Histogram::new("t_json_never_ns", "never recorded");
    NEVER.register();
    HITS.add(1, 3);
    WAIT.record(10);
    WAIT.record(30);
    let json = snapshot().to_json();
    assert_eq!(json["t_json_hits_total"]["type"], "counter");
    assert_eq!(json["t_json_hits_total"]["label"], "tier");
    assert_eq!(json["t_json_hits_total"]["series"]["l2"]["total"], 3);
    assert_eq!(json["t_json_hits_total"]["series"]["l1"]["total"], 0);
    let wait = &json["t_json_wait_ns"];
    assert_eq!(wait["type"], "histogram");
    assert_eq!(wait["total"]["count"], 2);
    assert_eq!(wait["total"]["sum"], 40);
    assert_eq!(wait["total"]["min"], 10);
    assert_eq!(wait["total"]["max"], 30);
    assert_eq!(wait["total"]["mean"], 20.0);
    assert_eq!(wait["total"]["p99_99"], 30);
    assert!(json["t_json_never_ns"]["total"]["p50"].is_null());
    assert_eq!(json["t_json_never_ns"]["total"]["count"], 0);
    // Round-trips through text as valid JSON.
    let text = json.to_string();
    let parsed: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(parsed, json);
}

#[test]
fn snapshot_lists_metrics_sorted_with_kinds() {
    static B: Counter = Counter::new("t_sorted_b_total", "b");
    static A: Gauge = Gauge::new("t_sorted_a", "a");
    B.register();
    A.register();
    let snap = snapshot();
    let names: Vec<_> = snap.metrics().iter().map(|m| m.name).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    assert_eq!(snap.metric("t_sorted_a").unwrap().kind, MetricKind::Gauge);
    assert_eq!(snap.counter("t_sorted_b_total"), Some(0));
}

/// The checker the tests above rely on must itself reject malformed exposition text.
#[test]
fn prometheus_checker_rejects_malformed_text() {
    let valid = "# HELP a_total x\n# TYPE a_total counter\na_total{k=\"v\\\"\"} 1\n";
    assert!(parse_prometheus(valid).is_ok());
    let histogram = concat!(
        "# TYPE h histogram\n",
        "h_bucket{k=\"v\",le=\"1\"} 1\n",
        "h_bucket{k=\"v\",le=\"+Inf\"} 2\n",
        "h_sum{k=\"v\"} 3\n",
        "h_count{k=\"v\"} 2\n",
    );
    assert_eq!(parse_prometheus(histogram).map(|s| s.len()), Ok(4));
    for bad in [
        "a_total 1",                             // no trailing newline
        "1bad 1\n",                              // bad metric name
        "a{k=\"unterminated} 1\n",               // unterminated label value
        "a{k=\"bad \\t escape\"} 1\n",           // invalid escape
        "a{k=v} 1\n",                            // unquoted label value
        "a{1k=\"v\"} 1\n",                       // bad label name
        "a one\n",                               // bad value
        "a 1\na 2\n",                            // duplicate series
        "a{k=\"v\",k=\"w\"} 1\n",                // duplicate label
        "a 1\n# TYPE a gauge\n",                 // TYPE after samples
        "a 1\nb 1\na{x=\"y\"} 1\n",              // family not contiguous
        "# TYPE s summary\ns 1\n",               // summary sample without quantile
        "# TYPE h histogram\nh 1\n",             // histogram sample without a suffix
        "# TYPE h histogram\nh_bucket 1\nh_sum 1\nh_count 1\n", // bucket without le
        "# TYPE h histogram\nh_bucket{le=\"x\"} 1\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n", // le not a float
        "# TYPE h histogram\nh_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n", // bounds out of order
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n", // not cumulative
        "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n", // no +Inf
        "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 1\n", // +Inf is not _count
        "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n", // no _sum
        "# TYPE h histogram\nh_sum 1\nh_count 1\n", // no buckets
        "# TYPE a gauge\n# TYPE a gauge\na 1\n", // second TYPE
        "# TYPE a widget\na 1\n",                // unknown type
    ] {
        assert!(parse_prometheus(bad).is_err(), "accepted {bad:?}");
    }
}

#[test]
fn collected_families_join_the_export_while_their_guard_lives() {
    use tern_metrics::{gather, register_collector, MetricSnapshot};
    static STORED: Gauge = Gauge::new("t_collect_items", "items, recorded");
    STORED.set(3);
    let items = |value| {
        move |_: &tern_metrics::Snapshot| {
            vec![
                MetricSnapshot::gauge("t_collect_items", "items, collected", value),
                MetricSnapshot::labelled(
                    "t_collect_spent_micros",
                    "spend",
                    "campaign",
                    [("1".to_owned(), value), (format!("{value}"), 1)],
                ),
            ]
        }
    };
    let first = register_collector(items(10));
    let second = register_collector(items(20));
    let snap = gather();
    // Same name, same label value: the values add up (two stores in one process); the recorded gauge
    // of that name counts too.
    assert_eq!(snap.gauge("t_collect_items"), Some(33));
    let spent = snap.metric("t_collect_spent_micros").unwrap();
    let series: Vec<(Option<&str>, i64)> = spent
        .series
        .iter()
        .map(|s| match s.total {
            Value::Gauge(v) => (s.label_value.as_deref(), v),
            _ => panic!("a gauge"),
        })
        .collect();
    assert_eq!(
        series,
        [(Some("1"), 30), (Some("10"), 1), (Some("20"), 1)],
        "one series per label value"
    );
    // The names stay sorted, so lookups by name find collected families.
    let names: Vec<&str> = snap.metrics().iter().map(|m| m.name).collect();
    assert!(names.windows(2).all(|w| w[0] < w[1]), "{names:?}");
    // snapshot() is what recording threads and `stats` read: no collector runs for it.
    assert_eq!(snapshot().gauge("t_collect_items"), Some(3));
    drop(first);
    assert_eq!(gather().gauge("t_collect_items"), Some(23));
    drop(second);
    assert_eq!(gather().gauge("t_collect_items"), Some(3));
    assert!(gather().metric("t_collect_spent_micros").is_none());
    let text = gather().to_prometheus(false);
    assert!(!text.contains("t_collect_spent_micros"), "{text}");
}
