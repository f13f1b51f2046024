//! A queued job: the caller's closure plus what a worker needs to decide whether it may still run.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use crate::stats::WorkerCounters;
use crate::Config;

/// Why a job was not run (or did not finish). The I/O loop turns it into the service's
/// "overloaded" / "server error" answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    /// The queue already held `max_queued` jobs (reported at submit time).
    #[error("executor queue is full")]
    QueueFull,
    /// The job waited in the queue longer than the configured queue timeout.
    #[error("job waited in the executor queue longer than the queue timeout")]
    QueueTimeout,
    /// The job's own deadline passed before a worker picked it up.
    #[error("job deadline passed before a worker picked it up")]
    DeadlineExpired,
    /// The executor was shut down before the job was submitted.
    #[error("executor is shut down")]
    ShutDown,
    /// The job ran and panicked; the worker caught the panic and lives on.
    #[error("job panicked")]
    Panicked,
}

/// What a job closure is given: `Ok(())` to do its work, or why it must not.
pub type Admission = Result<(), Rejected>;

pub(crate) type Task = Box<dyn FnOnce(Admission) + Send + 'static>;

pub(crate) struct Job {
    enqueued_at: Instant,
    deadline: Option<Instant>,
    task: Task,
}

impl Job {
    pub(crate) fn new(deadline: Option<Instant>, task: Task) -> Job {
        Job {
            enqueued_at: Instant::now(),
            deadline,
            task,
        }
    }

    pub(crate) fn enqueued_at(&self) -> Instant {
        self.enqueued_at
    }
}

/// What every pool shares: the configuration, the workers' own counters and the submit-side
/// rejection counters (only touched when a submission fails, so not on the hot path).
pub(crate) struct Common {
    pub(crate) config: Config,
    pub(crate) workers: Box<[CachePadded<WorkerCounters>]>,
    pub(crate) rejected_queue_full: AtomicU64,
    pub(crate) rejected_shut_down: AtomicU64,
}

impl Common {
    pub(crate) fn new(config: Config) -> Common {
        Common {
            workers: (0..config.workers)
                .map(|_| CachePadded::default())
                .collect(),
            config,
            rejected_queue_full: AtomicU64::new(0),
            rejected_shut_down: AtomicU64::new(0),
        }
    }

    /// Counts a submission refused with `why` (queue full or shut down).
    pub(crate) fn refuse(&self, why: Rejected) -> Rejected {
        match why {
            Rejected::QueueFull => self.rejected_queue_full.fetch_add(1, Relaxed),
            _ => self.rejected_shut_down.fetch_add(1, Relaxed),
        };
        why
    }

    /// Worker `worker` picked `job` up: runs it, or tells it why not if it waited too long.
    /// A panic in the job is caught so the worker survives it.
    pub(crate) fn run(&self, worker: usize, job: Job) {
        let counters = &self.workers[worker];
        let now = Instant::now();
        let waited = now.saturating_duration_since(job.enqueued_at);
        counters.queue_waited(waited);
        let admission = admit(now, waited, job.deadline, self.config.queue_timeout);
        match admission {
            Ok(()) => counters.job_run(),
            Err(Rejected::DeadlineExpired) => counters.rejected_deadline(),
            Err(_) => counters.rejected_queue_timeout(),
        }
        let task = job.task;
        if catch_unwind(AssertUnwindSafe(move || task(admission))).is_err() {
            counters.panicked();
        }
    }
}

fn admit(
    now: Instant,
    waited: Duration,
    deadline: Option<Instant>,
    queue_timeout: Option<Duration>,
) -> Admission {
    if deadline.is_some_and(|deadline| now >= deadline) {
        Err(Rejected::DeadlineExpired)
    } else if queue_timeout.is_some_and(|timeout| waited > timeout) {
        Err(Rejected::QueueTimeout)
    } else {
        Ok(())
    }
}

/// What the two pool designs have in common, as seen by [`crate::Executor`].
pub(crate) trait Pool: Send + Sync {
    fn common(&self) -> &Common;
    fn submit(&self, job: Job) -> Result<(), Rejected>;
    /// The body of worker thread `worker`; returns once the pool is closed and drained.
    fn run_worker(&self, worker: usize);
    /// Stops accepting jobs and wakes every worker so they drain the queue and exit.
    fn close(&self);
    fn queued(&self) -> usize;
}
