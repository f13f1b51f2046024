//! The `tern load` command line.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use crate::config::{
    Arrival, Config, HttpWorkload, IdRange, KeyDistribution, Mix, Mode, PacerWorkload, PriceRange,
    Protocol, RecommendCall, RecommendWire, RecommendWorkload, SizeRange, TlsOptions, Transport,
    DEFAULT_CAMPAIGNS,
};
use crate::report::{compare_table, Report};
use crate::{plot, run_load};

/// Drive a server with requests and measure its latency and throughput.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// Server address (host:port).
    #[arg(short, long, default_value = "127.0.0.1:11211")]
    pub server: String,
    #[arg(long, value_enum, default_value = "memcache-text")]
    pub protocol: Protocol,
    #[arg(long, value_enum, default_value = "tcp")]
    pub transport: Transport,
    /// TLS over each TCP connection (rustls; the handshake is done while connecting, before the run).
    #[arg(long)]
    pub tls: bool,
    /// With --tls: CA certificates (PEM) the server's certificate must chain to; without it the certificate
    /// is not checked, as wrk and memtier do.
    #[arg(long, requires = "tls")]
    pub tls_ca: Option<PathBuf>,
    /// With --tls: the name the server's certificate must carry (default: the server's IP address).
    #[arg(long, requires = "tls")]
    pub tls_server_name: Option<String>,
    /// Connections in total (UDP: sockets).
    #[arg(short, long, default_value_t = 50)]
    pub connections: usize,
    #[arg(short, long, default_value_t = 1)]
    pub threads: usize,
    /// Requests in flight per connection at most.
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,
    /// Keys per get request.
    #[arg(long, default_value_t = 1)]
    pub multiget: usize,
    /// Open loop at this many requests per second in total; without it, closed loop.
    #[arg(short, long)]
    pub rate: Option<f64>,
    /// Spacing of open-loop requests.
    #[arg(long, value_enum, default_value = "fixed")]
    pub arrival: Arrival,
    /// Measured seconds, after the warm-up.
    #[arg(short, long)]
    pub duration: Option<f64>,
    /// Stop after this many requests (warm-up included). Without --duration, runs until then.
    #[arg(short = 'n', long)]
    pub requests: Option<u64>,
    /// Seconds at the start that are not measured.
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// Number of distinct keys.
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// uniform, zipf, zipf:S or sequential.
    #[arg(long, default_value = "uniform")]
    pub key_dist: KeyDistribution,
    /// Key size in bytes: N or MIN-MAX.
    #[arg(long, default_value = "16")]
    pub key_size: SizeRange,
    /// Value size in bytes: N or MIN-MAX.
    #[arg(long, default_value = "100")]
    pub value_size: SizeRange,
    /// Operation weights, e.g. get=9,set=1 (also delete, incr, decr).
    #[arg(long, default_value = "get=9,set=1")]
    pub mix: Mix,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Set every key once before the run.
    #[arg(long)]
    pub preload: bool,
    /// Largest value accepted in a reply, bytes.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_value: usize,
    /// Seconds a reply may take before it counts as a timeout.
    #[arg(long, default_value_t = 2.0)]
    pub timeout: f64,
    /// PID of the server, to report its CPU use.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// No progress line.
    #[arg(short, long)]
    pub quiet: bool,
    /// Write the JSON report here; `-` prints it to stdout instead of the table.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write latency and throughput charts here: PNG if the name ends in .png, else SVG.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Pacer protocol: bid requests per BIDS frame.
    #[arg(long, default_value_t = 10)]
    pub batch: usize,
    /// Pacer protocol: candidate campaigns per bid request (distinct).
    #[arg(long, default_value_t = 3)]
    pub candidates: usize,
    /// Pacer protocol: campaign ids to draw candidates from (FIRST-LAST), with --key-dist. The default is
    /// the campaigns `tern run` serves (and examples/campaigns.toml has).
    #[arg(long, default_value_t = DEFAULT_CAMPAIGNS)]
    pub campaigns: IdRange,
    /// Pacer protocol: candidates' maximum bids, CPM in currency units: N or MIN-MAX.
    #[arg(long, default_value = "1-5")]
    pub max_bid: PriceRange,
    /// Pacer protocol: requests' floor prices, CPM in currency units: N or MIN-MAX.
    #[arg(long, default_value = "0.10-0.50")]
    pub floor: PriceRange,
    /// Pacer protocol: the pacer's currency (ISO 4217).
    #[arg(long, default_value = "USD")]
    pub currency: String,
    /// Pacer protocol: fraction of bids followed by a billing notice (0..=1).
    #[arg(long, default_value_t = 0.0)]
    pub notices: f64,
    /// Pacer protocol: each request's deadline, milliseconds after it is sent.
    #[arg(long, default_value_t = 1000)]
    pub deadline_ms: u64,
    /// HTTP protocol: request method.
    #[arg(long, default_value = "GET")]
    pub http_method: String,
    /// HTTP protocol: request path.
    #[arg(long, default_value = "/")]
    pub http_path: String,
    /// HTTP protocol: request body, inline, or @FILE to read it from a file. Each `${SEQ}` in it
    /// becomes an id unique to the request (e.g. an OpenRTB auction id).
    #[arg(long)]
    pub http_body: Option<String>,
    /// HTTP protocol: an extra header, `Name: value` (repeatable).
    #[arg(long)]
    pub http_header: Vec<String>,
    /// Recommend protocol: which call (viewers, and Chaining's profiles, are the keys 0..--keys drawn with
    /// --key-dist).
    #[arg(long, value_enum, default_value = "suggested-users")]
    pub recommend_call: RecommendCall,
    /// Recommend protocol: accounts asked per request.
    #[arg(long, default_value_t = 20)]
    pub recommend_n: i32,
    /// Recommend protocol: each request's deadline in milliseconds (0: the server's default).
    #[arg(long, default_value_t = 0)]
    pub recommend_deadline_ms: u32,
    /// Recommend protocol: framed Thrift (binary or compact) or the HTTP/JSON front.
    #[arg(long, value_enum, default_value = "thrift-binary")]
    pub recommend_wire: RecommendWire,
    /// Compare two JSON reports (no load is run); with --plot, overlay them.
    #[arg(long, num_args = 2, value_names = ["A_JSON", "B_JSON"])]
    pub compare: Option<Vec<PathBuf>>,
}

impl LoadArgs {
    /// The run these arguments describe.
    pub fn config(&self) -> anyhow::Result<Config> {
        let server: SocketAddr = self
            .server
            .to_socket_addrs()
            .with_context(|| format!("resolving {}", self.server))?
            .next()
            .with_context(|| format!("{} resolves to no address", self.server))?;
        let duration_s = match (self.duration, self.requests) {
            (None, None) => Some(
                Config::default()
                    .duration_s
                    .expect("default has a duration"),
            ),
            (d, _) => d,
        };
        let config = Config {
            server,
            protocol: self.protocol,
            transport: self.transport,
            connections: self.connections,
            threads: self.threads,
            pipeline: self.pipeline,
            multiget: self.multiget,
            mode: match self.rate {
                Some(rate) => Mode::Open {
                    rate,
                    arrival: self.arrival,
                },
                None => Mode::Closed,
            },
            duration_s,
            requests: self.requests,
            warmup_s: self.warmup,
            key_count: self.keys,
            key_distribution: self.key_dist,
            key_size: self.key_size,
            value_size: self.value_size,
            mix: self.mix.clone(),
            seed: self.seed,
            preload: self.preload,
            max_value: self.max_value,
            timeout_s: self.timeout,
            server_pid: self.server_pid,
            progress: !self.quiet,
            pacer: PacerWorkload {
                batch: self.batch,
                candidates: self.candidates,
                campaigns: self.campaigns,
                max_bid: self.max_bid,
                floor: self.floor,
                currency: self.currency.to_ascii_uppercase(),
                notices: self.notices,
                deadline_ms: self.deadline_ms,
            },
            http: HttpWorkload {
                method: self.http_method.clone(),
                path: self.http_path.clone(),
                headers: self.http_header.clone(),
                body: match self.http_body.as_deref() {
                    None => Vec::new(),
                    Some(text) => match text.strip_prefix('@') {
                        Some(file) => std::fs::read(file)
                            .with_context(|| format!("reading the HTTP body from {file}"))?,
                        None => text.as_bytes().to_vec(),
                    },
                },
            },
            recommend: RecommendWorkload {
                call: self.recommend_call,
                n: self.recommend_n,
                deadline_ms: self.recommend_deadline_ms,
                wire: self.recommend_wire,
            },
            tls: self.tls.then(|| TlsOptions {
                ca: self.tls_ca.clone(),
                server_name: self.tls_server_name.clone(),
            }),
        };
        config.validate()?;
        Ok(config)
    }
}

fn read_report(path: &Path) -> anyhow::Result<Report> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{} is not a tern load report", path.display()))
}

/// Runs `tern load`: a load (table on stdout, optional JSON and charts) or a comparison.
pub fn run(args: &LoadArgs) -> anyhow::Result<()> {
    if let Some(paths) = &args.compare {
        let [a, b] = paths.as_slice() else {
            bail!("--compare takes two reports")
        };
        let (ra, rb) = (read_report(a)?, read_report(b)?);
        println!(
            "A = {}\nB = {}\n{}",
            a.display(),
            b.display(),
            compare_table(&ra, &rb)
        );
        if let Some(plot_path) = &args.plot {
            let (la, lb) = (a.display().to_string(), b.display().to_string());
            plot::write_charts(plot_path, &[(&la, &ra), (&lb, &rb)])?;
        }
        return Ok(());
    }
    let config = args.config()?;
    let report = run_load(&config)?;
    match &args.json {
        Some(path) if path.as_os_str() == "-" => {
            println!("{}", serde_json::to_string_pretty(&report)?)
        }
        Some(path) => {
            print!("{}", report.table());
            let json = serde_json::to_string_pretty(&report)?;
            std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
        }
        None => print!("{}", report.table()),
    }
    if let Some(path) = &args.plot {
        plot::write_charts(path, &[("run", &report)])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::config::{Op, SizeRange};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        load: LoadArgs,
    }

    fn parse(args: &[&str]) -> LoadArgs {
        Cli::try_parse_from(std::iter::once("tern-load").chain(args.iter().copied()))
            .unwrap()
            .load
    }

    #[test]
    fn defaults_match_the_documented_run() {
        let config = parse(&[]).config().unwrap();
        let want = Config {
            progress: true,
            ..Config::default()
        };
        assert_eq!(config, want);
    }

    #[test]
    fn flags_reach_the_config() {
        let args = parse(&[
            "-s",
            "127.0.0.1:9",
            "--protocol",
            "memcache-meta",
            "--transport",
            "udp",
            "-c",
            "4",
            "-t",
            "2",
            "--rate",
            "1000",
            "--arrival",
            "poisson",
            "-n",
            "500",
            "--key-dist",
            "zipf:1.1",
            "--key-size",
            "10-20",
            "--mix",
            "get=1,delete=2",
            "--seed",
            "7",
            "-q",
        ]);
        let config = args.config().unwrap();
        assert_eq!(
            config.mode,
            Mode::Open {
                rate: 1000.0,
                arrival: Arrival::Poisson
            }
        );
        assert_eq!((config.duration_s, config.requests), (None, Some(500)));
        assert_eq!(config.key_distribution, KeyDistribution::Zipf { s: 1.1 });
        assert_eq!(config.key_size, SizeRange { min: 10, max: 20 });
        assert_eq!(config.mix.weight(Op::Delete), 2);
        assert_eq!(
            (config.transport, config.protocol),
            (Transport::Udp, Protocol::MemcacheMeta)
        );
        assert!(!config.progress);
    }

    #[test]
    fn bad_input_is_an_error_not_a_run() {
        assert!(parse(&["-c", "0"]).config().is_err());
        assert!(parse(&["--pipeline", "0"]).config().is_err());
        assert!(Cli::try_parse_from(["tern-load", "--mix", "get=x"]).is_err());
        assert!(Cli::try_parse_from(["tern-load", "--key-dist", "pareto"]).is_err());
        assert!(parse(&["--protocol", "pacer", "--candidates", "200"])
            .config()
            .is_err());
        assert!(parse(&["--protocol", "http", "--http-path", "no-slash"])
            .config()
            .is_err());
        assert!(Cli::try_parse_from(["tern-load", "--max-bid", "1.1234567"]).is_err());
        let err = run(&parse(&[
            "--compare",
            "/nonexistent/a.json",
            "/nonexistent/b.json",
        ]))
        .unwrap_err();
        assert!(
            format!("{err:#}").contains("/nonexistent/a.json"),
            "{err:#}"
        );
    }
}
