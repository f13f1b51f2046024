//! tern cache over real sockets: connection churn under load, clients that vanish mid-request, item size
//! limits, memory full with and without evictions, delayed flush_all, TTL expiry, UDP framing, and the
//! protocol details memcached users depend on. Every server is in-process on 127.0.0.1 port 0.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{ask, exchange, replies_to, stat, Tern};

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn connection_churn_under_load_returns_to_baseline() {
    let tern = Tern::start(&["-c", "4096"]);
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    // Steady load on two long-lived connections while others come and go.
    let load: Vec<_> = (0..2)
        .map(|i| {
            let (stop, served, addr) = (stop.clone(), served.clone(), tern.addr);
            std::thread::spawn(move || {
                let mut conn = common::connect(addr);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let (reply, closed) = exchange(
                        &mut conn,
                        format!("set load{i} 0 0 3\r\n{:03}\r\nget load{i}\r\n", n % 1000)
                            .as_bytes(),
                    );
                    assert!(!closed);
                    assert_eq!(
                        String::from_utf8_lossy(&reply),
                        format!("STORED\r\nVALUE load{i} 0 3\r\n{:03}\r\nEND\r\n", n % 1000)
                    );
                    n += 1;
                    served.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let started = Instant::now();
    let mut churned = 0;
    // 10,000 connections, each doing one request or none, some closing with a request unanswered.
    while churned < 10_000 && started.elapsed() < Duration::from_secs(10) {
        let mut conn = TcpStream::connect(tern.addr).expect("connect during churn");
        match churned % 3 {
            0 => {
                conn.write_all(b"version\r\n").unwrap();
                let mut buf = [0u8; 32];
                let n = conn.read(&mut buf).unwrap();
                assert_eq!(&buf[..n], b"VERSION 1.6.18\r\n");
            }
            1 => conn.write_all(b"get a b c\r\n").unwrap(),
            _ => {}
        }
        churned += 1;
    }
    assert!(churned >= 2_000, "only {churned} connections in 10 s");
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.join().expect("load thread");
    }
    assert!(served.load(Ordering::Relaxed) > 0);
    wait_for(
        "connections back to baseline",
        Duration::from_secs(5),
        || tern.connections() == 0,
    );
    eprintln!("churned {churned} connections in {:?}", started.elapsed());
}

#[test]
fn clients_vanishing_mid_value_or_mid_multiget_lose_nothing_else() {
    let tern = Tern::start(&[]);
    let big = "x".repeat(500_000);
    assert_eq!(
        ask(
            tern.addr,
            &format!("set big 0 0 {}\r\n{big}\r\n", big.len())
        ),
        "STORED\r\n"
    );
    for _ in 0..20 {
        // Half a value, then gone (after the server has read it).
        let mut conn = common::connect(tern.addr);
        conn.write_all(b"set partial 0 0 1000\r\n").unwrap();
        conn.write_all(&[b'p'; 400]).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        drop(conn);
        // A multiget of big values, never read.
        let mut conn = common::connect(tern.addr);
        conn.write_all(b"get big big big big big big big big\r\n")
            .unwrap();
        drop(conn);
    }
    wait_for(
        "the vanished clients' connections to close",
        Duration::from_secs(5),
        || tern.connections() == 0,
    );
    assert_eq!(
        ask(tern.addr, "get partial\r\n"),
        "END\r\n",
        "a half value is not stored"
    );
    assert_eq!(ask(tern.addr, "mg big s\r\n"), "HD s500000\r\n");
}

/// A client that sends part of a request and closes at once (the data and the FIN arrive together) must
/// not leave its connection open: the runtime reads on to the end of the stream when epoll reports the FIN.
#[test]
fn clients_closing_right_after_a_partial_request_are_closed() {
    let tern = Tern::start(&[]);
    let value_start = [&b"set p 0 0 1000\r\n"[..], &[b'p'; 400]].concat();
    for _ in 0..10 {
        for partial in [&b"get a"[..], b"set p 0 0 1000\r\nppp", &value_start] {
            let mut conn = common::connect(tern.addr);
            conn.write_all(partial).unwrap();
            drop(conn);
        }
    }
    wait_for("the connections to close", Duration::from_secs(3), || {
        tern.connections() == 0
    });
}

#[test]
fn item_size_limit_follows_dash_i() {
    let tern = Tern::start(&["-I", "2m", "-m", "64"]);
    // memcached counts key + value + ~50 bytes of header against -I.
    let fits = "v".repeat((2 << 20) - 1000);
    assert_eq!(
        ask(
            tern.addr,
            &format!("set fits 0 0 {}\r\n{fits}\r\n", fits.len())
        ),
        "STORED\r\n"
    );
    assert_eq!(
        ask(tern.addr, "mg fits s\r\n"),
        format!("HD s{}\r\n", fits.len())
    );
    // Too large: refused, the data swallowed (the next command on the connection works), the old item
    // unlinked as memcached does for `set`.
    let too_big = "w".repeat((2 << 20) + 1);
    let mut conn = common::connect(tern.addr);
    let (reply, closed) = exchange(
        &mut conn,
        format!(
            "set fits 0 0 {}\r\n{too_big}\r\nget fits\r\n",
            too_big.len()
        )
        .as_bytes(),
    );
    assert!(!closed);
    assert_eq!(
        String::from_utf8_lossy(&reply),
        "SERVER_ERROR object too large for cache\r\nEND\r\n"
    );
    assert_eq!(
        stat(tern.addr, "settings", "item_size_max").unwrap(),
        "2097152"
    );
}

#[test]
fn memory_full_errors_with_dash_m_and_evicts_without() {
    let value = "m".repeat(100_000);
    let fill = |tern: &Tern| -> (usize, usize) {
        let mut conn = common::connect(tern.addr);
        let (mut stored, mut out_of_memory) = (0, 0);
        for i in 0..400 {
            let (reply, _) = exchange(
                &mut conn,
                format!("set key{i} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes(),
            );
            match String::from_utf8_lossy(&reply).as_ref() {
                "STORED\r\n" => stored += 1,
                "SERVER_ERROR out of memory storing object\r\n" => out_of_memory += 1,
                other => panic!("unexpected reply {other:?}"),
            }
        }
        (stored, out_of_memory)
    };
    // 400 x 100 KB = 40 MB into 16 MB.
    let strict = Tern::start(&["-m", "16", "-M"]);
    let (stored, out_of_memory) = fill(&strict);
    assert!(
        stored > 50 && out_of_memory > 100,
        "{stored} stored, {out_of_memory} refused"
    );
    assert_eq!(stat(strict.addr, "", "evictions").unwrap(), "0");
    assert_eq!(
        ask(strict.addr, "mg key0 s\r\n"),
        "HD s100000\r\n",
        "first items kept"
    );
    let evicting = Tern::start(&["-m", "16"]);
    let (stored, out_of_memory) = fill(&evicting);
    assert_eq!((stored, out_of_memory), (400, 0));
    let evictions: u64 = stat(evicting.addr, "", "evictions")
        .unwrap()
        .parse()
        .unwrap();
    assert!(evictions > 100, "{evictions} evictions");
    assert_eq!(
        ask(evicting.addr, "mg key399 s\r\n"),
        "HD s100000\r\n",
        "newest item kept"
    );
}

#[test]
fn delayed_flush_and_ttl_expire_on_time() {
    let tern = Tern::start(&[]);
    let stored = "STORED\r\nSTORED\r\nSTORED\r\n";
    assert_eq!(
        ask(
            tern.addr,
            "set forever 0 0 1\r\nf\r\nset short 0 1 1\r\ns\r\nset long 0 100 1\r\nl\r\n"
        ),
        stored
    );
    assert_eq!(ask(tern.addr, "flush_all 2\r\n"), "OK\r\n");
    assert_eq!(
        ask(tern.addr, "get forever short long\r\n"),
        "VALUE forever 0 1\r\nf\r\nVALUE short 0 1\r\ns\r\nVALUE long 0 1\r\nl\r\nEND\r\n",
        "nothing flushed or expired yet"
    );
    // memcached's clock ticks in whole seconds: a 1 s TTL ends within 2 s, a 2 s flush delay within 3 s.
    std::thread::sleep(Duration::from_millis(2100));
    assert_eq!(ask(tern.addr, "get short\r\n"), "END\r\n", "TTL expired");
    wait_for("the delayed flush", Duration::from_secs(2), || {
        ask(tern.addr, "get forever long\r\n") == "END\r\n"
    });
    assert_eq!(
        ask(tern.addr, "set after 0 0 1\r\na\r\nget after\r\n"),
        "STORED\r\nVALUE after 0 1\r\na\r\nEND\r\n"
    );
}

/// Without CAS values (`-C`) memcached's `flush_all` also flushes what is stored later in its second (its
/// own t/flush-all.t checks this); with them, only what was stored before it.
#[test]
fn flush_all_without_cas_flushes_the_rest_of_its_second() {
    let tern = Tern::start(&["-C"]);
    let with_cas = Tern::start(&[]);
    let memcached = common::have("memcached").then(|| common::Memcached::start(&["-C"]));
    let flush_then_set = "flush_all 0\r\nset foo 0 0 3\r\nnew\r\nget foo\r\n";
    let lost = "OK\r\nSTORED\r\nEND\r\n";
    let kept = "OK\r\nSTORED\r\nVALUE foo 0 3\r\nnew\r\nEND\r\n";
    // The three commands may straddle a clock tick; 20 tries make that certain to happen at most once.
    let lost_once = |addr| (0..20).any(|_| ask(addr, flush_then_set) == lost);
    assert!(
        lost_once(tern.addr),
        "tern -C kept an item stored after flush_all"
    );
    if let Some(memcached) = &memcached {
        assert!(lost_once(memcached.addr), "memcached -C changed");
    }
    for _ in 0..20 {
        assert_eq!(ask(with_cas.addr, flush_then_set), kept);
    }
    // The next second the store works again, and what the flush's second stored stays flushed.
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(
        ask(tern.addr, "get foo\r\nset bar 0 0 1\r\nb\r\nget bar\r\n"),
        "END\r\nSTORED\r\nVALUE bar 0 1\r\nb\r\nEND\r\n"
    );
}

/// memcached's `-R` budget: the event that reads runs R + 1 requests, each later one R, and each ends in a
/// yield (`conn_yields`); its own t/issue_61.t checks the counter. 22 requests with `-R 3`: 4 + 6 × 3, 7 yields.
#[test]
fn conn_yields_follow_the_requests_per_event_budget() {
    let tern = Tern::start(&["-R", "3"]);
    let memcached = common::have("memcached").then(|| common::Memcached::start(&["-R", "3"]));
    let servers = std::iter::once(("tern", tern.addr))
        .chain(memcached.as_ref().map(|m| ("memcached", m.addr)));
    for (_, addr) in servers {
        assert_eq!(stat(addr, "", "conn_yields").as_deref(), Some("0"));
        assert_eq!(stat(addr, "", "listen_disabled_num").as_deref(), Some("0"));
        let mut conn = common::connect(addr);
        conn.write_all("version\r\n".repeat(22).as_bytes()).unwrap();
        let mut replies = Vec::new();
        let mut buf = [0u8; 4096];
        while replies.windows(7).filter(|w| w == b"VERSION").count() < 22 {
            let n = conn.read(&mut buf).unwrap();
            assert!(
                n > 0,
                "closed after {:?}",
                String::from_utf8_lossy(&replies)
            );
            replies.extend_from_slice(&buf[..n]);
        }
        assert_eq!(
            stat(addr, "", "conn_yields").as_deref(),
            Some("7"),
            "{addr}"
        );
    }
}

/// With `-o idle_timeout`, an idle connection is closed and counted in `idle_kicks`, which `stats` lists only
/// then, as memcached does.
#[test]
fn idle_connections_are_kicked_and_counted() {
    let flags = ["-o", "idle_timeout=1"];
    let tern = Tern::start(&flags);
    let plain = Tern::start(&[]);
    assert_eq!(stat(plain.addr, "", "idle_kicks"), None);
    let memcached = common::have("memcached").then(|| common::Memcached::start(&flags));
    let servers = std::iter::once(("tern", tern.addr))
        .chain(memcached.as_ref().map(|m| ("memcached", m.addr)));
    for (server, addr) in servers {
        let kicks = || -> u64 { stat(addr, "", "idle_kicks").unwrap().parse().unwrap() };
        let before = kicks();
        let mut idle = common::connect(addr);
        idle.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut buf = [0u8; 64];
        // Closed without a word: EOF, or a reset; a read that times out is a failure.
        let closed = match idle.read(&mut buf) {
            Ok(n) => n == 0,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        };
        assert!(closed, "{server}: the idle connection was not closed");
        // Counted once; the count may land a moment after the close on another thread (it failed once
        // under CI's load, the server not named then, and once beside a release build with a one-second
        // wait), so it is read again for up to five seconds.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while kicks() == before && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(kicks(), before + 1, "{server}");
    }
    if memcached.is_some() {
        let plain_memcached = common::Memcached::start(&[]);
        assert_eq!(stat(plain_memcached.addr, "", "idle_kicks"), None);
    }
}

/// The field names of one `stats conns` entry.
fn field_names<'a>(fields: &[(&'a str, &str)]) -> Vec<&'a str> {
    fields.iter().map(|(name, _)| *name).collect()
}

/// `stats conns` lists the server's sockets and each client connection as memcached does: a listener as
/// `FD:addr tcp:...`, `FD:state conn_listening`, `FD:secs_since_last_cmd`; each UDP socket with an
/// `FD:UDP UDP` line first and `udp:` address in `conn_read`; a client as `FD:addr` (the peer),
/// `FD:listen_addr`, `FD:state` (`conn_parse_cmd` for the asking connection, `conn_nread` for one inside a
/// value, `conn_read` for one waiting) and `FD:secs_since_last_cmd`.
#[test]
fn stats_conns_lists_sockets_and_connections_as_memcached_does() {
    let tern = Tern::start_udp(&[]);
    let memcached = common::have("memcached").then(|| common::Memcached::start_with(&[], true));
    let servers = std::iter::once(("tern", tern.addr, tern.udp.unwrap())).chain(
        memcached
            .as_ref()
            .map(|m| ("memcached", m.addr, m.udp.unwrap())),
    );
    for (server, addr, udp) in servers {
        let mut idle = common::connect(addr);
        assert_eq!(
            common::exchange(&mut idle, b"version\r\n").0,
            b"VERSION 1.6.18\r\n"
        );
        let mut sending = common::connect(addr);
        sending.write_all(b"set inside 0 0 6\r\nfoo").unwrap();
        // The server has read the partial value once `stats conns` on another connection says so.
        let mut asking = common::connect(addr);
        let mut reply = String::new();
        wait_for(
            "the partial value to be read",
            Duration::from_secs(5),
            || {
                reply =
                    String::from_utf8(common::exchange(&mut asking, b"stats conns\r\n").0).unwrap();
                reply.contains("conn_nread")
            },
        );
        // Each socket's lines, by descriptor.
        let mut by_fd: std::collections::BTreeMap<u32, Vec<(&str, &str)>> = Default::default();
        for line in reply.lines().filter(|l| *l != "END") {
            let rest = line.strip_prefix("STAT ").expect(line);
            let (fd_field, value) = rest.split_once(' ').expect(line);
            let (fd, field) = fd_field.split_once(':').expect(line);
            by_fd
                .entry(fd.parse().expect(line))
                .or_default()
                .push((field, value));
        }
        let with_addr = |want: String| -> Vec<Vec<(&str, &str)>> {
            by_fd
                .values()
                .filter(|fields| fields.iter().any(|&(f, v)| f == "addr" && v == want))
                .cloned()
                .collect()
        };
        let listeners = with_addr(format!("tcp:{addr}"));
        assert_eq!(listeners.len(), 1, "{server}: {reply}");
        assert_eq!(
            field_names(&listeners[0]),
            ["addr", "state", "secs_since_last_cmd"],
            "{server}: {reply}"
        );
        assert_eq!(listeners[0][1].1, "conn_listening", "{server}: {reply}");
        let udp_sockets = with_addr(format!("udp:{udp}"));
        assert!(!udp_sockets.is_empty(), "{server}: {reply}");
        for fields in &udp_sockets {
            assert_eq!(
                field_names(fields),
                ["UDP", "addr", "state", "secs_since_last_cmd"],
                "{server}: {reply}"
            );
            assert_eq!(
                (fields[0].1, fields[2].1),
                ("UDP", "conn_read"),
                "{server}: {reply}"
            );
        }
        let listen = format!("tcp:{addr}");
        for (conn, state) in [
            (&idle, "conn_read"),
            (&sending, "conn_nread"),
            (&asking, "conn_parse_cmd"),
        ] {
            let peer = conn.local_addr().unwrap();
            let found = with_addr(format!("tcp:{peer}"));
            let fields = found
                .first()
                .unwrap_or_else(|| panic!("{server}: no entry for {peer} in {reply}"));
            assert_eq!(
                field_names(fields),
                ["addr", "listen_addr", "state", "secs_since_last_cmd"],
                "{server}: {reply}"
            );
            assert_eq!(fields[1].1, listen, "{server}: {reply}");
            assert_eq!(fields[2].1, state, "{server}: {reply}");
            let secs: u32 = fields[3].1.parse().expect(&reply);
            assert!(secs <= 5, "{server}: {reply}");
        }
        // The value completed, the connection waits for a command again; a closed one leaves the list.
        sending.write_all(b"bar\r\n").unwrap();
        let mut stored = [0u8; 8];
        sending.read_exact(&mut stored).unwrap();
        assert_eq!(&stored, b"STORED\r\n");
        let sending_peer = sending.local_addr().unwrap();
        let stats = common::ask(addr, "stats conns\r\n");
        assert!(
            !stats.contains("conn_nread"),
            "{server}: {sending_peer} still reading a value: {stats}"
        );
        let gone = idle.local_addr().unwrap();
        drop(idle);
        wait_for(
            "the closed connection to leave stats conns",
            Duration::from_secs(5),
            || !common::ask(addr, "stats conns\r\n").contains(&format!("addr tcp:{gone}\r\n")),
        );
    }
}

#[test]
fn protocol_details_memcached_users_rely_on() {
    let tern = Tern::start(&[]);
    let cases: &[(&str, &str)] = &[
        // decr shorter than the old value: padded in place with spaces.
        (
            "set n 0 0 2\r\n10\r\ndecr n 4\r\nget n\r\n",
            "STORED\r\n6\r\nVALUE n 0 2\r\n6 \r\nEND\r\n",
        ),
        // noreply hides errors too.
        (
            "incr nope x noreply\r\nset s 0 0 1 noreply\r\nab\r\n",
            "ERROR\r\n",
        ),
        // q: mg hides only EN; ms hides HD; ma hides an update, not a creation.
        (
            "mg nope q v\r\nms m 1 q\r\nx\r\nmg m q v\r\nmn\r\n",
            "VA 1\r\nx\r\nMN\r\n",
        ),
        (
            "ma c N0 J5 q\r\nma c q\r\nmg c v\r\n",
            "HD\r\nVA 1\r\n6\r\n",
        ),
        ("refresh_certs\r\n", "Error TLS not enabled\r\n"),
        ("extstore item_size 10\r\n", "OK\r\n"),
        ("me nope\r\n", "EN\r\n"),
        // Key length: 250 is the limit.
        (
            &*Box::leak(format!("get {}\r\n", "k".repeat(251)).into_boxed_str()),
            "CLIENT_ERROR bad command line format\r\n",
        ),
    ];
    for (input, want) in cases {
        let mut conn = common::connect(tern.addr);
        let (reply, _) = exchange(&mut conn, input.as_bytes());
        assert_eq!(String::from_utf8_lossy(&reply), *want, "{input:?}");
    }
    // A line past 2048 bytes without its end closes the connection, as memcached does.
    let mut conn = common::connect(tern.addr);
    let (_, closed) = exchange(&mut conn, &[b'z'; 3000]);
    assert!(closed);
}

/// The names of the stats tern reports (`stats`, `stats settings`) are memcached's own, so dashboards and
/// tools keyed on them keep working; tern adds only `tern_version` and `segment_size`.
#[test]
fn stat_names_are_memcached_names() {
    if !common::have("memcached") {
        return;
    }
    let memcached = common::Memcached::start(&[]);
    let tern = Tern::start(&[]);
    let names = |addr, group: &str| -> Vec<String> {
        ask(addr, &format!("stats{group}\r\n"))
            .lines()
            .filter_map(|l| l.strip_prefix("STAT ")?.split(' ').next().map(String::from))
            .collect()
    };
    for group in ["", " settings"] {
        let known = names(memcached.addr, group);
        let ours = names(tern.addr, group);
        assert!(ours.len() > 20, "stats{group}: {ours:?}");
        let foreign: Vec<&String> = ours
            .iter()
            .filter(|n| {
                !known.contains(n) && !["tern_version", "segment_size"].contains(&n.as_str())
            })
            .collect();
        assert!(
            foreign.is_empty(),
            "stats{group}: not memcached names: {foreign:?}"
        );
    }
}

/// `stats slabs` lists, for every class, the names memcached lists for each of its classes, command counts
/// included, and those counts sum over the classes to `stats`'s totals as memcached's do. The Prometheus
/// memcached_exporter fails a scrape whose classes lack `cmd_set`, `cas_hits` or `cas_badval`.
#[test]
fn stats_slabs_lists_memcached_per_class_names_and_counts() {
    if !common::have("memcached") {
        return;
    }
    let memcached = common::Memcached::start(&[]);
    let tern = Tern::start(&[]);
    let commands = "set a 0 0 1\r\n1\r\nset b 0 0 2\r\nbb\r\nget a b c\r\nincr a 2\r\ndecr a 1\r\n\
                    touch b 60\r\ncas b 0 0 1 1\r\nx\r\ndelete b\r\n";
    // (class, name) -> value, for the `N:name` lines of `stats slabs`.
    let per_class = |addr| -> Vec<(String, String, u64)> {
        ask(addr, "stats slabs\r\n")
            .lines()
            .filter_map(|l| {
                let (key, value) = l.strip_prefix("STAT ")?.split_once(' ')?;
                let (class, name) = key.split_once(':')?;
                Some((class.into(), name.into(), value.parse().ok()?))
            })
            .collect()
    };
    for (server, addr) in [("memcached", memcached.addr), ("tern", tern.addr)] {
        ask(addr, commands);
        let lines = per_class(addr);
        for name in [
            "get_hits",
            "cmd_set",
            "delete_hits",
            "incr_hits",
            "decr_hits",
            "cas_hits",
            "cas_badval",
            "touch_hits",
        ] {
            let sum: u64 = lines
                .iter()
                .filter(|(_, n, _)| n == name)
                .map(|(.., v)| v)
                .sum();
            let total = stat(addr, "", name).unwrap();
            assert_eq!(sum.to_string(), total, "{server}: {name} over the classes");
        }
    }
    let known: Vec<String> = per_class(memcached.addr)
        .into_iter()
        .map(|(_, n, _)| n)
        .collect();
    let ours = per_class(tern.addr);
    let classes: std::collections::BTreeSet<&String> = ours.iter().map(|(c, ..)| c).collect();
    assert!(!classes.is_empty());
    for class in classes {
        let names: Vec<&String> = ours
            .iter()
            .filter(|(c, ..)| c == class)
            .map(|(_, n, _)| n)
            .collect();
        let first_class_of_memcached: Vec<&String> = known.iter().take(names.len()).collect();
        assert_eq!(names, first_class_of_memcached, "stats slabs class {class}");
    }
}

/// memcached replaces an item whose incr/decr result outgrows its value with a new, never-fetched item
/// (`me` says `fetch=no`, `mg h` says `h0`).
#[test]
fn incr_that_outgrows_the_value_makes_a_new_unfetched_item() {
    let tern = Tern::start(&[]);
    assert_eq!(
        ask(
            tern.addr,
            "set x 0 0 1\r\n5\r\nget x\r\nincr x 10\r\nmg x h v\r\n"
        ),
        "STORED\r\nVALUE x 0 1\r\n5\r\nEND\r\n15\r\nVA 2 h0\r\n15\r\n"
    );
}

/// memcached's `safe_strtoull` refuses a value without digits even when it starts with a space.
#[test]
fn incr_on_a_space_and_junk_is_non_numeric() {
    let tern = Tern::start(&[]);
    assert_eq!(
        ask(tern.addr, "set x 0 0 2\r\n x\r\nincr x 1\r\n"),
        "STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
    );
}

/// memcached refuses to increment an empty value before it compares the CAS.
#[test]
fn ma_on_an_empty_value_is_non_numeric_whatever_the_cas() {
    let tern = Tern::start(&[]);
    assert_eq!(
        ask(tern.addr, "set x 0 0 0\r\n\r\nma x C999999999\r\n"),
        "STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
    );
}

/// memcached's UDP frame header: request id, sequence number, datagram count, reserved.
fn udp_request(id: u16, seq: u16, total: u16, payload: &[u8]) -> Vec<u8> {
    let mut d = Vec::new();
    for field in [id, seq, total, 0] {
        d.extend_from_slice(&field.to_be_bytes());
    }
    d.extend_from_slice(payload);
    d
}

/// A datagram as its header fields and its payload, long runs of one byte shortened.
fn describe_datagram(d: &[u8]) -> String {
    let header: Vec<u16> = d[..8.min(d.len())]
        .chunks(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .collect();
    let payload = String::from_utf8_lossy(&d[8.min(d.len())..]).into_owned();
    let mut short = String::new();
    let mut chars = payload.chars().peekable();
    while let Some(c) = chars.next() {
        let mut run = 1;
        while chars.peek() == Some(&c) {
            chars.next();
            run += 1;
        }
        if run > 8 {
            short.push_str(&format!("{c}{{x{run}}}"));
        } else {
            short.extend(std::iter::repeat_n(c, run));
        }
    }
    format!("{header:?} {short:?}")
}

/// Sends one request datagram and collects the reply datagrams (with their source) until a quiet spell.
fn udp_exchange(client: &UdpSocket, server: SocketAddr, datagram: &[u8]) -> Vec<Vec<u8>> {
    client.send_to(datagram, server).unwrap();
    let mut datagrams = Vec::new();
    let mut buf = [0u8; 2048];
    while let Ok((n, from)) = client.recv_from(&mut buf) {
        assert_eq!(from, server, "replies come from the server's own socket");
        datagrams.push(buf[..n].to_vec());
    }
    datagrams
}

#[test]
fn udp_frames_replies_per_unit_from_the_loop_socket() {
    let tern = Tern::start_udp(&[]);
    let memcached = common::have("memcached").then(|| common::Memcached::start_with(&[], true));
    let big = "b".repeat(3000);
    let items = format!("set big 0 0 3000\r\n{big}\r\nset small 0 0 1\r\ns\r\n");
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let requests: [&[u8]; 6] = [
        &udp_request(7, 0, 1, b"get small big nope\r\n"),
        &udp_request(8, 0, 1, b"version\r\nget nope\r\nset u 0 0 1\r\nu\r\n"),
        // Not datagram 1 of 1, or nothing after the header: dropped.
        &udp_request(9, 0, 2, b"get small\r\n"),
        &udp_request(10, 0, 1, b""),
        &udp_request(11, 3, 1, b"get big\r\n"),
        // An HTTP request line: memcached drops the replies a get has not sent yet, and the rest.
        &udp_request(
            12,
            0,
            1,
            b"get small\r\nversion\r\nGET / HTTP/1.0\r\nversion\r\n",
        ),
    ];
    let servers = [
        Some((tern.addr, tern.udp.unwrap())),
        memcached.as_ref().map(|m| (m.addr, m.udp.unwrap())),
    ];
    let mut answers = Vec::new();
    for (tcp, udp) in servers.into_iter().flatten() {
        assert_eq!(ask(tcp, &items), "STORED\r\nSTORED\r\n");
        answers.push(
            requests
                .iter()
                .map(|r| udp_exchange(&client, udp, r))
                .collect::<Vec<_>>(),
        );
    }
    let tern_answers = &answers[0];
    if let Some(memcached_answers) = answers.get(1) {
        let describe = |answers: &Vec<Vec<Vec<u8>>>| -> Vec<Vec<String>> {
            answers
                .iter()
                .map(|datagrams| datagrams.iter().map(|d| describe_datagram(d)).collect())
                .collect()
        };
        assert_eq!(
            describe(tern_answers),
            describe(memcached_answers),
            "datagrams differ from memcached's"
        );
        assert_eq!(tern_answers, memcached_answers);
    }
    // Each hit is its own unit (END joins the last, here an empty miss), numbered from 0 within the unit.
    let get = &tern_answers[0];
    let headers: Vec<[u16; 4]> = get
        .iter()
        .map(|d| {
            assert!(d.len() <= 1400, "datagram of {} bytes", d.len());
            std::array::from_fn(|i| u16::from_be_bytes([d[2 * i], d[2 * i + 1]]))
        })
        .collect();
    assert_eq!(
        headers,
        vec![
            [7, 0, 1, 0],
            [7, 0, 3, 0],
            [7, 1, 3, 0],
            [7, 2, 3, 0],
            [7, 0, 1, 0]
        ]
    );
    let payload: Vec<u8> = get.iter().flat_map(|d| d[8..].to_vec()).collect();
    assert_eq!(
        String::from_utf8_lossy(&payload),
        format!("VALUE small 0 1\r\ns\r\nVALUE big 0 3000\r\n{big}\r\nEND\r\n")
    );
    assert_eq!(tern_answers[1].len(), 3, "one unit per command");
    assert_eq!(
        &tern_answers[1][0][..],
        &udp_request(8, 0, 1, b"VERSION 1.6.18\r\n")[..]
    );
    assert!(
        tern_answers[2].is_empty() && tern_answers[3].is_empty(),
        "dropped requests answered"
    );
    assert_eq!(
        &tern_answers[5][..],
        [udp_request(12, 0, 1, b"VALUE small 0 1\r\ns\r\nEND\r\n")]
    );
    assert_eq!(
        tern_answers[4].len(),
        3,
        "the sequence number of a request is ignored"
    );
}

#[test]
fn every_dash_l_interface_is_served_over_tcp_and_udp() {
    let udp_port = common::free_udp_port().to_string();
    let server = common::start_exact(&[
        "-p",
        "1",
        "-U",
        &udp_port,
        "-l",
        "127.0.0.1:0,127.0.0.2:0",
        "-t",
        "2",
    ]);
    let tcp = server.local_addrs().to_vec();
    let ips: Vec<String> = tcp.iter().map(|a| a.ip().to_string()).collect();
    assert_eq!(ips, ["127.0.0.1", "127.0.0.2"]);
    // One store behind every interface.
    let mut first = common::connect(tcp[0]);
    let mut second = common::connect(tcp[1]);
    assert_eq!(
        common::exchange(&mut first, b"set k 0 0 1\r\nv\r\n").0,
        b"STORED\r\n"
    );
    assert_eq!(
        common::exchange(&mut second, b"get k\r\n").0,
        b"VALUE k 0 1\r\nv\r\nEND\r\n"
    );
    let udp = server.udp_addrs().to_vec();
    assert_eq!(udp.len(), 2);
    for (i, addr) in udp.iter().enumerate() {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut request = vec![0, i as u8, 0, 0, 0, 1, 0, 0];
        request.extend_from_slice(b"get k\r\n");
        sock.send_to(&request, addr).unwrap();
        let mut buf = [0u8; 1500];
        let (n, _) = sock
            .recv_from(&mut buf)
            .expect("a reply on every UDP interface");
        assert_eq!(&buf[8..n], b"VALUE k 0 1\r\nv\r\nEND\r\n", "{addr}");
    }
    server.shutdown();
    server.join();
}

/// Per-prefix counts from several connections (spread over the I/O loops) add up in one dump.
#[test]
fn stats_detail_merges_every_loop() {
    let tern = Tern::start(&["-D", ":"]);
    let conns: Vec<_> = (0..16).map(|_| common::connect(tern.addr)).collect();
    for (i, mut conn) in conns.into_iter().enumerate() {
        let (reply, _) = exchange(
            &mut conn,
            format!("set p:{i} 0 0 1\r\nx\r\nget p:{i} p:none q:{i}\r\ndelete q:{i}\r\n")
                .as_bytes(),
        );
        assert!(reply.starts_with(b"STORED\r\n"));
    }
    assert_eq!(
        ask(tern.addr, "stats detail dump\r\n"),
        // "p" hashes to bucket 154 and "q" to 232 of memcached's 256.
        "PREFIX p get 32 hit 16 set 16 del 0\r\nPREFIX q get 16 hit 0 set 0 del 16\r\nEND\r\n"
    );
}

/// With `-vv`, a UDP command's lines are numbered by the descriptor of the UDP socket it came on, as memcached
/// numbers them (tern runs a UDP socket per I/O loop; memcached one shared by its threads).
#[test]
fn verbose_log_numbers_udp_commands_by_their_socket() {
    let dir = std::env::temp_dir().join(format!("tern-vv-udp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("tern.log");
    let log_path = log.clone();
    let tern = Tern::start_tweaked(&["-vv"], true, move |s| s.verbose_log_file = Some(log_path));
    let server = tern.udp.unwrap();
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let replies = udp_exchange(
        &client,
        server,
        &udp_request(3, 0, 1, b"get vv-udp-key\r\n"),
    );
    assert_eq!(replies.len(), 1);
    let mut line = String::new();
    wait_for("the UDP command's -vv line", Duration::from_secs(5), || {
        let text = String::from_utf8_lossy(&std::fs::read(&log).unwrap_or_default()).into_owned();
        line = text
            .lines()
            .find(|l| l.ends_with(" get vv-udp-key"))
            .unwrap_or_default()
            .to_owned();
        !line.is_empty()
    });
    // `<NN get vv-udp-key`: NN is a descriptor of this process (the server runs in it) for a socket
    // bound to the server's UDP port.
    let fd = &line[1..line.find(' ').unwrap()];
    let target = std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap();
    let inode = target
        .to_str()
        .and_then(|t| t.strip_prefix("socket:["))
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or_else(|| panic!("{line}: fd {fd} is {target:?}, not a socket"));
    let port = format!(":{:04X} ", server.port());
    let udp_table = std::fs::read_to_string("/proc/net/udp").unwrap();
    assert!(
        udp_table.lines().any(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            fields.len() > 9 && format!("{} ", fields[1]).ends_with(&port) && fields[9] == inode
        }),
        "{line}: socket {inode} is not bound to UDP port {}",
        server.port()
    );
    drop(tern);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Lines of a `-vv` log with the connection number replaced by `NN`, leaving out the lines tern does not
/// write (startup, connection open/close: docs/cache-compat.md).
fn vv_lines(log: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(log)
        .lines()
        .filter(|l| {
            !(l.starts_with("slab class")
                || l.ends_with("server listening (ascii)")
                || l.ends_with("new ascii client connection.")
                || l.ends_with("connection closed."))
        })
        .map(|l| {
            if let Some(cas) = l.strip_prefix("CAS:  failure: ") {
                // CAS values differ between the servers by design.
                return format!(
                    "CAS:  failure: {}",
                    cas.replace(|c: char| c.is_ascii_digit(), "")
                );
            }
            if !(l.starts_with('<') || l.starts_with('>')) {
                return l.to_string();
            }
            let digits = l[1..].chars().take_while(char::is_ascii_digit).count();
            format!("{}NN{}", &l[..1], &l[1 + digits..])
        })
        .collect()
}

/// Both servers' `-vv` logs as `read` gives them, once `complete` says memcached's is whole, and tern's (or
/// what it has after five seconds, for the comparison to show).
fn read_both_logs(
    memcached_log: &std::path::Path,
    tern_log: &std::path::Path,
    read: impl Fn(&std::path::Path) -> Vec<String>,
    complete: impl Fn(&[String]) -> bool,
) -> (Vec<String>, Vec<String>) {
    let mut expected = Vec::new();
    wait_for("memcached's -vv lines", Duration::from_secs(5), || {
        expected = read(memcached_log);
        complete(&expected)
    });
    let mut actual = Vec::new();
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for("tern's -vv lines", Duration::from_secs(5), || {
            actual = read(tern_log);
            complete(&actual)
        })
    }));
    (expected, actual)
}

/// A binary request: header (magic, opcode, key length, extras length, opaque 0xdeadbeef, `cas`), body.
fn binary_request(opcode: u8, key: &[u8], extras: &[u8], value: &[u8], cas: u64) -> Vec<u8> {
    let body_len = (extras.len() + key.len() + value.len()) as u32;
    let mut packet = vec![0x80, opcode];
    packet.extend_from_slice(&(key.len() as u16).to_be_bytes());
    packet.extend_from_slice(&[extras.len() as u8, 0, 0, 0]);
    packet.extend_from_slice(&body_len.to_be_bytes());
    packet.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    packet.extend_from_slice(&cas.to_be_bytes());
    for part in [extras, key, value] {
        packet.extend_from_slice(part);
    }
    packet
}

/// `-vv` with the binary protocol writes memcached's lines: each request's header bytes, what its command
/// prints (`GET`/`TOUCH` and the key, the storage commands' value length, `Deleting`, `incr`, `STATS`), an
/// error's text, and each response's header bytes (not STAT's packets, as memcached).
#[test]
fn binary_verbose_log_matches_memcached() {
    if !common::have("memcached") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("tern-vv-binary-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (memcached_log, tern_log) = (dir.join("memcached.log"), dir.join("tern.log"));
    let flags = |f: u32, e: u32| [f.to_be_bytes(), e.to_be_bytes()].concat();
    let arith = |delta: u64, initial: u64, exptime: u32| {
        [
            &delta.to_be_bytes()[..],
            &initial.to_be_bytes(),
            &exptime.to_be_bytes(),
        ]
        .concat()
    };
    let script: Vec<Vec<u8>> = vec![
        binary_request(0x01, b"k1", &flags(5, 0), b"hello", 0),
        binary_request(0x00, b"k1", b"", b"", 0),
        binary_request(0x00, b"nope", b"", b"", 0),
        binary_request(0x0c, b"nope", b"", b"", 0),
        binary_request(0x09, b"nope", b"", b"", 0),
        binary_request(0x0e, b"k1", b"", b"++", 0),
        binary_request(0x02, b"k1", &flags(0, 0), b"x", 0),
        binary_request(0x03, b"nope", &flags(0, 0), b"x", 0),
        binary_request(0x04, b"k1", b"", b"", 0),
        binary_request(0x05, b"n", &arith(3, 10, 0), b"", 0),
        binary_request(0x06, b"n", &arith(1, 0, u32::MAX), b"", 0),
        binary_request(0x1c, b"n", &100u32.to_be_bytes(), b"", 0),
        binary_request(0x1d, b"n", &100u32.to_be_bytes(), b"", 0),
        binary_request(0x10, b"", b"", b"", 0),
        binary_request(0x10, b"nothing", b"", b"", 0),
        binary_request(0x0b, b"", b"", b"", 0),
        binary_request(0x42, b"", b"", b"", 0),
        binary_request(0x0a, b"", b"", b"", 0),
    ];
    let memcached =
        common::Memcached::start_logging(&["-vv", "-B", "binary"], false, Some(&memcached_log));
    let tern_log_path = tern_log.clone();
    let tern = Tern::start_tweaked(&["-vv", "-B", "binary"], false, move |s| {
        s.verbose_log_file = Some(tern_log_path)
    });
    for addr in [memcached.addr, tern.addr] {
        let mut conn = common::connect(addr);
        for request in &script {
            conn.write_all(request).unwrap();
            // One request at a time: the servers' lines then come in the same order.
            std::thread::sleep(Duration::from_millis(20));
        }
        conn.write_all(&binary_request(0x07, b"", b"", b"", 0))
            .unwrap();
        let mut rest = Vec::new();
        let _ = conn.read_to_end(&mut rest);
    }
    // The log lines with the connection number left out and each response's CAS bytes (its header's last
    // two lines) blanked: CAS values differ between the servers by design.
    let read = |path: &std::path::Path| -> Vec<String> {
        let mut since_response = usize::MAX;
        String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default())
            .lines()
            .filter(|l| {
                l.starts_with('<')
                    || l.starts_with('>')
                    || l.starts_with("incr ")
                    || l.starts_with("Deleting ")
                    || l.starts_with("Value len")
            })
            // memcached's startup line and the connection lines (left out as in the text log's test).
            .filter(|l| {
                !(l.ends_with("server listening (binary)")
                    || l.ends_with("client connection.")
                    || l.ends_with("connection closed."))
            })
            .map(|l| {
                let line = match l.strip_prefix(['<', '>']) {
                    Some(rest) => {
                        let digits = rest.chars().take_while(char::is_ascii_digit).count();
                        format!("{}NN{}", &l[..1], &rest[digits..])
                    }
                    None => l.to_owned(),
                };
                since_response = if line.ends_with("Writing bin response:") {
                    0
                } else {
                    since_response.saturating_add(1)
                };
                if since_response == 5 || since_response == 6 {
                    ">NN   (cas)".to_owned()
                } else {
                    line
                }
            })
            .collect()
    };
    // Complete once QUIT's response (opcode 0x07) is there.
    let complete = |lines: &[String]| lines.iter().any(|l| l == ">NN   0x81 0x07 0x00 0x00");
    let (expected, actual) = read_both_logs(&memcached_log, &tern_log, read, complete);
    assert!(expected.len() > 200, "{expected:#?}");
    assert_eq!(actual.join("\n"), expected.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `-vv` writes memcached's command log: `<NN command`, `>NN reply` for the replies memcached logs,
/// `NOREPLY`, `sending key` and `END` for gets.
#[test]
fn verbose_log_matches_memcached() {
    if !common::have("memcached") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("tern-vv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (memcached_log, tern_log) = (dir.join("memcached.log"), dir.join("tern.log"));
    let script: Vec<Vec<u8>> = [
        "get foo\r\n",
        "set foo 0 0 3\r\nbar\r\n",
        "get foo nope foo\r\n",
        "gets nope\r\n",
        "add foo 0 0 1\r\nx\r\n",
        "replace nope 0 0 1\r\nx\r\n",
        "append foo 0 0 1\r\nx\r\n",
        "cas foo 0 0 1 1\r\nx\r\n",
        "ms foo 1 C1\r\nx\r\n",
        "set quiet 0 0 1 noreply\r\nq\r\n",
        "set bad 0 0 1\r\nxyz\r\n",
        "delete quiet\r\n",
        "delete quiet noreply\r\n",
        "set n 0 0 1\r\n5\r\n",
        "incr n 3\r\n",
        "decr n 100 noreply\r\n",
        "incr foo 1\r\n",
        "touch n 100\r\n",
        "gat 10 n nope\r\n",
        "mg n v k t\r\n",
        "mg nope v\r\n",
        "ms m 2 T10\r\nab\r\n",
        "ms m 2 Z\r\nab\r\n",
        "md m q\r\n",
        "ma c N0 J5\r\n",
        "ma foo\r\n",
        "mn\r\n",
        "me n\r\n",
        "me nope\r\n",
        "version\r\n",
        "verbosity 2\r\n",
        "bogus\r\n",
        "incr n x noreply\r\n",
        "touch n x noreply\r\n",
        "delete n x noreply\r\n",
        "flush_all x noreply\r\n",
        "stats detail on\r\n",
        "stats detail dump\r\n",
        "stats\r\n",
        "stats nothing\r\n",
        "flush_all\r\n",
    ]
    .into_iter()
    .map(|s| s.as_bytes().to_vec())
    .chain(std::iter::once(
        format!("get n {}\r\n", "k".repeat(251)).into_bytes(),
    ))
    .collect();
    let memcached = common::Memcached::start_logging(&["-vv"], false, Some(&memcached_log));
    let tern_log_path = tern_log.clone();
    let tern = Tern::start_tweaked(&["-vv", "-B", "ascii"], false, move |s| {
        s.verbose_log_file = Some(tern_log_path)
    });
    // (The replies themselves are compared elsewhere; `stats` and `me` differ in numbers.)
    replies_to(memcached.addr, &script);
    replies_to(tern.addr, &script);
    let read = |path: &std::path::Path| vv_lines(&std::fs::read(path).unwrap_or_default());
    // Every exchange ends with the sentinel command: all the lines are there once it is, as many times.
    let complete = |lines: &[String]| {
        lines
            .iter()
            .filter(|l| l.starts_with("<NN mg tern-test-sentinel"))
            .count()
            == script.len()
    };
    let (expected, actual) = read_both_logs(&memcached_log, &tern_log, read, complete);
    assert!(expected.len() > 60, "{expected:#?}");
    assert_eq!(actual.join("\n"), expected.join("\n"));
    // The connection lines (left out above: the readiness probes' connections come and go at their own
    // times): every connection opened is logged closed, as memcached logs them, and every command line is
    // numbered like a connection that was opened (memcached prints the socket's descriptor).
    let raw = |path: &std::path::Path| {
        String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned()
    };
    let count = |log: &str, text: &str| log.lines().filter(|l| l.ends_with(text)).count();
    for (who, path) in [("memcached", &memcached_log), ("tern", &tern_log)] {
        wait_for(
            &format!("{who} to log every close"),
            Duration::from_secs(5),
            || {
                let log = raw(path);
                let opened = count(&log, " new ascii client connection.");
                opened >= 1 && count(&log, " connection closed.") == opened
            },
        );
        let log = raw(path);
        let number = |l: &str| l[1..].split(' ').next().unwrap().to_owned();
        let opened: std::collections::BTreeSet<String> = log
            .lines()
            .filter(|l| l.ends_with(" new ascii client connection."))
            .map(number)
            .collect();
        let commands: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(" mg tern-test-sentinel"))
            .collect();
        assert_eq!(commands.len(), script.len(), "{who}");
        for line in commands {
            assert!(
                opened.contains(&number(line)),
                "{who}: {line} is not on an opened connection: {opened:?}"
            );
        }
    }
    drop(tern);
    let _ = std::fs::remove_dir_all(&dir);
}
