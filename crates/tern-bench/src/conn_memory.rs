//! `tern bench conn-memory` (seed 001): resident memory per idle connection at 10,000 connections, with the
//! runtime's per-loop shared buffers vs per-connection buffers, and vs memcached when it is installed.
//!
//! Each server runs as a child process; the experiment opens the connections, sends one request on each
//! (so every connection has been read from and answered), waits for the replies, and divides the growth of
//! the server's RSS by the number of connections.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::json;

use crate::process::{
    free_port, raise_nofile_limit, rss_bytes, spawn_listening, spawn_tern, ChildGuard,
};
use crate::Report;

#[derive(clap::Args, Debug, Clone)]
pub struct Options {
    /// Idle connections to open against each server.
    #[arg(long, default_value_t = 10_000)]
    pub connections: usize,
    /// I/O threads of each server (memcached's -t).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Read buffer of each connection in the per-connection baseline (a common server choice).
    #[arg(long, default_value_t = 16 << 10)]
    pub baseline_buffer_bytes: usize,
    /// Skip memcached even if it is installed.
    #[arg(long)]
    pub no_memcached: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            connections: 10_000,
            threads: 2,
            baseline_buffer_bytes: 16 << 10,
            no_memcached: false,
        }
    }
}

/// Opens `n` connections, sends `request` on each, reads `reply_len` bytes back, and returns them open.
fn open_idle(
    addr: SocketAddr,
    n: usize,
    request: &[u8],
    reply_len: usize,
) -> anyhow::Result<Vec<TcpStream>> {
    let mut conns = Vec::with_capacity(n);
    // In batches, so the listen backlog never overflows.
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let mut batch = Vec::with_capacity(chunk.len());
        for _ in chunk {
            let s = TcpStream::connect(addr)
                .with_context(|| format!("connection {} to {addr}", conns.len()))?;
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            batch.push(s);
        }
        for s in batch.iter_mut() {
            s.write_all(request)?;
        }
        let mut buf = vec![0u8; reply_len];
        for s in batch.iter_mut() {
            s.read_exact(&mut buf)
                .context("reading the reply of an idle connection")?;
        }
        conns.extend(batch);
    }
    Ok(conns)
}

/// RSS growth per connection of a running server.
fn measure(
    server: &ChildGuard,
    addr: SocketAddr,
    n: usize,
    request: &[u8],
    reply_len: usize,
) -> anyhow::Result<f64> {
    // Warm up: the first connections make each loop allocate its buffers.
    let warm = open_idle(addr, 100, request, reply_len)?;
    std::thread::sleep(Duration::from_millis(200));
    let before = rss_bytes(server.pid())?;
    let conns = open_idle(addr, n, request, reply_len)?;
    std::thread::sleep(Duration::from_millis(500));
    let after = rss_bytes(server.pid())?;
    drop(conns);
    drop(warm);
    Ok(after.saturating_sub(before) as f64 / n as f64)
}

fn tern_ping(opts: &Options, mode: &str) -> anyhow::Result<f64> {
    let threads = opts.threads.to_string();
    let buffer = opts.baseline_buffer_bytes.to_string();
    let buffer_args: &[&str] = if mode == "per-connection" {
        &["--read-buffer-bytes", &buffer]
    } else {
        &[]
    };
    let cap = (opts.connections + 1000).to_string();
    let (server, addr) = spawn_tern(
        &[
            "ping",
            "--listen",
            "127.0.0.1:0",
            "--io-threads",
            &threads,
            "--buffer-mode",
            mode,
            "--max-connections",
            &cap,
        ]
        .iter()
        .chain(buffer_args)
        .copied()
        .collect::<Vec<_>>(),
    )?;
    measure(&server, addr, opts.connections, b"PING\r\n", 6)
}

fn memcached(opts: &Options) -> anyhow::Result<Option<f64>> {
    if opts.no_memcached || Command::new("memcached").arg("-V").output().is_err() {
        return Ok(None);
    }
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let mut cmd = Command::new("memcached");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        cmd.args(["-u", "root"]); // memcached refuses to run as root without it
    }
    let server = spawn_listening(
        cmd.args(["-l", "127.0.0.1", "-U", "0", "-p", &port.to_string()])
            .args([
                "-t",
                &opts.threads.to_string(),
                "-c",
                &(opts.connections + 1000).to_string(),
            ]),
        addr,
    )?;
    // "version\r\n" -> "VERSION 1.6.18\r\n": read the reply length from a first probe.
    let mut probe = TcpStream::connect(addr)?;
    probe.write_all(b"version\r\n")?;
    let mut buf = [0u8; 64];
    let n = probe.read(&mut buf)?;
    if !buf[..n].starts_with(b"VERSION ") {
        bail!(
            "memcached answered {:?}",
            String::from_utf8_lossy(&buf[..n])
        );
    }
    drop(probe);
    Ok(Some(measure(
        &server,
        addr,
        opts.connections,
        b"version\r\n",
        n,
    )?))
}

pub fn run(opts: &Options) -> anyhow::Result<Report> {
    let limit = raise_nofile_limit();
    if (limit as usize) < opts.connections + 1000 {
        bail!(
            "open-file limit {limit} is too low for {} connections",
            opts.connections
        );
    }
    let shared = tern_ping(opts, "shared")?;
    let per_conn = tern_ping(opts, "per-connection")?;
    let mc = memcached(opts)?;
    let mut table = format!(
        "conn-memory: RSS per idle connection at {} connections, {} I/O threads\n\
         {:<38} {:>12}\n{:<38} {:>12.0}\n{:<38} {:>12.0}\n",
        opts.connections,
        opts.threads,
        "server",
        "bytes/conn",
        "tern, shared per-loop buffers",
        shared,
        format!(
            "tern, per-connection {} KiB buffers",
            opts.baseline_buffer_bytes >> 10
        ),
        per_conn
    );
    if let Some(mc) = mc {
        table.push_str(&format!("{:<38} {:>12.0}\n", "memcached", mc));
    }
    let json = json!({
        "experiment": "conn-memory",
        "ratio": per_conn / shared.max(1.0),
        "bytes_per_conn": shared,
        "per_connection_buffers_bytes_per_conn": per_conn,
        "baseline_buffer_bytes": opts.baseline_buffer_bytes,
        "memcached_bytes_per_conn": mc,
        "ratio_vs_memcached": mc.map(|m| m / shared.max(1.0)),
        "connections": opts.connections,
        "threads": opts.threads,
    });
    Ok(Report { table, json })
}
