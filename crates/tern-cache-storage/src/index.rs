//! A shard's key index: open addressing over 64-byte buckets, each one cache line holding twelve 1-byte
//! tags, a 2-byte overflow count and their twelve 4-byte item locations.
//!
//! 5.33 bytes per slot is what buys the memory goal: std/hashbrown maps would need 8+ bytes per entry plus
//! power-of-two slack. A key's home is a bucket (multiply-shift, so the bucket count is any integer and the
//! table is resized in 1.2x steps, staying 75-90% full); it lives there or, when that was full, in the next
//! bucket with room (linear probing by bucket). A lookup reads one line for its probe's tags and locations
//! together (at 90% fill the home bucket almost always ends the probe), then dereferences an item only when
//! its tag matches (1/255 false positives): one cache miss for the index where parallel tag and location
//! arrays took two, which is what a multi-get's look-ahead waits on. A bucket's overflow count is how many
//! keys live past it whose probe went through it (folly's F14 keeps the same count per chunk): a probe ends
//! at a bucket whose count is 0, and a removal walks its key's probe again, counting down, and frees the
//! slot outright. There are no tombstones, so a cache whose keys churn at a steady count never rebuilds its
//! index (with tombstones it did, every few hundred thousand deletions per shard: a rehash of every key, a
//! stall of milliseconds under the shard's lock); a rebuild (which needs the keys, so the shard drives it)
//! happens only when the live keys outgrow the table.

use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use crate::memory::MmapBuf;

const EMPTY: u8 = 0;
/// Slots per bucket: their tags, the overflow count (2 bytes, then 2 of padding), then their locations fill
/// one 64-byte line.
const SLOTS: usize = 12;
const BUCKET_BYTES: usize = 64;
const OVERFLOW_AT: usize = SLOTS;
const LOCS_AT: usize = 16;
/// An overflow count that reached this stays there (probes then always go on past its bucket: slower, never
/// wrong); twelve slots a bucket make it unreachable in practice.
const OVERFLOW_SATURATED: u16 = u16::MAX;
/// Fill that triggers a rebuild.
pub(crate) const MAX_LOAD_PERCENT: usize = 90;
/// Fill right after a rebuild.
pub(crate) const TARGET_LOAD_PERCENT: usize = 75;
const MIN_CAPACITY: usize = 72;

/// SWAR over a bucket's first 16 bytes (its 12 tags and 4 padding bytes), lane i in byte i.
const LO: u128 = u128::from_le_bytes([1; 16]);
const HI: u128 = LO << 7;
/// The high bit of the 12 tag lanes: the padding's lanes never count.
const TAG_LANES: u128 = HI & ((1 << (8 * SLOTS)) - 1);

/// High bit set in each byte of `v` that is zero, in the tag lanes. Exact as to whether any is: a false
/// positive only ever comes above a true zero byte (a borrow); callers check the byte itself.
fn zero_lanes(v: u128) -> u128 {
    v.wrapping_sub(LO) & !v & TAG_LANES
}

pub(crate) struct Index {
    mem: MmapBuf,
    buckets: usize,
    live: usize,
}

/// The bucket a hash's probe starts at in a table of `buckets` buckets.
fn home_bucket(hash: u64, buckets: usize) -> usize {
    ((u64::from(hash as u32) * buckets as u64) >> 32) as usize
}

/// Where a shard's index lives, readable without the shard's lock, so that a multi-key read can ask for the
/// memory of keys it will look up next while it answers the current one (a lookup in a large cache is two
/// cache misses: the bucket, the item). The shard publishes its table here whenever it replaces it; a reader
/// may see an old table or a base and a bucket count of two different tables, which only makes its prefetch
/// useless: a prefetch never faults and reads nothing.
#[derive(Default)]
pub(crate) struct IndexHint {
    base: AtomicPtr<u8>,
    buckets: AtomicUsize,
}

impl IndexHint {
    pub(crate) fn publish(&self, index: &Index) {
        self.base.store(index.mem.as_ptr(), Ordering::Relaxed);
        self.buckets.store(index.buckets, Ordering::Relaxed);
    }

    /// Whether the hint names `index` (tests: a stale hint costs speed silently).
    #[cfg(test)]
    pub(crate) fn names(&self, index: &Index) -> bool {
        self.base.load(Ordering::Relaxed) == index.mem.as_ptr()
            && self.buckets.load(Ordering::Relaxed) == index.buckets
    }

    /// Starts loading the line of `hash`'s home bucket.
    pub(crate) fn prefetch(&self, hash: u64) {
        let base = self.base.load(Ordering::Relaxed);
        let buckets = self.buckets.load(Ordering::Relaxed);
        prefetch(base.wrapping_add(home_bucket(hash, buckets) * BUCKET_BYTES));
    }
}

/// Asks the CPU to bring the cache line at `at` closer; any address is allowed (hence `wrapping_add` by
/// the callers: the pointer is never dereferenced).
#[inline(always)]
pub(crate) fn prefetch(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it neither faults nor reads into the program, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

/// The tag stored for a hash: never EMPTY.
pub(crate) fn tag_of(hash: u64) -> u8 {
    match (hash >> 32) as u8 {
        EMPTY => 1,
        t => t,
    }
}

impl Index {
    /// Bytes a table of `cap` slots (a multiple of the bucket's) maps, rounded to whole pages.
    pub(crate) fn bytes_for(cap: usize) -> usize {
        (cap.div_ceil(SLOTS) * BUCKET_BYTES).div_ceil(4096) * 4096
    }

    /// The capacity to rebuild to for `live` entries: whole buckets.
    pub(crate) fn capacity_for(live: usize) -> usize {
        (live * 100 / TARGET_LOAD_PERCENT)
            .max(MIN_CAPACITY)
            .next_multiple_of(SLOTS)
    }

    /// A table of `cap` slots, rounded up to whole buckets (`huge`: see [`MmapBuf::new`]).
    pub(crate) fn with_capacity(cap: usize, huge: bool) -> Option<Self> {
        let buckets = cap.div_ceil(SLOTS).max(1);
        let mem = MmapBuf::new(Self::bytes_for(buckets * SLOTS), huge)?;
        Some(Index {
            mem,
            buckets,
            live: 0,
        })
    }

    pub(crate) fn mapped_bytes(&self) -> usize {
        self.mem.len()
    }

    pub(crate) fn len(&self) -> usize {
        self.live
    }

    pub(crate) fn capacity(&self) -> usize {
        self.buckets * SLOTS
    }

    /// Whether one more insert would pass the maximum fill.
    pub(crate) fn needs_rebuild(&self) -> bool {
        (self.live + 1) * 100 > self.capacity() * MAX_LOAD_PERCENT
    }

    fn bucket(&self, b: usize) -> &[u8] {
        &self.mem.bytes()[b * BUCKET_BYTES..(b + 1) * BUCKET_BYTES]
    }

    fn bucket_mut(&mut self, b: usize) -> &mut [u8] {
        &mut self.mem.bytes_mut()[b * BUCKET_BYTES..(b + 1) * BUCKET_BYTES]
    }

    /// How many keys live past bucket `b` whose probe went through it.
    fn overflow(&self, b: usize) -> u16 {
        let bucket = self.bucket(b);
        u16::from_le_bytes([bucket[OVERFLOW_AT], bucket[OVERFLOW_AT + 1]])
    }

    /// Counts a key placed past bucket `b` (`up`) or one of those removed; saturated counts stay.
    fn count_overflow(&mut self, b: usize, up: bool) {
        let count = self.overflow(b);
        let count = match (count, up) {
            (OVERFLOW_SATURATED, _) => return,
            (c, true) => c + 1,
            (c, false) => c - 1,
        };
        self.bucket_mut(b)[OVERFLOW_AT..OVERFLOW_AT + 2].copy_from_slice(&count.to_le_bytes());
    }

    /// The 16 tag bytes of a bucket (12 tags, the overflow count, padding) as SWAR lanes.
    fn tag_word(bucket: &[u8]) -> u128 {
        u128::from_le_bytes(bucket[..16].try_into().unwrap())
    }

    fn loc_in(bucket: &[u8], lane: usize) -> u32 {
        let at = LOCS_AT + lane * 4;
        u32::from_le_bytes(bucket[at..at + 4].try_into().unwrap())
    }

    fn next(&self, b: usize) -> usize {
        if b + 1 == self.buckets {
            0
        } else {
            b + 1
        }
    }

    /// The slot whose tag matches and for which `is_match(location)` holds.
    pub(crate) fn find(&self, hash: u64, mut is_match: impl FnMut(u32) -> bool) -> Option<usize> {
        let tag = tag_of(hash);
        let mut b = home_bucket(hash, self.buckets);
        // Every bucket full and none matching: bounded by the table (a rebuild keeps it from happening).
        for _ in 0..self.buckets {
            let bucket = self.bucket(b);
            let word = Self::tag_word(bucket);
            let mut hits = zero_lanes(word ^ (LO * u128::from(tag)));
            while hits != 0 {
                let lane = (hits.trailing_zeros() / 8) as usize;
                if bucket[lane] == tag && is_match(Self::loc_in(bucket, lane)) {
                    return Some(b * SLOTS + lane);
                }
                hits &= hits - 1;
            }
            if self.overflow(b) == 0 {
                return None;
            }
            b = self.next(b);
        }
        None
    }

    /// Inserts a location for a key known to be absent. The caller has made
    /// sure `needs_rebuild()` is false.
    pub(crate) fn insert(&mut self, hash: u64, loc: u32) {
        let tag = tag_of(hash);
        let mut b = home_bucket(hash, self.buckets);
        loop {
            if let Some(lane) = self.bucket(b)[..SLOTS].iter().position(|&t| t == EMPTY) {
                let bucket = self.bucket_mut(b);
                bucket[lane] = tag;
                let at = LOCS_AT + lane * 4;
                bucket[at..at + 4].copy_from_slice(&loc.to_le_bytes());
                self.live += 1;
                return;
            }
            self.count_overflow(b, true);
            b = self.next(b);
        }
    }

    pub(crate) fn loc(&self, slot: usize) -> u32 {
        Self::loc_in(self.bucket(slot / SLOTS), slot % SLOTS)
    }

    pub(crate) fn set_loc(&mut self, slot: usize, loc: u32) {
        let at = LOCS_AT + (slot % SLOTS) * 4;
        self.bucket_mut(slot / SLOTS)[at..at + 4].copy_from_slice(&loc.to_le_bytes());
    }

    /// Frees `slot`, which holds the location of a key hashing to `hash`: the buckets its probe went
    /// through before it count it no more.
    pub(crate) fn remove(&mut self, slot: usize, hash: u64) {
        let (at, lane) = (slot / SLOTS, slot % SLOTS);
        let mut b = home_bucket(hash, self.buckets);
        while b != at {
            self.count_overflow(b, false);
            b = self.next(b);
        }
        self.bucket_mut(at)[lane] = EMPTY;
        self.live -= 1;
    }

    /// Forgets every entry.
    pub(crate) fn clear(&mut self) {
        for b in 0..self.buckets {
            self.bucket_mut(b)[..LOCS_AT].fill(0);
        }
        self.live = 0;
    }

    /// All live locations (for rebuilds and dumps).
    pub(crate) fn live_locations(&self) -> Vec<u32> {
        (0..self.buckets)
            .flat_map(|b| {
                let bucket = self.bucket(b);
                (0..SLOTS)
                    .filter(|&lane| bucket[lane] != EMPTY)
                    .map(move |lane| Self::loc_in(bucket, lane))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn find_agrees_with_a_naive_scan(hashes in proptest::collection::vec(0u64..4096, 1..60), probe in 0u64..4096) {
            // Small hash space: many shared homes and tags, chains that wrap.
            let spread = |h: u64| (h % 64) << 32 | (h * 0x9E37_79B9) & 0xFFFF_FFFF;
            let mut ix = Index::with_capacity(72, false).unwrap();
            for (loc, &h) in hashes.iter().enumerate() {
                ix.insert(spread(h), loc as u32);
            }
            for (loc, &h) in hashes.iter().enumerate().step_by(3) {
                let s = ix.find(spread(h), |l| l == loc as u32).unwrap();
                ix.remove(s, spread(h));
            }
            let live: Vec<(usize, u64)> = hashes.iter().copied().enumerate().filter(|(l, _)| l % 3 != 0).collect();
            for &(loc, h) in &live {
                let s = ix.find(spread(h), |l| l == loc as u32);
                proptest::prop_assert_eq!(s.map(|s| ix.loc(s)), Some(loc as u32));
            }
            // Several live entries may share the probed hash: any one will do.
            let present = live.iter().any(|&(_, h)| h == probe);
            let got = ix.find(spread(probe), |l| hashes[l as usize] == probe && l % 3 != 0).map(|s| ix.loc(s));
            proptest::prop_assert_eq!(got.is_some(), present);
            if let Some(l) = got {
                proptest::prop_assert_eq!(hashes[l as usize], probe);
            }
        }
    }

    #[test]
    fn insert_find_remove_with_collisions() {
        let mut ix = Index::with_capacity(72, false).unwrap();
        // Same home slot and tag for all: forces long probe chains.
        let h = 0x0000_0042_0000_0007u64;
        for loc in 0..64u32 {
            assert!(!ix.needs_rebuild());
            ix.insert(h, loc);
        }
        // 72 slots at most 90% full.
        assert!(ix.needs_rebuild());
        assert_eq!(ix.len(), 64);
        for loc in 0..64u32 {
            let s = ix.find(h, |l| l == loc).unwrap();
            assert_eq!(ix.loc(s), loc);
        }
        let s = ix.find(h, |l| l == 10).unwrap();
        ix.remove(s, h);
        assert!(ix.find(h, |l| l == 10).is_none());
        assert!(
            ix.find(h, |l| l == 63).is_some(),
            "a removal must not cut the chain"
        );
        assert_eq!(ix.live_locations().len(), 63);
        ix.insert(h, 99);
        assert!(ix.find(h, |l| l == 99).is_some());
        assert!(ix.find(h ^ (1 << 33), |_| true).is_none());
    }

    /// Keys churning at a steady count (each insert of a new key after the removal of an old one, as a
    /// full cache's sets and evictions do) never bring the table to a rebuild, and every probe still ends:
    /// with all keys gone, every overflow count is back to 0.
    #[test]
    fn steady_churn_never_needs_a_rebuild() {
        let mut ix = Index::with_capacity(Index::capacity_for(1000), false).unwrap();
        let hash = |k: u64| k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut keys = std::collections::VecDeque::new();
        for k in 0..100_000u64 {
            if keys.len() == 1000 {
                let old = keys.pop_front().unwrap();
                let s = ix.find(hash(old), |l| l == old as u32).unwrap();
                ix.remove(s, hash(old));
            }
            assert!(!ix.needs_rebuild(), "key {k}");
            ix.insert(hash(k), k as u32);
            keys.push_back(k);
        }
        for &k in &keys {
            assert!(ix.find(hash(k), |l| l == k as u32).is_some());
        }
        for k in keys.drain(..) {
            let s = ix.find(hash(k), |l| l == k as u32).unwrap();
            ix.remove(s, hash(k));
        }
        assert_eq!(ix.len(), 0);
        assert!((0..ix.buckets).all(|b| ix.overflow(b) == 0));
    }
}
