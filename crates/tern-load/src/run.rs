//! Running a whole load: preload, worker threads, progress line, CPU accounting, the report.

use std::io::{IsTerminal as _, Write as _};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::config::{Config, KeyDistribution, Mix, Mode, Op, Transport};
use crate::engine::{ThreadPlan, Worker};
use crate::protocol::Codec;
use crate::report::{curve, Percentiles, Report};
use crate::stats::{Outcome, ThreadStats};

/// CPU time a process has used, split as the kernel counts it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcessCpu {
    /// Seconds in user space.
    pub user_s: f64,
    /// Seconds in the kernel on its behalf (system calls, and on loopback the network stack's work for the
    /// packets it sends).
    pub system_s: f64,
}

impl ProcessCpu {
    pub fn total_s(&self) -> f64 {
        self.user_s + self.system_s
    }
}

impl std::ops::Sub for ProcessCpu {
    type Output = ProcessCpu;

    fn sub(self, earlier: ProcessCpu) -> ProcessCpu {
        ProcessCpu {
            user_s: self.user_s - earlier.user_s,
            system_s: self.system_s - earlier.system_s,
        }
    }
}

/// CPU time a process has used, from `/proc/<pid>/stat`.
pub fn process_cpu(pid: u32) -> anyhow::Result<ProcessCpu> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // The command name (field 2) may hold spaces; fields after its closing ')' are plain.
    let after_name = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .context("malformed stat")?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // utime and stime are fields 14 and 15 overall, 12 and 13 after the name.
    let ticks = |i: usize| -> anyhow::Result<u64> {
        fields
            .get(i)
            .context("short stat")?
            .parse::<u64>()
            .context("stat field")
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Ok(ProcessCpu {
        user_s: ticks(11)? as f64 / hz,
        system_s: ticks(12)? as f64 / hz,
    })
}

/// CPU time (user + system) a process has used, from `/proc/<pid>/stat`.
pub fn process_cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    process_cpu(pid).map(|cpu| cpu.total_s())
}

/// Runs `config` (after its preload, if asked) and answers what it measured.
pub fn run_load(config: &Config) -> anyhow::Result<Report> {
    config.validate()?;
    if let Some(pid) = config.server_pid {
        process_cpu(pid).context("--server-pid")?;
    }
    if config.preload {
        preload(config)?;
    }
    measure(config, Codec::new)
}

/// Sets every key once (and every counter, if the mix increments), closed loop, unmeasured.
fn preload(config: &Config) -> anyhow::Result<()> {
    let pass = Config {
        mode: Mode::Closed,
        key_distribution: KeyDistribution::Sequential,
        mix: Mix(vec![(Op::Set, 1)]),
        requests: Some(config.key_count),
        duration_s: None,
        warmup_s: 0.0,
        // UDP has no flow control: a deep pipeline overflows the server's socket buffer.
        pipeline: if config.transport == Transport::Udp {
            1
        } else {
            config.pipeline.max(16)
        },
        preload: false,
        server_pid: None,
        progress: false,
        ..config.clone()
    };
    let counters = config.mix.weight(Op::Incr) + config.mix.weight(Op::Decr) > 0;
    let passes: &[bool] = if counters { &[false, true] } else { &[false] };
    for &writing_counters in passes {
        let report = measure(&pass, |c, thread| {
            let codec = Codec::new(c, thread)?;
            Ok(if writing_counters {
                codec.writing_counters()
            } else {
                codec
            })
        })?;
        let stored = report.outcome(Outcome::Stored);
        if stored != config.key_count {
            let errors: Vec<String> = report
                .outcomes
                .iter()
                .filter(|(name, &n)| n > 0 && name.as_str() != Outcome::Stored.name())
                .map(|(name, n)| format!("{name}={n}"))
                .collect();
            bail!(
                "preload stored {stored} of {} keys ({}{})",
                config.key_count,
                errors.join(" "),
                report
                    .connection_error
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            );
        }
    }
    Ok(())
}

fn measure(
    config: &Config,
    make_codec: impl Fn(&Config, usize) -> anyhow::Result<Codec> + Sync,
) -> anyhow::Result<Report> {
    let threads = config.threads;
    let progress: Vec<AtomicU64> = (0..threads).map(|_| AtomicU64::new(0)).collect();
    let connected = Barrier::new(threads + 1);
    let started = Barrier::new(threads + 1);
    let start_time: OnceLock<Instant> = OnceLock::new();
    let warmup = config.warmup();
    let results = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                let (progress, connected, started, start_time) =
                    (&progress[thread], &connected, &started, &start_time);
                let make_codec = &make_codec;
                std::thread::Builder::new()
                    .name(format!("tern-load-{thread}"))
                    .spawn_scoped(scope, move || {
                        let connections = share(config.connections, threads, thread);
                        let plan = |codec| ThreadPlan {
                            config,
                            codec,
                            thread,
                            first_connection: (0..thread)
                                .map(|t| share(config.connections, threads, t))
                                .sum(),
                            connections,
                            budget: config
                                .requests
                                .map(|n| share(n as usize, threads, thread) as u64),
                            progress,
                        };
                        // Every thread passes both barriers even when connecting fails, so
                        // that no one waits forever.
                        let worker =
                            make_codec(config, thread).and_then(|c| Worker::connect(plan(c)));
                        connected.wait();
                        started.wait();
                        let start = *start_time.get().expect("set between the barriers");
                        worker?.run(start)
                    })
                    .expect("spawning a load thread")
            })
            .collect();
        connected.wait();
        let start = Instant::now();
        start_time.set(start).expect("set once");
        started.wait();
        let server_cpu = watch(config, start, warmup, &progress, &handles);
        let stats: Vec<anyhow::Result<ThreadStats>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("load thread panicked")))
            })
            .collect();
        (stats, server_cpu)
    });
    let (stats, server_cpu) = results;
    let mut merged = ThreadStats::new(0);
    for s in stats {
        merged.merge(&s?);
    }
    Ok(build_report(config, merged, server_cpu?))
}

/// The `index`-th of `parts` near-equal shares of `total`.
fn share(total: usize, parts: usize, index: usize) -> usize {
    total / parts + usize::from(index < total % parts)
}

/// Prints the progress line until the workers finish; answers the server's CPU time used
/// between the end of warm-up and the end of the run.
fn watch(
    config: &Config,
    start: Instant,
    warmup: Duration,
    progress: &[AtomicU64],
    handles: &[std::thread::ScopedJoinHandle<'_, anyhow::Result<ThreadStats>>],
) -> anyhow::Result<Option<ProcessCpu>> {
    let server_cpu = |pid| process_cpu(pid);
    let mut server_at_warmup = None;
    if warmup.is_zero() {
        server_at_warmup = config.server_pid.map(server_cpu).transpose()?;
    }
    let mut last_print = start;
    let mut last_total = 0;
    // On a terminal the line is redrawn in place; redirected, each second is a line of its own.
    let terminal = std::io::stderr().is_terminal();
    let mut printed = false;
    while !handles.iter().all(|h| h.is_finished()) {
        std::thread::sleep(Duration::from_millis(20));
        let now = Instant::now();
        if server_at_warmup.is_none() && now >= start + warmup {
            server_at_warmup = config.server_pid.map(server_cpu).transpose()?;
        }
        if config.progress && now.duration_since(last_print) >= Duration::from_secs(1) {
            let total: u64 = progress.iter().map(|p| p.load(Ordering::Relaxed)).sum();
            let rate = (total - last_total) as f64 / now.duration_since(last_print).as_secs_f64();
            let phase = if now < start + warmup {
                "warm-up"
            } else {
                "measuring"
            };
            let line = progress_line(
                now.duration_since(start).as_secs_f64(),
                phase,
                rate,
                config.protocol.unit_names().0,
                total,
                terminal,
            );
            let mut stderr = std::io::stderr().lock();
            let _ = stderr.write_all(line.as_bytes());
            let _ = stderr.flush();
            printed = true;
            last_print = now;
            last_total = total;
        }
    }
    if terminal && printed {
        // End the redrawn line, so what follows starts on a line of its own.
        eprintln!();
    }
    Ok(match (config.server_pid, server_at_warmup) {
        (Some(pid), Some(at)) => Some(server_cpu(pid)? - at),
        _ => None,
    })
}

/// One progress report: on a terminal, a carriage return and the line (redrawn in place, no newline);
/// otherwise the whole line with its newline, nothing else, so a file gets one line per second.
fn progress_line(
    elapsed_s: f64,
    phase: &str,
    rate: f64,
    requests: &str,
    total: u64,
    terminal: bool,
) -> String {
    let line =
        format!("[{elapsed_s:>6.1} s] {phase:<9} {rate:>12.0} {requests}/s {total:>12} done");
    if terminal {
        format!("\r{line}")
    } else {
        line + "\n"
    }
}

fn build_report(config: &Config, mut stats: ThreadStats, server_cpu: Option<ProcessCpu>) -> Report {
    let server_cpu_s = server_cpu.map(|cpu| cpu.total_s());
    // The timeline was sized for the planned run: keep the seconds that saw replies.
    stats
        .timeline
        .truncate(stats.last_done_ns.div_ceil(1_000_000_000) as usize);
    let window_end_s = config
        .duration_s
        .map_or(f64::INFINITY, |d| config.warmup_s + d);
    // A count-bounded run measures until its last reply.
    let last_done_s = stats.last_done_ns as f64 / 1e9;
    let measured_s = (window_end_s.min(last_done_s) - config.warmup_s).max(0.0);
    let rate = |n: u64| {
        if measured_s > 0.0 {
            n as f64 / measured_s
        } else {
            0.0
        }
    };
    let per_cpu = |cpu: f64| (cpu > 0.0).then(|| stats.requests as f64 / cpu);
    let keys_per_cpu = |cpu: f64| (cpu > 0.0).then(|| stats.keys as f64 / cpu);
    let client_cpu_s = stats.cpu_ns as f64 / 1e9;
    let outcomes = Outcome::ALL
        .iter()
        .map(|o| (o.name().to_string(), stats.outcomes[*o as usize]))
        .collect();
    Report {
        config: config.clone(),
        measured_s,
        requests: stats.requests,
        keys: stats.keys,
        requests_per_s: rate(stats.requests),
        keys_per_s: rate(stats.keys),
        latency_us: Percentiles::of(&stats.latency),
        service_latency_us: Percentiles::of(&stats.service),
        latency_curve: curve(&stats.latency),
        outcomes,
        errors: Outcome::ALL
            .iter()
            .filter(|o| o.is_error())
            .map(|o| stats.outcomes[*o as usize])
            .sum(),
        unsent: stats.unsent,
        client_cpu_s,
        requests_per_client_cpu_s: per_cpu(client_cpu_s),
        server_cpu_s,
        server_user_s: server_cpu.map(|cpu| cpu.user_s),
        server_system_s: server_cpu.map(|cpu| cpu.system_s),
        requests_per_server_cpu_s: server_cpu_s.and_then(per_cpu),
        keys_per_server_cpu_s: server_cpu_s.and_then(keys_per_cpu),
        timeline_per_s: stats.timeline,
        connection_error: stats.connection_error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_redrawn_on_a_terminal_and_a_line_per_second_elsewhere() {
        let on_terminal = progress_line(1.0, "warm-up", 1234.4, "requests", 1300, true);
        assert_eq!(
            on_terminal,
            "\r[   1.0 s] warm-up           1234 requests/s         1300 done"
        );
        let redirected = progress_line(2.0, "measuring", 99.0, "batches", 1400, false);
        assert_eq!(
            redirected,
            "[   2.0 s] measuring           99 batches/s         1400 done\n"
        );
        assert!(!redirected.contains(['\r', '\x1b']));
    }

    #[test]
    fn shares_add_up() {
        for (total, parts) in [(50, 1), (50, 3), (7, 7), (10, 4)] {
            let sum: usize = (0..parts).map(|i| share(total, parts, i)).sum();
            assert_eq!(sum, total);
        }
    }

    #[test]
    fn reads_own_cpu_time() {
        let pid = std::process::id();
        let before = process_cpu_seconds(pid).unwrap();
        let spin = Instant::now();
        let mut x = 0u64;
        while spin.elapsed() < Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(process_cpu_seconds(pid).unwrap() >= before);
        let split = process_cpu(pid).unwrap();
        assert!(split.user_s > 0.0 && split.system_s >= 0.0);
        assert!(split.total_s() >= before);
        assert!(process_cpu_seconds(u32::MAX).is_err());
    }
}
