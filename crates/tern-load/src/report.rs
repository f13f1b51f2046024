//! The result of a run: JSON for machines, a table for people, and a side-by-side comparison.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::config::{Config, Mode};
use crate::stats::Outcome;

/// Latency summary in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Percentiles {
    /// Samples (keys) recorded.
    pub count: u64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub p9999: f64,
    pub max: f64,
}

/// Percentiles at which the latency curve is sampled for plots and comparisons.
const CURVE_PERCENTILES: [f64; 17] = [
    0.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99, 99.995, 99.999,
    99.9995, 99.9999, 100.0,
];

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

impl Percentiles {
    pub(crate) fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Percentiles::default();
        }
        let at = |q: f64| us(h.value_at_quantile(q));
        Percentiles {
            count: h.len(),
            mean: h.mean() / 1000.0,
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            p999: at(0.999),
            p9999: at(0.9999),
            max: us(h.max()),
        }
    }
}

/// One point of a latency-by-percentile curve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    pub percentile: f64,
    pub latency_us: f64,
}

pub(crate) fn curve(h: &Histogram<u64>) -> Vec<CurvePoint> {
    if h.is_empty() {
        return Vec::new();
    }
    CURVE_PERCENTILES
        .iter()
        .map(|&p| CurvePoint {
            percentile: p,
            latency_us: us(h.value_at_quantile(p / 100.0)),
        })
        .collect()
}

/// Everything a run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub config: Config,
    /// Length of the measured window (after warm-up), seconds.
    pub measured_s: f64,
    /// Requests scheduled in the measured window that got an answer or failed (pacer: BIDS
    /// frames).
    pub requests: u64,
    /// Keys those requests covered (multi-get counts each key; pacer: decisions; HTTP:
    /// responses).
    pub keys: u64,
    pub requests_per_s: f64,
    pub keys_per_s: f64,
    /// From intended send time to reply: includes time queued behind a slow server.
    pub latency_us: Percentiles,
    /// From actual send time to reply.
    pub service_latency_us: Percentiles,
    pub latency_curve: Vec<CurvePoint>,
    /// Counts of every outcome by name (hits, misses, errors by kind).
    pub outcomes: BTreeMap<String, u64>,
    /// Sum of the outcomes that are errors.
    pub errors: u64,
    /// Open loop: requests the schedule wanted before the stop that were never sent.
    pub unsent: u64,
    /// CPU time of the load threads in the measured window, seconds.
    pub client_cpu_s: f64,
    pub requests_per_client_cpu_s: Option<f64>,
    pub server_cpu_s: Option<f64>,
    /// The server's CPU time split: user space and kernel.
    #[serde(default)]
    pub server_user_s: Option<f64>,
    #[serde(default)]
    pub server_system_s: Option<f64>,
    pub requests_per_server_cpu_s: Option<f64>,
    /// Keys (pacer: decisions) per server CPU-second.
    #[serde(default)]
    pub keys_per_server_cpu_s: Option<f64>,
    /// Replies completed in each second since the start (warm-up included).
    pub timeline_per_s: Vec<u64>,
    /// The first reason a connection broke, if any did.
    pub connection_error: Option<String>,
}

impl Report {
    pub fn outcome(&self, outcome: Outcome) -> u64 {
        self.outcomes.get(outcome.name()).copied().unwrap_or(0)
    }

    /// A human-readable summary.
    pub fn table(&self) -> String {
        let c = &self.config;
        let mut s = String::new();
        let mode = match c.mode {
            Mode::Open { rate, arrival } => format!("open loop, {rate:.0} req/s {arrival}"),
            Mode::Closed => "closed loop".to_string(),
        };
        let _ = writeln!(
            s,
            "{}/{} {} | {} conns x {} threads, pipeline {}, multiget {} | {}",
            c.protocol,
            c.transport,
            c.server,
            c.connections,
            c.threads,
            c.pipeline,
            c.multiget,
            mode
        );
        let (requests, keys) = c.protocol.unit_names();
        let _ = writeln!(
            s,
            "measured {:.2} s: {} {requests} ({:.0}/s), {} {keys} ({:.0}/s), {} unsent",
            self.measured_s,
            self.requests,
            self.requests_per_s,
            self.keys,
            self.keys_per_s,
            self.unsent
        );
        let _ = writeln!(
            s,
            "{:<16}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
            "latency (us)", "mean", "p50", "p90", "p99", "p99.9", "p99.99", "max"
        );
        for (name, p) in [
            ("from schedule", &self.latency_us),
            ("from send", &self.service_latency_us),
        ] {
            let _ = writeln!(
                s,
                "{:<16}{:>10.1}{:>10.1}{:>10.1}{:>10.1}{:>10.1}{:>10.1}{:>10.1}",
                name, p.mean, p.p50, p.p90, p.p99, p.p999, p.p9999, p.max
            );
        }
        let outcomes: Vec<String> = self
            .outcomes
            .iter()
            .filter(|(_, &n)| n > 0)
            .map(|(k, n)| format!("{k}={n}"))
            .collect();
        let _ = writeln!(
            s,
            "outcomes: {} | errors: {}",
            outcomes.join(" "),
            self.errors
        );
        let per_cpu = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
        let _ = write!(
            s,
            "client CPU {:.2} s ({} req/CPU-s)",
            self.client_cpu_s,
            per_cpu(self.requests_per_client_cpu_s)
        );
        if let Some(cpu) = self.server_cpu_s {
            let _ = write!(
                s,
                " | server CPU {cpu:.2} s ({} {requests}/CPU-s, {} {keys}/CPU-s)",
                per_cpu(self.requests_per_server_cpu_s),
                per_cpu(self.keys_per_server_cpu_s)
            );
            if let (Some(user), Some(system)) = (self.server_user_s, self.server_system_s) {
                let _ = write!(s, " = user {user:.2} s + kernel {system:.2} s");
            }
        }
        s.push('\n');
        if let Some(e) = &self.connection_error {
            let _ = writeln!(s, "connection error: {e}");
        }
        s
    }
}

/// Two runs side by side, with B/A ratios, as a Markdown table.
pub fn compare_table(a: &Report, b: &Report) -> String {
    let rows: [(&str, Option<f64>, Option<f64>); 11] = [
        ("requests/s", Some(a.requests_per_s), Some(b.requests_per_s)),
        ("p50 us", Some(a.latency_us.p50), Some(b.latency_us.p50)),
        ("p90 us", Some(a.latency_us.p90), Some(b.latency_us.p90)),
        ("p99 us", Some(a.latency_us.p99), Some(b.latency_us.p99)),
        ("p99.9 us", Some(a.latency_us.p999), Some(b.latency_us.p999)),
        (
            "p99.99 us",
            Some(a.latency_us.p9999),
            Some(b.latency_us.p9999),
        ),
        ("max us", Some(a.latency_us.max), Some(b.latency_us.max)),
        ("errors", Some(a.errors as f64), Some(b.errors as f64)),
        ("unsent", Some(a.unsent as f64), Some(b.unsent as f64)),
        (
            "req/client CPU-s",
            a.requests_per_client_cpu_s,
            b.requests_per_client_cpu_s,
        ),
        (
            "req/server CPU-s",
            a.requests_per_server_cpu_s,
            b.requests_per_server_cpu_s,
        ),
    ];
    let cell = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    let mut s = format!(
        "| {:<18} | {:>12} | {:>12} | {:>7} |\n|{:-<20}|{:->14}|{:->14}|{:->9}|\n",
        "metric", "A", "B", "B/A", "", "", "", ""
    );
    for (name, x, y) in rows {
        let ratio = match (x, y) {
            (Some(x), Some(y)) if x != 0.0 => format!("{:.3}", y / x),
            _ => "-".to_string(),
        };
        let _ = writeln!(
            s,
            "| {name:<18} | {:>12} | {:>12} | {ratio:>7} |",
            cell(x),
            cell(y)
        );
    }
    s
}
