//! `tern`: one binary, one subcommand per service or tool.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

#[cfg(all(feature = "mimalloc", not(feature = "jemalloc")))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
use clap::{Args, Parser, Subcommand};
use tern_runtime::{BufferMode, RuntimeConfig, Server, Spread};

#[derive(Parser)]
#[command(
    name = "tern",
    version,
    about = "tern: a runtime and services for many small requests per second"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: LogArgs,
}

/// Logging, the same for every subcommand (given before or after it).
#[derive(Args, Debug)]
struct LogArgs {
    /// Log filter: a level (error, warn, info, debug, trace) or directives such as
    /// "warn,tern_runtime=debug"; default RUST_LOG, else info (tern cache: memcached's -v/-vv, else warn).
    /// Logs go to standard error through a non-blocking writer.
    #[arg(long, global = true, value_name = "FILTER")]
    log: Option<String>,
    /// Log line format: text (one line per event) or json (one object per line).
    #[arg(long, global = true, value_name = "FORMAT", default_value = "text",
          value_parser = ["text", "json"])]
    log_format: String,
}

impl LogArgs {
    /// Sets up logging for the process, unless the subcommand is tern cache without `--log` or RUST_LOG
    /// (memcached's -v then decides, as memcached's users expect).
    fn init(&self, command: &Command) -> anyhow::Result<Option<tern_metrics::logging::LogGuard>> {
        let env = std::env::var("RUST_LOG").ok().filter(|f| !f.is_empty());
        let filter = match (&self.log, env, command) {
            (Some(filter), _, _) => filter.clone(),
            (None, Some(filter), _) => filter,
            (None, None, Command::Cache(_)) => return Ok(None),
            (None, None, _) => "info".to_owned(),
        };
        let guard = tern_metrics::logging::init(&tern_metrics::logging::LogConfig {
            filter,
            format: self.log_format.parse()?,
            ..Default::default()
        })?;
        Ok(Some(guard))
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run the services on their embedded defaults (all on 127.0.0.1), until SIGTERM or SIGINT.
    Run(RunArgs),
    /// A memcached 1.6-compatible cache server; takes memcached's flags (-p -U -l -m -M -c -t -I -v -A -C -R -B -o ...).
    #[command(disable_help_flag = false, before_help = tern_cache::version_line())]
    Cache(Box<tern_cache::CacheArgs>),
    /// Generate load (open or closed loop) against a memcached-protocol server and report latency truthfully.
    Load(Box<tern_load::LoadArgs>),
    /// The ad budget pacer: `serve` the gateway protocol, or `simulate` a day of traffic.
    Pacer(Box<tern_pacer::PacerArgs>),
    /// The recommender's candidate sources over a follow graph (Thrift, idl/graph.thrift): friends of
    /// friends, personalized PageRank, co-follow, popular in region.
    Graph(Box<tern_graph_service::GraphArgs>),
    /// Suggested Users and Chaining over the graph's sources and the cache's features (Thrift,
    /// idl/recommend.thrift, and HTTP/JSON): `serve`, and the offline steps `prepare` and `train-data`.
    Recommend(Box<tern_recommend::RecommendArgs>),
    /// Serve the ping line protocol (the runtime's example service).
    Ping(Box<RuntimeArgs>),
    /// Run one of the seeds' experiments on tern's code: a table, then one JSON line with the figures (or
    /// serve a bench script's fixture: thrift-front).
    #[command(subcommand)]
    Bench(Experiment),
}

#[derive(Subcommand)]
enum Experiment {
    /// LIFO vs FIFO wake-up of a pool of 8 workers (seed 002).
    Wakeup(tern_bench::wakeup::Options),
    /// Blocking a fixed pool on a remote call vs continuing when it completes (seed 003).
    Blocking(tern_bench::blocking::Options),
    /// Cheap-request p99 with ~200 µs handlers inline on the I/O loop vs offloaded (seed 000).
    Offload(tern_bench::offload::Options),
    /// RSS per idle connection: shared vs per-connection buffers, and memcached (seed 001).
    ConnMemory(tern_bench::conn_memory::Options),
    /// tern recommend run three ways on the same sources and cores: a blocking worker pool, ranking inline on
    /// the I/O loops, ranking offloaded to the CPU pool (seed 000 on the real service).
    Recommend(tern_bench::recommend::Options),
    /// Serve idl/recommend.thrift with a trivial inline handler until SIGTERM or SIGINT: tern's Thrift
    /// front, which bench/thrift_front.py compares with Apache Thrift's C++ non-blocking server.
    ThriftFront(tern_bench::thrift_front::Options),
}

fn print_report(report: anyhow::Result<tern_bench::Report>) -> anyhow::Result<()> {
    let report = report?;
    println!("{}", report.table.trim_end());
    println!("{}", report.json);
    Ok(())
}

/// `tern run`'s options: where the services listen, an admin endpoint, and where it keeps its files.
#[derive(Args, Debug)]
struct RunArgs {
    /// The address every service listens on.
    #[arg(long, default_value = "127.0.0.1")]
    host: std::net::IpAddr,
    /// tern cache's port (memcached's protocols).
    #[arg(long, default_value_t = 11211)]
    cache_port: u16,
    /// tern pacer's port (the gateway protocol and OpenRTB over HTTP/1.1).
    #[arg(long, default_value_t = 7400)]
    pacer_port: u16,
    /// tern graph's port (Thrift).
    #[arg(long, default_value_t = 7600)]
    graph_port: u16,
    /// tern recommend's port (Thrift and HTTP).
    #[arg(long, default_value_t = 7700)]
    recommend_port: u16,
    /// tern ping's port.
    #[arg(long, default_value_t = 7070)]
    ping_port: u16,
    /// One admin endpoint for everything it runs: /metrics and /stats of every service (they share the
    /// process), /healthz, the /dashboard page and the pacer's /campaigns (ADDR:PORT; a bare PORT means
    /// 127.0.0.1:PORT); off unless given.
    #[arg(long, value_name = "ADDR:PORT", value_parser = tern_metrics::parse_admin_addr)]
    admin: Option<SocketAddr>,
    /// Where it keeps what it writes, kept after it exits: the pacer's campaigns file (written from the
    /// embedded example only if absent, so edits stay for the next run) and its crash journal. Default: a
    /// new directory under the system's temporary directory.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
}

/// `tern run`'s pacer campaigns (an example; see the file).
const DEFAULT_CAMPAIGNS: &str = include_str!("default-campaigns.toml");

/// `tern run`'s pacer settings: `tern pacer serve`'s defaults, on a copy of [`DEFAULT_CAMPAIGNS`].
#[derive(Parser)]
struct EmbeddedPacer {
    #[command(flatten)]
    pacer: tern_pacer::PacerArgs,
}

/// Starts `tern pacer serve` at `listen` on the campaigns file of `dir` (the embedded example, written if
/// absent; its watcher reloads it, so it can be edited live), with its crash journal in `dir`.
fn start_pacer(
    dir: &std::path::Path,
    listen: SocketAddr,
    admin: Option<SocketAddr>,
) -> anyhow::Result<tern_pacer::Serving> {
    let path = dir.join("campaigns.toml");
    if !path.exists() {
        std::fs::write(&path, DEFAULT_CAMPAIGNS)?;
    }
    let utf8 = |p: &std::path::Path| -> anyhow::Result<String> {
        Ok(p.to_str()
            .context("the data directory's path is not UTF-8")?
            .to_owned())
    };
    let (config, journal) = (utf8(&path)?, utf8(&dir.join("pacer-journal"))?);
    let listen = listen.to_string();
    let mut argv = vec![
        "pacer".to_owned(),
        "serve".into(),
        "--config".into(),
        config,
        "--journal-dir".into(),
        journal,
        "--listen".into(),
        listen,
    ];
    if let Some(admin) = admin {
        argv.extend(["--admin".into(), admin.to_string()]);
    }
    let args = EmbeddedPacer::try_parse_from(argv)?.pacer;
    let tern_pacer::PacerCommand::Serve(serve) = &args.command else {
        unreachable!("parsed as serve")
    };
    let serving = tern_pacer::start_serving(serve).context("starting the pacer")?;
    if let Some(addr) = serving.server.local_addr() {
        println!(
            "tern pacer listening on {addr} (gateway protocol and OpenRTB), campaigns from {}: try\n  \
             curl -si --data-binary @examples/openrtb/banner-site.json http://{addr}/openrtb2/auction",
            path.display()
        );
    }
    if let Some(admin) = &serving.admin {
        println!(
            "admin endpoint on http://{} (/metrics and /stats of every service, /campaigns)",
            admin.local_addr()
        );
    }
    Ok(serving)
}

/// `tern run`'s recommender: `tern graph` on its generated default graph (127.0.0.1:7600) and `tern recommend
/// serve` (127.0.0.1:7700) with the committed model, both on their defaults; the features go into the
/// embedded tern cache (127.0.0.1:11211) from a thread once the cache listens.
struct EmbeddedRecommender {
    graph: tern_graph_service::GraphServing,
    recommend: tern_recommend::Serving,
    features: std::thread::JoinHandle<()>,
}

#[derive(Parser)]
struct EmbeddedGraph {
    #[command(flatten)]
    graph: tern_graph_service::GraphArgs,
}

#[derive(Parser)]
struct EmbeddedRecommend {
    #[command(subcommand)]
    command: tern_recommend::RecommendCommand,
}

fn start_recommender(
    cache: SocketAddr,
    graph_listen: SocketAddr,
    listen: SocketAddr,
) -> anyhow::Result<EmbeddedRecommender> {
    let graph_listen = graph_listen.to_string();
    let graph_args = EmbeddedGraph::try_parse_from(["graph", "--listen", &graph_listen])?.graph;
    let graph = tern_graph_service::start(&graph_args).context("starting tern graph")?;
    let graph_addr = graph.server.local_addr().context("tern graph listens")?;
    println!(
        "tern graph listening on {graph_addr} (Thrift: idl/graph.thrift; tern recommend's candidate \
         sources, which the recommender's example below calls)"
    );
    let cache_arg = cache.to_string();
    let graph_arg = graph_addr.to_string();
    let listen = listen.to_string();
    let tern_recommend::RecommendCommand::Serve(serve) = EmbeddedRecommend::try_parse_from([
        "recommend",
        "serve",
        "--listen",
        &listen,
        "--graph-shard",
        &graph_arg,
        "--cache",
        &cache_arg,
    ])?
    .command
    else {
        unreachable!("parsed as serve")
    };
    let recommend = tern_recommend::start(&serve).context("starting tern recommend")?;
    let addr = recommend
        .server
        .local_addr()
        .context("tern recommend listens")?;
    // A viewer with a few follows, for the example.
    let data = &graph.data;
    let viewer = (0..data.graph.nodes() as u32)
        .find(|&v| data.graph.out_neighbours(v).len() >= 10)
        .map_or(0, |v| data.graph.id(v));
    println!(
        "tern recommend listening on {addr} (Thrift: idl/recommend.thrift, and HTTP): try\n  curl 'http://{addr}/v1/suggested-users?viewer={viewer}&n=10'"
    );
    let data = std::sync::Arc::clone(&graph.data);
    let features = std::thread::Builder::new()
        .name("tern-run-features".into())
        .spawn(move || {
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while std::net::TcpStream::connect(cache).is_err() {
                if std::time::Instant::now() > deadline {
                    eprintln!("tern run: the cache did not listen on {cache}; recommendations go without features");
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            match tern_recommend::write_features(&data.graph, &data.regions, &[cache], tern_cache_client::KeyHash::Fnv1a64) {
                Ok(n) => println!("tern recommend: features of {n} accounts written to the cache"),
                Err(e) => eprintln!("tern run: writing the features failed: {e:#}"),
            }
        })?;
    Ok(EmbeddedRecommender {
        graph,
        recommend,
        features,
    })
}

/// `tern run`'s cache settings: memcached's defaults, as if `tern cache` had no flags.
#[derive(Parser)]
struct EmbeddedDefaults {
    #[command(flatten)]
    cache: tern_cache::CacheArgs,
}

/// The runtime's settings: a TOML file, then flags that override it.
#[derive(Args, Debug)]
struct RuntimeArgs {
    /// TOML file with runtime settings (see docs/architecture.md for every field).
    #[arg(long)]
    config: Option<PathBuf>,
    /// TCP address to listen on.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// UDP address to listen on (off unless given).
    #[arg(long)]
    udp: Option<SocketAddr>,
    /// I/O threads (0 = one per core).
    #[arg(long)]
    io_threads: Option<usize>,
    /// How connections are spread over the loops.
    #[arg(long, value_parser = ["reuseport", "acceptor"])]
    spread: Option<String>,
    /// Where connections keep their read bytes.
    #[arg(long, value_parser = ["shared", "per-connection"])]
    buffer_mode: Option<String>,
    /// Size of the per-loop read buffer (and of each connection's own buffer in per-connection mode).
    #[arg(long)]
    read_buffer_bytes: Option<usize>,
    /// Maximum open connections.
    #[arg(long)]
    max_connections: Option<usize>,
    /// Maximum requests in flight (0 = unlimited).
    #[arg(long)]
    max_in_flight: Option<usize>,
    /// Requests per second accepted (0 = unlimited).
    #[arg(long)]
    rate_limit: Option<u64>,
    /// Close connections idle this long (e.g. 30s; off unless given).
    #[arg(long, value_parser = humantime::parse_duration)]
    idle_timeout: Option<Duration>,
    /// Answer "overloaded" to requests that waited this long for a CPU worker (e.g. 50ms).
    #[arg(long, value_parser = humantime::parse_duration)]
    queue_timeout: Option<Duration>,
    /// CPU pool workers (default: one per core).
    #[arg(long)]
    cpu_workers: Option<usize>,
    /// Serve the admin endpoint (/metrics, /stats, /healthz, the /dashboard page; its index at /) on this
    /// address (ADDR:PORT; a bare PORT means 127.0.0.1:PORT); off unless given.
    #[arg(long, value_name = "ADDR:PORT", value_parser = tern_metrics::parse_admin_addr)]
    admin: Option<SocketAddr>,
    /// Grace period of a graceful shutdown (e.g. 5s).
    #[arg(long, value_parser = humantime::parse_duration)]
    shutdown_grace: Option<Duration>,
}

impl RuntimeArgs {
    fn config(&self, default_listen: SocketAddr) -> anyhow::Result<RuntimeConfig> {
        let mut cfg = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                RuntimeConfig::from_toml(&text).with_context(|| format!("in {}", path.display()))?
            }
            None => RuntimeConfig::default(),
        };
        if cfg.listen.is_none() {
            cfg.listen = Some(default_listen);
        }
        cfg.listen = self.listen.or(cfg.listen);
        cfg.udp = self.udp.or(cfg.udp);
        cfg.io_threads = self.io_threads.unwrap_or(cfg.io_threads);
        if let Some(s) = &self.spread {
            cfg.spread = if s == "acceptor" {
                Spread::Acceptor
            } else {
                Spread::Reuseport
            };
        }
        if let Some(m) = &self.buffer_mode {
            cfg.buffer_mode = if m == "per-connection" {
                BufferMode::PerConnection
            } else {
                BufferMode::Shared
            };
        }
        cfg.read_buffer_bytes = self.read_buffer_bytes.unwrap_or(cfg.read_buffer_bytes);
        cfg.max_connections = self.max_connections.unwrap_or(cfg.max_connections);
        cfg.max_in_flight = self.max_in_flight.unwrap_or(cfg.max_in_flight);
        cfg.rate_limit = self.rate_limit.unwrap_or(cfg.rate_limit);
        cfg.idle_timeout = self.idle_timeout.or(cfg.idle_timeout);
        cfg.executor.queue_timeout = self.queue_timeout.or(cfg.executor.queue_timeout);
        cfg.executor.workers = self.cpu_workers.unwrap_or(cfg.executor.workers);
        cfg.shutdown_grace = self.shutdown_grace.unwrap_or(cfg.shutdown_grace);
        cfg.validate()?;
        Ok(cfg)
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let log = match cli.log.init(&cli.command) {
        Ok(log) => log,
        Err(error) => {
            eprintln!("Error: {error:#}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match run(cli.command) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // Why it stops, in the log an operator reads (one JSON object with --log-format json); tern cache
            // without --log keeps memcached's plain standard error.
            if log.is_some() {
                tracing::error!("{error:#}");
            } else {
                eprintln!("Error: {error:#}");
            }
            drop(log);
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Run(run) => {
            // The ping service, the pacer, tern graph and tern recommend in the background, tern cache
            // (memcached's defaults) in the foreground; a signal stops the cache, then the others.
            let at = |port| SocketAddr::new(run.host, port);
            let dir = match &run.data_dir {
                Some(dir) => dir.clone(),
                None => std::env::temp_dir().join(format!("tern-run-{}", std::process::id())),
            };
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("creating the data directory {}", dir.display()))?;
            println!("tern run: data in {} (kept after exit)", dir.display());
            let cfg = RuntimeConfig {
                listen: Some(at(run.ping_port)),
                ..RuntimeConfig::default()
            };
            let ping = Server::new(cfg, tern_ping::Ping)
                .start()
                .context("starting ping")?;
            let ping_addr = at(run.ping_port);
            println!(
                "tern ping listening on {ping_addr} (a line protocol: docs/architecture.md, \"tern ping\"): \
                 try\n  bash -c 'exec 3<>/dev/tcp/{}/{}; printf \"PING\\r\\n\" >&3; head -1 <&3'",
                ping_addr.ip(),
                ping_addr.port()
            );
            let pacer = start_pacer(&dir, at(run.pacer_port), run.admin)?;
            let cache_addr = at(run.cache_port);
            let recommender =
                start_recommender(cache_addr, at(run.graph_port), at(run.recommend_port))?;
            let (port, host) = (run.cache_port.to_string(), run.host.to_string());
            let cache = EmbeddedDefaults::parse_from(["cache", "-p", &port, "-l", &host]).cache;
            println!(
                "tern cache listening on {cache_addr} (memcached's protocols): try\n  \
                 tern load -s {cache_addr} --preload -d 5"
            );
            let result = tern_cache::run(&cache);
            recommender.recommend.server.shutdown();
            recommender.recommend.server.join();
            recommender.graph.server.shutdown();
            recommender.graph.server.join();
            let _ = recommender.features.join();
            pacer.server.shutdown();
            pacer.server.join();
            drop(pacer.watcher);
            ping.shutdown();
            ping.join();
            result?;
        }
        Command::Cache(args) => tern_cache::run(&args)?,
        Command::Load(args) => tern_load::run(&args)?,
        Command::Pacer(args) => tern_pacer::run(&args)?,
        Command::Graph(args) => tern_graph_service::run(&args)?,
        Command::Recommend(args) => tern_recommend::run(&args)?,
        Command::Bench(experiment) => match experiment {
            Experiment::Wakeup(o) => print_report(tern_bench::wakeup::run(&o))?,
            Experiment::Blocking(o) => print_report(tern_bench::blocking::run(&o))?,
            Experiment::Offload(o) => print_report(tern_bench::offload::run(&o))?,
            Experiment::ConnMemory(o) => print_report(tern_bench::conn_memory::run(&o))?,
            Experiment::Recommend(o) => print_report(tern_bench::recommend::run(&o))?,
            Experiment::ThriftFront(o) => tern_bench::thrift_front::serve(&o)?,
        },
        Command::Ping(args) => {
            let cfg = args.config("127.0.0.1:7070".parse()?)?;
            // The admin endpoint first: once the server accepts, clients may take every descriptor.
            let admin = match args.admin {
                Some(addr) => Some(tern_metrics::AdminServer::builder(addr).start()?),
                None => None,
            };
            let server = Server::new(cfg, tern_ping::Ping)
                .start()
                .context("starting ping")?;
            if let Some(addr) = server.local_addr() {
                println!("tern ping listening on {addr}");
            }
            if let Some(admin) = &admin {
                println!("admin endpoint on {}", admin.local_addr());
            }
            server.run_until_signal()?;
            if let Some(admin) = admin {
                admin.shutdown()?;
            }
        }
    }
    Ok(())
}
