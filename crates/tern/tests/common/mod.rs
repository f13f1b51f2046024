//! Shared by the tests that run tern's processes: starting `tern` (tern recommend's, its features prepared,
//! and HTTP calls to the recommender and its admin endpoint), and memcached or tern cache for the tests that
//! run the same steps on both.

#![allow(dead_code)] // each test crate uses its own part

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tern_testkit::ChildGuard;

pub const TERN: &str = env!("CARGO_BIN_EXE_tern");

/// memcached 1.6.18 or tern cache, for a test that runs the same steps on both.
#[derive(Clone, Copy, Debug)]
pub enum CacheServer {
    Memcached,
    Tern,
}

impl CacheServer {
    /// Its command, before the flags the test gives (memcached refuses to run as root without `-u root`).
    pub fn command(self) -> Command {
        match self {
            CacheServer::Memcached => {
                let mut cmd = Command::new("memcached");
                if tern_testkit::process::is_root() {
                    cmd.args(["-u", "root"]);
                }
                cmd
            }
            CacheServer::Tern => {
                let mut cmd = Command::new(TERN);
                cmd.arg("cache");
                cmd
            }
        }
    }
}
/// The graph every process generates alike.
pub const EDGES: &str = "100000";

/// Starts `tern <args>`, its output to this test's.
pub fn start(args: &[&str]) -> ChildGuard {
    ChildGuard(
        Command::new(TERN)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("tern starts"),
    )
}

pub fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// `tern cache`'s arguments for a small node on 127.0.0.1:`port`: TCP only, one I/O loop.
pub fn cache_args(port: &str) -> [&str; 9] {
    ["cache", "-p", port, "-l", "127.0.0.1", "-U", "0", "-t", "1"]
}

/// A `tern cache` on a free port (not waited for): it and its address.
pub fn cache() -> (ChildGuard, String) {
    let port = tern_testkit::free_port();
    let child = start(&cache_args(&port.to_string()));
    (child, addr(port).to_string())
}

/// A `tern graph` of the generated graph with `flags` on a free port (not waited for): it and its address.
pub fn graph(flags: &[&str]) -> (ChildGuard, String) {
    let listen = addr(tern_testkit::free_port()).to_string();
    let mut args = vec![
        "graph",
        "--synthetic-edges",
        EDGES,
        "--listen",
        &listen,
        "--io-threads",
        "1",
        "--cpu-workers",
        "1",
    ];
    args.extend_from_slice(flags);
    (start(&args), listen)
}

/// `tern recommend prepare`: every account's features onto `caches`, placed by ketama.
pub fn prepare(caches: &[String]) {
    let mut args = vec!["recommend", "prepare", "--synthetic-edges", EDGES];
    for cache in caches {
        args.extend(["--cache", cache.as_str()]);
    }
    let started = Instant::now();
    let prepared = Command::new(TERN)
        .args(&args)
        .output()
        .expect("prepare runs");
    assert!(
        prepared.status.success(),
        "prepare to {caches:?}, after {:?}: {}",
        started.elapsed(),
        String::from_utf8_lossy(&prepared.stderr)
    );
}

/// One HTTP/1.1 GET with `Connection: close`: the status and the body.
pub fn http_text(port: u16, target: &str) -> (u16, String) {
    let mut s = tern_testkit::connect(addr(port));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply)
        .unwrap_or_else(|e| panic!("{target}: {e}"));
    assert!(reply.len() > 12, "{target}: a short reply {reply:?}");
    let status = reply[9..12].parse().unwrap();
    let body = reply.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, body.to_owned())
}

/// The status and the JSON body (`Null` if the body is not JSON).
pub fn http_get(port: u16, target: &str) -> (u16, serde_json::Value) {
    let (status, body) = http_text(port, target);
    (
        status,
        serde_json::from_str(&body).unwrap_or(serde_json::Value::Null),
    )
}

/// A counter's value on an admin endpoint's /metrics (0 if absent).
pub fn counter(admin: u16, sample: &str) -> f64 {
    http_text(admin, "/metrics")
        .1
        .lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}
