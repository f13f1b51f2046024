//! Single-thread costs of the hot operations, and the hit-ratio simulation.
//!
//! `cargo bench -p tern-cache-storage`

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::hint::black_box;
use tern_cache_storage::{Store, StoreConfig, StoreRequest};

#[path = "../tests/sim/mod.rs"]
mod sim;

const ITEMS: u64 = 1_000_000;

fn key(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k.copy_from_slice(format!("key:{i:012}").as_bytes());
    k
}

fn loaded_store() -> Store {
    let store = Store::new(StoreConfig {
        memory_limit: 1024 << 20,
        ..Default::default()
    })
    .unwrap();
    let value = [b'v'; 100];
    for i in 0..ITEMS {
        store.store(&StoreRequest::set(&key(i), &value), 1);
    }
    store
}

fn ops(c: &mut Criterion) {
    let store = loaded_store();
    let keys: Vec<[u8; 16]> = (0..4096u64)
        .map(|i| key(i.wrapping_mul(0x9E37_79B9) % ITEMS))
        .collect();
    let misses: Vec<[u8; 16]> = (0..4096u64).map(|i| key(ITEMS + i)).collect();
    let mut g = c.benchmark_group("store");
    g.throughput(Throughput::Elements(1));
    let mut i = 0usize;
    g.bench_function("get_hit_100B", |b| {
        b.iter(|| {
            i = (i + 1) & 4095;
            // Copy the value out, as a server writing its reply would.
            let mut out = [0u8; 128];
            store.get(black_box(&keys[i]), 1, |v| {
                out[..v.value.len()].copy_from_slice(v.value);
                out[0]
            })
        })
    });
    g.bench_function("get_miss", |b| {
        b.iter(|| {
            i = (i + 1) & 4095;
            store.get(black_box(&misses[i]), 1, |v| v.value.len())
        })
    });
    let value = [b'w'; 100];
    g.bench_function("set_100B", |b| {
        b.iter(|| {
            i = (i + 1) & 4095;
            store.store(black_box(&StoreRequest::set(&keys[i], &value)), 1)
        })
    });
    g.finish();
}

/// 16-key multi-gets over a store far larger than the CPU's caches (keys drawn from all 1M items), looked
/// up one after the other and with the look-ahead the server uses.
fn multi_get(c: &mut Criterion) {
    const KEYS: usize = 16;
    let store = loaded_store();
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let keys: Vec<[u8; 16]> = (0..1 << 16)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            key(state % ITEMS)
        })
        .collect();
    let batches = keys.len() / KEYS;
    let copy = |out: &mut Vec<u8>, v: &tern_cache_storage::ItemView| {
        out.extend_from_slice(v.key);
        out.extend_from_slice(v.value)
    };
    let mut g = c.benchmark_group("multi_get");
    g.throughput(Throughput::Elements(KEYS as u64));
    let mut n = 0usize;
    let mut out = Vec::with_capacity(4096);
    g.bench_function("16_keys_one_by_one", |b| {
        b.iter(|| {
            n = (n + 1) % batches;
            out.clear();
            for key in &keys[n * KEYS..(n + 1) * KEYS] {
                store.get(black_box(key), 1, |v| copy(&mut out, v));
            }
            out.len()
        })
    });
    g.bench_function("16_keys_lookahead", |b| {
        b.iter(|| {
            n = (n + 1) % batches;
            out.clear();
            let batch = keys[n * KEYS..(n + 1) * KEYS].iter().map(|k| &k[..]);
            let mut ahead = store.lookahead(batch.clone());
            for key in batch {
                ahead.advance();
                store.get(black_box(key), 1, |v| copy(&mut out, v));
            }
            out.len()
        })
    });
    g.finish();
}

fn hit_ratio(c: &mut Criterion) {
    let memory = 4 << 20;
    for (skew, scan) in [(0.8, 0), (1.0, 0), (1.2, 0), (1.0, 20)] {
        let t = sim::trace(200_000, skew, scan, 600_000, 3);
        println!(
            "hit ratio zipf {skew} scan {scan}%: store {:.4}, LRU same layout {:.4}, LRU at memcached's cost {:.4}",
            sim::store_hit_ratio(&t, memory, 1),
            sim::lru_hit_ratio(&t, memory, sim::STORE_OVERHEAD),
            sim::lru_hit_ratio(&t, memory, sim::MEMCACHED_OVERHEAD)
        );
    }
    let t = sim::trace(200_000, 1.0, 0, 200_000, 5);
    let mut g = c.benchmark_group("simulation");
    g.sample_size(10);
    g.throughput(Throughput::Elements(t.len() as u64));
    g.bench_function("cache_aside_zipf1.0", |b| {
        b.iter_batched(
            || (),
            |_| sim::store_hit_ratio(&t, memory, 1),
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, ops, multi_get, hit_ratio);
criterion_main!(benches);
