//! A per-thread histogram whose owner records with a plain load + store and whose reader copies
//! it into a real `hdrhistogram` for quantiles.
//!
//! Written here rather than taken from `hdrhistogram` because that crate's counts are plain
//! integers: sharing one with a reader needs a lock, i.e. two atomic read-modify-writes per
//! record (about 8x the cost of a counter increment). The buckets below use exactly
//! `hdrhistogram`'s index layout (verified against it by property tests), so the reader rebuilds
//! an identical histogram by recording each bucket's lowest value with the bucket's count.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::family::HistogramConfig;

/// One histogram series' data on one thread.
#[derive(Clone, Debug)]
pub(crate) struct HistogramCell {
    pub(crate) histogram: hdrhistogram::Histogram<u64>,
    /// Exact sum of recorded values (before clamping), for the exported `_sum`.
    pub(crate) sum: u64,
}

impl HistogramCell {
    pub(crate) fn new(config: &HistogramConfig) -> Self {
        Self {
            histogram: config.new_histogram(),
            sum: 0,
        }
    }

    pub(crate) fn merge(&mut self, other: &HistogramCell) {
        self.histogram
            .add(&other.histogram)
            .expect("cells of one series share a configuration, so every value fits");
        self.sum = self.sum.saturating_add(other.sum);
    }
}

/// `hdrhistogram`'s bucket arithmetic for one configuration.
#[derive(Clone, Copy, Debug)]
struct Layout {
    unit_magnitude: u8,
    sub_bucket_half_count_magnitude: u8,
    sub_bucket_half_count: u32,
    sub_bucket_mask: u64,
    leading_zero_count_base: u8,
    highest_trackable: u64,
}

impl Layout {
    fn new(config: &HistogramConfig) -> Self {
        let largest_single_unit = 2 * 10u64.pow(u32::from(config.significant_figures()));
        let unit_magnitude = (63 - config.lowest_discernible().leading_zeros()) as u8;
        // ceil(log2(largest_single_unit)); largest_single_unit >= 2.
        let sub_bucket_count_magnitude = (64 - (largest_single_unit - 1).leading_zeros()) as u8;
        let sub_bucket_count = 1u32 << sub_bucket_count_magnitude;
        Self {
            unit_magnitude,
            sub_bucket_half_count_magnitude: sub_bucket_count_magnitude - 1,
            sub_bucket_half_count: sub_bucket_count / 2,
            sub_bucket_mask: (u64::from(sub_bucket_count) - 1) << unit_magnitude,
            leading_zero_count_base: 64 - unit_magnitude - sub_bucket_count_magnitude,
            highest_trackable: config.highest_trackable(),
        }
    }

    /// Bucket of `value`; may be past the end of the counts for values above the range.
    #[inline]
    fn index_for(&self, value: u64) -> usize {
        let bucket =
            self.leading_zero_count_base - (value | self.sub_bucket_mask).leading_zeros() as u8;
        let sub_bucket = (value >> (bucket + self.unit_magnitude)) as usize;
        // Bucket 0 uses its whole range, later buckets only their upper half.
        ((usize::from(bucket) + 1) << self.sub_bucket_half_count_magnitude) + sub_bucket
            - self.sub_bucket_half_count as usize
    }

    /// Lowest value of bucket `index`.
    fn value_for(&self, index: usize) -> u64 {
        let half = self.sub_bucket_half_count as usize;
        let (bucket, sub_bucket) =
            match (index >> self.sub_bucket_half_count_magnitude).checked_sub(1) {
                Some(bucket) => (bucket, (index & (half - 1)) + half),
                None => (0, index),
            };
        (sub_bucket as u64) << (bucket as u32 + u32::from(self.unit_magnitude))
    }
}

/// Counts recorded before a `reset()`, subtracted by readers (only non-zero buckets are kept).
#[derive(Clone, Debug, Default)]
pub(crate) struct HistogramBaseline {
    counts: Vec<(usize, u64)>,
    sum: u64,
}

/// One thread's buckets for one histogram series.
pub(crate) struct AtomicHistogram {
    layout: Layout,
    counts: Box<[AtomicU64]>,
    sum: AtomicU64,
}

impl AtomicHistogram {
    pub(crate) fn new(config: &HistogramConfig) -> Self {
        let len = config.new_histogram().distinct_values();
        Self {
            layout: Layout::new(config),
            counts: (0..len).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
        }
    }

    /// Bucket of `value`. Like `hdrhistogram::Histogram::saturating_record`, values past the
    /// last bucket go to the bucket of the highest trackable value.
    #[inline]
    fn count_for(&self, value: u64) -> &AtomicU64 {
        let index = self.layout.index_for(value);
        match self.counts.get(index) {
            Some(count) => count,
            None => &self.counts[self.layout.index_for(self.layout.highest_trackable)],
        }
    }

    /// Single-writer record: only the owning thread stores to these cells.
    #[inline]
    pub(crate) fn record_owned(&self, value: u64, n: u64) {
        let count = self.count_for(value);
        count.store(
            count.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
        let sum = self
            .sum
            .load(Ordering::Relaxed)
            .saturating_add(value.saturating_mul(n));
        self.sum.store(sum, Ordering::Relaxed);
    }

    /// Multi-writer record, for the shared fallback slot.
    pub(crate) fn record_shared(&self, value: u64, n: u64) {
        self.count_for(value).fetch_add(n, Ordering::Relaxed);
        // The closure always returns Some, so this cannot fail.
        let _ = self
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |sum| {
                Some(sum.saturating_add(value.saturating_mul(n)))
            });
    }

    /// Adds this thread's counts since `baseline` into `into` (same configuration).
    pub(crate) fn merge_into(
        &self,
        into: &mut HistogramCell,
        baseline: Option<&HistogramBaseline>,
    ) {
        let mut base = baseline
            .map_or(&[][..], |b| &b.counts[..])
            .iter()
            .peekable();
        for (index, count) in self.counts.iter().enumerate() {
            let mut count = count.load(Ordering::Relaxed);
            if let Some((_, before)) = base.next_if(|(i, _)| *i == index) {
                count = count.saturating_sub(*before);
            }
            if count > 0 {
                into.histogram
                    .saturating_record_n(self.layout.value_for(index), count);
            }
        }
        let sum = self.sum.load(Ordering::Relaxed);
        into.sum = into
            .sum
            .saturating_add(sum.saturating_sub(baseline.map_or(0, |b| b.sum)));
    }

    /// The current counts, to subtract from later reads.
    pub(crate) fn baseline(&self) -> HistogramBaseline {
        HistogramBaseline {
            counts: self
                .counts
                .iter()
                .enumerate()
                .map(|(i, c)| (i, c.load(Ordering::Relaxed)))
                .filter(|(_, c)| *c > 0)
                .collect(),
            sum: self.sum.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn config_strategy() -> impl Strategy<Value = HistogramConfig> {
        (0u32..40, 1u64..1000, 0u8..=5).prop_map(|(low_shift, span, sigfig)| {
            let low = (1u64 << low_shift).max(1) + span % 3; // powers of two and their neighbours
            let high = low.saturating_mul(2 + span * 1_000_000).max(2 * low);
            HistogramConfig::new(low, high, sigfig)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Every value lands in the bucket hdrhistogram itself would use, and the bucket's lowest
        /// value maps back to that bucket.
        #[test]
        fn buckets_match_hdrhistogram(config in config_strategy(), values in proptest::collection::vec(any::<u64>(), 1..50)) {
            let reference = config.new_histogram();
            let buckets = AtomicHistogram::new(&config);
            prop_assert_eq!(reference.distinct_values(), buckets.counts.len());
            for value in values {
                let index = buckets.layout.index_for(value);
                if index < buckets.counts.len() {
                    let lowest = buckets.layout.value_for(index);
                    prop_assert_eq!(lowest, reference.lowest_equivalent(value), "value {}", value);
                    prop_assert_eq!(buckets.layout.index_for(lowest), index);
                } else {
                    prop_assert!(value > config.highest_trackable());
                }
            }
        }

        /// Recording through the atomic buckets and merging gives the same histogram as
        /// recording into hdrhistogram directly.
        #[test]
        fn merged_copy_equals_direct_recording(values in proptest::collection::vec(0u64..100_000_000_000, 0..300)) {
            let config = HistogramConfig::LATENCY_NS;
            let buckets = AtomicHistogram::new(&config);
            let mut direct = config.new_histogram();
            for value in &values {
                buckets.record_owned(*value, 1);
                direct.saturating_record(*value);
            }
            let mut merged = HistogramCell::new(&config);
            buckets.merge_into(&mut merged, None);
            prop_assert_eq!(merged.histogram.len(), direct.len());
            prop_assert_eq!(merged.histogram.min(), direct.min());
            prop_assert_eq!(merged.histogram.max(), direct.max());
            for q in [0.0, 0.5, 0.9, 0.99, 0.999, 1.0] {
                prop_assert_eq!(merged.histogram.value_at_quantile(q), direct.value_at_quantile(q));
            }
            prop_assert_eq!(merged.sum, values.iter().fold(0u64, |a, v| a.saturating_add(*v)));
        }
    }

    #[test]
    fn baseline_hides_earlier_records() {
        let config = HistogramConfig::LATENCY_NS;
        let buckets = AtomicHistogram::new(&config);
        (0..10).for_each(|v| buckets.record_owned(v * 100, 1));
        let baseline = buckets.baseline();
        buckets.record_owned(500, 1);
        buckets.record_shared(7, 1);
        let mut merged = HistogramCell::new(&config);
        buckets.merge_into(&mut merged, Some(&baseline));
        assert_eq!(merged.histogram.len(), 2);
        assert_eq!(merged.sum, 507);
        assert_eq!(merged.histogram.min(), 7);
    }
}
