//! `tern recommend`: Suggested Users and Chaining (seed 000) as a fan-out service on the tern runtime. Each
//! request calls the candidate sources of `tern graph` in parallel over the network, reads the viewer's and
//! the candidates' features from tern cache with multi-gets, ranks the candidates with a gradient-boosted
//! model trained offline (LightGBM, evaluated here in Rust) on the CPU pool, and answers the top N over
//! Thrift (`idl/recommend.thrift`, framed, binary or compact) or HTTP/JSON on the same port. The offline
//! steps live here too: `prepare` writes the features to the cache.

mod blend;
mod blocking;
mod coalesce;
mod config;
mod eval;
mod fanout;
mod features;
mod hedge;
mod model;
mod prepare;
mod pressure;
mod request;
mod service;
mod train;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use tern_cache_client::KeyHash;
use tern_graph_service::GraphSource;
use tern_runtime::background::Background;
use tern_runtime::{RunningServer, RuntimeConfig, Server};

pub use blend::{blend, BlendCpu, BlendRequest};
pub use config::{Execution, RecommendConfig};
pub use eval::{evaluate, EvalSpec, Quality, RANKINGS};
pub use features::SourceSizes;
pub use features::{
    call_sources, push_row, AccountFeatures, Evidence, Pool, Viewer, FEATURE_NAMES, SOURCES,
};
pub use hedge::HedgePolicy;
pub use model::{load_model, parse_model, ModelSlot};
pub use prepare::{account_features, write_features};
pub use pressure::{PressurePolicy, DEGRADE_ORDER};
pub use service::RecommendService;
pub use train::{local_pool, write_training_rows, TrainingRows, TrainingSpec};

/// The committed model for the embedded default graph (`tern run`'s), used unless `--model` names another.
pub const DEFAULT_MODEL: &str = include_str!("../../../models/default.txt");

#[derive(Args, Debug, Clone)]
pub struct RecommendArgs {
    #[command(subcommand)]
    pub command: RecommendCommand,
}

#[derive(Subcommand, Debug, Clone)]
pub enum RecommendCommand {
    /// Serve Suggested Users and Chaining (Thrift and HTTP/JSON on one port) until SIGINT or SIGTERM.
    Serve(ServeArgs),
    /// Compute every account's features from the graph and write them to the cache nodes.
    Prepare(PrepareArgs),
    /// Write the model's training rows (CSV) from a graph with held-out follows; train with
    /// scripts/train_model.py.
    TrainData(TrainDataArgs),
    /// Measure recommendation quality on held-out follows: recall@10/20/50 and NDCG@20 of each source
    /// alone and of the ranked blend, asking the running services (started here) for each user's top 50.
    /// Without --model it trains one with `python3 scripts/train_model.py` (run from the repository, or
    /// name the script in TERN_TRAIN_SCRIPT).
    Eval(EvalArgs),
}

#[derive(Args, Debug, Clone)]
pub struct EvalArgs {
    #[command(flatten)]
    pub source: GraphSource,
    /// Share of each eligible user's follows held out.
    #[arg(long, default_value_t = 0.1)]
    pub holdout: f64,
    /// Users need at least this many follows to have some held out.
    #[arg(long, default_value_t = 5)]
    pub min_follows: usize,
    /// Users evaluated (a seeded sample of those with held-out follows).
    #[arg(long, default_value_t = 1000)]
    pub users: usize,
    /// Seed of the held-out split and the sample.
    #[arg(long, default_value_t = 11)]
    pub split_seed: u64,
    /// Serve this model instead of training one on the graph without its held-out follows.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Users whose rows train that model (`train-data --users`).
    #[arg(long, default_value_t = 2000)]
    pub train_users: usize,
    /// Where the reduced graph, the training rows and the model are written (a temporary directory,
    /// removed at the end, unless given).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct TrainDataArgs {
    #[command(flatten)]
    pub source: GraphSource,
    /// The CSV to write.
    #[arg(long)]
    pub out: PathBuf,
    /// Share of each eligible user's follows held out as labels.
    #[arg(long, default_value_t = 0.1)]
    pub holdout: f64,
    /// Users need at least this many follows to have some held out.
    #[arg(long, default_value_t = 5)]
    pub min_follows: usize,
    /// Users sampled for training rows.
    #[arg(long, default_value_t = 2000)]
    pub users: usize,
    /// Seed of the held-out split and the sample (distinct from the evaluation's, so the model is not
    /// trained on the answers it is graded on).
    #[arg(long, default_value_t = 7)]
    pub split_seed: u64,
}

/// Cache nodes, as `--cache` names them.
#[derive(Args, Debug, Clone)]
pub struct CacheNodes {
    /// A tern cache (or memcached) node holding the features; repeat for several (keys are placed by
    /// ketama, as twemproxy places them).
    #[arg(long = "cache", required = true)]
    pub nodes: Vec<SocketAddr>,
    /// The key hash of the ketama ring (twemproxy's names: fnv1a_64, md5, ...).
    #[arg(long, default_value = "fnv1a_64", value_parser = parse_hash)]
    pub cache_hash: KeyHash,
}

fn parse_hash(name: &str) -> Result<KeyHash, String> {
    KeyHash::from_name(name).ok_or_else(|| format!("{name:?} is not a twemproxy hash name"))
}

#[derive(Args, Debug, Clone)]
pub struct PrepareArgs {
    #[command(flatten)]
    pub source: GraphSource,
    #[command(flatten)]
    pub cache: CacheNodes,
}

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    #[arg(long, default_value = "127.0.0.1:7700")]
    pub listen: SocketAddr,
    /// A graph shard's replicas, comma-separated; repeat once per shard, in shard order (0, 1, ...).
    #[arg(long = "graph-shard", required = true)]
    pub graph_shards: Vec<String>,
    #[command(flatten)]
    pub cache: CacheNodes,
    /// The model (a LightGBM text model from scripts/train_model.py), reloaded when the file changes;
    /// without it, the committed default model.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// How often the model file is checked for changes, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub model_reload_ms: u64,
    /// A request's deadline when it names none, in milliseconds.
    #[arg(long, default_value_t = 100)]
    pub deadline_ms: u64,
    /// Most time one source call may take, in milliseconds (under the request's deadline).
    #[arg(long, default_value_t = 60)]
    pub source_budget_ms: u64,
    /// Time kept for ranking before the deadline, in milliseconds: sources and features must be in before.
    #[arg(long, default_value_t = 10)]
    pub ranking_reserve_ms: u64,
    /// Hedge a call to a shard with several replicas once it has been out longer than this percentile of
    /// its source's recent latencies: the same call goes to another replica and the first answer wins
    /// (0: never hedge).
    #[arg(long, default_value_t = HedgePolicy::DEFAULT.percentile * 100.0)]
    pub hedge_percentile: f64,
    /// Most hedged calls as a share of the calls made (a token bucket: hedging stops when everything is slow).
    #[arg(long, default_value_t = HedgePolicy::DEFAULT.budget)]
    pub hedge_budget: f64,
    /// How long a Chaining answer (not a partial one) is kept and given again to the same request, in
    /// milliseconds (0: never).
    #[arg(long, default_value_t = 1000)]
    pub chaining_cache_ms: u64,
    /// Most Chaining answers kept, per I/O loop.
    #[arg(long, default_value_t = 10_000)]
    pub chaining_cache_entries: usize,
    /// Skip sources (costliest first: personalized_pagerank, friends_of_friends, co_follow) while the
    /// ranking pool's queue has a standing wait over this many milliseconds (0: never).
    #[arg(long, default_value_t = 2.0)]
    pub degrade_after_ms: f64,
    /// Refuse requests on the I/O thread while the standing wait is over this many milliseconds with every
    /// source that can be skipped skipped (0: never).
    #[arg(long, default_value_t = 5.0)]
    pub shed_after_ms: f64,
    /// How requests run: `offload` (the service: non-blocking calls, ranking on the CPU pool), or, to
    /// measure seed 000's other two designs against it, `inline` (ranking on the I/O loop) and `blocking`
    /// (a fixed pool of --cpu-workers workers, each holding a request through its blocking calls).
    #[arg(long, value_enum, default_value_t = Execution::Offload)]
    pub execution: Execution,
    /// Most recommendations one request may ask for.
    #[arg(long, default_value_t = 100)]
    pub max_results: usize,
    /// Candidates asked of friends_of_friends.
    #[arg(long, default_value_t = SourceSizes::DEFAULT.friends_of_friends)]
    pub fof_candidates: usize,
    /// Candidates asked of personalized_pagerank.
    #[arg(long, default_value_t = SourceSizes::DEFAULT.personalized_pagerank)]
    pub ppr_candidates: usize,
    /// Candidates asked of co_follow.
    #[arg(long, default_value_t = SourceSizes::DEFAULT.co_follow)]
    pub cofollow_candidates: usize,
    /// Popular accounts (popular_in_region) every request ranks.
    #[arg(long, default_value_t = SourceSizes::DEFAULT.popular_in_region)]
    pub popular_candidates: usize,
    /// Candidates every request ranks at least: popular accounts fill up to it when the other sources
    /// found fewer.
    #[arg(long, default_value_t = SourceSizes::DEFAULT.min_candidates)]
    pub min_candidates: usize,
    /// Most of an answer one source may fill while others have candidates, as a share of n.
    #[arg(long, default_value_t = 0.6)]
    pub max_source_share: f64,
    /// Largest Thrift frame accepted, in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_frame_bytes: usize,
    /// I/O loops (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub io_threads: usize,
    /// CPU workers for ranking (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub cpu_workers: usize,
    /// Serve the admin endpoint (/metrics, /stats, /healthz, the /dashboard page; its index at /) on this
    /// address (ADDR:PORT; a bare PORT means 127.0.0.1:PORT); off unless given.
    #[arg(long, value_name = "ADDR:PORT", value_parser = tern_metrics::parse_admin_addr)]
    pub admin: Option<SocketAddr>,
}

impl ServeArgs {
    fn config(&self) -> anyhow::Result<RecommendConfig> {
        let graph: Vec<Vec<SocketAddr>> = self
            .graph_shards
            .iter()
            .map(|shard| {
                shard
                    .split(',')
                    .map(|a| {
                        a.trim()
                            .parse()
                            .with_context(|| format!("--graph-shard {a:?}"))
                    })
                    .collect()
            })
            .collect::<anyhow::Result<_>>()?;
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.max_source_share) && self.max_source_share > 0.0,
            "--max-source-share must be in (0, 1]"
        );
        anyhow::ensure!(self.max_results >= 1, "--max-results must be at least 1");
        anyhow::ensure!(
            (0.0..100.0).contains(&self.hedge_percentile),
            "--hedge-percentile must be at least 0 and under 100"
        );
        anyhow::ensure!(
            self.degrade_after_ms >= 0.0 && self.shed_after_ms >= 0.0,
            "--degrade-after-ms and --shed-after-ms must not be negative"
        );
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.hedge_budget),
            "--hedge-budget must be between 0 and 1"
        );
        let hedge = (self.hedge_percentile > 0.0 && self.hedge_budget > 0.0).then(|| HedgePolicy {
            percentile: self.hedge_percentile / 100.0,
            budget: self.hedge_budget,
        });
        Ok(RecommendConfig {
            graph,
            cache: self.cache.nodes.clone(),
            cache_hash: self.cache.cache_hash,
            default_deadline: Duration::from_millis(self.deadline_ms),
            ranking_reserve: Duration::from_millis(self.ranking_reserve_ms),
            source_budget: Duration::from_millis(self.source_budget_ms),
            sizes: SourceSizes {
                friends_of_friends: self.fof_candidates,
                personalized_pagerank: self.ppr_candidates,
                co_follow: self.cofollow_candidates,
                popular_in_region: self.popular_candidates,
                min_candidates: self.min_candidates,
            },
            max_results: self.max_results,
            max_source_share: self.max_source_share,
            max_frame_bytes: self.max_frame_bytes,
            hedge,
            chaining_ttl: Duration::from_millis(self.chaining_cache_ms),
            chaining_entries: self.chaining_cache_entries,
            pressure: PressurePolicy {
                degrade_after: Duration::from_secs_f64(self.degrade_after_ms / 1000.0),
                shed_after: Duration::from_secs_f64(self.shed_after_ms / 1000.0),
                answer_within: Duration::from_millis(self.deadline_ms) / 2,
                ..PressurePolicy::DEFAULT
            },
            execution: self.execution,
            ..RecommendConfig::default()
        })
    }
}

/// A running `tern recommend serve`.
pub struct Serving {
    pub server: RunningServer,
    pub admin: Option<tern_metrics::AdminHandle>,
    /// The model file's watcher, with `--model`.
    pub watcher: Option<Background>,
}

/// Starts `tern recommend serve`.
pub fn start(args: &ServeArgs) -> anyhow::Result<Serving> {
    let config = args.config()?;
    let model = match &args.model {
        Some(path) => load_model(path)?,
        None => parse_model(DEFAULT_MODEL).context("the committed default model")?,
    };
    let slot = ModelSlot::new(model);
    let watcher = match &args.model {
        Some(path) => Some(slot.watch(
            path.clone(),
            Duration::from_millis(args.model_reload_ms.max(1)),
        )?),
        None => None,
    };
    let mut runtime = RuntimeConfig {
        listen: Some(args.listen),
        io_threads: args.io_threads,
        ..RuntimeConfig::default()
    };
    if args.cpu_workers > 0 {
        runtime.executor.workers = args.cpu_workers;
    }
    runtime.validate()?;
    let admin = match args.admin {
        Some(addr) => Some(tern_metrics::AdminServer::builder(addr).start()?),
        None => None,
    };
    let server = Server::new(runtime, RecommendService::new(config, slot))
        .start()
        .context("starting tern recommend")?;
    Ok(Serving {
        server,
        admin,
        watcher,
    })
}

/// Runs `tern recommend <command>`.
pub fn run(args: &RecommendArgs) -> anyhow::Result<()> {
    match &args.command {
        RecommendCommand::Prepare(a) => {
            let (graph, regions) = a.source.load_with_regions()?;
            let stored = write_features(&graph, &regions, &a.cache.nodes, a.cache.cache_hash)?;
            println!(
                "tern recommend prepare: features of {stored} accounts written to {} cache node(s)",
                a.cache.nodes.len()
            );
            Ok(())
        }
        RecommendCommand::TrainData(a) => {
            anyhow::ensure!(
                a.holdout > 0.0 && a.holdout < 1.0,
                "--holdout must be between 0 and 1"
            );
            let graph = a.source.load_graph()?;
            let spec = TrainingSpec {
                holdout: a.holdout,
                min_follows: a.min_follows,
                users: a.users,
                seed: a.split_seed,
                sizes: RecommendConfig::default().sizes,
            };
            let source = a.source.clone();
            let written = write_training_rows(
                &graph,
                &spec,
                |g| {
                    tern_graph::Regions::find(
                        g,
                        source.seed,
                        source.region_passes,
                        source.popular_per_region,
                    )
                },
                &a.out,
            )?;
            println!(
                "tern recommend train-data: {} rows ({} positive) from {} users written to {}",
                written.rows,
                written.positives,
                written.users,
                a.out.display()
            );
            Ok(())
        }
        RecommendCommand::Eval(a) => {
            anyhow::ensure!(
                a.holdout > 0.0 && a.holdout < 1.0,
                "--holdout must be between 0 and 1"
            );
            let graph = a.source.load_graph()?;
            let temporary = a.work_dir.is_none();
            let work_dir = a.work_dir.clone().unwrap_or_else(|| {
                std::env::temp_dir().join(format!("tern-eval-{}", std::process::id()))
            });
            let spec = EvalSpec {
                holdout: a.holdout,
                min_follows: a.min_follows,
                users: a.users,
                seed: a.split_seed,
                model: a.model.clone(),
                train_users: a.train_users,
                work_dir: work_dir.clone(),
            };
            let regions = [
                "--seed".to_owned(),
                a.source.seed.to_string(),
                "--region-passes".to_owned(),
                a.source.region_passes.to_string(),
                "--popular-per-region".to_owned(),
                a.source.popular_per_region.to_string(),
            ];
            let result = evaluate(&graph, &spec, &regions);
            if temporary {
                let _ = std::fs::remove_dir_all(&work_dir);
            }
            let quality = result?;
            println!("| ranking | recall@10 | recall@20 | recall@50 | NDCG@20 |");
            println!("|---|---|---|---|---|");
            for (name, q) in RANKINGS.iter().zip(&quality) {
                let [r10, r20, r50, ndcg] = q.means();
                println!("| {name} | {r10:.4} | {r20:.4} | {r50:.4} | {ndcg:.4} |");
            }
            let json: Vec<String> = RANKINGS
                .iter()
                .zip(&quality)
                .map(|(name, q)| {
                    let [r10, r20, r50, ndcg] = q.means();
                    format!(
                        "{{\"ranking\":\"{name}\",\"recall@10\":{r10:.4},\"recall@20\":{r20:.4},\"recall@50\":{r50:.4},\"ndcg@20\":{ndcg:.4}}}"
                    )
                })
                .collect();
            println!(
                "the blend ranked {:.0} candidates per request (before duplicates across sources merged)",
                quality[RANKINGS.len() - 1].candidates_per_request()
            );
            println!("[{}]", json.join(","));
            Ok(())
        }
        RecommendCommand::Serve(a) => {
            let Serving {
                server,
                admin,
                watcher,
            } = start(a)?;
            if let Some(admin) = &admin {
                println!("tern recommend: admin endpoint on {}", admin.local_addr());
            }
            if let Some(addr) = server.local_addr() {
                println!(
                    "tern recommend: serving on {addr} (Thrift framed binary/compact, and HTTP: curl 'http://{addr}/v1/suggested-users?viewer=1&n=10')"
                );
            }
            server.run_until_signal()?;
            drop(watcher);
            if let Some(admin) = admin {
                admin.shutdown()?;
            }
            Ok(())
        }
    }
}
