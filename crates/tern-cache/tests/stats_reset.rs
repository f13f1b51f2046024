//! `stats reset` and `store_too_large` compared with memcached 1.6.18, in a test binary of its own (a reset
//! zeroes the process's counters, which other tests of a binary would be reading).

mod common;

use common::{connect, exchange, have, stat, Memcached, Tern};

/// `stats reset` zeroes what memcached's `stats_reset` zeroes, the store's counters included (`total_items`,
/// evictions and the per-class figures; tern kept them until Dalli's checks saw it, 2026-11-28); and a value
/// over `-I` counts in `store_too_large` over text, never over binary (memcached's binary path does not
/// count it).
#[test]
fn stats_reset_zeroes_the_store_counters_and_binary_refusals_are_not_counted_as_memcached() {
    use tern_memcache_proto::binary::{opcode, write_request, Header};
    let flags = ["-m", "8", "-B", "auto"];
    let tern = Tern::start(&flags);
    let memcached = have("memcached").then(|| Memcached::start(&flags));
    let names = [
        "total_items",
        "evictions",
        "evicted_unfetched",
        "store_too_large",
    ];
    let runs: Vec<_> = std::iter::once(tern.addr)
        .chain(memcached.as_ref().map(|m| m.addr))
        .map(|addr| {
            let mut conn = connect(addr);
            let value = "v".repeat(50_000);
            let mut sets = String::new();
            for i in 0..400 {
                sets += &format!("set key{i} 0 0 {}\r\n{value}\r\n", value.len());
            }
            exchange(&mut conn, sets.as_bytes());
            let before = common::stat_values(addr, &names[..3]);
            let evicted_before: Option<u64> =
                stat(addr, "", "evictions").and_then(|n| n.parse().ok());
            exchange(&mut conn, b"stats reset\r\n");
            let big = vec![b'x'; 2 << 20];
            let header = Header {
                opcode: opcode::SET,
                extlen: 8,
                keylen: 3,
                bodylen: 8 + 3 + big.len() as u32,
                opaque: [0; 4],
                cas: 0,
            };
            let mut request = Vec::new();
            write_request(&mut request, &header, &[0; 8], b"big", &big);
            // A connection of its own: `-B auto` gives each connection the protocol of its first byte.
            common::binary_packet(&mut connect(addr), &request).expect("a response");
            let after_binary = common::stat_values(addr, &names);
            let mut text = connect(addr);
            let text_set = [
                format!("set big 0 0 {}\r\n", big.len()).as_bytes(),
                &big,
                b"\r\n",
            ]
            .concat();
            exchange(&mut text, &text_set);
            let after_text = common::stat_values(addr, &names[3..]);
            let items = String::from_utf8(exchange(&mut text, b"stats items\r\n").0).unwrap();
            let evicted: Vec<String> = items
                .lines()
                .filter(|l| l.contains(":evicted ") || l.contains(":evicted_unfetched "))
                .map(|l| l.rsplit(' ').next().unwrap_or_default().to_owned())
                .collect();
            (before, evicted_before, after_binary, after_text, evicted)
        })
        .collect();
    let (before, evicted_before, after_binary, after_text, evicted) = &runs[0];
    assert_eq!(before[0], "total_items 400", "before the reset");
    assert!(
        evicted_before.is_some_and(|n| n > 0),
        "evictions before the reset"
    );
    assert_eq!(
        after_binary,
        &[
            "total_items 0",
            "evictions 0",
            "evicted_unfetched 0",
            "store_too_large 0"
        ]
    );
    assert_eq!(after_text, &["store_too_large 1"]);
    assert!(evicted.iter().all(|n| n == "0"), "{evicted:?}");
    if let [tern_run, memcached_run] = &runs[..] {
        assert_eq!(
            (
                &tern_run.2,
                &tern_run.3,
                &tern_run.4.iter().all(|n| n == "0")
            ),
            (
                &memcached_run.2,
                &memcached_run.3,
                &memcached_run.4.iter().all(|n| n == "0")
            )
        );
    }
}
