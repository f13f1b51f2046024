//! Model-based test: random operation sequences against a plain HashMap with
//! memcached semantics, under a memory limit that never evicts.

use proptest::prelude::*;
use std::collections::{HashMap, HashSet};
use tern_cache_storage::numeric::{apply_delta, parse_counter, render_counter};
use tern_cache_storage::*;

#[derive(Debug, Clone)]
enum Op {
    Store {
        mode: u8,
        key: u8,
        value: Vec<u8>,
        flags: u32,
        ttl: u8,
        cas: CasPick,
    },
    Get {
        key: u8,
    },
    Delete {
        key: u8,
    },
    Arith {
        key: u8,
        incr: bool,
        delta: u64,
    },
    Touch {
        key: u8,
        ttl: u8,
    },
    Tick {
        secs: u8,
    },
    Flush,
}

#[derive(Debug, Clone, Copy)]
enum CasPick {
    None,
    Current,
    Wrong,
}

#[derive(Debug, Clone)]
struct Model {
    value: Vec<u8>,
    flags: u32,
    exptime: u32,
    cas: u64,
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0u8..6;
    let value = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..40),
        (0u64..1000).prop_map(|n| n.to_string().into_bytes()),
        Just(b"18446744073709551614".to_vec()),
    ];
    let cas = prop_oneof![
        Just(CasPick::None),
        Just(CasPick::Current),
        Just(CasPick::Wrong)
    ];
    prop_oneof![
        4 => (0u8..5, key.clone(), value, any::<u32>(), 0u8..6, cas)
            .prop_map(|(mode, key, value, flags, ttl, cas)| Op::Store { mode, key, value, flags, ttl, cas }),
        4 => key.clone().prop_map(|key| Op::Get { key }),
        1 => key.clone().prop_map(|key| Op::Delete { key }),
        2 => (key.clone(), any::<bool>(), prop_oneof![0u64..10, Just(u64::MAX)])
            .prop_map(|(key, incr, delta)| Op::Arith { key, incr, delta }),
        1 => (key, 0u8..6).prop_map(|(key, ttl)| Op::Touch { key, ttl }),
        1 => (0u8..4).prop_map(|secs| Op::Tick { secs }),
        1 => Just(Op::Flush),
    ]
}

fn key_bytes(k: u8) -> Vec<u8> {
    format!("key-{k}").into_bytes()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]
    #[test]
    fn store_matches_model(ops in proptest::collection::vec(op(), 1..120)) {
        let store = Store::new(StoreConfig {
            memory_limit: 4 << 20,
            segment_size: 64 << 10,
            item_size_max: 16 << 10,
            shards: 2,
            ..Default::default()
        }).unwrap();
        let mut model: HashMap<Vec<u8>, Model> = HashMap::new();
        let mut seen_cas = HashSet::new();
        let mut now = 100u32;
        let ttl = |t: u8, now: u32| if t == 0 { 0 } else { now + u32::from(t) };
        for op in ops {
            // Lazy expiry in the model: exptime != 0 && exptime <= now.
            model.retain(|_, m| m.exptime == 0 || m.exptime > now);
            match op {
                Op::Store { mode, key, value, flags, ttl: t, cas } => {
                    let k = key_bytes(key);
                    let mode = [StoreMode::Set, StoreMode::Add, StoreMode::Replace, StoreMode::Append, StoreMode::Prepend][mode as usize];
                    let cur = model.get(&k).map(|m| m.cas);
                    let cas_val = match cas {
                        CasPick::None => None,
                        CasPick::Current => Some(cur.unwrap_or(1)),
                        CasPick::Wrong => Some(cur.unwrap_or(0).wrapping_add(7919)),
                    };
                    let req = StoreRequest { mode, key: &k, value: &value, flags, exptime: ttl(t, now), cas: cas_val, invalidate: false, key_binary: false };
                    let got = store.store(&req, now);
                    let is_cas = cas_val.is_some() && matches!(mode, StoreMode::Set | StoreMode::Replace);
                    let expect_ok = match (model.get(&k), mode) {
                        (None, _) if is_cas => Err(StoreOutcome::NotFound),
                        (None, StoreMode::Set | StoreMode::Add) => Ok(None),
                        (None, _) => Err(StoreOutcome::NotStored),
                        (Some(_), StoreMode::Add) => Err(StoreOutcome::NotStored),
                        (Some(m), _) if is_cas => if cas_val == Some(m.cas) { Ok(None) } else { Err(StoreOutcome::Exists) },
                        (Some(m), StoreMode::Append | StoreMode::Prepend) => {
                            if cas_val.is_some_and(|c| c != 0 && c != m.cas) {
                                Err(StoreOutcome::Exists)
                            } else {
                                let mut v = m.value.clone();
                                if mode == StoreMode::Append { v.extend_from_slice(&value) } else { v.splice(0..0, value.iter().copied()); }
                                Ok(Some(Model { value: v, flags: m.flags, exptime: m.exptime, cas: 0 }))
                            }
                        }
                        (Some(_), _) => Ok(None),
                    };
                    match expect_ok {
                        Err(e) => prop_assert_eq!(got, e),
                        Ok(next) => {
                            let StoreOutcome::Stored { cas } = got else { return Err(TestCaseError::fail(format!("{got:?}"))) };
                            prop_assert!(seen_cas.insert(cas), "cas reused");
                            let next = next.unwrap_or(Model { value: value.clone(), flags, exptime: ttl(t, now), cas: 0 });
                            model.insert(k, Model { cas, ..next });
                        }
                    }
                }
                Op::Get { key } => {
                    let k = key_bytes(key);
                    let got = store.get(&k, now, |v| (v.value.to_vec(), v.flags, v.exptime, v.cas));
                    let want = model.get(&k).map(|m| (m.value.clone(), m.flags, m.exptime, m.cas));
                    prop_assert_eq!(got, want);
                }
                Op::Delete { key } => {
                    let k = key_bytes(key);
                    let want = if model.remove(&k).is_some() { DeleteOutcome::Deleted } else { DeleteOutcome::NotFound };
                    prop_assert_eq!(store.delete(&k, now, None), want);
                }
                Op::Arith { key, incr, delta } => {
                    let k = key_bytes(key);
                    let got = store.incr_decr(&k, now, incr, delta, &ArithOptions::default());
                    match model.get_mut(&k) {
                        None => prop_assert_eq!(got, ArithOutcome::NotFound),
                        Some(m) => match parse_counter(&m.value) {
                            None => prop_assert_eq!(got, ArithOutcome::NonNumeric),
                            Some(n) => {
                                let v = apply_delta(n, delta, incr);
                                let ArithOutcome::Value { value, cas, exptime, exptime_before, created } = got else {
                                    return Err(TestCaseError::fail(format!("{got:?}")));
                                };
                                prop_assert_eq!((value, exptime, exptime_before, created), (v, m.exptime, m.exptime, false));
                                prop_assert!(seen_cas.insert(cas));
                                let mut bytes = Vec::new();
                                render_counter(v, m.value.len(), &mut bytes);
                                m.value = bytes;
                                m.cas = cas;
                            }
                        },
                    }
                }
                Op::Touch { key, ttl: t } => {
                    let k = key_bytes(key);
                    let exptime = ttl(t, now);
                    let want = model.get_mut(&k).map(|m| m.exptime = exptime).is_some();
                    prop_assert_eq!(store.touch(&k, now, exptime), want);
                }
                Op::Tick { secs } => now += u32::from(secs),
                Op::Flush => {
                    store.flush_all(now, None);
                    model.clear();
                }
            }
        }
        model.retain(|_, m| m.exptime == 0 || m.exptime > now);
        let st = store.stats();
        prop_assert_eq!(st.curr_items as usize, model.len() + model_pending_expired(&store, &model, now));
        prop_assert_eq!(st.evictions, 0);
    }
}

/// Items expired in the model but not yet noticed by the store are still
/// counted by it (expiry is lazy); count them by looking them up.
fn model_pending_expired(store: &Store, model: &HashMap<Vec<u8>, Model>, now: u32) -> usize {
    let mut live = 0;
    store.dump(now, |_| live += 1);
    let counted = store.stats().curr_items as usize;
    assert_eq!(
        live,
        model.len(),
        "dump sees exactly the model's live items"
    );
    counted - model.len()
}
