//! Refused `incr`/`decr` and the four counters, against a real memcached over real sockets, in a test binary
//! of its own (tern's counters are per process).

mod common;

use common::{ask, stat_values, Tern};

/// A non-numeric value and a CAS mismatch leave the four counters alone (memcached's `do_add_delta` counts a
/// hit only once the number is read and changed, a miss only for a missing key); tern counted both as
/// misses until Dalli's checks saw it (2026-11-28).
#[test]
fn refused_arithmetic_counts_as_neither_hit_nor_miss() {
    let tern = Tern::start(&[]);
    let memcached = common::have("memcached").then(|| common::Memcached::start(&[]));
    let script = "set word 0 0 3\r\nabc\r\nincr word 1\r\ndecr word 1\r\nma word\r\n\
                  set n 0 0 1\r\n5\r\nma n C1\r\nma n MD C1\r\nincr n 1\r\nincr none 1\r\n";
    let names = ["incr_hits", "incr_misses", "decr_hits", "decr_misses"];
    let runs: Vec<_> = std::iter::once(tern.addr)
        .chain(memcached.as_ref().map(|m| m.addr))
        .map(|addr| (ask(addr, script), stat_values(addr, &names)))
        .collect();
    assert_eq!(
        runs[0].1,
        [
            "incr_hits 1",
            "incr_misses 1",
            "decr_hits 0",
            "decr_misses 0"
        ],
        "tern answered {:?}",
        runs[0].0
    );
    if let [tern_run, memcached_run] = &runs[..] {
        assert_eq!(tern_run, memcached_run);
    }
}
