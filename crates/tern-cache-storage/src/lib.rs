//! The item store behind `tern cache`: memcached 1.6.18 item semantics
//! (get/gets/gat, set/add/replace/append/prepend/cas, incr/decr, touch,
//! delete, delayed flush_all, the meta commands' stampede state) over a
//! log-structured memory layout in the style of Segcache, with S3-FIFO
//! eviction at segment granularity. Items are appended to segments (1 MiB, or
//! `-I` if larger) mapped straight from the kernel and counted against a hard
//! budget (`-m`, changeable at run time) that also covers the hash tables; any
//! segment serves any item size, so memory never calcifies in a size class.
//! An item costs its key and value plus a 5-byte header in the common case
//! (flags, TTL and an explicit CAS are stored only when present; the CAS of an
//! item never moved is its segment's CAS base plus its offset) and 6-7 bytes
//! of index (64-byte buckets of 12 slots, a 1-byte tag and a 4-byte location
//! each, 75-90% full): 128 bytes of RSS for a 16+100-byte item against
//! memcached's 201. Keys hash to one of
//! N shards, each a mutex over its own index, segments and counters, so
//! threads on different shards never contend and stats are summed on read;
//! reads take the lock too because they update access time, the fetched flag
//! and the eviction frequency in place. Callbacks such as [`Store::get`]'s run
//! under that lock: they must not call back into the store. Multi-key reads
//! go through a [`Lookahead`], which prefetches the index lines and items of
//! the keys after the one being answered. Time is always
//! passed in (`now`, seconds on the server's clock, like `rel_time_t`). CAS
//! values are unique and a key's CAS strictly increases with each change; the
//! order across keys follows segment allocation, not wall-clock order. For
//! `stats items`/`stats slabs`, class 1 is the small (probationary) FIFO and
//! class 2 the main FIFO: a class's pages are its segments, a chunk is an
//! item of the class's mean size (`used_chunks` its items, as in memcached),
//! `number`/`mem_requested` are the items linked in its segments and their
//! bytes, `age` is `now - oldest_item_time`, and
//! `evicted_active` counts items that were due for eviction but had been hit
//! and were copied forward instead.

mod api;
mod index;
mod item;
mod memory;
pub mod numeric;
mod shard;

pub use api::*;
pub use item::KEY_MAX_LEN;

use crossbeam_utils::CachePadded;
use index::{Index, IndexHint};
use memory::Pool;
use parking_lot::Mutex;
use shard::{Ctx, Shard};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Segments per shard the automatic shard count aims for.
const SEGMENTS_PER_SHARD: usize = 16;
const MAX_SHARDS: usize = 256;
const MIN_SEGMENT: usize = 64 << 10;
const MAX_SIZE: usize = 1 << 30;

/// Keys ahead of the one being answered whose index lines a [`Lookahead`] asks for.
const INDEX_AHEAD: usize = 8;
/// Keys ahead whose items it asks for (their index lines were asked for `INDEX_AHEAD - ITEM_AHEAD` keys
/// earlier, so they have usually arrived).
const ITEM_AHEAD: usize = 4;

/// Loads the memory of a multi-key read's next keys while the current one is answered (see
/// [`Store::lookahead`]): in a cache larger than the CPU's, each lookup is a few cache misses in a row, and
/// this overlaps those of several keys. memcached looks keys up one after the other.
pub struct Lookahead<'s, I> {
    store: &'s Store,
    index_ahead: I,
    item_ahead: I,
}

impl<'k, I: Iterator<Item = &'k [u8]>> Lookahead<'_, I> {
    /// Moves the look-ahead one key on: call it once before answering each key.
    pub fn advance(&mut self) {
        if let Some(key) = self.index_ahead.next() {
            self.store.prefetch_index(key);
        }
        if let Some(key) = self.item_ahead.next() {
            self.store.prefetch_item(key);
        }
    }
}

/// The shared item store. All methods take `&self` and are thread-safe.
pub struct Store {
    shards: Box<[CachePadded<Mutex<Shard>>]>,
    /// Segments each shard owns (for balancing memory between shards).
    owned: Box<[AtomicUsize]>,
    /// Where each shard's index lives (see [`Lookahead`]).
    hints: Box<[IndexHint]>,
    shard_shift: u32,
    pool: Pool,
    hasher: foldhash::fast::RandomState,
    cas_clock: AtomicU64,
    /// memcached's `settings.oldest_live` for a delayed flush_all; 0 = none.
    oldest_live: AtomicU32,
    evict: bool,
    small_percent: usize,
    off_shift: u32,
    item_size_max: usize,
    /// The fewest index slots a shard has (`StoreConfig::index_slots` over the shards).
    index_floor: usize,
    on_stale_lookup: fn(Stale),
    on_evict: Option<EvictHook>,
}

impl Store {
    /// Builds a store; no item memory is mapped until items arrive.
    pub fn new(config: StoreConfig) -> Result<Store, ConfigError> {
        if !(1024..=MAX_SIZE).contains(&config.item_size_max) {
            return Err(ConfigError::ItemSizeMax(config.item_size_max));
        }
        if !(MIN_SEGMENT..=MAX_SIZE).contains(&config.segment_size)
            || config.segment_size % 4096 != 0
        {
            return Err(ConfigError::SegmentSize(config.segment_size));
        }
        if !(1..=90).contains(&config.small_queue_percent) {
            return Err(ConfigError::SmallQueuePercent(config.small_queue_percent));
        }
        let segment_size = config
            .segment_size
            .max(config.item_size_max.next_multiple_of(4096));
        let segments = config.memory_limit / segment_size;
        if segments < 2 {
            return Err(ConfigError::MemoryLimit(config.memory_limit));
        }
        // A shard addresses at most MAX_SEGMENTS_PER_SHARD segments; half of
        // that is the most it should need, since keys spread evenly.
        let fewest = segments
            .div_ceil(shard::MAX_SEGMENTS_PER_SHARD / 2)
            .next_power_of_two();
        let shards = if config.shards == 0 {
            let want = (segments / SEGMENTS_PER_SHARD).clamp(1, 64);
            (1 << want.ilog2()).max(fewest)
        } else {
            config.shards
        };
        if !shards.is_power_of_two() || shards > MAX_SHARDS || shards < fewest {
            return Err(ConfigError::Shards(shards));
        }
        // Offsets are stored in 20 bits, in units of this many bytes.
        let off_shift = (segment_size.div_ceil(1 << 20)).next_power_of_two().ilog2();
        let index_floor = config.index_slots.div_ceil(shards);
        if Index::bytes_for(Index::capacity_for(0).max(index_floor)) * shards
            > config.memory_limit / 2
        {
            return Err(ConfigError::IndexSlots(config.index_slots));
        }
        let pool = Pool::new(config.memory_limit, segment_size, config.huge_pages);
        let shards = (0..shards)
            .map(|_| Shard::new(&pool, index_floor).map(|s| CachePadded::new(Mutex::new(s))))
            .collect::<Option<Vec<_>>>()
            .ok_or(ConfigError::Mmap)?;
        let hints: Box<[IndexHint]> = shards.iter().map(|_| IndexHint::default()).collect();
        for (shard, hint) in shards.iter().zip(&hints) {
            shard.lock().publish_index(hint);
        }
        Ok(Store {
            shard_shift: 64 - shards.len().ilog2(),
            owned: (0..shards.len()).map(|_| AtomicUsize::new(0)).collect(),
            hints,
            shards: shards.into_boxed_slice(),
            pool,
            // A per-store random seed: clients choose keys, and must not be
            // able to pick ones that share a probe chain.
            hasher: foldhash::fast::RandomState::default(),
            cas_clock: AtomicU64::new(1),
            oldest_live: AtomicU32::new(0),
            evict: config.evict,
            small_percent: usize::from(config.small_queue_percent),
            off_shift,
            item_size_max: config.item_size_max,
            index_floor,
            on_stale_lookup: config.on_stale_lookup,
            on_evict: config.on_evict,
        })
    }

    fn ctx(&self, me: usize) -> Ctx<'_> {
        Ctx {
            pool: &self.pool,
            hasher: &self.hasher,
            cas_clock: &self.cas_clock,
            evict: self.evict,
            small_percent: self.small_percent,
            off_shift: self.off_shift,
            item_size_max: self.item_size_max,
            index_floor: self.index_floor,
            on_stale_lookup: self.on_stale_lookup,
            on_evict: self.on_evict.as_ref().map(|hook| &*hook.0),
            shards: &self.shards,
            owned: &self.owned,
            hints: &self.hints,
            me,
        }
    }

    fn shard_of(&self, hash: u64) -> usize {
        if self.shards.len() == 1 {
            0
        } else {
            (hash >> self.shard_shift) as usize
        }
    }

    /// Runs `f` on the key's shard, locked, with pending flushes applied.
    fn with_shard<R>(&self, key: &[u8], now: u32, f: impl FnOnce(&mut Shard, u64, &Ctx) -> R) -> R {
        let hash = self.hasher.hash_one(key);
        let me = self.shard_of(hash);
        let ctx = self.ctx(me);
        let mut shard = self.shards[me].lock();
        shard.apply_flush(self.oldest_live.load(Ordering::Relaxed), now, &ctx);
        f(&mut shard, hash, &ctx)
    }

    /// A look-ahead over the keys of a multi-key read: call [`Lookahead::advance`] before answering each key,
    /// and the memory of the keys after it is being loaded meanwhile.
    pub fn lookahead<'k, I>(&self, keys: I) -> Lookahead<'_, I>
    where
        I: Iterator<Item = &'k [u8]> + Clone,
    {
        let mut index_ahead = keys.clone();
        for key in index_ahead.by_ref().take(INDEX_AHEAD) {
            self.prefetch_index(key);
        }
        let mut item_ahead = keys;
        for key in item_ahead.by_ref().take(ITEM_AHEAD) {
            self.prefetch_item(key);
        }
        Lookahead {
            store: self,
            index_ahead,
            item_ahead,
        }
    }

    /// Starts loading the index lines of `key`'s home slot (no lock).
    fn prefetch_index(&self, key: &[u8]) {
        let hash = self.hasher.hash_one(key);
        self.hints[self.shard_of(hash)].prefetch(hash);
    }

    /// Starts loading the item `key` most likely names (takes the shard's lock briefly).
    fn prefetch_item(&self, key: &[u8]) {
        let hash = self.hasher.hash_one(key);
        let me = self.shard_of(hash);
        self.shards[me].lock().prefetch_item(hash, &self.ctx(me));
    }

    /// Number of lock shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// `get`/`gets`: calls `f` with the item (under the shard lock) and
    /// records the access. `None` on a miss (expired and flushed included;
    /// every lookup that meets an expired or flushed item calls
    /// [`StoreConfig::on_stale_lookup`]).
    pub fn get<R>(&self, key: &[u8], now: u32, f: impl FnOnce(&ItemView) -> R) -> Option<R> {
        self.with_shard(key, now, |s, h, ctx| s.get(key, h, now, None, ctx, f))
    }

    /// `gat`/`gats`: sets the exptime, then reads as [`Store::get`].
    pub fn get_and_touch<R>(
        &self,
        key: &[u8],
        now: u32,
        exptime: u32,
        f: impl FnOnce(&ItemView) -> R,
    ) -> Option<R> {
        self.with_shard(key, now, |s, h, ctx| {
            s.get(key, h, now, Some(exptime), ctx, f)
        })
    }

    /// `me`: calls `f` with the item without recording an access or touching its stampede state.
    pub fn peek<R>(&self, key: &[u8], now: u32, f: impl FnOnce(&ItemView) -> R) -> Option<R> {
        self.with_shard(key, now, |s, h, ctx| s.peek(key, h, now, ctx, f))
    }

    /// `touch`: true if the item exists (TOUCHED), false otherwise.
    pub fn touch(&self, key: &[u8], now: u32, exptime: u32) -> bool {
        self.with_shard(key, now, |s, h, ctx| s.touch(key, h, now, exptime, ctx))
    }

    /// `mg`: reads with stampede protection (`N`, `R`, `T`, `W`/`Z`/`X`).
    /// `None` is a miss (`EN`).
    pub fn meta_get<R>(
        &self,
        key: &[u8],
        now: u32,
        opts: &MetaGetOptions,
        f: impl FnOnce(&MetaView) -> R,
    ) -> Option<R> {
        self.with_shard(key, now, |s, h, ctx| s.meta_get(key, h, now, opts, ctx, f))
    }

    /// set / add / replace / append / prepend / cas / `ms`.
    pub fn store(&self, req: &StoreRequest, now: u32) -> StoreOutcome {
        self.with_shard(req.key, now, |s, h, ctx| s.store(req, h, now, ctx))
    }

    /// `delete` / `md` (with an optional CAS check).
    pub fn delete(&self, key: &[u8], now: u32, cas: Option<u64>) -> DeleteOutcome {
        self.with_shard(key, now, |s, h, ctx| s.delete(key, h, now, cas, ctx))
    }

    /// `md I`: marks the item stale (new CAS, recache token cleared).
    pub fn mark_stale(
        &self,
        key: &[u8],
        now: u32,
        cas: Option<u64>,
        exptime: Option<u32>,
    ) -> DeleteOutcome {
        self.with_shard(key, now, |s, h, ctx| {
            s.mark_stale(key, h, now, cas, exptime, ctx)
        })
    }

    /// `incr` / `decr` / `ma`.
    pub fn incr_decr(
        &self,
        key: &[u8],
        now: u32,
        incr: bool,
        delta: u64,
        opts: &ArithOptions,
    ) -> ArithOutcome {
        self.with_shard(key, now, |s, h, ctx| {
            s.arith(key, h, now, incr, delta, opts, ctx)
        })
    }

    /// `flush_all`: `at = None` (or a time not after `now`) flushes at once;
    /// `Some(t)` invalidates, from time `t - 1` on, every item last stored or
    /// accessed at or before `t - 1` (memcached's `oldest_live`).
    pub fn flush_all(&self, now: u32, at: Option<u32>) {
        match at {
            Some(t) if t > now => {
                self.oldest_live.store(t - 1, Ordering::Relaxed);
            }
            _ => {
                self.oldest_live.store(0, Ordering::Relaxed);
                for (i, s) in self.shards.iter().enumerate() {
                    let mut g = s.lock();
                    g.clear(&self.ctx(i));
                    g.mark_flush_applied(0);
                }
            }
        }
    }

    /// Background step (call about once a second): goes through up to
    /// `segments_per_shard` segments per shard, expiring their items (if
    /// `expire`: memcached's crawler and LRU maintainer on; otherwise expired
    /// items wait to be met, as there) and freeing or compacting mostly-dead
    /// segments.
    pub fn maintain(&self, now: u32, segments_per_shard: usize, expire: bool) -> MaintainReport {
        let mut report = MaintainReport::default();
        for (i, s) in self.shards.iter().enumerate() {
            let ctx = self.ctx(i);
            let mut g = s.lock();
            g.apply_flush(self.oldest_live.load(Ordering::Relaxed), now, &ctx);
            g.maintain(now, segments_per_shard, expire, &ctx, &mut report);
        }
        report
    }

    /// The segments of item class `class` in shard `shard` (`0..shard_count()`), oldest first, for
    /// [`Store::crawl_segment`]: class 1 is the small queue, class 2 the main one, other classes have none.
    pub fn class_segments(&self, shard: usize, class: u8) -> Vec<u16> {
        self.shards[shard].lock().class_segments(class)
    }

    /// `lru_crawler crawl`, one segment at a time (each under its shard's lock, which is let go between
    /// segments): checks every item of `segment` of shard `shard` and unlinks the expired and flushed
    /// ones, counted as the crawler's. A segment no longer of class `class` (freed or compacted since
    /// [`Store::class_segments`] listed it) is skipped.
    pub fn crawl_segment(&self, shard: usize, class: u8, segment: u16, now: u32) -> CrawlReport {
        let ctx = self.ctx(shard);
        let mut g = self.shards[shard].lock();
        g.apply_flush(self.oldest_live.load(Ordering::Relaxed), now, &ctx);
        if !g.is_class_segment(segment, class) {
            return CrawlReport::default();
        }
        g.crawl_segment(segment, now, true, &ctx)
    }

    /// `cache_memlimit`: changes the budget; shrinking evicts (even with
    /// eviction disabled, since the bound is hard) until memory fits.
    pub fn set_memory_limit(&self, bytes: usize, now: u32) {
        let mut excess = self.pool.set_limit(bytes);
        let mut idle_rounds = 0;
        while excess > 0 && idle_rounds < 2 {
            let mut progress = false;
            for (i, s) in self.shards.iter().enumerate() {
                if !self.pool.over_limit() {
                    break;
                }
                let ctx = Ctx {
                    evict: true,
                    ..self.ctx(i)
                };
                let mut g = s.lock();
                if let Some(mem) = g.reclaim(now, &ctx) {
                    self.pool.give_back(mem);
                    progress = true;
                }
            }
            excess = self.pool.set_limit(bytes);
            idle_rounds = if progress { 0 } else { idle_rounds + 1 };
        }
    }

    /// Calls `f` for every live item, shard by shard (`lru_crawler metadump`).
    pub fn dump(&self, now: u32, mut f: impl FnMut(&DumpEntry)) {
        for shard in 0..self.shards.len() {
            self.dump_shard(shard, now, &mut f);
        }
    }

    /// Calls `f` for every live item of one shard (`0..shard_count()`), under its lock: a dump taken a
    /// shard at a time, as a reader consumes it.
    pub fn dump_shard(&self, shard: usize, now: u32, mut f: impl FnMut(&DumpEntry)) {
        let ctx = self.ctx(shard);
        let mut g = self.shards[shard].lock();
        g.apply_flush(self.oldest_live.load(Ordering::Relaxed), now, &ctx);
        g.dump(now, &ctx, &mut f);
    }

    /// Store-wide figures, summed over shards.
    pub fn stats(&self) -> StoreStats {
        let mut st = StoreStats {
            classes: vec![
                ClassStats {
                    class_id: 1,
                    ..Default::default()
                },
                ClassStats {
                    class_id: 2,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        for s in self.shards.iter() {
            s.lock().add_stats(&mut st);
        }
        for c in &st.classes {
            st.curr_items += c.items;
            st.bytes += c.bytes;
            st.evictions += c.evicted;
            st.reclaimed += c.reclaimed;
            st.expired_unfetched += c.expired_unfetched;
            st.evicted_unfetched += c.evicted_unfetched;
            st.evicted_active += c.evicted_active;
            st.crawler_reclaimed += c.crawler_reclaimed;
            st.crawler_items_checked += c.crawler_items_checked;
            st.lrutail_reflocked += c.lrutail_reflocked;
            st.outofmemory += c.outofmemory;
        }
        let p = self.pool.stats();
        st.limit_maxbytes = p.limit as u64;
        st.total_malloced = p.used as u64;
        st.malloc_fails = p.malloc_fails;
        st.segment_size = self.pool.segment_size() as u64;
        st.segments_mapped = p.segments_mapped as u64;
        st.segments_free = p.segments_free as u64;
        st.hash_bytes = p.table_bytes as u64;
        st.hash_expanding = p.tables_growing as u64;
        st
    }

    #[cfg(test)]
    fn check_invariants(&self) {
        for (i, s) in self.shards.iter().enumerate() {
            s.lock().check_invariants(&self.ctx(i));
        }
        let p = self.pool.stats();
        assert!(
            p.used <= p.limit || p.limit < p.table_bytes,
            "budget exceeded: {p:?}"
        );
    }
}

#[cfg(test)]
mod tests;
