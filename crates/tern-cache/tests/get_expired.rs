//! `get_expired` against a real memcached over real sockets. A test binary of its own: tern's counters are
//! per process, so the lookups of tests running alongside would count too.

mod common;

use std::time::Duration;

use common::{ask, stat_values, Tern};

/// memcached counts `get_expired` in its lookup (`do_item_get`), so every command whose lookup finds its key
/// expired counts it, and then answers and counts a miss of its own kind. Both servers get the same commands
/// on keys whose 1 s TTL has passed, then the same stats. Both servers' LRU maintainer and crawler are off:
/// they reclaim expired items in the background, which would make the counts depend on timing.
#[test]
fn get_expired_counts_expired_lookups_as_memcached_does() {
    let quiet = ["-o", "no_lru_maintainer,no_lru_crawler"];
    let tern = Tern::start(&quiet);
    let memcached = common::have("memcached").then(|| common::Memcached::start(&quiet));
    let servers: Vec<_> = std::iter::once(tern.addr)
        .chain(memcached.as_ref().map(|m| m.addr))
        .collect();
    let keys = 13;
    let sets: String = (0..keys)
        .map(|i| format!("set k{i} 0 1 1\r\nv\r\n"))
        .collect();
    for &addr in &servers {
        assert_eq!(ask(addr, &sets), "STORED\r\n".repeat(keys), "{addr}");
    }
    // memcached's clock ticks in whole seconds: a 1 s TTL ends within 2 s.
    std::thread::sleep(Duration::from_millis(2100));
    // One lookup per key, each command that looks up once (k0 twice: the first lookup unlinked it); these
    // commands count their misses alike on both servers.
    let lookups = "get k0 k1\r\ngets k2\r\nmg k3 v\r\nme k4\r\ntouch k5 10\r\ndelete k6\r\n\
                   incr k7 1\r\nmd k8\r\nma k9\r\nget k0\r\n";
    let misses =
        "END\r\nEND\r\nEN\r\nEN\r\nNOT_FOUND\r\nNOT_FOUND\r\nNOT_FOUND\r\nNF\r\nNF\r\nEND\r\n";
    let with_misses = [
        "get_expired",
        "get_flushed",
        "get_misses",
        "get_hits",
        "touch_misses",
        "delete_misses",
        "incr_misses",
        // A lookup that meets an expired item counts neither (memcached's do_item_get).
        "reclaimed",
        "expired_unfetched",
    ];
    // The lookups that touch: memcached counts their misses as touch misses (gat/gats) or get misses (`mg T`).
    let touching = "gat 100 k10\r\ngats 100 k11\r\nmg k12 T10 v\r\n";
    let counts: Vec<_> = servers
        .iter()
        .map(|&addr| {
            assert_eq!(ask(addr, lookups), misses, "{addr}");
            let after_lookups = stat_values(addr, &with_misses);
            assert_eq!(ask(addr, touching), "END\r\nEND\r\nEN\r\n", "{addr}");
            (after_lookups, stat_values(addr, &with_misses))
        })
        .collect();
    assert_eq!(counts[0].0[0], "get_expired 10");
    assert_eq!(counts[0].1[0], format!("get_expired {keys}"));
    if let [tern_counts, memcached_counts] = &counts[..] {
        assert_eq!(tern_counts, memcached_counts);
    }
}
