//! `tern bench recommend` (seed 000, on the real service): the same recommender, sources and cores, run
//! three ways: `blocking` (a fixed pool of workers, each holding a request through its outbound calls, which
//! run on threads of their own), `inline` (non-blocking calls from the I/O loops, ranking on the I/O loops)
//! and `offload` (non-blocking calls, ranking on the CPU pool: the service's design).
//!
//! Child processes on this machine: tern cache with the features, tern graph with every call answered
//! `--source-latency-ms` late (its fault injection: a timer, no CPU, as a source across a network would be),
//! the recommender in each mode, and `tern load`. By default the recommender has one I/O loop and a CPU
//! worker per CPU on both of this machine's CPUs, shared with the other processes: seed 000's shape, I/O
//! threads fewer than cores, whose workers sat idle while the ranking ran on the I/O threads
//! (`--recommend-cpus`/`--other-cpus` pin them apart with `taskset`, `--io-threads` adds loops). Per mode:
//! the peak (a closed loop: `--connections` connections, or twice the workers for the blocking pool, which
//! more connections would only queue), the recommender's CPU use during it as a share of its CPUs and those
//! CPUs' busy share (every process's work), then an open loop at `--load-share` of the offload peak with
//! latency from each request's scheduled send time.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::json;

use crate::process::{free_port, ChildGuard};
use crate::Report;

#[derive(clap::Args, Debug, Clone)]
pub struct Options {
    /// How late every graph call is answered, in milliseconds (the sources' stated latency).
    #[arg(long, default_value_t = 60)]
    pub source_latency_ms: u64,
    /// The blocking mode's fixed pool of workers.
    #[arg(long, default_value_t = 8)]
    pub workers: usize,
    /// Edges of the generated follow graph (as `tern graph --synthetic-edges`).
    #[arg(long, default_value_t = 300_000)]
    pub edges: usize,
    /// Connections of the closed loop that finds each mode's peak (enough that the sources' latency does not
    /// bound it: 1,024 over 60 ms allow about 16,000/s).
    #[arg(long, default_value_t = 1024)]
    pub connections: usize,
    /// The fixed rate, as a share of the offload mode's peak.
    #[arg(long, default_value_t = 0.7)]
    pub load_share: f64,
    /// Measured seconds per run (after two seconds of warm-up).
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Runs of each mode; every figure is the median of its runs.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Requests' deadline, in milliseconds (the recommender's default deadline).
    #[arg(long, default_value_t = 500)]
    pub deadline_ms: u64,
    /// Candidates every request ranks at least (the recommender's --min-candidates): the ranking's CPU
    /// cost per request.
    #[arg(long, default_value_t = 600)]
    pub min_candidates: usize,
    /// The recommender's CPUs (a taskset list). The inline and offload modes get a CPU worker per CPU (idle
    /// in the inline mode, as seed 000's were before the ranking moved to them).
    #[arg(long, default_value = "0-1")]
    pub recommend_cpus: String,
    /// The recommender's I/O loops in every mode.
    #[arg(long, default_value_t = 1)]
    pub io_threads: usize,
    /// Every other process's CPUs (a taskset list).
    #[arg(long, default_value = "0-1")]
    pub other_cpus: String,
}

const MODES: [&str; 3] = ["blocking", "inline", "offload"];

/// A mode's figures.
#[derive(Debug, Default, Clone)]
struct ModeResult {
    peak: f64,
    peak_p99_ms: f64,
    /// The recommender's CPU time over the peak run's wall time, as a share of its CPUs.
    recommend_cpu: f64,
    /// The recommender's CPUs' busy share during the peak run, every process's work counted.
    cpus_busy: f64,
    at_rate_p99_ms: Option<f64>,
    at_rate_answered: Option<f64>,
}

/// `0..n` starting at `round % n`: each round runs the modes in another order.
fn rotated(n: usize, round: usize) -> Vec<usize> {
    (0..n).map(|i| (i + round) % n).collect()
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// CPU seconds a process has used (user + system).
fn process_cpu_s(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after_name = stat.rsplit_once(')').context("bad /proc stat")?.1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    // SAFETY: sysconf only reads a configuration value.
    let per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Ok(ticks as f64 / per_s)
}

/// The CPUs of a taskset list such as `0`, `0,1` or `0-3`.
fn cpus_of(list: &str) -> anyhow::Result<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in list.split(',') {
        let (first, last) = part.split_once('-').unwrap_or((part, part));
        let (first, last): (usize, usize) = (
            first
                .trim()
                .parse()
                .with_context(|| format!("{list:?} is not a CPU list"))?,
            last.trim()
                .parse()
                .with_context(|| format!("{list:?} is not a CPU list"))?,
        );
        cpus.extend(first..=last);
    }
    Ok(cpus)
}

/// Busy and total time of `cpus` so far, in clock ticks, from `/proc/stat` (every process's work on them).
fn cpus_busy_ticks(cpus: &[usize]) -> anyhow::Result<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let (mut busy, mut total) = (0, 0);
    for line in stat.lines() {
        let mut fields = line.split_whitespace();
        let Some(cpu) = fields.next().and_then(|name| name.strip_prefix("cpu")) else {
            continue;
        };
        if !cpu.parse().is_ok_and(|n: usize| cpus.contains(&n)) {
            continue;
        }
        // user nice system idle iowait irq softirq steal: idle and iowait are not busy.
        let ticks: Vec<u64> = fields.take(8).map(|f| f.parse().unwrap_or(0)).collect();
        total += ticks.iter().sum::<u64>();
        busy += ticks.iter().sum::<u64>() - ticks.get(3).unwrap_or(&0) - ticks.get(4).unwrap_or(&0);
    }
    Ok((busy, total))
}

fn tern() -> anyhow::Result<std::path::PathBuf> {
    std::env::current_exe().context("finding the tern executable")
}

/// `tern <args>` on `cpus`.
fn pinned(cpus: &str, args: &[&str]) -> anyhow::Result<Command> {
    let mut command = Command::new("taskset");
    command.arg("-c").arg(cpus).arg(tern()?).args(args);
    Ok(command)
}

/// Starts `tern <args>` on `cpus` and waits until it accepts connections on `addr`.
fn start(
    cpus: &str,
    args: &[&str],
    addr: SocketAddr,
    wait: Duration,
) -> anyhow::Result<ChildGuard> {
    let child = pinned(cpus, args)?
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting tern {}", args.join(" ")))?;
    let guard = ChildGuard(child);
    let until = Instant::now() + wait;
    while std::net::TcpStream::connect(addr).is_err() {
        if Instant::now() > until {
            bail!("tern {} did not listen on {addr}", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(guard)
}

fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Runs `tern load` against the recommender, in closed loop over some connections or in open loop at a
/// rate; answers its JSON report.
fn load(
    addr: SocketAddr,
    opts: &Options,
    load: Load,
    dir: &Path,
) -> anyhow::Result<serde_json::Value> {
    let report = dir.join("load.json");
    let addr = addr.to_string();
    let seconds = opts.seconds.to_string();
    // The generated graph's accounts (`Synthetic::with_edges`: one per 20 follows).
    let keys = (opts.edges / 20).to_string();
    let mut args = vec![
        "load",
        "--protocol",
        "recommend",
        "-s",
        &addr,
        "--recommend-wire",
        "thrift-binary",
        "--recommend-call",
        "suggested-users",
        "--keys",
        &keys,
        "--key-dist",
        "zipf:0.9",
        "--warmup",
        "2",
        "--duration",
        &seconds,
        "-q",
        "--json",
    ];
    let report_path = report.to_string_lossy().into_owned();
    args.push(&report_path);
    let connections;
    let rate_text;
    match load {
        Load::Rate(r) => {
            // One request in flight per connection: room for three times the requests a source's latency
            // (and some) keeps in flight. More would only cost the client CPU, on the CPUs the sources
            // share; a request that finds none free waits, and its latency counts from when it was due.
            connections = (r * (opts.source_latency_ms + 20) * 3 / 1000)
                .max(32)
                .to_string();
            rate_text = r.to_string();
            args.extend(["--connections", &connections, "--rate", &rate_text]);
        }
        Load::Closed(n) => {
            connections = n.to_string();
            args.extend(["--connections", &connections]);
        }
    }
    let out = pinned(&opts.other_cpus, &args)?
        .stdout(Stdio::null())
        .output()
        .context("running tern load")?;
    if !out.status.success() {
        bail!("tern load failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&report)?)?;
    Ok(report)
}

#[derive(Debug, Clone, Copy)]
enum Load {
    Closed(usize),
    Rate(u64),
}

fn p99_ms(report: &serde_json::Value) -> f64 {
    report["latency_us"]["p99"].as_f64().unwrap_or(f64::NAN) / 1000.0
}

/// Answers with items per second (partial or not).
fn answered_per_s(report: &serde_json::Value) -> f64 {
    let outcome = |k: &str| report["outcomes"][k].as_f64().unwrap_or(0.0);
    (outcome("recommended") + outcome("recommended_partial"))
        / report["measured_s"].as_f64().unwrap_or(1.0)
}

pub fn run(opts: &Options) -> anyhow::Result<Report> {
    let dir = std::env::temp_dir().join(format!("tern-bench-recommend-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = measure(opts, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn measure(opts: &Options, dir: &Path) -> anyhow::Result<Report> {
    let edges = opts.edges.to_string();
    let (cache_port, graph_port) = (free_port(), free_port());
    let cache_addr = local(cache_port).to_string();
    let graph_addr = local(graph_port).to_string();
    let latency = opts.source_latency_ms.to_string();
    let others = opts.other_cpus.as_str();
    let _cache = start(
        others,
        &[
            "cache",
            "-p",
            &cache_port.to_string(),
            "-l",
            "127.0.0.1",
            "-U",
            "0",
            "-t",
            "1",
        ],
        local(cache_port),
        Duration::from_secs(10),
    )?;
    let _graph = start(
        others,
        &[
            "graph",
            "--synthetic-edges",
            &edges,
            "--listen",
            &graph_addr,
            "--io-threads",
            "1",
            "--cpu-workers",
            "1",
            "--inject-delay-ms",
            &latency,
        ],
        local(graph_port),
        Duration::from_secs(60),
    )?;
    let prepared = Command::new(tern()?)
        .args([
            "recommend",
            "prepare",
            "--synthetic-edges",
            &edges,
            "--cache",
            &cache_addr,
        ])
        .stdout(Stdio::null())
        .status()?;
    if !prepared.success() {
        bail!("tern recommend prepare failed");
    }
    let deadline = opts.deadline_ms.to_string();
    let budget = (opts.deadline_ms * 8 / 10).to_string();
    let workers = opts.workers.to_string();
    let io_threads = opts.io_threads.to_string();
    let recommend_cpu_list = cpus_of(&opts.recommend_cpus)?;
    let cpu_workers = recommend_cpu_list.len().to_string();
    let min_candidates = opts.min_candidates.to_string();
    let mut results: Vec<ModeResult> = vec![ModeResult::default(); MODES.len()];
    let recommend_cpus = recommend_cpu_list.len() as f64;
    let serve = |mode: &str| -> anyhow::Result<(ChildGuard, SocketAddr)> {
        let port = free_port();
        let listen = local(port).to_string();
        // The same I/O loops in every mode, a CPU worker per CPU (sharing them with the loops), and the
        // fixed pool for the blocking mode; overload control off, so the peak is the design's own.
        let threads: [&str; 4] = match mode {
            "blocking" => ["--io-threads", &io_threads, "--cpu-workers", &workers],
            _ => ["--io-threads", &io_threads, "--cpu-workers", &cpu_workers],
        };
        let mut args = vec![
            "recommend",
            "serve",
            "--listen",
            &listen,
            "--graph-shard",
            &graph_addr,
            "--cache",
            &cache_addr,
            "--execution",
            mode,
            "--deadline-ms",
            &deadline,
            "--source-budget-ms",
            &budget,
            "--degrade-after-ms",
            "0",
            "--shed-after-ms",
            "0",
            "--min-candidates",
            &min_candidates,
        ];
        args.extend(threads);
        Ok((
            start(
                &opts.recommend_cpus,
                &args,
                local(port),
                Duration::from_secs(10),
            )?,
            local(port),
        ))
    };
    // Rounds alternate the modes' order; each figure is the median of its rounds.
    let mut peaks: Vec<Vec<(f64, f64, f64, f64)>> = vec![Vec::new(); MODES.len()];
    for round in 0..opts.rounds {
        for i in rotated(MODES.len(), round) {
            let mode = MODES[i];
            let (server, addr) = serve(mode)?;
            let connections = if mode == "blocking" {
                opts.workers * 2
            } else {
                opts.connections
            };
            let cpu0 = process_cpu_s(server.pid())?;
            let (busy0, total0) = cpus_busy_ticks(&recommend_cpu_list)?;
            let started = Instant::now();
            let peak = load(addr, opts, Load::Closed(connections), dir)?;
            let wall = started.elapsed().as_secs_f64();
            let cpu = (process_cpu_s(server.pid())? - cpu0) / wall / recommend_cpus;
            let (busy1, total1) = cpus_busy_ticks(&recommend_cpu_list)?;
            let busy = (busy1 - busy0) as f64 / (total1 - total0).max(1) as f64;
            peaks[i].push((answered_per_s(&peak), p99_ms(&peak), cpu, busy));
        }
    }
    for (result, runs) in results.iter_mut().zip(&peaks) {
        result.peak = median(runs.iter().map(|r| r.0));
        result.peak_p99_ms = median(runs.iter().map(|r| r.1));
        result.recommend_cpu = median(runs.iter().map(|r| r.2));
        result.cpus_busy = median(runs.iter().map(|r| r.3));
    }
    let rate = (results[2].peak * opts.load_share).round() as u64;
    let mut at_rate: Vec<Vec<(f64, f64)>> = vec![Vec::new(); MODES.len()];
    for round in 0..opts.rounds {
        for i in rotated(2, round).into_iter().map(|i| i + 1) {
            let (_server, addr) = serve(MODES[i])?;
            let report = load(addr, opts, Load::Rate(rate), dir)?;
            at_rate[i].push((p99_ms(&report), answered_per_s(&report)));
        }
    }
    for (result, runs) in results.iter_mut().zip(&at_rate).skip(1) {
        result.at_rate_p99_ms = Some(median(runs.iter().map(|r| r.0)));
        result.at_rate_answered = Some(median(runs.iter().map(|r| r.1)));
    }
    let peak_ratio = results[2].peak / results[0].peak.max(1e-9);
    let p99_ratio = results[1].at_rate_p99_ms.unwrap_or(f64::NAN)
        / results[2].at_rate_p99_ms.unwrap_or(f64::NAN);
    let mut table = format!(
        "recommend: seed 000's three designs on the real service (sources answer {} ms late; blocking pool of {} \
         workers; at least {} candidates ranked; recommender on CPUs {} with {} I/O loop(s), the rest on {}; fixed rate {rate}/s = \
         {:.0}% of the offload peak; medians of {} rounds)\n\
         {:<10} {:>10} {:>12} {:>16} {:>12} {:>16} {:>16}\n",
        opts.source_latency_ms,
        opts.workers,
        opts.min_candidates,
        opts.recommend_cpus,
        opts.io_threads,
        opts.other_cpus,
        opts.load_share * 100.0,
        opts.rounds,
        "mode",
        "peak/s",
        "p99 ms peak",
        "recommend CPU",
        "CPUs busy",
        "p99 ms at rate",
        "answered/s",
    );
    for (mode, r) in MODES.iter().zip(&results) {
        let at = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.2}"));
        table.push_str(&format!(
            "{:<10} {:>10.0} {:>12.1} {:>15.0}% {:>11.0}% {:>16} {:>16}\n",
            mode,
            r.peak,
            r.peak_p99_ms,
            r.recommend_cpu * 100.0,
            r.cpus_busy * 100.0,
            at(r.at_rate_p99_ms),
            at(r.at_rate_answered),
        ));
    }
    table.push_str(&format!(
        "offload peak / blocking peak: {peak_ratio:.1}x; inline p99 / offload p99 at {rate}/s: {p99_ratio:.1}x\n"
    ));
    let mode_json = |r: &ModeResult| {
        json!({
            "peak_per_s": r.peak,
            "peak_p99_ms": r.peak_p99_ms,
            "recommend_cpu": r.recommend_cpu,
            "cpus_busy": r.cpus_busy,
            "at_rate_p99_ms": r.at_rate_p99_ms,
            "at_rate_answered_per_s": r.at_rate_answered,
        })
    };
    let json = json!({
        "experiment": "recommend",
        "ratio": peak_ratio,
        "p99_ratio": p99_ratio,
        "rate": rate,
        "source_latency_ms": opts.source_latency_ms,
        "workers": opts.workers,
        "recommend_cpus": opts.recommend_cpus,
        "io_threads": opts.io_threads,
        "blocking": mode_json(&results[0]),
        "inline": mode_json(&results[1]),
        "offload": mode_json(&results[2]),
    });
    Ok(Report { table, json })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_read_as_taskset_reads_them() {
        assert_eq!(cpus_of("0").unwrap(), vec![0]);
        assert_eq!(cpus_of("0-1").unwrap(), vec![0, 1]);
        assert_eq!(cpus_of("0,2-4").unwrap(), vec![0, 2, 3, 4]);
        assert!(cpus_of("zero").is_err());
        assert!(cpus_of("1-").is_err());
    }

    #[test]
    fn this_machines_cpus_are_busy_some_and_never_more_than_all_the_time() {
        let (busy, total) = cpus_busy_ticks(&[0]).unwrap();
        assert!(total > 0 && busy <= total, "{busy} of {total}");
    }

    #[test]
    fn each_round_starts_the_modes_elsewhere() {
        assert_eq!(rotated(3, 0), vec![0, 1, 2]);
        assert_eq!(rotated(3, 1), vec![1, 2, 0]);
    }
}
