//! The runtime's connection contract, over real sockets, with the ping service.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use tern_ping::Ping;
use tern_runtime::{BufferMode, RunningServer, RuntimeConfig, Server, Spread};

fn start(tweak: impl FnOnce(&mut RuntimeConfig)) -> RunningServer {
    let mut cfg = RuntimeConfig {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        io_threads: 2,
        ..RuntimeConfig::default()
    };
    tweak(&mut cfg);
    Server::new(cfg, Ping).start().expect("server starts")
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Reads until `expected` bytes arrived (or fails on timeout/EOF).
fn read_exact_len(s: &mut TcpStream, expected: usize) -> Vec<u8> {
    let mut got = vec![0u8; expected];
    s.read_exact(&mut got).expect("reply bytes");
    got
}

/// Reads until EOF; returns what came.
fn read_to_eof(s: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    s.read_to_end(&mut got).expect("read to EOF");
    got
}

fn stop(server: RunningServer) {
    server.shutdown();
    server.join();
}

#[test]
fn pipelined_requests_are_answered_in_order_with_one_write_each_read() {
    for spread in [Spread::Reuseport, Spread::Acceptor] {
        let server = start(|c| c.spread = spread);
        let mut s = connect(server.local_addr().unwrap());
        let mut req = Vec::new();
        let mut want = Vec::new();
        for i in 0..2000 {
            match i % 4 {
                0 => {
                    req.extend_from_slice(b"PING\r\n");
                    want.extend_from_slice(b"PONG\r\n");
                }
                1 => {
                    req.extend_from_slice(format!("ECHO n{i}\r\n").as_bytes());
                    want.extend_from_slice(format!("n{i}\r\n").as_bytes());
                }
                2 if i % 100 == 2 => {
                    // Deferred replies in the middle of the pipeline keep their place.
                    req.extend_from_slice(b"SLEEP 2\r\n");
                    want.extend_from_slice(b"SLEPT\r\n");
                }
                _ => {
                    req.extend_from_slice(b"BIG 3\r\n");
                    want.extend_from_slice(b"xxx\r\n");
                }
            }
        }
        s.write_all(&req).unwrap();
        assert_eq!(
            read_exact_len(&mut s, want.len()),
            want,
            "spread {spread:?}"
        );
        stop(server);
    }
}

#[test]
fn frames_split_at_every_byte_are_reassembled() {
    for mode in [BufferMode::Shared, BufferMode::PerConnection] {
        let server = start(|c| c.buffer_mode = mode);
        let stream = b"PING\r\nECHO split me\r\nSLEEP 1\nBIG 4\r\nPING\r\n";
        let want = b"PONG\r\nsplit me\r\nSLEPT\r\nxxxx\r\nPONG\r\n";
        for cut in 1..stream.len() {
            let mut s = connect(server.local_addr().unwrap());
            s.write_all(&stream[..cut]).unwrap();
            std::thread::sleep(Duration::from_millis(2));
            s.write_all(&stream[cut..]).unwrap();
            assert_eq!(
                read_exact_len(&mut s, want.len()),
                want,
                "cut at {cut}, {mode:?}"
            );
        }
        // And one byte per write.
        let mut s = connect(server.local_addr().unwrap());
        for b in stream {
            s.write_all(&[*b]).unwrap();
        }
        assert_eq!(read_exact_len(&mut s, want.len()), want);
        stop(server);
    }
}

#[test]
fn a_client_that_never_reads_is_held_back_and_others_are_served() {
    let server = start(|c| c.max_output_bytes = 1 << 20);
    let addr = server.local_addr().unwrap();
    let mut hog = connect(addr);
    hog.set_write_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    // Ask for 2 GB of replies without reading any; the server must stop reading this client's requests
    // (its writes block) instead of buffering the replies.
    // 26 MB of requests: more than the kernel's socket buffers can absorb.
    let req = b"BIG 1000000\r\n".repeat(2_000_000);
    let mut sent = 0;
    while sent < req.len() {
        match hog.write(&req[sent..]) {
            Ok(n) => sent += n,
            Err(_) => break,
        }
    }
    assert!(
        sent < req.len(),
        "the server should stop reading a client that does not read its replies"
    );
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let rss_pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(
        rss_pages * 4096 < 512 << 20,
        "RSS stays bounded: {} MiB",
        (rss_pages * 4096) >> 20
    );
    let mut other = connect(addr);
    let t = Instant::now();
    other.write_all(b"PING\r\n").unwrap();
    assert_eq!(read_exact_len(&mut other, 6), b"PONG\r\n");
    assert!(t.elapsed() < Duration::from_secs(1));
    // The hog still gets correct replies once it reads.
    let mut first = vec![0u8; 1_000_002];
    hog.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    hog.read_exact(&mut first).unwrap();
    assert!(first[..1_000_000].iter().all(|&b| b == b'x') && &first[1_000_000..] == b"\r\n");
    drop(hog);
    stop(server);
}

#[test]
fn connections_over_the_cap_are_refused_with_a_protocol_error() {
    for spread in [Spread::Reuseport, Spread::Acceptor] {
        let server = start(|c| {
            c.max_connections = 3;
            c.spread = spread;
        });
        let addr = server.local_addr().unwrap();
        let mut kept: Vec<TcpStream> = (0..3).map(|_| connect(addr)).collect();
        for s in kept.iter_mut() {
            s.write_all(b"PING\r\n").unwrap();
            assert_eq!(read_exact_len(s, 6), b"PONG\r\n");
        }
        let mut extra = connect(addr);
        assert_eq!(
            read_to_eof(&mut extra),
            b"-ERR too many connections\r\n",
            "{spread:?}"
        );
        // Closing one frees a place.
        drop(kept.pop());
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            let mut s = connect(addr);
            s.write_all(b"PING\r\n").unwrap();
            let mut buf = [0u8; 64];
            let n = s.read(&mut buf).unwrap();
            if &buf[..n] == b"PONG\r\n" {
                break;
            }
            assert!(Instant::now() < deadline, "a freed place is reused");
            std::thread::sleep(Duration::from_millis(20));
        }
        stop(server);
    }
}

#[test]
fn graceful_shutdown_finishes_requests_in_flight() {
    let server = start(|c| c.shutdown_grace = Duration::from_secs(3));
    let addr = server.local_addr().unwrap();
    let mut busy = connect(addr);
    let mut idle = connect(addr);
    idle.write_all(b"PING\r\n").unwrap();
    assert_eq!(read_exact_len(&mut idle, 6), b"PONG\r\n");
    busy.write_all(b"PING\r\nSLEEP 300\r\n").unwrap();
    assert_eq!(read_exact_len(&mut busy, 6), b"PONG\r\n");
    let t = Instant::now();
    server.shutdown();
    // The idle connection is closed at once; the busy one gets its reply, then EOF.
    assert_eq!(read_to_eof(&mut idle), b"");
    assert_eq!(read_to_eof(&mut busy), b"SLEPT\r\n");
    server.join();
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert!(TcpStream::connect(addr).is_err(), "no longer accepting");
}

#[test]
fn shutdown_grace_period_bounds_the_wait() {
    let server = start(|c| c.shutdown_grace = Duration::from_millis(200));
    let mut s = connect(server.local_addr().unwrap());
    s.write_all(b"SLEEP 5000\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let t = Instant::now();
    server.shutdown();
    server.join();
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(read_to_eof(&mut s), b"");
}

#[test]
fn in_flight_limit_answers_overloaded_from_the_io_thread() {
    let server = start(|c| {
        c.io_threads = 1;
        c.max_in_flight = 2;
    });
    let mut s = connect(server.local_addr().unwrap());
    // Inline requests count too while two are in flight (fbthrift's maxRequests counts every active request).
    s.write_all(b"SLEEP 200\r\nSLEEP 200\r\nSLEEP 200\r\nPING\r\n")
        .unwrap();
    let want = b"SLEPT\r\nSLEPT\r\n-ERR overloaded (in-flight limit)\r\n-ERR overloaded (in-flight limit)\r\n";
    assert_eq!(read_exact_len(&mut s, want.len()), want);
    s.write_all(b"PING\r\n").unwrap();
    assert_eq!(read_exact_len(&mut s, 6), b"PONG\r\n");
    stop(server);
}

#[test]
fn rate_limit_refuses_the_excess() {
    let server = start(|c| {
        c.io_threads = 1;
        c.rate_limit = 100;
    });
    let mut s = connect(server.local_addr().unwrap());
    s.write_all(&b"PING\r\n".repeat(50)).unwrap();
    let mut got = Vec::new();
    let refusal = b"-ERR overloaded (rate limit)\r\n".len();
    while got.len() < 10 * 6 + 40 * refusal {
        let mut buf = [0u8; 4096];
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8(got).unwrap();
    assert_eq!(
        text.matches("PONG").count(),
        10,
        "a burst of a tenth of a second at 100/s"
    );
    assert_eq!(text.matches("-ERR overloaded (rate limit)").count(), 40);
    stop(server);
}

#[test]
fn idle_and_partial_request_timeouts_close_connections() {
    let server = start(|c| {
        c.idle_timeout = Some(Duration::from_millis(150));
        c.partial_request_timeout = Some(Duration::from_millis(150));
    });
    let addr = server.local_addr().unwrap();
    let mut idle = connect(addr);
    let mut slow = connect(addr);
    slow.write_all(b"ECHO never finished").unwrap();
    let t = Instant::now();
    assert_eq!(read_to_eof(&mut idle), b"");
    assert_eq!(read_to_eof(&mut slow), b"");
    assert!(t.elapsed() < Duration::from_secs(2));
    stop(server);
}

#[test]
fn overlong_lines_close_the_connection_with_an_error() {
    let server = start(|_| {});
    let mut s = connect(server.local_addr().unwrap());
    s.write_all(&vec![b'a'; 5000]).unwrap();
    assert_eq!(read_to_eof(&mut s), b"-ERR line too long\r\n");
    stop(server);
}

#[test]
fn udp_datagrams_are_answered_from_each_loop_socket() {
    let server = start(|c| {
        c.listen = None;
        c.udp = Some("127.0.0.1:0".parse().unwrap());
    });
    let addr = server.udp_addr().unwrap();
    for _ in 0..20 {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        sock.send_to(b"PING\r\n", addr).unwrap();
        let mut buf = [0u8; 64];
        let (n, from) = sock.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"PONG\r\n");
        assert_eq!(from, addr, "replies come from the service address");
    }
    stop(server);
}

#[test]
fn offloaded_work_runs_on_the_pool_and_a_saturated_pool_answers_overloaded() {
    let server = start(|c| {
        c.io_threads = 1;
        c.executor.workers = 1;
        c.executor.queue_timeout = Some(Duration::from_millis(30));
    });
    let mut s = connect(server.local_addr().unwrap());
    // One worker, 20 ms jobs, a 30 ms queue timeout: the first two run, the jobs queued behind them wait
    // too long and are answered "overloaded" without running; PING, inline on the loop, is answered in order.
    s.write_all(&b"WORK 20000\r\n".repeat(8)).unwrap();
    s.write_all(b"PING\r\n").unwrap();
    let mut got = Vec::new();
    while !got.ends_with(b"PONG\r\n") {
        let mut buf = [0u8; 1024];
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8(got).unwrap();
    let done = text.matches("DONE").count();
    let refused = text.matches("-ERR overloaded (queue timeout)").count();
    assert_eq!(done + refused, 8, "{text}");
    assert!((1..=3).contains(&done), "{text}");
    assert!(refused >= 5, "{text}");
    let stats = server.executor().stats().total();
    assert_eq!(stats.jobs_run as usize, done, "rejected jobs never ran");
    stop(server);
}

#[test]
fn every_listen_address_is_served_in_both_spread_modes() {
    for spread in [Spread::Reuseport, Spread::Acceptor] {
        let server = start(|c| {
            c.spread = spread;
            c.listen_also = vec!["127.0.0.2:0".parse().unwrap()];
        });
        let addrs = server.local_addrs().to_vec();
        assert_eq!(addrs.len(), 2, "{spread:?}");
        for addr in addrs {
            let mut s = connect(addr);
            s.write_all(b"PING\r\n").unwrap();
            assert_eq!(read_exact_len(&mut s, 6), b"PONG\r\n", "{spread:?} {addr}");
        }
        stop(server);
    }
}

#[test]
fn requests_past_their_deadline_are_refused_without_running() {
    // The configured deadline (1 s) applies unless the request's own `WITHIN` gives one.
    let server = start(|c| {
        c.io_threads = 1;
        c.request_deadline = Some(Duration::from_secs(1));
    });
    let mut s = connect(server.local_addr().unwrap());
    // All in one write, so all are read at once: the 30 ms SPIN runs inline first, so when the
    // `WITHIN 10` PING's turn comes its deadline has passed; the plain PING (1 s) and the `WITHIN 5000`
    // one are still in time. `WITHIN 0` has expired on arrival; an offloaded WORK carries its deadline
    // to the pool.
    s.write_all(
        b"SPIN 30000\r\nWITHIN 10 PING\r\nPING\r\nWITHIN 5000 ECHO late but fine\r\n\
          WITHIN 0 ECHO never\r\nWITHIN 5000 WORK 10\r\n",
    )
    .unwrap();
    let want = "DONE\r\n-ERR overloaded (deadline expired)\r\nPONG\r\nlate but fine\r\n\
                -ERR overloaded (deadline expired)\r\nDONE\r\n";
    let got = read_exact_len(&mut s, want.len());
    assert_eq!(String::from_utf8_lossy(&got), want);
    let expired = tern_metrics::snapshot()
        .counter_with("tern_requests_rejected_total", Some("deadline_expired"))
        .unwrap_or(0);
    assert!(expired >= 2, "{expired}");
    stop(server);
}

#[test]
fn unix_socket_clients_are_served_by_every_loop() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::UnixStream;
    let dir = std::env::temp_dir().join(format!("tern-unix-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ping.sock");
    // A stale socket file from an earlier run is replaced.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let server = start(|c| {
        c.listen = None;
        c.unix = Some(path.clone());
        c.unix_mode = 0o600;
    });
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    for i in 0..20 {
        let mut s = UnixStream::connect(&path).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(format!("ECHO u{i}\r\nSLEEP 1\r\n").as_bytes())
            .unwrap();
        let want = format!("u{i}\r\nSLEPT\r\n");
        let mut got = vec![0u8; want.len()];
        s.read_exact(&mut got).unwrap();
        assert_eq!(got, want.as_bytes());
    }
    stop(server);
    std::fs::remove_dir_all(&dir).unwrap();
}
