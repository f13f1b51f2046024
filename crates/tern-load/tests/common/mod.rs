//! Servers for the integration tests: a real memcached, and a tiny tokio memcached-text server
//! whose misbehaviour (a stall, wrong values) is chosen by the test.

#![allow(dead_code)] // each test binary uses a different part of this module

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tern_load::Config;
pub use tern_testkit::Memcached;

/// The real memcached, with UDP on (the load generator's UDP tests use its `udp` address).
pub fn memcached() -> Memcached {
    Memcached::start_with(&["-m", "64"], true)
}

/// How the fake server misbehaves.
#[derive(Clone, Copy)]
pub enum Behaviour {
    /// Answer gets with a miss; `after` the first request, answer nothing for `stall` (like a
    /// GC pause), then catch up.
    StallOnce { after: Duration, stall: Duration },
    /// Answer every get with a value of the right length whose bytes are all `x`.
    WrongValues,
}

/// A small memcached-text server on a tokio current-thread runtime, stopped on drop.
pub struct FakeServer {
    pub addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    pub answered: Arc<AtomicU64>,
}

impl FakeServer {
    pub fn start(behaviour: Behaviour) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let (shutdown, stop) = tokio::sync::oneshot::channel();
        let answered = Arc::new(AtomicU64::new(0));
        let counter = answered.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let stall_start: Arc<std::sync::OnceLock<tokio::time::Instant>> = Arc::default();
                let accept = async {
                    loop {
                        let (socket, _) = listener.accept().await.unwrap();
                        tokio::spawn(serve(
                            socket,
                            behaviour,
                            counter.clone(),
                            stall_start.clone(),
                        ));
                    }
                };
                tokio::select! {
                    _ = accept => {}
                    _ = stop => {}
                }
            });
        });
        FakeServer {
            addr,
            shutdown: Some(shutdown),
            thread: Some(thread),
            answered,
        }
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        let _ = self.shutdown.take().unwrap().send(());
        self.thread.take().unwrap().join().unwrap();
    }
}

async fn serve(
    socket: tokio::net::TcpStream,
    behaviour: Behaviour,
    answered: Arc<AtomicU64>,
    stall_start: Arc<std::sync::OnceLock<tokio::time::Instant>>,
) {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    let (reader, mut writer) = socket.into_split();
    let mut reader = tokio::io::BufReader::new(reader);
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).await.unwrap_or(0) == 0 {
            return;
        }
        let text = String::from_utf8_lossy(&line).trim_end().to_string();
        let words: Vec<&str> = text.split(' ').collect();
        let mut reply = Vec::new();
        match words[0] {
            "get" => {
                for key in &words[1..] {
                    if let Behaviour::WrongValues = behaviour {
                        // The generator's values for the default sizes are 100 bytes.
                        reply.extend_from_slice(format!("VALUE {key} 0 100\r\n").as_bytes());
                        reply.extend_from_slice(&[b'x'; 100]);
                        reply.extend_from_slice(b"\r\n");
                    }
                }
                reply.extend_from_slice(b"END\r\n");
            }
            "set" => {
                let len: usize = words[4].parse().unwrap();
                let mut data = vec![0; len + 2];
                if reader.read_exact(&mut data).await.is_err() {
                    return;
                }
                reply.extend_from_slice(b"STORED\r\n");
            }
            _ => reply.extend_from_slice(b"ERROR\r\n"),
        }
        answered.fetch_add(1, Ordering::Relaxed);
        if let Behaviour::StallOnce { after, stall } = behaviour {
            let start = *stall_start.get_or_init(|| tokio::time::Instant::now() + after);
            let now = tokio::time::Instant::now();
            if now >= start && now < start + stall {
                tokio::time::sleep_until(start + stall).await;
            }
        }
        if writer.write_all(&reply).await.is_err() {
            return;
        }
    }
}

/// A short run with test-friendly defaults against `addr`.
pub fn quick_config(addr: SocketAddr) -> Config {
    Config {
        server: addr,
        connections: 8,
        duration_s: Some(1.0),
        warmup_s: 0.2,
        key_count: 1000,
        timeout_s: 1.0,
        ..Config::default()
    }
}
