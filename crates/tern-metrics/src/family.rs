//! What a metric is, fixed when its `static` is compiled: its kind, name, help, label values and
//! histogram shape, checked by `const` validators.

use std::sync::atomic::AtomicUsize;

/// What a metric measures, which decides how it is merged and exported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MetricKind {
    /// Monotonic count; exported as a Prometheus `counter`.
    Counter,
    /// Value that goes up and down; each thread holds its own part and the reader sums them.
    Gauge,
    /// Distribution of values (latencies, sizes); exported as a Prometheus `histogram` with the
    /// buckets of its [`HistogramConfig`].
    Histogram,
}

/// Range and precision of a histogram, with `hdrhistogram`'s meaning, and the upper bounds of the
/// buckets `/metrics` exports it with. Each recording thread holds one bucket array of this shape
/// per histogram series it records into, so the shape sets the memory cost per thread
/// ([`HistogramConfig::bytes_per_histogram`]); the exported buckets cost nothing until a scrape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistogramConfig {
    lowest_discernible: u64,
    highest_trackable: u64,
    significant_figures: u8,
    bucket_bounds: &'static [u64],
}

/// Exported buckets of [`HistogramConfig::LATENCY_NS`]: 1, 2.5, 5 steps from 1 µs to 10 s, in
/// nanoseconds (Prometheus' usual latency buckets, widened to the microseconds tern serves in).
const LATENCY_NS_BOUNDS: [u64; 22] = [
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// Exported buckets of [`HistogramConfig::SIZE_BYTES`]: powers of 4 from 16 B to 256 MiB.
const SIZE_BYTES_BOUNDS: [u64; 13] = [
    16,
    64,
    256,
    1 << 10,
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
    16 << 20,
    64 << 20,
    256 << 20,
];

/// Exported buckets of a custom shape: 1, 2, 5 steps from 1 to 5 * 10^18, of which a shape exports
/// those inside its range. Whole numbers, because recorded values are.
const ONE_TWO_FIVE_BOUNDS: [u64; 57] = one_two_five_bounds();

const fn one_two_five_bounds() -> [u64; 57] {
    let mut bounds = [0; 57];
    let mut decade = 1u64;
    let mut i = 0;
    while i < bounds.len() {
        bounds[i] = decade;
        bounds[i + 1] = 2 * decade;
        bounds[i + 2] = 5 * decade;
        decade *= 10;
        i += 3;
    }
    bounds
}

impl HistogramConfig {
    /// Latencies in nanoseconds from 1 ns to 60 s at 3 significant figures (0.1% relative
    /// error): about 216 KiB per recording thread per series, allocated on first record.
    /// Exported with buckets at 1, 2.5 and 5 µs, 10, 25, 50 µs... up to 10 s.
    pub const LATENCY_NS: Self =
        Self::new(1, 60_000_000_000, 3).with_bucket_bounds(&LATENCY_NS_BOUNDS);

    /// Request durations in nanoseconds from 100 ns to 60 s at 2 significant figures (1% relative
    /// error): 24 KiB per recording thread per series (a ninth of [`HistogramConfig::LATENCY_NS`]),
    /// for families a service records on every I/O loop for several kinds of request. Exported with [`HistogramConfig::LATENCY_NS`]'s
    /// buckets.
    pub const REQUEST_NS: Self =
        Self::new(100, 60_000_000_000, 2).with_bucket_bounds(&LATENCY_NS_BOUNDS);

    /// Sizes in bytes from 1 B to 1 GiB at 2 significant figures (1% relative error):
    /// about 25 KiB per recording thread per series. Exported with buckets at 16 B, 64 B,
    /// 256 B... (powers of 4) up to 256 MiB.
    pub const SIZE_BYTES: Self = Self::new(1, 1 << 30, 2).with_bucket_bounds(&SIZE_BYTES_BOUNDS);

    /// A custom shape, exported with buckets at 1, 2, 5, 10, 20, 50... (in the recorded unit)
    /// from `lowest_discernible` to below `highest_trackable`. Values above `highest_trackable`
    /// are recorded as `highest_trackable`.
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
            bucket_bounds: &ONE_TWO_FIVE_BOUNDS,
        }
    }

    /// This shape exported with buckets at `bounds` (increasing, in the recorded unit).
    const fn with_bucket_bounds(self, bounds: &'static [u64]) -> Self {
        let mut i = 1;
        while i < bounds.len() {
            assert!(bounds[i - 1] < bounds[i], "bucket bounds must increase");
            i += 1;
        }
        Self {
            bucket_bounds: bounds,
            ..self
        }
    }

    /// Upper bounds (inclusive, in the recorded unit, increasing) of the buckets `/metrics`
    /// exports this shape with, besides `+Inf`. Only those inside the range: a bound below
    /// `lowest_discernible` cannot be told from 0, and one at or above `highest_trackable` would
    /// count what `+Inf` counts, since larger values are recorded as `highest_trackable`.
    pub fn bucket_bounds(&self) -> impl Iterator<Item = u64> + '_ {
        self.bucket_bounds
            .iter()
            .copied()
            .filter(|&bound| bound >= self.lowest_discernible && bound < self.highest_trackable)
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

/// Labels the exporter adds itself (`le` to histogram buckets), and `quantile`, which Prometheus
/// reserves for summaries; services may not use them for their own label.
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
    pub(crate) first_cell: AtomicUsize,
}

const NO_LABEL: &[&str] = &[""];

impl Family {
    pub(crate) const fn labelled(
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

    pub(crate) const fn unlabeled(
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
