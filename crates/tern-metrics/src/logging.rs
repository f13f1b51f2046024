//! Logging setup: a `tracing-subscriber` whose writer is `tracing-appender`'s non-blocking
//! worker, so hot threads only push lines into a bounded queue and never wait on `write()`
//! (a single write can stall for 100+ ms). When the queue is full, lines are dropped and
//! counted rather than blocking the caller.

use std::fs::OpenOptions;
use std::path::PathBuf;
use std::str::FromStr;

use anyhow::Context;
use tracing_appender::non_blocking::{ErrorCounter, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;

/// Line format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable single lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl FromStr for LogFormat {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => anyhow::bail!("unknown log format {other:?} (expected \"text\" or \"json\")"),
        }
    }
}

/// What to log, how and where.
#[derive(Clone, Debug)]
pub struct LogConfig {
    /// `EnvFilter` directives, e.g. `"info"` or `"warn,tern_cache=debug"`.
    pub filter: String,
    /// Line format.
    pub format: LogFormat,
    /// File to append to; standard error when `None`.
    pub file: Option<PathBuf>,
    /// Lines queued for the writer thread before new lines are dropped.
    pub queue_lines: usize,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            filter: "info".into(),
            format: LogFormat::Text,
            file: None,
            queue_lines: 128_000,
        }
    }
}

/// Keeps the writer thread alive; dropping it flushes queued lines and stops the thread. Empty when
/// [`init`] found logging already set up (the process's first setup does the writing).
pub struct LogGuard {
    _worker: Option<WorkerGuard>,
    dropped: Option<ErrorCounter>,
}

impl LogGuard {
    /// Lines dropped because the queue was full.
    pub fn dropped_lines(&self) -> usize {
        self.dropped.as_ref().map_or(0, ErrorCounter::dropped_lines)
    }
}

/// The subscriber type built from a [`LogConfig`].
pub type BoxedSubscriber = Box<dyn tracing::Subscriber + Send + Sync>;

/// Builds the subscriber and its writer thread without installing it (for scoped use with
/// `tracing::subscriber::with_default`, e.g. in tests).
pub fn build(config: &LogConfig) -> anyhow::Result<(BoxedSubscriber, LogGuard)> {
    let filter = EnvFilter::try_new(&config.filter)
        .with_context(|| format!("invalid log filter {:?}", config.filter))?;
    let builder = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(config.queue_lines)
        .thread_name("tern-log");
    let (writer, worker) = match &config.file {
        Some(path) => {
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("opening log file {}", path.display()))?;
            builder.finish(file)
        }
        None => builder.finish(std::io::stderr()),
    };
    let dropped = writer.error_counter();
    // Colours only for a person at a terminal, not in files or pipes (e.g. stderr redirected to a log).
    let ansi = config.file.is_none() && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_thread_names(true);
    let subscriber: BoxedSubscriber = match config.format {
        LogFormat::Text => Box::new(fmt.with_ansi(ansi).finish()),
        LogFormat::Json => Box::new(fmt.json().finish()),
    };
    Ok((
        subscriber,
        LogGuard {
            _worker: Some(worker),
            dropped: Some(dropped),
        },
    ))
}

/// Builds the subscriber and installs it as the process-wide default. Keep the returned guard
/// alive for the life of the process. Errors if the filter is invalid or the file cannot be opened.
/// When logging is already set up (`tern run` starts several services, `tern --log` sets it up before
/// the subcommand), the first setup stays and this one does nothing.
pub fn init(config: &LogConfig) -> anyhow::Result<LogGuard> {
    if tracing::dispatcher::has_been_set() {
        EnvFilter::try_new(&config.filter)
            .with_context(|| format!("invalid log filter {:?}", config.filter))?;
        return Ok(LogGuard {
            _worker: None,
            dropped: None,
        });
    }
    let (subscriber, guard) = build(config)?;
    tracing::subscriber::set_global_default(subscriber)
        .context("a global tracing subscriber is already installed")?;
    Ok(guard)
}
