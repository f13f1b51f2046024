//! Everything `tern recommend serve` is configured with, each a flag (`lib.rs` reads them): what the service,
//! the request's steps and the blocking baseline all read.

use std::net::SocketAddr;
use std::time::Duration;

use tern_cache_client::KeyHash;
use tern_http::HttpLimits;
use tern_runtime::PoolConfig;

use crate::features::SourceSizes;
use crate::hedge::HedgePolicy;
use crate::pressure::PressurePolicy;

/// How requests run: seed 000's three ways, measured side by side by `tern bench recommend`. `Offload` is
/// the service's design; the others are there to be measured against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Execution {
    /// Non-blocking calls from the I/O loop, ranking on the CPU pool.
    Offload,
    /// Non-blocking calls from the I/O loop, ranking on the I/O loop too.
    Inline,
    /// A fixed pool of workers (`--cpu-workers`), each running a whole request: its calls on threads of
    /// their own with blocking sockets, joined by the worker, then the ranking.
    Blocking,
}

/// Everything `tern recommend` is configured with (each a flag).
#[derive(Debug, Clone)]
pub struct RecommendConfig {
    /// The graph service: per shard (in shard order), its replicas.
    pub graph: Vec<Vec<SocketAddr>>,
    /// The tern cache nodes holding the features (keys placed by ketama, as twemproxy places them).
    pub cache: Vec<SocketAddr>,
    pub cache_hash: KeyHash,
    /// A request's deadline when it names none.
    pub default_deadline: Duration,
    /// Time kept for ranking and writing the answer: sources and features must be in before it.
    pub ranking_reserve: Duration,
    /// Most time one source call may take, under the request's deadline.
    pub source_budget: Duration,
    pub sizes: SourceSizes,
    /// Most recommendations one request may ask for.
    pub max_results: usize,
    pub max_source_share: f64,
    pub max_frame_bytes: usize,
    pub http: HttpLimits,
    pub pool: PoolConfig,
    /// Hedged calls to replicated shards (`None`: never hedge).
    pub hedge: Option<HedgePolicy>,
    /// How long a Chaining answer is kept for the same request (zero: not kept).
    pub chaining_ttl: Duration,
    /// Most Chaining answers kept per loop.
    pub chaining_entries: usize,
    /// When to skip sources and refuse requests under load.
    pub pressure: PressurePolicy,
    pub execution: Execution,
}

impl Default for RecommendConfig {
    fn default() -> Self {
        RecommendConfig {
            graph: Vec::new(),
            cache: Vec::new(),
            cache_hash: KeyHash::Fnv1a64,
            default_deadline: Duration::from_millis(100),
            ranking_reserve: Duration::from_millis(10),
            source_budget: Duration::from_millis(60),
            sizes: SourceSizes::DEFAULT,
            max_results: 100,
            max_source_share: 0.6,
            max_frame_bytes: 1 << 20,
            http: HttpLimits::default(),
            pool: PoolConfig::default(),
            hedge: Some(HedgePolicy::DEFAULT),
            chaining_ttl: Duration::from_secs(1),
            chaining_entries: 10_000,
            pressure: PressurePolicy::DEFAULT,
            execution: Execution::Offload,
        }
    }
}
