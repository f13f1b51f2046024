//! `tern pacer`'s command line: `serve` and `simulate`.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use tern_runtime::tls::{ClientAuth, KeyFormat, TlsVersion};
use tern_runtime::{RunningServer, RuntimeConfig, Server, Tls, TlsSettings};

use crate::service::{PacerConfig, PacerService};
use tern_http::HttpLimits;
use tern_pacer_core::campaigns;
use tern_pacer_core::ledger::LedgerConfig;
use tern_pacer_core::money::{Currency, Eur, Gbp, Usd};
use tern_pacer_core::proto::CampaignId;
use tern_pacer_sim::{simulate, write_chart, SimConfig, SimReport, UnfitCounts};
use tern_pacer_store::cluster::{ClusterConfig, ClusterNode};
use tern_pacer_store::journal::JournalConfig;
use tern_pacer_store::pg::{PgSource, PgWatcher};
use tern_pacer_store::watch::{self, Watcher};

/// `tern pacer`: the budget pacer.
#[derive(Args, Debug, Clone)]
pub struct PacerArgs {
    #[command(subcommand)]
    pub command: PacerCommand,
}

// `serve` has many flags and is parsed once per process: boxing it would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug, Clone)]
pub enum PacerCommand {
    /// Serve the gateway protocol on the tern runtime, deciding against a campaigns file (TOML, or JSON
    /// when it ends in .json) that is reloaded whenever it changes. Stops on SIGINT or SIGTERM.
    Serve(ServeArgs),
    /// Replay a synthetic day of traffic through the pacer's decision code and report delivery, overspend
    /// and smoothness per campaign (the example day: five campaigns, one per strategy).
    Simulate(SimulateArgs),
}

#[derive(Args, Debug, Clone)]
pub struct SimulateArgs {
    /// Seed of the traffic, prices and notices: the same seed gives the same report.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Simulated I/O loops (each with its own budget slices).
    #[arg(long, default_value_t = 4)]
    pub loops: usize,
    /// Threads running the simulation (does not change the output).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Hours of traffic.
    #[arg(long, default_value_t = 24)]
    pub hours: u64,
    /// Mean requests per one-minute slot at the busiest hour.
    #[arg(long, default_value_t = 400)]
    pub peak_requests: u32,
    /// Write the spend-vs-plan chart here (PNG when the name ends in .png, else SVG).
    #[arg(long)]
    pub chart: Option<PathBuf>,
    /// Print the report as one JSON object instead of the table, with each campaign's cumulative spend and
    /// plan at the end of every slot (for scripts such as bench/pacing_sweep.py).
    #[arg(long)]
    pub json: bool,
    /// Give each request an OpenRTB placement (slot sizes or video, bcat, badv, battr, wseat, a PMP deal)
    /// and the campaigns creatives, seats and a deal; filter them as the OpenRTB front does and report what
    /// was filtered and why (the mix: docs/pacer.md).
    #[arg(long)]
    pub placements: bool,
}

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// The campaigns file; its `currency` is the pacer's.
    #[arg(
        long,
        required_unless_present = "postgres",
        conflicts_with = "postgres"
    )]
    pub config: Option<PathBuf>,
    /// Read the campaigns from PostgreSQL instead of a file (a URL like
    /// postgres://user@127.0.0.1:5432/db; the schema is in docs/pacer.md).
    #[arg(long)]
    pub postgres: Option<String>,
    /// How often the PostgreSQL tables are re-read even without a NOTIFY, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub pg_poll_ms: u64,
    /// The pacer's currency with --postgres (every campaign row must be in it): USD, EUR or GBP.
    #[arg(long, default_value = "USD")]
    pub currency: String,
    /// Share each campaign's budget with other nodes through Redis budget leases (a URL like
    /// redis://127.0.0.1:6379/0; docs/pacer.md, "Several nodes"); needs --node-id.
    #[arg(long, requires = "node_id")]
    pub redis: Option<String>,
    /// This node's name among the nodes sharing budgets (unique).
    #[arg(long)]
    pub node_id: Option<String>,
    /// A node's budget lease not renewed for this many milliseconds is clawed back.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(4..=3_600_000))]
    pub lease_ms: u64,
    /// The budget a node holds per campaign under lease, in micro-units: also the most one expired lease
    /// can overspend.
    #[arg(long, default_value_t = 10_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub lease_slice_micros: u64,
    #[arg(long, default_value = "127.0.0.1:7400")]
    pub listen: SocketAddr,
    /// Serve HTTPS (and the gateway protocol over TLS) on --listen with this certificate chain (PEM, leaf
    /// first); the files are reloaded when they change. Needs --tls-key.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM: PKCS#8, PKCS#1 or SEC1) of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Serve the admin endpoint (/metrics, /healthz, /stats, the /dashboard page, and the per-campaign JSON at
    /// /campaigns and /campaigns/{id}) at this address (ADDR:PORT, as every tern service takes it; a bare PORT means
    /// 127.0.0.1:PORT; port 0 picks a free one); off unless given.
    #[arg(long, value_name = "ADDR:PORT", value_parser = tern_metrics::parse_admin_addr)]
    pub admin: Option<std::net::SocketAddr>,
    /// I/O loops (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub io_threads: usize,
    /// How often the campaigns file is checked for changes, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub reload_ms: u64,
    /// A bid's reservation is released if no billing or loss notice came after this many milliseconds.
    #[arg(long, default_value_t = 120_000)]
    pub reservation_ttl_ms: u64,
    /// How long an impression is remembered to recognise late and duplicate notices (at least the TTL); a
    /// bill arriving later is not counted. With `--max-tracked` it bounds the sustained bid rate per loop:
    /// max-tracked / forget-after (the defaults: 13,333 bids/s per loop).
    #[arg(long, default_value_t = 600_000)]
    pub forget_after_ms: u64,
    /// Most impressions one loop tracks at once (reservations plus remembered ones); a bid over it is refused
    /// as overloaded. Each costs about 96 bytes (docs/benchmarks.md); at most 2147483647.
    #[arg(long, default_value_t = 8_000_000)]
    pub max_tracked: usize,
    /// Journal settled spend and in-flight reservations in this directory, and start from what it holds,
    /// so a crash loses neither (docs/pacer.md, "Crash journal"); off unless given.
    #[arg(long)]
    pub journal_dir: Option<PathBuf>,
    /// Journal segment size, in MiB (each loop starts a new segment when it is full).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub journal_segment_mib: u64,
    /// How often the journal is flushed to disk (msync), in milliseconds: what a power loss can cost
    /// (a crash of the process alone costs nothing).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub journal_sync_ms: u64,
    /// HTTP: the largest request head (request line and headers), bytes; over it is a 431 and a close.
    #[arg(long, default_value_t = HttpLimits::default().max_head_bytes)]
    pub http_max_head_bytes: usize,
    /// HTTP: the most header fields in a request (64 at most are allowed whatever the value); over it is a
    /// 431 and a close.
    #[arg(long, default_value_t = HttpLimits::default().max_headers)]
    pub http_max_headers: usize,
    /// HTTP: the largest request body, bytes; over it is a 413 and a close.
    #[arg(long, default_value_t = HttpLimits::default().max_body_bytes)]
    pub http_max_body_bytes: usize,
    /// OpenRTB: the most impressions in one BidRequest; more is a 400.
    #[arg(long, default_value_t = PacerConfig::default().openrtb_max_imps)]
    pub openrtb_max_imps: usize,
}

/// A pacer server started by `serve`, with its configuration watcher.
pub struct Serving {
    pub server: RunningServer,
    /// Reloads the TLS certificate when its files change, with --tls-cert.
    pub tls_watcher: Option<tern_runtime::background::Background>,
    pub watcher: SourceWatcher,
    /// The admin endpoint, with `--admin`.
    pub admin: Option<tern_metrics::AdminHandle>,
    /// The budget lease thread, with `--redis`; dropping it reports the last spend and releases the leases.
    pub cluster: Option<ClusterNode>,
    /// Keeps each campaign's spend and plan on `/metrics` (`tern_pacer_campaign_*_micros`).
    pub spend_gauges: tern_metrics::CollectorGuard,
}

/// The thread keeping the configuration current: the file's, or PostgreSQL's.
pub enum SourceWatcher {
    File(Watcher),
    Postgres(PgWatcher),
}

impl SourceWatcher {
    pub fn stats(&self) -> &watch::WatchStats {
        match self {
            SourceWatcher::File(w) => w.stats(),
            SourceWatcher::Postgres(w) => w.stats(),
        }
    }
}

/// Starts what `tern pacer serve` runs, in the currency the campaigns file names (or `--currency`).
pub fn start_serving(args: &ServeArgs) -> anyhow::Result<Serving> {
    let currency = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            campaigns::currency(&text, campaigns::is_json(path))?
        }
        None => args.currency.clone(),
    };
    match currency.as_str() {
        "USD" => start::<Usd>(args),
        "EUR" => start::<Eur>(args),
        "GBP" => start::<Gbp>(args),
        other => anyhow::bail!("currency {other:?} is not supported (USD, EUR, GBP)"),
    }
}

fn start<C: Currency>(args: &ServeArgs) -> anyhow::Result<Serving> {
    // The first snapshot (and, from PostgreSQL, the budget deltas) before serving anything.
    enum Source {
        File(PathBuf),
        Postgres(Box<PgSource>, BTreeMap<CampaignId, i64>),
    }
    let (snapshot, mut source) = match (&args.postgres, &args.config) {
        (Some(url), _) => {
            let mut source = PgSource::connect(url)?;
            let read = source.read::<C>(1)?;
            (
                read.snapshot?,
                Source::Postgres(Box::new(source), read.deltas),
            )
        }
        (None, Some(path)) => (watch::load::<C>(path, 1)?, Source::File(path.clone())),
        (None, None) => anyhow::bail!("serve needs --config or --postgres"),
    };
    anyhow::ensure!(
        args.forget_after_ms >= args.reservation_ttl_ms,
        "--forget-after-ms must be at least --reservation-ttl-ms"
    );
    anyhow::ensure!(
        (1..=tern_pacer_core::ledger::MAX_TRACKED_LIMIT).contains(&args.max_tracked),
        "--max-tracked must be between 1 and {}",
        tern_pacer_core::ledger::MAX_TRACKED_LIMIT
    );
    let pacer = PacerConfig {
        ledger: LedgerConfig {
            reservation_ttl_ms: args.reservation_ttl_ms,
            forget_after_ms: args.forget_after_ms,
            max_tracked: args.max_tracked,
        },
        http: HttpLimits {
            max_head_bytes: args.http_max_head_bytes,
            max_headers: args.http_max_headers,
            max_body_bytes: args.http_max_body_bytes,
        },
        openrtb_max_imps: args.openrtb_max_imps,
        https: args.tls_cert.is_some(),
        ..PacerConfig::default()
    };
    let runtime = RuntimeConfig {
        listen: Some(args.listen),
        io_threads: args.io_threads,
        ..RuntimeConfig::default()
    };
    let service = match &args.journal_dir {
        Some(dir) => PacerService::with_journal(
            pacer,
            snapshot,
            JournalConfig {
                segment_bytes: (args.journal_segment_mib << 20) as usize,
                sync_interval: Duration::from_millis(args.journal_sync_ms),
                ..JournalConfig::new(dir.clone())
            },
        )
        .map_err(|e| anyhow::anyhow!("journal {}: {e}", dir.display()))?,
        None => PacerService::new(pacer, snapshot),
    };
    let mut server = Server::new(runtime, service);
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            let tls = Tls::new(TlsSettings {
                cert_chain: cert.clone(),
                key: key.clone(),
                key_format: KeyFormat::Pem,
                client_ca: None,
                client_auth: ClientAuth::None,
                min_version: TlsVersion::Tls12,
                cipher_suites: None,
                session_cache: false,
                write_buffer: 64 << 10,
            })?;
            server = server.with_tls(tls.clone(), Vec::new());
            Some(tls)
        }
        _ => None,
    };
    let service = Arc::clone(server.service());
    // The admin endpoint before the server: once it accepts, clients may take every descriptor.
    let admin = match args.admin {
        Some(addr) => {
            Some(crate::admin::routes(&service, tern_metrics::AdminServer::builder(addr)).start()?)
        }
        None => None,
    };
    if let Source::Postgres(pg, deltas) = &mut source {
        pg.apply_deltas(service.state(), deltas, || {});
    }
    // Leased budgets before the loops start, so they are never handed the configured budget.
    let cluster = match (&args.redis, &args.node_id) {
        (Some(url), Some(node_id)) => Some(ClusterNode::start(
            ClusterConfig {
                redis_url: url.clone(),
                node_id: node_id.clone(),
                lease_ms: args.lease_ms,
                lease_slice_micros: args.lease_slice_micros,
                key_prefix: "tern:pacer".to_owned(),
                resume: args.journal_dir.is_some(),
            },
            Arc::clone(service.state()),
        )?),
        (Some(_), None) => anyhow::bail!("--redis needs --node-id"),
        (None, _) => None,
    };
    let server = server.start()?;
    let watcher = match source {
        Source::Postgres(pg, _) => SourceWatcher::Postgres(PgWatcher::start(
            *pg,
            Arc::clone(service.state()),
            Duration::from_millis(args.pg_poll_ms.max(1)),
        )?),
        Source::File(path) => SourceWatcher::File(Watcher::start(
            path,
            Arc::clone(service.state()),
            Duration::from_millis(args.reload_ms.max(1)),
        )?),
    };
    let tls_watcher = match tls {
        Some(tls) => Some(tls.watch(Duration::from_millis(args.reload_ms.max(1)))?),
        None => None,
    };
    Ok(Serving {
        server,
        tls_watcher,
        watcher,
        admin,
        cluster,
        spend_gauges: crate::admin::spend_gauges(&service),
    })
}

/// Runs `tern pacer simulate`'s day: the example campaigns under the flags.
pub fn simulation(args: &SimulateArgs) -> anyhow::Result<SimReport> {
    anyhow::ensure!(
        args.loops >= 1 && args.threads >= 1,
        "--loops and --threads must be at least 1"
    );
    anyhow::ensure!(
        (1..=24 * 366).contains(&args.hours),
        "--hours must be 1..=8784"
    );
    let mut cfg = if args.placements {
        SimConfig::example_with_placements(args.seed)
    } else {
        SimConfig::example(args.seed)
    };
    cfg.loops = args.loops;
    cfg.threads = args.threads;
    cfg.peak_requests_per_slot = args.peak_requests;
    cfg.duration_ms = args.hours * 3_600_000;
    for c in &mut cfg.campaigns {
        c.flight_end_ms = cfg.duration_ms;
    }
    Ok(simulate(&cfg))
}

/// `simulate --json`: the report's figures, money in integer micros, with the run's flags. With
/// `--placements`, `"placements": true` and a `filtered` object (each reason's name to its count, zeros
/// included) per campaign and for all of them; without, neither key.
pub fn simulation_json(args: &SimulateArgs, report: &SimReport) -> serde_json::Value {
    let filtered_json = |counts: &UnfitCounts| -> serde_json::Value {
        counts
            .iter()
            .map(|(reason, n)| (reason.name().to_owned(), serde_json::Value::from(n)))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    let campaigns: Vec<serde_json::Value> = report
        .campaigns
        .iter()
        .map(|c| {
            let mut campaign = serde_json::json!({
                "id": c.id,
                "strategy": c.strategy,
                "budget_micros": c.budget.micros(),
                "spent_micros": c.spent.micros(),
                "overspend_micros": c.overspend.micros(),
                "supply_micros": c.supply.micros(),
                "delivery_pct": c.delivery_pct,
                "max_gap_pct": c.max_gap_pct,
                "slot_error_pct": c.slot_error_pct,
                "spent_by_slot": c.spent_by_slot,
                "plan_by_slot": c.plan_by_slot,
            });
            if let Some(filtered) = &c.filtered {
                campaign["filtered"] = filtered_json(filtered);
            }
            campaign
        })
        .collect();
    let mut json = serde_json::json!({
        "seed": args.seed,
        "loops": args.loops,
        "hours": args.hours,
        "peak_requests": args.peak_requests,
        "slot_ms": report.slot_ms,
        "requests": report.requests,
        "bids": report.bids,
        "wins": report.wins,
        "notices": report.notices,
        "late_billed": report.late_billed,
        "exchange_billed_micros": report.exchange_billed.micros(),
        "campaigns": campaigns,
    });
    if let Some(filtered) = report.filtered() {
        json["placements"] = true.into();
        json["filtered"] = filtered_json(&filtered);
    }
    json
}

/// Runs `tern pacer <command>`.
pub fn run(args: &PacerArgs) -> anyhow::Result<()> {
    match &args.command {
        PacerCommand::Serve(a) => {
            let Serving {
                server,
                tls_watcher,
                watcher,
                admin,
                cluster,
                spend_gauges: _spend_gauges,
            } = start_serving(a)?;
            if let Some(admin) = &admin {
                println!("tern pacer: admin endpoint on {}", admin.local_addr());
            }
            if let Some(addr) = server.local_addr() {
                let from = match (&a.config, &a.postgres) {
                    (Some(path), _) => path.display().to_string(),
                    (None, _) => "PostgreSQL".to_owned(),
                };
                println!("tern pacer: serving on {addr}, campaigns from {from}");
            }
            server.run_until_signal()?;
            drop(tls_watcher);
            drop(watcher);
            drop(cluster);
            if let Some(admin) = admin {
                admin.shutdown()?;
            }
            Ok(())
        }
        PacerCommand::Simulate(a) => {
            let report = simulation(a)?;
            // Written, not printed: a closed pipe (`| head`) is an error to report, not a panic.
            let mut out = std::io::stdout().lock();
            if a.json {
                writeln!(out, "{}", simulation_json(a, &report))?;
            } else {
                write!(out, "{report}")?;
            }
            if let Some(path) = &a.chart {
                write_chart(&report, path)?;
                if !a.json {
                    writeln!(out, "chart: {}", path.display())?;
                }
            }
            out.flush()?;
            Ok(())
        }
    }
}
