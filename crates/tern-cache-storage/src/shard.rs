//! One lock shard: its index, its segments in two FIFO queues, its counters.
//!
//! Eviction is S3-FIFO at segment granularity. New items are appended to the
//! small (probationary) queue's open segment; updates go to the queue the old
//! version lived in. When memory is needed, a victim segment is taken from the
//! head of the small queue (while it holds more than its share) or else of the
//! main queue. Its items that were read since written (frequency > 0) are
//! copied to the main queue's open segment, keeping their CAS (and, from the
//! main queue, with their frequency decremented); the rest are evicted. The
//! victim then comes back whole, so memory is never stranded in a size class.
//! Once memory is full, the next victim is chosen as soon as one is freed and
//! gone through a little with each store, in step with the bytes written, so
//! no store pays for a whole segment's eviction.

use crate::api::*;
use crate::index::{self, Index, IndexHint};
use crate::item::{self, Header, FETCHED, FREQ_MAX, PAD, STALE, TOKEN_SENT};
use crate::memory::{MmapBuf, Pool, SegmentMem};
use crate::numeric;
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Local segment slots per shard (12 bits of a location; 20 bits of offset).
const SLOT_BITS: u32 = 12;
pub(crate) const MAX_SEGMENTS_PER_SHARD: usize = 1 << SLOT_BITS;
const OFFSET_BITS: u32 = 20;
/// memcached's per-item overhead used for its size limit (48-byte header with
/// CAS, "\r\n"), so that the same items are accepted as by memcached.
pub(crate) const MEMCACHED_ITEM_OVERHEAD: usize = 50;
/// Bound on eviction rounds one allocation may run before giving up.
const MAX_RECLAIM_ROUNDS: usize = 64;
/// Victims one reclaim frees while readers hold their memory before it gives
/// up (each such victim's memory comes back when its readers are done).
const MAX_SHARED_VICTIMS: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Queue {
    Small = 0,
    Main = 1,
}

struct Segment {
    /// Shared with readers sending values from it (see [`SegmentMem`]).
    mem: Arc<SegmentMem>,
    write_pos: usize,
    /// CAS of an item written here without an explicit CAS: base + offset.
    cas_base: u64,
    /// Time the segment was opened; item access times are stored relative.
    epoch: u32,
    live_items: u32,
    live_bytes: usize,
    queue: Queue,
    /// Earliest exptime of an item written here (0 = none): the crawler
    /// skips segments where nothing can have expired yet.
    min_exptime: u32,
}

impl Segment {
    /// Rewrites header bytes of a record in place (bits, access time,
    /// exptime): never value bytes, which readers may be sending.
    fn write_header(&mut self, at: usize, bytes: &[u8]) {
        // SAFETY: `&mut self` means the shard's lock is held, and readers
        // outside it hold only value ranges, never header bytes.
        unsafe { self.mem.write(at, bytes) };
    }
}

fn earliest(a: u32, b: u32) -> u32 {
    match (a, b) {
        (0, x) | (x, 0) => x,
        (x, y) => x.min(y),
    }
}

/// Everything a shard operation needs from the store.
#[derive(Clone, Copy)]
pub(crate) struct Ctx<'a> {
    pub pool: &'a Pool,
    pub hasher: &'a foldhash::fast::RandomState,
    pub cas_clock: &'a AtomicU64,
    pub evict: bool,
    pub small_percent: usize,
    pub off_shift: u32,
    pub item_size_max: usize,
    /// The fewest slots the index has (`StoreConfig::index_slots`, per shard).
    pub index_floor: usize,
    pub on_stale_lookup: fn(Stale),
    pub on_evict: Option<&'a (dyn Fn(&Evicted<'_>) + Send + Sync)>,
    pub shards: &'a [CachePadded<Mutex<Shard>>],
    /// Segments each shard owns, readable without its lock.
    pub owned: &'a [AtomicUsize],
    /// Where each shard's index lives, for look-ahead reads without the lock.
    pub hints: &'a [IndexHint],
    pub me: usize,
}

impl Ctx<'_> {
    pub(crate) fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }
}

#[derive(Debug)]
pub(crate) struct Oom;

enum Cause {
    /// Overwritten or deleted: no counters beyond the item count.
    Removed,
    /// Expired or flushed, and taken away by whoever met it, counted as memcached counts it.
    Expired(Reclaimer),
    Evicted,
}

/// Who took an expired item away: memcached counts `reclaimed` where memory is taken back from its LRU
/// tails, `crawler_reclaimed` for its crawler, `expired_unfetched` for both when the item was never
/// fetched, and only `get_expired` (counted by the caller) for a lookup.
#[derive(Clone, Copy)]
enum Reclaimer {
    Lookup,
    Crawler,
    /// Memory taken back: an eviction's or a compaction's pass over a segment.
    Memory,
}

/// The value of a record being written.
enum Body<'a> {
    New(&'a [u8]),
    /// The current item's value, unchanged.
    Old,
    Append(&'a [u8]),
    Prepend(&'a [u8]),
}

pub(crate) struct Shard {
    index: Index,
    segs: Vec<Option<Segment>>,
    free_slots: Vec<u16>,
    queues: [VecDeque<u16>; 2],
    open: [Option<u16>; 2],
    classes: [ClassStats; 2],
    total_items: u64,
    /// The delayed flush (oldest_live) this shard has applied.
    flush_applied: u32,
    /// A flush becomes due this second: every item is invisible.
    hide_all: bool,
    crawl_cursor: usize,
    /// Once memory is full, the next victim, evicted a little with each store (see [`Shard::drain_step`]),
    /// out of its queue.
    draining: Option<Drain>,
    /// Bytes written into segments, ever (the draining victim keeps pace with them).
    appended: u64,
}

/// A victim being evicted a little at a time: so that no store pays for a whole segment's eviction (every
/// item in it unlinked or copied, hundreds of microseconds under the shard's lock), each store goes through
/// the victim's records in proportion to the bytes it wrote (`pace`: the victim's bytes over a segment's),
/// so the victim is through about when a segment's worth has been written, which is when the shard needs
/// it; what is left then is gone through at once.
#[derive(Clone, Copy, Debug)]
struct Drain {
    slot: u16,
    /// Where the records not yet gone through start.
    off: usize,
    /// Victim bytes to go through per 1,024 bytes stored.
    pace: usize,
}

/// How a pass over a segment's records ended.
#[derive(Debug, PartialEq, Eq)]
enum Evacuation {
    Done,
    /// Its budget spent: the records from this offset on are left.
    Stopped(usize),
    /// A copy found no room (only when nothing may be evicted); the records from there on are left.
    Failed,
}

fn pack(slot: u16, off: usize, shift: u32) -> u32 {
    (u32::from(slot) << OFFSET_BITS) | (off >> shift) as u32
}

fn unpack(loc: u32, shift: u32) -> (u16, usize) {
    (
        (loc >> OFFSET_BITS) as u16,
        ((loc & ((1 << OFFSET_BITS) - 1)) as usize) << shift,
    )
}

fn expired(h: &Header, now: u32) -> bool {
    h.exptime != 0 && h.exptime <= now
}

impl Shard {
    pub(crate) fn new(pool: &Pool, index_floor: usize) -> Option<Shard> {
        let cap = Index::capacity_for(0).max(index_floor);
        if !pool.reserve_table_bytes(Index::bytes_for(cap)) {
            return None;
        }
        let index = Index::with_capacity(cap, pool.huge_pages)?;
        Some(Shard {
            index,
            segs: Vec::new(),
            free_slots: Vec::new(),
            queues: [VecDeque::new(), VecDeque::new()],
            open: [None, None],
            classes: [
                ClassStats {
                    class_id: 1,
                    ..Default::default()
                },
                ClassStats {
                    class_id: 2,
                    ..Default::default()
                },
            ],
            total_items: 0,
            flush_applied: 0,
            hide_all: false,
            crawl_cursor: 0,
            draining: None,
            appended: 0,
        })
    }

    // ----- reading records -------------------------------------------------

    fn seg(&self, slot: u16) -> &Segment {
        self.segs[slot as usize]
            .as_ref()
            .expect("location names a live segment")
    }

    fn seg_mut(&mut self, slot: u16) -> &mut Segment {
        self.segs[slot as usize]
            .as_mut()
            .expect("location names a live segment")
    }

    fn record(&self, loc: u32, ctx: &Ctx) -> (Header, usize, &[u8], &Segment, usize) {
        let (slot, off) = unpack(loc, ctx.off_shift);
        let seg = self.seg(slot);
        let bytes = &seg.mem.bytes()[off..seg.write_pos];
        let (h, hlen) = Header::decode(bytes);
        (h, hlen, bytes, seg, off)
    }

    fn key_at<'s>(&'s self, loc: u32, ctx: &Ctx) -> &'s [u8] {
        let (slot, off) = unpack(loc, ctx.off_shift);
        let bytes = &self.seg(slot).mem.bytes()[off..];
        &bytes[item::key_range(bytes)]
    }

    fn cas_of(h: &Header, seg: &Segment, off: usize) -> u64 {
        h.cas.unwrap_or(seg.cas_base + off as u64)
    }

    fn view<'s>(&'s self, loc: u32, ctx: &Ctx) -> ItemView<'s> {
        let (h, hlen, bytes, seg, off) = self.record(loc, ctx);
        Self::view_of(&h, hlen, bytes, seg, off)
    }

    fn view_of<'s>(
        h: &Header,
        hlen: usize,
        bytes: &'s [u8],
        seg: &'s Segment,
        off: usize,
    ) -> ItemView<'s> {
        let k = hlen + h.key_len as usize;
        ItemView {
            key: &bytes[hlen..k],
            value: &bytes[k..k + h.value_len as usize],
            flags: h.flags,
            exptime: h.exptime,
            cas: Self::cas_of(h, seg, off),
            last_access: seg.epoch.wrapping_add(item::decode_atime(h.atime_code)),
            fetched: h.has(FETCHED),
            stale: h.has(STALE),
            token_sent: h.has(TOKEN_SENT),
            key_binary: h.key_binary,
            segment: &seg.mem,
        }
    }

    fn find(&self, key: &[u8], hash: u64, ctx: &Ctx) -> Option<(usize, u32)> {
        let ts = self.index.find(hash, |loc| self.key_at(loc, ctx) == key)?;
        Some((ts, self.index.loc(ts)))
    }

    /// Finds a live item, unlinking it if expired or flushed (and reporting
    /// an expired one, as memcached's `do_item_get` counts it).
    fn lookup(&mut self, key: &[u8], hash: u64, now: u32, ctx: &Ctx) -> Option<(usize, u32)> {
        let (ts, loc) = self.find(key, hash, ctx)?;
        let (h, ..) = self.record(loc, ctx);
        if self.hide_all || expired(&h, now) {
            self.unlink(ts, loc, hash, Cause::Expired(Reclaimer::Lookup), now, ctx);
            (ctx.on_stale_lookup)(if self.hide_all {
                Stale::Flushed
            } else {
                Stale::Expired
            });
            return None;
        }
        Some((ts, loc))
    }

    // ----- in-place header updates ----------------------------------------

    fn update_bits(&mut self, loc: u32, ctx: &Ctx, f: impl FnOnce(u8) -> u8) {
        let (slot, off) = unpack(loc, ctx.off_shift);
        let seg = self.seg_mut(slot);
        let at = off + item::BITS_OFFSET;
        let bits = f(seg.mem.bytes()[at]);
        seg.write_header(at, &[bits]);
    }

    /// Records a read: fetched flag, access time, frequency.
    fn bump(&mut self, loc: u32, now: u32, ctx: &Ctx) {
        let (h, ..) = self.record(loc, ctx);
        self.bump_with(loc, &h, now, ctx);
    }

    fn bump_with(&mut self, loc: u32, h: &Header, now: u32, ctx: &Ctx) {
        let mut nh = *h;
        nh.bits |= FETCHED;
        nh.set_freq((h.freq() + 1).min(FREQ_MAX));
        let (slot, off) = unpack(loc, ctx.off_shift);
        let seg = self.seg_mut(slot);
        let code = item::encode_atime(now.saturating_sub(seg.epoch));
        let field = item::atime_field(code, h.key_binary);
        let at = off + item::atime_offset(h.value_len);
        seg.write_header(off + item::BITS_OFFSET, &[nh.bits]);
        seg.write_header(at, &field.to_le_bytes());
    }

    /// Sets exptime in place when the record has the field; else rewrites it
    /// (keeping its CAS). Returns the item's location afterwards.
    fn set_exptime(
        &mut self,
        key: &[u8],
        hash: u64,
        loc: u32,
        exptime: u32,
        now: u32,
        ctx: &Ctx,
    ) -> Result<u32, Oom> {
        let (h, ..) = self.record(loc, ctx);
        if let Some(at) = item::exptime_offset(&h) {
            let (slot, off) = unpack(loc, ctx.off_shift);
            let seg = self.seg_mut(slot);
            seg.write_header(off + at, &exptime.to_le_bytes());
            seg.min_exptime = earliest(seg.min_exptime, exptime);
            return Ok(loc);
        }
        if exptime == 0 {
            return Ok(loc);
        }
        self.rewrite(
            key,
            hash,
            now,
            ctx,
            true,
            |h| h.exptime = exptime,
            Body::Old,
            false,
        )
        .map(|(loc, _)| loc)
    }

    // ----- linking and unlinking ------------------------------------------

    /// Takes the item at `loc` (index slot `ts`, its key hashing to `hash`) out of the index and its
    /// segment's counts, counting why.
    fn unlink(&mut self, ts: usize, loc: u32, hash: u64, cause: Cause, now: u32, ctx: &Ctx) {
        let (h, _, _, seg, _) = self.record(loc, ctx);
        let atime = seg.epoch.wrapping_add(item::decode_atime(h.atime_code));
        let q = seg.queue as usize;
        debug_assert_eq!(hash, ctx.hash(self.key_at(loc, ctx)), "the item's own hash");
        self.index.remove(ts, hash);
        self.drop_record(loc, &h, ctx);
        let c = &mut self.classes[q];
        let fetched = h.has(FETCHED);
        match cause {
            Cause::Removed => {}
            Cause::Expired(Reclaimer::Lookup) => {}
            Cause::Expired(by) => {
                match by {
                    Reclaimer::Crawler => c.crawler_reclaimed += 1,
                    _ => c.reclaimed += 1,
                }
                if !fetched {
                    c.expired_unfetched += 1;
                }
            }
            Cause::Evicted => {
                if let Some(on_evict) = ctx.on_evict {
                    on_evict(&Evicted {
                        key: self.key_at(loc, ctx),
                        fetched,
                        exptime: h.exptime,
                        last_access: atime,
                        value_len: h.value_len as usize,
                    });
                }
                let c = &mut self.classes[q];
                c.evicted += 1;
                if h.exptime != 0 {
                    c.evicted_nonzero += 1;
                }
                if !fetched {
                    c.evicted_unfetched += 1;
                }
                c.evicted_time = now.saturating_sub(atime);
            }
        }
    }

    /// Takes a record out of its segment's and class's live counts.
    fn drop_record(&mut self, loc: u32, h: &Header, ctx: &Ctx) {
        let len = h.record_len();
        let (slot, _) = unpack(loc, ctx.off_shift);
        let seg = self.seg_mut(slot);
        seg.live_items -= 1;
        seg.live_bytes -= len;
        let q = seg.queue as usize;
        self.classes[q].items -= 1;
        self.classes[q].bytes -= len as u64;
    }

    fn add_record(&mut self, slot: u16, len: usize) {
        let seg = self.seg_mut(slot);
        seg.live_items += 1;
        seg.live_bytes += len;
        let q = seg.queue as usize;
        self.classes[q].items += 1;
        self.classes[q].bytes += len as u64;
    }

    // ----- segments --------------------------------------------------------

    fn install(&mut self, mem: MmapBuf, q: Queue, now: u32, ctx: &Ctx) -> u16 {
        let slot = match self.free_slots.pop() {
            Some(s) => s,
            None => {
                self.segs.push(None);
                (self.segs.len() - 1) as u16
            }
        };
        let size = mem.len() as u64;
        self.segs[slot as usize] = Some(Segment {
            mem: SegmentMem::new(mem, ctx.pool),
            write_pos: 0,
            cas_base: ctx.cas_clock.fetch_add(size, Ordering::Relaxed),
            epoch: now,
            live_items: 0,
            live_bytes: 0,
            queue: q,
            min_exptime: 0,
        });
        self.queues[q as usize].push_back(slot);
        self.open[q as usize] = Some(slot);
        ctx.owned[ctx.me].fetch_add(1, Ordering::Relaxed);
        slot
    }

    fn slots_available(&self) -> bool {
        !self.free_slots.is_empty() || self.segs.len() < MAX_SEGMENTS_PER_SHARD
    }

    fn space_needed(len: usize, ctx: &Ctx) -> usize {
        len + (1 << ctx.off_shift) - 1
    }

    /// Makes the open segment of `q` able to take `len` bytes.
    fn ensure_space(&mut self, q: Queue, len: usize, now: u32, ctx: &Ctx) -> Result<u16, Oom> {
        let need = Self::space_needed(len, ctx);
        if let Some(s) = self.open[q as usize] {
            let seg = self.seg(s);
            if seg.mem.len() - seg.write_pos >= need {
                return Ok(s);
            }
        }
        self.open[q as usize] = None;
        let mem = self.obtain(now, ctx)?;
        Ok(self.install(mem, q, now, ctx))
    }

    /// A free segment for regular writes: from the pool, else from another
    /// shard if this one holds less than its share, else by evicting one of
    /// ours, else from any shard holding more.
    fn obtain(&mut self, now: u32, ctx: &Ctx) -> Result<MmapBuf, Oom> {
        for _ in 0..MAX_RECLAIM_ROUNDS {
            if !self.slots_available() {
                let mem = self.reclaim(now, ctx).ok_or(Oom)?;
                return Ok(mem);
            }
            if let Some(m) = ctx.pool.take(false) {
                return Ok(m);
            }
            let mine = ctx.owned[ctx.me].load(Ordering::Relaxed);
            let total: usize = ctx.owned.iter().map(|o| o.load(Ordering::Relaxed)).sum();
            // Keys spread evenly over shards, so memory should too: a shard
            // below its share evicts elsewhere rather than churn its own.
            if mine < total / ctx.shards.len() {
                if let Steal::Got(mem) = steal(now, ctx, mine + 1) {
                    match keep_unless_reserve_short(mem, ctx) {
                        Some(m) => return Ok(m),
                        None => continue,
                    }
                }
            }
            if let Some(mem) = self.reclaim(now, ctx) {
                match keep_unless_reserve_short(mem, ctx) {
                    Some(m) => return Ok(m),
                    None => continue,
                }
            }
            match steal(now, ctx, 0) {
                Steal::Got(mem) => {
                    if let Some(m) = keep_unless_reserve_short(mem, ctx) {
                        return Ok(m);
                    }
                }
                // The shards holding memory were locked: try again shortly.
                Steal::Busy => std::thread::yield_now(),
                Steal::Nothing => break,
            }
        }
        self.classes[Queue::Small as usize].outofmemory += 1;
        Err(Oom)
    }

    /// Frees one of this shard's segments; `None` if none can be freed
    /// (nothing owned, or in no-evict mode nothing without live data).
    ///
    /// A victim a reader still sends a value from is freed all the same (its
    /// items are gone), but its memory returns to the pool only when that
    /// reader is done (memcached, likewise, cannot reuse an item a reply still
    /// references): the next victim is tried.
    pub(crate) fn reclaim(&mut self, now: u32, ctx: &Ctx) -> Option<MmapBuf> {
        for _ in 0..MAX_SHARED_VICTIMS {
            let victim = match self.finish_draining(now, ctx) {
                Some(victim) => victim,
                None => {
                    let victim = self.pick_victim(ctx)?;
                    let q = self.seg(victim).queue;
                    let pos = self.unqueue(q, victim);
                    if self.open[q as usize] == Some(victim) {
                        self.open[q as usize] = None;
                    }
                    if !self.evacuate(victim, now, ctx, true, false) {
                        self.queues[q as usize].insert(pos, victim);
                        return None;
                    }
                    victim
                }
            };
            let q = self.seg(victim).queue;
            if let Some(mem) = self.release_slot(victim, ctx) {
                self.start_draining(ctx);
                return Some(mem);
            }
            self.classes[q as usize].lrutail_reflocked += 1;
        }
        None
    }

    /// Memory is full: the next victim starts being evicted with each store. Not an open segment (still
    /// written), and never without eviction (`-M`).
    fn start_draining(&mut self, ctx: &Ctx) {
        if !ctx.evict || self.draining.is_some() {
            return;
        }
        let Some(victim) = self.pick_victim(ctx) else {
            return;
        };
        let seg = self.seg(victim);
        let q = seg.queue;
        if self.open[q as usize] == Some(victim) {
            return;
        }
        let pace = (seg.write_pos * 1024).div_ceil(seg.mem.len()).max(1);
        self.unqueue(q, victim);
        self.draining = Some(Drain {
            slot: victim,
            off: 0,
            pace,
        });
    }

    /// Goes through the draining victim's records in proportion to `stored` bytes just written.
    fn drain_step(&mut self, stored: u64, now: u32, ctx: &Ctx) {
        let Some(drain) = self.draining else {
            return;
        };
        let budget = usize::try_from(stored)
            .unwrap_or(usize::MAX)
            .saturating_mul(drain.pace)
            .div_ceil(1024);
        match self.evacuate_from(drain.slot, drain.off, budget, now, ctx, true, false) {
            Evacuation::Stopped(off) => self.draining = Some(Drain { off, ..drain }),
            Evacuation::Done => {
                let off = self.seg(drain.slot).write_pos;
                self.draining = Some(Drain { off, ..drain });
            }
            // Nothing may be evicted now: the rest waits for finish_draining.
            Evacuation::Failed => {}
        }
    }

    /// The draining victim, through its remaining records, for reuse; `None` if there is none, or if its
    /// survivors found no room (it goes back to the head of its queue).
    fn finish_draining(&mut self, now: u32, ctx: &Ctx) -> Option<u16> {
        let drain = self.draining.take()?;
        match self.evacuate_from(drain.slot, drain.off, usize::MAX, now, ctx, true, false) {
            Evacuation::Done => Some(drain.slot),
            Evacuation::Stopped(_) | Evacuation::Failed => {
                let q = self.seg(drain.slot).queue;
                self.queues[q as usize].push_front(drain.slot);
                None
            }
        }
    }

    /// Takes a segment out of its queue, returning where it was.
    fn unqueue(&mut self, q: Queue, slot: u16) -> usize {
        let queue = &mut self.queues[q as usize];
        let pos = queue
            .iter()
            .position(|&s| s == slot)
            .expect("segment is queued");
        queue.remove(pos);
        pos
    }

    /// Frees a segment's slot; its memory, unless a reader still holds it
    /// (then the reader returns it to the pool when done).
    fn release_slot(&mut self, slot: u16, ctx: &Ctx) -> Option<MmapBuf> {
        ctx.owned[ctx.me].fetch_sub(1, Ordering::Relaxed);
        let seg = self.segs[slot as usize].take().expect("victim is live");
        debug_assert_eq!(seg.live_items, 0);
        self.free_slots.push(slot);
        SegmentMem::reclaim(seg.mem)
    }

    fn pick_victim(&self, ctx: &Ctx) -> Option<u16> {
        let all = self.queues[0].iter().chain(self.queues[1].iter());
        if !ctx.evict {
            // -M: only memory without live data may be taken back: the
            // emptiest sealed segment, if compacting it gains a quarter
            // segment (evacuate() aborts if its survivors don't fit).
            return all
                .filter(|&&s| !self.open.contains(&Some(s)))
                .filter(|&&s| self.seg(s).live_bytes * 4 <= self.seg(s).mem.len() * 3)
                .min_by_key(|&&s| self.seg(s).live_bytes)
                .copied();
        }
        let sealed_and_dead =
            |&&s: &&u16| self.seg(s).live_items == 0 && !self.open.contains(&Some(s));
        if let Some(&s) = all.clone().find(sealed_and_dead) {
            return Some(s);
        }
        let small = self.queues[Queue::Small as usize].len();
        let total = small + self.queues[Queue::Main as usize].len();
        let small_share = (total * ctx.small_percent / 100).max(1);
        if small > small_share || self.queues[Queue::Main as usize].is_empty() {
            self.queues[Queue::Small as usize].front().copied()
        } else {
            self.queues[Queue::Main as usize].front().copied()
        }
    }

    /// Moves every live item out of `victim` (which is in no queue and not
    /// open). With `evicting` and eviction allowed, items never hit since
    /// their last move are evicted; otherwise all are kept, and the call
    /// fails (leaving the rest in place) if copies run out of room. Expired
    /// items met are unlinked, counted as the crawler's if `by_crawler`.
    fn evacuate(
        &mut self,
        victim: u16,
        now: u32,
        ctx: &Ctx,
        evicting: bool,
        by_crawler: bool,
    ) -> bool {
        self.evacuate_from(victim, 0, usize::MAX, now, ctx, evicting, by_crawler)
            == Evacuation::Done
    }

    /// [`Shard::evacuate`] from offset `start`, stopping at the first record that starts `budget` bytes or
    /// more past it.
    #[allow(clippy::too_many_arguments)]
    fn evacuate_from(
        &mut self,
        victim: u16,
        start: usize,
        budget: usize,
        now: u32,
        ctx: &Ctx,
        evicting: bool,
        by_crawler: bool,
    ) -> Evacuation {
        let from_small = self.seg(victim).queue == Queue::Small;
        let end = self.seg(victim).write_pos;
        let mut off = start;
        while off < end {
            if off - start >= budget {
                return Evacuation::Stopped(off);
            }
            let bytes = &self.seg(victim).mem.bytes()[off..end];
            if bytes[0] == PAD {
                off += 1;
                continue;
            }
            let (h, hlen) = Header::decode(bytes);
            let rec_len = h.record_len();
            let loc = pack(victim, off, ctx.off_shift);
            let hash = ctx.hash(&bytes[hlen..hlen + h.key_len as usize]);
            off += rec_len;
            let Some(ts) = self.index.find(hash, |l| l == loc) else {
                continue;
            };
            if self.hide_all || expired(&h, now) {
                let by = if by_crawler {
                    Reclaimer::Crawler
                } else {
                    Reclaimer::Memory
                };
                self.unlink(ts, loc, hash, Cause::Expired(by), now, ctx);
                continue;
            }
            let evict_now = evicting && ctx.evict;
            if evict_now && h.freq() == 0 {
                self.unlink(ts, loc, hash, Cause::Evicted, now, ctx);
                continue;
            }
            let (dest, freq) = if !evict_now {
                (self.seg(victim).queue, h.freq())
            } else if from_small {
                (Queue::Main, 0)
            } else {
                (Queue::Main, h.freq() - 1)
            };
            if self.relocate(ts, loc, dest, freq, now, ctx).is_err() {
                if !evict_now {
                    return Evacuation::Failed;
                }
                self.unlink(ts, loc, hash, Cause::Evicted, now, ctx);
            } else if evict_now {
                self.classes[dest as usize].evicted_active += 1;
            }
        }
        Evacuation::Done
    }

    /// Copies a record into `dest`'s open segment (taking a segment from the
    /// pool's reserve if needed, never evicting), keeping its CAS.
    fn relocate(
        &mut self,
        ts: usize,
        loc: u32,
        dest: Queue,
        freq: u8,
        now: u32,
        ctx: &Ctx,
    ) -> Result<(), Oom> {
        let (h, hlen, _, seg, off) = self.record(loc, ctx);
        let atime = seg.epoch.wrapping_add(item::decode_atime(h.atime_code));
        let mut nh = h;
        nh.cas = Some(Self::cas_of(&h, seg, off));
        nh.set_freq(freq);
        let len = nh.record_len();
        let need = Self::space_needed(len, ctx);
        let slot = match self.open[dest as usize] {
            Some(s) if self.seg(s).mem.len() - self.seg(s).write_pos >= need => s,
            _ => {
                if !self.slots_available() {
                    return Err(Oom);
                }
                let mem = ctx.pool.take(true).ok_or(Oom)?;
                self.open[dest as usize] = None;
                self.install(mem, dest, now, ctx)
            }
        };
        nh.atime_code = item::encode_atime(atime.saturating_sub(self.seg(slot).epoch));
        let (src_slot, src_off) = unpack(loc, ctx.off_shift);
        let body = h.key_len as usize + h.value_len as usize;
        let src = self.seg(src_slot).mem.as_ptr().wrapping_add(src_off + hlen);
        let new_loc = self.write_record(slot, &nh, &[(src, body)], ctx);
        self.drop_record(loc, &h, ctx);
        self.index.set_loc(ts, new_loc);
        Ok(())
    }

    /// Appends a record to segment `slot`, which has room (ensure_space).
    /// `parts` are (pointer, length) runs of key and value bytes; they may
    /// point into this shard's segments, always below any write position.
    fn write_record(
        &mut self,
        slot: u16,
        h: &Header,
        parts: &[(*const u8, usize)],
        ctx: &Ctx,
    ) -> u32 {
        let unit = 1usize << ctx.off_shift;
        let seg = self.seg_mut(slot);
        let off = seg.write_pos;
        let len = h.record_len();
        let padded = len.next_multiple_of(unit);
        assert!(off + padded <= seg.mem.len(), "ensure_space reserved room");
        let mut header = [0u8; item::MAX_HEADER_LEN];
        let hlen = h.encode(&mut header);
        // SAFETY (both writes): under the shard's lock (`&mut self`), into
        // space at or above the write position, which no reader holds.
        unsafe { seg.mem.write(off, &header[..hlen]) };
        let mut p = off + hlen;
        let base = seg.mem.as_ptr();
        for &(src, n) in parts {
            // SAFETY: the source runs are live bytes of the caller's slices or
            // of records below some segment's write position; the destination
            // is unwritten space at or above this segment's write position,
            // inside the mapping (asserted above), so the two never overlap.
            unsafe { std::ptr::copy_nonoverlapping(src, base.add(p), n) };
            p += n;
        }
        debug_assert_eq!(p, off + len);
        // SAFETY: as above.
        unsafe { seg.mem.fill(off + len, padded - len, PAD) };
        seg.write_pos = off + padded;
        seg.min_exptime = earliest(seg.min_exptime, h.exptime);
        self.appended += padded as u64;
        self.add_record(slot, len);
        pack(slot, off, ctx.off_shift)
    }

    // ----- the index -------------------------------------------------------

    /// Makes room in the index for one more key, rebuilding it (with its
    /// memory accounted against the budget) when it is too full.
    fn reserve_index_slot(&mut self, now: u32, ctx: &Ctx) -> Result<(), Oom> {
        if !self.index.needs_rebuild() {
            return Ok(());
        }
        let cap = Index::capacity_for(self.index.len() + 1).max(ctx.index_floor);
        let bytes = Index::bytes_for(cap);
        let mut rounds = 0;
        while !ctx.pool.reserve_table_bytes(bytes) {
            rounds += 1;
            if rounds > MAX_RECLAIM_ROUNDS {
                return Err(Oom);
            }
            match self.reclaim(now, ctx) {
                Some(mem) => ctx.pool.give_back(mem),
                None => match steal(now, ctx, 0) {
                    Steal::Got(mem) => ctx.pool.give_back(mem),
                    Steal::Busy | Steal::Nothing => return Err(Oom),
                },
            }
        }
        let Some(mut fresh) = Index::with_capacity(cap, ctx.pool.huge_pages) else {
            ctx.pool.release_table_bytes(bytes);
            return Err(Oom);
        };
        ctx.pool.table_growing(true);
        let mut locs = self.index.live_locations();
        // Location order is segment-then-offset order: reads go sequentially.
        locs.sort_unstable();
        for loc in locs {
            fresh.insert(ctx.hash(self.key_at(loc, ctx)), loc);
        }
        let old = self.replace_index(fresh, ctx);
        ctx.pool.release_table_bytes(old.mapped_bytes());
        ctx.pool.table_growing(false);
        Ok(())
    }

    // ----- flush -----------------------------------------------------------

    /// Applies a pending delayed flush (`oldest_live`, memcached's meaning:
    /// items last touched at or before it are invalid once the clock reaches
    /// it). All items are hidden during that very second; at the first
    /// operation after it, every item this shard holds predates it, so the
    /// shard is emptied.
    pub(crate) fn apply_flush(&mut self, oldest_live: u32, now: u32, ctx: &Ctx) {
        self.hide_all = false;
        if oldest_live == 0 || now < oldest_live || self.flush_applied == oldest_live {
            return;
        }
        if now == oldest_live {
            self.hide_all = true;
        } else {
            self.clear(ctx);
            self.flush_applied = oldest_live;
        }
    }

    /// Drops every item and returns every segment to the pool.
    pub(crate) fn clear(&mut self, ctx: &Ctx) {
        for slot in 0..self.segs.len() {
            if let Some(seg) = self.segs[slot].take() {
                // Back to the pool now, or when the last reader is done.
                drop(seg.mem);
                self.free_slots.push(slot as u16);
                ctx.owned[ctx.me].fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.queues = [VecDeque::new(), VecDeque::new()];
        self.open = [None, None];
        self.draining = None;
        for c in &mut self.classes {
            c.items = 0;
            c.bytes = 0;
        }
        // A fresh minimal table gives its memory back; if even that cannot
        // be mapped, the old one is emptied in place.
        match Index::with_capacity(
            Index::capacity_for(0).max(ctx.index_floor),
            ctx.pool.huge_pages,
        ) {
            Some(fresh) => {
                let old = self.replace_index(fresh, ctx);
                ctx.pool.release_table_bytes(old.mapped_bytes());
                // Smaller than what was just released, so it always fits.
                let ok = ctx.pool.reserve_table_bytes(self.index.mapped_bytes());
                debug_assert!(ok);
            }
            None => self.index.clear(),
        }
    }

    /// Swaps in a new index and tells look-ahead readers where it is; the old one is returned to be
    /// unmapped.
    fn replace_index(&mut self, fresh: Index, ctx: &Ctx) -> Index {
        let old = std::mem::replace(&mut self.index, fresh);
        ctx.hints[ctx.me].publish(&self.index);
        old
    }

    pub(crate) fn publish_index(&self, hint: &IndexHint) {
        hint.publish(&self.index);
    }

    #[cfg(test)]
    pub(crate) fn hint_is_current(&self, hint: &IndexHint) -> bool {
        hint.names(&self.index)
    }

    /// Starts loading the memory of the item `hash` most likely names (the first slot whose tag matches;
    /// its key is not compared, since reading it is the miss this avoids).
    pub(crate) fn prefetch_item(&self, hash: u64, ctx: &Ctx) {
        self.index.find(hash, |loc| {
            let (slot, off) = unpack(loc, ctx.off_shift);
            let item = self.seg(slot).mem.bytes().as_ptr().wrapping_add(off);
            // The header and the key, and the start of the value a hit is about to copy.
            index::prefetch(item);
            index::prefetch(item.wrapping_add(64));
            true
        });
    }

    pub(crate) fn mark_flush_applied(&mut self, oldest_live: u32) {
        self.flush_applied = oldest_live;
    }

    // ----- writes ----------------------------------------------------------

    /// Writes a new version of `key` into queue `q` and links it in place of
    /// the current one (looked up again after space is made, since making
    /// space can move or evict it). Returns the location and CAS.
    #[allow(clippy::too_many_arguments)]
    fn put(
        &mut self,
        key: &[u8],
        hash: u64,
        q: Queue,
        mut h: Header,
        body: Body,
        new_item: bool,
        now: u32,
        ctx: &Ctx,
    ) -> Result<Option<(u32, u64)>, Oom> {
        let old_len = match body {
            Body::New(v) => {
                h.value_len = v.len() as u32;
                0
            }
            Body::Old | Body::Append(_) | Body::Prepend(_) => h.value_len as usize,
        };
        if let Body::Append(v) | Body::Prepend(v) = body {
            h.value_len = (old_len + v.len()) as u32;
        }
        h.key_len = key.len() as u8;
        self.reserve_index_slot(now, ctx)?;
        // Room for an explicit CAS too, in case the derived one is too low.
        let cas_room = if h.cas.is_none() { 8 } else { 0 };
        let slot = self.ensure_space(q, h.record_len() + cas_room, now, ctx)?;
        let old = self.find(key, hash, ctx);
        if let (None, Some((_, old_loc))) = (h.cas, old) {
            // A key's CAS only grows: the open segment may predate the one
            // the old version was written to, so its derived CAS could be
            // lower; then take a fresh value from the same counter.
            let (oh, _, _, oseg, ooff) = self.record(old_loc, ctx);
            let old_cas = Self::cas_of(&oh, oseg, ooff);
            let seg = self.seg(slot);
            if seg.cas_base + seg.write_pos as u64 <= old_cas {
                h.cas = Some(ctx.cas_clock.fetch_add(1, Ordering::Relaxed));
            }
        }
        let old_value = match (old, &body) {
            (_, Body::New(_)) => None,
            (None, _) => return Ok(None),
            (Some((_, loc)), _) => {
                let (oh, hlen, _, seg, off) = self.record(loc, ctx);
                if oh.value_len as usize != old_len {
                    return Ok(None);
                }
                let start = off + hlen + oh.key_len as usize;
                Some(seg.mem.as_ptr().wrapping_add(start) as *const u8)
            }
        };
        h.atime_code = item::encode_atime(now.saturating_sub(self.seg(slot).epoch));
        let key_part = (key.as_ptr(), key.len());
        let new_loc = match (body, old_value) {
            (Body::New(v), _) => {
                self.write_record(slot, &h, &[key_part, (v.as_ptr(), v.len())], ctx)
            }
            (Body::Old, Some(p)) => self.write_record(slot, &h, &[key_part, (p, old_len)], ctx),
            (Body::Append(v), Some(p)) => self.write_record(
                slot,
                &h,
                &[key_part, (p, old_len), (v.as_ptr(), v.len())],
                ctx,
            ),
            (Body::Prepend(v), Some(p)) => self.write_record(
                slot,
                &h,
                &[key_part, (v.as_ptr(), v.len()), (p, old_len)],
                ctx,
            ),
            (_, None) => unreachable!("bodies reading the old value returned above"),
        };
        match old {
            Some((ts, loc)) => {
                let (oh, ..) = self.record(loc, ctx);
                self.drop_record(loc, &oh, ctx);
                self.index.set_loc(ts, new_loc);
            }
            None => self.index.insert(hash, new_loc),
        }
        // memcached's `total_items` counts the items it links: not a header changed in place.
        if new_item {
            self.total_items += 1;
        }
        let (nh, _, _, seg, off) = self.record(new_loc, ctx);
        Ok(Some((new_loc, Self::cas_of(&nh, seg, off))))
    }

    /// Rewrites the current item of `key` with an edited header (and maybe a
    /// new value), in the same queue; `keep_cas` preserves its CAS, otherwise
    /// it gets a new one. `Ok` carries the new location and CAS.
    #[allow(clippy::too_many_arguments)]
    fn rewrite(
        &mut self,
        key: &[u8],
        hash: u64,
        now: u32,
        ctx: &Ctx,
        keep_cas: bool,
        edit: impl FnOnce(&mut Header),
        body: Body,
        new_item: bool,
    ) -> Result<(u32, u64), Oom> {
        let (_, loc) = self.find(key, hash, ctx).ok_or(Oom)?;
        let (oh, _, _, seg, off) = self.record(loc, ctx);
        let q = seg.queue;
        let mut h = oh;
        h.cas = if keep_cas {
            Some(Self::cas_of(&oh, seg, off))
        } else {
            None
        };
        edit(&mut h);
        match self.put(key, hash, q, h, body, new_item, now, ctx)? {
            Some(r) => Ok(r),
            None => Err(Oom),
        }
    }

    fn too_large(key: &[u8], value_len: usize, ctx: &Ctx) -> bool {
        key.len() + value_len + MEMCACHED_ITEM_OVERHEAD > ctx.item_size_max
    }

    /// A storage command; once memory is full, it also evicts its share of the draining victim.
    pub(crate) fn store(
        &mut self,
        req: &StoreRequest,
        hash: u64,
        now: u32,
        ctx: &Ctx,
    ) -> StoreOutcome {
        let before = self.appended;
        let outcome = self.store_item(req, hash, now, ctx);
        self.drain_step(self.appended - before, now, ctx);
        outcome
    }

    fn store_item(&mut self, req: &StoreRequest, hash: u64, now: u32, ctx: &Ctx) -> StoreOutcome {
        if req.key.is_empty() || req.key.len() > item::KEY_MAX_LEN {
            return StoreOutcome::TooLarge;
        }
        if Self::too_large(req.key, req.value.len(), ctx) {
            if req.mode == StoreMode::Set {
                if let Some((ts, loc)) = self.find(req.key, hash, ctx) {
                    self.unlink(ts, loc, hash, Cause::Removed, now, ctx);
                }
            }
            return StoreOutcome::TooLarge;
        }
        let old = self.lookup(req.key, hash, now, ctx);
        let is_cas = req.cas.is_some() && matches!(req.mode, StoreMode::Set | StoreMode::Replace);
        let mut h = Header {
            key_len: req.key.len() as u8,
            bits: 0,
            value_len: 0,
            atime_code: 0,
            key_binary: req.key_binary,
            flags: req.flags,
            exptime: req.exptime,
            cas: None,
        };
        let mut q = Queue::Small;
        let mut body = Body::New(req.value);
        match old {
            None => match req.mode {
                _ if is_cas => return StoreOutcome::NotFound,
                StoreMode::Set | StoreMode::Add => {}
                StoreMode::Replace | StoreMode::Append | StoreMode::Prepend => {
                    return StoreOutcome::NotStored
                }
            },
            Some((_, loc)) => {
                let (oh, _, _, seg, off) = self.record(loc, ctx);
                let old_cas = Self::cas_of(&oh, seg, off);
                q = seg.queue;
                h.set_freq(oh.freq());
                let req_cas = req.cas.unwrap_or(0);
                let cas_none = req_cas == 0;
                let cas_match = !cas_none && req_cas == old_cas;
                let cas_stale = !cas_none && !cas_match && req.invalidate && req_cas < old_cas;
                match req.mode {
                    StoreMode::Add => {
                        let code = item::encode_atime(now.saturating_sub(seg.epoch));
                        let field = item::atime_field(code, oh.key_binary);
                        let (slot, off) = unpack(loc, ctx.off_shift);
                        let at = off + item::atime_offset(oh.value_len);
                        self.seg_mut(slot).write_header(at, &field.to_le_bytes());
                        return StoreOutcome::NotStored;
                    }
                    _ if is_cas => {
                        if cas_stale {
                            h.exptime = oh.exptime;
                            h.bits |= STALE | (oh.bits & TOKEN_SENT);
                        } else if !cas_match {
                            return StoreOutcome::Exists;
                        }
                    }
                    StoreMode::Append | StoreMode::Prepend => {
                        if !cas_none && !cas_match {
                            return StoreOutcome::Exists;
                        }
                        if Self::too_large(req.key, oh.value_len as usize + req.value.len(), ctx) {
                            return StoreOutcome::NotStored;
                        }
                        h.flags = oh.flags;
                        h.exptime = oh.exptime;
                        h.value_len = oh.value_len;
                        // memcached builds the joined value in a new item, which is never binary.
                        h.key_binary = false;
                        body = if req.mode == StoreMode::Append {
                            Body::Append(req.value)
                        } else {
                            Body::Prepend(req.value)
                        };
                    }
                    StoreMode::Set | StoreMode::Replace => {}
                }
            }
        }
        let needs_old = matches!(body, Body::Append(_) | Body::Prepend(_));
        match self.put(req.key, hash, q, h, body, true, now, ctx) {
            Ok(Some((_, cas))) => StoreOutcome::Stored { cas },
            Ok(None) => {
                debug_assert!(needs_old);
                StoreOutcome::NotStored
            }
            Err(Oom) => {
                if req.mode == StoreMode::Set {
                    if let Some((ts, loc)) = self.find(req.key, hash, ctx) {
                        self.unlink(ts, loc, hash, Cause::Removed, now, ctx);
                    }
                }
                StoreOutcome::OutOfMemory
            }
        }
    }

    // ----- reads -----------------------------------------------------------

    pub(crate) fn get<R>(
        &mut self,
        key: &[u8],
        hash: u64,
        now: u32,
        touch: Option<u32>,
        ctx: &Ctx,
        f: impl FnOnce(&ItemView) -> R,
    ) -> Option<R> {
        let (_, mut loc) = self.lookup(key, hash, now, ctx)?;
        if let Some(exp) = touch {
            loc = self.set_exptime(key, hash, loc, exp, now, ctx).ok()?;
        }
        let (h, hlen, bytes, seg, off) = self.record(loc, ctx);
        let r = f(&Self::view_of(&h, hlen, bytes, seg, off));
        self.bump_with(loc, &h, now, ctx);
        Some(r)
    }

    /// Reads without changing anything about the item (`me`): no access-time or fetched update, no
    /// stampede token.
    pub(crate) fn peek<R>(
        &mut self,
        key: &[u8],
        hash: u64,
        now: u32,
        ctx: &Ctx,
        f: impl FnOnce(&ItemView) -> R,
    ) -> Option<R> {
        let (_, loc) = self.lookup(key, hash, now, ctx)?;
        Some(f(&self.view(loc, ctx)))
    }

    pub(crate) fn touch(
        &mut self,
        key: &[u8],
        hash: u64,
        now: u32,
        exptime: u32,
        ctx: &Ctx,
    ) -> bool {
        let Some((_, loc)) = self.lookup(key, hash, now, ctx) else {
            return false;
        };
        match self.set_exptime(key, hash, loc, exptime, now, ctx) {
            Ok(loc) => {
                self.bump(loc, now, ctx);
                true
            }
            Err(Oom) => false,
        }
    }

    pub(crate) fn meta_get<R>(
        &mut self,
        key: &[u8],
        hash: u64,
        now: u32,
        opts: &MetaGetOptions,
        ctx: &Ctx,
        f: impl FnOnce(&MetaView) -> R,
    ) -> Option<R> {
        let mut created = false;
        let found = self.lookup(key, hash, now, ctx);
        let mut loc = match (found, opts.vivify) {
            (Some((_, loc)), _) => loc,
            (None, Some(exptime)) => {
                if key.is_empty() || key.len() > item::KEY_MAX_LEN {
                    return None;
                }
                let h = Header {
                    key_len: key.len() as u8,
                    bits: 0,
                    value_len: 0,
                    atime_code: 0,
                    // memcached's `mg N` item is never marked binary, whatever the request's key.
                    key_binary: false,
                    flags: 0,
                    exptime,
                    cas: None,
                };
                created = true;
                self.put(key, hash, Queue::Small, h, Body::New(&[]), true, now, ctx)
                    .ok()??
                    .0
            }
            (None, None) => return None,
        };
        let (before, ..) = self.record(loc, ctx);
        // `l` is the time since the access before this command's (memcached's), which a touch that
        // rewrites the item must not reset.
        let last_access = self.view(loc, ctx).last_access;
        if let Some(exp) = opts.touch {
            loc = self.set_exptime(key, hash, loc, exp, now, ctx).ok()?;
        }
        let (h, ..) = self.record(loc, ctx);
        let token_sent = h.has(TOKEN_SENT);
        let mut won = created;
        if let Some(recache) = opts.recache {
            // memcached judges `R` against the TTL as of its place among the flags.
            let exptime = if opts.recache_before_touch {
                before.exptime
            } else {
                h.exptime
            };
            if !token_sent && !created && exptime != 0 && exptime < recache {
                won = true;
            }
        }
        let stale = h.has(STALE);
        if stale && !token_sent {
            won = true;
        }
        if won {
            self.update_bits(loc, ctx, |b| b | TOKEN_SENT);
        }
        let mut item = self.view(loc, ctx);
        item.token_sent = token_sent;
        item.last_access = last_access;
        let view = MetaView {
            item,
            exptime_before: before.exptime,
            created,
            won,
            already_won: token_sent,
            stale,
        };
        let r = f(&view);
        if !opts.no_bump {
            self.bump(loc, now, ctx);
        }
        Some(r)
    }

    // ----- deletes and arithmetic -----------------------------------------

    pub(crate) fn delete(
        &mut self,
        key: &[u8],
        hash: u64,
        now: u32,
        cas: Option<u64>,
        ctx: &Ctx,
    ) -> DeleteOutcome {
        let Some((ts, loc)) = self.lookup(key, hash, now, ctx) else {
            return DeleteOutcome::NotFound;
        };
        if let Some(c) = cas {
            if self.view(loc, ctx).cas != c {
                return DeleteOutcome::Exists;
            }
        }
        self.unlink(ts, loc, hash, Cause::Removed, now, ctx);
        DeleteOutcome::Deleted
    }

    /// `md I`: mark stale with a new CAS, clear the token, maybe set a TTL.
    /// If the rewrite cannot get memory the item is deleted instead, which
    /// clients see as a miss rather than as fresh data.
    pub(crate) fn mark_stale(
        &mut self,
        key: &[u8],
        hash: u64,
        now: u32,
        cas: Option<u64>,
        exptime: Option<u32>,
        ctx: &Ctx,
    ) -> DeleteOutcome {
        let Some((_, loc)) = self.lookup(key, hash, now, ctx) else {
            return DeleteOutcome::NotFound;
        };
        if let Some(c) = cas {
            if self.view(loc, ctx).cas != c {
                return DeleteOutcome::Exists;
            }
        }
        let edit = |h: &mut Header| {
            h.bits = (h.bits | STALE) & !TOKEN_SENT;
            if let Some(e) = exptime {
                h.exptime = e;
            }
        };
        if self
            .rewrite(key, hash, now, ctx, false, edit, Body::Old, false)
            .is_err()
        {
            if let Some((ts, loc)) = self.find(key, hash, ctx) {
                self.unlink(ts, loc, hash, Cause::Removed, now, ctx);
            }
        }
        DeleteOutcome::Deleted
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn arith(
        &mut self,
        key: &[u8],
        hash: u64,
        now: u32,
        incr: bool,
        delta: u64,
        opts: &ArithOptions,
        ctx: &Ctx,
    ) -> ArithOutcome {
        let Some((_, loc)) = self.lookup(key, hash, now, ctx) else {
            let Some((initial, exptime)) = opts.vivify else {
                return ArithOutcome::NotFound;
            };
            if key.is_empty() || key.len() > item::KEY_MAX_LEN {
                return ArithOutcome::NotFound;
            }
            let digits = initial.to_string();
            let h = Header {
                key_len: key.len() as u8,
                bits: 0,
                value_len: 0,
                atime_code: 0,
                // As for `mg N`: memcached's `ma N` item is never marked binary.
                key_binary: false,
                flags: 0,
                exptime,
                cas: None,
            };
            return match self.put(
                key,
                hash,
                Queue::Small,
                h,
                Body::New(digits.as_bytes()),
                true,
                now,
                ctx,
            ) {
                Ok(Some((_, cas))) => ArithOutcome::Value {
                    value: initial,
                    cas,
                    exptime,
                    exptime_before: 0,
                    created: true,
                },
                _ => ArithOutcome::OutOfMemory,
            };
        };
        let view = self.view(loc, ctx);
        // memcached's do_add_delta order: an empty value is refused before the CAS is compared.
        if view.value.is_empty() {
            return ArithOutcome::NonNumeric;
        }
        if let Some(c) = opts.cas {
            if c != 0 && c != view.cas {
                return ArithOutcome::Exists;
            }
        }
        let Some(current) = numeric::parse_counter(view.value) else {
            return ArithOutcome::NonNumeric;
        };
        let value = numeric::apply_delta(current, delta, incr);
        let mut rendered = Vec::with_capacity(24);
        numeric::render_counter(value, view.value.len(), &mut rendered);
        // A number that no longer fits (or an item memcached cannot rewrite in place) makes memcached
        // allocate a new item: the bare digits, not fetched, not stale, no token out, key not marked binary;
        // `ma`'s `T` then goes to the old item memcached still holds, so the new one keeps the old TTL.
        let replace = opts.replace || rendered.len() > view.value.len();
        if replace {
            numeric::render_counter(value, 0, &mut rendered);
        }
        let exptime_before = view.exptime;
        let exptime = match opts.exptime {
            Some(exptime) if !replace => exptime,
            _ => exptime_before,
        };
        let edit = |h: &mut Header| {
            h.exptime = exptime;
            if replace {
                h.bits &= !(FETCHED | STALE | TOKEN_SENT);
                h.key_binary = false;
            }
        };
        match self.rewrite(
            key,
            hash,
            now,
            ctx,
            false,
            edit,
            Body::New(&rendered),
            replace,
        ) {
            Ok((_, cas)) => ArithOutcome::Value {
                value,
                cas,
                exptime,
                exptime_before,
                created: false,
            },
            Err(Oom) => ArithOutcome::OutOfMemory,
        }
    }

    // ----- maintenance, dumps, stats --------------------------------------

    /// Crawls up to `budget` segments: unlinks expired items (if `expire`, memcached's crawler enabled;
    /// flushed ones always), returns fully dead segments to the pool, and compacts sealed segments that
    /// are less than a quarter live (no live item is evicted by this).
    pub(crate) fn maintain(
        &mut self,
        now: u32,
        budget: usize,
        expire: bool,
        ctx: &Ctx,
        report: &mut MaintainReport,
    ) {
        let slots = self.segs.len();
        for _ in 0..budget.min(slots) {
            self.crawl_cursor = (self.crawl_cursor + 1) % slots.max(1);
            let slot = self.crawl_cursor as u16;
            let Some(seg) = self.segs[slot as usize].as_ref() else {
                continue;
            };
            let q = seg.queue;
            // The draining victim is crawled for expired items, but it is in no queue to compact it from.
            let is_open = self.open[q as usize] == Some(slot)
                || self.draining.is_some_and(|d| d.slot == slot);
            let due = seg.min_exptime != 0 && seg.min_exptime <= now;
            if self.hide_all || (expire && due) {
                report.segments_scanned += 1;
                report.items_expired += self.crawl_segment(slot, now, false, ctx).reclaimed;
            }
            if is_open {
                continue;
            }
            let seg = self.seg(slot);
            let sparse = seg.live_bytes * 4 < seg.mem.len();
            if seg.live_items == 0 || sparse {
                let pos = self.unqueue(q, slot);
                if self.evacuate(slot, now, ctx, false, expire) {
                    if let Some(mem) = self.release_slot(slot, ctx) {
                        ctx.pool.give_back(mem);
                    }
                    report.segments_freed += 1;
                } else {
                    self.queues[q as usize].insert(pos, slot);
                }
            }
        }
    }

    /// Checks the items of one segment for expiry, as memcached's crawler checks an LRU: unlinks the
    /// expired and flushed ones (counted as the crawler's reclaims) and notes the earliest expiry of the
    /// others. `every_item`: counts every live item as checked (`lru_crawler crawl`); otherwise only those
    /// with a TTL are looked up (the background step, which skips the index lookups of immortal items).
    pub(crate) fn crawl_segment(
        &mut self,
        slot: u16,
        now: u32,
        every_item: bool,
        ctx: &Ctx,
    ) -> CrawlReport {
        let mut report = CrawlReport::default();
        let q = self.seg(slot).queue;
        let end = self.seg(slot).write_pos;
        self.seg_mut(slot).min_exptime = 0;
        let mut off = 0;
        while off < end {
            let bytes = &self.seg(slot).mem.bytes()[off..end];
            if bytes[0] == PAD {
                off += 1;
                continue;
            }
            let (h, hlen) = Header::decode(bytes);
            let loc = pack(slot, off, ctx.off_shift);
            off += h.record_len();
            if h.exptime == 0 && !self.hide_all && !every_item {
                continue;
            }
            let hash = ctx.hash(&bytes[hlen..hlen + h.key_len as usize]);
            let Some(ts) = self.index.find(hash, |l| l == loc) else {
                continue;
            };
            self.classes[q as usize].crawler_items_checked += 1;
            report.checked += 1;
            if self.hide_all || expired(&h, now) {
                self.unlink(ts, loc, hash, Cause::Expired(Reclaimer::Crawler), now, ctx);
                report.reclaimed += 1;
            } else if h.exptime != 0 {
                let seg = self.seg_mut(slot);
                seg.min_exptime = earliest(seg.min_exptime, h.exptime);
            }
        }
        report
    }

    /// The segments of class `class` (1: the small queue, 2: the main one), oldest first.
    pub(crate) fn class_segments(&self, class: u8) -> Vec<u16> {
        match class {
            1 | 2 => self.queues[usize::from(class - 1)]
                .iter()
                .copied()
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Whether `slot` still holds a segment of class `class` (a crawl lets go of the lock between segments).
    pub(crate) fn is_class_segment(&self, slot: u16, class: u8) -> bool {
        self.segs
            .get(usize::from(slot))
            .and_then(Option::as_ref)
            .is_some_and(|seg| seg.queue as u8 + 1 == class)
    }

    pub(crate) fn dump(&self, now: u32, ctx: &Ctx, f: &mut dyn FnMut(&DumpEntry)) {
        for loc in self.index.live_locations() {
            let (h, ..) = self.record(loc, ctx);
            if self.hide_all || expired(&h, now) {
                continue;
            }
            let v = self.view(loc, ctx);
            let (slot, _) = unpack(loc, ctx.off_shift);
            f(&DumpEntry {
                key: v.key,
                exptime: v.exptime,
                last_access: v.last_access,
                cas: v.cas,
                fetched: v.fetched,
                class_id: self.seg(slot).queue as u8 + 1,
                size: h.record_len(),
                value_len: v.value.len(),
                flags: v.flags,
            });
        }
    }

    pub(crate) fn add_stats(&self, out: &mut StoreStats) {
        out.total_items += self.total_items;
        out.hash_slots += self.index.capacity() as u64;
        for (i, c) in self.classes.iter().enumerate() {
            let o = &mut out.classes[i];
            o.items += c.items;
            o.bytes += c.bytes;
            o.segments += self.queues[i].len() as u64;
            if let Some(d) = self.draining {
                o.segments += u64::from(self.seg(d.slot).queue as usize == i);
            }
            o.evicted += c.evicted;
            o.evicted_nonzero += c.evicted_nonzero;
            o.evicted_unfetched += c.evicted_unfetched;
            o.evicted_active += c.evicted_active;
            o.evicted_time = o.evicted_time.max(c.evicted_time);
            o.expired_unfetched += c.expired_unfetched;
            o.reclaimed += c.reclaimed;
            o.crawler_reclaimed += c.crawler_reclaimed;
            o.crawler_items_checked += c.crawler_items_checked;
            o.lrutail_reflocked += c.lrutail_reflocked;
            o.outofmemory += c.outofmemory;
            if let Some(&front) = self.queues[i].front() {
                let t = self.seg(front).epoch;
                if o.oldest_item_time == 0 || t < o.oldest_item_time {
                    o.oldest_item_time = t;
                }
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn check_invariants(&self, ctx: &Ctx) {
        let mut items = [0u64; 2];
        let mut bytes = [0u64; 2];
        for loc in self.index.live_locations() {
            let (h, ..) = self.record(loc, ctx);
            let (slot, _) = unpack(loc, ctx.off_shift);
            let q = self.seg(slot).queue as usize;
            items[q] += 1;
            bytes[q] += h.record_len() as u64;
            let key = self.key_at(loc, ctx);
            assert_eq!(self.find(key, ctx.hash(key), ctx).map(|x| x.1), Some(loc));
        }
        for q in 0..2 {
            assert_eq!(self.classes[q].items, items[q], "class {q} item count");
            assert_eq!(self.classes[q].bytes, bytes[q], "class {q} byte count");
        }
        let listed: usize = self.queues.iter().map(|q| q.len()).sum::<usize>()
            + usize::from(self.draining.is_some());
        assert_eq!(
            listed,
            self.segs.iter().flatten().count(),
            "every segment is queued once"
        );
        let live: u32 = self.segs.iter().flatten().map(|s| s.live_items).sum();
        assert_eq!(live as usize, self.index.len());
    }
}

/// A freed segment goes to the pool if its eviction reserve is short (the
/// caller then frees another), else straight to the caller, pages intact.
fn keep_unless_reserve_short(mem: MmapBuf, ctx: &Ctx) -> Option<MmapBuf> {
    if ctx.pool.reserve_short() {
        ctx.pool.give_back(mem);
        None
    } else {
        Some(mem)
    }
}

enum Steal {
    /// Another shard freed this segment.
    Got(MmapBuf),
    /// Some shard that might give one was locked.
    Busy,
    /// No other shard could give one.
    Nothing,
}

/// Has the shard owning the most segments (other than ours, and only if it
/// owns more than `mine`) free one. `try_lock` only, so two shards short of
/// memory never wait on each other.
fn steal(now: u32, ctx: &Ctx, mine: usize) -> Steal {
    let mut others: Vec<(usize, usize)> = (0..ctx.shards.len())
        .filter(|&i| i != ctx.me)
        .map(|i| (ctx.owned[i].load(Ordering::Relaxed), i))
        .filter(|&(owned, _)| owned > mine)
        .collect();
    others.sort_unstable_by(|a, b| b.cmp(a));
    let mut busy = false;
    for (_, other) in others {
        match ctx.shards[other].try_lock() {
            Some(mut g) => {
                if let Some(mem) = g.reclaim(now, &Ctx { me: other, ..*ctx }) {
                    return Steal::Got(mem);
                }
            }
            None => busy = true,
        }
    }
    if busy {
        Steal::Busy
    } else {
        Steal::Nothing
    }
}
