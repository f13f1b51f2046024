//! Metric handles: `const`-constructible statics whose hot path is a thread-local lookup plus
//! an uncontended write to the calling thread's own slot.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::registry;

/// What a metric measures, which decides how it is merged and exported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MetricKind {
    /// Monotonic count; exported as a Prometheus `counter`.
    Counter,
    /// Value that goes up and down; each thread holds its own part and the reader sums them.
    Gauge,
    /// Distribution of values (latencies, sizes); exported as a Prometheus `summary`.
    Histogram,
}

/// Range and precision of a histogram, with `hdrhistogram`'s meaning. Each recording thread holds
/// one bucket array of this shape per histogram series it records into, so the shape sets the
/// memory cost per thread ([`HistogramConfig::bytes_per_histogram`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistogramConfig {
    lowest_discernible: u64,
    highest_trackable: u64,
    significant_figures: u8,
}

impl HistogramConfig {
    /// Latencies in nanoseconds from 1 ns to 60 s at 3 significant figures (0.1% relative
    /// error): about 216 KiB per recording thread per series, allocated on first record.
    pub const LATENCY_NS: Self = Self::new(1, 60_000_000_000, 3);

    /// Sizes in bytes from 1 B to 1 GiB at 2 significant figures (1% relative error):
    /// about 25 KiB per recording thread per series.
    pub const SIZE_BYTES: Self = Self::new(1, 1 << 30, 2);

    /// A custom shape. Values above `highest_trackable` are recorded as `highest_trackable`.
    ///
    /// # Panics
    /// If `lowest_discernible` is 0 or above 2^40, `highest_trackable < 2 * lowest_discernible`,
    /// or `significant_figures > 5`. In a `static` initializer this is a compile-time error.
    pub const fn new(
        lowest_discernible: u64,
        highest_trackable: u64,
        significant_figures: u8,
    ) -> Self {
        assert!(
            lowest_discernible >= 1 && lowest_discernible <= 1 << 40,
            "histogram lowest_discernible must be in 1..=2^40"
        );
        assert!(
            highest_trackable / 2 >= lowest_discernible,
            "histogram highest_trackable must be at least 2 * lowest_discernible"
        );
        assert!(
            significant_figures <= 5,
            "histogram significant_figures must be at most 5"
        );
        Self {
            lowest_discernible,
            highest_trackable,
            significant_figures,
        }
    }

    /// Smallest value distinguishable from 0.
    pub const fn lowest_discernible(&self) -> u64 {
        self.lowest_discernible
    }

    /// Largest value recorded exactly; larger values are clamped to it.
    pub const fn highest_trackable(&self) -> u64 {
        self.highest_trackable
    }

    /// Decimal digits of precision kept for every value.
    pub const fn significant_figures(&self) -> u8 {
        self.significant_figures
    }

    /// Bytes of counts one histogram of this shape holds (per recording thread per series).
    pub fn bytes_per_histogram(&self) -> usize {
        self.new_histogram().distinct_values() * std::mem::size_of::<u64>()
    }

    /// An empty `hdrhistogram` of this shape.
    pub fn new_histogram(&self) -> hdrhistogram::Histogram<u64> {
        hdrhistogram::Histogram::new_with_bounds(
            self.lowest_discernible,
            self.highest_trackable,
            self.significant_figures,
        )
        .expect("bounds were validated by HistogramConfig::new")
    }
}

impl Default for HistogramConfig {
    fn default() -> Self {
        Self::LATENCY_NS
    }
}

/// Labels the exporter adds itself; services may not use them for their own label.
const RESERVED_LABELS: [&str; 3] = ["thread", "quantile", "le"];

/// Registration data shared by every metric type; `first_cell` is filled in lazily on first use.
pub(crate) struct Family {
    pub(crate) name: &'static str,
    pub(crate) help: &'static str,
    pub(crate) kind: MetricKind,
    /// Empty for a metric without a label.
    pub(crate) label_name: &'static str,
    /// One entry per series; `[""]` for a metric without a label.
    pub(crate) label_values: &'static [&'static str],
    pub(crate) histogram: HistogramConfig,
    /// `first cell index + 1`, or 0 until registered.
    first_cell: AtomicUsize,
}

const NO_LABEL: &[&str] = &[""];

impl Family {
    const fn labelled(
        name: &'static str,
        help: &'static str,
        kind: MetricKind,
        label_name: &'static str,
        label_values: &'static [&'static str],
        histogram: HistogramConfig,
    ) -> Self {
        validate_label(label_name, label_values);
        Self::new(name, help, kind, label_name, label_values, histogram)
    }

    const fn unlabeled(
        name: &'static str,
        help: &'static str,
        kind: MetricKind,
        histogram: HistogramConfig,
    ) -> Self {
        Self::new(name, help, kind, "", NO_LABEL, histogram)
    }

    const fn new(
        name: &'static str,
        help: &'static str,
        kind: MetricKind,
        label_name: &'static str,
        label_values: &'static [&'static str],
        histogram: HistogramConfig,
    ) -> Self {
        validate_metric_name(name, kind);
        Self {
            name,
            help,
            kind,
            label_name,
            label_values,
            histogram,
            first_cell: AtomicUsize::new(0),
        }
    }

    /// The per-thread cell of series `index`; registers the family on first use.
    #[inline]
    pub(crate) fn cell(&self, index: usize) -> usize {
        assert!(
            index < self.label_values.len(),
            "label index {index} out of range for metric {} ({} label values)",
            self.name,
            self.label_values.len()
        );
        let first = match self.first_cell.load(Ordering::Relaxed) {
            0 => self.register(),
            stored => stored - 1,
        };
        first + index
    }

    #[cold]
    fn register(&self) -> usize {
        let first = registry::register_family(self);
        self.first_cell.store(first + 1, Ordering::Relaxed);
        first
    }

    /// Registers now rather than on first record, so the metric is exported (as zero) before
    /// any thread has recorded into it.
    fn ensure_registered(&self) {
        self.cell(0);
    }
}

const fn validate_metric_name(name: &str, kind: MetricKind) {
    let bytes = name.as_bytes();
    assert!(!bytes.is_empty(), "metric name must not be empty");
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let ok = b.is_ascii_alphabetic() || b == b'_' || b == b':' || (i > 0 && b.is_ascii_digit());
        assert!(ok, "metric name must match [a-zA-Z_:][a-zA-Z0-9_:]*");
        i += 1;
    }
    let has_total_suffix = ends_with(bytes, b"_total");
    match kind {
        MetricKind::Counter => assert!(has_total_suffix, "counter names must end with _total"),
        MetricKind::Gauge | MetricKind::Histogram => {
            assert!(!has_total_suffix, "only counter names may end with _total")
        }
    }
}

const fn validate_label(label_name: &str, label_values: &[&str]) {
    let bytes = label_name.as_bytes();
    assert!(!bytes.is_empty(), "label name must not be empty");
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let ok = b.is_ascii_alphabetic() || b == b'_' || (i > 0 && b.is_ascii_digit());
        assert!(ok, "label name must match [a-zA-Z_][a-zA-Z0-9_]*");
        i += 1;
    }
    assert!(
        !(bytes.len() >= 2 && bytes[0] == b'_' && bytes[1] == b'_'),
        "label names starting with __ are reserved"
    );
    let mut r = 0;
    while r < RESERVED_LABELS.len() {
        assert!(
            !bytes_eq(bytes, RESERVED_LABELS[r].as_bytes()),
            "label name is reserved by the exporter (thread, quantile, le)"
        );
        r += 1;
    }
    assert!(
        !label_values.is_empty(),
        "a labelled metric needs at least one label value"
    );
    let mut a = 0;
    while a < label_values.len() {
        let mut b = a + 1;
        while b < label_values.len() {
            assert!(
                !bytes_eq(label_values[a].as_bytes(), label_values[b].as_bytes()),
                "label values must be distinct"
            );
            b += 1;
        }
        a += 1;
    }
}

const fn bytes_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

const fn ends_with(s: &[u8], suffix: &[u8]) -> bool {
    if s.len() < suffix.len() {
        return false;
    }
    let offset = s.len() - suffix.len();
    let mut i = 0;
    while i < suffix.len() {
        if s[offset + i] != suffix[i] {
            return false;
        }
        i += 1;
    }
    true
}

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
        registry::add_scalar(self.0.cell(0), n);
    }

    /// Exports the counter (as 0) before anything is recorded.
    pub fn register(&self) {
        self.0.ensure_registered();
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
        registry::add_scalar(self.0.cell(index), n);
    }

    /// The label values, in index order.
    pub fn label_values(&self) -> &'static [&'static str] {
        self.0.label_values
    }

    /// Exports the family (as zeros) before anything is recorded.
    pub fn register(&self) {
        self.0.ensure_registered();
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
        registry::add_scalar(self.0.cell(0), delta as u64);
    }

    /// Sets the calling thread's part to `value`. The exported value is still the sum over
    /// threads, so call this from one thread only (e.g. a sampler) to get a plain settable gauge.
    #[inline]
    pub fn set(&self, value: i64) {
        registry::set_scalar(self.0.cell(0), value as u64);
    }

    /// Exports the gauge (as 0) before anything is recorded.
    pub fn register(&self) {
        self.0.ensure_registered();
    }
}

/// A distribution (latency, size) recorded into per-thread buckets and merged into an
/// `hdrhistogram` on demand. Exported as a Prometheus `summary` with p50/p90/p99/p99.9/p99.99, `_sum`, `_count`.
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
        registry::record_histogram(self.0.cell(0), &self.0.histogram, value);
    }

    /// Records a duration in nanoseconds.
    #[inline]
    pub fn record_duration(&self, duration: Duration) {
        self.record(duration_nanos(duration));
    }

    /// Exports the histogram (empty) before anything is recorded.
    pub fn register(&self) {
        self.0.ensure_registered();
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
        registry::record_histogram(self.0.cell(index), &self.0.histogram, value);
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
        self.0.ensure_registered();
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
    }
}
