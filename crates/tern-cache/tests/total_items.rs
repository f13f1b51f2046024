//! `total_items` against a real memcached: which commands link a new item. A test binary of its own, since
//! tests/command_counters.rs counts the process's commands.

mod common;

use common::{ask, stat_values, Tern};

/// `total_items` counts the items memcached links: stores, and an incr/decr whose number no longer fits
/// (a new item); not a touch, an incr in place, or a stale mark (`md I`), which change the item they
/// find. (tern rewrites such items in its log, but counts them as memcached does.)
#[test]
fn total_items_counts_new_items_only_as_in_memcached() {
    let tern = Tern::start(&[]);
    let memcached = common::have("memcached").then(|| common::Memcached::start(&[]));
    let steps = [
        (
            "set t 0 0 1\r\nx\r\nset n 0 0 1\r\n5\r\nset s 0 0 1\r\nx\r\n",
            "3",
        ),
        ("touch t 100\r\ngat 200 t\r\nmg t T300\r\n", "3"),
        ("incr n 1\r\ndecr n 2\r\n", "3"),
        ("incr n 100\r\n", "4"),
        ("md s I T30\r\n", "4"),
        ("set t 0 0 2\r\nxy\r\n", "5"),
    ];
    for addr in std::iter::once(tern.addr).chain(memcached.as_ref().map(|m| m.addr)) {
        for (commands, total) in steps {
            ask(addr, commands);
            assert_eq!(
                stat_values(addr, &["total_items"]),
                [format!("total_items {total}")],
                "{addr} after {commands:?}"
            );
        }
    }
}
