//! What the cache holds, as gauges on the admin endpoint's `/metrics` (and its dashboard): read from the store
//! when the endpoint gathers, so nothing on the request path changes for them.

use std::sync::{Arc, Weak};

use tern_metrics::MetricSnapshot;

use crate::cache::Cache;
use crate::stats::{GET_HITS, GET_MISSES};

/// What the cache holds, for `/metrics` and the dashboard, read from the store (and the hit ratio from the
/// counters) when the admin endpoint gathers, while the cache runs: the figures `stats` reports as
/// `curr_items`, `bytes`, `limit_maxbytes`, `total_malloced` and `evictions`.
pub fn store_gauges(cache: &Arc<Cache>) -> tern_metrics::CollectorGuard {
    let cache: Weak<Cache> = Arc::downgrade(cache);
    tern_metrics::register_collector(move |snapshot| {
        let Some(cache) = cache.upgrade() else {
            return Vec::new();
        };
        let store = cache.store_stats();
        let gauge = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
        let hits = snapshot.counter(GET_HITS.name()).unwrap_or(0);
        let misses = snapshot.counter(GET_MISSES.name()).unwrap_or(0);
        vec![
            MetricSnapshot::gauge(
                "tern_cache_items",
                "Items stored now (curr_items)",
                gauge(store.curr_items),
            ),
            MetricSnapshot::gauge(
                "tern_cache_bytes",
                "Bytes the stored items take (bytes)",
                gauge(store.bytes),
            ),
            MetricSnapshot::gauge(
                "tern_cache_limit_bytes",
                "Memory the items may take (-m, limit_maxbytes)",
                gauge(store.limit_maxbytes),
            ),
            MetricSnapshot::gauge(
                "tern_cache_mapped_bytes",
                "Memory mapped for segments and the index (total_malloced)",
                gauge(store.total_malloced),
            ),
            MetricSnapshot::counter(
                "tern_cache_evictions_total",
                "Live items evicted to make room (evictions)",
                store.evictions,
            ),
            MetricSnapshot::ratio(
                "tern_cache_hit_ratio",
                "get_hits / (get_hits + get_misses) since start or stats reset; NaN before any get",
                hits as f64 / (hits + misses) as f64,
            ),
        ]
    })
}
