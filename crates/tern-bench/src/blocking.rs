//! `tern bench blocking` (seed 003): a CPU pool of 2 workers whose request handler makes a
//! ~1 ms remote call, served two ways. "block": the worker waits for the call's reply, as the
//! seed's `fut.get()` did, so each worker serves one request per round trip. "continue": the
//! worker issues the call and returns; the reply arrives on the I/O loop, which queues the rest
//! of the handler back to the pool as a continuation. Both are driven by the same closed-loop
//! client keeping `concurrency` requests outstanding; the remote service is a real TCP server
//! on 127.0.0.1 answering each request after the configured delay.
//!
//! Threads: the remote server runs on its own threads; the client driver and the connection to
//! the remote server share a tokio current-thread loop (the service's I/O loop); the handlers
//! run on the tern executor.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{BufReader, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::thread;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hdrhistogram::Histogram;
use serde_json::json;
use tern_executor::{Config, Executor, WakeOrder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use crate::Report;

/// The most outstanding requests the client may be asked to keep (one future each).
pub const MAX_CONCURRENCY: usize = 100_000;

#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// Worker threads in the CPU pool.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Requests the closed-loop client keeps outstanding.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// How long the remote server takes to answer a call, in microseconds.
    #[arg(long, default_value_t = 1_000)]
    pub remote_delay_us: u64,
    /// CPU time the handler spends per request (half before the call, half after), in microseconds.
    #[arg(long, default_value_t = 20)]
    pub handler_cpu_us: u64,
    /// Seconds run before measuring, per variant.
    #[arg(long, default_value_t = 1.0)]
    pub warmup_secs: f64,
    /// Seconds measured, per variant.
    #[arg(long, default_value_t = 5.0)]
    pub measure_secs: f64,
}

/// How the handler waits for its remote call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// The worker blocks until the reply arrives.
    Block,
    /// The worker returns; the reply queues a continuation back to the pool.
    Continue,
}

impl Variant {
    /// Its name in the table and the worker threads' names.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Block => "block",
            Variant::Continue => "continue",
        }
    }
}

impl std::fmt::Display for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What one variant achieved over the measured window.
#[derive(Debug, Clone)]
pub struct VariantResult {
    pub variant: Variant,
    pub requests_per_sec: f64,
    pub mean_latency_us: f64,
    pub p99_latency_us: f64,
    /// Requests that got no answer (a pool rejection); expected 0.
    pub failed: u64,
    /// Mean time from sending a remote call to reading its reply, on the I/O loop.
    pub remote_round_trip_us: f64,
}

type OnReply = Box<dyn FnOnce(u64) + Send>;

/// The client side of the remote service, usable from any thread: `call` hands the request to
/// the I/O loop, which runs `on_reply` there when the answer comes back.
#[derive(Clone)]
struct RemoteClient {
    calls: mpsc::UnboundedSender<OnReply>,
}

impl RemoteClient {
    fn call(&self, on_reply: OnReply) {
        // The I/O loop outlives every handler; if it is gone the request just goes unanswered
        // and the driver counts it as failed.
        let _ = self.calls.send(on_reply);
    }
}

/// Busy CPU work standing in for the handler's own computation.
fn burn_cpu(duration: Duration) {
    let start = Instant::now();
    while start.elapsed() < duration {
        std::hint::spin_loop();
    }
}

/// The remote service, on plain threads: answers each 8-byte request id with the same id
/// `delay` after it arrived. Every call has the same delay, so answers fall due in arrival
/// order, and one replier thread per connection sleeping (with 1 ns timer slack) until the
/// oldest is due keeps the delay exact; tokio's timer would round it up to its 1 ms tick.
struct RemoteServer {
    address: SocketAddr,
    stopping: Arc<AtomicBool>,
    acceptor: JoinHandle<()>,
}

impl RemoteServer {
    fn start(delay: Duration) -> anyhow::Result<RemoteServer> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding remote")?;
        let address = listener.local_addr()?;
        let stopping = Arc::new(AtomicBool::new(false));
        let stop_flag = Arc::clone(&stopping);
        let acceptor = thread::Builder::new()
            .name("remote-accept".into())
            .spawn(move || {
                let mut connections = Vec::new();
                for stream in listener.incoming() {
                    if stop_flag.load(SeqCst) {
                        break;
                    }
                    // A failed accept or setup only loses that connection; its client sees it.
                    if let Ok(threads) = stream.and_then(|stream| serve_connection(stream, delay)) {
                        connections.extend(threads);
                    }
                }
                // Each connection's threads end once its client has closed it.
                for connection in connections {
                    let _ = connection.join();
                }
            })?;
        Ok(RemoteServer {
            address,
            stopping,
            acceptor,
        })
    }

    /// Stops accepting and waits for the connections, which their clients must have closed.
    fn stop(self) -> anyhow::Result<()> {
        self.stopping.store(true, SeqCst);
        // Wake the blocking accept so it sees the flag.
        let _ = std::net::TcpStream::connect(self.address);
        self.acceptor
            .join()
            .map_err(|_| anyhow::anyhow!("remote server thread panicked"))
    }
}

/// Sets the calling thread's timer slack to 1 ns while alive, so its short sleeps last what
/// they say instead of up to the default 50 us longer; restores the old slack on drop.
struct PreciseSleep {
    previous_slack_ns: libc::c_ulong,
}

impl PreciseSleep {
    fn new() -> PreciseSleep {
        // SAFETY: PR_GET/SET_TIMERSLACK only read or set a number on the calling thread.
        let previous = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
        PreciseSleep {
            previous_slack_ns: libc::c_ulong::try_from(previous).unwrap_or(50_000),
        }
    }
}

impl Drop for PreciseSleep {
    fn drop(&mut self) {
        // SAFETY: as in `new`.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, self.previous_slack_ns, 0, 0, 0) };
    }
}

fn serve_connection(
    stream: std::net::TcpStream,
    delay: Duration,
) -> std::io::Result<[JoinHandle<()>; 2]> {
    stream.set_nodelay(true)?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    let (due_tx, due_rx) = std::sync::mpsc::channel::<(Instant, u64)>();
    let receiver = thread::Builder::new()
        .name("remote-read".into())
        .spawn(move || {
            let mut id = [0u8; 8];
            // Ends at end of stream; dropping `due_tx` then ends the replier.
            while reader.read_exact(&mut id).is_ok() {
                if due_tx
                    .send((Instant::now() + delay, u64::from_le_bytes(id)))
                    .is_err()
                {
                    return;
                }
            }
        })?;
    let replier = thread::Builder::new()
        .name("remote-reply".into())
        .spawn(move || {
            let _precise = PreciseSleep::new();
            while let Ok((due, id)) = due_rx.recv() {
                let now = Instant::now();
                if due > now {
                    thread::sleep(due - now);
                }
                if writer.write_all(&id.to_le_bytes()).is_err() {
                    return;
                }
            }
        })?;
    Ok([receiver, replier])
}

/// Calls sent and not yet answered: when each was sent, and what to do with the reply.
type Pending = RefCell<HashMap<u64, (Instant, OnReply)>>;

/// Forwards calls from the workers to the remote server and runs each reply's callback,
/// recording each call's round trip (in microseconds) in `round_trips`.
async fn remote_connection(
    remote: SocketAddr,
    calls: mpsc::UnboundedReceiver<OnReply>,
    round_trips: &RefCell<Histogram<u64>>,
) -> anyhow::Result<()> {
    let stream = TcpStream::connect(remote)
        .await
        .context("connecting to remote")?;
    stream.set_nodelay(true)?;
    let (reader, writer) = stream.into_split();
    let pending = Pending::default();
    tokio::try_join!(
        send_calls(calls, writer, &pending),
        receive_replies(reader, &pending, round_trips)
    )?;
    Ok(())
}

async fn send_calls(
    mut calls: mpsc::UnboundedReceiver<OnReply>,
    mut writer: OwnedWriteHalf,
    pending: &Pending,
) -> anyhow::Result<()> {
    let mut next_id = 0u64;
    while let Some(on_reply) = calls.recv().await {
        pending
            .borrow_mut()
            .insert(next_id, (Instant::now(), on_reply));
        writer.write_u64_le(next_id).await?;
        next_id += 1;
    }
    Ok(())
}

async fn receive_replies(
    mut reader: OwnedReadHalf,
    pending: &Pending,
    round_trips: &RefCell<Histogram<u64>>,
) -> anyhow::Result<()> {
    loop {
        let id = reader.read_u64_le().await.context("reading remote reply")?;
        let call = pending.borrow_mut().remove(&id);
        let (sent, on_reply) = call.context("remote answered an unknown id")?;
        let micros = u64::try_from(sent.elapsed().as_micros())?;
        round_trips.borrow_mut().record(micros.max(1))?;
        on_reply(id);
    }
}

/// One request's handler, started on a worker; `done` is answered when the request is finished.
fn handle_request(
    variant: Variant,
    executor: Executor,
    remote: RemoteClient,
    half_cpu: Duration,
    done: oneshot::Sender<u64>,
) {
    burn_cpu(half_cpu);
    match variant {
        Variant::Block => {
            let (reply_tx, reply_rx) = oneshot::channel();
            remote.call(Box::new(move |reply| {
                let _ = reply_tx.send(reply);
            }));
            // The seed's `fut.get()`: the worker sleeps for the whole round trip.
            if let Ok(reply) = reply_rx.blocking_recv() {
                burn_cpu(half_cpu);
                let _ = done.send(reply);
            }
        }
        Variant::Continue => remote.call(Box::new(move |reply| {
            // Runs on the I/O loop: queue the rest of the handler back to the pool. If the pool
            // refuses, `done` is dropped and the driver counts the request as failed.
            let _ = executor.execute(move |admission| {
                if admission.is_ok() {
                    burn_cpu(half_cpu);
                    let _ = done.send(reply);
                }
            });
        })),
    }
}

fn measure(
    variant: Variant,
    options: &Options,
    remote: SocketAddr,
    warmup: Duration,
    window: Duration,
) -> anyhow::Result<VariantResult> {
    let executor = Executor::new(Config {
        workers: options.workers,
        wake_order: WakeOrder::Lifo,
        queue_timeout: None,
        // Each outstanding request has at most one job queued at a time.
        max_queued: options.concurrency,
        thread_name_prefix: format!("blocking-{variant}"),
        ..Config::default()
    })?;
    let (calls_tx, calls_rx) = mpsc::unbounded_channel();
    let client = RemoteClient { calls: calls_tx };
    let half_cpu = Duration::from_micros(options.handler_cpu_us) / 2;

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(async {
        let completed = Cell::new(0u64);
        let failed = Cell::new(0u64);
        let measuring = Cell::new(false);
        let stop = Cell::new(false);
        let latency = RefCell::new(Histogram::<u64>::new(3)?);
        let round_trips = RefCell::new(Histogram::<u64>::new(3)?);
        let one_client = || async {
            while !stop.get() {
                let (done_tx, done_rx) = oneshot::channel();
                let (executor_for_job, remote) = (executor.clone(), client.clone());
                let sent = Instant::now();
                let queued = executor.execute(move |admission| {
                    if admission.is_ok() {
                        handle_request(variant, executor_for_job, remote, half_cpu, done_tx);
                    }
                });
                let answered = queued.is_ok() && done_rx.await.is_ok();
                if measuring.get() {
                    if answered {
                        completed.set(completed.get() + 1);
                        let micros = u64::try_from(sent.elapsed().as_micros())?;
                        latency.borrow_mut().record(micros.max(1))?;
                    } else {
                        failed.set(failed.get() + 1);
                    }
                }
            }
            anyhow::Ok(())
        };
        let clock = async {
            tokio::time::sleep(warmup).await;
            measuring.set(true);
            let start = Instant::now();
            tokio::time::sleep(window).await;
            measuring.set(false);
            stop.set(true);
            start.elapsed()
        };
        let clients = futures::future::try_join_all((0..options.concurrency).map(|_| one_client()));
        let driver = async { tokio::try_join!(clients, async { anyhow::Ok(clock.await) }) };
        tokio::select! {
            io = remote_connection(remote, calls_rx, &round_trips) => {
                io?;
                anyhow::bail!("remote connection closed during the run")
            }
            finished = driver => {
                let (_, elapsed) = finished?;
                let latency = latency.borrow();
                Ok(VariantResult {
                    variant,
                    requests_per_sec: completed.get() as f64 / elapsed.as_secs_f64(),
                    mean_latency_us: latency.mean(),
                    p99_latency_us: latency.value_at_quantile(0.99) as f64,
                    failed: failed.get(),
                    remote_round_trip_us: round_trips.borrow().mean(),
                })
            }
        }
    });
    // Blocked workers are released once the I/O loop is gone (their reply senders drop).
    drop(runtime);
    executor.shutdown();
    result
}

pub fn run(options: &Options) -> anyhow::Result<Report> {
    anyhow::ensure!(
        (1..=MAX_CONCURRENCY).contains(&options.concurrency),
        "--concurrency must be between 1 and {MAX_CONCURRENCY}"
    );
    let warmup = Duration::try_from_secs_f64(options.warmup_secs)
        .context("--warmup-secs must be a non-negative number of seconds")?;
    let window = Duration::try_from_secs_f64(options.measure_secs)
        .ok()
        .filter(|window| !window.is_zero())
        .context("--measure-secs must be a positive number of seconds")?;
    let server = RemoteServer::start(Duration::from_micros(options.remote_delay_us))?;
    let results = [Variant::Block, Variant::Continue]
        .map(|variant| measure(variant, options, server.address, warmup, window));
    server.stop()?;
    let [block, continued] = results;
    let (block, continued) = (block?, continued?);
    let ratio = continued.requests_per_sec / block.requests_per_sec;
    let mut table = format!(
        "blocking: {} workers, {} outstanding, remote call {} us, handler CPU {} us, {} s measured\n",
        options.workers,
        options.concurrency,
        options.remote_delay_us,
        options.handler_cpu_us,
        options.measure_secs
    );
    writeln!(
        table,
        "{:<9} {:>12} {:>14} {:>13} {:>7} {:>15}",
        "variant", "requests/s", "mean lat us", "p99 lat us", "failed", "remote rtt us"
    )?;
    for result in [&block, &continued] {
        writeln!(
            table,
            "{:<9} {:>12.0} {:>14.0} {:>13.0} {:>7} {:>15.0}",
            result.variant.name(),
            result.requests_per_sec,
            result.mean_latency_us,
            result.p99_latency_us,
            result.failed,
            result.remote_round_trip_us
        )?;
    }
    writeln!(table, "continue/block: {ratio:.2}x")?;
    let variant_json = |result: &VariantResult| {
        json!({
            "requests_per_sec": result.requests_per_sec,
            "mean_latency_us": result.mean_latency_us,
            "p99_latency_us": result.p99_latency_us,
            "failed": result.failed,
            "remote_round_trip_us": result.remote_round_trip_us,
        })
    };
    let json = json!({
        "experiment": "blocking",
        "ratio": ratio,
        "block": variant_json(&block),
        "continue": variant_json(&continued),
        "options": {
            "workers": options.workers,
            "concurrency": options.concurrency,
            "remote_delay_us": options.remote_delay_us,
            "handler_cpu_us": options.handler_cpu_us,
            "warmup_secs": options.warmup_secs,
            "measure_secs": options.measure_secs,
        },
    });
    Ok(Report { table, json })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuations_outrun_blocked_workers() {
        let options = Options {
            workers: 2,
            concurrency: 16,
            remote_delay_us: 1_000,
            handler_cpu_us: 10,
            warmup_secs: 0.1,
            measure_secs: 0.5,
        };
        let report = run(&options).unwrap();
        let json = &report.json;
        assert_eq!(json["experiment"], "blocking");
        for variant in ["block", "continue"] {
            assert_eq!(json[variant]["failed"], 0, "{}", report.table);
            assert!(json[variant]["requests_per_sec"].as_f64().unwrap() > 0.0);
        }
        // Two blocked workers serve at most 2 requests per round trip (>= 1 ms): <= 2,000/s.
        assert!(json["block"]["requests_per_sec"].as_f64().unwrap() <= 2_000.0);
        // 16 outstanding requests with continuations are bounded by the round trip, not the pool.
        assert!(json["ratio"].as_f64().unwrap() > 2.0, "{}", report.table);
    }

    #[test]
    fn remote_server_answers_each_id_after_the_delay() {
        let delay = Duration::from_millis(5);
        let server = RemoteServer::start(delay).unwrap();
        let mut stream = std::net::TcpStream::connect(server.address).unwrap();
        let sent = Instant::now();
        for id in [7u64, 8, 9] {
            stream.write_all(&id.to_le_bytes()).unwrap();
        }
        let mut answered = Vec::new();
        for _ in 0..3 {
            let mut id = [0u8; 8];
            stream.read_exact(&mut id).unwrap();
            answered.push(u64::from_le_bytes(id));
        }
        assert!(sent.elapsed() >= delay);
        assert_eq!(answered, vec![7, 8, 9]);
        drop(stream);
        server.stop().unwrap();
    }

    #[test]
    fn bad_options_are_refused_with_a_message() {
        let good = Options {
            workers: 2,
            concurrency: 4,
            remote_delay_us: 100,
            handler_cpu_us: 0,
            warmup_secs: 0.0,
            measure_secs: 0.1,
        };
        for (bad, needle) in [
            (
                Options {
                    concurrency: 0,
                    ..good.clone()
                },
                "--concurrency",
            ),
            (
                Options {
                    warmup_secs: -1.0,
                    ..good.clone()
                },
                "--warmup-secs",
            ),
            (
                Options {
                    measure_secs: 0.0,
                    ..good.clone()
                },
                "--measure-secs",
            ),
            (
                Options {
                    measure_secs: f64::NAN,
                    ..good.clone()
                },
                "--measure-secs",
            ),
            (
                Options {
                    workers: 0,
                    ..good.clone()
                },
                "workers",
            ),
        ] {
            let error = run(&bad).unwrap_err().to_string();
            assert!(error.contains(needle), "{error}");
        }
    }
}
