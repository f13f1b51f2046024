//! The seeds' experiments, reproduced on tern's code. Each experiment is a module with an
//! `Options` struct (clap `Args`, defaults that finish in well under a minute) and a
//! `run(&Options) -> anyhow::Result<Report>`; `tern bench <experiment>` prints the report's
//! table and then its JSON line. `thrift_front` is the exception: a server that a bench script drives
//! against a C++ peer (see its doc).

pub mod blocking;
pub mod conn_memory;
pub mod offload;
pub mod process;
pub mod recommend;
pub mod thrift_front;
pub mod wakeup;

/// What an experiment produces: a readable table and one JSON object holding the figures.
/// The JSON always has `"experiment"` and `"ratio"` (baseline / ours, > 1 means ours is better).
#[derive(Debug, Clone)]
pub struct Report {
    pub table: String,
    pub json: serde_json::Value,
}
