//! Unit tests of memcached semantics with a controllable clock.

use super::*;

fn store_with(limit: usize, evict: bool) -> Store {
    Store::new(StoreConfig {
        memory_limit: limit,
        segment_size: 64 << 10,
        item_size_max: 32 << 10,
        shards: 1,
        evict,
        ..Default::default()
    })
    .unwrap()
}

fn small() -> Store {
    store_with(8 << 20, true)
}

fn val(s: &Store, key: &[u8], now: u32) -> Option<Vec<u8>> {
    s.get(key, now, |v| v.value.to_vec())
}

fn req<'a>(mode: StoreMode, key: &'a [u8], value: &'a [u8]) -> StoreRequest<'a> {
    StoreRequest {
        mode,
        ..StoreRequest::set(key, value)
    }
}

fn stored(o: StoreOutcome) -> u64 {
    match o {
        StoreOutcome::Stored { cas } => cas,
        other => panic!("expected Stored, got {other:?}"),
    }
}

#[test]
fn set_get_overwrite_and_flags() {
    let s = small();
    assert_eq!(val(&s, b"k", 1), None);
    let c1 = stored(s.store(
        &StoreRequest {
            flags: 7,
            ..StoreRequest::set(b"k", b"v1")
        },
        1,
    ));
    let got = s
        .get(b"k", 1, |v| {
            (v.value.to_vec(), v.flags, v.cas, v.key.to_vec())
        })
        .unwrap();
    assert_eq!(got, (b"v1".to_vec(), 7, c1, b"k".to_vec()));
    let c2 = stored(s.store(&StoreRequest::set(b"k", b"v2-longer"), 1));
    assert!(c2 > c1);
    assert_eq!(
        s.get(b"k", 1, |v| (v.value.to_vec(), v.flags)).unwrap(),
        (b"v2-longer".to_vec(), 0)
    );
    let st = s.stats();
    assert_eq!(st.curr_items, 1);
    assert_eq!(st.total_items, 2);
    s.check_invariants();
}

#[test]
fn add_replace_semantics() {
    let s = small();
    assert_eq!(
        s.store(&req(StoreMode::Replace, b"k", b"x"), 1),
        StoreOutcome::NotStored
    );
    stored(s.store(&req(StoreMode::Add, b"k", b"a"), 1));
    assert_eq!(
        s.store(&req(StoreMode::Add, b"k", b"b"), 1),
        StoreOutcome::NotStored
    );
    assert_eq!(val(&s, b"k", 1).unwrap(), b"a");
    stored(s.store(&req(StoreMode::Replace, b"k", b"r"), 1));
    assert_eq!(val(&s, b"k", 1).unwrap(), b"r");
}

#[test]
fn append_prepend_keep_flags_and_ttl() {
    let s = small();
    assert_eq!(
        s.store(&req(StoreMode::Append, b"k", b"x"), 1),
        StoreOutcome::NotStored
    );
    stored(s.store(
        &StoreRequest {
            flags: 3,
            exptime: 100,
            ..StoreRequest::set(b"k", b"mid")
        },
        1,
    ));
    let c = stored(s.store(
        &StoreRequest {
            flags: 9,
            exptime: 5,
            ..req(StoreMode::Append, b"k", b"-end")
        },
        1,
    ));
    stored(s.store(&req(StoreMode::Prepend, b"k", b"start-"), 1));
    let (v, f, e, cas) = s
        .get(b"k", 1, |v| (v.value.to_vec(), v.flags, v.exptime, v.cas))
        .unwrap();
    assert_eq!(v, b"start-mid-end");
    assert_eq!((f, e), (3, 100));
    assert!(cas > c);
    // CAS-checked append.
    assert_eq!(
        s.store(
            &StoreRequest {
                cas: Some(1),
                ..req(StoreMode::Append, b"k", b"z")
            },
            1
        ),
        StoreOutcome::Exists
    );
    stored(s.store(
        &StoreRequest {
            cas: Some(cas),
            ..req(StoreMode::Append, b"k", b"z")
        },
        1,
    ));
    assert_eq!(val(&s, b"k", 1).unwrap(), b"start-mid-endz");
    s.check_invariants();
}

#[test]
fn append_past_item_limit_is_not_stored() {
    let s = small();
    let big = vec![b'a'; 20 << 10];
    stored(s.store(&StoreRequest::set(b"k", &big), 1));
    assert_eq!(
        s.store(&req(StoreMode::Append, b"k", &big), 1),
        StoreOutcome::NotStored
    );
    assert_eq!(val(&s, b"k", 1).unwrap().len(), big.len());
}

#[test]
fn cas_semantics() {
    let s = small();
    let cas_req = |v: &'static [u8], c| StoreRequest {
        cas: Some(c),
        ..StoreRequest::set(b"k", v)
    };
    assert_eq!(s.store(&cas_req(b"x", 5), 1), StoreOutcome::NotFound);
    let c = stored(s.store(&StoreRequest::set(b"k", b"a"), 1));
    assert_eq!(s.store(&cas_req(b"x", c + 1), 1), StoreOutcome::Exists);
    assert_eq!(
        s.store(&cas_req(b"x", 0), 1),
        StoreOutcome::Exists,
        "cas 0 never matches"
    );
    let c2 = stored(s.store(&cas_req(b"b", c), 1));
    assert_ne!(c2, c);
    assert_eq!(
        s.store(&cas_req(b"c", c), 1),
        StoreOutcome::Exists,
        "old token is spent"
    );
    assert_eq!(val(&s, b"k", 1).unwrap(), b"b");
    // Replace with a CAS behaves as cas.
    assert_eq!(
        s.store(
            &StoreRequest {
                cas: Some(c),
                ..req(StoreMode::Replace, b"k", b"r")
            },
            1
        ),
        StoreOutcome::Exists
    );
}

#[test]
fn cas_values_unique_and_increasing_per_key() {
    let s = small();
    let mut seen = std::collections::HashSet::new();
    let mut last = std::collections::HashMap::new();
    for i in 0..5000u32 {
        let key = format!("key{}", i % 97);
        let c = stored(s.store(&StoreRequest::set(key.as_bytes(), &[b'x'; 300]), 1));
        assert!(seen.insert(c), "duplicate cas {c}");
        if let Some(prev) = last.insert(key, c) {
            assert!(c > prev);
        }
    }
    // incr, touch and append: new CAS except for touch.
    let c = stored(s.store(&StoreRequest::set(b"n", b"1"), 1));
    assert!(s.touch(b"n", 1, 50));
    assert_eq!(s.get(b"n", 1, |v| v.cas).unwrap(), c, "touch keeps the CAS");
    let ArithOutcome::Value { cas: c2, .. } =
        s.incr_decr(b"n", 1, true, 1, &ArithOptions::default())
    else {
        panic!()
    };
    assert!(seen.insert(c2) && c2 != c);
}

#[test]
fn expiry_at_exactly_now_matches_memcached() {
    let s = small();
    stored(s.store(
        &StoreRequest {
            exptime: 10,
            ..StoreRequest::set(b"k", b"v")
        },
        1,
    ));
    assert!(val(&s, b"k", 9).is_some());
    // items.c: expired when exptime != 0 && exptime <= current_time.
    assert!(val(&s, b"k", 10).is_none());
    let st = s.stats();
    // A lookup that meets it counts `get_expired` only (memcached's do_item_get), not `reclaimed`.
    assert_eq!((st.curr_items, st.reclaimed), (0, 0));
    assert_eq!(st.expired_unfetched, 0);
    stored(s.store(
        &StoreRequest {
            exptime: 0,
            ..StoreRequest::set(b"forever", b"v")
        },
        1,
    ));
    assert!(val(&s, b"forever", u32::MAX).is_some());
}

#[test]
fn touch_and_gat() {
    let s = small();
    assert!(!s.touch(b"k", 1, 5));
    stored(s.store(&StoreRequest::set(b"k", b"v"), 1));
    // No TTL field yet: touch rewrites the item.
    assert!(s.touch(b"k", 1, 5));
    assert_eq!(s.get(b"k", 1, |v| v.exptime).unwrap(), 5);
    assert!(val(&s, b"k", 5).is_none());
    stored(s.store(
        &StoreRequest {
            exptime: 5,
            ..StoreRequest::set(b"k", b"v")
        },
        1,
    ));
    assert_eq!(
        s.get_and_touch(b"k", 2, 100, |v| (v.exptime, v.value.to_vec()))
            .unwrap(),
        (100, b"v".to_vec())
    );
    assert!(val(&s, b"k", 50).is_some());
    assert!(s.get_and_touch(b"missing", 2, 100, |_| ()).is_none());
    s.check_invariants();
}

#[test]
fn delete_with_and_without_cas() {
    let s = small();
    assert_eq!(s.delete(b"k", 1, None), DeleteOutcome::NotFound);
    let c = stored(s.store(&StoreRequest::set(b"k", b"v"), 1));
    assert_eq!(s.delete(b"k", 1, Some(c + 1)), DeleteOutcome::Exists);
    assert_eq!(s.delete(b"k", 1, Some(c)), DeleteOutcome::Deleted);
    assert_eq!(val(&s, b"k", 1), None);
    assert_eq!(s.stats().curr_items, 0);
}

#[test]
fn incr_decr_edges() {
    let s = small();
    let o = ArithOptions::default();
    assert_eq!(s.incr_decr(b"n", 1, true, 1, &o), ArithOutcome::NotFound);
    stored(s.store(&StoreRequest::set(b"n", b"18446744073709551615"), 1));
    assert!(matches!(
        s.incr_decr(b"n", 1, true, 2, &o),
        ArithOutcome::Value { value: 1, .. }
    ));
    // memcached keeps the length, padding with spaces, when the number shrinks.
    assert_eq!(val(&s, b"n", 1).unwrap(), b"1                   ");
    assert!(matches!(
        s.incr_decr(b"n", 1, false, 5, &o),
        ArithOutcome::Value { value: 0, .. }
    ));
    stored(s.store(&StoreRequest::set(b"n", b"99"), 1));
    assert!(matches!(
        s.incr_decr(b"n", 1, true, 1, &o),
        ArithOutcome::Value { value: 100, .. }
    ));
    assert_eq!(val(&s, b"n", 1).unwrap(), b"100", "the value grows");
    stored(s.store(
        &StoreRequest {
            flags: 4,
            exptime: 90,
            ..StoreRequest::set(b"t", b"abc")
        },
        1,
    ));
    assert_eq!(s.incr_decr(b"t", 1, true, 1, &o), ArithOutcome::NonNumeric);
    stored(s.store(&StoreRequest::set(b"e", b""), 1));
    assert_eq!(s.incr_decr(b"e", 1, true, 1, &o), ArithOutcome::NonNumeric);
    stored(s.store(
        &StoreRequest {
            flags: 4,
            exptime: 90,
            ..StoreRequest::set(b"f", b"7")
        },
        1,
    ));
    let ArithOutcome::Value {
        value: 8,
        cas,
        exptime: 90,
        exptime_before: 90,
        created: false,
    } = s.incr_decr(b"f", 1, true, 1, &o)
    else {
        panic!()
    };
    assert_eq!(
        s.get(b"f", 1, |v| (v.flags, v.exptime, v.cas)).unwrap(),
        (4, 90, cas)
    );
    // Meta options: CAS check, vivify, TTL.
    let bad = ArithOptions {
        cas: Some(cas + 1),
        ..o
    };
    assert_eq!(s.incr_decr(b"f", 1, true, 1, &bad), ArithOutcome::Exists);
    let viv = ArithOptions {
        vivify: Some((40, 77)),
        ..o
    };
    assert!(matches!(
        s.incr_decr(b"v", 1, true, 5, &viv),
        ArithOutcome::Value {
            value: 40,
            exptime: 77,
            created: true,
            ..
        }
    ));
    assert_eq!(val(&s, b"v", 1).unwrap(), b"40");
    let ttl = ArithOptions {
        exptime: Some(500),
        ..o
    };
    assert!(matches!(
        s.incr_decr(b"v", 1, true, 2, &ttl),
        ArithOutcome::Value {
            value: 42,
            exptime: 500,
            created: false,
            ..
        }
    ));
    s.check_invariants();
}

#[test]
fn too_large_and_bad_keys() {
    let s = small();
    let limit = 32 << 10;
    let ok = vec![0u8; limit - 50 - 1];
    stored(s.store(&StoreRequest::set(b"k", &ok), 1));
    let big = vec![0u8; limit];
    assert_eq!(
        s.store(&StoreRequest::set(b"k", &big), 1),
        StoreOutcome::TooLarge
    );
    assert_eq!(
        val(&s, b"k", 1),
        None,
        "a failed set removes the old value, as memcached does"
    );
    assert_eq!(
        s.store(&StoreRequest::set(&[b'a'; 251], b"v"), 1),
        StoreOutcome::TooLarge
    );
    assert_eq!(
        s.store(&StoreRequest::set(b"", b"v"), 1),
        StoreOutcome::TooLarge
    );
    stored(s.store(&StoreRequest::set(&[b'a'; 250], b"v"), 1));
}

#[test]
fn flush_all_immediate() {
    let s = small();
    for i in 0..100u32 {
        stored(s.store(&StoreRequest::set(format!("k{i}").as_bytes(), b"v"), 1));
    }
    s.flush_all(5, None);
    assert_eq!(s.stats().curr_items, 0);
    assert_eq!(val(&s, b"k1", 5), None);
    stored(s.store(&StoreRequest::set(b"k1", b"new"), 5));
    assert_eq!(val(&s, b"k1", 5).unwrap(), b"new");
    s.check_invariants();
}

#[test]
fn flush_all_delayed_follows_oldest_live() {
    let s = small();
    stored(s.store(&StoreRequest::set(b"old", b"v"), 1));
    // flush_all 10 at time 100: oldest_live = 109.
    s.flush_all(100, Some(110));
    assert!(val(&s, b"old", 108).is_some(), "not yet");
    stored(s.store(&StoreRequest::set(b"during", b"v"), 108));
    // At 109 everything stored up to now is invalid, even items stored this second.
    assert_eq!(val(&s, b"old", 109), None);
    stored(s.store(&StoreRequest::set(b"same_second", b"v"), 109));
    assert_eq!(val(&s, b"same_second", 109), None);
    stored(s.store(&StoreRequest::set(b"in109", b"v"), 109));
    // After it, items from 109 or before stay gone and new ones live.
    assert_eq!(val(&s, b"during", 110), None);
    assert_eq!(val(&s, b"in109", 110), None);
    stored(s.store(&StoreRequest::set(b"after", b"v"), 110));
    assert!(val(&s, b"after", 111).is_some());
    assert!(val(&s, b"after", 500).is_some(), "the flush applies once");
    // A later immediate flush cancels nothing new but clears everything.
    s.flush_all(600, None);
    assert_eq!(val(&s, b"after", 600), None);
    s.check_invariants();
}

#[test]
fn meta_vivify_win_and_z() {
    let s = small();
    let n = MetaGetOptions {
        vivify: Some(30),
        ..Default::default()
    };
    let first = s.meta_get(b"k", 1, &n, |m| {
        (
            m.won,
            m.already_won,
            m.created,
            m.item.value.len(),
            m.item.exptime,
        )
    });
    assert_eq!(first, Some((true, false, true, 0, 30)));
    let second = s
        .meta_get(b"k", 1, &n, |m| (m.won, m.already_won, m.created))
        .unwrap();
    assert_eq!(second, (false, true, false), "others see Z until it is set");
    stored(s.store(&StoreRequest::set(b"k", b"filled"), 2));
    let third = s
        .meta_get(b"k", 2, &n, |m| {
            (m.won, m.already_won, m.item.value.to_vec())
        })
        .unwrap();
    assert_eq!(third, (false, false, b"filled".to_vec()));
}

#[test]
fn meta_recache_and_stale() {
    let s = small();
    stored(s.store(
        &StoreRequest {
            exptime: 100,
            ..StoreRequest::set(b"k", b"v")
        },
        1,
    ));
    let r = MetaGetOptions {
        recache: Some(50),
        ..Default::default()
    };
    assert!(
        !s.meta_get(b"k", 1, &r, |m| m.won).unwrap(),
        "ttl 100 is not below 50"
    );
    let r = MetaGetOptions {
        recache: Some(150),
        ..Default::default()
    };
    assert_eq!(
        s.meta_get(b"k", 1, &r, |m| (m.won, m.already_won)).unwrap(),
        (true, false)
    );
    assert_eq!(
        s.meta_get(b"k", 1, &r, |m| (m.won, m.already_won)).unwrap(),
        (false, true)
    );

    // md I: stale, new CAS, token cleared; one winner then Z.
    let c = s.get(b"k", 1, |v| v.cas).unwrap();
    assert_eq!(
        s.mark_stale(b"k", 1, Some(c + 1), None),
        DeleteOutcome::Exists
    );
    assert_eq!(
        s.mark_stale(b"k", 1, Some(c), Some(200)),
        DeleteOutcome::Deleted
    );
    let plain = MetaGetOptions::default();
    let (won, z, x, cas2, exp) = s
        .meta_get(b"k", 1, &plain, |m| {
            (m.won, m.already_won, m.stale, m.item.cas, m.item.exptime)
        })
        .unwrap();
    assert_eq!((won, z, x, exp), (true, false, true, 200));
    assert_ne!(cas2, c);
    assert_eq!(
        s.meta_get(b"k", 1, &plain, |m| (m.won, m.already_won, m.stale))
            .unwrap(),
        (false, true, true)
    );

    // ms I with an older CAS: stored but stale, TTL and token kept.
    let older = StoreRequest {
        cas: Some(cas2 - 1),
        invalidate: true,
        ..StoreRequest::set(b"k", b"late")
    };
    stored(s.store(&older, 1));
    let v = s.meta_get(b"k", 1, &plain, |m| {
        (
            m.stale,
            m.already_won,
            m.item.exptime,
            m.item.value.to_vec(),
        )
    });
    assert_eq!(v.unwrap(), (true, true, 200, b"late".to_vec()));
    // A fresh set clears the state.
    stored(s.store(&StoreRequest::set(b"k", b"fresh"), 1));
    assert_eq!(
        s.meta_get(b"k", 1, &plain, |m| (m.stale, m.already_won, m.won))
            .unwrap(),
        (false, false, false)
    );
    s.check_invariants();
}

#[test]
fn meta_hit_and_last_access_are_pre_update() {
    let s = small();
    stored(s.store(&StoreRequest::set(b"k", b"v"), 10));
    let o = MetaGetOptions::default();
    assert_eq!(
        s.meta_get(b"k", 15, &o, |m| (m.item.fetched, m.item.last_access))
            .unwrap(),
        (false, 10)
    );
    assert_eq!(
        s.meta_get(b"k", 20, &o, |m| (m.item.fetched, m.item.last_access))
            .unwrap(),
        (true, 15)
    );
    let nb = MetaGetOptions {
        no_bump: true,
        ..Default::default()
    };
    s.meta_get(b"k", 30, &nb, |_| ()).unwrap();
    assert_eq!(
        s.meta_get(b"k", 31, &o, |m| m.item.last_access).unwrap(),
        20
    );
    let t = MetaGetOptions {
        touch: Some(99),
        ..Default::default()
    };
    assert_eq!(
        s.meta_get(b"k", 32, &t, |m| (m.exptime_before, m.item.exptime))
            .unwrap(),
        (0, 99)
    );
}

#[test]
fn eviction_when_full_keeps_hot_items() {
    let s = store_with(1 << 20, true); // 16 segments of 64 KiB
    let value = [b'v'; 1000];
    for i in 0..200u32 {
        stored(s.store(&StoreRequest::set(format!("hot{i}").as_bytes(), &value), 1));
    }
    for round in 0..3 {
        for i in 0..200u32 {
            assert!(
                val(&s, format!("hot{i}").as_bytes(), 1).is_some(),
                "hot{i} lost in round {round}"
            );
        }
        for i in 0..1500u32 {
            stored(s.store(
                &StoreRequest::set(format!("cold{round}-{i}").as_bytes(), &value),
                1,
            ));
        }
    }
    let st = s.stats();
    assert!(st.evictions > 2000, "{st:?}");
    assert!(st.evicted_active > 0);
    assert!(st.total_malloced <= st.limit_maxbytes);
    let hot = (0..200u32)
        .filter(|i| val(&s, format!("hot{i}").as_bytes(), 1).is_some())
        .count();
    assert!(
        hot >= 190,
        "only {hot} hot items survived a scan 20x the hot set"
    );
    // Survivors were copied forward with their CAS; an update still gets a
    // higher one, though it may land in a segment older than the copy's.
    for i in 0..200u32 {
        let key = format!("hot{i}");
        if let Some(before) = s.get(key.as_bytes(), 1, |v| v.cas) {
            let after = stored(s.store(&StoreRequest::set(key.as_bytes(), &value), 1));
            assert!(after > before, "{key}: cas went from {before} to {after}");
        }
    }
    s.check_invariants();
}

#[test]
fn no_evict_mode_reports_out_of_memory() {
    let s = store_with(1 << 20, false);
    let value = [b'v'; 1000];
    let mut n = 0;
    loop {
        match s.store(&StoreRequest::set(format!("k{n}").as_bytes(), &value), 1) {
            StoreOutcome::Stored { .. } => n += 1,
            StoreOutcome::OutOfMemory => break,
            other => panic!("{other:?}"),
        }
        assert!(n < 10_000);
    }
    assert!(n > 700, "only {n} KB fit into 1 MiB");
    for i in 0..n {
        assert!(
            val(&s, format!("k{i}").as_bytes(), 1).is_some(),
            "-M must not evict k{i}"
        );
    }
    assert_eq!(s.stats().evictions, 0);
    // Deleting makes room again (through compaction).
    for i in 0..n / 2 {
        assert_eq!(
            s.delete(format!("k{i}").as_bytes(), 1, None),
            DeleteOutcome::Deleted
        );
    }
    stored(s.store(&StoreRequest::set(b"again", &value), 1));
    s.check_invariants();
}

#[test]
fn expired_items_free_memory_proactively() {
    let s = store_with(1 << 20, false);
    let value = [b'v'; 1000];
    let mut n = 0;
    while let StoreOutcome::Stored { .. } = s.store(
        &StoreRequest {
            exptime: 10,
            ..StoreRequest::set(format!("k{n}").as_bytes(), &value)
        },
        1,
    ) {
        n += 1;
    }
    // Not due yet: the step reads no segment, so checks no item.
    s.maintain(9, 64, true);
    assert_eq!(s.stats().crawler_items_checked, 0);
    let report = s.maintain(10, 64, true);
    assert_eq!(report.items_expired, n);
    assert!(report.segments_freed > 10, "{report:?}");
    let st = s.stats();
    assert_eq!(
        (
            st.curr_items,
            st.crawler_reclaimed,
            st.expired_unfetched,
            st.crawler_items_checked
        ),
        (0, n, n, n)
    );
    stored(s.store(&StoreRequest::set(b"fits", &value), 10));
    s.check_invariants();
}

#[test]
fn memlimit_shrink_evicts_and_grow_allows_more() {
    let s = store_with(4 << 20, true);
    let value = [b'v'; 1000];
    for i in 0..3500u32 {
        stored(s.store(&StoreRequest::set(format!("k{i}").as_bytes(), &value), 1));
    }
    let before = s.stats();
    assert!(before.total_malloced > 3 << 20);
    s.set_memory_limit(1 << 20, 1);
    let after = s.stats();
    assert!(after.total_malloced <= 1 << 20, "{after:?}");
    assert!(
        after.curr_items < 1000 && after.curr_items > 500,
        "{after:?}"
    );
    assert_eq!(after.limit_maxbytes, 1 << 20);
    s.set_memory_limit(4 << 20, 1);
    for i in 0..3500u32 {
        stored(s.store(
            &StoreRequest::set(format!("again{i}").as_bytes(), &value),
            1,
        ));
    }
    assert!(s.stats().curr_items > 3000);
    s.check_invariants();
}

#[test]
fn dump_lists_live_items_with_metadata() {
    let s = small();
    stored(s.store(
        &StoreRequest {
            exptime: 50,
            ..StoreRequest::set(b"a", b"1")
        },
        3,
    ));
    stored(s.store(&StoreRequest::set(b"b", b"22"), 4));
    stored(s.store(
        &StoreRequest {
            exptime: 5,
            ..StoreRequest::set(b"gone", b"x")
        },
        4,
    ));
    s.get(b"b", 6, |_| ());
    let mut rows = Vec::new();
    s.dump(6, |e| {
        rows.push((
            e.key.to_vec(),
            e.exptime,
            e.last_access,
            e.fetched,
            e.class_id,
            e.cas,
        ))
    });
    rows.sort();
    assert_eq!(rows.len(), 2);
    assert_eq!(&rows[0].0[..], b"a");
    assert_eq!(
        (rows[0].1, rows[0].2, rows[0].3, rows[0].4),
        (50, 3, false, 1)
    );
    assert_eq!(&rows[1].0[..], b"b");
    assert_eq!((rows[1].2, rows[1].3), (6, true));
    assert_eq!(rows[1].5, s.get(b"b", 6, |v| v.cas).unwrap());
}

#[test]
fn big_segments_for_big_items() {
    let s = Store::new(StoreConfig {
        memory_limit: 64 << 20,
        item_size_max: 4 << 20,
        segment_size: 1 << 20,
        shards: 2,
        ..Default::default()
    })
    .unwrap();
    let v: Vec<u8> = (0..(3 << 20)).map(|i| (i % 251) as u8).collect();
    stored(s.store(&StoreRequest::set(b"big", &v), 1));
    stored(s.store(&StoreRequest::set(b"small", b"x"), 1));
    assert_eq!(val(&s, b"big", 1).unwrap(), v);
    assert_eq!(s.stats().segment_size, 4 << 20);
    s.check_invariants();
}

#[test]
fn config_errors() {
    let bad = |c: StoreConfig| Store::new(c).err().unwrap();
    assert_eq!(
        bad(StoreConfig {
            item_size_max: 10,
            ..Default::default()
        }),
        ConfigError::ItemSizeMax(10)
    );
    assert_eq!(
        bad(StoreConfig {
            memory_limit: 1 << 20,
            ..Default::default()
        }),
        ConfigError::MemoryLimit(1 << 20)
    );
    assert_eq!(
        bad(StoreConfig {
            shards: 3,
            ..Default::default()
        }),
        ConfigError::Shards(3)
    );
    assert_eq!(
        bad(StoreConfig {
            segment_size: 1000,
            ..Default::default()
        }),
        ConfigError::SegmentSize(1000)
    );
    assert_eq!(
        Store::new(StoreConfig {
            memory_limit: 1 << 30,
            ..Default::default()
        })
        .unwrap()
        .shard_count(),
        64
    );
    assert_eq!(Store::new(StoreConfig::default()).unwrap().shard_count(), 4);
    // 512 GiB of 1 MiB segments needs 256 shards of at most 2048 segments.
    let huge = StoreConfig {
        memory_limit: 512 << 30,
        ..Default::default()
    };
    assert_eq!(Store::new(huge.clone()).unwrap().shard_count(), 256);
    assert_eq!(
        bad(StoreConfig { shards: 4, ..huge }),
        ConfigError::Shards(4)
    );
}

#[test]
fn cas_grows_when_update_lands_in_an_older_segment() {
    let s = store_with(1 << 20, true);
    let value = [b'v'; 1000];
    let mut cold = 0u32;
    let mut relocate = |key: &[u8]| {
        stored(s.store(&StoreRequest::set(key, &value), 1));
        assert!(val(&s, key, 1).is_some());
        let before = s.stats().evicted_active;
        while s.stats().evicted_active == before {
            cold += 1;
            stored(s.store(
                &StoreRequest::set(format!("cold{cold}").as_bytes(), &value),
                1,
            ));
        }
    };
    // The first survivor opens the main queue's segment; a later survivor,
    // from a younger segment, is copied into that older open segment.
    relocate(b"first");
    relocate(b"x");
    let before = s.get(b"x", 1, |v| v.cas).unwrap();
    let after = stored(s.store(&StoreRequest::set(b"x", &value), 1));
    assert!(after > before, "cas went from {before} to {after}");
    s.check_invariants();
}

#[test]
fn a_shard_without_memory_takes_it_from_another() {
    let s = Store::new(StoreConfig {
        memory_limit: 1 << 20,
        segment_size: 64 << 10,
        item_size_max: 32 << 10,
        shards: 2,
        ..Default::default()
    })
    .unwrap();
    let shard_of = |k: &[u8]| (s.hasher.hash_one(k) >> s.shard_shift) as usize;
    let keys: Vec<String> = (0..20_000).map(|i| format!("key{i}")).collect();
    let (zero, one): (Vec<&String>, Vec<&String>) =
        keys.iter().partition(|k| shard_of(k.as_bytes()) == 0);
    let value = [b'v'; 1000];
    // Shard 0 takes all the memory...
    for k in zero.iter().take(3000) {
        stored(s.store(&StoreRequest::set(k.as_bytes(), &value), 1));
    }
    assert!(s.stats().evictions > 0);
    // ...and shard 1 still gets room, evicting from shard 0.
    for k in one.iter().take(300) {
        stored(s.store(&StoreRequest::set(k.as_bytes(), &value), 1));
    }
    let ones = one
        .iter()
        .take(300)
        .filter(|k| val(&s, k.as_bytes(), 1).is_some())
        .count();
    assert!(ones > 250, "shard 1 kept only {ones}");
    s.check_invariants();
}

#[test]
fn maintain_compacts_sparse_segments_without_losing_items() {
    let s = store_with(4 << 20, true);
    let value = [b'v'; 1000];
    for i in 0..2000u32 {
        stored(s.store(&StoreRequest::set(format!("k{i}").as_bytes(), &value), 1));
    }
    for i in (0..2000u32).filter(|i| i % 5 != 0) {
        s.delete(format!("k{i}").as_bytes(), 1, None);
    }
    let before = s.stats().segments_mapped - s.stats().segments_free;
    let report = s.maintain(2, 1000, true);
    assert!(report.segments_freed > 10, "{report:?}");
    assert_eq!(
        report.segments_scanned, 0,
        "no item has a TTL: nothing to scan"
    );
    let after = s.stats();
    assert!(after.segments_mapped - after.segments_free < before / 2);
    for i in (0..2000u32).step_by(5) {
        assert_eq!(val(&s, format!("k{i}").as_bytes(), 2).unwrap().len(), 1000);
    }
    assert_eq!(after.curr_items, 400);
    assert_eq!(after.evictions, 0);
    s.check_invariants();
}

fn binary(s: &Store, key: &[u8], now: u32) -> Option<bool> {
    s.get(key, now, |v| v.key_binary)
}

#[test]
fn binary_key_bit_follows_memcached_item_lifecycle() {
    let s = small();
    let bin = |key: &'static [u8], value: &'static [u8]| StoreRequest {
        key_binary: true,
        ..StoreRequest::set(key, value)
    };
    stored(s.store(&bin(b"\xff", b"5"), 1));
    assert_eq!(binary(&s, b"\xff", 1), Some(true));
    // Kept by reads (which rewrite the access time in place), touches, md I and incr in place.
    assert_eq!(
        binary(&s, b"\xff", 3000),
        Some(true),
        "access time past 2048 s"
    );
    assert!(s.touch(b"\xff", 3000, 9000));
    assert_eq!(
        s.mark_stale(b"\xff", 3000, None, None),
        DeleteOutcome::Deleted
    );
    let o = ArithOptions::default();
    assert!(matches!(
        s.incr_decr(b"\xff", 3000, true, 1, &o),
        ArithOutcome::Value { value: 6, .. }
    ));
    assert_eq!(binary(&s, b"\xff", 3000), Some(true));
    // An incr that outgrows the value makes a new item: not binary.
    assert!(matches!(
        s.incr_decr(b"\xff", 3000, true, 10, &o),
        ArithOutcome::Value { value: 16, .. }
    ));
    assert_eq!(binary(&s, b"\xff", 3000), Some(false));
    // Append/prepend build a new item: not binary; a plain set is not binary either.
    stored(s.store(&bin(b"\xff", b"1"), 3000));
    stored(s.store(
        &StoreRequest {
            mode: StoreMode::Append,
            ..bin(b"\xff", b"2")
        },
        3000,
    ));
    assert_eq!(binary(&s, b"\xff", 3000), Some(false));
    stored(s.store(&bin(b"\xff", b"1"), 3000));
    stored(s.store(&StoreRequest::set(b"\xff", b"1"), 3000));
    assert_eq!(binary(&s, b"\xff", 3000), Some(false));
    // Items `mg N` and `ma N` create are never binary.
    let n = MetaGetOptions {
        vivify: Some(0),
        ..Default::default()
    };
    assert_eq!(
        s.meta_get(b"new", 1, &n, |m| m.item.key_binary),
        Some(false)
    );
    let viv = ArithOptions {
        vivify: Some((1, 0)),
        ..o
    };
    s.incr_decr(b"new2", 1, true, 1, &viv);
    assert_eq!(binary(&s, b"new2", 1), Some(false));
    // The bit survives relocation (eviction copying a hot item forward) with the item's access time.
    let s = store_with(4 << 20, true);
    stored(s.store(&bin(b"hot", b"h"), 1));
    assert!(val(&s, b"hot", 5000).is_some());
    let filler = [b'f'; 1000];
    for i in 0..20_000u32 {
        s.store(
            &StoreRequest::set(format!("f{i}").as_bytes(), &filler),
            5000,
        );
        if i % 500 == 0 {
            assert!(val(&s, b"hot", 5000).is_some(), "kept hot at {i}");
        }
    }
    assert!(s.stats().evictions > 0);
    assert_eq!(
        s.get(b"hot", 6000, |v| (v.key_binary, v.last_access)),
        Some((true, 5000))
    );
    s.check_invariants();
}

#[test]
fn incr_that_outgrows_the_value_keeps_the_old_ttl() {
    let s = small();
    stored(s.store(
        &StoreRequest {
            exptime: 100,
            ..StoreRequest::set(b"n", b"9")
        },
        1,
    ));
    let t = ArithOptions {
        exptime: Some(500),
        ..Default::default()
    };
    // 9 -> 10: memcached's new item keeps TTL 100 (its `T` lands on the old item).
    assert_eq!(
        s.incr_decr(b"n", 1, true, 1, &t),
        ArithOutcome::Value {
            value: 10,
            cas: s.get(b"n", 1, |v| v.cas).unwrap(),
            exptime: 100,
            exptime_before: 100,
            created: false,
        }
    );
    // 10 -> 11 in place: the TTL changes.
    assert!(matches!(
        s.incr_decr(b"n", 1, true, 1, &t),
        ArithOutcome::Value {
            value: 11,
            exptime: 500,
            exptime_before: 100,
            ..
        }
    ));
    assert_eq!(s.get(b"n", 1, |v| v.exptime), Some(500));
}

#[test]
fn recache_is_judged_where_r_stands_among_the_flags() {
    let s = small();
    stored(s.store(
        &StoreRequest {
            exptime: 100,
            ..StoreRequest::set(b"k", b"v")
        },
        1,
    ));
    // `mg k T10 R30`: R sees the new TTL (10 < 30): won.
    let after = MetaGetOptions {
        touch: Some(10),
        recache: Some(30),
        ..Default::default()
    };
    assert_eq!(s.meta_get(b"k", 1, &after, |m| m.won), Some(true));
    stored(s.store(
        &StoreRequest {
            exptime: 100,
            ..StoreRequest::set(b"k", b"v")
        },
        1,
    ));
    // `mg k R30 T10`: R sees the old TTL (100): not won, though the touch still applies.
    let before = MetaGetOptions {
        recache_before_touch: true,
        ..after
    };
    assert_eq!(
        s.meta_get(b"k", 1, &before, |m| (m.won, m.item.exptime)),
        Some((false, 10))
    );
    // And the other way round: old TTL 10 < 30 wins even though T raises it.
    let raise = MetaGetOptions {
        touch: Some(100),
        recache: Some(30),
        recache_before_touch: true,
        ..Default::default()
    };
    assert_eq!(s.meta_get(b"k", 1, &raise, |m| m.won), Some(true));
}

#[test]
fn arith_replace_builds_a_new_item_like_a_growing_one() {
    let s = small();
    stored(s.store(
        &StoreRequest {
            exptime: 100,
            flags: 3,
            key_binary: true,
            ..StoreRequest::set(b"n", b"15")
        },
        1,
    ));
    assert!(val(&s, b"n", 1).is_some(), "fetched");
    assert_eq!(s.mark_stale(b"n", 1, None, None), DeleteOutcome::Deleted);
    let replace = ArithOptions {
        exptime: Some(500),
        replace: true,
        ..Default::default()
    };
    // 15 - 10 = 5: no padding, TTL kept, not fetched/stale/binary, flags kept.
    assert!(matches!(
        s.incr_decr(b"n", 1, false, 10, &replace),
        ArithOutcome::Value {
            value: 5,
            exptime: 100,
            ..
        }
    ));
    assert_eq!(
        s.get(b"n", 1, |v| (
            v.value.to_vec(),
            v.exptime,
            v.flags,
            v.fetched,
            v.stale,
            v.key_binary
        )),
        Some((b"5".to_vec(), 100, 3, false, false, false))
    );
    // In place (the default): padded, and the TTL changes.
    let in_place = ArithOptions {
        exptime: Some(500),
        ..Default::default()
    };
    stored(s.store(&StoreRequest::set(b"m", b"15"), 1));
    s.incr_decr(b"m", 1, false, 10, &in_place);
    assert_eq!(
        s.get(b"m", 1, |v| (v.value.to_vec(), v.exptime)),
        Some((b"5 ".to_vec(), 500))
    );
}

thread_local! {
    /// Expired and flushed lookups the store reported on this test's thread.
    static EXPIRED_LOOKUPS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    static FLUSHED_LOOKUPS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn expired_lookups() -> usize {
    EXPIRED_LOOKUPS.with(std::cell::Cell::get)
}

/// memcached's `do_item_get` counts `get_expired` for every command's lookup that finds its key expired; not
/// a missing key, nor the next lookup of the item it unlinked, nor an item a flush hides (that is
/// `get_flushed`, reported as such), nor items expired in the background.
#[test]
fn every_lookup_that_meets_an_expired_item_reports_it() {
    let s = Store::new(StoreConfig {
        memory_limit: 8 << 20,
        segment_size: 64 << 10,
        item_size_max: 32 << 10,
        shards: 1,
        on_stale_lookup: |stale| match stale {
            Stale::Expired => EXPIRED_LOOKUPS.with(|n| n.set(n.get() + 1)),
            Stale::Flushed => FLUSHED_LOOKUPS.with(|n| n.set(n.get() + 1)),
        },
        ..Default::default()
    })
    .unwrap();
    let expiring_at = |exptime, key| StoreRequest {
        exptime,
        ..StoreRequest::set(key, b"1")
    };
    let keys: [&[u8]; 9] = [
        b"get", b"gat", b"peek", b"mg", b"touch", b"add", b"delete", b"md", b"incr",
    ];
    for key in keys {
        stored(s.store(&expiring_at(10, key), 1));
    }
    assert_eq!(val(&s, b"absent", 10), None);
    assert_eq!(expired_lookups(), 0, "a missing key is a plain miss");
    assert_eq!(val(&s, b"get", 10), None);
    assert!(s.get_and_touch(b"gat", 10, 100, |_| ()).is_none());
    assert!(s.peek(b"peek", 10, |_| ()).is_none());
    let plain = MetaGetOptions::default();
    assert!(s.meta_get(b"mg", 10, &plain, |_| ()).is_none());
    assert!(!s.touch(b"touch", 10, 100));
    stored(s.store(&req(StoreMode::Add, b"add", b"new"), 10));
    assert_eq!(s.delete(b"delete", 10, None), DeleteOutcome::NotFound);
    assert_eq!(s.mark_stale(b"md", 10, None, None), DeleteOutcome::NotFound);
    let arith = ArithOptions::default();
    assert_eq!(
        s.incr_decr(b"incr", 10, true, 1, &arith),
        ArithOutcome::NotFound
    );
    assert_eq!(expired_lookups(), keys.len());
    assert_eq!(val(&s, b"get", 10), None);
    assert_eq!(
        expired_lookups(),
        keys.len(),
        "the first lookup unlinked it"
    );

    // flush_all 10 at 100 hides, at 109, what was stored before: expired too, it counts as flushed only.
    stored(s.store(&expiring_at(105, b"flushed"), 100));
    s.flush_all(100, Some(110));
    assert_eq!(FLUSHED_LOOKUPS.with(std::cell::Cell::get), 0);
    assert_eq!(val(&s, b"flushed", 109), None);
    assert_eq!(FLUSHED_LOOKUPS.with(std::cell::Cell::get), 1);
    assert_eq!(val(&s, b"flushed", 109), None);
    assert_eq!(
        FLUSHED_LOOKUPS.with(std::cell::Cell::get),
        1,
        "the first lookup unlinked it"
    );
    stored(s.store(&expiring_at(200, b"crawled"), 110));
    assert_eq!(s.maintain(200, 64, true).items_expired, 1);
    assert_eq!(val(&s, b"crawled", 200), None);
    assert_eq!(expired_lookups(), keys.len());
    s.check_invariants();
}

#[test]
fn a_shared_value_outlives_its_item_and_holds_its_segment_until_dropped() {
    // 8 MiB of 64 KiB segments; values of 30 KiB: two per segment.
    let s = small();
    let big = |i: u8| vec![i; 30 << 10];
    stored(s.store(&StoreRequest::set(b"held", &big(7)), 1));
    let shared = s.get(b"held", 1, |v| v.share_value()).unwrap();
    assert!(shared.as_ref() == &big(7)[..]);
    // Replace it, then write far more than the budget so every segment is evicted and reused.
    stored(s.store(&StoreRequest::set(b"held", &big(8)), 1));
    for i in 0..2000u32 {
        let key = format!("k{i}");
        stored(s.store(&StoreRequest::set(key.as_bytes(), &big(i as u8)), 1));
    }
    // Eviction met the held segment once, and went on to another victim (memcached's lrutail_reflocked).
    assert_eq!(s.stats().lrutail_reflocked, 1);
    // The reader still sees the value it was given, byte for byte.
    assert!(shared.as_ref() == &big(7)[..]);
    // Its segment is out of every shard but not back in the pool: it is still mapped and counted.
    let before = s.stats();
    assert!(before.total_malloced <= 8 << 20, "within the budget");
    let free_before = before.segments_free;
    drop(shared);
    let after = s.stats();
    assert_eq!(
        after.segments_free,
        free_before + 1,
        "the last holder returned the segment to the pool"
    );
    assert_eq!(after.segments_mapped, before.segments_mapped);
    // And it is reused: writing goes on within the budget.
    for i in 0..200u32 {
        let key = format!("again{i}");
        stored(s.store(&StoreRequest::set(key.as_bytes(), &big(1)), 2));
    }
    assert!(s.stats().total_malloced <= 8 << 20);
}

#[test]
fn segments_held_by_readers_leave_writes_out_of_memory_not_over_budget() {
    // Every segment pinned by a reader: like memcached with every item referenced by a reply, a write
    // that needs memory fails instead of growing past the budget; once the readers are done it succeeds.
    let s = Store::new(StoreConfig {
        memory_limit: 1 << 20,
        segment_size: 64 << 10,
        item_size_max: 32 << 10,
        shards: 1,
        ..Default::default()
    })
    .unwrap();
    let value = vec![b'v'; 30 << 10];
    let mut held = Vec::new();
    for i in 0..64u32 {
        let key = format!("k{i}");
        if matches!(
            s.store(&StoreRequest::set(key.as_bytes(), &value), 1),
            StoreOutcome::OutOfMemory
        ) {
            break;
        }
        held.push(s.get(key.as_bytes(), 1, |v| v.share_value()).unwrap());
    }
    let mapped = s.stats().total_malloced;
    assert!(mapped <= 1 << 20, "{mapped} bytes mapped");
    assert_eq!(
        s.store(&StoreRequest::set(b"one-more", &value), 1),
        StoreOutcome::OutOfMemory
    );
    assert!(held.iter().all(|v| v.as_ref() == &value[..]));
    held.clear();
    stored(s.store(&StoreRequest::set(b"one-more", &value), 1));
    assert!(s.stats().total_malloced <= 1 << 20);
}

/// Every shard's published index hint names its current table after the tables grew, were rebuilt and
/// were emptied by a flush; and a multi-key read through a look-ahead answers what one-by-one reads do,
/// while the tables change under it.
#[test]
fn lookahead_hints_follow_index_rebuilds_and_flushes() {
    let store = Store::new(StoreConfig {
        memory_limit: 64 << 20,
        segment_size: 64 << 10,
        item_size_max: 32 << 10,
        shards: 4,
        ..Default::default()
    })
    .unwrap();
    let hints_current = |store: &Store| {
        store
            .shards
            .iter()
            .zip(&store.hints[..])
            .all(|(shard, hint)| shard.lock().hint_is_current(hint))
    };
    assert!(hints_current(&store));
    let keys: Vec<Vec<u8>> = (0..20_000)
        .map(|i| format!("key:{i}").into_bytes())
        .collect();
    for (i, key) in keys.iter().enumerate() {
        store.store(&StoreRequest::set(key, format!("v{i}").as_bytes()), 1);
    }
    assert!(hints_current(&store), "after the tables grew");
    let wanted: Vec<&[u8]> = keys.iter().step_by(7).map(|k| &k[..]).collect();
    let mut ahead = store.lookahead(wanted.iter().copied());
    let mut answers = Vec::new();
    for (n, key) in wanted.iter().enumerate() {
        ahead.advance();
        // Keys stored meanwhile make the tables grow under the look-ahead.
        let extra = format!("extra:{n}");
        for j in 0..20 {
            store.store(
                &StoreRequest::set(format!("{extra}:{j}").as_bytes(), b"x"),
                1,
            );
        }
        answers.push(val(&store, key, 1));
    }
    let one_by_one: Vec<_> = wanted.iter().map(|key| val(&store, key, 1)).collect();
    assert_eq!(answers, one_by_one);
    assert!(answers.iter().all(Option::is_some));
    assert!(hints_current(&store), "after rebuilds under a look-ahead");
    store.flush_all(1, None);
    assert!(val(&store, b"key:1", 1).is_none());
    assert!(hints_current(&store), "after a flush emptied the tables");
}

/// The eviction hook hears of every item evicted, once, with what it was; not of deletes or expiries.
#[test]
fn the_eviction_hook_reports_each_evicted_item() {
    use std::sync::Arc;
    /// Key, fetched, exptime, value length.
    type Seen = Vec<(Vec<u8>, bool, u32, usize)>;
    let seen: Arc<std::sync::Mutex<Seen>> = Arc::default();
    let hook_seen = seen.clone();
    let s = Store::new(StoreConfig {
        memory_limit: 1 << 20,
        segment_size: 64 << 10,
        item_size_max: 32 << 10,
        shards: 1,
        on_evict: Some(EvictHook(Arc::new(move |item: &Evicted<'_>| {
            hook_seen.lock().unwrap().push((
                item.key.to_vec(),
                item.fetched,
                item.exptime,
                item.value_len,
            ))
        }))),
        ..Default::default()
    })
    .unwrap();
    stored(s.store(&StoreRequest::set(b"deleted", b"x"), 1));
    assert_eq!(s.delete(b"deleted", 1, None), DeleteOutcome::Deleted);
    let value = [b'v'; 1000];
    for i in 0..3000u32 {
        let key = format!("k{i}");
        stored(s.store(
            &StoreRequest {
                exptime: if i % 2 == 0 { 0 } else { 1000 },
                ..StoreRequest::set(key.as_bytes(), &value)
            },
            1,
        ));
        if i % 3 == 0 {
            assert!(val(&s, key.as_bytes(), 1).is_some());
        }
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len() as u64, s.stats().evictions);
    assert!(seen.len() > 1000, "{}", seen.len());
    let mut keys: Vec<&[u8]> = seen.iter().map(|(k, ..)| k.as_slice()).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), seen.len(), "an item reported twice");
    for (key, fetched, exptime, len) in seen.iter() {
        let i: u32 = std::str::from_utf8(&key[1..]).unwrap().parse().unwrap();
        assert_eq!(*fetched, i % 3 == 0, "k{i}");
        assert_eq!(*exptime, if i % 2 == 0 { 0 } else { 1000 }, "k{i}");
        assert_eq!(*len, value.len());
        assert!(val(&s, key, 1).is_none(), "k{i} evicted but still there");
    }
}

#[test]
fn the_crawler_reclaims_what_has_expired_in_the_classes_it_is_sent_to() {
    let s = small();
    for i in 0..90u32 {
        let key = format!("key{i}");
        // 30 immortal, 30 expiring in an hour, 30 after a second (at 101).
        let exptime = [0, 3700, 101][(i / 30) as usize];
        stored(s.store(
            &StoreRequest {
                exptime,
                ..StoreRequest::set(key.as_bytes(), b"ok")
            },
            100,
        ));
    }
    // The crawler off: the background step leaves expired items where they are.
    assert_eq!(s.maintain(200, 64, false).items_expired, 0);
    assert_eq!(s.stats().curr_items, 90);
    // New items are in class 1 (the small queue); class 2 has nothing yet, classes past 2 do not exist.
    assert!(s.class_segments(0, 2).is_empty() && s.class_segments(0, 3).is_empty());
    let segments = s.class_segments(0, 1);
    assert!(!segments.is_empty());
    let mut total = CrawlReport::default();
    for &segment in &segments {
        let step = s.crawl_segment(0, 1, segment, 200);
        total.checked += step.checked;
        total.reclaimed += step.reclaimed;
        // The wrong class is skipped.
        assert_eq!(s.crawl_segment(0, 2, segment, 200), CrawlReport::default());
    }
    assert_eq!(
        total,
        CrawlReport {
            checked: 90,
            reclaimed: 30
        }
    );
    let st = s.stats();
    // memcached's crawler counts `crawler_reclaimed` and `expired_unfetched`, not `reclaimed`.
    assert_eq!(
        (st.curr_items, st.crawler_reclaimed, st.reclaimed),
        (60, 30, 0)
    );
    assert_eq!(st.expired_unfetched, 30);
    assert_eq!(st.crawler_items_checked, 90);
    let class1 = st.classes.iter().find(|c| c.class_id == 1).unwrap();
    assert_eq!((class1.items, class1.crawler_reclaimed), (60, 30));
    assert_eq!(val(&s, b"key0", 200).as_deref(), Some(&b"ok"[..]));
    assert_eq!(val(&s, b"key89", 200), None);
    s.check_invariants();
}

#[test]
fn a_ttl_removed_in_place_keeps_the_record_readable_by_the_crawler() {
    // The crawler walks a segment record by record: a touch that sets an exptime of 0 in place must leave
    // the record's length as it was (a crawl misread every record after it, and panicked).
    let s = small();
    let with_ttl = StoreRequest {
        exptime: 150,
        ..StoreRequest::set(b"k", b"value")
    };
    stored(s.store(&with_ttl, 100));
    for i in 0..20u32 {
        let key = format!("after{i}");
        stored(s.store(
            &StoreRequest {
                exptime: 150 + i,
                ..StoreRequest::set(key.as_bytes(), b"v")
            },
            100,
        ));
    }
    assert!(s.touch(b"k", 101, 0));
    assert!(s.get_and_touch(b"after0", 101, 0, |_| ()).is_some());
    let mut checked = 0;
    for segment in s.class_segments(0, 1) {
        checked += s.crawl_segment(0, 1, segment, 102).checked;
    }
    assert_eq!(checked, 21);
    // The TTLs still counted come due; the removed ones never do.
    s.maintain(500, 64, true);
    assert_eq!(val(&s, b"k", 500).as_deref(), Some(&b"value"[..]));
    assert_eq!(val(&s, b"after0", 500).as_deref(), Some(&b"v"[..]));
    assert_eq!(val(&s, b"after1", 500), None);
    assert_eq!(s.stats().curr_items, 2);
    s.check_invariants();
}

/// Once memory is full, each store evicts about as many bytes as it writes (the draining victim, a little
/// at a time), never a whole segment's items at once, and the shard stays consistent throughout.
#[test]
fn a_full_store_evicts_a_little_with_each_set() {
    let s = store_with(2 << 20, true);
    let value = [b'v'; 100];
    let key = |i: u32| format!("key:{i:08}");
    let mut i = 0;
    while s.stats().evictions == 0 {
        s.store(&StoreRequest::set(key(i).as_bytes(), &value), 1);
        i += 1;
    }
    // A 64 KiB segment holds about 560 of these items: evicting one whole would take them all at once.
    let mut most = 0;
    let mut evicted_between = 0;
    let mut before = s.stats().evictions;
    for _ in 0..20_000 {
        s.store(&StoreRequest::set(key(i).as_bytes(), &value), 1);
        i += 1;
        let now = s.stats().evictions;
        most = most.max(now - before);
        evicted_between += now - before;
        before = now;
    }
    assert!(most <= 4, "a set evicted {most} items");
    assert!(
        (19_000..=21_000).contains(&evicted_between),
        "{evicted_between} evicted for 20,000 sets of new keys"
    );
    s.check_invariants();
}
