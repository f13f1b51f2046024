//! Merged, owned views of all metrics, and their Prometheus text (0.0.4) and JSON renderings.
//!
//! Histograms go to Prometheus as `histogram`s: cumulative `_bucket{le="..."}` counts at the bounds
//! of their [`HistogramConfig`], then `_sum` and `_count`, which a Prometheus server can add up
//! across instances and turn into quantiles with `histogram_quantile`. The JSON keeps the merged
//! HDR histogram's own quantiles (p50 ... p99.99), exact to its precision.

use std::borrow::Cow;
use std::fmt::{Display, Write as _};

use serde_json::{json, Map, Value as Json};

use crate::atomic_histogram::HistogramCell;
use crate::family::{HistogramConfig, MetricKind};

/// Quantiles `/stats` gives for every histogram, with their JSON key.
pub const QUANTILES: [(f64, &str); 5] = [
    (0.5, "p50"),
    (0.9, "p90"),
    (0.99, "p99"),
    (0.999, "p99_9"),
    (0.9999, "p99_99"),
];

/// Every registered metric, merged over all threads at one moment, sorted by name.
#[derive(Clone, Debug)]
pub struct Snapshot {
    metrics: Vec<MetricSnapshot>,
}

/// One metric family.
#[derive(Clone, Debug)]
pub struct MetricSnapshot {
    /// Metric name as declared.
    pub name: &'static str,
    /// `# HELP` text.
    pub help: &'static str,
    /// Counter, gauge or histogram.
    pub kind: MetricKind,
    /// The family's label name, if it has one.
    pub label_name: Option<&'static str>,
    /// One series per label value (exactly one for an unlabeled metric).
    pub series: Vec<Series>,
}

/// One series: its total over all threads and its value on each named thread.
#[derive(Clone, Debug)]
pub struct Series {
    /// The label value, for a labelled family (owned for a collected family's values, such as campaign ids).
    pub label_value: Option<Cow<'static, str>>,
    /// Sum (or merge) over every thread, live or exited.
    pub total: Value,
    /// Per named thread (see [`crate::set_thread_name`]), sorted by name. Histograms list only
    /// threads that recorded into them.
    pub threads: Vec<(String, Value)>,
}

/// A merged value.
#[derive(Clone, Debug)]
pub enum Value {
    /// Counter total since start or the last [`crate::reset`].
    Counter(u64),
    /// Gauge value: the sum of every thread's part.
    Gauge(i64),
    /// A gauge that is a fraction, such as a hit ratio; only collected families have them.
    Ratio(f64),
    /// Merged distribution.
    Histogram(HistogramSnapshot),
}

/// A merged histogram with its exact sum.
#[derive(Clone, Debug)]
pub struct HistogramSnapshot {
    cell: HistogramCell,
    config: HistogramConfig,
}

impl HistogramSnapshot {
    pub(crate) fn new(cell: HistogramCell, config: HistogramConfig) -> Self {
        Self { cell, config }
    }

    /// Number of recorded values.
    pub fn count(&self) -> u64 {
        self.cell.histogram.len()
    }

    /// Exact sum of recorded values (saturating at `u64::MAX`).
    pub fn sum(&self) -> u64 {
        self.cell.sum
    }

    /// Smallest recorded value (to the histogram's precision), `None` if empty.
    pub fn min(&self) -> Option<u64> {
        self.non_empty().map(|h| h.min())
    }

    /// Largest recorded value (to the histogram's precision), `None` if empty.
    pub fn max(&self) -> Option<u64> {
        self.non_empty().map(|h| h.max())
    }

    /// Mean of recorded values, `None` if empty.
    pub fn mean(&self) -> Option<f64> {
        self.non_empty().map(|h| h.mean())
    }

    /// Value at quantile `q` in `0.0..=1.0`, `None` if empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        self.non_empty().map(|h| h.value_at_quantile(q))
    }

    /// The exported buckets: for each of the shape's [`HistogramConfig::bucket_bounds`], the
    /// bound and how many values were at or below it (cumulative, as Prometheus' `le`), to the
    /// histogram's precision: a value counts under a bound when it fell in the HDR bucket of the
    /// bound or below, so one a hair above a bound (within 0.1% at 3 significant figures) may
    /// count under it. The `+Inf` bucket is [`HistogramSnapshot::count`].
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let histogram = &self.cell.histogram;
        // One pass over the non-empty HDR buckets, in increasing order like the bounds.
        let mut recorded = histogram.iter_recorded().peekable();
        let mut at_or_below = 0;
        self.config.bucket_bounds().map(move |bound| {
            while let Some(bucket) =
                recorded.next_if(|b| histogram.lowest_equivalent(b.value_iterated_to()) <= bound)
            {
                at_or_below += bucket.count_at_value();
            }
            (bound, at_or_below)
        })
    }

    /// The merged `hdrhistogram`, for callers that want more than the quantiles and buckets.
    pub fn histogram(&self) -> &hdrhistogram::Histogram<u64> {
        &self.cell.histogram
    }

    fn non_empty(&self) -> Option<&hdrhistogram::Histogram<u64>> {
        (!self.cell.histogram.is_empty()).then_some(&self.cell.histogram)
    }

    fn to_json(&self) -> Json {
        let mut object = Map::new();
        object.insert("count".into(), self.count().into());
        object.insert("sum".into(), self.sum().into());
        object.insert("min".into(), self.min().into());
        object.insert("max".into(), self.max().into());
        object.insert("mean".into(), self.mean().into());
        for (q, key) in QUANTILES {
            object.insert(key.into(), self.quantile(q).into());
        }
        Json::Object(object)
    }
}

impl Value {
    /// The sum of two scalar values of one kind (a ratio keeps the first: ratios do not add); a
    /// histogram keeps the first.
    fn plus(&self, other: &Value) -> Value {
        match (self, other) {
            (Value::Counter(a), Value::Counter(b)) => Value::Counter(a.wrapping_add(*b)),
            (Value::Gauge(a), Value::Gauge(b)) => Value::Gauge(a.wrapping_add(*b)),
            _ => self.clone(),
        }
    }

    fn to_json(&self) -> Json {
        match self {
            Value::Counter(v) => (*v).into(),
            Value::Gauge(v) => (*v).into(),
            Value::Ratio(v) => (*v).into(),
            Value::Histogram(h) => h.to_json(),
        }
    }
}

impl Snapshot {
    pub(crate) fn new(metrics: Vec<MetricSnapshot>) -> Self {
        Self { metrics }
    }

    /// Adds collected families (see [`crate::register_collector`]): a family whose name is already here
    /// gains their series, and a series whose label value is already there adds up (two caches in one
    /// process hold the sum of their items); the list stays sorted by name.
    pub(crate) fn merge_collected(&mut self, collected: Vec<MetricSnapshot>) {
        for family in collected {
            match self.metrics.binary_search_by(|m| m.name.cmp(family.name)) {
                Ok(i) => {
                    let existing = &mut self.metrics[i];
                    for series in family.series {
                        match existing
                            .series
                            .iter_mut()
                            .find(|s| s.label_value == series.label_value)
                        {
                            Some(s) => s.total = s.total.plus(&series.total),
                            None => existing.series.push(series),
                        }
                    }
                }
                Err(i) => self.metrics.insert(i, family),
            }
        }
    }

    /// All metrics, sorted by name.
    pub fn metrics(&self) -> &[MetricSnapshot] {
        &self.metrics
    }

    /// The metric named `name`.
    pub fn metric(&self, name: &str) -> Option<&MetricSnapshot> {
        self.metrics
            .binary_search_by(|m| m.name.cmp(name))
            .ok()
            .map(|i| &self.metrics[i])
    }

    /// The series of `name` with label value `label_value` (`None` for an unlabeled metric).
    pub fn series(&self, name: &str, label_value: Option<&str>) -> Option<&Series> {
        self.metric(name)?
            .series
            .iter()
            .find(|s| s.label_value.as_deref() == label_value)
    }

    /// Total of the unlabeled counter `name`.
    pub fn counter(&self, name: &str) -> Option<u64> {
        self.counter_with(name, None)
    }

    /// Total of counter `name`'s series `label_value`.
    pub fn counter_with(&self, name: &str, label_value: Option<&str>) -> Option<u64> {
        match self.series(name, label_value)?.total {
            Value::Counter(v) => Some(v),
            _ => None,
        }
    }

    /// Value of the unlabeled gauge `name`.
    pub fn gauge(&self, name: &str) -> Option<i64> {
        match self.series(name, None)?.total {
            Value::Gauge(v) => Some(v),
            _ => None,
        }
    }

    /// Merged histogram of `name`'s series `label_value`.
    pub fn histogram(&self, name: &str, label_value: Option<&str>) -> Option<&HistogramSnapshot> {
        match &self.series(name, label_value)?.total {
            Value::Histogram(h) => Some(h),
            _ => None,
        }
    }

    /// Prometheus text exposition format 0.0.4. Totals carry no `thread` label; with
    /// `per_thread`, each named thread's series follows with `thread="<name>"`. A histogram
    /// series is its `_bucket` lines (labels: the family's, `thread`, then `le`), `_sum` and
    /// `_count`.
    pub fn to_prometheus(&self, per_thread: bool) -> String {
        let mut out = String::with_capacity(256 * self.metrics.len());
        for metric in &self.metrics {
            let type_name = match metric.kind {
                MetricKind::Counter => "counter",
                MetricKind::Gauge => "gauge",
                MetricKind::Histogram => "histogram",
            };
            // Writing to a String cannot fail.
            let _ = writeln!(out, "# HELP {} {}", metric.name, escape_help(metric.help));
            let _ = writeln!(out, "# TYPE {} {type_name}", metric.name);
            for series in &metric.series {
                let label = metric.label_name.zip(series.label_value.as_deref());
                write_sample(&mut out, metric.name, label, None, &series.total);
                if per_thread {
                    for (thread, value) in &series.threads {
                        write_sample(&mut out, metric.name, label, Some(thread), value);
                    }
                }
            }
        }
        out
    }

    /// JSON: `{ name: { "type", "help", "total", "threads": {thread: value} } }` for unlabeled
    /// metrics; labelled ones have `"label"` and `"series": { value: { "total", "threads" } }`.
    /// Counters and gauges are numbers; histograms are objects with count, sum, min, max, mean
    /// and p50..p99_99 (null when empty).
    pub fn to_json(&self) -> Json {
        let mut root = Map::new();
        for metric in &self.metrics {
            let type_name = match metric.kind {
                MetricKind::Counter => "counter",
                MetricKind::Gauge => "gauge",
                MetricKind::Histogram => "histogram",
            };
            let series_json = |series: &Series| {
                let threads: Map<String, Json> = series
                    .threads
                    .iter()
                    .map(|(name, value)| (name.clone(), value.to_json()))
                    .collect();
                (series.total.to_json(), Json::Object(threads))
            };
            let mut object = json!({ "type": type_name, "help": metric.help });
            match metric.label_name {
                None => {
                    let (total, threads) = metric.series.first().map(series_json).unzip();
                    object["total"] = total.unwrap_or(Json::Null);
                    object["threads"] = threads.unwrap_or_default();
                }
                Some(label) => {
                    object["label"] = label.into();
                    let series: Map<String, Json> = metric
                        .series
                        .iter()
                        .map(|s| {
                            let (total, threads) = series_json(s);
                            (
                                s.label_value.as_deref().unwrap_or_default().to_owned(),
                                json!({ "total": total, "threads": threads }),
                            )
                        })
                        .collect();
                    object["series"] = Json::Object(series);
                }
            }
            root.insert(metric.name.to_owned(), object);
        }
        Json::Object(root)
    }
}

fn write_sample(
    out: &mut String,
    name: &str,
    label: Option<(&str, &str)>,
    thread: Option<&str>,
    value: &Value,
) {
    let mut labels = String::new();
    if let Some((label_name, label_value)) = label {
        push_label(&mut labels, label_name, label_value);
    }
    if let Some(thread) = thread {
        push_label(&mut labels, "thread", thread);
    }
    match value {
        Value::Counter(v) => write_line(out, name, "", &labels, v),
        Value::Gauge(v) => write_line(out, name, "", &labels, v),
        Value::Ratio(v) => write_line(out, name, "", &labels, v),
        Value::Histogram(h) => {
            let buckets = h
                .buckets()
                .map(|(bound, count)| (bound.to_string(), count))
                .chain(std::iter::once(("+Inf".to_owned(), h.count())));
            for (le, count) in buckets {
                let mut with_le = labels.clone();
                push_label(&mut with_le, "le", &le);
                write_line(out, name, "_bucket", &with_le, &count);
            }
            write_line(out, name, "_sum", &labels, &h.sum());
            write_line(out, name, "_count", &labels, &h.count());
        }
    }
}

fn write_line(out: &mut String, name: &str, suffix: &str, labels: &str, value: &dyn Display) {
    // Writing to a String cannot fail.
    let _ = writeln!(out, "{name}{suffix}{} {value}", braced(labels));
}

fn push_label(labels: &mut String, name: &str, value: &str) {
    if !labels.is_empty() {
        labels.push(',');
    }
    labels.push_str(name);
    labels.push_str("=\"");
    for c in value.chars() {
        match c {
            '\\' => labels.push_str("\\\\"),
            '"' => labels.push_str("\\\""),
            '\n' => labels.push_str("\\n"),
            c => labels.push(c),
        }
    }
    labels.push('"');
}

fn braced(labels: &str) -> String {
    if labels.is_empty() {
        String::new()
    } else {
        format!("{{{labels}}}")
    }
}

fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        let mut labels = String::new();
        push_label(&mut labels, "a", "x\"y\\z\nw");
        assert_eq!(labels, r#"a="x\"y\\z\nw""#);
    }

    #[test]
    fn help_is_escaped() {
        assert_eq!(escape_help("a\\b\nc\"d"), "a\\\\b\\nc\"d");
    }
}
