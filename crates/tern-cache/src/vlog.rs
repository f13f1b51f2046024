//! memcached's `-vv` command log: `<NN <command line>` for each command read, `>NN <reply>` for the replies
//! memcached writes through its `out_string` (`>NN NOREPLY <reply>` when `noreply` hid them), `>NN sending key
//! <key>` for each get hit and `>NN END` after a get, and `<NN new ascii client connection.` / `<NN connection
//! closed.` around a connection's life. NN is the connection's socket descriptor, as memcached numbers
//! connections (for a datagram, the UDP socket's). Binary requests get memcached's lines for them: header
//! dumps and the commands' own lines (`binary.rs`).
//!
//! Lines never touch stderr from an I/O thread: each command's lines go as one message to a bounded queue
//! that a writer thread drains (`tracing-appender`'s non-blocking worker, the project's logging writer),
//! dropping lines when the queue is full rather than blocking. The writer starts the first time the level
//! reaches 2 (`-vv`, or `verbosity 2`); below that a command costs one relaxed load.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use tracing_appender::non_blocking::{NonBlocking, NonBlockingBuilder, WorkerGuard};

/// memcached's `MAX_VERBOSITY_LEVEL`.
pub const MAX_LEVEL: u8 = 2;

/// Messages queued for the writer thread before new ones are dropped.
const QUEUE_MESSAGES: usize = 64 * 1024;

struct Sink {
    writer: NonBlocking,
    _guard: WorkerGuard,
}

/// The verbosity level (`-v`, `-vv`, the `verbosity` command) and the `-vv` command log.
pub struct VerboseLog {
    level: AtomicU8,
    /// Where the lines go: standard error, or this file (tests).
    file: Option<PathBuf>,
    sink: OnceLock<Option<Sink>>,
}

impl VerboseLog {
    pub fn new(level: u8, file: Option<PathBuf>) -> VerboseLog {
        VerboseLog {
            level: AtomicU8::new(level.min(MAX_LEVEL)),
            file,
            sink: OnceLock::new(),
        }
    }

    pub fn level(&self) -> u8 {
        self.level.load(Ordering::Relaxed)
    }

    /// The `verbosity` command: memcached keeps `min(level, 2)`.
    pub fn set_level(&self, level: u32) {
        self.level
            .store(level.min(u32::from(MAX_LEVEL)) as u8, Ordering::Relaxed);
    }

    /// Whether commands are logged (level 2).
    #[inline]
    pub fn commands(&self) -> bool {
        self.level() >= 2
    }

    /// Queues `lines` (whole lines, each ending in `\n`) for the writer thread.
    pub fn write(&self, lines: &[u8]) {
        if lines.is_empty() {
            return;
        }
        let sink = self.sink.get_or_init(|| {
            let builder = NonBlockingBuilder::default()
                .lossy(true)
                .buffered_lines_limit(QUEUE_MESSAGES)
                .thread_name("tern-cache-vv");
            let (writer, guard) = match &self.file {
                Some(path) => {
                    let file = std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(path);
                    match file {
                        Ok(file) => builder.finish(file),
                        Err(e) => {
                            tracing::warn!("-vv log {}: {e}", path.display());
                            return None;
                        }
                    }
                }
                None => builder.finish(std::io::stderr()),
            };
            Some(Sink {
                writer,
                _guard: guard,
            })
        });
        if let Some(sink) = sink {
            // One message: the queue never splits a command's lines.
            let _ = sink.writer.clone().write_all(lines);
        }
    }
}

/// Appends one log line: `<dir><id> <text>\n`.
pub fn line(buf: &mut Vec<u8>, dir: u8, id: usize, text: &[u8]) {
    buf.push(dir);
    buf.extend_from_slice(itoa::Buffer::new().format(id).as_bytes());
    buf.push(b' ');
    buf.extend_from_slice(text);
    buf.push(b'\n');
}

/// Appends `>id <line>` (or `>id NOREPLY <line>`) for each `\r\n`-terminated line of `replies`.
pub fn replies(buf: &mut Vec<u8>, id: usize, replies: &[u8], hidden: bool) {
    let mut rest = replies;
    while !rest.is_empty() {
        let end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .unwrap_or(rest.len());
        buf.push(b'>');
        buf.extend_from_slice(itoa::Buffer::new().format(id).as_bytes());
        buf.extend_from_slice(if hidden { b" NOREPLY " } else { b" " });
        buf.extend_from_slice(&rest[..end]);
        buf.push(b'\n');
        rest = &rest[(end + 2).min(rest.len())..];
    }
}
