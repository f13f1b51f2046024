//! Page-granular memory for segments and hash tables, and the global budget.
//!
//! Item memory comes from anonymous `mmap`s of whole segments, never from the
//! heap per item: a freed region is handed back to the kernel at once
//! (`munmap`), so the resident size tracks the budget instead of the
//! allocator's fragmentation. The hash tables use the same path for the same
//! reason (glibc keeps freed large blocks mapped once its dynamic mmap
//! threshold rises).

use parking_lot::Mutex;
use std::ptr::NonNull;
use std::sync::Arc;

/// The size of a transparent huge page on x86-64 (and most arm64 kernels).
const HUGE_PAGE: usize = 2 << 20;

/// One anonymous private mapping, zero-filled by the kernel, unmapped on drop.
pub(crate) struct MmapBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value. Writes go through
// `write`/`fill`, whose callers hold the owning shard's lock and write only
// bytes no other thread reads (see `SegmentMem`).
unsafe impl Send for MmapBuf {}
// SAFETY: as above; shared references otherwise only read.
unsafe impl Sync for MmapBuf {}

impl MmapBuf {
    /// Maps `len` bytes, or `None` if the kernel refuses. `huge` (memcached's `-L`): advised for
    /// transparent huge pages, and a mapping of whole huge pages starts on a huge-page boundary, so that
    /// the kernel can back all of it with them (only advice, which it may not follow).
    pub(crate) fn new(len: usize, huge: bool) -> Option<Self> {
        assert!(len > 0);
        let aligned = huge && len % HUGE_PAGE == 0;
        let map_len = if aligned { len + HUGE_PAGE } else { len };
        // SAFETY: anonymous private mapping with no address hint; the result
        // is checked against MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let mut start = p.cast::<u8>();
        if aligned {
            // Keep the huge-page-aligned `len` bytes; give back what is before and after them.
            let head = (start as usize).next_multiple_of(HUGE_PAGE) - start as usize;
            // SAFETY: both ranges lie inside the mapping just made and are not used.
            unsafe {
                if head > 0 {
                    libc::munmap(start.cast(), head);
                }
                let tail = HUGE_PAGE - head;
                libc::munmap(start.add(head + len).cast(), tail);
                start = start.add(head);
            }
        }
        if huge {
            // SAFETY: advice on the mapping kept, whole.
            unsafe { libc::madvise(start.cast(), len, libc::MADV_HUGEPAGE) };
        }
        NonNull::new(start).map(|ptr| MmapBuf { ptr, len })
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes for our lifetime.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Copies `bytes` to offset `at` of memory others may share (a segment).
    ///
    /// # Safety
    /// No other thread may read or write `at..at + bytes.len()` meanwhile, and
    /// no reference into that range may be alive: the owning shard's lock is
    /// held, and the range is not the value of a record a [`SegmentMem`] reader
    /// may be sending (headers, and space above the write position, never are).
    pub(crate) unsafe fn write(&self, at: usize, bytes: &[u8]) {
        assert!(at + bytes.len() <= self.len, "write inside the mapping");
        // SAFETY: inside the mapping (asserted); exclusive per the contract.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.as_ptr().add(at), bytes.len())
        };
    }

    /// Sets `at..at + len` to `byte`.
    ///
    /// # Safety
    /// As [`MmapBuf::write`].
    pub(crate) unsafe fn fill(&self, at: usize, len: usize, byte: u8) {
        assert!(at + len <= self.len, "fill inside the mapping");
        // SAFETY: inside the mapping (asserted); exclusive per the contract.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr().add(at), byte, len) };
    }

    /// Drops the physical pages (they read back as zeros) while keeping the
    /// mapping, so an idle free segment costs no resident memory.
    pub(crate) fn discard_pages(&mut self) {
        // SAFETY: advice on our own mapping; MADV_DONTNEED on private anonymous
        // memory simply zero-fills on next touch.
        unsafe {
            libc::madvise(self.ptr.as_ptr().cast(), self.len, libc::MADV_DONTNEED);
        }
    }
}

impl Drop for MmapBuf {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the region we mapped.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// A segment's memory, shared by its shard and by the readers still sending
/// values from it ([`crate::SharedValue`]): a shard that frees the segment
/// while a reader holds it gives up its share, and the last holder returns the
/// memory to the pool. Values are never written in place (only headers and
/// new records above the write position are), so a reader's bytes stay as
/// they were for as long as it holds them.
pub(crate) struct SegmentMem {
    buf: Option<MmapBuf>,
    pool: Pool,
}

impl SegmentMem {
    pub(crate) fn new(buf: MmapBuf, pool: &Pool) -> Arc<SegmentMem> {
        Arc::new(SegmentMem {
            buf: Some(buf),
            pool: pool.clone(),
        })
    }

    /// The memory, for reuse, if nobody else holds it.
    pub(crate) fn reclaim(mem: Arc<SegmentMem>) -> Option<MmapBuf> {
        Arc::try_unwrap(mem).ok().and_then(|mut m| m.buf.take())
    }
}

impl std::ops::Deref for SegmentMem {
    type Target = MmapBuf;
    fn deref(&self) -> &MmapBuf {
        self.buf.as_ref().expect("present until dropped")
    }
}

impl Drop for SegmentMem {
    fn drop(&mut self) {
        if let Some(buf) = self.buf.take() {
            self.pool.give_back(buf);
        }
    }
}

impl std::fmt::Debug for SegmentMem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SegmentMem({} bytes)", self.len())
    }
}

/// The global memory budget (`-m`) and the free segments shared by all shards
/// (cloned into each segment's memory, which returns itself on drop).
#[derive(Clone)]
pub(crate) struct Pool(Arc<PoolShared>);

pub(crate) struct PoolShared {
    segment_size: usize,
    /// Mappings are advised for transparent huge pages ([`MmapBuf::new`]).
    pub(crate) huge_pages: bool,
    inner: Mutex<PoolInner>,
}

impl std::ops::Deref for Pool {
    type Target = PoolShared;
    fn deref(&self) -> &PoolShared {
        &self.0
    }
}

struct PoolInner {
    limit: usize,
    /// Bytes of segments mapped (free or in use) plus hash-table bytes.
    used: usize,
    free: Vec<MmapBuf>,
    /// Free segments kept back for eviction-time copies of surviving items.
    reserve: usize,
    segments_mapped: usize,
    table_bytes: usize,
    malloc_fails: u64,
    /// Shards copying their index into a larger one right now (memcached's `hash_is_expanding`).
    tables_growing: usize,
}

/// A snapshot of the pool's figures for stats.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PoolStats {
    pub limit: usize,
    pub used: usize,
    pub segments_mapped: usize,
    pub segments_free: usize,
    pub table_bytes: usize,
    pub malloc_fails: u64,
    pub tables_growing: usize,
}

impl Pool {
    pub(crate) fn new(limit: usize, segment_size: usize, huge_pages: bool) -> Self {
        let segments = limit / segment_size;
        Pool(Arc::new(PoolShared {
            segment_size,
            huge_pages,
            inner: Mutex::new(PoolInner {
                limit,
                used: 0,
                free: Vec::new(),
                reserve: if segments >= 64 { 2 } else { 1 },
                segments_mapped: 0,
                table_bytes: 0,
                malloc_fails: 0,
                tables_growing: 0,
            }),
        }))
    }
}

impl PoolShared {
    pub(crate) fn segment_size(&self) -> usize {
        self.segment_size
    }

    /// A segment for new data. `for_eviction` may dip into the reserve (used
    /// while copying survivors out of a victim, which frees a whole segment).
    pub(crate) fn take(&self, for_eviction: bool) -> Option<MmapBuf> {
        let mut p = self.inner.lock();
        let keep = if for_eviction { 0 } else { p.reserve };
        if p.free.len() > keep {
            return p.free.pop();
        }
        // Regular writes leave the budget for the reserve unmapped, so the
        // first eviction already has room for its survivors.
        let held_back = (keep - p.free.len()) * self.segment_size;
        if p.used + self.segment_size + held_back > p.limit {
            return None;
        }
        match MmapBuf::new(self.segment_size, self.huge_pages) {
            Some(m) => {
                p.used += self.segment_size;
                p.segments_mapped += 1;
                Some(m)
            }
            None => {
                p.malloc_fails += 1;
                None
            }
        }
    }

    /// Returns a segment's memory: kept as a free segment, or unmapped when
    /// the budget has shrunk below what is mapped.
    pub(crate) fn give_back(&self, mut mem: MmapBuf) {
        let mut p = self.inner.lock();
        if p.used > p.limit {
            p.used -= mem.len();
            p.segments_mapped -= 1;
            drop(p);
            drop(mem);
        } else {
            mem.discard_pages();
            p.free.push(mem);
        }
    }

    /// Whether the pool holds fewer free segments than its eviction reserve.
    pub(crate) fn reserve_short(&self) -> bool {
        let p = self.inner.lock();
        p.free.len() < p.reserve
    }

    /// Accounts `bytes` of hash table against the budget, unmapping free
    /// segments if needed. False if the budget cannot cover it.
    pub(crate) fn reserve_table_bytes(&self, bytes: usize) -> bool {
        let mut p = self.inner.lock();
        while p.used + bytes > p.limit {
            match p.free.pop() {
                Some(m) => {
                    p.used -= m.len();
                    p.segments_mapped -= 1;
                }
                None => return false,
            }
        }
        p.used += bytes;
        p.table_bytes += bytes;
        true
    }

    pub(crate) fn release_table_bytes(&self, bytes: usize) {
        let mut p = self.inner.lock();
        p.used -= bytes;
        p.table_bytes -= bytes;
    }

    /// Sets the budget; free segments are unmapped at once, and the return
    /// value says how many bytes in-use segments still exceed it by.
    pub(crate) fn set_limit(&self, limit: usize) -> usize {
        let mut p = self.inner.lock();
        p.limit = limit;
        p.reserve = if limit / self.segment_size >= 64 {
            2
        } else {
            1
        };
        while p.used > p.limit {
            match p.free.pop() {
                Some(m) => {
                    p.used -= m.len();
                    p.segments_mapped -= 1;
                }
                None => break,
            }
        }
        p.used.saturating_sub(p.limit)
    }

    pub(crate) fn over_limit(&self) -> bool {
        let p = self.inner.lock();
        p.used > p.limit
    }

    pub(crate) fn stats(&self) -> PoolStats {
        let p = self.inner.lock();
        PoolStats {
            limit: p.limit,
            used: p.used,
            segments_mapped: p.segments_mapped,
            segments_free: p.free.len(),
            table_bytes: p.table_bytes,
            malloc_fails: p.malloc_fails,
            tables_growing: p.tables_growing,
        }
    }

    /// A shard starts (`true`) or ends copying its index into a larger one.
    pub(crate) fn table_growing(&self, started: bool) {
        let mut p = self.inner.lock();
        if started {
            p.tables_growing += 1;
        } else {
            p.tables_growing -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_page_mapping_starts_on_a_huge_page_boundary_and_is_whole() {
        for len in [HUGE_PAGE, 3 * HUGE_PAGE] {
            let buf = MmapBuf::new(len, true).expect("mapped");
            assert_eq!(buf.as_ptr() as usize % HUGE_PAGE, 0);
            // Every byte is there: the first and the last written and read back.
            // SAFETY: inside the mapping, which nobody else uses.
            unsafe {
                buf.fill(0, 1, 7);
                buf.fill(len - 1, 1, 9);
            }
            assert_eq!((buf.bytes()[0], buf.bytes()[len - 1]), (7, 9));
        }
        // Not whole huge pages: advised only, wherever the kernel puts it.
        let odd = MmapBuf::new(HUGE_PAGE + 4096, true).expect("mapped");
        assert_eq!(odd.len(), HUGE_PAGE + 4096);
    }
}
