//! The campaigns file as the source of truth: read and parsed whole ([`tern_pacer_core::campaigns`]), and
//! watched by a low-priority thread that installs each valid new version; a broken edit is reported and the
//! pacer keeps deciding on the last good one.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use tern_pacer_core::campaigns::{is_json, parse, ConfigError};
use tern_pacer_core::money::Currency;
use tern_pacer_core::snapshot::Snapshot;
use tern_pacer_core::state::PacerState;
use tern_runtime::background::Background;

/// Reads and parses a configuration file; a refusal names the file (and the parser's message the line and
/// the key: an unknown key is refused, not ignored).
pub fn load<C: Currency>(path: &Path, version: u64) -> Result<Snapshot<C>, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError(format!("{}: {e}", path.display())))?;
    parse(&text, is_json(path), version)
        .map_err(|ConfigError(why)| ConfigError(format!("{}: {why}", path.display())))
}

/// What the watcher has done.
#[derive(Debug, Default)]
pub struct WatchStats {
    pub reloads: AtomicU64,
    pub errors: AtomicU64,
    pub last_error: Mutex<Option<ConfigError>>,
}

/// A thread that reloads the configuration file when it changes (its modification time or length), until
/// dropped.
pub struct Watcher {
    stats: Arc<WatchStats>,
    _thread: Background,
}

impl Watcher {
    /// Watches `path` every `poll`, installing each valid new version into `service`.
    pub fn start<C: Currency>(
        path: PathBuf,
        service: Arc<PacerState<C>>,
        poll: Duration,
    ) -> std::io::Result<Watcher> {
        let stats = Arc::new(WatchStats::default());
        let fingerprint = |path: &Path| -> Option<(SystemTime, u64)> {
            let meta = std::fs::metadata(path).ok()?;
            Some((meta.modified().ok()?, meta.len()))
        };
        let mut seen = fingerprint(&path);
        // Parsing a big campaigns file takes milliseconds: at low priority, not at the loops' expense.
        let thread = Background::spawn("pacer-config", true, {
            let stats = Arc::clone(&stats);
            move |stop| {
                while !Background::stopping(stop) {
                    std::thread::park_timeout(poll);
                    let now = fingerprint(&path);
                    if now == seen || now.is_none() {
                        continue;
                    }
                    seen = now;
                    let version = service.snapshot().version + 1;
                    match load::<C>(&path, version) {
                        Ok(snapshot) => {
                            service.install(snapshot);
                            stats.reloads.fetch_add(1, Ordering::Release);
                        }
                        Err(e) => {
                            tracing::warn!("keeping the previous pacer configuration: {e}");
                            *stats.last_error.lock() = Some(e);
                            stats.errors.fetch_add(1, Ordering::Release);
                        }
                    }
                }
            }
        })?;
        Ok(Watcher {
            stats,
            _thread: thread,
        })
    }

    pub fn stats(&self) -> &WatchStats {
        &self.stats
    }
}

#[cfg(test)]
mod tests;
