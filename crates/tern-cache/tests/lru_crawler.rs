//! memcached's LRU crawler (`lru_crawler ...`) on tern cache and on memcached 1.6.18, in the same run: the
//! same commands on both get the same answers, and a crawl reclaims the same expired items. A test binary
//! of its own: the crawler's counters are per process.

mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{connect, exchange, have, stat, Memcached, Tern};

/// tern, and memcached when installed, both started with `flags`.
fn servers(flags: &[&str]) -> (Tern, Option<Memcached>) {
    (
        Tern::start(flags),
        have("memcached").then(|| Memcached::start(flags)),
    )
}

fn addrs(tern: &Tern, memcached: &Option<Memcached>) -> Vec<SocketAddr> {
    std::iter::once(tern.addr)
        .chain(memcached.as_ref().map(|m| m.addr))
        .collect()
}

/// Waits (at most 10 s) for the crawl under way to end.
fn wait_for_crawl(addr: SocketAddr) {
    let start = Instant::now();
    while stat(addr, "", "lru_crawler_running").as_deref() == Some("1") {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{addr}: crawl never ended"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `lru_crawler metadump all` alone on a connection of its own, read to its `END` (memcached hands the
/// connection to its crawler thread: what is sent after the command waits until more comes).
fn metadump(addr: SocketAddr) -> String {
    let mut conn = connect(addr);
    conn.write_all(b"lru_crawler metadump all\r\n").unwrap();
    let mut dump = Vec::new();
    let mut buf = [0u8; 4096];
    while !dump.ends_with(b"END\r\n") {
        let n = conn.read(&mut buf).expect("the dump's END");
        assert!(n > 0, "{addr} closed during a metadump");
        dump.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&dump).into_owned()
}

#[test]
fn lru_crawler_commands_answer_as_memcached_does() {
    // `no_modern`: memcached 1.4's defaults, the crawler off.
    let (tern, memcached) = servers(&["-o", "no_modern"]);
    let transcript: [(&str, &str); 15] = [
        (
            "lru_crawler crawl 1\r\n",
            "CLIENT_ERROR lru crawler disabled\r\n",
        ),
        (
            "lru_crawler metadump all\r\n",
            "CLIENT_ERROR lru crawler disabled\r\n",
        ),
        ("lru_crawler disable\r\n", "OK\r\n"),
        ("lru_crawler enable\r\n", "OK\r\n"),
        (
            "lru_crawler enable\r\n",
            "ERROR failed to start lru crawler thread\r\n",
        ),
        ("lru_crawler crawl 0\r\n", "BADCLASS invalid class id\r\n"),
        ("lru_crawler crawl 64\r\n", "BADCLASS invalid class id\r\n"),
        ("lru_crawler crawl 1,x\r\n", "BADCLASS invalid class id\r\n"),
        (
            "lru_crawler crawl hash\r\n",
            "ERROR an unknown error happened\r\n",
        ),
        (
            "lru_crawler crawl ,\r\n",
            "NOTSTARTED no items to crawl\r\n",
        ),
        (
            "lru_crawler metadump 99\r\n",
            "BADCLASS invalid class id\r\n",
        ),
        ("lru_crawler sleep 50\r\n", "OK\r\n"),
        ("lru_crawler tocrawl 7\r\n", "OK\r\n"),
        (
            "lru_crawler sleep 1000001\r\n",
            "CLIENT_ERROR sleep must be one second or less\r\n",
        ),
        (
            "mg foo v\r\nlru_crawler metadump all\r\n",
            "EN\r\nERROR cannot pipeline other commands before metadump\r\n",
        ),
    ];
    for addr in addrs(&tern, &memcached) {
        assert_eq!(stat(addr, "settings", "lru_crawler").as_deref(), Some("no"));
        // memcached prints the crawler's two counters only while it runs.
        assert_eq!(stat(addr, "", "lru_crawler_running"), None, "{addr}");
        let mut conn = connect(addr);
        for (command, reply) in transcript {
            let (got, closed) = exchange(&mut conn, command.as_bytes());
            assert!(!closed, "{addr}: {command:?}");
            assert_eq!(String::from_utf8_lossy(&got), reply, "{addr}: {command:?}");
        }
        let settings: Vec<_> = ["lru_crawler", "lru_crawler_sleep", "lru_crawler_tocrawl"]
            .iter()
            .map(|name| stat(addr, "settings", name).unwrap_or_default())
            .collect();
        assert_eq!(settings, ["yes", "50", "7"], "{addr}");
        assert_eq!(metadump(addr), "END\r\n", "{addr}");
        // The empty metadump counts as a start.
        let counters = ["lru_crawler_running", "lru_crawler_starts"]
            .map(|name| stat(addr, "", name).unwrap_or_default());
        assert_eq!(counters, ["0", "1"], "{addr}");
        assert_eq!(exchange(&mut conn, b"lru_crawler disable\r\n").0, b"OK\r\n");
        let start = Instant::now();
        // memcached stops its thread after answering; the setting follows.
        while stat(addr, "settings", "lru_crawler").as_deref() != Some("no") {
            assert!(start.elapsed() < Duration::from_secs(10), "{addr}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn a_crawl_reclaims_the_expired_items_of_its_classes() {
    // No LRU maintainer: nothing expires in the background, only the crawl reclaims.
    let (tern, memcached) = servers(&["-o", "no_lru_maintainer"]);
    let sets: String = (0..30)
        .map(|i| format!("set forever{i} 0 0 2\r\nok\r\nset brief{i} 0 1 2\r\nok\r\n"))
        .collect();
    let addrs = addrs(&tern, &memcached);
    for &addr in &addrs {
        assert_eq!(common::ask(addr, &sets), "STORED\r\n".repeat(60), "{addr}");
    }
    // memcached's clock ticks in whole seconds: a 1 s TTL ends within 2 s.
    std::thread::sleep(Duration::from_millis(2100));
    let mut found = Vec::new();
    for &addr in &addrs {
        // Items, and chunks in use in class 1 (a chunk an item, on both).
        let in_use = || {
            [("", "curr_items"), ("slabs", "1:used_chunks")]
                .map(|(group, name)| stat(addr, group, name).unwrap_or_default())
        };
        let crawl = |class: u8| {
            let reply = common::ask(addr, &format!("lru_crawler crawl {class}\r\n"));
            assert_eq!(reply, "OK\r\n", "{addr}");
            wait_for_crawl(addr);
        };
        assert_eq!(in_use(), ["60", "60"], "{addr}");
        // The items are in class 1 on both (memcached's smallest slab class, tern's small queue); a crawl of
        // class 2 finds nothing to reclaim.
        crawl(2);
        assert_eq!(in_use(), ["60", "60"], "{addr}");
        crawl(1);
        let dump = metadump(addr);
        let mut keys: Vec<_> = dump
            .lines()
            .filter_map(|l| l.strip_prefix("key=")?.split(' ').next())
            .collect();
        keys.sort_unstable();
        let counts = [
            ("", "curr_items"),
            ("items", "items:1:crawler_reclaimed"),
            ("slabs", "1:used_chunks"),
            ("", "crawler_reclaimed"),
            // The crawler's reclaims are not `reclaimed` (memcached counts that at its LRU tails).
            ("", "reclaimed"),
            ("", "expired_unfetched"),
            ("", "lru_crawler_starts"),
        ]
        .map(|(group, name)| stat(addr, group, name).unwrap_or_default());
        found.push((counts, keys.join(",")));
    }
    let mut forever: Vec<_> = (0..30).map(|i| format!("forever{i}")).collect();
    forever.sort_unstable();
    let want = (
        ["30", "30", "30", "30", "0", "30", "3"].map(str::to_owned),
        forever.join(","),
    );
    assert_eq!(found[0], want, "tern");
    if let [tern, memcached] = &found[..] {
        assert_eq!(tern, memcached);
    }
}

#[test]
fn with_the_crawler_and_the_maintainer_on_expired_items_go_by_themselves() {
    let tern = Tern::start(&[]);
    let sets: String = (0..30)
        .map(|i| format!("set brief{i} 0 1 2\r\nok\r\n"))
        .collect();
    assert_eq!(common::ask(tern.addr, &sets), "STORED\r\n".repeat(30));
    let start = Instant::now();
    while stat(tern.addr, "", "curr_items").as_deref() != Some("0") {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the background step never reclaimed the expired items"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        stat(tern.addr, "", "crawler_reclaimed").as_deref(),
        Some("30")
    );
    // Nothing was asked for: no lookup met them.
    assert_eq!(stat(tern.addr, "", "get_expired").as_deref(), Some("0"));
}

/// A TTL taken away in place (`touch k 0`, `gat 0`, `mg T0`) used to leave a record the background step
/// misread, and its thread panicked: expired items then stayed. Found by Cache::Memcached::Fast's suite.
#[test]
fn ttls_taken_away_in_place_leave_the_background_step_working() {
    let tern = Tern::start(&[]);
    let set = "set k1 0 2 5\r\nvalue\r\nset k2 0 2 5\r\nvalue\r\nset k3 0 2 5\r\nvalue\r\n";
    assert_eq!(common::ask(tern.addr, set), "STORED\r\n".repeat(3));
    assert_eq!(
        common::ask(tern.addr, "touch k1 0\r\ngat 0 k2\r\nmg k3 T0\r\n"),
        "TOUCHED\r\nVALUE k2 0 5\r\nvalue\r\nEND\r\nHD\r\n"
    );
    let brief: String = (0..30)
        .map(|i| format!("set brief{i} 0 1 2\r\nok\r\n"))
        .collect();
    assert_eq!(common::ask(tern.addr, &brief), "STORED\r\n".repeat(30));
    let start = Instant::now();
    while stat(tern.addr, "", "curr_items").as_deref() != Some("3") {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the background step stopped reclaiming: {:?} items",
            stat(tern.addr, "", "curr_items")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        common::ask(tern.addr, "get k1 k2 k3\r\n")
            .matches("VALUE")
            .count(),
        3
    );
}
