//! What a dashboard reads of a running `tern cache` on its admin endpoint's /metrics: the store's gauges
//! equal what `stats` says (items, bytes, the limit, evictions), the hit ratio is the counters', the request
//! latency histograms count every command by kind, and the connection gauge counts the clients connected.
//! Also what `stats` says of the process itself: `reserved_fds` counts its own descriptors, not its clients.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use tern_testkit::{free_port, stats_reply, wait_for_port, ChildGuard};

fn http_get(admin: SocketAddr, path: &str) -> String {
    let (status, body) = common::http_text(admin.port(), path);
    assert_eq!(status, 200, "{path}: {body}");
    body
}

/// The value of the series `series` (its name and labels as written) in Prometheus text.
fn value(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .unwrap_or_else(|| panic!("{series} not in /metrics:\n{metrics}"))
        .trim()
        .parse()
        .unwrap()
}

fn stat(stats: &str, name: &str) -> f64 {
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
        .unwrap_or_else(|| panic!("{name} not in stats"))
        .trim()
        .parse()
        .unwrap()
}

/// Sends `commands` and reads until the reply ends with `end`.
fn exchange(conn: &mut TcpStream, commands: &[u8], end: &[u8]) {
    conn.write_all(commands).unwrap();
    let mut reply = Vec::new();
    let mut buf = [0u8; 65536];
    while !reply.ends_with(end) {
        let n = conn.read(&mut buf).unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&reply));
        reply.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn the_cache_gauges_and_latency_histograms_say_what_stats_says() {
    let (port, admin_port) = (free_port(), free_port());
    let admin = SocketAddr::from(([127, 0, 0, 1], admin_port));
    let _cache = ChildGuard(
        std::process::Command::new(env!("CARGO_BIN_EXE_tern"))
            .args(["cache", "-p", &port.to_string(), "-m", "8", "-t", "2"])
            .args(["--admin", &admin.to_string()])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    assert!(wait_for_port(addr, Duration::from_secs(20)));
    assert!(wait_for_port(admin, Duration::from_secs(20)));
    let before = http_get(admin, "/metrics");
    assert!(
        value(&before, "tern_cache_hit_ratio").is_nan(),
        "no get yet"
    );

    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // 100 sets, then 30 gets of which 20 hit, and one 4-key multi-get (2 hits): one request of kind get.
    let mut sets = Vec::new();
    for i in 0..100 {
        sets.extend_from_slice(format!("set key{i} 0 0 5\r\nvalue\r\n").as_bytes());
    }
    exchange(&mut conn, &sets, b"STORED\r\n");
    let mut gets = Vec::new();
    for i in 0..30 {
        let key = if i < 20 {
            format!("key{i}")
        } else {
            format!("nope{i}")
        };
        gets.extend_from_slice(format!("get {key}\r\n").as_bytes());
    }
    gets.extend_from_slice(b"get key1 key2 gone1 gone2\r\n");
    exchange(
        &mut conn,
        &gets,
        b"END\r\nVALUE key1 0 5\r\nvalue\r\nVALUE key2 0 5\r\nvalue\r\nEND\r\n",
    );
    exchange(
        &mut conn,
        b"delete key0\r\nincr key1 1\r\nversion\r\n",
        b"\r\nVERSION 1.6.18\r\n",
    );
    // Two more clients, held open.
    let _others: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));

    let stats = stats_reply(&mut conn, "");
    let metrics = http_get(admin, "/metrics");
    for (gauge, stat_name) in [
        ("tern_cache_items", "curr_items"),
        ("tern_cache_bytes", "bytes"),
        ("tern_cache_limit_bytes", "limit_maxbytes"),
        ("tern_cache_evictions_total", "evictions"),
    ] {
        assert_eq!(
            value(&metrics, gauge),
            stat(&stats, stat_name),
            "{gauge} vs {stat_name}"
        );
    }
    let slabs = stats_reply(&mut conn, "slabs");
    assert_eq!(
        value(&metrics, "tern_cache_mapped_bytes"),
        stat(&slabs, "total_malloced")
    );
    assert_eq!(value(&metrics, "tern_cache_items"), 99.0);
    assert_eq!(
        value(&metrics, "tern_cache_limit_bytes"),
        8.0 * 1024.0 * 1024.0
    );
    assert_eq!(value(&metrics, "tern_cache_hit_ratio"), 22.0 / 34.0);
    let count = |command: &str| {
        value(
            &metrics,
            &format!("tern_cache_request_duration_ns_count{{command=\"{command}\"}}"),
        )
    };
    assert_eq!(count("set"), 100.0);
    assert_eq!(count("get"), 31.0);
    assert_eq!(count("delete"), 1.0);
    assert_eq!(count("incr_decr"), 1.0);
    // version, and the stats command before the scrape (not `stats slabs`, sent after it).
    assert_eq!(count("other"), 2.0);
    assert_eq!(count("meta"), 0.0);
    assert_eq!(
        value(&metrics, "tern_service_connections_open{service=\"cache\"}"),
        3.0
    );

    // Filling 8 MB with 20 MB of 100 KB values evicts: the counter follows `stats`.
    let big = vec![b'x'; 100_000];
    for i in 0..200 {
        let mut set = format!("set big{i} 0 0 {}\r\n", big.len()).into_bytes();
        set.extend_from_slice(&big);
        set.extend_from_slice(b"\r\n");
        exchange(&mut conn, &set, b"\r\n");
    }
    let stats = stats_reply(&mut conn, "");
    let metrics = http_get(admin, "/metrics");
    assert!(stat(&stats, "evictions") > 0.0, "{stats}");
    assert_eq!(
        value(&metrics, "tern_cache_evictions_total"),
        stat(&stats, "evictions")
    );
    assert_eq!(
        value(&metrics, "tern_cache_items"),
        stat(&stats, "curr_items")
    );
}

/// `reserved_fds` counts the descriptors the process holds for itself (protocol.txt: "misc fds used
/// internally"): its listener and UDP sockets at least, and not its client connections; `hash_is_expanding`
/// is 0 when no shard is growing its index.
#[test]
fn reserved_fds_counts_the_servers_own_descriptors_not_its_clients() {
    let (cache, listen) = common::cache();
    let addr: SocketAddr = listen.parse().unwrap();
    assert!(wait_for_port(addr, Duration::from_secs(30)), "tern cache");
    let mut conn = tern_testkit::connect(addr);
    // The stats once `clients` connections are open (the probe that waited for the port may still count).
    let mut with_clients = |clients: f64| {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let stats = stats_reply(&mut conn, "");
            if stat(&stats, "curr_connections") == clients {
                return stats;
            }
            assert!(std::time::Instant::now() < deadline, "{stats}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let stats = with_clients(1.0);
    let own = stat(&stats, "reserved_fds");
    // A TCP listener and the loop's epoll at the least.
    assert!(own >= 2.0, "{stats}");
    let clients: Vec<_> = (0..5).map(|_| tern_testkit::connect(addr)).collect();
    let stats = with_clients(6.0);
    assert_eq!(stat(&stats, "reserved_fds"), own, "{stats}");
    assert_eq!(stat(&stats, "hash_is_expanding"), 0.0, "{stats}");
    drop((clients, cache));
}
