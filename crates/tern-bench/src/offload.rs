//! `tern bench offload` (seed 000): handlers with ~200 µs of CPU work run inline on the I/O loop vs offloaded
//! to the CPU pool, while a prober measures the latency of a cheap request (PING) served by the same loop.
//!
//! The server is `tern ping` with one I/O loop and one CPU worker, in a child process. Heavy requests arrive
//! in pipelined bursts (`SPIN` runs inline, `WORK` is offloaded); the prober sends PINGs on their own
//! connection on a fixed schedule and measures each from its scheduled send time (open loop), so a loop busy
//! with heavy work shows up as queueing delay instead of a slower probe rate.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::process::spawn_tern;
use crate::Report;

#[derive(clap::Args, Debug, Clone)]
pub struct Options {
    /// CPU time of one heavy request, in microseconds.
    #[arg(long, default_value_t = 200)]
    pub heavy_micros: u64,
    /// Heavy requests per burst (pipelined on one connection).
    #[arg(long, default_value_t = 10)]
    pub burst: usize,
    /// Time between bursts, in milliseconds.
    #[arg(long, default_value_t = 5)]
    pub burst_interval_ms: u64,
    /// PINGs per second from the prober.
    #[arg(long, default_value_t = 1000)]
    pub probe_rate: u64,
    /// Measured seconds per variant (after one second of warm-up).
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            heavy_micros: 200,
            burst: 10,
            burst_interval_ms: 5,
            probe_rate: 1000,
            seconds: 5,
        }
    }
}

struct Probe {
    histogram: Histogram<u64>,
    heavy_done: u64,
}

/// Runs the load against a server and returns the cheap request's latency histogram (µs).
async fn drive(addr: SocketAddr, heavy_cmd: &'static str, opts: &Options) -> anyhow::Result<Probe> {
    let heavy = TcpStream::connect(addr).await?;
    heavy.set_nodelay(true)?;
    let warmup = Duration::from_secs(1);
    let start = Instant::now();
    let end = start + warmup + Duration::from_secs(opts.seconds);

    // Heavy bursts, replies drained (and counted) by their own task.
    let (mut heavy_rd, mut heavy_wr) = heavy.into_split();
    let burst: Vec<u8> = format!("{heavy_cmd} {}\r\n", opts.heavy_micros)
        .repeat(opts.burst)
        .into_bytes();
    let interval = Duration::from_millis(opts.burst_interval_ms);
    let heavy_writer = tokio::task::spawn_local(async move {
        let mut next = Instant::now();
        while next < end {
            tokio::time::sleep_until(next.into()).await;
            heavy_wr.write_all(&burst).await?;
            next += interval;
        }
        anyhow::Ok(heavy_wr)
    });
    let heavy_reader = tokio::task::spawn_local(async move {
        let mut buf = vec![0u8; 64 << 10];
        let mut replies = 0u64;
        loop {
            let n = heavy_rd.read(&mut buf).await?;
            if n == 0 {
                return anyhow::Ok(replies);
            }
            replies += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        }
    });

    // The prober runs on its own threads with precise sleeps: tokio's 1 ms timer would send late, and since
    // latency counts from the scheduled time, the client's own lateness would be charged to the server.
    let gap = Duration::from_nanos(1_000_000_000 / opts.probe_rate.max(1));
    let prober = std::thread::spawn(move || probe(addr, gap, start + warmup, end));
    let heavy_wr = heavy_writer.await??;
    drop(heavy_wr); // EOF: the server answers what is queued, then the reader sees EOF
    let heavy_done = tokio::time::timeout(Duration::from_secs(10), heavy_reader).await???;
    let histogram = prober
        .join()
        .map_err(|_| anyhow::anyhow!("prober panicked"))??;
    Ok(Probe {
        histogram,
        heavy_done,
    })
}

/// Pins the calling process's current and future threads to `cpu` (best effort).
fn pin_this_process_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET and sched_setaffinity get a valid pointer.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Sends PINGs on a fixed schedule from one thread and matches the PONGs in order on another; returns the
/// latency (µs from each scheduled send) of the probes scheduled after `measure_from`.
fn probe(
    addr: SocketAddr,
    gap: Duration,
    measure_from: Instant,
    end: Instant,
) -> anyhow::Result<Histogram<u64>> {
    use std::io::{Read, Write};
    use std::sync::{Arc, Mutex};
    let mut writer = std::net::TcpStream::connect(addr)?;
    writer.set_nodelay(true)?;
    let mut reader = writer.try_clone()?;
    reader.set_read_timeout(Some(Duration::from_secs(5)))?;
    let scheduled: Arc<Mutex<VecDeque<Instant>>> = Default::default();
    let sent_all: Arc<Mutex<Option<u64>>> = Default::default();
    let (sched, done) = (scheduled.clone(), sent_all.clone());
    let matcher = std::thread::spawn(move || -> anyhow::Result<Histogram<u64>> {
        let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
        let mut buf = vec![0u8; 4096];
        let mut received = 0u64;
        loop {
            if done.lock().unwrap().is_some_and(|n| received >= n) {
                return Ok(histogram);
            }
            let n = reader.read(&mut buf).context("prober reply")?;
            if n == 0 {
                anyhow::bail!("server closed the probe connection");
            }
            let now = Instant::now();
            for _ in 0..buf[..n].iter().filter(|&&b| b == b'\n').count() {
                received += 1;
                let at = sched
                    .lock()
                    .unwrap()
                    .pop_front()
                    .context("reply without a probe")?;
                if at >= measure_from {
                    histogram.record(now.duration_since(at).as_micros().max(1) as u64)?;
                }
            }
        }
    });
    // Finer sleeps for this thread (the default 50 µs timer slack would blur a 1 ms schedule).
    // SAFETY: prctl with PR_SET_TIMERSLACK takes plain integers.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1, 0, 0, 0) };
    let mut next = Instant::now();
    let mut sent = 0u64;
    while next < end {
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        }
        scheduled.lock().unwrap().push_back(next);
        writer.write_all(b"PING\r\n")?;
        sent += 1;
        next += gap;
    }
    *sent_all.lock().unwrap() = Some(sent);
    // One more probe wakes the matcher if it already has every reply and is waiting in read.
    scheduled.lock().unwrap().push_back(end);
    writer.write_all(b"PING\r\n")?;
    *sent_all.lock().unwrap() = Some(sent + 1);
    matcher
        .join()
        .map_err(|_| anyhow::anyhow!("prober matcher panicked"))?
}

fn variant(opts: &Options, heavy_cmd: &'static str) -> anyhow::Result<Probe> {
    let (server, addr) = spawn_tern(&[
        "ping",
        "--listen",
        "127.0.0.1:0",
        "--io-threads",
        "1",
        "--cpu-workers",
        "1",
    ])?;
    // Server (every thread) on CPU 0, client on CPU 1: the loop and the worker share one core, so whether
    // the cheap request waits behind heavy work is decided by where that work runs, not by spare cores.
    let pinned = std::process::Command::new("taskset")
        .args(["-a", "-p", "-c", "0", &server.pid().to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if pinned {
        pin_this_process_to(1);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    tokio::task::LocalSet::new().block_on(&rt, drive(addr, heavy_cmd, opts))
}

pub fn run(opts: &Options) -> anyhow::Result<Report> {
    let inline = variant(opts, "SPIN")?;
    let offload = variant(opts, "WORK")?;
    let row = |name: &str, p: &Probe| {
        let h = &p.histogram;
        format!(
            "{:<28} {:>9} {:>9} {:>9} {:>9} {:>11}\n",
            name,
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.99),
            h.value_at_quantile(0.999),
            h.max(),
            p.heavy_done
        )
    };
    let mut table = format!(
        "offload: PING latency (µs, from scheduled send) while {}-request bursts of {} µs handlers arrive every {} ms\n\
         {:<28} {:>9} {:>9} {:>9} {:>9} {:>11}\n",
        opts.burst, opts.heavy_micros, opts.burst_interval_ms, "heavy handlers", "p50", "p99", "p99.9", "max", "heavy done"
    );
    table.push_str(&row("inline on the I/O loop", &inline));
    table.push_str(&row("offloaded to the CPU pool", &offload));
    let p99 = |p: &Probe| p.histogram.value_at_quantile(0.99);
    let json = json!({
        "experiment": "offload",
        "ratio": p99(&inline) as f64 / p99(&offload).max(1) as f64,
        "inline_p50_us": inline.histogram.value_at_quantile(0.5),
        "inline_p99_us": p99(&inline),
        "inline_max_us": inline.histogram.max(),
        "offload_p50_us": offload.histogram.value_at_quantile(0.5),
        "offload_p99_us": p99(&offload),
        "offload_max_us": offload.histogram.max(),
        "probes": offload.histogram.len(),
        "heavy_done_inline": inline.heavy_done,
        "heavy_done_offload": offload.heavy_done,
        "heavy_micros": opts.heavy_micros,
        "burst": opts.burst,
        "burst_interval_ms": opts.burst_interval_ms,
    });
    Ok(Report { table, json })
}
