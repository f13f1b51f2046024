//! The CPU executor: a fixed pool of worker threads for handler work that must not run on the
//! I/O loops (seed 000). Idle workers are woken LIFO, most recently idle first, and a worker
//! that runs out of jobs spins briefly before parking, as long as its spins keep finding jobs
//! (folly's `LifoSem`, seed 002); the classic FIFO `Mutex` + `Condvar` pool is kept,
//! selectable by [`Config::wake_order`], as the baseline. [`Executor::offload`] runs a closure on
//! the pool and resolves on the caller's own task, like folly's `.via(executor)`. Jobs carry
//! their enqueue time and an optional deadline: a worker that picks up a job that waited too
//! long does not run it but reports [`Rejected`], so the I/O loop can answer "overloaded"; the
//! queue length is bounded and checked at submit time. Each worker keeps its own counters,
//! readable as an [`ExecutorStats`] snapshot.
//!
//! ```
//! use std::time::Duration;
//! use tern_executor::{Config, Executor, Rejected};
//!
//! let executor = Executor::new(Config {
//!     workers: 2,
//!     queue_timeout: Some(Duration::from_millis(50)),
//!     ..Config::default()
//! })?;
//! let io_loop = tokio::runtime::Builder::new_current_thread().build()?;
//! let answer = io_loop.block_on(async {
//!     match executor.offload(|| (1..=10u64).product::<u64>()).await {
//!         Ok(product) => format!("VALUE {product}"),
//!         Err(Rejected::QueueFull | Rejected::QueueTimeout) => "SERVER_ERROR busy".to_owned(),
//!         Err(other) => format!("SERVER_ERROR {other}"),
//!     }
//! });
//! assert_eq!(answer, "VALUE 3628800");
//! executor.shutdown();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod config;
mod fifo;
mod job;
mod lifo;
mod stats;

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::thread::{self, JoinHandle};
use std::time::Instant;

use tokio::sync::oneshot;

pub use config::{Config, ConfigError, WakeOrder, MAX_QUEUED_LIMIT, MAX_WORKERS};
pub use job::{Admission, Rejected};
pub use stats::{ExecutorStats, QueueWaitHistogram, WorkerStats, QUEUE_WAIT_BUCKETS};

use job::{Common, Job, Pool, Task};

thread_local! {
    static CURRENT_WORKER: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The id (`0..workers`) of the executor worker running the calling code, or `None` when
/// called from a thread that is not an executor worker.
pub fn current_worker() -> Option<usize> {
    CURRENT_WORKER.with(Cell::get)
}

/// Why [`Executor::new`] failed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot spawn executor worker thread: {0}")]
    Spawn(#[from] std::io::Error),
}

/// A handle to a pool of CPU worker threads. Clones share the pool; it shuts down when
/// [`Executor::shutdown`] is called or the last clone is dropped.
#[derive(Clone)]
pub struct Executor {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Arc<dyn Pool>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Executor {
    /// Validates `config` and starts the worker threads.
    pub fn new(config: Config) -> Result<Executor, StartError> {
        config.validate()?;
        let workers = config.workers;
        let prefix = config.thread_name_prefix.clone();
        let common = Common::new(config);
        let pool: Arc<dyn Pool> = match common.config.wake_order {
            WakeOrder::Lifo => Arc::new(lifo::LifoPool::new(common)),
            WakeOrder::Fifo => Arc::new(fifo::FifoPool::new(common)),
        };
        let inner = Arc::new(Inner {
            pool: Arc::clone(&pool),
            threads: Mutex::new(Vec::with_capacity(workers)),
        });
        for worker in 0..workers {
            let pool = Arc::clone(&pool);
            let thread = thread::Builder::new()
                .name(format!("{prefix}-{worker}"))
                .spawn(move || {
                    CURRENT_WORKER.with(|current| current.set(Some(worker)));
                    pool.run_worker(worker);
                })?;
            // On a spawn error above, dropping `inner` shuts down the workers already started.
            inner.lock_threads().push(thread);
        }
        Ok(Executor { inner })
    }

    /// The configuration the executor runs with.
    pub fn config(&self) -> &Config {
        &self.inner.pool.common().config
    }

    /// Queues `task` and returns at once. A worker calls it exactly once, with `Ok(())` to do
    /// its work, or with [`Rejected::QueueTimeout`] if it waited longer than the queue timeout;
    /// the task should then answer its requester "overloaded" and return. Fails synchronously,
    /// without calling `task`, with [`Rejected::QueueFull`] or [`Rejected::ShutDown`].
    pub fn execute<F>(&self, task: F) -> Result<(), Rejected>
    where
        F: FnOnce(Admission) + Send + 'static,
    {
        self.submit(None, Box::new(task))
    }

    /// [`execute`](Self::execute) with a per-job deadline: a worker that picks the job up at or
    /// after `deadline` calls it with [`Rejected::DeadlineExpired`] instead.
    pub fn execute_before<F>(&self, deadline: Instant, task: F) -> Result<(), Rejected>
    where
        F: FnOnce(Admission) + Send + 'static,
    {
        self.submit(Some(deadline), Box::new(task))
    }

    /// Runs `f` on the pool; the returned future resolves to its result on the awaiting task
    /// (the pool only wakes that task, so it resumes on its own loop thread). The job is queued
    /// here, before the first poll; a full queue or a shut-down executor makes the future ready
    /// at once with the error. Dropping the future does not cancel a queued job.
    pub fn offload<F, T>(&self, f: F) -> Offload<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.offload_job(None, f)
    }

    /// [`offload`](Self::offload) with a per-job deadline (see [`execute_before`](Self::execute_before)).
    pub fn offload_before<F, T>(&self, deadline: Instant, f: F) -> Offload<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.offload_job(Some(deadline), f)
    }

    fn offload_job<F, T>(&self, deadline: Option<Instant>, f: F) -> Offload<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let (sender, receiver) = oneshot::channel();
        let task = move |admission: Admission| {
            // If `f` panics, `sender` is dropped unsent and the future reports `Panicked`.
            let outcome = admission.map(|()| f());
            // The caller may have stopped waiting; then there is nobody to tell.
            let _ = sender.send(outcome);
        };
        match self.submit(deadline, Box::new(task)) {
            Ok(()) => Offload {
                state: OffloadState::Queued(receiver),
            },
            Err(why) => Offload {
                state: OffloadState::Refused(why),
            },
        }
    }

    fn submit(&self, deadline: Option<Instant>, task: Task) -> Result<(), Rejected> {
        self.inner.pool.submit(Job::new(deadline, task))
    }

    /// A snapshot of the queue length, submit-time rejections and every worker's counters.
    pub fn stats(&self) -> ExecutorStats {
        let pool = &self.inner.pool;
        let common = pool.common();
        ExecutorStats {
            wake_order: common.config.wake_order,
            queued: pool.queued(),
            rejected_queue_full: common.rejected_queue_full.load(Relaxed),
            rejected_shut_down: common.rejected_shut_down.load(Relaxed),
            workers: common.workers.iter().map(|w| w.snapshot()).collect(),
        }
    }

    /// Stops accepting jobs ([`Rejected::ShutDown`]), lets the workers run (or reject, if they
    /// waited too long) every job already queued, and joins them. Idempotent; a concurrent
    /// caller returns once the workers are joined. Called from a job on this executor, it joins
    /// the other workers and leaves its own to finish draining after the job returns.
    pub fn shutdown(&self) {
        self.inner.shutdown();
    }
}

impl Inner {
    fn lock_threads(&self) -> std::sync::MutexGuard<'_, Vec<JoinHandle<()>>> {
        // Only pushes and drains happen under this lock; a poisoned list is still a valid list.
        self.threads.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn shutdown(&self) {
        self.pool.close();
        let mut threads = self.lock_threads();
        let me = thread::current().id();
        for thread in threads.drain(..) {
            if thread.thread().id() != me {
                // Workers catch job panics, so a join error cannot happen; if it did, the
                // worker is gone either way.
                let _ = thread.join();
            }
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The future returned by [`Executor::offload`]: resolves to the closure's result, or to why it
/// did not run ([`Rejected::Panicked`] if it panicked).
#[must_use = "the job runs anyway; the future is how its result gets back"]
pub struct Offload<T> {
    state: OffloadState<T>,
}

enum OffloadState<T> {
    Queued(oneshot::Receiver<Result<T, Rejected>>),
    Refused(Rejected),
}

impl<T> Future for Offload<T> {
    type Output = Result<T, Rejected>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.get_mut().state {
            OffloadState::Refused(why) => Poll::Ready(Err(*why)),
            // Every queued job is called exactly once, so the sender is dropped unsent only
            // when the closure panicked.
            OffloadState::Queued(receiver) => Pin::new(receiver)
                .poll(cx)
                .map(|received| received.unwrap_or(Err(Rejected::Panicked))),
        }
    }
}
