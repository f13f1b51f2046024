//! The eviction policy must hit at least as often as LRU (memcached's
//! segmented LRU approximates it) on skewed traces, with and without a scan.

mod sim;

#[test]
fn store_hits_at_least_as_often_as_lru() {
    let memory = 2 << 20;
    for (skew, scan) in [(0.8, 0), (1.0, 0), (1.2, 0), (1.0, 20)] {
        let t = sim::trace(100_000, skew, scan, 300_000, 11);
        let ours = sim::store_hit_ratio(&t, memory, 1);
        // LRU given this store's compact layout: a pure policy comparison.
        let lru = sim::lru_hit_ratio(&t, memory, sim::STORE_OVERHEAD);
        // LRU at memcached's measured per-item cost: what memcached holds.
        let memcached = sim::lru_hit_ratio(&t, memory, sim::MEMCACHED_OVERHEAD);
        println!("zipf {skew} scan {scan}%: store {ours:.4} lru {lru:.4} memcached-sized lru {memcached:.4}");
        assert!(
            ours >= memcached,
            "zipf {skew} scan {scan}%: {ours} < memcached-sized LRU {memcached}"
        );
        assert!(
            ours >= lru - 0.01,
            "zipf {skew} scan {scan}%: {ours} < LRU {lru}"
        );
    }
}
