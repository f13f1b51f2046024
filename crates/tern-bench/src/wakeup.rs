//! `tern bench wakeup` (seed 002): how fast a mostly idle CPU pool picks up a job when its idle
//! workers are woken LIFO (tern's executor) versus FIFO (the classic `Mutex` + `Condvar` pool).
//!
//! One producer submits jobs one at a time: it sleeps until each job has finished, sleeps for
//! the gap, then submits the next, so the pool is idle most of the time, as a real server's pool
//! is between requests. Each job touches its worker's thread-local working set, so a worker
//! that ran recently finds its cache warm. Measured per job: the hand-off latency from just
//! before submit to the job's first instruction; per mode: the context switches of the worker
//! threads (from `/proc/self/task/*/status`) and how many distinct workers ran jobs.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::hint::black_box;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hdrhistogram::Histogram;
use serde_json::json;
use tern_executor::{current_worker, Config, Executor, WakeOrder};

use crate::Report;

#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// Worker threads in the pool.
    #[arg(long, default_value_t = 8)]
    pub workers: usize,
    /// Jobs measured per wake order.
    #[arg(long, default_value_t = 20_000)]
    pub jobs: usize,
    /// Jobs run before measuring, per wake order (threads started, working sets allocated).
    #[arg(long, default_value_t = 500)]
    pub warmup_jobs: usize,
    /// The measured jobs are run in this many rounds, alternating between the two pools.
    #[arg(long, default_value_t = 10)]
    pub rounds: usize,
    /// Pause between a job's completion and the next submission, in microseconds (a sleep: the
    /// kernel's timer slack, 50 us by default, comes on top).
    #[arg(long, default_value_t = 50)]
    pub gap_us: u64,
    /// Per-worker working set each job reads and writes, in KiB.
    #[arg(long, default_value_t = 128)]
    pub working_set_kib: usize,
    /// How long an idle LIFO worker spins before parking, in microseconds.
    #[arg(long, default_value_t = 20)]
    pub spin_us: u64,
}

thread_local! {
    /// The worker's own data; each job touches every cache line of it.
    static WORKING_SET: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// Reads and writes every cache line of the calling thread's working set.
fn touch_working_set(bytes: usize) -> u64 {
    WORKING_SET.with(|set| {
        let mut set = set.borrow_mut();
        let words = bytes / 8;
        if set.len() != words {
            set.resize(words, 1);
        }
        let mut sum = 0u64;
        for word in set.iter_mut().step_by(64 / 8) {
            *word = word.wrapping_add(1);
            sum = sum.wrapping_add(*word);
        }
        sum
    })
}

/// Context switches of this process's threads whose name starts with `prefix`.
#[derive(Debug, Clone, Copy, Default)]
struct ContextSwitches {
    voluntary: u64,
    involuntary: u64,
}

fn context_switches(prefix: &str) -> anyhow::Result<ContextSwitches> {
    let mut total = ContextSwitches::default();
    for task in std::fs::read_dir("/proc/self/task").context("listing /proc/self/task")? {
        let task = task?.path();
        // A thread may exit between listing and reading; it is not one of ours then.
        let (Ok(name), Ok(status)) = (
            std::fs::read_to_string(task.join("comm")),
            std::fs::read_to_string(task.join("status")),
        ) else {
            continue;
        };
        if !name.starts_with(prefix) {
            continue;
        }
        for line in status.lines() {
            let parse = |count: &str| count.trim().parse::<u64>().context("parsing ctxt_switches");
            if let Some(count) = line.strip_prefix("voluntary_ctxt_switches:") {
                total.voluntary += parse(count)?;
            } else if let Some(count) = line.strip_prefix("nonvoluntary_ctxt_switches:") {
                total.involuntary += parse(count)?;
            }
        }
    }
    Ok(total)
}

/// What one wake order achieved.
#[derive(Debug, Clone)]
pub struct ModeResult {
    pub wake_order: WakeOrder,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// Mean time a job took to touch its working set: shorter when the worker's cache is warm.
    pub job_mean_us: f64,
    pub voluntary_switches_per_job: f64,
    pub involuntary_switches_per_job: f64,
    pub workers_touched: usize,
    pub spin_successes: u64,
    pub parks: u64,
}

/// One pool under test. The two pools are measured in alternating rounds so that load from
/// elsewhere on the machine, which comes and goes, falls on both alike.
struct Contender {
    order: WakeOrder,
    prefix: &'static str,
    executor: Executor,
    latency: Histogram<u64>,
    job_time: Histogram<u64>,
    touched: BTreeSet<usize>,
    switches: ContextSwitches,
    spin_successes: u64,
    parks: u64,
    jobs: u64,
}

impl Contender {
    fn new(order: WakeOrder, options: &Options) -> anyhow::Result<Contender> {
        let prefix = match order {
            WakeOrder::Lifo => "wakeup-lifo",
            WakeOrder::Fifo => "wakeup-fifo",
        };
        let executor = Executor::new(Config {
            workers: options.workers,
            wake_order: order,
            spin: Duration::from_micros(options.spin_us),
            queue_timeout: None,
            max_queued: 16,
            thread_name_prefix: prefix.to_owned(),
        })?;
        Ok(Contender {
            order,
            prefix,
            executor,
            latency: Histogram::new(3)?,
            job_time: Histogram::new(3)?,
            touched: BTreeSet::new(),
            switches: ContextSwitches::default(),
            spin_successes: 0,
            parks: 0,
            jobs: 0,
        })
    }

    /// Submits `jobs` jobs one at a time, each after the previous one finished and a `gap`.
    fn run_round(&mut self, jobs: usize, measured: bool, options: &Options) -> anyhow::Result<()> {
        let working_set = options.working_set_kib * 1024;
        let gap = Duration::from_micros(options.gap_us);
        // Each job reports, once finished, when it started and ended and on which worker.
        let (finished_tx, finished_rx) = mpsc::channel::<(Instant, Instant, Option<usize>)>();
        let switches_before = context_switches(self.prefix)?;
        let stats_before = self.executor.stats().total();
        for _ in 0..jobs {
            let finished = finished_tx.clone();
            let submitted = Instant::now();
            self.executor
                .execute(move |admission| {
                    let start = Instant::now();
                    if admission.is_ok() {
                        black_box(touch_working_set(working_set));
                    }
                    let end = Instant::now();
                    // The producer outlives every job, so the receiver is always there.
                    let _ = finished.send((start, end, current_worker()));
                })
                .map_err(|why| anyhow::anyhow!("submit failed: {why}"))?;
            let (start, end, worker) = finished_rx.recv()?;
            if measured {
                let nanos = start.saturating_duration_since(submitted).as_nanos();
                self.latency.record(u64::try_from(nanos)?.max(1))?;
                let nanos = end.saturating_duration_since(start).as_nanos();
                self.job_time.record(u64::try_from(nanos)?.max(1))?;
                self.touched.insert(worker.context("job ran off the pool")?);
            }
            if !gap.is_zero() {
                thread::sleep(gap);
            }
        }
        if measured {
            let switches_after = context_switches(self.prefix)?;
            let stats_after = self.executor.stats().total();
            self.switches.voluntary += switches_after.voluntary - switches_before.voluntary;
            self.switches.involuntary += switches_after.involuntary - switches_before.involuntary;
            self.spin_successes += stats_after.spin_successes - stats_before.spin_successes;
            self.parks += stats_after.parks - stats_before.parks;
            self.jobs += jobs as u64;
        }
        Ok(())
    }

    fn finish(self) -> ModeResult {
        self.executor.shutdown();
        let micros = |nanos: f64| nanos / 1_000.0;
        let per_job = |count: u64| count as f64 / self.jobs as f64;
        ModeResult {
            wake_order: self.order,
            mean_us: micros(self.latency.mean()),
            p50_us: micros(self.latency.value_at_quantile(0.50) as f64),
            p99_us: micros(self.latency.value_at_quantile(0.99) as f64),
            job_mean_us: micros(self.job_time.mean()),
            voluntary_switches_per_job: per_job(self.switches.voluntary),
            involuntary_switches_per_job: per_job(self.switches.involuntary),
            workers_touched: self.touched.len(),
            spin_successes: self.spin_successes,
            parks: self.parks,
        }
    }
}

/// Warms both pools up, then measures them in `options.rounds` alternating rounds.
fn measure(options: &Options) -> anyhow::Result<(ModeResult, ModeResult)> {
    let mut lifo = Contender::new(WakeOrder::Lifo, options)?;
    let mut fifo = Contender::new(WakeOrder::Fifo, options)?;
    lifo.run_round(options.warmup_jobs, false, options)?;
    fifo.run_round(options.warmup_jobs, false, options)?;
    let rounds = options.rounds.clamp(1, options.jobs);
    for round in 0..rounds {
        // Spread the remainder so the rounds add up to exactly `options.jobs`.
        let jobs = options.jobs / rounds + usize::from(round < options.jobs % rounds);
        lifo.run_round(jobs, true, options)?;
        fifo.run_round(jobs, true, options)?;
    }
    Ok((lifo.finish(), fifo.finish()))
}

fn mode_json(mode: &ModeResult) -> serde_json::Value {
    json!({
        "mean_us": mode.mean_us,
        "p50_us": mode.p50_us,
        "p99_us": mode.p99_us,
        "job_mean_us": mode.job_mean_us,
        "context_switches_per_job": mode.voluntary_switches_per_job + mode.involuntary_switches_per_job,
        "voluntary_switches_per_job": mode.voluntary_switches_per_job,
        "involuntary_switches_per_job": mode.involuntary_switches_per_job,
        "workers_touched": mode.workers_touched,
        "spin_successes": mode.spin_successes,
        "parks": mode.parks,
    })
}

pub fn run(options: &Options) -> anyhow::Result<Report> {
    anyhow::ensure!(options.jobs > 0, "--jobs must be at least 1");
    let (lifo, fifo) = measure(options)?;
    let ratio = fifo.mean_us / lifo.mean_us;
    let p99_ratio = fifo.p99_us / lifo.p99_us;
    let mut table = format!(
        "wakeup: {} workers, {} jobs one at a time, {} us gap, {} KiB working set, LIFO spin {} us\n",
        options.workers, options.jobs, options.gap_us, options.working_set_kib, options.spin_us
    );
    writeln!(
        table,
        "{:<6} {:>9} {:>9} {:>9} {:>9} {:>11} {:>11} {:>8} {:>9} {:>8}",
        "order",
        "mean us",
        "p50 us",
        "p99 us",
        "job us",
        "vol cs/job",
        "invol cs/job",
        "workers",
        "spin hits",
        "parks"
    )?;
    for mode in [&lifo, &fifo] {
        writeln!(
            table,
            "{:<6} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>11.2} {:>11.2} {:>8} {:>9} {:>8}",
            format!("{:?}", mode.wake_order).to_lowercase(),
            mode.mean_us,
            mode.p50_us,
            mode.p99_us,
            mode.job_mean_us,
            mode.voluntary_switches_per_job,
            mode.involuntary_switches_per_job,
            mode.workers_touched,
            mode.spin_successes,
            mode.parks
        )?;
    }
    writeln!(
        table,
        "hand-off latency FIFO/LIFO: mean {ratio:.2}x, p99 {p99_ratio:.2}x (job us: time in the job)"
    )?;
    let json = json!({
        "experiment": "wakeup",
        "ratio": ratio,
        "p99_ratio": p99_ratio,
        "lifo": mode_json(&lifo),
        "fifo": mode_json(&fifo),
        "options": {
            "workers": options.workers,
            "jobs": options.jobs,
            "rounds": options.rounds,
            "gap_us": options.gap_us,
            "working_set_kib": options.working_set_kib,
            "spin_us": options.spin_us,
        },
    });
    Ok(Report { table, json })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifo_keeps_to_fewer_workers_than_fifo_and_reports_every_figure() {
        let options = Options {
            workers: 8,
            jobs: 400,
            warmup_jobs: 50,
            rounds: 4,
            // Long enough for the last worker to park before the next job even on a busy machine.
            gap_us: 200,
            working_set_kib: 16,
            spin_us: 20,
        };
        let report = run(&options).unwrap();
        let json = &report.json;
        assert_eq!(json["experiment"], "wakeup");
        let touched = |mode: &str| json[mode]["workers_touched"].as_u64().unwrap();
        // FIFO hands successive jobs to the longest-idle worker, so it cycles through all 8.
        assert_eq!(touched("fifo"), 8, "{}", report.table);
        assert!(touched("lifo") < touched("fifo"), "{}", report.table);
        for mode in ["lifo", "fifo"] {
            let figure = |name: &str| json[mode][name].as_f64().unwrap();
            assert!(figure("p50_us") > 0.0 && figure("p50_us") <= figure("p99_us"));
            assert!(figure("mean_us") > 0.0 && figure("job_mean_us") > 0.0);
            let switches =
                figure("voluntary_switches_per_job") + figure("involuntary_switches_per_job");
            assert!((figure("context_switches_per_job") - switches).abs() < 1e-9);
        }
        // FIFO workers go back to sleep after (nearly) every job.
        assert!(json["fifo"]["voluntary_switches_per_job"].as_f64().unwrap() >= 0.8);
        assert!(json["fifo"]["parks"].as_u64().unwrap() >= 360);
        let ratio = json["ratio"].as_f64().unwrap();
        let expected =
            json["fifo"]["mean_us"].as_f64().unwrap() / json["lifo"]["mean_us"].as_f64().unwrap();
        assert!((ratio - expected).abs() < 1e-9);
        assert!(json["p99_ratio"].as_f64().unwrap() > 0.0);
    }

    #[test]
    fn context_switches_are_read_for_named_threads_only() {
        let worker = thread::Builder::new()
            .name("cs-probe-thread".into())
            .spawn(|| {
                for _ in 0..20 {
                    thread::sleep(Duration::from_micros(100));
                }
                context_switches("cs-probe").unwrap()
            })
            .unwrap();
        let seen = worker.join().unwrap();
        assert!(seen.voluntary >= 20, "{seen:?}");
        let none = context_switches("no-such-thread-prefix").unwrap();
        assert_eq!((none.voluntary, none.involuntary), (0, 0));
    }
}
