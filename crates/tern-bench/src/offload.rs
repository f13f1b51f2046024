//! `tern bench offload` (seed 000): handlers with ~200 µs of CPU work run inline on the I/O loop vs offloaded
//! to the CPU pool, while a prober measures the latency of a cheap request (PING) served by the same loop.
//!
//! The server is `tern ping` with one I/O loop and one CPU worker, in a child process. Heavy requests arrive
//! in pipelined bursts (`SPIN` runs inline, `WORK` is offloaded); the prober sends PINGs on their own
//! connection on a fixed schedule and measures each from its scheduled send time (open loop), so a loop busy
//! with heavy work shows up as queueing delay instead of a slower probe rate.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::rc::Rc;
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
    let probe = TcpStream::connect(addr).await?;
    probe.set_nodelay(true)?;
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

    // Prober: sends on schedule, matches replies in order to their scheduled times.
    let (mut probe_rd, mut probe_wr) = probe.into_split();
    let scheduled: Rc<std::cell::RefCell<VecDeque<Instant>>> = Default::default();
    let sched = scheduled.clone();
    let gap = Duration::from_nanos(1_000_000_000 / opts.probe_rate.max(1));
    let prober = tokio::task::spawn_local(async move {
        let mut next = Instant::now();
        while next < end {
            tokio::time::sleep_until(next.into()).await;
            // Catch up on every send that was due, each keeping its own scheduled time.
            while next <= Instant::now() && next < end {
                sched.borrow_mut().push_back(next);
                probe_wr.write_all(b"PING\r\n").await?;
                next += gap;
            }
        }
        anyhow::Ok(probe_wr)
    });
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut buf = vec![0u8; 4096];
    let mut pending = 0usize;
    let measure_from = start + warmup;
    loop {
        let n = tokio::time::timeout(Duration::from_secs(5), probe_rd.read(&mut buf))
            .await
            .context("prober reply timed out")??;
        if n == 0 {
            break;
        }
        let now = Instant::now();
        pending += buf[..n].iter().filter(|&&b| b == b'\n').count();
        while pending > 0 {
            pending -= 1;
            let Some(at) = scheduled.borrow_mut().pop_front() else {
                break;
            };
            if at >= measure_from {
                histogram.record(now.duration_since(at).as_micros().max(1) as u64)?;
            }
        }
        if prober.is_finished() && scheduled.borrow().is_empty() {
            break;
        }
    }
    let _probe_wr = prober.await??;
    let heavy_wr = heavy_writer.await??;
    drop(heavy_wr); // EOF: the server answers what is queued, then the reader sees EOF
    let heavy_done = tokio::time::timeout(Duration::from_secs(10), heavy_reader).await???;
    Ok(Probe {
        histogram,
        heavy_done,
    })
}

fn variant(opts: &Options, heavy_cmd: &'static str) -> anyhow::Result<Probe> {
    let (_server, addr) = spawn_tern(&[
        "ping",
        "--listen",
        "127.0.0.1:0",
        "--io-threads",
        "1",
        "--cpu-workers",
        "1",
    ])?;
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
