//! `watch`: the same commands against tern cache and memcached 1.6.18, each watched by a log stream, give
//! the same log lines (times, ids and ports aside); a watcher that never reads loses lines, counted and
//! announced as memcached does, without holding up the cache; `-W` and bad kinds are refused alike.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{ask, have, stat, Memcached, Tern};

/// memcached and tern cache started with the same flags; `None` (the test skips) without memcached.
fn both(flags: &[&str]) -> Option<(Memcached, Tern)> {
    have("memcached").then(|| (Memcached::start(flags), Tern::start(flags)))
}

/// A watcher: sends `watch <kinds>` and checks the acknowledgement.
fn watcher(addr: SocketAddr, kinds: &str) -> BufReader<TcpStream> {
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    conn.write_all(format!("watch {kinds}\r\n").as_bytes())
        .unwrap();
    let mut reader = BufReader::new(conn);
    let mut ok = String::new();
    reader.read_line(&mut ok).unwrap();
    assert_eq!(ok, "OK\r\n", "watch {kinds} on {addr}");
    reader
}

/// The next `count` lines, each checked for memcached's `ts=<s>.<us> gid=<n> ` prefix and returned without
/// it, with the fields that differ by design between runs (client ports) or between the servers (slab
/// class ids: tern has none) masked.
fn next_lines(watcher: &mut BufReader<TcpStream>, count: usize) -> Vec<String> {
    (0..count)
        .map(|_| {
            let mut line = String::new();
            watcher.read_line(&mut line).expect("a log line within 5 s");
            let line = line.strip_suffix('\n').expect("a whole line");
            let mut words = line.splitn(3, ' ');
            let ts = words.next().unwrap().strip_prefix("ts=").expect("ts=");
            let (secs, micros) = ts.split_once('.').expect("ts=<s>.<us>");
            assert!(
                secs.parse::<u64>().is_ok() && micros.parse::<u32>().is_ok_and(|u| u < 1_000_000)
            );
            let gid = words.next().unwrap().strip_prefix("gid=").expect("gid=");
            assert!(gid.parse::<u64>().is_ok(), "{line}");
            words
                .next()
                .unwrap()
                .split(' ')
                .map(|field| match field.split_once('=') {
                    Some(("clsid" | "rport", _)) => {
                        format!("{}=*", field.split('=').next().unwrap())
                    }
                    _ => field.to_owned(),
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// The descriptor a server gives the connection, as the last line of its own `stats conns` names it.
fn own_fd(conn: &mut TcpStream) -> String {
    let stats = tern_testkit::stats_reply(conn, "conns");
    let last = stats
        .lines()
        .rev()
        .find(|l| l.starts_with("STAT "))
        .unwrap();
    last["STAT ".len()..].split(':').next().unwrap().to_owned()
}

/// Fetches, stores, every other command that looks a key up (touch, incr, `ma`, delete, `md`), a
/// connection's life and a protocol error, watched; the lines with the client's descriptor as `cfd=FD`.
fn watched_session(addr: SocketAddr) -> Vec<String> {
    let mut items = watcher(addr, "fetchers mutations");
    let mut conns = watcher(addr, "connevents");
    let mut client = TcpStream::connect(addr).unwrap();
    let fd = own_fd(&mut client);
    let mut lines = next_lines(&mut conns, 1);
    let script: &[&[u8]] = &[
        b"set a,b 5 0 4\r\nabcd\r\n",
        b"get a,b missing\r\n",
        b"add a,b 0 0 1\r\nx\r\n",
        b"cas a,b 0 0 1 1\r\ny\r\n",
        b"append a,b 0 0 2\r\nef\r\n",
        b"mg a,b v\r\n",
        b"ms c 2 T60\r\nhi\r\n",
        b"mg nothing v\r\n",
        b"touch c 100\r\n",
        b"incr c 1\r\n",
        b"set n 0 0 1\r\n5\r\n",
        b"incr n 2\r\n",
        b"ma n\r\n",
        b"delete a,b\r\n",
        b"md nothing\r\n",
    ];
    let mut reply = [0u8; 512];
    for &command in script {
        client.write_all(command).unwrap();
        let _ = client.read(&mut reply).unwrap();
    }
    lines.extend(next_lines(&mut items, 22));
    client.write_all(b"quit\r\n").unwrap();
    let _ = client.read(&mut reply);
    lines.extend(next_lines(&mut conns, 1));
    // memcached closes a connection that sends an HTTP request line: `reason=error`.
    let mut http = TcpStream::connect(addr).unwrap();
    http.write_all(b"GET / HTTP/1.1\r\n").unwrap();
    let _ = http.read(&mut reply);
    let closed = next_lines(&mut conns, 2);
    assert!(closed[0].starts_with("type=conn_new rip=127.0.0.1 rport=* transport=tcp cfd="));
    assert!(closed[1]
        .starts_with("type=conn_close rip=127.0.0.1 rport=* transport=tcp reason=error cfd="));
    lines
        .iter()
        .map(|l| l.replace(&format!("cfd={fd}"), "cfd=FD"))
        .collect()
}

#[test]
fn watched_commands_log_what_memcached_logs() {
    let Some((memcached, tern)) = both(&[]) else {
        return;
    };
    let theirs = watched_session(memcached.addr);
    let ours = watched_session(tern.addr);
    assert_eq!(ours, theirs);
    // The lines themselves, not only their agreement.
    assert_eq!(
        ours[1],
        "type=item_get key=a%2Cb status=not_found clsid=* cfd=FD size=0"
    );
    assert_eq!(
        ours[2],
        "type=item_store key=a%2Cb status=stored cmd=set ttl=0 clsid=* cfd=FD size=4"
    );
    assert!(ours[0].starts_with("type=conn_new rip=127.0.0.1 rport=* transport=tcp cfd=FD"));
    assert_eq!(
        ours.last().unwrap(),
        "type=conn_close rip=127.0.0.1 rport=* transport=tcp reason=normal cfd=FD"
    );
}

/// A watcher that never reads: lines past its buffer (and the socket's) are skipped and counted, the cache
/// answers on, and once the watcher reads again it is told how many it lost before the next line.
#[test]
fn a_watcher_that_never_reads_loses_lines_not_the_cache() {
    let Some((memcached, tern)) = both(&["-o", "watcher_logbuf_size=8"]) else {
        return;
    };
    for addr in [memcached.addr, tern.addr] {
        let mut silent = watcher(addr, "fetchers");
        let mut client = TcpStream::connect(addr).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let key = "k".repeat(200);
        let started = Instant::now();
        let mut reply = [0u8; 64];
        // Each line is about 280 bytes: 30,000 of them are 8 MB, more than the buffer and the socket hold.
        for i in 0..30_000 {
            client
                .write_all(format!("get {key}{i}\r\n").as_bytes())
                .unwrap();
            let n = client.read(&mut reply).unwrap();
            assert_eq!(&reply[..n], b"END\r\n");
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{addr}");
        // memcached's logger thread catches up in its own time, and may drop lines in its workers' buffers
        // before they reach the watcher's (tern has no such buffers: its count stays 0).
        let counts = || {
            [
                "log_watcher_skipped",
                "log_watcher_sent",
                "log_worker_dropped",
            ]
            .map(|name| stat(addr, "", name).unwrap().parse::<u64>().unwrap())
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        let [skipped, sent, dropped] = loop {
            let [skipped, sent, dropped] = counts();
            if sent + skipped + dropped >= 30_000 || Instant::now() > deadline {
                break [skipped, sent, dropped];
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let what = format!("{addr}: skipped {skipped}, sent {sent}, dropped {dropped}");
        assert!(sent + skipped + dropped >= 30_000, "{what}");
        assert!(skipped + dropped > 10_000, "{what}");
        if addr == tern.addr {
            assert_eq!(dropped, 0, "{what}");
            assert!(skipped > 10_000, "{what}");
        }
        // Read what was kept, asking for a line now and then: the skipped count comes before a new line
        // (when the watcher's buffer, not memcached's workers', lost them).
        let mut found = skipped == 0;
        for round in 0..100_000 {
            if found {
                break;
            }
            if round % 100 == 0 {
                client.write_all(b"get after\r\n").unwrap();
                let _ = client.read(&mut reply).unwrap();
            }
            let mut line = String::new();
            silent.read_line(&mut line).unwrap();
            if line.starts_with("skipped=") {
                assert!(line.trim_end()["skipped=".len()..].parse::<u64>().unwrap() > 0);
                found = true;
                break;
            }
        }
        assert!(found, "{addr}: no skipped= line");
        assert_eq!(stat(addr, "", "log_watchers").as_deref(), Some("1"));
        drop(silent);
        let deadline = Instant::now() + Duration::from_secs(5);
        while stat(addr, "", "log_watchers").as_deref() != Some("0") {
            assert!(
                Instant::now() < deadline,
                "{addr}: the closed watcher is still counted"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn refused_watches_are_answered_as_memcached_answers_them() {
    let Some((memcached, tern)) = both(&["-W"]) else {
        return;
    };
    let Some((plain_memcached, plain_tern)) = both(&[]) else {
        return;
    };
    // An accepted watch would never answer the exchange's closing command: only refusals here. (A watch
    // after a get in the same read is accepted by both: memcached writes a get's replies out before going on.)
    let cases = [
        (
            memcached.addr,
            tern.addr,
            &["watch mutations\r\n", "watch bogus\r\n"][..],
        ),
        (
            plain_memcached.addr,
            plain_tern.addr,
            &[
                "watch bogus\r\n",
                "watch fetchers noreply\r\n",
                "set a 0 0 1\r\nb\r\nwatch\r\n",
            ][..],
        ),
    ];
    for (theirs, ours, commands) in cases {
        for command in commands {
            assert_eq!(ask(ours, command), ask(theirs, command), "{command}");
        }
    }
    assert_eq!(
        ask(tern.addr, "watch\r\n"),
        "CLIENT_ERROR watch commands not allowed\r\n"
    );
    assert_eq!(ask(plain_tern.addr, "watch bogus\r\n"), "ERROR\r\n");
    assert_eq!(
        ask(plain_tern.addr, "set a 0 0 1\r\nb\r\nwatch\r\n"),
        "STORED\r\nERROR cannot pipeline other commands before watch\r\n"
    );
}

/// Filling the cache past its memory evicts items: each is logged as memcached logs an eviction, and the key
/// it names is gone.
#[test]
fn evictions_are_logged_as_memcached_logs_them() {
    let Some((memcached, tern)) = both(&["-m", "8"]) else {
        return;
    };
    for addr in [memcached.addr, tern.addr] {
        let mut evictions = watcher(addr, "evictions");
        let mut client = TcpStream::connect(addr).unwrap();
        let value = "v".repeat(10_000);
        // 4,000 values of 10 KB are 40 MB into 8 MB: evictions, whatever the store's unit of eviction.
        let mut batch = String::new();
        for i in 0..4_000 {
            batch.push_str(&format!(
                "set key{i} 0 0 {} noreply\r\n{value}\r\n",
                value.len()
            ));
        }
        client.write_all(batch.as_bytes()).unwrap();
        let line = &next_lines(&mut evictions, 1)[0];
        let fields: Vec<&str> = line.split(' ').collect();
        assert_eq!(fields[0], "type=eviction", "{addr}: {line}");
        let key = fields[1].strip_prefix("key=key").expect("key=");
        assert!(key.parse::<u32>().is_ok(), "{addr}: {line}");
        assert_eq!(
            fields[2..]
                .iter()
                .map(|f| f.split('=').next().unwrap())
                .collect::<Vec<_>>(),
            ["fetch", "ttl", "la", "clsid", "size"],
            "{addr}: {line}"
        );
        assert_eq!(fields[2], "fetch=no", "{addr}: {line}");
        assert_eq!(fields[3], "ttl=-1", "{addr}: {line}");
        assert_eq!(fields[6], "size=10000", "{addr}: {line}");
        assert_eq!(
            ask(addr, &format!("get key{key}\r\n")),
            "END\r\n",
            "{addr}: {line}"
        );
    }
}

/// A connection the idle timeout closes is logged with memcached's reason for it.
#[test]
fn an_idle_timeout_close_is_logged_as_such() {
    let Some((memcached, tern)) = both(&["-o", "idle_timeout=1"]) else {
        return;
    };
    for addr in [memcached.addr, tern.addr] {
        let mut conns = watcher(addr, "connevents");
        conns
            .get_ref()
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let _idle = TcpStream::connect(addr).unwrap();
        let lines = next_lines(&mut conns, 2);
        assert!(lines[0].starts_with("type=conn_new "), "{addr}: {lines:?}");
        assert!(
            lines[1].starts_with(
                "type=conn_close rip=127.0.0.1 rport=* transport=tcp reason=idle_timeout "
            ),
            "{addr}: {lines:?}"
        );
    }
}
