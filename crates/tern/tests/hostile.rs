//! Clients that misbehave, against the real `tern` binary (tern cache beside memcached 1.6.18, tern ping,
//! tern pacer's gateway and HTTP/OpenRTB fronts), each server on one I/O thread so every connection shares
//! it. For every case: the server's RSS stays within a stated bound (tern cache: memcached's RSS on the same
//! case plus 32 MB), a well-behaved client on the same thread is answered within 10 ms throughout, and the
//! misbehaving client loses nothing once it behaves (every reply read back and checked).
//!
//! On the 10 ms: this VM stalls on its own (bench/hiccup.py measured stalls of several ms with nothing
//! running), so for tern cache the bound is "10 ms, or no worse than memcached's worst in the same case";
//! for ping and the pacer, which have no reference server, the 99th percentile must be under 10 ms and the
//! worst under 50 ms. Closing thousands of connections at once from this process keeps a core busy in the
//! kernel for tens of ms (23 us per socket, for either server), beside the server and the probe on 2 cores,
//! so that case is held to memcached's worst plus 10 ms (docs/benchmarks.md).
//!
//! Cases run one after another in one test per service, and the tests take turns: timing must not compete
//! for the 2 cores.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_bench::process::{free_port, raise_nofile_limit, rss_bytes, spawn_listening, ChildGuard};

const TERN: &str = env!("CARGO_BIN_EXE_tern");
const MB: u64 = 1 << 20;

/// The tests of this file take turns: their timing must not compete for the cores.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn take_turn() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Probes a server every 5 ms with `request` on its own connection until stopped; the waits.
struct Probe {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<Duration>>,
}

impl Probe {
    fn start(addr: SocketAddr, request: &'static [u8], reply_len: usize) -> Probe {
        let stop = Arc::new(AtomicBool::new(false));
        let done = stop.clone();
        let mut conn = connect(addr);
        let thread = std::thread::spawn(move || {
            let mut waits = Vec::new();
            let mut reply = vec![0u8; reply_len];
            while !done.load(Ordering::Relaxed) {
                let t = Instant::now();
                conn.write_all(request).unwrap();
                conn.read_exact(&mut reply).expect("the probe is answered");
                waits.push(t.elapsed());
                std::thread::sleep(Duration::from_millis(5));
            }
            waits
        });
        Probe { stop, thread }
    }

    /// (worst, 99th percentile).
    fn finish(self) -> (Duration, Duration) {
        self.stop.store(true, Ordering::Relaxed);
        let mut waits = self.thread.join().unwrap();
        assert!(!waits.is_empty(), "the probe ran");
        waits.sort();
        (waits[waits.len() - 1], waits[waits.len() * 99 / 100])
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let conn = TcpStream::connect(addr).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    conn.set_nodelay(true).unwrap();
    conn
}

/// What one case measured on one server.
struct Measured {
    peak_rss: u64,
    worst: Duration,
    p99: Duration,
}

/// Runs `hostile` for `seconds` against the server `pid` while probing it; samples its RSS every 10 ms.
fn measure<T>(
    pid: u32,
    probe: (SocketAddr, &'static [u8], usize),
    seconds: f64,
    hostile: impl FnOnce() -> T,
) -> (Measured, T) {
    let probe = Probe::start(probe.0, probe.1, probe.2);
    let held = hostile();
    let mut peak_rss = 0;
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    while Instant::now() < end {
        peak_rss = peak_rss.max(rss_bytes(pid).unwrap());
        std::thread::sleep(Duration::from_millis(10));
    }
    let (worst, p99) = probe.finish();
    (
        Measured {
            peak_rss,
            worst,
            p99,
        },
        held,
    )
}

/// Rounds of each case for the servers without a reference (ping, the pacer): a round's probe is one sample of a
/// VM that stalls at times (see `tern_cache_bounds_misbehaving_clients_as_memcached_does`), so each case runs
/// this many times and the median of each measure is checked.
const ALONE_ROUNDS: usize = 3;

/// [`measure`] `ALONE_ROUNDS` times, `after` given what each round's `hostile` returned (to check and drop
/// it); the median of each measure.
fn measure_rounds<T>(
    pid: u32,
    probe: (SocketAddr, &'static [u8], usize),
    seconds: f64,
    mut hostile: impl FnMut() -> T,
    mut after: impl FnMut(T),
) -> Measured {
    let rounds: Vec<Measured> = (0..ALONE_ROUNDS)
        .map(|_| {
            let (m, held) = measure(pid, probe, seconds, &mut hostile);
            after(held);
            m
        })
        .collect();
    median_of(&rounds)
}

/// Each measure's median over `rounds`, taken on its own (the worst wait, the p99 and the peak RSS need not
/// come from the same round).
fn median_of(rounds: &[Measured]) -> Measured {
    let median = |of: &dyn Fn(&Measured) -> Duration| {
        let mut values: Vec<Duration> = rounds.iter().map(of).collect();
        values.sort();
        values[values.len() / 2]
    };
    let mut rss: Vec<u64> = rounds.iter().map(|m| m.peak_rss).collect();
    rss.sort();
    Measured {
        peak_rss: rss[rss.len() / 2],
        worst: median(&|m| m.worst),
        p99: median(&|m| m.p99),
    }
}

/// 20 connections that each write `requests` (as much as the server takes within 2 s) and never read.
fn never_reading(addr: SocketAddr, requests: &[u8]) -> Vec<TcpStream> {
    (0..20)
        .map(|_| {
            let mut c = connect(addr);
            c.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
            let _ = c.write_all(requests);
            c
        })
        .collect()
}

/// Slowloris: 50 connections that send `start` a byte every 250 ms (the rest of their request comes later).
fn slowloris(addr: SocketAddr, start: &[u8]) -> Vec<TcpStream> {
    let mut conns: Vec<TcpStream> = (0..50).map(|_| connect(addr)).collect();
    for byte in start {
        for c in &mut conns {
            c.write_all(&[*byte]).unwrap();
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    conns
}

fn report(case: &str, server: &str, m: &Measured) {
    println!(
        "{case}: {server}: peak RSS {} MB, probe worst {:.2} ms, p99 {:.2} ms",
        m.peak_rss / MB,
        m.worst.as_secs_f64() * 1e3,
        m.p99.as_secs_f64() * 1e3
    );
}

/// tern cache against memcached on one case: RSS within memcached's plus 32 MB, the probe within 10 ms or
/// memcached's worst (plus `slack`).
fn compare(case: &str, tern: &Measured, memcached: &Measured, slack: Duration) {
    report(case, "memcached", memcached);
    report(case, "tern cache", tern);
    assert!(
        tern.peak_rss <= memcached.peak_rss + 32 * MB,
        "{case}: tern cache peaked at {} MB, memcached at {} MB",
        tern.peak_rss / MB,
        memcached.peak_rss / MB
    );
    let bound = Duration::from_millis(10).max(memcached.worst + slack);
    assert!(
        tern.worst <= bound,
        "{case}: another client waited {:?} (memcached {:?})",
        tern.worst,
        memcached.worst
    );
}

/// Opens `count` connections that send nothing, 100 every 50 ms: holding thousands is the case here; a
/// burst of thousands of connects at once is measured apart (docs/benchmarks.md).
fn hold_idle(addr: SocketAddr, count: usize) -> Vec<TcpStream> {
    let mut conns = Vec::with_capacity(count);
    while conns.len() < count {
        for _ in 0..100.min(count - conns.len()) {
            conns.push(TcpStream::connect(addr).unwrap());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    conns
}

/// Reads exactly `len` bytes.
fn read_len(conn: &mut TcpStream, len: usize) -> Vec<u8> {
    let mut got = vec![0u8; len];
    conn.read_exact(&mut got).expect("every reply byte");
    got
}

struct Cache {
    _child: ChildGuard,
    pid: u32,
    addr: SocketAddr,
}

fn memcached_running() -> bool {
    let found = Command::new("memcached").arg("-h").output().is_ok();
    assert!(
        found || std::env::var_os("CI").is_none(),
        "memcached is not installed (scripts/install-test-deps.sh)"
    );
    found
}

fn start_cache(memcached: bool) -> Cache {
    let port = free_port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let port = port.to_string();
    let flags = [
        "-l",
        "127.0.0.1",
        "-p",
        &port,
        "-U",
        "0",
        "-m",
        "1024",
        "-t",
        "1",
        "-c",
        "20000",
    ];
    let mut cmd = if memcached {
        let mut cmd = Command::new("memcached");
        cmd.args(["-u", "root"]).args(flags);
        cmd
    } else {
        let mut cmd = Command::new(TERN);
        cmd.arg("cache").args(flags);
        cmd
    };
    let child = spawn_listening(&mut cmd, addr).unwrap();
    Cache {
        pid: child.pid(),
        _child: child,
        addr,
    }
}

const VERSION: (&[u8], usize) = (b"version\r\n", b"VERSION 1.6.18\r\n".len());

fn set(conn: &mut TcpStream, key: &str, value: &[u8]) {
    conn.write_all(format!("set {key} 0 0 {}\r\n", value.len()).as_bytes())
        .unwrap();
    conn.write_all(value).unwrap();
    conn.write_all(b"\r\n").unwrap();
    assert_eq!(read_len(conn, 8), b"STORED\r\n");
}

fn value(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| b'a' + ((i + j) % 26) as u8).collect()
}

fn get_reply(keys: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut want = Vec::new();
    for (key, v) in keys {
        want.extend_from_slice(format!("VALUE {key} 0 {}\r\n", v.len()).as_bytes());
        want.extend_from_slice(v);
        want.extend_from_slice(b"\r\n");
    }
    want.extend_from_slice(b"END\r\n");
    want
}

/// Every cache case on one server; what each measured.
fn cache_cases(server: &Cache) -> Vec<(&'static str, Measured)> {
    let probe = (server.addr, VERSION.0, VERSION.1);
    let mut results = Vec::new();
    let mut conn = connect(server.addr);
    let big: Vec<(String, Vec<u8>)> = (0..61)
        .map(|i| (format!("big{i}"), value(i, 1_000_000)))
        .collect();
    for (k, v) in &big {
        set(&mut conn, k, v);
    }
    let small: Vec<(String, Vec<u8>)> = (0..2)
        .map(|i| (format!("small{i}"), value(i, 100_000)))
        .collect();
    for (k, v) in &small {
        set(&mut conn, k, v);
    }

    // 40 connections each ask for all 61 values in one get and do not read.
    let request = format!(
        "get {}\r\n",
        big.iter()
            .map(|(k, _)| k.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let (m, mut silent) = measure(server.pid, probe, 2.0, || {
        (0..40)
            .map(|_| {
                let mut c = connect(server.addr);
                c.write_all(request.as_bytes()).unwrap();
                c
            })
            .collect::<Vec<_>>()
    });
    let want = get_reply(&big);
    assert!(
        read_len(&mut silent[0], want.len()) == want,
        "a silent multi-get's reply, once read"
    );
    drop(silent);
    results.push(("never-reading multi-get of 61 x 1 MB", m));

    // Deep pipelines of gets and meta gets, never read.
    let mut pipeline = Vec::new();
    for _ in 0..300 {
        pipeline.extend_from_slice(b"get small0\r\nmg small1 v\r\n");
    }
    let (m, mut silent) = measure(server.pid, probe, 2.0, || {
        (0..40)
            .map(|_| {
                let mut c = connect(server.addr);
                c.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
                let _ = c.write_all(&pipeline);
                c
            })
            .collect::<Vec<_>>()
    });
    let mut one = get_reply(&small[..1]);
    one.extend_from_slice(format!("VA {}\r\n", small[1].1.len()).as_bytes());
    one.extend_from_slice(&small[1].1);
    one.extend_from_slice(b"\r\n");
    for _ in 0..300 {
        assert!(
            read_len(&mut silent[0], one.len()) == one,
            "a pipelined reply, in order"
        );
    }
    drop(silent);
    results.push(("never-reading pipelines of get and mg", m));

    // Slowloris: 50 connections send a request a byte every 250 ms, then finish it and get their reply.
    let (m, mut slow) = measure(server.pid, probe, 0.1, || {
        slowloris(server.addr, b"get sma")
    });
    let want = get_reply(&small[..1]);
    for c in &mut slow {
        c.write_all(b"ll0\r\n").unwrap();
        assert!(read_len(c, want.len()) == want, "a slow client's reply");
    }
    drop(slow);
    results.push(("slowloris", m));

    // Oversized: a 4 MB line without a newline, and a value over -I; the connection with the value goes on.
    let (m, replies) = measure(server.pid, probe, 0.5, || {
        let mut line = connect(server.addr);
        let _ = line.write_all(&vec![b'x'; 4 << 20]);
        let mut closed = Vec::new();
        let _ = line.read_to_end(&mut closed);
        let mut too_big = connect(server.addr);
        too_big.write_all(b"set huge 0 0 3000000\r\n").unwrap();
        too_big.write_all(&vec![b'h'; 3_000_000]).unwrap();
        too_big.write_all(b"\r\nget small0\r\n").unwrap();
        let mut reply = read_len(
            &mut too_big,
            b"SERVER_ERROR object too large for cache\r\n".len(),
        );
        reply.extend(read_len(&mut too_big, get_reply(&small[..1]).len()));
        (closed, reply)
    });
    let mut want = b"SERVER_ERROR object too large for cache\r\n".to_vec();
    want.extend(get_reply(&small[..1]));
    assert!(
        replies.1 == want,
        "an oversized value is refused and the connection goes on"
    );
    results.push(("oversized line and value", m));

    results
}

/// 3,000 idle connections opened 100 at a time, then all closed at once.
fn idle_cases(server: &Cache) -> Vec<(&'static str, Measured)> {
    let probe = (server.addr, VERSION.0, VERSION.1);
    let (held, idle) = measure(server.pid, probe, 1.0, || hold_idle(server.addr, 3000));
    let (closed, ()) = measure(server.pid, probe, 0.5, || drop(idle));
    vec![
        ("3,000 idle connections", held),
        ("3,000 closed at once", closed),
    ]
}

/// Thousands of connects, 100 at a time, while another client is served on the same (single) I/O thread,
/// then all of them closed at once. Three rounds per server, alternating, and the median round of each case
/// compared: a single worst wait on this 2-core VM swings several-fold between identical runs.
#[test]
fn tern_cache_holds_thousands_of_idle_connections_as_memcached_does() {
    let _turn = take_turn();
    if !memcached_running() {
        return;
    }
    raise_nofile_limit();
    let (mut theirs, mut ours) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        theirs.push(idle_cases(&start_cache(true)));
        ours.push(idle_cases(&start_cache(false)));
    }
    for case in 0..ours[0].len() {
        let (name, t) = median_round(&ours, case);
        let (_, m) = median_round(&theirs, case);
        let slack = if name.contains("closed at once") {
            Duration::from_millis(10)
        } else {
            Duration::ZERO
        };
        compare(name, &t, &m, slack);
    }
}

/// Of several rounds, the median of `case`'s measures (see [`median_of`]).
fn median_round(rounds: &[Vec<(&'static str, Measured)>], case: usize) -> (&'static str, Measured) {
    let of_case: Vec<Measured> = rounds
        .iter()
        .map(|r| {
            let m = &r[case].1;
            Measured {
                peak_rss: m.peak_rss,
                worst: m.worst,
                p99: m.p99,
            }
        })
        .collect();
    (rounds[0][case].0, median_of(&of_case))
}

/// Clients that never read, against memcached on the same cases. Five rounds per server, alternating, and
/// the medians of each case compared: one round's worst wait is one sample, and this VM stalls for tens of
/// milliseconds at times (memcached's worst once measured 23 ms, its p99 0.9 ms). Rounds where the probe's
/// p99 is 12-17 ms for the whole case come and go for both servers (memcached's once 90 ms) while the
/// server's loop is idle (per-turn timing showed no turn over 5 ms in such a round, and its I/O thread used
/// ~10 ms of CPU in the 2 s): the kernel's or the VM's, so a median over five rounds, not three.
#[test]
fn tern_cache_bounds_misbehaving_clients_as_memcached_does() {
    let _turn = take_turn();
    if !memcached_running() {
        return;
    }
    raise_nofile_limit();
    let (mut theirs, mut ours) = (Vec::new(), Vec::new());
    for round in 1..=5 {
        theirs.push(cache_cases(&start_cache(true)));
        ours.push(cache_cases(&start_cache(false)));
        for (server, of) in [("memcached", &theirs), ("tern cache", &ours)] {
            for (case, m) in of.last().expect("pushed") {
                report(&format!("round {round}: {case}"), server, m);
            }
        }
    }
    for case in 0..ours[0].len() {
        let (name, t) = median_round(&ours, case);
        let (_, m) = median_round(&theirs, case);
        compare(name, &t, &m, Duration::ZERO);
        // The worst wait is one sample; a p99 over 10 ms is many: the I/O thread held, not the VM (tern's
        // p99 was 10-21 ms here while writes to the never-reading connections were not capped per turn).
        assert!(
            t.p99 < Duration::from_millis(10),
            "{name}: tern cache's probe p99 {:?} (memcached {:?})",
            t.p99,
            m.p99
        );
    }
}

/// ping and the pacer have no reference server: p99 under 10 ms, worst under 50 ms, RSS under a bound (each the
/// median of `ALONE_ROUNDS` rounds).
fn check_alone(case: &str, server: &str, m: &Measured, rss_bound: u64) {
    report(case, server, m);
    assert!(
        m.peak_rss <= rss_bound,
        "{case}: {server} peaked at {} MB (bound {} MB)",
        m.peak_rss / MB,
        rss_bound / MB
    );
    assert!(m.p99 < Duration::from_millis(10), "{case}: p99 {:?}", m.p99);
    assert!(
        m.worst < Duration::from_millis(50),
        "{case}: worst {:?}",
        m.worst
    );
}

#[test]
fn tern_ping_bounds_misbehaving_clients() {
    let _turn = take_turn();
    raise_nofile_limit();
    let port = free_port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let child = spawn_listening(
        Command::new(TERN).args(["ping", "--listen", &addr.to_string(), "--io-threads", "1"]),
        addr,
    )
    .unwrap();
    let pid = child.pid();
    let probe = (addr, &b"PING\r\n"[..], 6);
    // Idle RSS plus 32 MB: what the bounded output, the buffers of the connections and the allocator's
    // slack may take; the unbounded server took the replies' size (256 MB here).
    let bound = rss_bytes(pid).unwrap() + 32 * MB;

    let m = measure_rounds(
        pid,
        probe,
        2.0,
        || {
            (0..4)
                .map(|_| {
                    let mut c = connect(addr);
                    c.write_all(&b"BIG 67108864\r\n".repeat(4)).unwrap();
                    c
                })
                .collect::<Vec<_>>()
        },
        |mut silent| {
            for _ in 0..4 {
                let reply = read_len(&mut silent[0], 64 << 20 | 2);
                assert!(reply[..64 << 20].iter().all(|&b| b == b'x') && reply.ends_with(b"\r\n"));
            }
        },
    );
    check_alone(
        "never-reading BIG replies (4 x 4 x 64 MiB)",
        "tern ping",
        &m,
        bound,
    );

    let m = measure_rounds(
        pid,
        probe,
        0.1,
        || slowloris(addr, b"ECH"),
        |mut slow| {
            for c in &mut slow {
                c.write_all(b"O slow\r\n").unwrap();
                assert_eq!(read_len(c, 6), b"slow\r\n");
            }
        },
    );
    check_alone("slowloris", "tern ping", &m, bound);

    let m = measure_rounds(
        pid,
        probe,
        0.3,
        || {
            let mut c = connect(addr);
            let _ = c.write_all(&vec![b'x'; 4 << 20]);
            let mut got = Vec::new();
            let _ = c.read_to_end(&mut got);
            got
        },
        |closed| {
            assert!(
                closed.starts_with(b"-ERR"),
                "{:?}",
                String::from_utf8_lossy(&closed)
            )
        },
    );
    check_alone("oversized line", "tern ping", &m, bound);

    let m = measure_rounds(pid, probe, 1.0, || hold_idle(addr, 3000), drop);
    check_alone("3,000 idle connections", "tern ping", &m, bound);
}

#[test]
fn tern_pacer_bounds_misbehaving_clients() {
    use tern_pacer::money::{Cpm, Usd};
    use tern_pacer::proto::{
        encode_bids, CampaignId, Candidate, Device, Geo, ImpKey, RequestHeader,
    };

    let _turn = take_turn();
    raise_nofile_limit();
    let port = free_port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let dir = std::env::temp_dir().join(format!("tern-hostile-pacer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let child = spawn_listening(
        Command::new(TERN)
            .args([
                "pacer",
                "serve",
                "--io-threads",
                "1",
                "--listen",
                &addr.to_string(),
            ])
            .args([
                "--config",
                concat!(env!("CARGO_MANIFEST_DIR"), "/src/default-campaigns.toml"),
            ])
            .arg("--journal-dir")
            .arg(&dir),
        addr,
    )
    .unwrap();
    let pid = child.pid();
    const HEALTH: &[u8] = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n";
    // The probe's reply length: everything the pacer answers to it, read until it has been quiet 200 ms.
    let health_reply = {
        let mut c = connect(addr);
        c.write_all(HEALTH).unwrap();
        c.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut got = Vec::new();
        let mut buf = vec![0u8; 4096];
        loop {
            match c.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if got.is_empty() => panic!("no answer to the probe: {e}"),
                Err(_) => break,
            }
        }
        got.len()
    };
    let probe = (addr, HEALTH, health_reply);
    let mut bound = rss_bytes(pid).unwrap() + 32 * MB;

    // Gateway: BIDS frames of 1,000 requests pipelined on 20 connections that never read.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let headers: Vec<RequestHeader<Usd>> = (0..1000)
        .map(|i| RequestHeader {
            key: ImpKey {
                auction_id: i,
                imp_id: 0,
            },
            floor: Cpm::ZERO,
            deadline_ms: now_ms + 600_000,
            hour: 12,
            device: Device::Desktop,
            geo: Geo(*b"US"),
            site_id: 1,
        })
        .collect();
    let candidates = [Candidate {
        campaign: CampaignId(999_999),
        max_bid: Cpm::from_micros(1_000_000),
    }];
    let mut frames = Vec::new();
    for batch in 0..200u64 {
        encode_bids(
            &mut frames,
            batch,
            headers.iter().map(|h| (h, &candidates[..])),
        );
    }
    // Every DECISIONS frame comes back, in order, with 1,000 decisions each.
    let read_decisions = |conn: &mut TcpStream| {
        let frame_len = 8 + 10 + 13 * 1000;
        for batch in 0..200u64 {
            let frame = read_len(conn, frame_len);
            assert_eq!(&frame[..4], b"TP\x01\x02");
            assert_eq!(u64::from_le_bytes(frame[8..16].try_into().unwrap()), batch);
        }
    };
    // The pacer's own working set grows with the traffic it decides (its ledger, its journal's mapped
    // segments): measured first with a client that reads, so the bound is about what the silent ones add.
    let mut reader = connect(addr);
    let writer = {
        let mut c = reader.try_clone().unwrap();
        let frames = frames.clone();
        std::thread::spawn(move || c.write_all(&frames).unwrap())
    };
    read_decisions(&mut reader);
    writer.join().unwrap();
    bound = bound.max(rss_bytes(pid).unwrap() + 32 * MB);
    let m = measure_rounds(
        pid,
        probe,
        2.0,
        || never_reading(addr, &frames),
        |mut silent| read_decisions(&mut silent[0]),
    );
    check_alone("never-reading BIDS batches", "tern pacer", &m, bound);

    // HTTP: 2,000 pipelined OpenRTB requests on 20 connections that never read, then one reads them all.
    let body = r#"{"id":"a","imp":[{"id":"1","banner":{"w":300,"h":250}}]}"#;
    let request = format!(
        "POST /openrtb2/auction HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let pipeline = request.repeat(2000);
    let m = measure_rounds(
        pid,
        probe,
        2.0,
        || never_reading(addr, pipeline.as_bytes()),
        |mut silent| {
            let mut got = Vec::new();
            let mut buf = vec![0u8; 1 << 16];
            let count = |got: &[u8]| got.windows(9).filter(|w| w == b"HTTP/1.1 ").count();
            while count(&got) < 2000 {
                let n = silent[0].read(&mut buf).expect("every response");
                assert!(n > 0, "closed after {} responses", count(&got));
                got.extend_from_slice(&buf[..n]);
            }
        },
    );
    check_alone("never-reading OpenRTB pipelines", "tern pacer", &m, bound);

    // Slowloris on HTTP, then an oversized header (431) and an oversized body (413).
    let m = measure_rounds(
        pid,
        probe,
        0.1,
        || slowloris(addr, b"GET "),
        |mut slow| {
            for c in &mut slow {
                c.write_all(b"/ HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
                let head = read_len(c, 9);
                assert_eq!(head, b"HTTP/1.1 ");
            }
        },
    );
    check_alone("slowloris (HTTP)", "tern pacer", &m, bound);
    let m = measure_rounds(
        pid,
        probe,
        0.3,
        || {
            let status = |request: Vec<u8>| {
                let mut c = connect(addr);
                let _ = c.write_all(&request);
                let mut head = [0u8; 12];
                c.read_exact(&mut head).expect("a status line");
                String::from_utf8_lossy(&head[9..12]).into_owned()
            };
            let header = format!(
                "GET / HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
                "y".repeat(1 << 20)
            );
            let body =
                "POST /openrtb2/auction HTTP/1.1\r\nHost: t\r\nContent-Length: 100000000\r\n\r\n";
            (
                status(header.into_bytes()),
                status(body.as_bytes().to_vec()),
            )
        },
        |statuses| assert_eq!(statuses, ("431".to_string(), "413".to_string())),
    );
    check_alone("oversized header and body", "tern pacer", &m, bound);

    let m = measure_rounds(pid, probe, 1.0, || hold_idle(addr, 3000), drop);
    check_alone("3,000 idle connections", "tern pacer", &m, bound);
    drop(child);
    let _ = std::fs::remove_dir_all(&dir);
}
