//! A shard's key index: open addressing with linear probing over two parallel
//! arrays, a 1-byte tag per slot and a 4-byte item location.
//!
//! Five bytes per slot is what buys the memory goal: std/hashbrown maps would
//! need 8+ bytes per entry plus power-of-two slack. Capacity is any integer
//! (home slot by multiply-shift), so the table is resized in 1.2x steps and
//! stays 75-90% full. A probe scans tags, contiguous bytes (a miss at 90%
//! fill reads ~50 of them, one or two cache lines), and only reads a
//! location and dereferences an item when its tag matches (1/254 false
//! positives). Deletions leave tombstones; a rebuild (which needs the keys,
//! so the shard drives it) clears them.

use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use crate::memory::MmapBuf;

const EMPTY: u8 = 0;
const TOMBSTONE: u8 = 0xFF;
/// Fill (live + tombstones) that triggers a rebuild.
pub(crate) const MAX_LOAD_PERCENT: usize = 90;
/// Fill right after a rebuild.
pub(crate) const TARGET_LOAD_PERCENT: usize = 75;
const MIN_CAPACITY: usize = 64;

pub(crate) struct Index {
    mem: MmapBuf,
    cap: usize,
    live: usize,
    tombstones: usize,
}

/// The slot a hash's probe starts at in a table of `cap` slots.
fn home_slot(hash: u64, cap: usize) -> usize {
    ((u64::from(hash as u32) * cap as u64) >> 32) as usize
}

/// Where a shard's index lives, readable without the shard's lock, so that a multi-key read can ask for the
/// memory of keys it will look up next while it answers the current one (a lookup in a large cache is two
/// or three cache misses: the tag line, the location line, the item). The shard publishes its table here
/// whenever it replaces it; a reader may see an old table or a base and a capacity of two different tables,
/// which only makes its prefetch useless: a prefetch never faults and reads nothing.
#[derive(Default)]
pub(crate) struct IndexHint {
    base: AtomicPtr<u8>,
    cap: AtomicUsize,
}

impl IndexHint {
    pub(crate) fn publish(&self, index: &Index) {
        self.base.store(index.mem.as_ptr(), Ordering::Relaxed);
        self.cap.store(index.cap, Ordering::Relaxed);
    }

    /// Whether the hint names `index` (tests: a stale hint costs speed silently).
    #[cfg(test)]
    pub(crate) fn names(&self, index: &Index) -> bool {
        self.base.load(Ordering::Relaxed) == index.mem.as_ptr()
            && self.cap.load(Ordering::Relaxed) == index.cap
    }

    /// Starts loading the tag and location lines of `hash`'s home slot.
    pub(crate) fn prefetch(&self, hash: u64) {
        let base = self.base.load(Ordering::Relaxed);
        let cap = self.cap.load(Ordering::Relaxed);
        let home = home_slot(hash, cap);
        prefetch(base.wrapping_add(home * 4));
        prefetch(base.wrapping_add(cap * 4 + home));
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

/// The tag stored for a hash: never EMPTY or TOMBSTONE.
pub(crate) fn tag_of(hash: u64) -> u8 {
    let t = (hash >> 32) as u8;
    if t == EMPTY || t == TOMBSTONE {
        1
    } else {
        t
    }
}

impl Index {
    /// Bytes a table of `cap` slots maps (rounded to whole pages).
    pub(crate) fn bytes_for(cap: usize) -> usize {
        (cap * 5).div_ceil(4096) * 4096
    }

    /// The capacity to rebuild to for `live` entries.
    pub(crate) fn capacity_for(live: usize) -> usize {
        (live * 100 / TARGET_LOAD_PERCENT).max(MIN_CAPACITY)
    }

    pub(crate) fn with_capacity(cap: usize) -> Option<Self> {
        let mem = MmapBuf::new(Self::bytes_for(cap))?;
        Some(Index {
            mem,
            cap,
            live: 0,
            tombstones: 0,
        })
    }

    pub(crate) fn mapped_bytes(&self) -> usize {
        self.mem.len()
    }

    pub(crate) fn len(&self) -> usize {
        self.live
    }

    pub(crate) fn capacity(&self) -> usize {
        self.cap
    }

    /// Whether one more insert would pass the maximum fill.
    pub(crate) fn needs_rebuild(&self) -> bool {
        (self.live + self.tombstones + 1) * 100 > self.cap * MAX_LOAD_PERCENT
    }

    fn locs(&self) -> &[u32] {
        // SAFETY: the mapping is page aligned and holds `cap` u32s first.
        unsafe { std::slice::from_raw_parts(self.mem.as_ptr().cast::<u32>(), self.cap) }
    }

    fn locs_mut(&mut self) -> &mut [u32] {
        // SAFETY: as above, exclusive through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.mem.as_ptr().cast::<u32>(), self.cap) }
    }

    fn tags(&self) -> &[u8] {
        &self.mem.bytes()[self.cap * 4..self.cap * 5]
    }

    fn tags_mut(&mut self) -> &mut [u8] {
        let cap = self.cap;
        &mut self.mem.bytes_mut()[cap * 4..cap * 5]
    }

    fn home(&self, hash: u64) -> usize {
        home_slot(hash, self.cap)
    }

    /// The slot whose tag matches and for which `is_match(location)` holds.
    /// Tags are scanned eight at a time (SWAR) where they don't wrap.
    pub(crate) fn find(&self, hash: u64, mut is_match: impl FnMut(u32) -> bool) -> Option<usize> {
        const LO: u64 = 0x0101_0101_0101_0101;
        const HI: u64 = 0x8080_8080_8080_8080;
        // High bit set in each byte of `v` that is zero; exact for the
        // lowest such byte (later ones may be false positives).
        let zero_bytes = |v: u64| v.wrapping_sub(LO) & !v & HI;
        let tag = tag_of(hash);
        let tags = self.tags();
        let locs = self.locs();
        let mut i = self.home(hash);
        loop {
            if let Some(chunk) = tags.get(i..i + 8) {
                let word = u64::from_le_bytes(chunk.try_into().unwrap());
                let empties = zero_bytes(word);
                let lanes = if empties == 0 {
                    8
                } else {
                    empties.trailing_zeros() / 8
                };
                let mut hits = zero_bytes(word ^ (LO * u64::from(tag)));
                while hits != 0 {
                    let lane = hits.trailing_zeros() / 8;
                    if lane >= lanes {
                        break;
                    }
                    let j = i + lane as usize;
                    if tags[j] == tag && is_match(locs[j]) {
                        return Some(j);
                    }
                    hits &= hits - 1;
                }
                if empties != 0 {
                    return None;
                }
                i += 8;
            } else {
                let t = tags[i];
                if t == EMPTY {
                    return None;
                }
                if t == tag && is_match(locs[i]) {
                    return Some(i);
                }
                i += 1;
            }
            if i >= self.cap {
                i -= self.cap;
            }
        }
    }

    /// Inserts a location for a key known to be absent. The caller has made
    /// sure `needs_rebuild()` is false.
    pub(crate) fn insert(&mut self, hash: u64, loc: u32) {
        let tag = tag_of(hash);
        let mut i = self.home(hash);
        loop {
            let t = self.tags()[i];
            if t == EMPTY || t == TOMBSTONE {
                if t == TOMBSTONE {
                    self.tombstones -= 1;
                }
                self.tags_mut()[i] = tag;
                self.locs_mut()[i] = loc;
                self.live += 1;
                return;
            }
            i += 1;
            if i == self.cap {
                i = 0;
            }
        }
    }

    pub(crate) fn loc(&self, slot: usize) -> u32 {
        self.locs()[slot]
    }

    pub(crate) fn set_loc(&mut self, slot: usize, loc: u32) {
        self.locs_mut()[slot] = loc;
    }

    pub(crate) fn remove(&mut self, slot: usize) {
        let next_empty = self.tags()[(slot + 1) % self.cap] == EMPTY;
        // A slot followed by an empty one ends no probe chain: free it outright.
        if next_empty {
            self.tags_mut()[slot] = EMPTY;
        } else {
            self.tags_mut()[slot] = TOMBSTONE;
            self.tombstones += 1;
        }
        self.live -= 1;
    }

    /// Forgets every entry.
    pub(crate) fn clear(&mut self) {
        self.tags_mut().fill(EMPTY);
        self.live = 0;
        self.tombstones = 0;
    }

    /// All live locations (for rebuilds and dumps).
    pub(crate) fn live_locations(&self) -> Vec<u32> {
        let tags = self.tags();
        self.locs()
            .iter()
            .zip(tags)
            .filter(|(_, &t)| t != EMPTY && t != TOMBSTONE)
            .map(|(&l, _)| l)
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
            let mut ix = Index::with_capacity(72).unwrap();
            for (loc, &h) in hashes.iter().enumerate() {
                ix.insert(spread(h), loc as u32);
            }
            for (loc, &h) in hashes.iter().enumerate().step_by(3) {
                let s = ix.find(spread(h), |l| l == loc as u32).unwrap();
                ix.remove(s);
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
        let mut ix = Index::with_capacity(72).unwrap();
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
        ix.remove(s);
        assert!(ix.find(h, |l| l == 10).is_none());
        assert!(
            ix.find(h, |l| l == 63).is_some(),
            "tombstone must not cut the chain"
        );
        assert_eq!(ix.live_locations().len(), 63);
        ix.insert(h, 99);
        assert!(ix.find(h, |l| l == 99).is_some());
        assert!(ix.find(h ^ (1 << 33), |_| true).is_none());
    }
}
