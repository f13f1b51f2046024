//! Families read when an exporter gathers, for figures a service already keeps elsewhere (the cache's
//! items and bytes live in its store, a campaign's spend in the pacer's ledger) or whose label values are
//! known only at run time (campaign ids). Recording threads never see them: [`gather`] calls each
//! registered collector on the exporter's thread, after the registered families are merged.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::family::MetricKind;
use crate::snapshot::{MetricSnapshot, Series, Snapshot, Value};

type Collect = Arc<dyn Fn(&Snapshot) -> Vec<MetricSnapshot> + Send + Sync>;

static COLLECTORS: Mutex<Vec<(u64, Collect)>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// Registers `collect`, called by [`gather`] with the registered families' snapshot (for figures derived
/// from them, such as a hit ratio) for the families it reports (build them with [`MetricSnapshot::gauge`],
/// [`MetricSnapshot::counter`] and [`MetricSnapshot::labelled`]), until the returned guard is dropped. It
/// runs on the exporter's thread and must not block for long.
#[must_use = "the collector is removed when the guard is dropped"]
pub fn register_collector(
    collect: impl Fn(&Snapshot) -> Vec<MetricSnapshot> + Send + Sync + 'static,
) -> CollectorGuard {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    COLLECTORS.lock().push((id, Arc::new(collect)));
    CollectorGuard { id }
}

/// Keeps a collector registered; dropping it removes the collector.
pub struct CollectorGuard {
    id: u64,
}

impl Drop for CollectorGuard {
    fn drop(&mut self) {
        COLLECTORS.lock().retain(|(id, _)| *id != self.id);
    }
}

/// What an exporter shows: [`crate::snapshot`] of the registered families plus every collector's.
pub fn gather() -> Snapshot {
    let mut snapshot = crate::snapshot();
    // Called outside the lock, so a collector that itself gathers or registers cannot deadlock.
    let collectors: Vec<Collect> = COLLECTORS.lock().iter().map(|(_, c)| c.clone()).collect();
    let collected: Vec<MetricSnapshot> = collectors.iter().flat_map(|c| c(&snapshot)).collect();
    snapshot.merge_collected(collected);
    snapshot
}

impl MetricSnapshot {
    /// An unlabeled gauge with `value`.
    pub fn gauge(name: &'static str, help: &'static str, value: i64) -> Self {
        Self::unlabeled(name, help, MetricKind::Gauge, Value::Gauge(value))
    }

    /// An unlabeled gauge that is a fraction (a hit ratio): NaN when it is undefined.
    pub fn ratio(name: &'static str, help: &'static str, value: f64) -> Self {
        Self::unlabeled(name, help, MetricKind::Gauge, Value::Ratio(value))
    }

    /// An unlabeled counter with `value` (its name ends in `_total`).
    pub fn counter(name: &'static str, help: &'static str, value: u64) -> Self {
        Self::unlabeled(name, help, MetricKind::Counter, Value::Counter(value))
    }

    /// A gauge family with label `label_name` and one series per `(label value, value)`.
    pub fn labelled(
        name: &'static str,
        help: &'static str,
        label_name: &'static str,
        series: impl IntoIterator<Item = (String, i64)>,
    ) -> Self {
        Self {
            name,
            help,
            kind: MetricKind::Gauge,
            label_name: Some(label_name),
            series: series
                .into_iter()
                .map(|(label, value)| Series {
                    label_value: Some(Cow::Owned(label)),
                    total: Value::Gauge(value),
                    threads: Vec::new(),
                })
                .collect(),
        }
    }

    fn unlabeled(name: &'static str, help: &'static str, kind: MetricKind, total: Value) -> Self {
        Self {
            name,
            help,
            kind,
            label_name: None,
            series: vec![Series {
                label_value: None,
                total,
                threads: Vec::new(),
            }],
        }
    }
}
