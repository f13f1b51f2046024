//! The ranking model in service: loaded at start, swapped atomically when its file changes (as the pacer
//! reloads its campaigns), and refused, with the old one kept, when the new file is broken or ranks by
//! other features than the service computes.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use tern_metrics::Counter;
use tern_model::Model;
use tern_runtime::background::Background;

use crate::features::FEATURE_NAMES;

static RELOADS: Counter = Counter::new(
    "tern_recommend_model_reloads_total",
    "Model files loaded while serving (a changed file)",
);
static RELOAD_FAILURES: Counter = Counter::new(
    "tern_recommend_model_reload_failures_total",
    "Changed model files refused (unreadable, or ranking by other features); the old model stays",
);

/// The model every request ranks with; a request keeps the one it started with.
#[derive(Clone)]
pub struct ModelSlot(Arc<ArcSwap<Model>>);

/// Parses a model and checks it ranks by this service's features.
pub fn parse_model(text: &str) -> anyhow::Result<Model> {
    let model = Model::parse(text)?;
    model.check_features(&FEATURE_NAMES)?;
    Ok(model)
}

/// Loads a model file and checks it ranks by this service's features.
pub fn load_model(path: &Path) -> anyhow::Result<Model> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
    parse_model(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

impl ModelSlot {
    pub fn new(model: Model) -> Self {
        ModelSlot(Arc::new(ArcSwap::from_pointee(model)))
    }

    pub fn current(&self) -> Arc<Model> {
        self.0.load_full()
    }

    /// Watches `path` every `interval` and swaps in its model when the file changes.
    pub fn watch(&self, path: PathBuf, interval: Duration) -> std::io::Result<Background> {
        let slot = self.clone();
        Background::spawn("tern-model-watch", true, move |stop| {
            let stamp = |p: &Path| {
                std::fs::metadata(p)
                    .ok()
                    .map(|m| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len()))
            };
            let mut seen = stamp(&path);
            while !Background::stopping(stop) {
                std::thread::park_timeout(interval);
                let now = stamp(&path);
                if now == seen || now.is_none() {
                    continue;
                }
                seen = now;
                match load_model(&path) {
                    Ok(model) => {
                        tracing::info!(
                            version = model.version(),
                            "model reloaded from {}",
                            path.display()
                        );
                        slot.0.store(Arc::new(model));
                        RELOADS.incr();
                    }
                    Err(e) => {
                        tracing::warn!("model not reloaded, the previous one stays: {e:#}");
                        RELOAD_FAILURES.incr();
                    }
                }
            }
        })
    }
}
