//! Global registry of metric families and per-thread slots.
//!
//! Every thread that records gets its own [`ThreadSlot`]: lazily grown arrays of `AtomicU64`
//! cells (counters and gauges) and of [`AtomicHistogram`]s, all written only by that thread with
//! relaxed loads + stores, so recording takes no lock and no atomic read-modify-write. The
//! registry lock is taken only to register a thread or a family (once each) and by readers; it
//! is never on the recording path.
//!
//! Slots of exited threads are folded into per-thread-name "retired" totals so counters never go
//! backwards and memory does not grow with thread churn. `reset()` records per-slot baselines
//! instead of zeroing cells, because zeroing would race with the owner's load + store.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::atomic_histogram::{AtomicHistogram, HistogramBaseline, HistogramCell};
use crate::family::{Family, HistogramConfig, MetricKind};
use crate::snapshot::{HistogramSnapshot, MetricSnapshot, Series, Snapshot, Value};

const SCALARS_PER_CHUNK: usize = 128;
const SCALAR_CHUNKS: usize = 128;
/// Most counter and gauge series (label values count one each) a process can register.
pub const MAX_SCALAR_SERIES: usize = SCALARS_PER_CHUNK * SCALAR_CHUNKS;

const HISTOGRAMS_PER_CHUNK: usize = 16;
const HISTOGRAM_CHUNKS: usize = 64;
/// Most histogram series (label values count one each) a process can register.
pub const MAX_HISTOGRAM_SERIES: usize = HISTOGRAMS_PER_CHUNK * HISTOGRAM_CHUNKS;

/// Aligned so two threads' chunks never share a cache line.
#[repr(align(128))]
struct Chunk<T, const N: usize>([T; N]);

/// A fixed-capacity array whose chunks are allocated on first write, so a thread pays only for
/// the metrics it records.
struct Chunked<T, const N: usize, const M: usize> {
    chunks: [OnceLock<Box<Chunk<T, N>>>; M],
}

impl<T: Default, const N: usize, const M: usize> Chunked<T, N, M> {
    fn new() -> Self {
        Self {
            chunks: std::array::from_fn(|_| OnceLock::new()),
        }
    }

    #[inline]
    fn get_or_create(&self, index: usize) -> &T {
        let chunk = self.chunks[index / N]
            .get_or_init(|| Box::new(Chunk(std::array::from_fn(|_| T::default()))));
        &chunk.0[index % N]
    }

    fn get(&self, index: usize) -> Option<&T> {
        self.chunks[index / N]
            .get()
            .map(|chunk| &chunk.0[index % N])
    }
}

type HistogramSlot = OnceLock<AtomicHistogram>;

/// The cells one thread records into.
pub(crate) struct ThreadSlot {
    scalars: Chunked<AtomicU64, SCALARS_PER_CHUNK, SCALAR_CHUNKS>,
    histograms: Chunked<HistogramSlot, HISTOGRAMS_PER_CHUNK, HISTOGRAM_CHUNKS>,
    /// Set (Release) by the owner's thread-local destructor after its last write.
    exited: AtomicBool,
}

impl ThreadSlot {
    fn new() -> Self {
        Self {
            scalars: Chunked::new(),
            histograms: Chunked::new(),
            exited: AtomicBool::new(false),
        }
    }

    /// Single-writer add: the owner is the only thread storing to its cells.
    #[inline]
    fn add_owned(&self, cell: usize, delta: u64) {
        let cell = self.scalars.get_or_create(cell);
        cell.store(
            cell.load(Ordering::Relaxed).wrapping_add(delta),
            Ordering::Relaxed,
        );
    }

    /// Multi-writer add, for the shared fallback slot.
    fn add_shared(&self, cell: usize, delta: u64) {
        self.scalars
            .get_or_create(cell)
            .fetch_add(delta, Ordering::Relaxed);
    }

    #[inline]
    fn set(&self, cell: usize, value: u64) {
        self.scalars
            .get_or_create(cell)
            .store(value, Ordering::Relaxed);
    }

    fn histogram_or_create(&self, cell: usize, config: &HistogramConfig) -> &AtomicHistogram {
        self.histograms
            .get_or_create(cell)
            .get_or_init(|| AtomicHistogram::new(config))
    }

    fn read(&self, cell: usize) -> u64 {
        self.scalars
            .get(cell)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    fn histogram(&self, cell: usize) -> Option<&AtomicHistogram> {
        self.histograms.get(cell).and_then(OnceLock::get)
    }
}

/// The thread-local owner of a slot; marks it exited when the thread ends.
struct LocalSlot(Arc<ThreadSlot>);

impl Drop for LocalSlot {
    fn drop(&mut self) {
        self.0.exited.store(true, Ordering::Release);
    }
}

thread_local! {
    static LOCAL: LocalSlot = LocalSlot(register_thread());
}

/// Slot for records made while the thread-local is being destroyed (e.g. a gauge decremented
/// by another thread-local's destructor). Shared by all such threads, so writes are atomic RMWs.
static FALLBACK: OnceLock<Arc<ThreadSlot>> = OnceLock::new();

fn fallback() -> &'static ThreadSlot {
    FALLBACK.get_or_init(|| {
        let slot = Arc::new(ThreadSlot::new());
        REGISTRY.lock().slots.push(SlotEntry::new(slot.clone()));
        slot
    })
}

#[inline]
pub(crate) fn add_scalar(cell: usize, delta: u64) {
    if LOCAL
        .try_with(|local| local.0.add_owned(cell, delta))
        .is_err()
    {
        fallback().add_shared(cell, delta);
    }
}

#[inline]
pub(crate) fn set_scalar(cell: usize, value: u64) {
    if LOCAL.try_with(|local| local.0.set(cell, value)).is_err() {
        fallback().set(cell, value);
    }
}

#[inline]
pub(crate) fn record_histogram(cell: usize, config: &HistogramConfig, value: u64, n: u64) {
    let recorded = LOCAL.try_with(|local| {
        local
            .0
            .histogram_or_create(cell, config)
            .record_owned(value, n)
    });
    if recorded.is_err() {
        fallback()
            .histogram_or_create(cell, config)
            .record_shared(value, n);
    }
}

/// A registered family; `first_cell` indexes the scalar or the histogram cells by kind.
#[derive(Clone, Copy)]
struct Descriptor {
    name: &'static str,
    help: &'static str,
    kind: MetricKind,
    label_name: &'static str,
    label_values: &'static [&'static str],
    histogram: HistogramConfig,
    first_cell: usize,
}

impl Descriptor {
    fn cells(&self) -> std::ops::Range<usize> {
        self.first_cell..self.first_cell + self.label_values.len()
    }
}

struct SlotEntry {
    slot: Arc<ThreadSlot>,
    name: Option<String>,
    /// Counter values at the last `reset()`, indexed by cell; missing cells count as 0.
    baseline: Vec<u64>,
    /// Histogram counts at the last `reset()`, indexed by histogram cell.
    histogram_baselines: Vec<Option<HistogramBaseline>>,
}

impl SlotEntry {
    fn new(slot: Arc<ThreadSlot>) -> Self {
        Self {
            slot,
            name: None,
            baseline: Vec::new(),
            histogram_baselines: Vec::new(),
        }
    }

    fn scalar(&self, cell: usize) -> u64 {
        let base = self.baseline.get(cell).copied().unwrap_or(0);
        self.slot.read(cell).wrapping_sub(base)
    }

    /// Whether this thread recorded into histogram `cell`.
    fn has_histogram(&self, cell: usize) -> bool {
        self.slot.histogram(cell).is_some()
    }

    /// Adds this thread's histogram `cell` since the last reset into `into`.
    fn merge_histogram(&self, cell: usize, into: &mut HistogramCell) {
        if let Some(histogram) = self.slot.histogram(cell) {
            let baseline = self.histogram_baselines.get(cell).and_then(Option::as_ref);
            histogram.merge_into(into, baseline);
        }
    }
}

/// Totals of exited threads sharing one thread name (or all unnamed ones).
#[derive(Default)]
struct Retired {
    scalars: Vec<u64>,
    histograms: Vec<Option<HistogramCell>>,
}

struct Registry {
    families: Vec<Descriptor>,
    next_scalar: usize,
    next_histogram: usize,
    slots: Vec<SlotEntry>,
    retired: BTreeMap<Option<String>, Retired>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    families: Vec::new(),
    next_scalar: 0,
    next_histogram: 0,
    slots: Vec::new(),
    retired: BTreeMap::new(),
});

fn register_thread() -> Arc<ThreadSlot> {
    let slot = Arc::new(ThreadSlot::new());
    let mut registry = REGISTRY.lock();
    registry.retire_exited();
    registry.slots.push(SlotEntry::new(slot.clone()));
    slot
}

/// The per-thread cell of `family`'s series `index`; registers the family on first use (a handle
/// calls it with index 0 to be exported, as zero, before any thread records into it).
#[inline]
pub(crate) fn cell(family: &Family, index: usize) -> usize {
    assert!(
        index < family.label_values.len(),
        "label index {index} out of range for metric {} ({} label values)",
        family.name,
        family.label_values.len()
    );
    let first = match family.first_cell.load(Ordering::Relaxed) {
        0 => {
            let first = register_family(family);
            family.first_cell.store(first + 1, Ordering::Relaxed);
            first
        }
        stored => stored - 1,
    };
    first + index
}

/// Assigns cells to `family`, or returns the cells of an identical family registered earlier
/// under the same name (two declarations of one metric share it).
///
/// # Panics
/// If the name is taken by a different metric or by a histogram's `_bucket`/`_sum`/`_count`
/// samples, or the capacity limits are exceeded: programming errors that the first test touching
/// the metric reveals.
#[cold]
fn register_family(family: &Family) -> usize {
    let mut registry = REGISTRY.lock();
    if let Some(existing) = registry.families.iter().find(|d| d.name == family.name) {
        assert!(
            existing.kind == family.kind
                && existing.label_name == family.label_name
                && existing.label_values == family.label_values
                && existing.histogram == family.histogram,
            "metric {} is declared twice with different kinds, labels or histogram shapes",
            family.name
        );
        return existing.first_cell;
    }
    let histogram_sample_of = |histogram: &str, kind: MetricKind, other: &str| {
        kind == MetricKind::Histogram
            && other
                .strip_prefix(histogram)
                .is_some_and(|suffix| ["_bucket", "_sum", "_count"].contains(&suffix))
    };
    if let Some(clash) = registry.families.iter().find(|d| {
        histogram_sample_of(d.name, d.kind, family.name)
            || histogram_sample_of(family.name, family.kind, d.name)
    }) {
        panic!(
            "metric {} clashes with the _bucket/_sum/_count samples of {}",
            family.name, clash.name
        );
    }
    let series = family.label_values.len();
    let (next, limit) = match family.kind {
        MetricKind::Counter | MetricKind::Gauge => (&mut registry.next_scalar, MAX_SCALAR_SERIES),
        MetricKind::Histogram => (&mut registry.next_histogram, MAX_HISTOGRAM_SERIES),
    };
    let first_cell = *next;
    assert!(
        first_cell + series <= limit,
        "registering metric {} exceeds the limit of {limit} {:?} series per process",
        family.name,
        family.kind
    );
    *next += series;
    registry.families.push(Descriptor {
        name: family.name,
        help: family.help,
        kind: family.kind,
        label_name: family.label_name,
        label_values: family.label_values,
        histogram: family.histogram,
        first_cell,
    });
    first_cell
}

/// Names the calling thread; its series are then exported with a `thread="<name>"` label besides
/// the totals. Threads with the same name share one per-thread series, and a name's series keeps
/// counting across thread restarts.
pub fn set_thread_name(name: &str) {
    let Ok(slot) = LOCAL.try_with(|local| local.0.clone()) else {
        return;
    };
    let mut registry = REGISTRY.lock();
    if let Some(entry) = registry
        .slots
        .iter_mut()
        .find(|e| Arc::ptr_eq(&e.slot, &slot))
    {
        entry.name = Some(name.to_owned());
    }
}

/// Zeroes every counter and histogram (memcached's `stats reset`); gauges keep their values.
/// Safe against concurrent recording: live threads' counters are re-based, never written.
pub fn reset() {
    let mut registry = REGISTRY.lock();
    registry.retire_exited();
    let Registry {
        families,
        slots,
        retired,
        ..
    } = &mut *registry;
    for family in families.iter() {
        for cell in family.cells() {
            match family.kind {
                MetricKind::Counter => {
                    for entry in slots.iter_mut() {
                        if entry.baseline.len() <= cell {
                            entry.baseline.resize(cell + 1, 0);
                        }
                        entry.baseline[cell] = entry.slot.read(cell);
                    }
                    for totals in retired.values_mut() {
                        if let Some(value) = totals.scalars.get_mut(cell) {
                            *value = 0;
                        }
                    }
                }
                MetricKind::Gauge => {}
                MetricKind::Histogram => {
                    for entry in slots.iter_mut() {
                        if let Some(histogram) = entry.slot.histogram(cell) {
                            if entry.histogram_baselines.len() <= cell {
                                entry.histogram_baselines.resize(cell + 1, None);
                            }
                            entry.histogram_baselines[cell] = Some(histogram.baseline());
                        }
                    }
                    for totals in retired.values_mut() {
                        if let Some(histogram) = totals.histograms.get_mut(cell) {
                            *histogram = None;
                        }
                    }
                }
            }
        }
    }
}

/// A merged, owned view of every registered metric, sorted by name. Runs on the caller's thread
/// (the admin endpoint's) and holds the registry lock while merging, which delays only threads
/// recording for the very first time; established recorders never wait for it.
pub fn snapshot() -> Snapshot {
    let mut registry = REGISTRY.lock();
    registry.retire_exited();
    let mut families = registry.families.clone();
    families.sort_by_key(|d| d.name);

    let sources: Vec<Source<'_>> = registry
        .slots
        .iter()
        .map(Source::Live)
        .chain(
            registry
                .retired
                .iter()
                .map(|(name, totals)| Source::Retired(name.as_deref(), totals)),
        )
        .collect();
    let mut thread_names: Vec<&str> = sources.iter().filter_map(Source::name).collect();
    thread_names.sort_unstable();
    thread_names.dedup();

    let metrics = families
        .iter()
        .map(|family| MetricSnapshot {
            name: family.name,
            help: family.help,
            kind: family.kind,
            label_name: (!family.label_name.is_empty()).then_some(family.label_name),
            series: family
                .cells()
                .zip(family.label_values)
                .map(|(cell, label_value)| Series {
                    label_value: (!family.label_name.is_empty())
                        .then_some(Cow::Borrowed(*label_value)),
                    ..merge_series(family, cell, &sources, &thread_names)
                })
                .collect(),
        })
        .collect();
    Snapshot::new(metrics)
}

enum Source<'a> {
    Live(&'a SlotEntry),
    Retired(Option<&'a str>, &'a Retired),
}

impl Source<'_> {
    fn name(&self) -> Option<&str> {
        match self {
            Source::Live(entry) => entry.name.as_deref(),
            Source::Retired(name, _) => *name,
        }
    }

    fn scalar(&self, cell: usize) -> u64 {
        match self {
            Source::Live(entry) => entry.scalar(cell),
            Source::Retired(_, totals) => totals.scalars.get(cell).copied().unwrap_or(0),
        }
    }

    fn has_histogram(&self, cell: usize) -> bool {
        match self {
            Source::Live(entry) => entry.has_histogram(cell),
            Source::Retired(_, totals) => matches!(totals.histograms.get(cell), Some(Some(_))),
        }
    }

    fn merge_histogram(&self, cell: usize, into: &mut HistogramCell) {
        match self {
            Source::Live(entry) => entry.merge_histogram(cell, into),
            Source::Retired(_, totals) => {
                if let Some(Some(histogram)) = totals.histograms.get(cell) {
                    into.merge(histogram);
                }
            }
        }
    }
}

/// The total and per-named-thread values of one series; the label is filled in by the caller.
fn merge_series(
    family: &Descriptor,
    cell: usize,
    sources: &[Source<'_>],
    thread_names: &[&str],
) -> Series {
    let thread_index = |source: &Source<'_>| {
        source.name().map(|name| {
            thread_names
                .binary_search(&name)
                .expect("collected from the same sources")
        })
    };
    let (total, threads) = match family.kind {
        MetricKind::Counter | MetricKind::Gauge => {
            let mut total = 0u64;
            let mut per_thread = vec![0u64; thread_names.len()];
            for source in sources {
                let value = source.scalar(cell);
                total = total.wrapping_add(value);
                if let Some(i) = thread_index(source) {
                    per_thread[i] = per_thread[i].wrapping_add(value);
                }
            }
            let value = |raw: u64| match family.kind {
                MetricKind::Counter => Value::Counter(raw),
                _ => Value::Gauge(raw as i64),
            };
            let threads = thread_names
                .iter()
                .zip(per_thread)
                .map(|(name, raw)| ((*name).to_owned(), value(raw)))
                .collect();
            (value(total), threads)
        }
        MetricKind::Histogram => {
            let mut total = HistogramCell::new(&family.histogram);
            let mut per_thread: Vec<Option<HistogramCell>> = vec![None; thread_names.len()];
            for source in sources {
                match thread_index(source) {
                    Some(i) if source.has_histogram(cell) => source.merge_histogram(
                        cell,
                        per_thread[i].get_or_insert_with(|| HistogramCell::new(&family.histogram)),
                    ),
                    Some(_) => {}
                    None => source.merge_histogram(cell, &mut total),
                }
            }
            for named in per_thread.iter().flatten() {
                total.merge(named);
            }
            let threads = thread_names
                .iter()
                .zip(per_thread)
                .filter_map(|(name, cell)| {
                    cell.map(|c| {
                        (
                            (*name).to_owned(),
                            Value::Histogram(HistogramSnapshot::new(c, family.histogram)),
                        )
                    })
                })
                .collect();
            (
                Value::Histogram(HistogramSnapshot::new(total, family.histogram)),
                threads,
            )
        }
    };
    Series {
        label_value: None,
        total,
        threads,
    }
}

impl Registry {
    /// Folds the slots of exited threads into the retired totals of their thread name.
    fn retire_exited(&mut self) {
        let mut i = 0;
        while i < self.slots.len() {
            if !self.slots[i].slot.exited.load(Ordering::Acquire) {
                i += 1;
                continue;
            }
            let entry = self.slots.swap_remove(i);
            let totals = self.retired.entry(entry.name.clone()).or_default();
            for family in &self.families {
                for cell in family.cells() {
                    match family.kind {
                        MetricKind::Counter | MetricKind::Gauge => {
                            if totals.scalars.len() <= cell {
                                totals.scalars.resize(cell + 1, 0);
                            }
                            totals.scalars[cell] =
                                totals.scalars[cell].wrapping_add(entry.scalar(cell));
                        }
                        MetricKind::Histogram => {
                            if entry.has_histogram(cell) {
                                if totals.histograms.len() <= cell {
                                    totals.histograms.resize(cell + 1, None);
                                }
                                let retired = totals.histograms[cell]
                                    .get_or_insert_with(|| HistogramCell::new(&family.histogram));
                                entry.merge_histogram(cell, retired);
                            }
                        }
                    }
                }
            }
        }
    }
}
