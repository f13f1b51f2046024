//! `tern graph`: the recommender's candidate sources as a network service. It loads a follow graph (a
//! graph-tool file, an edge list, or a generated power-law graph), finds its regions once, and answers the
//! calls of `idl/graph.thrift` (framed Thrift, binary or compact, on one port) on the tern runtime: cheap
//! calls on the I/O loops, the two-hop counts and the walks on the CPU pool, each call within its deadline.
//! `--shard K/N` answers for the accounts that hash to shard K; several processes may serve one shard.

mod answer;
mod service;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use tern_graph::{Graph, Regions, Shard, Synthetic};
use tern_runtime::{RunningServer, RuntimeConfig, Server};

pub use answer::{GraphData, GraphLimits};
pub use service::{Fault, GraphRequest, GraphService};

/// Where a graph comes from, and how its regions are found: shared by `tern graph` and the recommender's
/// offline steps, which must see the same graph and the same regions.
#[derive(Args, Debug, Clone)]
pub struct GraphSource {
    /// The graph: a graph-tool file (.gt, .gt.gz; topology only) or an edge list (two integer ids per line,
    /// `#` comments; gunzipped when it ends in .gz). Without it, a generated graph (--synthetic-edges).
    #[arg(long)]
    pub graph: Option<PathBuf>,
    /// An edge list's edges go both ways (graph-tool files say so themselves).
    #[arg(long)]
    pub undirected: bool,
    /// Without --graph: generate a power-law graph with communities of about this many follows (and 1/20
    /// as many accounts).
    #[arg(long, default_value_t = 1_000_000)]
    pub synthetic_edges: usize,
    /// Seed of the generated graph and of the regions.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Label propagation passes that find the regions.
    #[arg(long, default_value_t = 10)]
    pub region_passes: usize,
    /// Accounts kept per region for popular_in_region.
    #[arg(long, default_value_t = 500)]
    pub popular_per_region: usize,
}

/// `tern graph`'s flags.
#[derive(Args, Debug, Clone)]
pub struct GraphArgs {
    #[command(flatten)]
    pub source: GraphSource,
    /// Serve the accounts whose id hashes to shard K of N (K from 0).
    #[arg(long, default_value = "0/1")]
    pub shard: Shard,
    #[arg(long, default_value = "127.0.0.1:7600")]
    pub listen: SocketAddr,
    /// I/O loops (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub io_threads: usize,
    /// CPU workers for the two-hop counts and the walks (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub cpu_workers: usize,
    /// Serve the admin endpoint (/metrics, /stats, /healthz, the /dashboard page; its index at /) on this
    /// address (ADDR:PORT; a bare PORT means 127.0.0.1:PORT); off unless given.
    #[arg(long, value_name = "ADDR:PORT", value_parser = tern_metrics::parse_admin_addr)]
    pub admin: Option<SocketAddr>,
    /// Most candidates or neighbours one call returns; a larger `limit` is a BadRequest.
    #[arg(long, default_value_t = GraphLimits::default().max_candidates)]
    pub max_candidates: usize,
    /// Two-hop sources: accounts of the first hop taken (a seeded sample past it).
    #[arg(long, default_value_t = GraphLimits::default().first_hop)]
    pub first_hop: usize,
    /// Two-hop sources: accounts taken from each first-hop account.
    #[arg(long, default_value_t = GraphLimits::default().second_hop)]
    pub second_hop: usize,
    /// Personalized PageRank: walk steps per call (fewer when the deadline comes first).
    #[arg(long, default_value_t = GraphLimits::default().walk_steps)]
    pub walk_steps: usize,
    /// Personalized PageRank: probability of jumping back to the viewer after a step.
    #[arg(long, default_value_t = GraphLimits::default().walk_restart)]
    pub walk_restart: f64,
    /// A call's deadline when it gives none, in milliseconds.
    #[arg(long, default_value_t = 50)]
    pub deadline_ms: u64,
    /// Largest request frame, in bytes; a bigger one is answered with a protocol error and the connection
    /// closed.
    #[arg(long, default_value_t = GraphLimits::default().max_frame_bytes)]
    pub max_frame_bytes: usize,
    /// Answer each connection's calls in the order they came, for clients that pipeline calls and match
    /// replies by order; by default a call is answered when it is done, named by its sequence id.
    #[arg(long)]
    pub in_order_replies: bool,
    /// Fault injection, for experiments: delay the answers of a share of the calls by this many
    /// milliseconds (a stalling replica). Off unless given.
    #[arg(long, value_name = "MS")]
    pub inject_delay_ms: Option<u64>,
    /// Fault injection: the share of calls delayed, 0 to 1.
    #[arg(long, default_value_t = 1.0, requires = "inject_delay_ms")]
    pub inject_delay_share: f64,
    /// Fault injection: delay only this method's calls (e.g. personalized_pagerank); all methods if not given.
    #[arg(long, value_name = "METHOD", requires = "inject_delay_ms")]
    pub inject_method: Option<String>,
}

impl GraphArgs {
    fn fault(&self) -> anyhow::Result<Option<Fault>> {
        let Some(ms) = self.inject_delay_ms else {
            return Ok(None);
        };
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.inject_delay_share),
            "--inject-delay-share must be between 0 and 1"
        );
        let method = match &self.inject_method {
            None => None,
            Some(name) => Some(tern_graph_proto::Method::from_name(name).with_context(|| {
                let names: Vec<&str> = tern_graph_proto::Method::ALL
                    .iter()
                    .map(|m| m.name())
                    .collect();
                format!(
                    "--inject-method {name}: not a method (one of {})",
                    names.join(", ")
                )
            })?),
        };
        Ok(Some(Fault {
            delay: Duration::from_millis(ms),
            share: self.inject_delay_share,
            method,
        }))
    }

    fn limits(&self) -> anyhow::Result<GraphLimits> {
        anyhow::ensure!(
            (0.0..1.0).contains(&self.walk_restart) && self.walk_restart > 0.0,
            "--walk-restart must be between 0 and 1"
        );
        anyhow::ensure!(
            self.max_frame_bytes >= 64,
            "--max-frame-bytes must be at least 64"
        );
        Ok(GraphLimits {
            max_candidates: self.max_candidates,
            first_hop: self.first_hop,
            second_hop: self.second_hop,
            walk_steps: self.walk_steps,
            walk_restart: self.walk_restart,
            default_deadline: Duration::from_millis(self.deadline_ms),
            max_frame_bytes: self.max_frame_bytes,
        })
    }
}

impl GraphSource {
    /// Loads or generates the graph, with a line saying what it is.
    pub fn load_graph(&self) -> anyhow::Result<Graph> {
        let started = Instant::now();
        let (graph, source) = match &self.graph {
            Some(path) => {
                let graph = tern_graph::load_path(path, !self.undirected)
                    .with_context(|| format!("loading {}", path.display()))?;
                (graph, path.display().to_string())
            }
            None => {
                anyhow::ensure!(
                    self.synthetic_edges >= 1000,
                    "--synthetic-edges must be at least 1000"
                );
                let spec = Synthetic::with_edges(self.synthetic_edges, self.seed);
                (spec.generate(), format!("generated, seed {}", self.seed))
            }
        };
        println!(
            "tern graph: {} accounts, {} follows ({}; {}), loaded in {:.1} s",
            graph.nodes(),
            graph.arcs(),
            if graph.is_directed() {
                "directed"
            } else {
                "undirected, both ways"
            },
            source,
            started.elapsed().as_secs_f64()
        );
        Ok(graph)
    }

    /// The graph and its regions, with a line saying how long finding them took.
    pub fn load_with_regions(&self) -> anyhow::Result<(Graph, Regions)> {
        let graph = self.load_graph()?;
        let started = Instant::now();
        let regions = Regions::find(
            &graph,
            self.seed,
            self.region_passes,
            self.popular_per_region,
        );
        println!(
            "tern graph: {} regions (label propagation, seed {}) in {:.1} s",
            regions.count(),
            self.seed,
            started.elapsed().as_secs_f64()
        );
        Ok((graph, regions))
    }
}

/// A running `tern graph`.
pub struct GraphServing {
    pub server: RunningServer,
    pub admin: Option<tern_metrics::AdminHandle>,
    /// The graph it serves, with its regions.
    pub data: Arc<GraphData>,
}

/// Loads the graph, finds its regions and starts serving.
pub fn start(args: &GraphArgs) -> anyhow::Result<GraphServing> {
    let limits = args.limits()?;
    let fault = args.fault()?;
    let (graph, regions) = args.source.load_with_regions()?;
    let data = GraphData {
        graph,
        regions,
        shard: args.shard,
        limits,
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
    // The admin endpoint before the server: once it accepts, clients may take every descriptor.
    let admin = match args.admin {
        Some(addr) => Some(tern_metrics::AdminServer::builder(addr).start()?),
        None => None,
    };
    let mut service = GraphService::new(data);
    if args.in_order_replies {
        service = service.in_order();
    }
    if let Some(fault) = fault {
        println!(
            "tern graph: fault injection: {:.2}% of {} calls answered {} ms late",
            fault.share * 100.0,
            fault.method.map_or("all", |m| m.name()),
            fault.delay.as_millis()
        );
        service = service.with_fault(fault);
    }
    let server = Server::new(runtime, service);
    let data = Arc::clone(server.service().data());
    let server = server.start().context("starting tern graph")?;
    Ok(GraphServing {
        server,
        admin,
        data,
    })
}

/// Runs `tern graph` until SIGINT or SIGTERM.
pub fn run(args: &GraphArgs) -> anyhow::Result<()> {
    let GraphServing { server, admin, .. } = start(args)?;
    if let Some(admin) = &admin {
        println!("tern graph: admin endpoint on {}", admin.local_addr());
    }
    if let Some(addr) = server.local_addr() {
        println!(
            "tern graph: serving shard {} on {addr} (Thrift, framed, binary or compact)",
            args.shard
        );
    }
    server.run_until_signal()?;
    if let Some(admin) = admin {
        admin.shutdown()?;
    }
    Ok(())
}
