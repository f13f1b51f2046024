//! The admin endpoint over real TCP connections on 127.0.0.1 ephemeral ports.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{http, http_raw, parse_prometheus, sample};
use serde_json::json;
use tern_metrics::admin::PROMETHEUS_CONTENT_TYPE;
use tern_metrics::{AdminLimits, AdminServer, Counter, Histogram};

fn localhost() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

static SERVED: Counter = Counter::new("a_served_total", "Requests served");
static SERVICE_TIME: Histogram = Histogram::new("a_service_time_ns", "Service time");

#[test]
fn metrics_endpoint_serves_valid_prometheus_text_with_totals() {
    let handle = AdminServer::builder(localhost()).start().unwrap();
    assert_ne!(
        handle.local_addr().port(),
        0,
        "port 0 resolves to a real port"
    );
    let workers: Vec<_> = (0..3)
        .map(|i| {
            thread::spawn(move || {
                tern_metrics::set_thread_name(&format!("a-io-{i}"));
                for v in 1..=1000 {
                    SERVED.incr();
                    SERVICE_TIME.record(v);
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }

    let response = http(handle.local_addr(), "GET", "/metrics");
    assert_eq!(response.status, 200);
    assert_eq!(
        response.header("content-type"),
        Some(PROMETHEUS_CONTENT_TYPE)
    );
    let samples =
        parse_prometheus(&response.body).unwrap_or_else(|e| panic!("{e}\n{}", response.body));
    assert_eq!(sample(&samples, "a_served_total", &[]), Some(3000.0));
    assert_eq!(
        sample(&samples, "a_service_time_ns_count", &[]),
        Some(3000.0)
    );
    assert_eq!(
        sample(&samples, "a_service_time_ns_sum", &[]),
        Some(3.0 * 500_500.0)
    );
    for le in ["1000", "+Inf"] {
        assert_eq!(
            sample(&samples, "a_service_time_ns_bucket", &[("le", le)]),
            Some(3000.0)
        );
    }
    assert_eq!(
        sample(&samples, "a_served_total", &[("thread", "a-io-1")]),
        None,
        "per-thread is opt-in"
    );

    let response = http(handle.local_addr(), "GET", "/metrics?per_thread=1");
    let samples =
        parse_prometheus(&response.body).unwrap_or_else(|e| panic!("{e}\n{}", response.body));
    assert_eq!(
        sample(&samples, "a_served_total", &[("thread", "a-io-1")]),
        Some(1000.0)
    );
    assert_eq!(
        sample(&samples, "a_service_time_ns_count", &[("thread", "a-io-2")]),
        Some(1000.0)
    );
    handle.shutdown().unwrap();
}

#[test]
fn index_lists_every_endpoint_as_html_or_plain_text() {
    let handle = AdminServer::builder(localhost())
        .json_route("/campaigns", "test route", Arc::new(|| json!([])))
        .json_prefix_route("/campaigns/", "test items", Arc::new(|_| None))
        .stats_extra(Arc::new(|| json!({})))
        .start()
        .unwrap();
    let addr = handle.local_addr();
    let paths = [
        "/metrics",
        "/stats",
        "/healthz",
        "/dashboard",
        "/campaigns",
        "/campaigns/*",
    ];

    // A browser, or a client that states no preference, gets HTML with a link to each page.
    let response = http(addr, "GET", "/");
    assert_eq!(response.status, 200);
    assert_eq!(
        response.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(response.header("vary"), Some("accept"));
    assert!(
        response.body.starts_with("<!DOCTYPE html>"),
        "{}",
        response.body
    );
    for linked in ["metrics", "stats", "healthz", "dashboard", "campaigns"] {
        let link = format!("<a href=\"{linked}\"><code>/{linked}</code></a>: ");
        assert!(response.body.contains(&link), "{link}\n{}", response.body);
    }
    assert!(response.body.contains("<code>/campaigns/*</code>: "));

    // One that asks for plain text gets a line per endpoint: its path, then what it is.
    let request =
        "GET / HTTP/1.1\r\nHost: localhost\r\nAccept: text/plain\r\nConnection: close\r\n\r\n";
    let response = http_raw(addr, request.as_bytes()).unwrap();
    assert_eq!(response.status, 200);
    assert_eq!(
        response.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    let lines: Vec<&str> = response.body.lines().collect();
    assert_eq!(lines.len(), paths.len(), "{}", response.body);
    for (line, path) in lines.iter().zip(paths) {
        let description = line
            .strip_prefix(path)
            .and_then(|rest| rest.strip_prefix("  "))
            .unwrap_or_else(|| panic!("{line:?} does not list {path}"));
        assert!(!description.trim().is_empty(), "{line:?}");
    }
    assert!(lines[1].contains("\"service\""), "{}", lines[1]);
    // A service's route is listed with what it said of it.
    assert_eq!(lines[4], "/campaigns    test route", "{}", response.body);
    assert_eq!(
        lines[5], "/campaigns/*  test items (404 if it knows no such thing)",
        "{}",
        response.body
    );

    // Each listed page is served.
    for path in ["/metrics", "/stats", "/healthz", "/dashboard", "/campaigns"] {
        assert_eq!(http(addr, "GET", path).status, 200, "{path}");
    }
    assert_eq!(http(addr, "POST", "/").status, 405);
    handle.shutdown().unwrap();

    let over_index = AdminServer::builder(localhost())
        .json_route("/", "test route", Arc::new(|| json!(null)))
        .start();
    assert!(over_index
        .err()
        .unwrap()
        .to_string()
        .contains("already served"));
}

#[test]
fn healthz_flips_to_503_when_draining() {
    let handle = AdminServer::localhost(0).start().unwrap();
    assert!(handle.local_addr().ip().is_loopback());
    let response = http(handle.local_addr(), "GET", "/healthz");
    assert_eq!((response.status, response.body.as_str()), (200, "ok\n"));
    handle.set_draining();
    let response = http(handle.local_addr(), "GET", "/healthz");
    assert_eq!(
        (response.status, response.body.as_str()),
        (503, "draining\n")
    );
    handle.shutdown().unwrap();
}

#[test]
fn stats_is_json_with_metrics_and_service_extra() {
    static STATS_HITS: Counter = Counter::new("a_stats_hits_total", "hits");
    STATS_HITS.add(9);
    let handle = AdminServer::builder(localhost())
        .stats_extra(Arc::new(|| json!({ "version": "1.2.3", "items": 17 })))
        .start()
        .unwrap();
    let response = http(handle.local_addr(), "GET", "/stats");
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-type"), Some("application/json"));
    let stats: serde_json::Value = serde_json::from_str(&response.body).unwrap();
    assert_eq!(stats["metrics"]["a_stats_hits_total"]["total"], 9);
    assert_eq!(stats["metrics"]["a_stats_hits_total"]["type"], "counter");
    assert_eq!(stats["service"], json!({ "version": "1.2.3", "items": 17 }));
    handle.shutdown().unwrap();
}

#[test]
fn extra_json_route_is_evaluated_per_request() {
    let calls = Arc::new(AtomicU64::new(0));
    let counter = calls.clone();
    let handle = AdminServer::builder(localhost())
        .json_route(
            "/campaigns",
            "test route",
            Arc::new(move || json!({ "call": counter.fetch_add(1, Ordering::Relaxed) + 1 })),
        )
        .start()
        .unwrap();
    for expected in 1..=2 {
        let response = http(handle.local_addr(), "GET", "/campaigns");
        assert_eq!(response.status, 200);
        let body: serde_json::Value = serde_json::from_str(&response.body).unwrap();
        assert_eq!(body, json!({ "call": expected }));
    }
    assert_eq!(calls.load(Ordering::Relaxed), 2);
    handle.shutdown().unwrap();
}

#[test]
fn prefix_routes_serve_what_their_source_knows_at_request_time() {
    let known = Arc::new(AtomicU64::new(1));
    let source = known.clone();
    let handle = AdminServer::builder(localhost())
        .json_route("/items/special", "test route", Arc::new(|| json!("exact")))
        .json_prefix_route(
            "/items/",
            "test items",
            Arc::new(move |rest| {
                let id: u64 = rest.parse().ok()?;
                (id <= source.load(Ordering::Relaxed)).then(|| json!({ "id": id }))
            }),
        )
        .start()
        .unwrap();
    let addr = handle.local_addr();
    let get = |path: &str| http(addr, "GET", path);
    assert_eq!(get("/items/1").body, r#"{"id":1}"#);
    assert_eq!(get("/items/2").status, 404);
    // Known once the source knows it: nothing is fixed when the server starts.
    known.store(2, Ordering::Relaxed);
    let response = get("/items/2");
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-type"), Some("application/json"));
    assert_eq!(response.body, r#"{"id":2}"#);
    for missing in ["/items/x", "/items/", "/items", "/item/1"] {
        assert_eq!(get(missing).status, 404, "{missing}");
    }
    assert_eq!(get("/items/special").body, r#""exact""#);
    assert_eq!(http(addr, "POST", "/items/1").status, 405);
    handle.shutdown().unwrap();

    for bad in ["items/", "/items", "/items/?x=1/"] {
        let refused = AdminServer::builder(localhost())
            .json_prefix_route(bad, "test items", Arc::new(|_| None))
            .start();
        assert!(
            refused
                .err()
                .unwrap()
                .to_string()
                .contains("must start and end"),
            "{bad}"
        );
    }
    let twice = AdminServer::builder(localhost())
        .json_prefix_route("/a/", "test items", Arc::new(|_| None))
        .json_prefix_route("/a/", "test items", Arc::new(|_| None))
        .start();
    assert!(twice.err().unwrap().to_string().contains("already served"));
}

#[test]
fn a_panicking_route_returns_500_and_the_server_keeps_serving() {
    let handle = AdminServer::builder(localhost())
        .json_route(
            "/broken",
            "test route",
            Arc::new(|| panic!("route failure")),
        )
        .start()
        .unwrap();
    assert_eq!(http(handle.local_addr(), "GET", "/broken").status, 500);
    assert_eq!(http(handle.local_addr(), "GET", "/healthz").status, 200);
    handle.shutdown().unwrap();
}

#[test]
fn unknown_paths_get_404_and_other_methods_405() {
    let handle = AdminServer::builder(localhost()).start().unwrap();
    let addr = handle.local_addr();
    assert_eq!(http(addr, "GET", "/nope").status, 404);
    assert_eq!(http(addr, "GET", "/metrics/extra").status, 404);
    for method in ["POST", "PUT", "DELETE", "HEAD"] {
        let response = http(addr, method, "/metrics");
        assert_eq!(response.status, 405, "{method}");
        assert_eq!(response.header("allow"), Some("GET"));
    }
    let garbage = http_raw(addr, b"NOT HTTP AT ALL\r\n\r\n").unwrap();
    assert_eq!(garbage.status, 400);
    handle.shutdown().unwrap();
}

#[test]
fn oversized_request_heads_are_rejected() {
    let handle = AdminServer::builder(localhost()).start().unwrap();
    let request = format!(
        "GET /metrics HTTP/1.1\r\nHost: localhost\r\nX-Big: {}\r\nConnection: close\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    // The server may answer 431 and close before reading everything, which can surface as a reset.
    match http_raw(handle.local_addr(), request.as_bytes()) {
        Ok(response) => assert_eq!(response.status, 431),
        Err(error) => assert!(
            matches!(
                error.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
            ),
            "{error}"
        ),
    }
    assert_eq!(http(handle.local_addr(), "GET", "/healthz").status, 200);
    handle.shutdown().unwrap();
}

#[test]
fn connection_limit_and_header_timeout_bound_idle_clients() {
    let limits = AdminLimits {
        max_connections: 1,
        header_read_timeout: Duration::from_millis(300),
        ..AdminLimits::default()
    };
    let handle = AdminServer::builder(localhost())
        .limits(limits)
        .start()
        .unwrap();
    let addr = handle.local_addr();

    // A keep-alive client that got one answer is accepted and now idles on the only slot...
    let mut idle = TcpStream::connect(addr).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut first = [0u8; 512];
    let n = idle.read(&mut first).unwrap();
    assert!(first[..n].starts_with(b"HTTP/1.1 200 OK"));

    // ...so the next connection is closed without a response.
    let mut refused = TcpStream::connect(addr).unwrap();
    refused
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let _ = refused.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut buf = Vec::new();
    let read = refused.read_to_end(&mut buf);
    assert!(
        read.is_err() || buf.is_empty(),
        "over-limit connection got {buf:?}"
    );

    // The header read timeout (also the keep-alive idle timeout) closes the idle client.
    let started = Instant::now();
    let mut buf = Vec::new();
    let _ = idle.read_to_end(&mut buf);
    let waited = started.elapsed();
    assert!(buf.is_empty(), "unexpected bytes {buf:?}");
    assert!(
        waited < Duration::from_secs(3),
        "idle connection kept open for {waited:?}"
    );

    // The slot is released right after the close; allow the server a moment to get there.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        match http_raw(addr, request) {
            Ok(response) => {
                assert_eq!(response.status, 200);
                break;
            }
            Err(error) if Instant::now() < deadline => {
                eprintln!("retrying after {error}");
                thread::sleep(Duration::from_millis(20));
            }
            Err(error) => panic!("slot never released: {error}"),
        }
    }
    handle.shutdown().unwrap();
}

#[test]
fn keep_alive_serves_several_requests_on_one_connection() {
    let handle = AdminServer::builder(localhost()).start().unwrap();
    let mut stream = TcpStream::connect(handle.local_addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    assert_eq!(text.matches("HTTP/1.1 200 OK").count(), 2, "{text}");
    handle.shutdown().unwrap();
}

#[test]
fn shutdown_joins_and_closes_the_listener_even_with_open_connections() {
    let handle = AdminServer::builder(localhost()).start().unwrap();
    let addr = handle.local_addr();
    let mut open = TcpStream::connect(addr).unwrap();
    open.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    thread::sleep(Duration::from_millis(50));
    let started = Instant::now();
    handle.shutdown().unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(
        TcpStream::connect(addr).is_err(),
        "listener still accepting after shutdown"
    );
    let mut buf = Vec::new();
    let _ = open.read_to_end(&mut buf); // closed by the server, not left hanging
    assert!(buf.is_empty());
}

#[test]
fn invalid_configuration_is_rejected_at_start() {
    let dup = AdminServer::builder(localhost())
        .json_route("/metrics", "test route", Arc::new(|| json!(null)))
        .start();
    assert!(dup.err().unwrap().to_string().contains("already served"));
    let relative = AdminServer::builder(localhost())
        .json_route("campaigns", "test route", Arc::new(|| json!(null)))
        .start();
    assert!(relative
        .err()
        .unwrap()
        .to_string()
        .contains("must start with '/'"));
    let tiny = AdminServer::builder(localhost())
        .limits(AdminLimits {
            max_header_bytes: 100,
            ..AdminLimits::default()
        })
        .start();
    assert!(tiny.err().unwrap().to_string().contains("max_header_bytes"));

    let taken = AdminServer::builder(localhost()).start().unwrap();
    let clash = AdminServer::builder(taken.local_addr()).start();
    assert!(clash
        .err()
        .unwrap()
        .to_string()
        .contains("binding admin endpoint"));
    taken.shutdown().unwrap();
}

#[test]
fn dashboard_is_one_page_that_reads_only_this_endpoint() {
    let handle = AdminServer::builder(localhost()).start().unwrap();
    let response = http(handle.local_addr(), "GET", "/dashboard");
    assert_eq!(response.status, 200);
    assert_eq!(
        response.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    // Nothing is loaded from elsewhere: no external script, style or image, and the policy forbids it.
    for outside in [
        "src=\"http",
        "href=\"http",
        "src=\"//",
        "href=\"//",
        "@import",
    ] {
        assert!(!response.body.contains(outside), "{outside}");
    }
    let policy = response.header("content-security-policy").unwrap();
    assert!(policy.starts_with("default-src 'none'"), "{policy}");
    assert!(policy.contains("connect-src 'self'"), "{policy}");
    // What its script reads: this endpoint's /metrics, relative to the page.
    assert!(response.body.contains("fetch(\"metrics?per_thread=0\""));
    handle.shutdown().unwrap();
}
