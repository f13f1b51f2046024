//! The types the server passes in and gets back.

use std::sync::Arc;

use crate::memory::SegmentMem;

/// Store construction parameters (memcached's `-m`, `-I`, `-M`, ...).
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Hard bound on item memory plus hash tables, in bytes (`-m`).
    pub memory_limit: usize,
    /// Largest item, memcached-style: key + value + 50 bytes (`-I`).
    pub item_size_max: usize,
    /// Size of one log segment; raised to `item_size_max` if smaller.
    pub segment_size: usize,
    /// Number of lock shards (a power of two); 0 picks one from the memory size.
    pub shards: usize,
    /// Evict when full (default); `false` is memcached's `-M`.
    pub evict: bool,
    /// Share of each shard's segments for the probationary FIFO, in percent.
    pub small_queue_percent: u8,
    /// Index slots over all shards to start with, and never to shrink below (a flush included): memcached's
    /// `2^hashpower`, so a cache expected to hold many keys does not grow its tables under load. 0: the
    /// smallest tables. Their memory counts against `memory_limit`, and at most half of it may go to them.
    pub index_slots: usize,
    /// Advise the index tables and segments for transparent huge pages (memcached's `-L`); segments that
    /// are whole huge pages (`segment_size` a multiple of 2 MiB) are also mapped on a huge-page boundary.
    pub huge_pages: bool,
    /// Called, on the calling thread and under the shard's lock, each time a command's lookup finds its
    /// key expired or hidden by a delayed flush_all coming due (and unlinks the item): memcached's
    /// `get_expired` and `get_flushed`, which count such lookups whatever the command (get, touch, storage,
    /// delete, arithmetic, meta). Not for items [`crate::Store::maintain`] expires. Only this rare path
    /// pays for the call.
    pub on_stale_lookup: fn(Stale),
    /// Called, on the calling thread and under the shard's lock, for each item evicted to make room (not for
    /// expired or deleted ones): memcached's `watch evictions`. Keep it short.
    pub on_evict: Option<EvictHook>,
}

/// Why a lookup found its item gone (see [`StoreConfig::on_stale_lookup`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stale {
    /// Past its expiry time.
    Expired,
    /// Stored before a delayed flush_all that is coming due (an immediate flush_all frees every item at
    /// once, so no lookup meets one; memcached finds them until its LRU crawler has reclaimed them).
    /// memcached checks for a flush first, so a flushed item is never counted as expired.
    Flushed,
}

/// What [`StoreConfig::on_evict`] calls.
#[derive(Clone)]
pub struct EvictHook(pub Arc<dyn Fn(&Evicted<'_>) + Send + Sync>);

impl std::fmt::Debug for EvictHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EvictHook")
    }
}

/// An item evicted to make room, as [`StoreConfig::on_evict`] sees it.
#[derive(Debug)]
pub struct Evicted<'a> {
    pub key: &'a [u8],
    /// It was fetched since it was stored.
    pub fetched: bool,
    /// Absolute expiry on the server clock; 0 = never.
    pub exptime: u32,
    /// Last access time on the server clock.
    pub last_access: u32,
    pub value_len: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            memory_limit: 64 << 20,
            item_size_max: 1 << 20,
            segment_size: 1 << 20,
            shards: 0,
            evict: true,
            small_queue_percent: 10,
            index_slots: 0,
            huge_pages: false,
            on_stale_lookup: |_| {},
            on_evict: None,
        }
    }
}

/// A rejected [`StoreConfig`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// `item_size_max` outside 1 KiB ..= 1 GiB.
    ItemSizeMax(usize),
    /// `segment_size` outside 64 KiB ..= 1 GiB or not a multiple of 4096.
    SegmentSize(usize),
    /// `memory_limit` holds fewer than two segments.
    MemoryLimit(usize),
    /// `shards` not a power of two up to 256, or too few for the memory
    /// (a shard addresses up to 4096 segments; it should need at most half).
    Shards(usize),
    /// `small_queue_percent` outside 1 ..= 90.
    SmallQueuePercent(u8),
    /// The kernel refused the initial mappings.
    Mmap,
    /// `index_slots` would take more than half of `memory_limit`.
    IndexSlots(usize),
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigError::ItemSizeMax(v) => write!(f, "item size max {v} outside 1 KiB..=1 GiB"),
            ConfigError::SegmentSize(v) => {
                write!(
                    f,
                    "segment size {v} outside 64 KiB..=1 GiB or not page-aligned"
                )
            }
            ConfigError::MemoryLimit(v) => write!(f, "memory limit {v} is below two segments"),
            ConfigError::Shards(v) => {
                write!(
                    f,
                    "shard count {v}: need a power of two <= 256, >= segments / 2048"
                )
            }
            ConfigError::SmallQueuePercent(v) => {
                write!(f, "small queue percent {v} outside 1..=90")
            }
            ConfigError::Mmap => write!(f, "could not map memory for the store"),
            ConfigError::IndexSlots(v) => {
                write!(
                    f,
                    "an index of {v} slots would take over half the memory limit"
                )
            }
        }
    }
}

impl std::error::Error for ConfigError {}

/// A borrowed look at one item, valid while the closure runs.
#[derive(Debug, Clone, Copy)]
pub struct ItemView<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub flags: u32,
    /// Absolute expiry on the server clock; 0 = never.
    pub exptime: u32,
    pub cas: u64,
    /// Last access time on the server clock (before this access).
    pub last_access: u32,
    /// Fetched at least once before this access (meta `h`).
    pub fetched: bool,
    /// Marked stale by `md I` / `ms I` (meta `X`).
    pub stale: bool,
    /// A recache token was already handed out (meta `Z`).
    pub token_sent: bool,
    /// The key is binary (memcached's `ITEM_KEY_BINARY`): stored by `ms` with `b`, so meta replies echo
    /// it in base64. Items made by `mg N`/`ma N`, by append/prepend, or by an incr that outgrew the value
    /// are never binary, as in memcached.
    pub key_binary: bool,
    /// The memory the item lives in, for [`ItemView::share_value`].
    pub(crate) segment: &'a Arc<SegmentMem>,
}

impl ItemView<'_> {
    /// The value as a [`SharedValue`]: the same bytes, readable after the
    /// store's lock is released and for as long as the caller keeps it,
    /// without a copy (for sending a large value to a slow reader).
    pub fn share_value(&self) -> SharedValue {
        SharedValue {
            _segment: Arc::clone(self.segment),
            ptr: self.value.as_ptr(),
            len: self.value.len(),
        }
    }
}

/// An item's value shared with the store ([`ItemView::share_value`]). While it
/// lives, the segment it is in stays mapped and is not reused: an item
/// replaced, deleted or evicted meanwhile is gone from the store, but these
/// bytes stay as they were, and the memory returns to the store's pool when
/// the last holder drops it. Holders therefore hold memory of the budget:
/// keep them for as long as sending takes, not longer.
pub struct SharedValue {
    _segment: Arc<SegmentMem>,
    ptr: *const u8,
    len: usize,
}

// SAFETY: the bytes are never written while a holder exists (values are not
// written in place, and the segment is not reused until the last holder
// drops), so reading them from any thread is sound.
unsafe impl Send for SharedValue {}
// SAFETY: as above.
unsafe impl Sync for SharedValue {}

impl AsRef<[u8]> for SharedValue {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `ptr..ptr + len` is a value inside the segment `_segment`
        // keeps mapped and unwritten (see the type's doc).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl std::fmt::Debug for SharedValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedValue({} bytes)", self.len)
    }
}

/// Which storage command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreMode {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
}

/// A storage request; `cas: Some(_)` turns Set/Replace into memcached's CAS
/// and makes Append/Prepend check the token when it is nonzero.
#[derive(Debug, Clone, Copy)]
pub struct StoreRequest<'a> {
    pub mode: StoreMode,
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub flags: u32,
    pub exptime: u32,
    pub cas: Option<u64>,
    /// Meta `I`: a CAS lower than the item's stores the value as stale.
    pub invalidate: bool,
    /// The key is binary (`ms` with `b`); see [`ItemView::key_binary`].
    pub key_binary: bool,
}

impl<'a> StoreRequest<'a> {
    /// A plain `set` with flags 0 and no expiry.
    pub fn set(key: &'a [u8], value: &'a [u8]) -> Self {
        StoreRequest {
            mode: StoreMode::Set,
            key,
            value,
            flags: 0,
            exptime: 0,
            cas: None,
            invalidate: false,
            key_binary: false,
        }
    }
}

/// Result of a storage command, as memcached reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOutcome {
    /// `STORED`, with the item's new CAS.
    Stored { cas: u64 },
    /// `NOT_STORED`.
    NotStored,
    /// `EXISTS` (CAS mismatch).
    Exists,
    /// `NOT_FOUND` (CAS on a missing item).
    NotFound,
    /// `SERVER_ERROR object too large for cache` (also for keys over 250 bytes).
    TooLarge,
    /// `SERVER_ERROR out of memory storing object`.
    OutOfMemory,
}

/// Result of delete / meta delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteOutcome {
    Deleted,
    NotFound,
    /// CAS token given and different.
    Exists,
}

/// Options for incr/decr beyond the delta (meta `ma`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ArithOptions {
    /// Compare token; 0 or `None` means no check.
    pub cas: Option<u64>,
    /// On a miss, create the item with this (initial value, exptime).
    pub vivify: Option<(u64, u32)>,
    /// New exptime for the item (meta `T`).
    pub exptime: Option<u32>,
    /// memcached cannot rewrite the item in place (something else, such as a reply not yet written, still
    /// references it): the result goes into a new item, exactly as when it outgrows the old value (see
    /// [`ArithOutcome::Value`]).
    pub replace: bool,
}

/// Result of incr/decr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithOutcome {
    /// The new value (or the initial one if vivified), CAS and the exptime stored.
    Value {
        value: u64,
        cas: u64,
        exptime: u32,
        /// The exptime before this call (0 for an item it created). When the new number outgrows the old
        /// one (or [`ArithOptions::replace`]), memcached makes a new item: it keeps this exptime whatever
        /// [`ArithOptions::exptime`] says, holds the bare digits (no space padding), and is neither
        /// fetched, nor stale, nor marked binary, nor has a recache token out.
        exptime_before: u32,
        /// The key was missing and the item made from [`ArithOptions::vivify`].
        created: bool,
    },
    NotFound,
    /// `CLIENT_ERROR cannot increment or decrement non-numeric value`.
    NonNumeric,
    Exists,
    OutOfMemory,
}

/// Meta get (`mg`) options that change item state.
#[derive(Debug, Clone, Copy, Default)]
pub struct MetaGetOptions {
    /// `T`: new absolute exptime (0 = never).
    pub touch: Option<u32>,
    /// `N`: on a miss create an empty item with this exptime and win.
    pub vivify: Option<u32>,
    /// `R`: win if the item's exptime is nonzero and below this absolute time.
    pub recache: Option<u32>,
    /// `R` comes before `T` in the request: memcached then judges it against the exptime before the
    /// touch (flags apply in request order); otherwise against the exptime after it.
    pub recache_before_touch: bool,
    /// Do not update access time / fetched / frequency.
    pub no_bump: bool,
}

/// What `mg` sees: the item (access fields before this access, exptime after
/// `T`) and the stampede-protection outcome.
#[derive(Debug, Clone, Copy)]
pub struct MetaView<'a> {
    pub item: ItemView<'a>,
    /// Exptime before `T` applied.
    pub exptime_before: u32,
    /// The item was created by `N` in this call.
    pub created: bool,
    /// `W`: this client won the right to recache.
    pub won: bool,
    /// `Z`: a token was already sent to another client.
    pub already_won: bool,
    /// `X`: the item is stale.
    pub stale: bool,
}

/// One line of `lru_crawler metadump`.
#[derive(Debug, Clone, Copy)]
pub struct DumpEntry<'a> {
    pub key: &'a [u8],
    pub exptime: u32,
    pub last_access: u32,
    pub cas: u64,
    pub fetched: bool,
    pub class_id: u8,
    /// Bytes the item occupies in its segment.
    pub size: usize,
    /// The value's length.
    pub value_len: usize,
    /// The client flags.
    pub flags: u32,
}

/// Per-class figures for `stats items` / `stats slabs` (see the crate doc
/// for the mapping of classes onto queues).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClassStats {
    pub class_id: u8,
    /// Items linked in this class (`number`).
    pub items: u64,
    /// Bytes those items occupy (`mem_requested`).
    pub bytes: u64,
    /// Segments owned by the class (`total_pages`); chunk size = segment size.
    pub segments: u64,
    pub evicted: u64,
    pub evicted_nonzero: u64,
    pub evicted_unfetched: u64,
    /// Items that were due for eviction but had been hit, and were kept.
    pub evicted_active: u64,
    /// Seconds since last access of the most recently evicted item.
    pub evicted_time: u32,
    pub expired_unfetched: u64,
    /// Expired items whose memory was taken back.
    pub reclaimed: u64,
    /// Items reclaimed by the crawler: `lru_crawler crawl`, or the background step while the crawler is on.
    pub crawler_reclaimed: u64,
    /// Live items the crawler examined: every item of the segments an `lru_crawler crawl` goes through;
    /// the background step reads only segments holding an item whose time has come, and skips items
    /// without a TTL (memcached's crawler checks every item it passes).
    pub crawler_items_checked: u64,
    /// Segments chosen for eviction whose memory a reply still referenced, so that eviction went on to
    /// another victim (memcached counts items at the LRU tail it skips because a reply holds them).
    pub lrutail_reflocked: u64,
    pub outofmemory: u64,
    /// Open time of the class's oldest segment (0 if it has none).
    pub oldest_item_time: u32,
}

/// Store-wide figures in memcached's terms.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub curr_items: u64,
    pub total_items: u64,
    pub bytes: u64,
    pub evictions: u64,
    pub reclaimed: u64,
    pub expired_unfetched: u64,
    pub evicted_unfetched: u64,
    pub evicted_active: u64,
    pub crawler_reclaimed: u64,
    pub crawler_items_checked: u64,
    pub lrutail_reflocked: u64,
    pub outofmemory: u64,
    pub limit_maxbytes: u64,
    /// Bytes mapped for segments and hash tables (`total_malloced`).
    pub total_malloced: u64,
    pub malloc_fails: u64,
    pub segment_size: u64,
    pub segments_mapped: u64,
    pub segments_free: u64,
    pub hash_bytes: u64,
    /// Slots of all shards' index tables.
    pub hash_slots: u64,
    /// Shards copying their index into a larger one as the stats were taken (each does it at once, under
    /// its lock, when its table is too full; memcached's `hash_is_expanding`).
    pub hash_expanding: u64,
    pub classes: Vec<ClassStats>,
}

/// What one step of `lru_crawler crawl` found ([`Store::crawl_segment`](crate::Store::crawl_segment)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CrawlReport {
    /// Live items checked.
    pub checked: u64,
    /// Of those, expired or flushed ones unlinked.
    pub reclaimed: u64,
}

/// What one [`crate::Store::maintain`] call did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MaintainReport {
    /// Segments whose items were checked for expiry (only those holding an
    /// item whose exptime has come).
    pub segments_scanned: u64,
    pub items_expired: u64,
    pub segments_freed: u64,
}
