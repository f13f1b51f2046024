//! `stats` groups beside the general one, compared with memcached 1.6.18 byte for byte where the two stores
//! agree: `cachedump`'s lines and its answers to bad arguments, `sizes` with its switches, `extstore`; and
//! `stats items`' `age` (found by Node.js clients' checks, 2026-11-27).

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use common::{connect, exchange, have, stat, Memcached, Tern};

/// The replies to `requests`, sent one at a time on one connection.
fn replies(addr: SocketAddr, requests: &[&str]) -> Vec<String> {
    let mut conn = connect(addr);
    requests
        .iter()
        .map(|r| String::from_utf8(exchange(&mut conn, r.as_bytes()).0).unwrap())
        .collect()
}

#[test]
fn cachedump_lists_value_lengths_and_expiry_times_and_refuses_bad_arguments_as_memcached() {
    if !have("memcached") {
        return;
    }
    let tern = Tern::start(&[]);
    let memcached = Memcached::start(&[]);
    let bad = [
        "stats cachedump 200 3\r\n",
        "stats cachedump 64 3\r\n",
        "stats cachedump 63 3\r\n",
        "stats cachedump 0 0\r\n",
        "stats cachedump abc 3\r\n",
        "stats cachedump 1 -1\r\n",
        "stats cachedump 1\r\n",
        "stats cachedump\r\n",
    ];
    let mut answers = Vec::new();
    for addr in [tern.addr, memcached.addr] {
        let stored = replies(
            addr,
            &["set cd:a 0 0 3\r\nabc\r\nset cd:b 5 100 4\r\nwxyz\r\n"],
        );
        assert_eq!(stored, ["STORED\r\nSTORED\r\n"]);
        let time: i64 = stat(addr, "", "time").unwrap().parse().unwrap();
        // memcached lists an item once its LRU maintainer has moved it to the cold LRU, within a second or
        // so; tern at once.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let dump = loop {
            let dump = replies(addr, &["stats cachedump 1 10\r\n"]).remove(0);
            if dump.lines().count() == 3 || std::time::Instant::now() > deadline {
                break dump;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let lines: BTreeSet<&str> = dump.lines().collect();
        let expires = lines
            .iter()
            .find_map(|l| l.strip_prefix("ITEM cd:b [4 b; "))
            .and_then(|rest| rest.strip_suffix(" s]"))
            .unwrap_or_else(|| panic!("no line for cd:b with its value's length: {dump:?}"))
            .parse::<i64>()
            .unwrap();
        assert!(
            (time + 99..=time + 101).contains(&expires),
            "{dump:?} at {time}"
        );
        assert!(lines.contains("ITEM cd:a [3 b; 0 s]"), "{dump:?}");
        assert!(dump.ends_with("END\r\n") && lines.len() == 3, "{dump:?}");
        answers.push(replies(addr, &bad));
    }
    assert_eq!(answers[0], answers[1], "tern, then memcached");
    assert_eq!(answers[0][0], "CLIENT_ERROR Illegal slab id\r\n");
}

#[test]
fn sizes_histogram_and_its_switches_answer_as_memcached() {
    if !have("memcached") {
        return;
    }
    let requests = [
        "stats sizes\r\n",
        "stats sizes_enable\r\n",
        "stats sizes_enable\r\n",
        &format!(
            "set k1 0 0 10\r\n0123456789\r\nset k2 5 0 100\r\n{}\r\nset key3 0 0 1000\r\n{}\r\n",
            "v".repeat(100),
            "w".repeat(1000)
        ),
        "stats sizes\r\n",
        "stats sizes_disable\r\n",
        "stats sizes\r\n",
        "stats extstore\r\n",
    ];
    let tern = Tern::start(&[]);
    let memcached = Memcached::start(&[]);
    let ours = replies(tern.addr, &requests);
    assert_eq!(ours, replies(memcached.addr, &requests));
    // memcached's item sizes: 71, 165 and 1,063 bytes, each counted in its 32-byte range.
    assert_eq!(ours[4], "STAT 96 1\r\nSTAT 192 1\r\nSTAT 1088 1\r\nEND\r\n");
    assert_eq!(
        ours[1], "STAT sizes_status enabled\r\n",
        "no END, as memcached"
    );

    // `-o track_sizes` turns it on from the start, as `stats settings` says; without CAS it cannot be.
    let tracking = Tern::start(&["-o", "track_sizes"]);
    assert_eq!(
        stat(tracking.addr, "settings", "track_sizes").unwrap(),
        "yes"
    );
    assert_eq!(stat(tern.addr, "settings", "track_sizes").unwrap(), "no");
    let requests = ["stats sizes_enable\r\n", "stats sizes\r\n"];
    let tern = Tern::start(&["-C"]);
    let memcached = Memcached::start(&["-C"]);
    let ours = replies(tern.addr, &requests);
    assert_eq!(ours, replies(memcached.addr, &requests));
    assert_eq!(
        ours[0],
        "STAT sizes_status error\r\nSTAT sizes_error cas_support_disabled\r\n"
    );
}

/// `age` is the age of what the class would evict next, not the server's uptime.
#[test]
fn items_age_is_the_oldest_segments_not_the_uptime() {
    let tern = Tern::start(&[]);
    std::thread::sleep(Duration::from_millis(2500));
    let _ = replies(tern.addr, &["set a 0 0 1\r\nx\r\n"]);
    let age: u32 = stat(tern.addr, "items", "items:1:age")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        age <= 1,
        "age {age} a moment after the only item was stored"
    );
    std::thread::sleep(Duration::from_millis(2100));
    let age: u32 = stat(tern.addr, "items", "items:1:age")
        .unwrap()
        .parse()
        .unwrap();
    assert!((2..=4).contains(&age), "age {age} two seconds later");
}

/// `stats settings`' `oldest` after each kind of `flush_all` (with and without CAS values), as an offset
/// from `uptime` (the two clocks share memcached's origin), and `umask` from `-a`.
#[test]
fn settings_oldest_follows_flushes_and_umask_follows_the_flag_as_memcached() {
    if !have("memcached") {
        return;
    }
    // `oldest` less `uptime` after `flush`, read within one second of the server's clock.
    fn offset_after(addr: SocketAddr, flush: &str) -> i64 {
        for _ in 0..5 {
            let before = stat(addr, "", "uptime").unwrap();
            assert_eq!(replies(addr, &[flush]), ["OK\r\n"]);
            let oldest: i64 = stat(addr, "settings", "oldest").unwrap().parse().unwrap();
            if stat(addr, "", "uptime").unwrap() == before {
                return oldest - before.parse::<i64>().unwrap();
            }
        }
        panic!("the clock ticked during every try");
    }
    for flags in [&["-a", "755"][..], &["-C", "-a", "7x9"]] {
        let tern = Tern::start(flags);
        let memcached = Memcached::start(flags);
        let mut seen = Vec::new();
        for addr in [tern.addr, memcached.addr] {
            let oldest = stat(addr, "settings", "oldest").unwrap();
            let umask = stat(addr, "settings", "umask").unwrap();
            let now = offset_after(addr, "flush_all\r\n");
            let later = offset_after(addr, "flush_all 10\r\n");
            seen.push((oldest, umask, now, later));
        }
        assert_eq!(seen[0], seen[1], "{flags:?}: tern, then memcached");
        assert_eq!(seen[0].0, "0", "no flush yet");
    }
}
