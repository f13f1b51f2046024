//! Executor configuration: what the service's config file says about the CPU pool.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Which idle worker a new job wakes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WakeOrder {
    /// The most recently idle worker first (folly `LifoSem` style), after a bounded spin.
    #[default]
    Lifo,
    /// The classic `Mutex<VecDeque>` + `Condvar` pool: the longest idle worker first, no spin.
    /// Kept as the baseline the `wakeup` experiment compares against.
    Fifo,
}

impl WakeOrder {
    /// Its name as a config file writes it (`lifo`, `fifo`).
    pub fn name(self) -> &'static str {
        match self {
            WakeOrder::Lifo => "lifo",
            WakeOrder::Fifo => "fifo",
        }
    }
}

impl std::fmt::Display for WakeOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The most workers a pool may have; far above any sensible CPU pool, it only catches typos.
pub const MAX_WORKERS: usize = 4096;

/// The most jobs a queue may be configured to hold (the LIFO pool packs the count into a word).
pub const MAX_QUEUED_LIMIT: usize = 1 << 40;

/// Configuration of an [`Executor`](crate::Executor). Durations are written as humantime
/// strings in config files (`spin = "20us"`, `queue_timeout = "50ms"`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Number of worker threads (default: the number of CPUs this process may use).
    pub workers: usize,
    /// Which idle worker a new job wakes.
    pub wake_order: WakeOrder,
    /// How long a LIFO worker that ran out of jobs polls the queue before parking (zero: park
    /// at once). Only one worker spins at a time. Ignored by the FIFO pool.
    #[serde(with = "humantime_serde")]
    pub spin: Duration,
    /// A job that waited longer than this in the queue is not run: its caller gets
    /// [`Rejected::QueueTimeout`](crate::Rejected::QueueTimeout). `None`: jobs wait as long as it takes.
    #[serde(with = "humantime_serde")]
    pub queue_timeout: Option<Duration>,
    /// The most jobs waiting in the queue; submitting beyond it fails with
    /// [`Rejected::QueueFull`](crate::Rejected::QueueFull).
    pub max_queued: usize,
    /// Worker threads are named `<prefix>-<index>`.
    pub thread_name_prefix: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
            wake_order: WakeOrder::Lifo,
            spin: Duration::from_micros(20),
            queue_timeout: None,
            max_queued: 65_536,
            thread_name_prefix: "tern-cpu".to_owned(),
        }
    }
}

/// A configuration the executor cannot run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("executor workers must be between 1 and {MAX_WORKERS}, got {0}")]
    Workers(usize),
    #[error("executor max_queued must be between 1 and {MAX_QUEUED_LIMIT}, got {0}")]
    MaxQueued(usize),
    #[error("executor thread_name_prefix must not contain a NUL byte")]
    ThreadName,
}

impl Config {
    /// Checks the limits; [`Executor::new`](crate::Executor::new) calls it.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=MAX_WORKERS).contains(&self.workers) {
            return Err(ConfigError::Workers(self.workers));
        }
        if !(1..=MAX_QUEUED_LIMIT).contains(&self.max_queued) {
            return Err(ConfigError::MaxQueued(self.max_queued));
        }
        if self.thread_name_prefix.contains('\0') {
            return Err(ConfigError::ThreadName);
        }
        Ok(())
    }
}
