//! Hit ratios of the store's S3-FIFO segments against an exact LRU on the
//! same cache-aside traces (Zipf 0.8-1.2, with and without a scan).
//!
//! `cargo run --release -p tern-cache-storage --example hit_ratio`

#[path = "../tests/sim/mod.rs"]
mod sim;

fn main() {
    let keys = 1_000_000;
    let requests = 4_000_000;
    let memory = 16 << 20;
    println!(
        "keys {keys}, requests {requests} (hits counted over the second half), memory {} MiB",
        memory >> 20
    );
    println!(
        "{:<20} {:>8} {:>10} {:>16} {:>19}",
        "trace", "store", "store 8sh", "LRU same-layout", "LRU memcached-cost"
    );
    for (skew, scan) in [
        (0.8, 0),
        (1.0, 0),
        (1.2, 0),
        (0.8, 20),
        (1.0, 20),
        (1.2, 20),
    ] {
        let t = sim::trace(keys, skew, scan, requests, 7);
        let ours = sim::store_hit_ratio(&t, memory, 1);
        let ours8 = sim::store_hit_ratio(&t, memory, 8);
        let lru = sim::lru_hit_ratio(&t, memory, sim::STORE_OVERHEAD);
        let lru_mc = sim::lru_hit_ratio(&t, memory, sim::MEMCACHED_OVERHEAD);
        println!(
            "zipf {skew:<4} scan {scan:>2}%  {ours:>8.4} {ours8:>10.4} {lru:>16.4} {lru_mc:>19.4}"
        );
    }
}
