//! Resident memory per item: 1M items of 16-byte keys and 100-byte values in
//! a store sized like memcached `-m 1024`. Prints bytes of RSS per item,
//! measured from /proc/self/statm against the RSS before the store existed.
//!
//! `cargo run --release -p tern-cache-storage --example memory [items]`

use tern_cache_storage::{Store, StoreConfig, StoreRequest};

fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("procfs");
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize
}

fn main() {
    let items: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("item count"))
        .unwrap_or(1_000_000);
    let value = [b'v'; 100];
    let mut key = [0u8; 16];
    let before = rss_bytes();
    let store = Store::new(StoreConfig {
        memory_limit: 1024 << 20,
        ..Default::default()
    })
    .unwrap();
    for i in 0..items {
        // 16-byte keys like "key:000000000042".
        key.copy_from_slice(format!("key:{i:012}").as_bytes());
        let r = store.store(&StoreRequest::set(&key, &value), 1);
        assert!(
            matches!(r, tern_cache_storage::StoreOutcome::Stored { .. }),
            "{r:?}"
        );
    }
    let after = rss_bytes();
    let st = store.stats();
    assert_eq!(st.curr_items as usize, items, "nothing may be evicted");
    let hits = (0..items).step_by(997).filter(|i| {
        key.copy_from_slice(format!("key:{i:012}").as_bytes());
        store
            .get(&key, 1, |v| v.value.len() == 100)
            .unwrap_or(false)
    });
    assert_eq!(hits.count(), items.div_ceil(997));
    println!("items              {items}");
    println!("raw bytes/item     116");
    println!("rss growth         {} bytes", after - before);
    println!(
        "rss bytes/item     {:.1}",
        (after - before) as f64 / items as f64
    );
    println!(
        "process rss/item   {:.1} (whole process; {before} bytes before the store)",
        after as f64 / items as f64
    );
    println!(
        "store bytes/item   {:.1} (segments + index, as accounted)",
        st.total_malloced as f64 / items as f64
    );
    println!(
        "item bytes/item    {:.1} (stats 'bytes')",
        st.bytes as f64 / items as f64
    );
    println!(
        "index bytes/item   {:.1}",
        st.hash_bytes as f64 / items as f64
    );
    println!("shards             {}", store.shard_count());
}
