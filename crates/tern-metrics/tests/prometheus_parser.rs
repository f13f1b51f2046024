//! A live admin endpoint's `/metrics` read by the Prometheus project's own text parser (Python's
//! `prometheus_client`, which `scripts/install-test-deps.sh` installs): every family parses with
//! its type, and every histogram series has increasing bounds, cumulative counts and a `+Inf`
//! bucket equal to its `_count`. A parser of our own (tests/common) checks the same text strictly
//! in the other tests; this one shows a real consumer agrees.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;

use serde_json::Value as Json;
use tern_metrics::{
    AdminServer, Counter, CounterFamily, Gauge, Histogram, HistogramConfig, HistogramFamily,
    MetricKind, MetricSnapshot,
};

static REQUESTS: Counter = Counter::new("pc_requests_total", "Requests served");
static COMMANDS: CounterFamily = CounterFamily::new(
    "pc_commands_total",
    "Commands by kind",
    "cmd",
    &["get", "set"],
);
static OPEN: Gauge = Gauge::new("pc_connections", "Open connections");
static LATENCY: Histogram = Histogram::new("pc_latency_ns", "Request latency");
static STAGE: HistogramFamily = HistogramFamily::new(
    "pc_stage_ns",
    "Time of each stage, with \"quotes\" and a \\ in the help",
    "stage",
    &["decode", "handle", "never"],
    HistogramConfig::LATENCY_NS,
);
static SIZES: Histogram =
    Histogram::with_config("pc_value_bytes", "Value sizes", HistogramConfig::SIZE_BYTES);

fn prometheus_client_installed() -> bool {
    let installed = Command::new("python3")
        .args(["-c", "import prometheus_client"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !installed {
        assert!(
            std::env::var_os("CI").is_none(),
            "python3 cannot import prometheus_client in CI (scripts/install-test-deps.sh installs it)"
        );
        eprintln!(
            "SKIPPED: python3 cannot import prometheus_client (scripts/install-test-deps.sh installs it)"
        );
    }
    installed
}

/// The families `prometheus_client` parses from `url`, in the order written.
fn parse_with_prometheus_client(url: &str) -> Vec<Json> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/prometheus/parse_metrics.py");
    let output = Command::new("python3")
        .arg(script)
        .arg(url)
        .output()
        .expect("python3 runs");
    assert!(
        output.status.success(),
        "prometheus_client could not parse {url}:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice::<Json>(&output.stdout)
        .expect("the script prints JSON")
        .as_array()
        .expect("a list of families")
        .clone()
}

/// Checks a parsed histogram family: per series (its labels but `le`), bounds increasing, counts
/// cumulative, `+Inf` last and equal to `_count`, a `_sum`. Returns each series' `_count`.
fn check_histogram(family: &Json) -> BTreeMap<String, f64> {
    let name = family["name"].as_str().unwrap();
    let mut buckets: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut sums = BTreeMap::new();
    let mut counts = BTreeMap::new();
    for sample in family["samples"].as_array().unwrap() {
        let sample_name = sample[0].as_str().unwrap();
        let mut labels = sample[1].as_object().unwrap().clone();
        let value = sample[2].as_f64().unwrap();
        let le = labels.remove("le");
        let series = serde_json::to_string(&labels).unwrap();
        match sample_name.strip_prefix(name) {
            Some("_bucket") => {
                let le = le.unwrap_or_else(|| panic!("{name}: a bucket without le"));
                let bound: f64 = match le.as_str().unwrap() {
                    "+Inf" => f64::INFINITY,
                    bound => bound.parse().expect("le is a float"),
                };
                buckets.entry(series).or_default().push((bound, value));
            }
            Some("_sum") => assert!(sums.insert(series, value).is_none()),
            Some("_count") => assert!(counts.insert(series, value).is_none()),
            _ => panic!("{name}: unexpected sample {sample_name}"),
        }
    }
    assert!(!buckets.is_empty(), "{name}: no buckets");
    for (series, series_buckets) in &buckets {
        for pair in series_buckets.windows(2) {
            let ((bound, count), (next_bound, next_count)) = (pair[0], pair[1]);
            assert!(next_bound > bound, "{name}{series}: bounds not increasing");
            assert!(next_count >= count, "{name}{series}: counts not cumulative");
        }
        let &(last_bound, last_count) = series_buckets.last().unwrap();
        assert_eq!(last_bound, f64::INFINITY, "{name}{series}: +Inf not last");
        assert_eq!(
            counts.get(series),
            Some(&last_count),
            "{name}{series}: +Inf bucket is not _count"
        );
        assert!(sums.contains_key(series), "{name}{series}: no _sum");
    }
    assert_eq!(
        counts.keys().collect::<Vec<_>>(),
        buckets.keys().collect::<Vec<_>>(),
        "{name}: a _count without buckets"
    );
    counts
}

#[test]
fn prometheus_client_parses_every_family_with_its_type() {
    if !prometheus_client_installed() {
        return;
    }
    let workers: Vec<_> = (0..2)
        .map(|i| {
            thread::spawn(move || {
                tern_metrics::set_thread_name(&format!("pc-io-{i}"));
                OPEN.incr();
                for v in 1..=500u64 {
                    REQUESTS.incr();
                    COMMANDS.incr(usize::from(v % 3 == 0));
                    LATENCY.record(v * 997);
                    STAGE.record(0, v * 10);
                    STAGE.record(1, v * 100_003);
                    SIZES.record(v * 64);
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    // Families read at export time, with label values known only then (one with a quote in it).
    let _collected = tern_metrics::register_collector(|snapshot| {
        let requests = snapshot.counter("pc_requests_total").unwrap_or(0);
        vec![
            MetricSnapshot::labelled(
                "pc_campaign_spent_micros",
                "Spend by campaign",
                "campaign",
                [("7".to_owned(), 1_500), ("say \"hi\"".to_owned(), -2)],
            ),
            MetricSnapshot::ratio("pc_hit_ratio", "Hits per request", 0.25),
            MetricSnapshot::counter("pc_evictions_total", "Evictions", requests / 2),
        ]
    });
    let admin = AdminServer::localhost(0).start().unwrap();
    let snapshot = tern_metrics::gather();
    let expected_types: BTreeMap<String, &str> = snapshot
        .metrics()
        .iter()
        .map(|metric| match metric.kind {
            // The parser names a counter family without its `_total`, as OpenMetrics does.
            MetricKind::Counter => (metric.name.trim_end_matches("_total").to_owned(), "counter"),
            MetricKind::Gauge => (metric.name.to_owned(), "gauge"),
            MetricKind::Histogram => (metric.name.to_owned(), "histogram"),
        })
        .collect();
    assert_eq!(expected_types.len(), 9);

    for path in ["/metrics", "/metrics?per_thread=1"] {
        let url = format!("http://{}{path}", admin.local_addr());
        let families = parse_with_prometheus_client(&url);
        let parsed_types: BTreeMap<String, &str> = families
            .iter()
            .map(|f| {
                let name = f["name"].as_str().unwrap().to_owned();
                (name, f["type"].as_str().unwrap())
            })
            .collect();
        assert_eq!(parsed_types, expected_types, "{path}");
        assert_eq!(
            families.len(),
            expected_types.len(),
            "{path}: a family split"
        );

        let family = |name: &str| families.iter().find(|f| f["name"] == name).unwrap();
        let samples = |name: &str| family(name)["samples"].as_array().unwrap().clone();
        let spent = samples("pc_campaign_spent_micros");
        assert_eq!(spent.len(), 2, "{path}");
        assert_eq!(spent[0][1]["campaign"], "7", "{path}");
        assert_eq!(spent[0][2], 1500.0, "{path}");
        assert_eq!(spent[1][1]["campaign"], "say \"hi\"", "{path}");
        assert_eq!(spent[1][2], -2.0, "{path}");
        assert_eq!(samples("pc_hit_ratio")[0][2], 0.25, "{path}");
        assert_eq!(samples("pc_evictions")[0][2], 500.0, "{path}");
        let latency_counts = check_histogram(family("pc_latency_ns"));
        let stage_counts = check_histogram(family("pc_stage_ns"));
        let size_counts = check_histogram(family("pc_value_bytes"));
        assert_eq!(latency_counts["{}"], 1000.0, "{path}");
        assert_eq!(size_counts["{}"], 1000.0, "{path}");
        assert_eq!(stage_counts[r#"{"stage":"decode"}"#], 1000.0, "{path}");
        assert_eq!(stage_counts[r#"{"stage":"never"}"#], 0.0, "{path}");
        if path.contains("per_thread=1") {
            assert_eq!(latency_counts[r#"{"thread":"pc-io-1"}"#], 500.0, "{path}");
            assert_eq!(
                stage_counts[r#"{"stage":"handle","thread":"pc-io-0"}"#], 500.0,
                "{path}"
            );
        } else {
            assert_eq!(latency_counts.len(), 1, "{path}: totals only");
            assert_eq!(stage_counts.len(), 3, "{path}: totals only");
        }
    }
    admin.shutdown().unwrap();
}
