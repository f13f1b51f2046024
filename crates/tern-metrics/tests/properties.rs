//! Property tests: arbitrary label values and help texts always render to Prometheus text that a
//! strict parser accepts and that round-trips the values; histogram merges keep every record; the
//! exported buckets count the values at or below their bounds, to the histogram's precision.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use common::{parse_prometheus, sample};
use proptest::prelude::*;
use tern_metrics::{snapshot, CounterFamily, Histogram, HistogramConfig};

/// Each case registers fresh metrics (the registry is process-wide and append-only).
fn unique(prefix: &str) -> &'static str {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    Box::leak(format!("{prefix}_{}", NEXT.fetch_add(1, Ordering::Relaxed)).into_boxed_str())
}

fn leak<T>(value: T) -> &'static T {
    Box::leak(Box::new(value))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_label_values_and_help_render_to_parsable_text(
        values in proptest::collection::btree_set(any::<String>(), 1..5),
        help in any::<String>(),
        counts in proptest::collection::vec(0u64..1_000_000, 5),
    ) {
        let values: Vec<&'static str> = values.into_iter().map(|v| &*Box::leak(v.into_boxed_str())).collect();
        let values: &'static [&'static str] = Box::leak(values.into_boxed_slice());
        let name = Box::leak(format!("{}_total", unique("p_labels")).into_boxed_str());
        let help: &'static str = Box::leak(help.into_boxed_str());
        let family = leak(CounterFamily::new(name, help, "key", values));
        for (index, count) in counts.iter().take(values.len()).enumerate() {
            family.add(index, *count);
        }
        let text = snapshot().to_prometheus(true);
        let samples = parse_prometheus(&text).map_err(TestCaseError::fail)?;
        for (index, value) in values.iter().enumerate() {
            prop_assert_eq!(sample(&samples, name, &[("key", value)]), Some(counts[index] as f64));
        }
    }

    #[test]
    fn merged_histograms_keep_every_record(
        per_thread in proptest::collection::vec(proptest::collection::vec(0u64..10_000_000_000, 0..200), 1..4),
    ) {
        let name = unique("p_hist_ns");
        // 2 significant figures keeps each case's histograms small; snapshots merge all of them.
        let histogram = leak(Histogram::with_config(name, "h", HistogramConfig::new(1, 1 << 34, 2)));
        histogram.register();
        std::thread::scope(|scope| {
            for values in &per_thread {
                scope.spawn(move || values.iter().for_each(|v| histogram.record(*v)));
            }
        });
        let all: Vec<u64> = per_thread.iter().flatten().copied().collect();
        let snap = snapshot();
        let merged = snap.histogram(name, None).unwrap();
        prop_assert_eq!(merged.count(), all.len() as u64);
        prop_assert_eq!(merged.sum(), all.iter().sum::<u64>());
        if let (Some(min), Some(max)) = (all.iter().min(), all.iter().max()) {
            let tolerance = |v: u64| v / 100 + 1; // 2 significant figures
            prop_assert!(merged.min().unwrap().abs_diff(*min) <= tolerance(*min));
            prop_assert!(merged.max().unwrap().abs_diff(*max) <= tolerance(*max));
        } else {
            prop_assert_eq!(merged.min(), None);
        }
    }

    #[test]
    fn buckets_count_the_values_at_or_below_each_bound(
        values in proptest::collection::vec(0u64..20_000_000_000, 0..300),
    ) {
        let name = unique("p_buckets_ns");
        let histogram = leak(Histogram::new(name, "h"));
        histogram.register();
        values.iter().for_each(|v| histogram.record(*v));
        let snap = snapshot();
        let merged = snap.histogram(name, None).unwrap();
        let buckets: Vec<(u64, u64)> = merged.buckets().collect();
        let bounds: Vec<u64> = HistogramConfig::LATENCY_NS.bucket_bounds().collect();
        prop_assert_eq!(buckets.iter().map(|b| b.0).collect::<Vec<_>>(), bounds);
        let at_or_below = |limit: u64| values.iter().filter(|v| **v <= limit).count() as u64;
        for (bound, count) in buckets {
            // Exact, but for values in the bound's own HDR bucket above it: at most 0.1% above.
            let bucket_top = merged.histogram().highest_equivalent(bound);
            prop_assert!(bucket_top - bound <= bound / 1000, "{bound} {bucket_top}");
            prop_assert_eq!(count, at_or_below(bucket_top), "at {}", bound);
            prop_assert!(count >= at_or_below(bound));
        }
    }
}
