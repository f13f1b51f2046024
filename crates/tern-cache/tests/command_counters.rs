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
