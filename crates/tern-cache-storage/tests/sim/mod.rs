//! Cache-aside hit-ratio simulation shared by `tests/hit_ratio.rs` and
//! `examples/hit_ratio.rs`: the store against an exact LRU on the same trace.

use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};
use std::collections::HashMap;
use tern_cache_storage::{Store, StoreConfig, StoreRequest};

pub const KEY_LEN: usize = 16;
pub const VALUE_LEN: usize = 100;
/// memcached 1.6.18's measured cost per 16+100-byte item beyond the raw
/// bytes (RSS 200.8 B/item, see examples/memcached_memory.rs).
pub const MEMCACHED_OVERHEAD: usize = 85;
/// This store's cost per item beyond the raw bytes: 5-byte header and
/// ~7 bytes of index.
pub const STORE_OVERHEAD: usize = 12;

/// A request trace: Zipf(`skew`) over `keys` keys, with `scan_percent` of
/// requests going to a sequential scan of keys never seen again.
pub fn trace(keys: u64, skew: f64, scan_percent: u32, requests: usize, seed: u64) -> Vec<u64> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let zipf = Zipf::new(keys as f64, skew).unwrap();
    let mut scan = keys;
    (0..requests)
        .map(|_| {
            if rng.random_range(0..100) < scan_percent {
                scan += 1;
                scan
            } else {
                // Scatter ranks so popular keys don't share a shard or segment.
                (zipf.sample(&mut rng) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) % keys
            }
        })
        .collect()
}

fn key_of(id: u64) -> [u8; KEY_LEN] {
    let mut k = [0u8; KEY_LEN];
    k.copy_from_slice(format!("{id:016x}").as_bytes());
    k
}

/// Hit ratio of the store with `memory` bytes (after a warm-up of the first
/// half of the trace).
pub fn store_hit_ratio(trace: &[u64], memory: usize, shards: usize) -> f64 {
    let store = Store::new(StoreConfig {
        memory_limit: memory,
        segment_size: 64 << 10,
        item_size_max: 64 << 10,
        shards,
        ..Default::default()
    })
    .unwrap();
    let value = [b'v'; VALUE_LEN];
    let mut hits = 0usize;
    let warm = trace.len() / 2;
    for (i, &id) in trace.iter().enumerate() {
        let key = key_of(id);
        if store.get(&key, 1, |_| ()).is_some() {
            if i >= warm {
                hits += 1;
            }
        } else {
            store.store(&StoreRequest::set(&key, &value), 1);
        }
    }
    hits as f64 / (trace.len() - warm) as f64
}

/// Hit ratio of an exact LRU holding `memory / (KEY_LEN + VALUE_LEN + overhead)` items.
pub fn lru_hit_ratio(trace: &[u64], memory: usize, overhead: usize) -> f64 {
    let capacity = memory / (KEY_LEN + VALUE_LEN + overhead);
    let mut lru = Lru::new(capacity);
    let warm = trace.len() / 2;
    let mut hits = 0usize;
    for (i, &id) in trace.iter().enumerate() {
        if lru.touch(id) && i >= warm {
            hits += 1;
        }
    }
    hits as f64 / (trace.len() - warm) as f64
}

/// Exact LRU over ids: a hash map into an index-linked list.
struct Lru {
    map: HashMap<u64, usize>,
    nodes: Vec<(u64, usize, usize)>,
    head: usize,
    capacity: usize,
}

const NIL: usize = usize::MAX;

impl Lru {
    fn new(capacity: usize) -> Self {
        Lru {
            map: HashMap::with_capacity(capacity),
            nodes: Vec::with_capacity(capacity),
            head: NIL,
            capacity,
        }
    }

    fn unlink(&mut self, i: usize) {
        let (_, prev, next) = self.nodes[i];
        if next == i {
            self.head = NIL;
            return;
        }
        self.nodes[prev].2 = next;
        self.nodes[next].1 = prev;
        if self.head == i {
            self.head = next;
        }
    }

    fn push_front(&mut self, i: usize) {
        if self.head == NIL {
            self.nodes[i].1 = i;
            self.nodes[i].2 = i;
        } else {
            let tail = self.nodes[self.head].1;
            self.nodes[i].1 = tail;
            self.nodes[i].2 = self.head;
            self.nodes[tail].2 = i;
            let head = self.head;
            self.nodes[head].1 = i;
        }
        self.head = i;
    }

    /// Records an access; true on a hit, else inserts (evicting the tail).
    fn touch(&mut self, id: u64) -> bool {
        if let Some(&i) = self.map.get(&id) {
            self.unlink(i);
            self.push_front(i);
            return true;
        }
        let i = if self.nodes.len() < self.capacity {
            self.nodes.push((id, NIL, NIL));
            self.nodes.len() - 1
        } else {
            let tail = self.nodes[self.head].1;
            self.unlink(tail);
            self.map.remove(&self.nodes[tail].0);
            self.nodes[tail].0 = id;
            tail
        };
        self.map.insert(id, i);
        self.push_front(i);
        false
    }
}
