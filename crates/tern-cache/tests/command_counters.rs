//! Which counters each get-family and meta command moves, against a real memcached over real sockets. A test
//! binary of its own: tern's counters are per process, so the commands of tests running alongside would
//! count too.

mod common;

use common::{ask, stat_values, Tern};

/// memcached 1.6.18 counts gat/gats only as touches (`cmd_touch`, `touch_hits`/`touch_misses`), an `mg`
/// that finds or makes (`N`) an item as a touch when it has `T` and as a get otherwise, an `mg` miss as a
/// get miss even with `T`, and `cmd_meta` for `me` only.
#[test]
fn get_family_and_meta_commands_count_as_in_memcached() {
    let tern = Tern::start(&[]);
    let memcached = common::have("memcached").then(|| common::Memcached::start(&[]));
    let script =
        "set k 0 0 1\r\nx\r\ngat 10 k nope\r\ngats 10 k\r\nmg k T10 v\r\nmg nope T10 v\r\n\
                  mg k v\r\nmg nope v\r\nget k nope\r\nmg made N30 v\r\nmg made2 N30 T10 v\r\n\
                  mg made3 T10 N30 v\r\nms a 1\r\nx\r\nmd a\r\nma n N0\r\nmn\r\nme k\r\n";
    let names = [
        "cmd_get",
        "cmd_touch",
        "get_hits",
        "get_misses",
        "touch_hits",
        "touch_misses",
        "cmd_meta",
    ];
    let counts: Vec<_> = std::iter::once(tern.addr)
        .chain(memcached.as_ref().map(|m| m.addr))
        .map(|addr| {
            ask(addr, script);
            stat_values(addr, &names)
        })
        .collect();
    // (`ask` ends its commands with an `mg` miss as a sentinel: one more get and get miss.)
    assert_eq!(
        counts[0],
        [
            "cmd_get 7",
            "cmd_touch 6",
            "get_hits 3",
            "get_misses 4",
            "touch_hits 5",
            "touch_misses 1",
            "cmd_meta 1"
        ]
    );
    if let [tern_counts, memcached_counts] = &counts[..] {
        assert_eq!(tern_counts, memcached_counts);
    }
}

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
