//! `memory_limit` bounds resident memory: after writing 8x the limit in
//! mixed sizes the process grew by at most the limit + 10% (+ 2 MiB for the
//! test's own heap), and a run-time shrink gives memory back.

use rand::{Rng, SeedableRng};
use tern_cache_storage::*;

fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    statm
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<usize>()
        .unwrap()
        * 4096
}

#[test]
fn resident_memory_stays_within_the_limit() {
    let limit = 16 << 20;
    let slack = 2 << 20;
    let value = vec![b'x'; 8000];
    let base = rss();
    let store = Store::new(StoreConfig {
        memory_limit: limit,
        segment_size: 256 << 10,
        item_size_max: 64 << 10,
        ..Default::default()
    })
    .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let mut written = 0usize;
    let mut i = 0u64;
    while written < 8 * limit {
        let len = rng.random_range(50..value.len());
        let ttl = if rng.random_bool(0.3) {
            10 + (i / 1000) as u32
        } else {
            0
        };
        let key = format!("item-{}", rng.random_range(0..200_000u32));
        let r = store.store(
            &StoreRequest {
                exptime: ttl,
                ..StoreRequest::set(key.as_bytes(), &value[..len])
            },
            1 + (i / 1000) as u32,
        );
        assert!(matches!(r, StoreOutcome::Stored { .. }), "{r:?}");
        written += len + key.len();
        i += 1;
        if i % 5000 == 0 {
            store.maintain(1 + (i / 1000) as u32, 8, true);
        }
    }
    let grown = rss() - base;
    let st = store.stats();
    assert!(st.evictions > 0);
    assert!(st.total_malloced <= limit as u64, "{st:?}");
    assert!(
        grown <= limit + limit / 10 + slack,
        "RSS grew by {grown} bytes for a {limit}-byte limit"
    );
    store.set_memory_limit(limit / 4, 1_000);
    let st = store.stats();
    assert!(st.total_malloced <= (limit / 4) as u64, "{st:?}");
    let shrunk = rss() - base;
    println!(
        "limit {limit}: RSS grew {grown}; after shrink to {}: {shrunk}",
        limit / 4
    );
    assert!(
        shrunk <= limit / 4 + limit / 40 + slack,
        "RSS {shrunk} after shrinking to {}",
        limit / 4
    );
}
