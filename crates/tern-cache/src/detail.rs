//! memcached's per-prefix statistics (`stats detail on|off|dump`, `-D <char>`).
//!
//! memcached keeps one global table behind its stats lock, taken for every counted command while detail is
//! on. Here every I/O loop counts into its own table (a mutex only its loop takes, except while a `dump` or
//! `stats reset` reads or clears it), and `dump` merges the tables. With detail off, counting costs one
//! relaxed load of a flag that only `stats detail on|off` writes.
//!
//! What is counted, as in memcached 1.6.18: `get`/`gets`/`gat`/`gats` per key (and whether it hit), the
//! classic storage commands (`set add replace append prepend cas`, counted before the value is read, so a
//! bad data chunk or a value over `-I` counts too), `delete`. Meta commands, `incr`/`decr` and `touch` are
//! not counted; nor are keys without the delimiter. A key's prefix is what precedes its first delimiter
//! (an empty prefix when the key starts with it).
//!
//! The dump lists prefixes in memcached's order: by bucket of its 256-bucket table (MurmurHash3 of the
//! prefix, memcached's default hash), newest first within a bucket. memcached's lookup compares only the
//! key's prefix length of a stored prefix, so a key whose prefix begins another prefix of the same bucket
//! counts under that one; each loop's table reproduces that, though two loops that create such a pair in
//! different orders may split their counts differently than memcached's single table would.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// memcached's `PREFIX_HASH_SIZE`.
const BUCKETS: usize = 256;

/// What a command did to a key, for its prefix's counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Get { hit: bool },
    Set,
    Delete,
}

#[derive(Clone, Debug, Default)]
struct Counts {
    gets: u64,
    hits: u64,
    sets: u64,
    deletes: u64,
}

#[derive(Debug)]
struct Entry {
    prefix: Box<[u8]>,
    /// When the prefix was first seen (store-wide order), for the dump's order.
    created: u64,
    counts: Counts,
}

/// One loop's table: memcached's buckets, each oldest entry first.
#[derive(Debug, Default)]
pub struct LoopPrefixes {
    buckets: Vec<Vec<Entry>>,
}

impl LoopPrefixes {
    fn clear(&mut self) {
        self.buckets.clear();
    }
}

/// The server's per-prefix statistics.
pub struct Detail {
    enabled: AtomicBool,
    delimiter: u8,
    loops: Mutex<Vec<Arc<Mutex<LoopPrefixes>>>>,
    created: AtomicU64,
}

impl Detail {
    pub fn new(delimiter: u8, enabled: bool) -> Detail {
        Detail {
            enabled: AtomicBool::new(enabled),
            delimiter,
            loops: Mutex::new(Vec::new()),
            created: AtomicU64::new(0),
        }
    }

    pub fn delimiter(&self) -> u8 {
        self.delimiter
    }

    /// A table for a new loop.
    pub fn register(&self) -> Arc<Mutex<LoopPrefixes>> {
        let table = Arc::new(Mutex::new(LoopPrefixes::default()));
        lock(&self.loops).push(table.clone());
        table
    }

    /// Whether commands are counted (`stats detail on`, or `-D`).
    #[inline]
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }

    /// Counts `op` on `key` in the loop's `table` (call only when [`Detail::enabled`]).
    pub fn record(&self, table: &Mutex<LoopPrefixes>, key: &[u8], op: Op) {
        let Some(len) = key.iter().position(|&b| b == self.delimiter) else {
            return;
        };
        let prefix = &key[..len];
        let bucket = murmur3_32(prefix) as usize % BUCKETS;
        let mut table = lock(table);
        if table.buckets.is_empty() {
            table.buckets.resize_with(BUCKETS, Vec::new);
        }
        let entries = &mut table.buckets[bucket];
        // memcached's `strncmp(stored, key, length) == 0`, newest entry first.
        let found = entries
            .iter()
            .rposition(|e| e.prefix.len() >= len && &e.prefix[..len] == prefix);
        let entry = match found {
            Some(i) => &mut entries[i],
            None => {
                entries.push(Entry {
                    prefix: prefix.into(),
                    created: self.created.fetch_add(1, Ordering::Relaxed),
                    counts: Counts::default(),
                });
                entries.last_mut().expect("just pushed")
            }
        };
        let c = &mut entry.counts;
        match op {
            Op::Get { hit } => {
                c.gets += 1;
                c.hits += u64::from(hit);
            }
            Op::Set => c.sets += 1,
            Op::Delete => c.deletes += 1,
        }
    }

    /// `stats detail dump`: `PREFIX <prefix> get <n> hit <n> set <n> del <n>` lines, then `END`.
    pub fn dump(&self, out: &mut Vec<u8>) {
        let mut merged: HashMap<Box<[u8]>, (usize, u64, Counts)> = HashMap::new();
        for table in lock(&self.loops).iter() {
            let table = lock(table);
            for (bucket, entries) in table.buckets.iter().enumerate() {
                for e in entries {
                    let m = merged.entry(e.prefix.clone()).or_insert((
                        bucket,
                        e.created,
                        Counts::default(),
                    ));
                    m.1 = m.1.min(e.created);
                    m.2.gets += e.counts.gets;
                    m.2.hits += e.counts.hits;
                    m.2.sets += e.counts.sets;
                    m.2.deletes += e.counts.deletes;
                }
            }
        }
        let mut lines: Vec<_> = merged.into_iter().collect();
        lines.sort_unstable_by_key(|(_, (bucket, created, _))| {
            (*bucket, std::cmp::Reverse(*created))
        });
        for (prefix, (_, _, c)) in lines {
            out.extend_from_slice(b"PREFIX ");
            out.extend_from_slice(&prefix);
            out.extend_from_slice(
                format!(
                    " get {} hit {} set {} del {}\r\n",
                    c.gets, c.hits, c.sets, c.deletes
                )
                .as_bytes(),
            );
        }
        out.extend_from_slice(b"END\r\n");
    }

    /// `stats reset` forgets every prefix, as memcached's does.
    pub fn clear(&self) {
        for table in lock(&self.loops).iter() {
            lock(table).clear();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// MurmurHash3 x86 32-bit with seed 0: memcached's default `hash()` (`-o hash_algorithm=murmur3`).
pub fn murmur3_32(data: &[u8]) -> u32 {
    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;
    let mut h: u32 = 0;
    let mut blocks = data.chunks_exact(4);
    for block in &mut blocks {
        let mut k = u32::from_le_bytes(block.try_into().expect("4 bytes"));
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
        h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        let mut k = 0u32;
        for (i, &b) in tail.iter().enumerate() {
            k ^= u32::from(b) << (8 * i);
        }
        h ^= k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
    }
    h ^= data.len() as u32;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur3_matches_the_reference() {
        // MurmurHash3_x86_32 reference values (seed 0).
        assert_eq!(murmur3_32(b""), 0);
        assert_eq!(murmur3_32(b"hello"), 0x248b_fa47);
        assert_eq!(
            murmur3_32(b"The quick brown fox jumps over the lazy dog"),
            0x2e4f_f723
        );
        // The buckets memcached 1.6.18 put these prefixes in (their dump order).
        let bucket = |p: &[u8]| murmur3_32(p) % 256;
        assert_eq!(
            [b"".as_slice(), b"b", b"g", b"zz", b"x", b"c", b"a"].map(bucket),
            [0, 3, 22, 24, 27, 95, 178]
        );
    }

    #[test]
    fn counts_merge_across_loops_in_memcached_order() {
        let d = Detail::new(b':', true);
        let (one, two) = (d.register(), d.register());
        d.record(&one, b"a:1", Op::Get { hit: true });
        d.record(&two, b"c:1", Op::Set);
        d.record(&two, b"a:2", Op::Get { hit: false });
        d.record(&one, b"nodelimiter", Op::Set);
        d.record(&one, b":x", Op::Delete);
        let mut out = Vec::new();
        d.dump(&mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "PREFIX  get 0 hit 0 set 0 del 1\r\nPREFIX c get 0 hit 0 set 1 del 0\r\n\
             PREFIX a get 2 hit 1 set 0 del 0\r\nEND\r\n"
        );
        d.clear();
        let mut out = Vec::new();
        d.dump(&mut out);
        assert_eq!(out, b"END\r\n");
    }

    #[test]
    fn a_shorter_prefix_counts_under_a_longer_one_of_its_bucket_like_memcached() {
        // "u" and "uh" share a bucket; memcached 1.6.18 answers these exact dumps.
        assert_eq!(murmur3_32(b"u") % 256, murmur3_32(b"uh") % 256);
        let dump = |keys: &[&[u8]]| {
            let d = Detail::new(b':', true);
            let t = d.register();
            for key in keys {
                d.record(&t, key, Op::Set);
            }
            d.record(&t, b"u:k", Op::Get { hit: true });
            let mut out = Vec::new();
            d.dump(&mut out);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(
            dump(&[b"uh:k", b"u:k"]),
            "PREFIX uh get 1 hit 1 set 2 del 0\r\nEND\r\n"
        );
        assert_eq!(
            dump(&[b"u:k", b"uh:k"]),
            "PREFIX uh get 1 hit 1 set 1 del 0\r\nPREFIX u get 0 hit 0 set 1 del 0\r\nEND\r\n"
        );
    }
}
