//! What one set costs once the store is full: 3M sets of new 16-byte keys with 100-byte values into a
//! 64 MiB store (full after about 500k), each timed alone, on one thread; the distribution of the last 2M
//! and how many took over 100 µs and over 1 ms. A set that needs a segment evicts a whole one (every item
//! in it unlinked or moved), and a set that finds its shard's index too full (live keys plus the tombstones
//! deletions leave) rebuilds that index: both are paid by the set that meets them, under its shard's lock.
//!
//! `taskset -c 1 cargo run --release -p tern-cache-storage --example set_latency [MiB] [value bytes]`

use std::time::Instant;

use tern_cache_storage::{Store, StoreConfig, StoreRequest};

fn main() {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().map_or(64, |a| a.parse().expect("MiB"));
    let value_len: usize = args.next().map_or(100, |a| a.parse().expect("value bytes"));
    let store = Store::new(StoreConfig {
        memory_limit: mib << 20,
        ..Default::default()
    })
    .expect("a store");
    let value = vec![b'v'; value_len];
    let sets = 3_000_000usize;
    let warm = 1_000_000usize;
    let mut nanos = Vec::with_capacity(sets - warm);
    let mut key = [0u8; 16];
    for i in 0..sets {
        // 16-byte keys like "key:000000000042".
        key.copy_from_slice(format!("key:{i:012}").as_bytes());
        let started = Instant::now();
        store.store(&StoreRequest::set(&key, &value), 1);
        if i >= warm {
            nanos.push(started.elapsed().as_nanos() as u64);
        }
    }
    let evictions = store.stats().evictions;
    nanos.sort_unstable();
    let at = |q: f64| nanos[((nanos.len() - 1) as f64 * q) as usize];
    let over = |limit: u64| nanos.iter().filter(|&&n| n > limit).count();
    println!(
        "{} sets at full memory ({mib} MiB, {value_len}-byte values), ns: p50 {} p99 {} p99.9 {} p99.99 {} max {}; \
         over 100 us: {}, over 1 ms: {}; evictions {evictions}",
        nanos.len(),
        at(0.5),
        at(0.99),
        at(0.999),
        at(0.9999),
        nanos[nanos.len() - 1],
        over(100_000),
        over(1_000_000),
    );
}
