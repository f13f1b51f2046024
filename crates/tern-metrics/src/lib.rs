//! Per-thread metrics aggregated on demand, the admin HTTP endpoint and logging setup for tern
//! services. A global stats lock can eat 20-30% of CPU at 8 cores, so every recording thread
//! writes only to its own slot: counters, gauges and histogram buckets (laid out like
//! `hdrhistogram`'s) are `AtomicU64` cells updated with a relaxed load + store by their single
//! owner, with no lock and no atomic read-modify-write. Metrics are `static`s ([`Counter`], [`Gauge`], [`Histogram`]
//! and the labelled [`CounterFamily`], [`HistogramFamily`]) registered on first use; a reader
//! calls [`snapshot()`] to merge all slots (including those of exited threads) into an owned
//! [`Snapshot`] of totals and per-named-thread values that renders to Prometheus text 0.0.4
//! (histograms as Prometheus histograms, buckets exact to the HDR precision) or JSON (histograms
//! with their `hdrhistogram` quantiles). [`register_collector`] adds families read at export time
//! (figures kept elsewhere, label values known only at run time), which [`gather`] includes. [`admin::AdminServer`] serves an index at `/`,
//! `/metrics`, `/healthz`, `/stats` and service JSON routes from its own thread, and
//! [`logging::init`] installs a non-blocking `tracing` subscriber.

pub mod admin;
mod atomic_histogram;
mod collector;
mod family;
pub mod logging;
mod metric;
mod registry;
mod snapshot;

pub use admin::{
    parse_admin_addr, AdminHandle, AdminLimits, AdminServer, AdminServerBuilder, JsonPrefixSource,
    JsonSource,
};
pub use collector::{gather, register_collector, CollectorGuard};
pub use family::{HistogramConfig, MetricKind};
pub use metric::{Counter, CounterFamily, Gauge, Histogram, HistogramFamily};
pub use registry::{reset, set_thread_name, snapshot, MAX_HISTOGRAM_SERIES, MAX_SCALAR_SERIES};
pub use snapshot::{HistogramSnapshot, MetricSnapshot, Series, Snapshot, Value, QUANTILES};
