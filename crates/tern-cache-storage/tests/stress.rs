//! Several threads doing random operations on shared keys for 1 s under
//! memory pressure, with and without eviction: no panic, no torn or
//! misattributed values, unique CAS, counters consistent with the contents,
//! memory within the budget.

use rand::{Rng, SeedableRng};
use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tern_cache_storage::*;

/// A value that names its key and is internally checkable.
fn make_value(key: &[u8], seq: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len.max(key.len() + 9));
    v.extend_from_slice(key);
    v.push(b'|');
    v.extend_from_slice(&seq.to_le_bytes());
    let fill = (seq % 251) as u8;
    while v.len() < len {
        v.push(fill);
    }
    v
}

fn check_value(key: &[u8], v: &[u8]) {
    // Only values written by set (maybe appended to) have this shape.
    if v.len() < key.len() + 9 || &v[..key.len()] != key || v[key.len()] != b'|' {
        return;
    }
    let seq = u64::from_le_bytes(v[key.len() + 1..key.len() + 9].try_into().unwrap());
    let fill = (seq % 251) as u8;
    // Appends add '+' bytes at the end.
    let body = &v[key.len() + 9..];
    let end = body.iter().rposition(|&b| b != b'+').map_or(0, |p| p + 1);
    assert!(
        body[..end].iter().all(|&b| b == fill),
        "torn value for {key:?}"
    );
}

#[test]
fn threads_hammer_shared_keys_evicting() {
    hammer(true);
}

#[test]
fn threads_hammer_shared_keys_without_eviction() {
    hammer(false);
}

fn hammer(evict: bool) {
    let store = Store::new(StoreConfig {
        memory_limit: 4 << 20,
        segment_size: 64 << 10,
        item_size_max: 16 << 10,
        shards: 4,
        evict,
        ..Default::default()
    })
    .unwrap();
    let clock = AtomicU32::new(1);
    let deadline = Instant::now() + Duration::from_secs(1);
    let threads = 4;
    let all_cas: Vec<Vec<u64>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let store = &store;
                let clock = &clock;
                scope.spawn(move || {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(t);
                    let mut cas_seen = Vec::new();
                    let mut ops = 0u64;
                    while Instant::now() < deadline {
                        for _ in 0..256 {
                            ops += 1;
                            let now = clock.load(Ordering::Relaxed);
                            let key = format!("k{}", rng.random_range(0..3000u32)).into_bytes();
                            match rng.random_range(0..100) {
                                0..=39 => {
                                    store.get(&key, now, |v| {
                                        assert_eq!(v.key, &key[..]);
                                        check_value(&key, v.value);
                                    });
                                }
                                40..=69 => {
                                    let len = rng.random_range(10..3000);
                                    let ttl = if rng.random_bool(0.2) {
                                        now + rng.random_range(1..5)
                                    } else {
                                        0
                                    };
                                    let value = make_value(&key, ops * 8 + t, len);
                                    let req = StoreRequest {
                                        exptime: ttl,
                                        ..StoreRequest::set(&key, &value)
                                    };
                                    match store.store(&req, now) {
                                        StoreOutcome::Stored { cas } => cas_seen.push(cas),
                                        StoreOutcome::OutOfMemory if !evict => {}
                                        other => panic!("set failed: {other:?}"),
                                    }
                                }
                                70..=74 => {
                                    let req = StoreRequest {
                                        mode: StoreMode::Append,
                                        ..StoreRequest::set(&key, b"+")
                                    };
                                    if let StoreOutcome::Stored { cas } = store.store(&req, now) {
                                        cas_seen.push(cas);
                                    }
                                }
                                75..=79 => {
                                    if let ArithOutcome::Value { cas, .. } = store.incr_decr(
                                        &key,
                                        now,
                                        true,
                                        1,
                                        &ArithOptions::default(),
                                    ) {
                                        cas_seen.push(cas);
                                    }
                                }
                                80..=84 => {
                                    store.delete(&key, now, None);
                                }
                                85..=89 => {
                                    // Half of the touches take the TTL away (0: in place, when the
                                    // record has the field).
                                    let exptime = if rng.random_bool(0.5) { now + 3 } else { 0 };
                                    store.touch(&key, now, exptime);
                                }
                                90..=94 => {
                                    let o = MetaGetOptions {
                                        vivify: Some(now + 5),
                                        ..Default::default()
                                    };
                                    store.meta_get(&key, now, &o, |m| {
                                        assert!(!(m.won && m.already_won))
                                    });
                                }
                                95 => {
                                    if t == 0 {
                                        clock.fetch_add(1, Ordering::Relaxed);
                                        store.maintain(now, 4, true);
                                    }
                                }
                                _ => {
                                    let st = store.stats();
                                    assert!(st.total_malloced <= st.limit_maxbytes, "{st:?}");
                                }
                            }
                        }
                    }
                    cas_seen
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut unique = HashSet::new();
    for c in all_cas.iter().flatten() {
        assert!(unique.insert(*c), "CAS {c} handed out twice");
    }
    assert!(
        unique.len() > 5_000,
        "too little work done: {}",
        unique.len()
    );
    let now = clock.load(Ordering::Relaxed);
    let st = store.stats();
    if evict {
        assert!(
            st.evictions > 0,
            "the test must run under memory pressure: {st:?}"
        );
    } else {
        assert_eq!(st.evictions, 0);
        assert!(
            st.outofmemory > 0,
            "the test must run out of memory: {st:?}"
        );
    }
    assert!(st.total_malloced <= st.limit_maxbytes);
    // curr_items also counts expired items not yet noticed; after a full
    // crawl it matches what a dump lists.
    store.maintain(now, usize::MAX, true);
    let mut listed = 0u64;
    let mut bytes = 0u64;
    store.dump(now, |e| {
        listed += 1;
        bytes += e.size as u64;
    });
    let st = store.stats();
    assert_eq!(st.curr_items, listed);
    assert_eq!(st.bytes, bytes);
}
