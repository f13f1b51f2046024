//! `incr_hits`, `incr_misses`, `decr_hits` and `decr_misses` against a real memcached over real sockets, in
//! a test binary of its own (tern's counters are per process).

mod common;

use common::{ask, stat_values, Tern};

/// `incr_hits`/`incr_misses` and the `decr_` pair: a counter made from an initial value on a miss (binary
/// incr/decr, `ma N`) counts as neither a hit nor a miss (memcached 1.6.18; tern counted it a hit until
/// spymemcached's and Folsom's checks saw it, 2026-11-27).
#[test]
fn counters_made_on_a_miss_count_as_memcached_counts_them() {
    use tern_memcache_proto::binary::{opcode, write_request, Header};
    let flags = ["-B", "auto"];
    let tern = Tern::start(&flags);
    let memcached = common::have("memcached").then(|| common::Memcached::start(&flags));
    // (opcode, key, expiration): 0xffffffff asks not to create the counter.
    let binary: [(u8, &[u8], u32); 5] = [
        (opcode::INCREMENT, b"bi", 0),
        (opcode::DECREMENT, b"bd", 0),
        (opcode::INCREMENT, b"bi", 0),
        (opcode::DECREMENT, b"bd", 0),
        (opcode::INCREMENT, b"gone", 0xffff_ffff),
    ];
    let script = "ma n N0\r\nma n\r\nma n2 N0 MD\r\nma n2 MD\r\nma nope\r\n";
    let names = ["incr_hits", "incr_misses", "decr_hits", "decr_misses"];
    let counts: Vec<_> = std::iter::once(tern.addr)
        .chain(memcached.as_ref().map(|m| m.addr))
        .map(|addr| {
            let mut conn = common::connect(addr);
            for (op, key, expiration) in binary {
                let mut extras = Vec::new();
                extras.extend_from_slice(&1u64.to_be_bytes());
                extras.extend_from_slice(&10u64.to_be_bytes());
                extras.extend_from_slice(&expiration.to_be_bytes());
                let header = Header {
                    opcode: op,
                    extlen: 20,
                    keylen: key.len() as u16,
                    bodylen: 20 + key.len() as u32,
                    opaque: [0; 4],
                    cas: 0,
                };
                let mut request = Vec::new();
                write_request(&mut request, &header, &extras, key, &[]);
                common::binary_packet(&mut conn, &request).expect("a response");
            }
            ask(addr, script);
            stat_values(addr, &names)
        })
        .collect();
    assert_eq!(
        counts[0],
        [
            "incr_hits 2",
            "incr_misses 2",
            "decr_hits 2",
            "decr_misses 0"
        ]
    );
    if let [tern_counts, memcached_counts] = &counts[..] {
        assert_eq!(tern_counts, memcached_counts);
    }
}
