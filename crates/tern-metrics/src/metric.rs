//! Metric handles: `const`-constructible statics whose hot path is a thread-local lookup plus
//! an uncontended write to the calling thread's own slot.

use std::time::Duration;

use crate::family::{Family, HistogramConfig, MetricKind};
use crate::registry;

fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A monotonic counter. Declare it as a `static`; the name must end with `_total`.
///
/// ```
/// use tern_metrics::Counter;
/// static REQUESTS: Counter = Counter::new("doc_requests_total", "Requests served");
/// REQUESTS.incr();
/// assert_eq!(tern_metrics::snapshot().counter("doc_requests_total"), Some(1));
/// ```
///
/// Names and labels are checked when the `static` is compiled:
///
/// ```compile_fail
/// static NO_SUFFIX: tern_metrics::Counter = tern_metrics::Counter::new("doc_requests", "x");
/// ```
///
/// ```compile_fail
/// static RESERVED: tern_metrics::CounterFamily =
///     tern_metrics::CounterFamily::new("doc_by_thread_total", "x", "thread", &["a"]);
/// ```
pub struct Counter(Family);

impl Counter {
    /// A counter named `name` (must end in `_total`) with Prometheus `# HELP` text `help`.
    pub const fn new(name: &'static str, help: &'static str) -> Self {
        Self(Family::unlabeled(
            name,
            help,
            MetricKind::Counter,
            HistogramConfig::LATENCY_NS,
        ))
    }

    /// Adds 1.
    #[inline]
    pub fn incr(&self) {
        self.add(1);
    }

    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        registry::add_scalar(registry::cell(&self.0, 0), n);
    }

    /// Exports the counter (as 0) before anything is recorded.
    pub fn register(&self) {
        registry::cell(&self.0, 0);
    }

    /// Its name, as exported (to look it up in a [`crate::Snapshot`]).
    pub const fn name(&self) -> &'static str {
        self.0.name
    }
}

/// Counters sharing one name and one label whose values are fixed at declaration, e.g.
/// `tern_cache_commands_total{cmd="get"}`; series are addressed by their index in `label_values`.
pub struct CounterFamily(Family);

impl CounterFamily {
    /// A family with label `label_name` taking each of `label_values` (distinct, non-empty list).
    pub const fn new(
        name: &'static str,
        help: &'static str,
        label_name: &'static str,
        label_values: &'static [&'static str],
    ) -> Self {
        Self(Family::labelled(
            name,
            help,
            MetricKind::Counter,
            label_name,
            label_values,
            HistogramConfig::LATENCY_NS,
        ))
    }

    /// Adds 1 to series `index`.
    ///
    /// # Panics
    /// If `index >= label_values.len()`.
    #[inline]
    pub fn incr(&self, index: usize) {
        self.add(index, 1);
    }

    /// Adds `n` to series `index`.
    ///
    /// # Panics
    /// If `index >= label_values.len()`.
    #[inline]
    pub fn add(&self, index: usize, n: u64) {
        registry::add_scalar(registry::cell(&self.0, index), n);
    }

    /// The label values, in index order.
    pub fn label_values(&self) -> &'static [&'static str] {
        self.0.label_values
    }

    /// Exports the family (as zeros) before anything is recorded.
    pub fn register(&self) {
        registry::cell(&self.0, 0);
    }
}

/// A value that goes up and down (e.g. open connections). Each thread adds and subtracts its
/// own part; the exported value is the sum over threads, so a connection opened on one thread
/// may be closed on another.
pub struct Gauge(Family);

impl Gauge {
    /// A gauge named `name` (must not end in `_total`).
    pub const fn new(name: &'static str, help: &'static str) -> Self {
        Self(Family::unlabeled(
            name,
            help,
            MetricKind::Gauge,
            HistogramConfig::LATENCY_NS,
        ))
    }

    /// Adds 1.
    #[inline]
    pub fn incr(&self) {
        self.add(1);
    }

    /// Subtracts 1.
    #[inline]
    pub fn decr(&self) {
        self.add(-1);
    }

    /// Adds `delta` (may be negative).
    #[inline]
    pub fn add(&self, delta: i64) {
        // Two's complement: wrapping sums of the per-thread parts give the signed total.
        registry::add_scalar(registry::cell(&self.0, 0), delta as u64);
    }

    /// Sets the calling thread's part to `value`. The exported value is still the sum over
    /// threads, so call this from one thread only (e.g. a sampler) to get a plain settable gauge.
    #[inline]
    pub fn set(&self, value: i64) {
        registry::set_scalar(registry::cell(&self.0, 0), value as u64);
    }

    /// Exports the gauge (as 0) before anything is recorded.
    pub fn register(&self) {
        registry::cell(&self.0, 0);
    }
}

/// A distribution (latency, size) recorded into per-thread buckets and merged into an
/// `hdrhistogram` on demand. Exported to Prometheus as a `histogram` (cumulative `_bucket` counts at
/// its [`HistogramConfig::bucket_bounds`], `_sum`, `_count`) and in `/stats` with count, sum, min,
/// max, mean and p50/p90/p99/p99.9/p99.99.
pub struct Histogram(Family);

impl Histogram {
    /// A latency histogram in nanoseconds ([`HistogramConfig::LATENCY_NS`]).
    pub const fn new(name: &'static str, help: &'static str) -> Self {
        Self::with_config(name, help, HistogramConfig::LATENCY_NS)
    }

    /// A histogram with a custom range and precision.
    pub const fn with_config(
        name: &'static str,
        help: &'static str,
        config: HistogramConfig,
    ) -> Self {
        Self(Family::unlabeled(name, help, MetricKind::Histogram, config))
    }

    /// Records `value`; values above the configured maximum are recorded as the maximum.
    #[inline]
    pub fn record(&self, value: u64) {
        registry::record_histogram(registry::cell(&self.0, 0), &self.0.histogram, value, 1);
    }

    /// Records a duration in nanoseconds.
    #[inline]
    pub fn record_duration(&self, duration: Duration) {
        self.record(duration_nanos(duration));
    }

    /// Exports the histogram (empty) before anything is recorded.
    pub fn register(&self) {
        registry::cell(&self.0, 0);
    }
}

/// Histograms sharing one name and one label with values fixed at declaration, e.g.
/// `tern_cache_latency_ns{cmd="get"}`.
pub struct HistogramFamily(Family);

impl HistogramFamily {
    /// A family with label `label_name` taking each of `label_values`, shaped by `config`.
    pub const fn new(
        name: &'static str,
        help: &'static str,
        label_name: &'static str,
        label_values: &'static [&'static str],
        config: HistogramConfig,
    ) -> Self {
        Self(Family::labelled(
            name,
            help,
            MetricKind::Histogram,
            label_name,
            label_values,
            config,
        ))
    }

    /// Records `value` into series `index`.
    ///
    /// # Panics
    /// If `index >= label_values.len()`.
    #[inline]
    pub fn record(&self, index: usize, value: u64) {
        self.record_n(index, value, 1);
    }

    /// Records `value` `n` times into series `index` (requests answered together, in one batch, took
    /// the same time).
    ///
    /// # Panics
    /// If `index >= label_values.len()`.
    #[inline]
    pub fn record_n(&self, index: usize, value: u64, n: u64) {
        registry::record_histogram(registry::cell(&self.0, index), &self.0.histogram, value, n);
    }

    /// Records a duration in nanoseconds into series `index`.
    ///
    /// # Panics
    /// If `index >= label_values.len()`.
    #[inline]
    pub fn record_duration(&self, index: usize, duration: Duration) {
        self.record(index, duration_nanos(duration));
    }

    /// The label values, in index order.
    pub fn label_values(&self) -> &'static [&'static str] {
        self.0.label_values
    }

    /// Exports the family (empty) before anything is recorded.
    pub fn register(&self) {
        registry::cell(&self.0, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::HistogramConfig;

    #[test]
    fn documented_histogram_memory_matches_hdrhistogram() {
        assert_eq!(
            HistogramConfig::LATENCY_NS.bytes_per_histogram(),
            216 * 1024
        );
        assert_eq!(HistogramConfig::SIZE_BYTES.bytes_per_histogram(), 25 * 1024);
        assert_eq!(HistogramConfig::REQUEST_NS.bytes_per_histogram(), 24 * 1024);
    }
}
