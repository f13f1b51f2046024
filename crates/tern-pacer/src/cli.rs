//! `tern pacer`'s command line: `serve` and `simulate`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use tern_runtime::{RunningServer, RuntimeConfig, Server};

use crate::config::{self, Watcher};
use crate::ledger::LedgerConfig;
use crate::money::{Currency, Eur, Gbp, Usd};
use crate::service::{PacerConfig, PacerService};
use crate::sim::{simulate, write_chart, SimConfig};

/// `tern pacer`: the budget pacer.
#[derive(Args, Debug, Clone)]
pub struct PacerArgs {
    #[command(subcommand)]
    pub command: PacerCommand,
}

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
    /// Write the spend-vs-plan chart (SVG) here.
    #[arg(long)]
    pub chart: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// The campaigns file; its `currency` is the pacer's.
    #[arg(long)]
    pub config: PathBuf,
    #[arg(long, default_value = "127.0.0.1:7400")]
    pub listen: SocketAddr,
    /// I/O loops (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub io_threads: usize,
    /// How often the campaigns file is checked for changes, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub reload_ms: u64,
    /// A bid's reservation is released if no billing or loss notice came after this many milliseconds.
    #[arg(long, default_value_t = 120_000)]
    pub reservation_ttl_ms: u64,
}

/// A pacer server started by `serve`, with its configuration watcher.
pub struct Serving {
    pub server: RunningServer,
    pub watcher: Watcher,
}

/// Starts what `tern pacer serve` runs, in the currency the campaigns file names.
pub fn start_serving(args: &ServeArgs) -> anyhow::Result<Serving> {
    let text = std::fs::read_to_string(&args.config)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.config.display()))?;
    match config::currency(&text, config::is_json(&args.config))?.as_str() {
        "USD" => start::<Usd>(args),
        "EUR" => start::<Eur>(args),
        "GBP" => start::<Gbp>(args),
        other => anyhow::bail!("currency {other:?} is not supported (USD, EUR, GBP)"),
    }
}

fn start<C: Currency>(args: &ServeArgs) -> anyhow::Result<Serving> {
    let snapshot = config::load::<C>(&args.config, 1)?;
    let pacer = PacerConfig {
        ledger: LedgerConfig {
            reservation_ttl_ms: args.reservation_ttl_ms,
            ..LedgerConfig::default()
        },
        ..PacerConfig::default()
    };
    let runtime = RuntimeConfig {
        listen: Some(args.listen),
        io_threads: args.io_threads,
        ..RuntimeConfig::default()
    };
    let server = Server::new(runtime, PacerService::new(pacer, snapshot));
    let service = Arc::clone(server.service());
    let server = server.start()?;
    let watcher = Watcher::start(
        args.config.clone(),
        service,
        Duration::from_millis(args.reload_ms.max(1)),
    )?;
    Ok(Serving { server, watcher })
}

/// Runs `tern pacer <command>`.
pub fn run(args: &PacerArgs) -> anyhow::Result<()> {
    match &args.command {
        PacerCommand::Serve(a) => {
            let Serving { server, watcher } = start_serving(a)?;
            if let Some(addr) = server.local_addr() {
                println!(
                    "tern pacer: serving on {addr}, campaigns from {}",
                    a.config.display()
                );
            }
            server.run_until_signal()?;
            drop(watcher);
            Ok(())
        }
        PacerCommand::Simulate(a) => {
            anyhow::ensure!(
                a.loops >= 1 && a.threads >= 1,
                "--loops and --threads must be at least 1"
            );
            anyhow::ensure!(
                (1..=24 * 366).contains(&a.hours),
                "--hours must be 1..=8784"
            );
            let mut cfg = SimConfig::example(a.seed);
            cfg.loops = a.loops;
            cfg.threads = a.threads;
            cfg.peak_requests_per_slot = a.peak_requests;
            cfg.duration_ms = a.hours * 3_600_000;
            for c in &mut cfg.campaigns {
                c.flight_end_ms = cfg.duration_ms;
            }
            let report = simulate(&cfg);
            print!("{report}");
            if let Some(path) = &a.chart {
                write_chart(&report, path)?;
                println!("chart: {}", path.display());
            }
            Ok(())
        }
    }
}
