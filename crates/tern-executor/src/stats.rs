//! Per-worker counters and the snapshots read from them.
//!
//! Each worker owns its counters and is their only writer, so an update is a plain load and
//! store on a cache line no other thread writes: no contended read-modify-write on the hot path.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::WakeOrder;

/// Buckets of the queue-wait histogram: bucket 0 holds waits under 1 ns, bucket `i` waits in
/// `[2^(i-1), 2^i)` ns; the last bucket also holds everything longer (2^30 ns is ~1.07 s).
pub const QUEUE_WAIT_BUCKETS: usize = 32;

/// Counters of one worker, written only by that worker.
#[derive(Default)]
pub(crate) struct WorkerCounters {
    jobs_run: AtomicU64,
    rejected_queue_timeout: AtomicU64,
    rejected_deadline: AtomicU64,
    panicked: AtomicU64,
    parks: AtomicU64,
    wakes: AtomicU64,
    spins: AtomicU64,
    spin_successes: AtomicU64,
    queue_wait: [AtomicU64; QUEUE_WAIT_BUCKETS],
}

/// Adds one to a counter that has a single writer (the calling worker).
fn bump(counter: &AtomicU64) {
    counter.store(counter.load(Relaxed) + 1, Relaxed);
}

impl WorkerCounters {
    pub(crate) fn job_run(&self) {
        bump(&self.jobs_run);
    }
    pub(crate) fn rejected_queue_timeout(&self) {
        bump(&self.rejected_queue_timeout);
    }
    pub(crate) fn rejected_deadline(&self) {
        bump(&self.rejected_deadline);
    }
    pub(crate) fn panicked(&self) {
        bump(&self.panicked);
    }
    pub(crate) fn parked(&self) {
        bump(&self.parks);
    }
    pub(crate) fn woken(&self) {
        bump(&self.wakes);
    }
    pub(crate) fn spun(&self) {
        bump(&self.spins);
    }
    pub(crate) fn spin_succeeded(&self) {
        bump(&self.spin_successes);
    }
    pub(crate) fn queue_waited(&self, wait: Duration) {
        let nanos = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
        let bucket = (u64::BITS - nanos.leading_zeros()) as usize;
        bump(&self.queue_wait[bucket.min(QUEUE_WAIT_BUCKETS - 1)]);
    }

    pub(crate) fn snapshot(&self) -> WorkerStats {
        WorkerStats {
            jobs_run: self.jobs_run.load(Relaxed),
            rejected_queue_timeout: self.rejected_queue_timeout.load(Relaxed),
            rejected_deadline: self.rejected_deadline.load(Relaxed),
            panicked: self.panicked.load(Relaxed),
            parks: self.parks.load(Relaxed),
            wakes: self.wakes.load(Relaxed),
            spins: self.spins.load(Relaxed),
            spin_successes: self.spin_successes.load(Relaxed),
            queue_wait: QueueWaitHistogram {
                counts: std::array::from_fn(|i| self.queue_wait[i].load(Relaxed)),
            },
        }
    }
}

/// How long the jobs a worker picked up had waited in the queue, in power-of-two buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueWaitHistogram {
    /// `counts[i]`: jobs whose wait was below [`QueueWaitHistogram::bucket_limit`]`(i)` and at
    /// least the limit of bucket `i - 1`.
    pub counts: [u64; QUEUE_WAIT_BUCKETS],
}

impl QueueWaitHistogram {
    /// The exclusive upper bound of bucket `i` (the last bucket is unbounded; this returns its
    /// lower bound doubled).
    pub fn bucket_limit(i: usize) -> Duration {
        Duration::from_nanos(1u64 << i.min(63))
    }

    /// Jobs counted.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    fn add(&mut self, other: &QueueWaitHistogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts) {
            *mine += theirs;
        }
    }
}

/// A snapshot of one worker's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorkerStats {
    /// Jobs this worker ran (including ones that panicked).
    pub jobs_run: u64,
    /// Jobs this worker did not run because they waited longer than the queue timeout.
    pub rejected_queue_timeout: u64,
    /// Jobs this worker did not run because their deadline had passed.
    pub rejected_deadline: u64,
    /// Jobs whose closure panicked (the worker caught it and went on).
    pub panicked: u64,
    /// Times the worker went to sleep for lack of work.
    pub parks: u64,
    /// Times the worker was woken from sleep.
    pub wakes: u64,
    /// Times the worker, out of jobs, spun polling the queue before parking. It skips the spin
    /// when another worker is spinning, and once its spins keep missing (then it spins only
    /// now and then, to find out whether spinning pays again).
    pub spins: u64,
    /// Times the worker found a job while spinning, saving a park and a wake.
    pub spin_successes: u64,
    /// Queue wait of every job this worker picked up (run or rejected).
    pub queue_wait: QueueWaitHistogram,
}

impl WorkerStats {
    fn add(&mut self, other: &WorkerStats) {
        self.jobs_run += other.jobs_run;
        self.rejected_queue_timeout += other.rejected_queue_timeout;
        self.rejected_deadline += other.rejected_deadline;
        self.panicked += other.panicked;
        self.parks += other.parks;
        self.wakes += other.wakes;
        self.spins += other.spins;
        self.spin_successes += other.spin_successes;
        self.queue_wait.add(&other.queue_wait);
    }
}

/// A snapshot of the whole executor, from [`Executor::stats`](crate::Executor::stats).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorStats {
    pub wake_order: WakeOrder,
    /// Jobs waiting in the queue when the snapshot was taken.
    pub queued: usize,
    /// Submissions refused because the queue was full.
    pub rejected_queue_full: u64,
    /// Submissions refused because the executor was shut down.
    pub rejected_shut_down: u64,
    /// One entry per worker, indexed by worker id.
    pub workers: Vec<WorkerStats>,
}

impl ExecutorStats {
    /// All workers' counters added up.
    pub fn total(&self) -> WorkerStats {
        let mut total = WorkerStats::default();
        for worker in &self.workers {
            total.add(worker);
        }
        total
    }
}
