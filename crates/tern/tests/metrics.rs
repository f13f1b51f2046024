//! Per-thread metrics, merged on demand: a real `tern ping` process with its admin endpoint; the totals on
//! /metrics must equal what the test sent.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use tern_bench::process::ChildGuard;

fn start() -> (ChildGuard, SocketAddr, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args([
            "ping",
            "--listen",
            "127.0.0.1:0",
            "--io-threads",
            "2",
            "--admin",
            "127.0.0.1:0",
            "--log",
            "warn",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut addr_of = |what: &str| -> SocketAddr {
        let line = lines.next().unwrap().unwrap();
        assert!(line.contains(what), "{line}");
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    let service = addr_of("listening");
    let admin = addr_of("admin");
    (ChildGuard(child), service, admin)
}

fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text[9..12].parse().unwrap();
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// The value of an unlabelled series in Prometheus text.
fn value(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("{name} not in /metrics"))
        .trim()
        .parse::<f64>()
        .unwrap() as u64
}

#[test]
fn metrics_totals_equal_the_requests_sent() {
    let (_server, addr, admin) = start();
    let mut sent_bytes = 0;
    let mut requests = 0;
    for conn in 0..3 {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let n = 500 + conn * 100;
        let batch = b"PING\r\n".repeat(n);
        s.write_all(&batch).unwrap();
        let mut got = vec![0u8; 6 * n];
        s.read_exact(&mut got).unwrap();
        sent_bytes += batch.len();
        requests += n;
    }
    // Connections are counted when closed; give the loops a moment to see the EOFs.
    std::thread::sleep(Duration::from_millis(200));
    let (status, metrics) = http_get(admin, "/metrics");
    assert_eq!(status, 200);
    assert_eq!(value(&metrics, "tern_requests_total"), requests as u64);
    assert_eq!(value(&metrics, "tern_bytes_read_total"), sent_bytes as u64);
    assert_eq!(
        value(&metrics, "tern_bytes_written_total"),
        (requests * 6) as u64
    );
    assert_eq!(value(&metrics, "tern_connections_accepted_total"), 3);
    assert_eq!(value(&metrics, "tern_connections_open"), 0);
    // Totals only by default: per-thread series next to them would double-count in PromQL sums.
    assert!(!metrics.contains("thread=\""));
    let (_, per_thread) = http_get(admin, "/metrics?per_thread=1");
    assert!(per_thread.contains("thread=\"io-0\"") || per_thread.contains("thread=\"io-1\""));
    let (status, body) = http_get(admin, "/healthz");
    assert_eq!((status, body.trim()), (200, "ok"));
    let (status, stats) = http_get(admin, "/stats");
    assert_eq!(status, 200);
    assert!(
        stats.trim_start().starts_with('{') && stats.contains("tern_requests_total"),
        "{stats}"
    );
    assert_eq!(http_get(admin, "/nope").0, 404);
}
