//! `tern bench wakeup` (seed 002): how fast a CPU pool hands a job to a worker when its idle
//! workers are woken LIFO (tern's executor: most recently idle first, after a short spin) versus
//! FIFO (the classic `Mutex<VecDeque>` + `Condvar` pool, which wakes the longest-idle thread).
//!
//! The default arrivals are the regime the seed's figures describe, a lightly loaded pool: one
//! producer submits a job, busy-waits until it has run, waits a short gap (`--gap-us`, 10 µs)
//! and submits the next. The pool is idle between jobs, so every FIFO hand-off wakes the
//! longest-idle thread through the condvar's futex, cycling through all 8 workers, while
//! the LIFO pool's most recently idle worker is still spinning and takes the job at once.
//! `--arrivals poisson` is the harder steady-load case: producer threads submit open loop
//! (without waiting for earlier jobs) at Poisson arrivals, each gap a busy-wait drawn from an
//! exponential distribution, so some gaps outlast the spin and jobs that arrive while the
//! spinner is busy wake a parked worker. `--arrivals sleep` is the closed loop with a sleep
//! between jobs, which lasts at least the kernel's 50 µs timer slack, so the pool is idle and
//! every hand-off in both pools is a futex wake-up.
//!
//! Each job touches its worker's thread-local working set, so a worker that ran recently finds
//! its cache warm. Measured per job: the hand-off latency from just before submit to the job's
//! first instruction, and the time the job took; per pool: the context switches of its worker
//! threads (from `/proc/self/task/*/status`), how many distinct workers ran jobs (and how few
//! ran 99% of them), and the LIFO pool's spins, spin hits and parks. The pools run in
//! alternating rounds so that load from elsewhere on the machine, which comes and goes, falls
//! on both alike. `--pin` keeps the producers and the workers on separate CPUs.
//!
//! What the figures depend on: a parked worker costs a futex wake-up in both pools, so LIFO's
//! edge comes from its spinner catching jobs that arrive within the spin, and is as large as
//! the share of gaps shorter than the spin. On a machine whose cores are taken by other
//! processes, neither spinner nor producer has a CPU of its own and the scheduler's delays
//! dominate both pools.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::hint::{self, black_box};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Exp};
use serde_json::json;
use tern_executor::{current_worker, Config, Executor, WakeOrder};

use crate::Report;

/// How jobs arrive at the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Arrivals {
    /// Open loop: each producer busy-waits an exponentially distributed gap (mean `--gap-us`)
    /// between submissions, whether or not earlier jobs have finished.
    Poisson,
    /// Closed loop, one job at a time: wait for the job to finish, sleep `--gap-us`, submit the
    /// next. The pool is idle between jobs.
    Sleep,
    /// Closed loop, one job at a time like `sleep`, but the producer busy-waits for the job to
    /// finish and then for `--gap-us`, so gaps shorter than the kernel's timer slack are exact:
    /// a lightly loaded pool whose next job comes soon after the last one.
    Busy,
}

impl Arrivals {
    fn name(self) -> &'static str {
        match self {
            Arrivals::Poisson => "poisson",
            Arrivals::Sleep => "sleep",
            Arrivals::Busy => "busy",
        }
    }
}

#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// Worker threads in each pool.
    #[arg(long, default_value_t = 8)]
    pub workers: usize,
    /// Jobs measured per wake order.
    #[arg(long, default_value_t = 20_000)]
    pub jobs: usize,
    /// Jobs run before measuring, per wake order (threads started, working sets allocated).
    #[arg(long, default_value_t = 1_000)]
    pub warmup_jobs: usize,
    /// The measured jobs are run in this many rounds, alternating between the two pools.
    #[arg(long, default_value_t = 10)]
    pub rounds: usize,
    /// How jobs arrive: `busy` (one at a time, a busy-waited gap), `poisson` (steady load, open
    /// loop) or `sleep` (one at a time, a slept gap).
    #[arg(long, value_enum, default_value_t = Arrivals::Busy)]
    pub arrivals: Arrivals,
    /// Mean gap between a producer's submissions in microseconds (`poisson`: a busy-wait drawn
    /// from an exponential distribution), or the wait after each job (`busy`, `sleep`).
    #[arg(long, default_value_t = 10.0)]
    pub gap_us: f64,
    /// Producer threads submitting concurrently, each at the mean gap (`poisson` only).
    #[arg(long, default_value_t = 1)]
    pub producers: usize,
    /// Per-worker working set each job reads and writes, in KiB.
    #[arg(long, default_value_t = 128)]
    pub working_set_kib: usize,
    /// How long an idle LIFO worker spins before parking, in microseconds.
    #[arg(long, default_value_t = 20)]
    pub spin_us: u64,
    /// Seed of the arrival gaps, so runs offer the same load.
    #[arg(long, default_value_t = 2)]
    pub seed: u64,
    /// Pin the producers to the first CPU this process may use and both pools' workers to the
    /// others (like a server whose I/O thread has a core to itself), so the kernel cannot put
    /// a spinning worker on the producer's CPU, where it would only delay the next job.
    #[arg(long)]
    pub pin: bool,
}

/// The most jobs a pool may hold queued: far above what a pool keeping up ever holds, it only
/// bounds the memory of a run whose workers are starved of CPU for a long stretch.
const MAX_QUEUED: usize = 65_536;

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

/// Waits for `deadline` without sleeping: a sleep would last at least the kernel's timer slack.
fn busy_wait_until(deadline: Instant) {
    while Instant::now() < deadline {
        hint::spin_loop();
    }
}

/// Context switches of this process's threads whose name starts with `prefix`.
#[derive(Debug, Clone, Copy, Default)]
struct ContextSwitches {
    voluntary: u64,
    involuntary: u64,
}

fn context_switches(prefix: &str) -> anyhow::Result<ContextSwitches> {
    let mut total = ContextSwitches::default();
    for task in threads_named(prefix)? {
        // A thread may exit between listing and reading; it is not one of ours then.
        let Ok(status) = std::fs::read_to_string(task.join("status")) else {
            continue;
        };
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

/// The `/proc/self/task/<tid>` directories of this process's threads whose name starts with
/// `prefix`.
fn threads_named(prefix: &str) -> anyhow::Result<Vec<PathBuf>> {
    let mut threads = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").context("listing /proc/self/task")? {
        let task = task?.path();
        // A thread may exit between listing and reading; it is not one of ours then.
        let Ok(name) = std::fs::read_to_string(task.join("comm")) else {
            continue;
        };
        if name.starts_with(prefix) {
            threads.push(task);
        }
    }
    Ok(threads)
}

/// Where `--pin` puts the threads.
#[derive(Debug, Clone)]
struct Placement {
    producers: Vec<usize>,
    workers: Vec<usize>,
}

impl Placement {
    fn new() -> anyhow::Result<Placement> {
        let allowed = allowed_cpus()?;
        anyhow::ensure!(
            allowed.len() >= 2,
            "--pin needs at least 2 CPUs, this process may use {}",
            cpu_list(&allowed)
        );
        Ok(Placement {
            producers: allowed[..1].to_vec(),
            workers: allowed[1..].to_vec(),
        })
    }
}

/// The CPUs this process may run on.
/// CPUs as `taskset -c` writes them: `0,2,5`.
fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn allowed_cpus() -> anyhow::Result<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the kernel writes at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).context("sched_getaffinity");
    }
    let cpu_slots = 8 * std::mem::size_of_val(&set);
    // SAFETY: CPU_ISSET reads `set` at an index below its size.
    Ok((0..cpu_slots)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

/// Restricts thread `tid` (0: the calling thread) to `cpus`.
fn pin_thread(tid: libc::pid_t, cpus: &[usize]) -> anyhow::Result<()> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        // SAFETY: `cpu` comes from `allowed_cpus`, so it is below the set's size.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_setaffinity(tid, std::mem::size_of_val(&set), &set) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("pinning thread {tid} to CPUs {}", cpu_list(cpus)));
    }
    Ok(())
}

/// Pins this process's threads whose name starts with `prefix` to `cpus`; returns how many.
fn pin_named_threads(prefix: &str, cpus: &[usize]) -> anyhow::Result<usize> {
    let threads = threads_named(prefix)?;
    for task in &threads {
        let tid = task
            .file_name()
            .and_then(|tid| tid.to_str())
            .and_then(|tid| tid.parse().ok())
            .context("a /proc/self/task entry that is not a thread id")?;
        pin_thread(tid, cpus)?;
    }
    Ok(threads.len())
}

/// What one job reports, written by the worker that ran it after both of its timestamps were
/// taken (so writing it costs neither figure anything).
#[derive(Default)]
struct JobRecord {
    handoff_nanos: AtomicU64,
    run_nanos: AtomicU64,
    /// The worker id plus one; 0 while the job has not run (or ran off the pool).
    worker: AtomicUsize,
}

/// The records of one round's jobs, indexed by submission order, and how many have finished.
struct RoundRecords {
    jobs: Box<[JobRecord]>,
    finished: AtomicUsize,
}

impl RoundRecords {
    fn new(jobs: usize) -> RoundRecords {
        RoundRecords {
            jobs: (0..jobs).map(|_| JobRecord::default()).collect(),
            finished: AtomicUsize::new(0),
        }
    }

    fn record(&self, index: usize, handoff: Duration, run: Duration, worker: Option<usize>) {
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let record = &self.jobs[index];
        record
            .handoff_nanos
            .store(nanos(handoff), Ordering::Relaxed);
        record.run_nanos.store(nanos(run), Ordering::Relaxed);
        record
            .worker
            .store(worker.map_or(0, |w| w + 1), Ordering::Relaxed);
        // Publishes the record to the reader that sees the count.
        self.finished.fetch_add(1, Ordering::Release);
    }

    /// Waits (sleeping, so the workers have the CPU) until every job has reported, for at most
    /// `limit`.
    fn wait_all_finished(&self, limit: Duration) -> anyhow::Result<()> {
        let started = Instant::now();
        while self.finished.load(Ordering::Acquire) < self.jobs.len() {
            anyhow::ensure!(
                started.elapsed() < limit,
                "{} of {} jobs still unfinished after {:.1} s",
                self.jobs.len() - self.finished.load(Ordering::Acquire),
                self.jobs.len(),
                limit.as_secs_f64()
            );
            thread::sleep(Duration::from_micros(100));
        }
        Ok(())
    }
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
    /// The fewest workers that together ran 99% of the jobs.
    pub workers_for_99pct: usize,
    /// Jobs each worker ran, busiest first.
    pub jobs_per_worker: Vec<u64>,
    /// Times an idle worker spun before parking (LIFO only).
    pub spins: u64,
    /// Jobs found by a spinning worker, without a park and a wake (LIFO only).
    pub spin_successes: u64,
    pub parks: u64,
    /// The mean gap between submissions actually achieved, all producers together.
    pub offered_gap_us: f64,
}

/// One pool under test and what has been measured on it so far.
struct Contender {
    order: WakeOrder,
    /// Names this pool's threads, unique in the process so that pools running side by side
    /// (tests in parallel) do not count each other's context switches.
    prefix: String,
    executor: Executor,
    latency: Histogram<u64>,
    job_time: Histogram<u64>,
    /// Jobs each worker ran, indexed by worker id.
    jobs_per_worker: Vec<u64>,
    switches: ContextSwitches,
    spins: u64,
    spin_successes: u64,
    parks: u64,
    jobs: u64,
    submitting_time: Duration,
    /// Seeds the next round's arrival gaps; each round gets its own.
    next_seed: u64,
    /// Where the producers run (`--pin`); anywhere if `None`.
    producer_cpus: Option<Vec<usize>>,
}

impl Contender {
    fn new(
        order: WakeOrder,
        options: &Options,
        placement: Option<&Placement>,
    ) -> anyhow::Result<Contender> {
        static POOLS: AtomicUsize = AtomicUsize::new(0);
        // Thread names hold 15 bytes: "wk<n>-lifo-<worker>" fits.
        let prefix = format!(
            "wk{}-{}",
            POOLS.fetch_add(1, Ordering::Relaxed),
            match order {
                WakeOrder::Lifo => "lifo",
                WakeOrder::Fifo => "fifo",
            }
        );
        let executor = Executor::new(Config {
            workers: options.workers,
            wake_order: order,
            spin: Duration::from_micros(options.spin_us),
            queue_timeout: None,
            max_queued: MAX_QUEUED,
            thread_name_prefix: prefix.clone(),
        })?;
        if let Some(placement) = placement {
            // Each worker names its thread when it starts, which may be after `new` returned.
            let started = Instant::now();
            while pin_named_threads(&prefix, &placement.workers)? < options.workers {
                anyhow::ensure!(
                    started.elapsed() < Duration::from_secs(5),
                    "{prefix} workers did not start within 5 s"
                );
                thread::sleep(Duration::from_millis(1));
            }
        }
        Ok(Contender {
            order,
            prefix,
            executor,
            latency: Histogram::new(3)?,
            job_time: Histogram::new(3)?,
            jobs_per_worker: vec![0; options.workers],
            switches: ContextSwitches::default(),
            spins: 0,
            spin_successes: 0,
            parks: 0,
            jobs: 0,
            submitting_time: Duration::ZERO,
            // Both pools see the same sequence of gaps, round for round.
            next_seed: options.seed,
            producer_cpus: placement.map(|placement| placement.producers.clone()),
        })
    }

    /// Runs `jobs` jobs arriving as `options.arrivals` says, and adds what they measured when
    /// `measured`.
    fn run_round(&mut self, jobs: usize, measured: bool, options: &Options) -> anyhow::Result<()> {
        let records = Arc::new(RoundRecords::new(jobs));
        let switches_before = context_switches(&self.prefix)?;
        let stats_before = self.executor.stats().total();
        let seed = self.next_seed;
        self.next_seed = self.next_seed.wrapping_add(options.producers as u64);
        let submitting_time = self.submit_round(&records, seed, options)?;
        // Far longer than any round takes, even on a machine busy with other work.
        records.wait_all_finished(Duration::from_secs(60))?;
        if !measured {
            return Ok(());
        }
        let switches_after = context_switches(&self.prefix)?;
        let stats_after = self.executor.stats().total();
        self.switches.voluntary += switches_after.voluntary - switches_before.voluntary;
        self.switches.involuntary += switches_after.involuntary - switches_before.involuntary;
        self.spins += stats_after.spins - stats_before.spins;
        self.spin_successes += stats_after.spin_successes - stats_before.spin_successes;
        self.parks += stats_after.parks - stats_before.parks;
        self.jobs += jobs as u64;
        self.submitting_time += submitting_time;
        for job in records.jobs.iter() {
            let worker = job.worker.load(Ordering::Relaxed);
            anyhow::ensure!(worker != 0, "a job ran off the pool");
            *self
                .jobs_per_worker
                .get_mut(worker - 1)
                .context("a job ran on a worker the pool does not have")? += 1;
            self.latency
                .record(job.handoff_nanos.load(Ordering::Relaxed).max(1))?;
            self.job_time
                .record(job.run_nanos.load(Ordering::Relaxed).max(1))?;
        }
        Ok(())
    }

    /// Submits job `index` of the round; it records its hand-off latency and run time, then
    /// tells `finished`, if given.
    fn submit(
        executor: &Executor,
        records: &Arc<RoundRecords>,
        index: usize,
        working_set: usize,
        finished: Option<mpsc::Sender<()>>,
    ) -> anyhow::Result<()> {
        let records = Arc::clone(records);
        let submitted = Instant::now();
        executor
            .execute(move |admission| {
                let start = Instant::now();
                if admission.is_ok() {
                    black_box(touch_working_set(working_set));
                }
                let end = Instant::now();
                records.record(index, start - submitted, end - start, current_worker());
                if let Some(finished) = finished {
                    // The producer waits for this message, so its receiver is still there.
                    let _ = finished.send(());
                }
            })
            .map_err(|why| anyhow::anyhow!("submit failed: {why}"))
    }

    /// Runs the round's producers, each on its own thread (pinned if `--pin`); returns the time
    /// from the start to the last submission.
    fn submit_round(
        &self,
        records: &Arc<RoundRecords>,
        seed: u64,
        options: &Options,
    ) -> anyhow::Result<Duration> {
        // Validated: 1 for sleep arrivals.
        let producers = options.producers;
        let start = Instant::now();
        let submitted_all = thread::scope(|scope| {
            let handles: Vec<_> = (0..producers)
                .map(|producer| {
                    scope.spawn(move || -> anyhow::Result<Instant> {
                        if let Some(cpus) = &self.producer_cpus {
                            pin_thread(0, cpus)?;
                        }
                        match options.arrivals {
                            Arrivals::Poisson => {
                                let rng = StdRng::seed_from_u64(seed.wrapping_add(producer as u64));
                                let jobs = (producer..records.jobs.len()).step_by(producers);
                                self.submit_poisson(records, jobs, start, rng, options)?;
                            }
                            Arrivals::Sleep | Arrivals::Busy => {
                                self.submit_one_at_a_time(records, options)?
                            }
                        }
                        Ok(Instant::now())
                    })
                })
                .collect();
            let mut last = start;
            for handle in handles {
                let done = handle
                    .join()
                    .map_err(|_| anyhow::anyhow!("producer panicked"))??;
                last = last.max(done);
            }
            anyhow::Ok(last)
        })?;
        Ok(submitted_all - start)
    }

    /// Submits jobs `jobs` of the round at Poisson arrivals from `start` on.
    fn submit_poisson(
        &self,
        records: &Arc<RoundRecords>,
        jobs: impl Iterator<Item = usize>,
        start: Instant,
        mut rng: StdRng,
        options: &Options,
    ) -> anyhow::Result<()> {
        let gaps = Exp::new(1.0 / options.gap_us).context("--gap-us must be positive")?;
        let working_set = options.working_set_kib * 1024;
        let mut next = start;
        for index in jobs {
            next += Duration::from_secs_f64(gaps.sample(&mut rng) / 1e6);
            // Behind schedule (preempted), submit at once to catch up, as the requests a server
            // could not read meanwhile arrive all together.
            busy_wait_until(next);
            Self::submit(&self.executor, records, index, working_set, None)?;
        }
        Ok(())
    }

    /// Submits the round's jobs one at a time, each after the previous one finished and a gap of
    /// `options.gap_us`, slept (`sleep`) or busy-waited (`busy`).
    fn submit_one_at_a_time(
        &self,
        records: &Arc<RoundRecords>,
        options: &Options,
    ) -> anyhow::Result<()> {
        let working_set = options.working_set_kib * 1024;
        let gap = Duration::from_secs_f64(options.gap_us / 1e6);
        let (finished_tx, finished_rx) = mpsc::channel();
        for index in 0..records.jobs.len() {
            Self::submit(
                &self.executor,
                records,
                index,
                working_set,
                Some(finished_tx.clone()),
            )?;
            if options.arrivals == Arrivals::Busy {
                // Waiting without parking: a parked producer's own wake-up would lengthen the gap.
                loop {
                    match finished_rx.try_recv() {
                        Ok(()) => break,
                        Err(mpsc::TryRecvError::Empty) => hint::spin_loop(),
                        Err(mpsc::TryRecvError::Disconnected) => {
                            anyhow::bail!("a job ended without reporting")
                        }
                    }
                }
                busy_wait_until(Instant::now() + gap);
            } else {
                finished_rx.recv()?;
                if !gap.is_zero() {
                    thread::sleep(gap);
                }
            }
        }
        Ok(())
    }

    fn finish(self) -> ModeResult {
        self.executor.shutdown();
        let mut busiest_first = self.jobs_per_worker.clone();
        busiest_first.sort_unstable_by(|a, b| b.cmp(a));
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
            workers_touched: self
                .jobs_per_worker
                .iter()
                .filter(|&&jobs| jobs > 0)
                .count(),
            workers_for_99pct: workers_for_share(&busiest_first, 0.99),
            jobs_per_worker: busiest_first,
            spins: self.spins,
            spin_successes: self.spin_successes,
            parks: self.parks,
            offered_gap_us: micros(self.submitting_time.as_nanos() as f64) / self.jobs as f64,
        }
    }
}

/// The fewest workers that together ran at least `share` of all jobs.
/// `busiest_first`: jobs per worker, sorted busiest first.
fn workers_for_share(busiest_first: &[u64], share: f64) -> usize {
    let total: u64 = busiest_first.iter().sum();
    let mut covered = 0;
    for (count, jobs) in busiest_first.iter().enumerate() {
        if covered as f64 >= share * total as f64 {
            return count;
        }
        covered += jobs;
    }
    busiest_first.len()
}

/// Warms both pools up, then measures them in `options.rounds` alternating rounds.
fn measure(options: &Options) -> anyhow::Result<(ModeResult, ModeResult)> {
    let placement = options.pin.then(Placement::new).transpose()?;
    let mut lifo = Contender::new(WakeOrder::Lifo, options, placement.as_ref())?;
    let mut fifo = Contender::new(WakeOrder::Fifo, options, placement.as_ref())?;
    if options.warmup_jobs > 0 {
        lifo.run_round(options.warmup_jobs, false, options)?;
        fifo.run_round(options.warmup_jobs, false, options)?;
    }
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
        "workers_for_99pct": mode.workers_for_99pct,
        "jobs_per_worker": mode.jobs_per_worker,
        "spins": mode.spins,
        "spin_successes": mode.spin_successes,
        "parks": mode.parks,
        "offered_gap_us": mode.offered_gap_us,
    })
}

fn validate(options: &Options) -> anyhow::Result<()> {
    anyhow::ensure!(options.jobs > 0, "--jobs must be at least 1");
    anyhow::ensure!(
        (1..=tern_executor::MAX_WORKERS).contains(&options.workers),
        "--workers must be between 1 and {}",
        tern_executor::MAX_WORKERS
    );
    anyhow::ensure!(
        options.gap_us.is_finite() && options.gap_us >= 0.0,
        "--gap-us must be a finite number of microseconds, at least 0"
    );
    match options.arrivals {
        Arrivals::Poisson => {
            anyhow::ensure!(
                options.gap_us > 0.0,
                "--gap-us must be above 0 for poisson arrivals"
            );
            anyhow::ensure!(
                (1..=64).contains(&options.producers),
                "--producers must be between 1 and 64"
            );
        }
        Arrivals::Sleep | Arrivals::Busy => anyhow::ensure!(
            options.producers == 1,
            "--producers is for poisson arrivals; {} arrivals have one producer",
            options.arrivals.name()
        ),
    }
    Ok(())
}

pub fn run(options: &Options) -> anyhow::Result<Report> {
    validate(options)?;
    let (lifo, fifo) = measure(options)?;
    let ratio = fifo.mean_us / lifo.mean_us;
    let p99_ratio = fifo.p99_us / lifo.p99_us;
    let producers = options.producers;
    let mut table = match options.arrivals {
        Arrivals::Poisson => format!(
            "wakeup: {} workers, {} jobs, {producers} producer(s) at Poisson arrivals, mean gap {} us each (busy-wait)",
            options.workers, options.jobs, options.gap_us
        ),
        Arrivals::Sleep | Arrivals::Busy => format!(
            "wakeup: {} workers, {} jobs one at a time, {} us {} between them",
            options.workers,
            options.jobs,
            options.gap_us,
            if options.arrivals == Arrivals::Busy {
                "busy-wait"
            } else {
                "sleep"
            }
        ),
    };
    writeln!(
        table,
        ", {} KiB working set, LIFO spin {} us{}",
        options.working_set_kib,
        options.spin_us,
        if options.pin {
            ", producers and workers pinned apart"
        } else {
            ""
        }
    )?;
    writeln!(
        table,
        "{:<6} {:>9} {:>9} {:>9} {:>9} {:>11} {:>11} {:>8} {:>8} {:>8} {:>9} {:>8} {:>8}",
        "order",
        "mean us",
        "p50 us",
        "p99 us",
        "job us",
        "vol cs/job",
        "invol cs/job",
        "workers",
        "w 99%",
        "spins",
        "spin hits",
        "parks",
        "gap us"
    )?;
    for mode in [&lifo, &fifo] {
        writeln!(
            table,
            "{:<6} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>11.2} {:>11.2} {:>8} {:>8} {:>8} {:>9} {:>8} {:>8.2}",
            mode.wake_order.name(),
            mode.mean_us,
            mode.p50_us,
            mode.p99_us,
            mode.job_mean_us,
            mode.voluntary_switches_per_job,
            mode.involuntary_switches_per_job,
            mode.workers_touched,
            mode.workers_for_99pct,
            mode.spins,
            mode.spin_successes,
            mode.parks,
            mode.offered_gap_us
        )?;
    }
    writeln!(
        table,
        "hand-off latency FIFO/LIFO: mean {ratio:.2}x, p99 {p99_ratio:.2}x (job us: time in the job; w 99%: fewest workers that ran 99% of the jobs; gap us: achieved time per submission)"
    )?;
    let json = json!({
        "experiment": "wakeup",
        "ratio": ratio,
        "p99_ratio": p99_ratio,
        "lifo": mode_json(&lifo),
        "fifo": mode_json(&fifo),
        "options": {
            "arrivals": options.arrivals.name(),
            "producers": producers,
            "workers": options.workers,
            "jobs": options.jobs,
            "rounds": options.rounds,
            "gap_us": options.gap_us,
            "working_set_kib": options.working_set_kib,
            "spin_us": options.spin_us,
            "seed": options.seed,
            "pin": options.pin,
        },
    });
    Ok(Report { table, json })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(arrivals: Arrivals, gap_us: f64) -> Options {
        Options {
            workers: 8,
            jobs: 400,
            warmup_jobs: 50,
            rounds: 4,
            arrivals,
            gap_us,
            producers: 1,
            working_set_kib: 16,
            spin_us: 20,
            seed: 7,
            pin: false,
        }
    }

    /// The figures every run reports, and how they must relate.
    fn check_report(report: &Report, options: &Options) {
        let json = &report.json;
        assert_eq!(json["experiment"], "wakeup");
        assert_eq!(json["options"]["arrivals"], options.arrivals.name());
        for mode in ["lifo", "fifo"] {
            let figure = |name: &str| json[mode][name].as_f64().unwrap();
            assert!(figure("p50_us") > 0.0 && figure("p50_us") <= figure("p99_us"));
            assert!(figure("mean_us") > 0.0 && figure("job_mean_us") > 0.0);
            let switches =
                figure("voluntary_switches_per_job") + figure("involuntary_switches_per_job");
            assert!((figure("context_switches_per_job") - switches).abs() < 1e-9);
            assert!(figure("offered_gap_us") > 0.0);
        }
        let ratio = json["ratio"].as_f64().unwrap();
        let expected =
            json["fifo"]["mean_us"].as_f64().unwrap() / json["lifo"]["mean_us"].as_f64().unwrap();
        assert!((ratio - expected).abs() < 1e-9);
        let p99_expected =
            json["fifo"]["p99_us"].as_f64().unwrap() / json["lifo"]["p99_us"].as_f64().unwrap();
        assert!((json["p99_ratio"].as_f64().unwrap() - p99_expected).abs() < 1e-9);
        // The FIFO pool never spins.
        assert_eq!(json["fifo"]["spins"], 0, "{}", report.table);
    }

    #[test]
    fn sleep_arrivals_keep_lifo_to_fewer_workers_than_fifo() {
        // Long enough for the last worker to park before the next job even on a busy machine.
        let options = small(Arrivals::Sleep, 200.0);
        let report = run(&options).unwrap();
        check_report(&report, &options);
        let json = &report.json;
        let touched = |mode: &str| json[mode]["workers_touched"].as_u64().unwrap();
        // FIFO hands successive jobs to the longest-idle worker, so it cycles through all 8.
        assert_eq!(touched("fifo"), 8, "{}", report.table);
        assert!(touched("lifo") < touched("fifo"), "{}", report.table);
        let for_99pct = |mode: &str| json[mode]["workers_for_99pct"].as_u64().unwrap();
        assert!(for_99pct("lifo") <= touched("lifo"), "{}", report.table);
        assert!(for_99pct("fifo") >= 7, "{}", report.table);
        // FIFO workers go back to sleep after (nearly) every job.
        assert!(json["fifo"]["voluntary_switches_per_job"].as_f64().unwrap() >= 0.8);
        assert!(json["fifo"]["parks"].as_u64().unwrap() >= 360);
        // Each job waits out at least the sleep before the next is submitted.
        assert!(json["lifo"]["offered_gap_us"].as_f64().unwrap() >= 200.0);
    }

    #[test]
    fn busy_arrivals_leave_the_pool_idle_between_jobs() {
        let options = small(Arrivals::Busy, 10.0);
        let report = run(&options).unwrap();
        check_report(&report, &options);
        let json = &report.json;
        // One job at a time: each FIFO job wakes the longest-idle worker, round-robin.
        assert_eq!(json["fifo"]["workers_touched"], 8, "{}", report.table);
        assert!(json["fifo"]["parks"].as_u64().unwrap() >= 360);
        // An idle LIFO worker spins before parking (whether the spin catches the next job
        // depends on it having a CPU while the producer runs, which a test cannot count on).
        assert!(
            json["lifo"]["spins"].as_u64().unwrap() > 0,
            "{}",
            report.table
        );
        // The busy-waited gap is exact: each submission comes at least the gap after the last.
        for mode in ["lifo", "fifo"] {
            assert!(json[mode]["offered_gap_us"].as_f64().unwrap() >= 10.0);
        }
    }

    #[test]
    fn poisson_arrivals_reach_spinning_lifo_workers_and_parked_fifo_workers() {
        let mut options = small(Arrivals::Poisson, 10.0);
        options.producers = 2;
        let report = run(&options).unwrap();
        check_report(&report, &options);
        let json = &report.json;
        assert_eq!(json["options"]["producers"], 2);
        // FIFO workers have no spin, so they wait for jobs parked on the condvar. (How many
        // distinct FIFO workers run at 5 us gaps depends on which ones the OS schedules; the
        // sleep-arrivals test checks the round-robin where it is deterministic.)
        assert!(
            json["fifo"]["parks"].as_u64().unwrap() > 0,
            "{}",
            report.table
        );
        // An idle LIFO worker spins before parking (how often the spin finds a job depends on
        // whether the spinner has a CPU of its own, which a test cannot count on).
        let lifo = |name: &str| json["lifo"][name].as_u64().unwrap();
        assert!(lifo("spins") > 0, "{}", report.table);
        assert!(lifo("spin_successes") <= lifo("spins"), "{}", report.table);
        // The busy-wait never runs ahead of the schedule: 2 producers at a mean gap of 10 us
        // each give at least ~5 us per submission. (How far behind it falls depends on the
        // producers being preempted, which on a shared 2-core machine a test cannot rule out.)
        for mode in ["lifo", "fifo"] {
            let gap = json[mode]["offered_gap_us"].as_f64().unwrap();
            assert!(gap >= 4.0, "{}", report.table);
        }
    }

    #[test]
    fn bad_options_are_refused_with_a_clear_error() {
        let mut options = small(Arrivals::Poisson, 0.0);
        let error = run(&options).unwrap_err().to_string();
        assert!(error.contains("--gap-us"), "{error}");
        options.gap_us = 10.0;
        options.producers = 0;
        let error = run(&options).unwrap_err().to_string();
        assert!(error.contains("--producers"), "{error}");
        options.arrivals = Arrivals::Sleep;
        options.producers = 2;
        let error = run(&options).unwrap_err().to_string();
        assert!(error.contains("--producers"), "{error}");
        options.producers = 1;
        options.jobs = 0;
        let error = run(&options).unwrap_err().to_string();
        assert!(error.contains("--jobs"), "{error}");
    }

    #[test]
    fn workers_for_a_share_counts_the_busiest_first() {
        assert_eq!(workers_for_share(&[990, 10, 0, 0], 0.99), 1);
        assert_eq!(workers_for_share(&[989, 11, 0, 0], 0.99), 2);
        assert_eq!(workers_for_share(&[5, 5, 5, 5], 0.99), 4);
        assert_eq!(workers_for_share(&[0, 0], 0.99), 0);
    }

    #[test]
    fn named_threads_are_pinned_to_the_cpus_given() {
        let target = *allowed_cpus().unwrap().last().unwrap();
        let (go, wait_for_go) = mpsc::channel::<()>();
        let probe = thread::Builder::new()
            .name("pin-probe-thread".into())
            .spawn(move || {
                wait_for_go.recv().unwrap();
                // SAFETY: sched_getcpu has no preconditions.
                unsafe { libc::sched_getcpu() }
            })
            .unwrap();
        let started = Instant::now();
        while pin_named_threads("pin-probe", &[target]).unwrap() == 0 {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "probe never named"
            );
            thread::sleep(Duration::from_millis(1));
        }
        go.send(()).unwrap();
        assert_eq!(probe.join().unwrap(), i32::try_from(target).unwrap());
        assert_eq!(
            pin_named_threads("no-such-thread-prefix", &[target]).unwrap(),
            0
        );
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
