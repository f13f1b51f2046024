//! The HTTP/1.1 protocol over real sockets, against hyper: keep-alive connections reused for
//! every request, pipelining, statuses counted by code, and a response that cannot be framed
//! counted as a protocol error by kind.

use std::convert::Infallible;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tern_load::{run_load, Config, HttpWorkload, Mode, Outcome, Protocol, Report};

const BODY: &[u8] = br#"{"id":"1","imp":[{"id":"1"}]}"#;

/// `POST /bid` with the expected header and body: 200; `/nobid`: 204; anything else: 404.
async fn handle(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let expected = parts.method == hyper::Method::POST
        && parts.headers.get("x-gateway").is_some_and(|v| v == "test")
        && body.as_ref() == BODY;
    let status = match parts.uri.path() {
        "/bid" if expected => StatusCode::OK,
        "/nobid" if expected => StatusCode::NO_CONTENT,
        "/bid" | "/nobid" => StatusCode::BAD_REQUEST,
        _ => StatusCode::NOT_FOUND,
    };
    let reply = if status == StatusCode::OK {
        Bytes::from_static(b"{\"id\":\"1\",\"seatbid\":[]}")
    } else {
        Bytes::new()
    };
    let mut response = Response::new(Full::new(reply));
    *response.status_mut() = status;
    Ok(response)
}

/// A hyper HTTP/1.1 server on a tokio current-thread runtime, stopped on drop.
struct HyperServer {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl HyperServer {
    fn start() -> HyperServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                loop {
                    tokio::select! {
                        accepted = listener.accept() => {
                            let (stream, _) = accepted.unwrap();
                            counter.fetch_add(1, Ordering::Relaxed);
                            tokio::spawn(async move {
                                let _ = hyper::server::conn::http1::Builder::new()
                                    .pipeline_flush(true)
                                    .serve_connection(
                                        TokioIo::new(stream),
                                        hyper::service::service_fn(handle),
                                    )
                                    .await;
                            });
                        }
                        _ = &mut stopped => break,
                    }
                }
            });
        });
        HyperServer {
            addr,
            accepted,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for HyperServer {
    fn drop(&mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.thread.take().unwrap().join().unwrap();
    }
}

fn http_config(addr: SocketAddr, path: &str) -> Config {
    Config {
        server: addr,
        protocol: Protocol::Http,
        connections: 2,
        pipeline: 4,
        mode: Mode::Closed,
        duration_s: Some(0.5),
        warmup_s: 0.1,
        timeout_s: 1.0,
        http: HttpWorkload {
            method: "POST".to_string(),
            path: path.to_string(),
            headers: vec![
                "Content-Type: application/json".to_string(),
                "X-Gateway: test".to_string(),
            ],
            body: BODY.to_vec(),
        },
        ..Config::default()
    }
}

fn run(server: &HyperServer, path: &str) -> Report {
    run_load(&http_config(server.addr, path)).unwrap()
}

#[test]
fn pipelined_keep_alive_requests_are_counted_by_status() {
    let server = HyperServer::start();
    let ok = run(&server, "/bid");
    assert_eq!(ok.errors, 0, "{}", ok.table());
    assert!(ok.requests > 100, "{}", ok.table());
    assert_eq!(ok.outcome(Outcome::Http200), ok.requests);
    assert_eq!(ok.keys, ok.requests);
    // Two connections, kept alive for every request of the run.
    assert_eq!(server.accepted.load(Ordering::Relaxed), 2);

    let no_bid = run(&server, "/nobid");
    assert_eq!(no_bid.errors, 0, "{}", no_bid.table());
    assert_eq!(no_bid.outcome(Outcome::Http204), no_bid.requests);

    let missing = run(&server, "/missing");
    assert_eq!(missing.outcome(Outcome::Http404), missing.requests);
    assert_eq!(missing.errors, missing.requests, "a 404 is an error");
}

#[test]
fn a_response_without_length_is_a_protocol_error_by_kind() {
    // Answers every request with a body it does not announce, keeping the connection open.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = stop.clone();
    let server = std::thread::spawn(move || {
        let mut open = Vec::new();
        while !stopping.load(Ordering::Relaxed) {
            if let Ok((mut s, _)) = listener.accept() {
                s.set_nonblocking(false).unwrap();
                s.set_read_timeout(Some(Duration::from_millis(100)))
                    .unwrap();
                let mut buf = [0u8; 4096];
                if s.read(&mut buf).unwrap_or(0) > 0 {
                    let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nbid");
                }
                open.push(s);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    let report = run_load(&Config {
        connections: 1,
        pipeline: 1,
        duration_s: Some(0.3),
        warmup_s: 0.0,
        ..http_config(addr, "/bid")
    })
    .unwrap();
    stop.store(true, Ordering::Relaxed);
    server.join().unwrap();
    assert!(
        report.outcome(Outcome::HttpNoLength) >= 1,
        "{}",
        report.table()
    );
    assert_eq!(report.outcome(Outcome::Http200), 0, "{}", report.table());
    let why = report.connection_error.unwrap_or_default();
    assert!(why.contains("without Content-Length"), "{why}");
}
