//! What a run does: target, protocol, workload, pacing and bounds.

use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{bail, ensure, Context};
use serde::{Deserialize, Serialize};

/// Wire protocol spoken to the server. A new protocol is a variant here plus an arm in
/// `protocol.rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// memcached text protocol (`get`, `set`, ...).
    MemcacheText,
    /// memcached meta protocol (`mg`, `ms`, ...).
    MemcacheMeta,
    /// tern pacer's gateway protocol: each request is one BIDS frame (the --batch ... --deadline-ms options).
    Pacer,
    /// HTTP/1.1 keep-alive requests (the --http-* options).
    Http,
    /// tern recommend's Suggested Users and Chaining calls, viewers drawn from the keys (the --recommend-*
    /// options).
    Recommend,
}

/// `Display` as the name a user types for the value (`--protocol memcache-text`, `--transport tcp`): the
/// name clap derives for the flag, so the two cannot drift apart.
macro_rules! display_as_flag_value {
    ($($ty:ty),*) => {$(
        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                let value = clap::ValueEnum::to_possible_value(self)
                    .expect("every variant is a flag value");
                f.write_str(value.get_name())
            }
        }
    )*};
}

display_as_flag_value!(Protocol, RecommendCall, RecommendWire, Transport, Arrival);

impl Protocol {
    /// What one request and one counted unit of it are called in reports.
    pub fn unit_names(self) -> (&'static str, &'static str) {
        match self {
            Protocol::MemcacheText | Protocol::MemcacheMeta => ("requests", "keys"),
            Protocol::Pacer => ("batches", "decisions"),
            Protocol::Http => ("requests", "responses"),
            Protocol::Recommend => ("requests", "answers"),
        }
    }
}

/// An inclusive range of whole numbers, `N` or `MIN-MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdRange {
    pub first: u32,
    pub last: u32,
}

/// The campaigns `--protocol pacer` draws from by default: the ids of the campaigns `tern run` serves (its
/// embedded example, crates/tern/src/default-campaigns.toml), which examples/campaigns.toml also has. A test
/// beside the binary (crates/tern/tests/load_pacer.rs) checks both files against it.
pub const DEFAULT_CAMPAIGNS: IdRange = IdRange { first: 1, last: 4 };

impl std::fmt::Display for IdRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.first == self.last {
            write!(f, "{}", self.first)
        } else {
            write!(f, "{}-{}", self.first, self.last)
        }
    }
}

impl IdRange {
    /// How many numbers the range holds.
    pub fn count(self) -> u64 {
        u64::from(self.last - self.first) + 1
    }
}

impl FromStr for IdRange {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        let (first, last) = s.split_once('-').unwrap_or((s, s));
        let first: u32 = first
            .trim()
            .parse()
            .with_context(|| format!("range {s:?}"))?;
        let last: u32 = last
            .trim()
            .parse()
            .with_context(|| format!("range {s:?}"))?;
        ensure!(first <= last, "range {s:?}: first > last");
        Ok(IdRange { first, last })
    }
}

/// An inclusive range of prices in micro-units, written in whole units with up to six
/// decimals: `2.5` or `0.10-0.50`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriceRange {
    pub min_micros: u64,
    pub max_micros: u64,
}

fn parse_micros(text: &str) -> anyhow::Result<u64> {
    let text = text.trim();
    let (units, fraction) = text.split_once('.').unwrap_or((text, ""));
    ensure!(
        !units.is_empty() && units.bytes().all(|b| b.is_ascii_digit()),
        "price {text:?}: expected units with up to six decimals"
    );
    ensure!(
        fraction.len() <= 6 && fraction.bytes().all(|b| b.is_ascii_digit()),
        "price {text:?}: expected units with up to six decimals"
    );
    let units: u64 = units.parse().with_context(|| format!("price {text:?}"))?;
    let fraction: u64 = format!("{fraction:0<6}").parse().unwrap_or(0);
    units
        .checked_mul(1_000_000)
        .and_then(|m| m.checked_add(fraction))
        .with_context(|| format!("price {text:?} is too large"))
}

impl FromStr for PriceRange {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        let (min, max) = s.split_once('-').unwrap_or((s, s));
        let (min_micros, max_micros) = (parse_micros(min)?, parse_micros(max)?);
        ensure!(min_micros <= max_micros, "price range {s:?}: min > max");
        Ok(PriceRange {
            min_micros,
            max_micros,
        })
    }
}

/// What the pacer protocol sends: BIDS frames of `batch` requests with `candidates`
/// distinct campaigns each, drawn from `campaigns` with the run's key distribution; floors
/// and maximum bids are drawn from their ranges (CPM). After a bid, a billing notice follows
/// for a fraction `notices` of bids, on the same connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PacerWorkload {
    pub batch: usize,
    pub candidates: usize,
    pub campaigns: IdRange,
    pub max_bid: PriceRange,
    pub floor: PriceRange,
    /// ISO 4217 code of the pacer's currency.
    pub currency: String,
    /// Fraction of bids (0..=1) answered with a billing notice.
    pub notices: f64,
    /// Each request's deadline, this many milliseconds after it is sent.
    pub deadline_ms: u64,
}

impl Default for PacerWorkload {
    fn default() -> Self {
        PacerWorkload {
            batch: 10,
            candidates: 3,
            campaigns: DEFAULT_CAMPAIGNS,
            max_bid: PriceRange {
                min_micros: 1_000_000,
                max_micros: 5_000_000,
            },
            floor: PriceRange {
                min_micros: 100_000,
                max_micros: 500_000,
            },
            currency: "USD".to_string(),
            notices: 0.0,
            deadline_ms: 1000,
        }
    }
}

/// What the HTTP protocol sends: the same request every time, on keep-alive connections.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HttpWorkload {
    pub method: String,
    pub path: String,
    /// Extra header lines, `Name: value`.
    pub headers: Vec<String>,
    pub body: Vec<u8>,
}

impl Default for HttpWorkload {
    fn default() -> Self {
        HttpWorkload {
            method: "GET".to_string(),
            path: "/".to_string(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }
}

/// Which of tern recommend's calls a run makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum RecommendCall {
    SuggestedUsers,
    Chaining,
    /// Each request one or the other, at random.
    Mixed,
}

/// How tern recommend's calls travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum RecommendWire {
    /// Framed Thrift, binary protocol (Apache Thrift's default).
    ThriftBinary,
    ThriftCompact,
    /// `GET`s of the HTTP/JSON front.
    Http,
}

/// What the recommend protocol sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RecommendWorkload {
    pub call: RecommendCall,
    /// Accounts asked per request.
    pub n: i32,
    /// The request's deadline; 0 leaves it to the server.
    pub deadline_ms: u32,
    pub wire: RecommendWire,
}

impl Default for RecommendWorkload {
    fn default() -> Self {
        RecommendWorkload {
            call: RecommendCall::SuggestedUsers,
            n: 20,
            deadline_ms: 0,
            wire: RecommendWire::ThriftBinary,
        }
    }
}

/// How requests travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    Tcp,
    /// memcached UDP: one request per datagram with the 8-byte frame header.
    Udp,
}

/// Spacing of intended send times in open-loop mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Arrival {
    /// Evenly spaced.
    Fixed,
    /// Exponential gaps (a Poisson process).
    Poisson,
}

/// How sending is paced.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Mode {
    /// Requests are scheduled at `rate` per second in total; latency counts from the scheduled
    /// time, so a stalled server cannot hide queueing delay (coordinated omission).
    Open { rate: f64, arrival: Arrival },
    /// Every connection keeps `pipeline` requests in flight, for peak throughput.
    Closed,
}

/// Which keys requests touch.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum KeyDistribution {
    Uniform,
    /// Zipf over key ranks with exponent `s` (rank 0 is the hottest key).
    Zipf {
        s: f64,
    },
    /// Each key in turn, e.g. to preload every key once.
    Sequential,
}

impl FromStr for KeyDistribution {
    type Err = anyhow::Error;
    /// `uniform`, `sequential`, `zipf` (s = 0.99) or `zipf:S`.
    fn from_str(s: &str) -> anyhow::Result<Self> {
        match s {
            "uniform" => Ok(KeyDistribution::Uniform),
            "sequential" => Ok(KeyDistribution::Sequential),
            "zipf" => Ok(KeyDistribution::Zipf { s: 0.99 }),
            _ => {
                let Some(exponent) = s.strip_prefix("zipf:") else {
                    bail!(
                        "unknown key distribution {s:?}: use uniform, sequential, zipf or zipf:S"
                    );
                };
                let s: f64 = exponent
                    .parse()
                    .with_context(|| format!("zipf exponent {exponent:?}"))?;
                ensure!(
                    s.is_finite() && s > 0.0,
                    "zipf exponent must be > 0, got {s}"
                );
                Ok(KeyDistribution::Zipf { s })
            }
        }
    }
}

/// A size in bytes, fixed (`100`) or drawn per key from an inclusive range (`10-1000`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizeRange {
    pub min: usize,
    pub max: usize,
}

impl SizeRange {
    pub fn fixed(n: usize) -> Self {
        SizeRange { min: n, max: n }
    }
}

impl FromStr for SizeRange {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        let (min, max) = s.split_once('-').unwrap_or((s, s));
        let min: usize = min.trim().parse().with_context(|| format!("size {s:?}"))?;
        let max: usize = max.trim().parse().with_context(|| format!("size {s:?}"))?;
        ensure!(min <= max, "size range {s:?}: min > max");
        Ok(SizeRange { min, max })
    }
}

/// Operation kinds a workload can mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Op {
    /// Read `multiget` keys in one request.
    Get,
    Set,
    Delete,
    /// Increment a counter key (counter keys live in their own namespace).
    Incr,
    Decr,
}

impl Op {
    pub const ALL: [Op; 5] = [Op::Get, Op::Set, Op::Delete, Op::Incr, Op::Decr];

    pub fn name(self) -> &'static str {
        match self {
            Op::Get => "get",
            Op::Set => "set",
            Op::Delete => "delete",
            Op::Incr => "incr",
            Op::Decr => "decr",
        }
    }
}

/// Relative weights of each operation, e.g. `get=9,set=1`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mix(pub Vec<(Op, u32)>);

impl Mix {
    pub fn weight(&self, op: Op) -> u32 {
        self.0
            .iter()
            .filter(|(o, _)| *o == op)
            .map(|(_, w)| *w)
            .sum()
    }
}

impl FromStr for Mix {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        let mut weights = Vec::new();
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            let (name, weight) = part
                .split_once('=')
                .with_context(|| format!("mix entry {part:?}: expected OP=WEIGHT"))?;
            let op = Op::ALL
                .into_iter()
                .find(|op| op.name() == name.trim())
                .with_context(|| {
                    format!("unknown operation {name:?} (get, set, delete, incr, decr)")
                })?;
            let weight: u32 = weight
                .trim()
                .parse()
                .with_context(|| format!("weight in {part:?}"))?;
            weights.push((op, weight));
        }
        let mix = Mix(weights);
        ensure!(
            Op::ALL.iter().any(|&op| mix.weight(op) > 0),
            "mix {s:?} has no positive weight"
        );
        Ok(mix)
    }
}

/// TLS for the connections (`--tls`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsOptions {
    /// CA certificates (PEM) the server's certificate must chain to; without them it is not checked (the
    /// handshake still is).
    pub ca: Option<std::path::PathBuf>,
    /// The name the server's certificate must carry (default: the server's IP address).
    pub server_name: Option<String>,
}

/// A complete description of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Config {
    pub server: SocketAddr,
    pub protocol: Protocol,
    pub transport: Transport,
    /// Connections (UDP sockets) in total, spread over the threads.
    pub connections: usize,
    pub threads: usize,
    /// Requests in flight per connection at most.
    pub pipeline: usize,
    /// Keys per get request.
    pub multiget: usize,
    pub mode: Mode,
    /// Measured time after warm-up; `None` with `requests` set runs until the count is reached.
    pub duration_s: Option<f64>,
    /// Stop after this many requests have been sent (warm-up included).
    pub requests: Option<u64>,
    /// Replies to requests scheduled in the first `warmup_s` seconds are not measured.
    pub warmup_s: f64,
    pub key_count: u64,
    pub key_distribution: KeyDistribution,
    pub key_size: SizeRange,
    pub value_size: SizeRange,
    pub mix: Mix,
    pub seed: u64,
    /// Set every key (and counter, if the mix increments) once before the run.
    pub preload: bool,
    /// Largest value accepted in a reply.
    pub max_value: usize,
    /// How long a reply may take before it counts as a timeout (UDP) and how long the end of a
    /// run waits for outstanding replies.
    pub timeout_s: f64,
    /// PID of the server, to report its CPU use.
    pub server_pid: Option<u32>,
    /// Print a progress line every second to stderr.
    pub progress: bool,
    /// The requests of `--protocol pacer`.
    #[serde(default)]
    pub pacer: PacerWorkload,
    /// The requests of `--protocol http`.
    #[serde(default)]
    pub http: HttpWorkload,
    /// The requests of `--protocol recommend`.
    #[serde(default)]
    pub recommend: RecommendWorkload,
    /// TLS over each TCP connection, when set.
    #[serde(default)]
    pub tls: Option<TlsOptions>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            server: SocketAddr::from(([127, 0, 0, 1], 11211)),
            protocol: Protocol::MemcacheText,
            transport: Transport::Tcp,
            connections: 50,
            threads: 1,
            pipeline: 1,
            multiget: 1,
            mode: Mode::Closed,
            duration_s: Some(10.0),
            requests: None,
            warmup_s: 2.0,
            key_count: 100_000,
            key_distribution: KeyDistribution::Uniform,
            key_size: SizeRange::fixed(16),
            value_size: SizeRange::fixed(100),
            mix: Mix(vec![(Op::Get, 9), (Op::Set, 1)]),
            seed: 1,
            preload: false,
            max_value: 1 << 20,
            timeout_s: 2.0,
            server_pid: None,
            progress: false,
            pacer: PacerWorkload::default(),
            http: HttpWorkload::default(),
            recommend: RecommendWorkload::default(),
            tls: None,
        }
    }
}

/// Decimal digits of the largest key id, which every key must have room for after its prefix.
pub(crate) fn id_digits(key_count: u64) -> usize {
    key_count.saturating_sub(1).max(1).ilog10() as usize + 1
}

impl Config {
    /// Checks that the run is well-formed and bounded.
    pub fn validate(&self) -> anyhow::Result<()> {
        ensure!(self.threads >= 1, "threads must be >= 1");
        ensure!(
            self.connections >= self.threads,
            "connections ({}) must be >= threads ({})",
            self.connections,
            self.threads
        );
        ensure!(
            (1..=1024).contains(&self.pipeline),
            "pipeline must be in 1..=1024"
        );
        ensure!(
            (1..=100).contains(&self.multiget),
            "multiget must be in 1..=100"
        );
        ensure!(
            self.tls.is_none() || self.transport == Transport::Tcp,
            "TLS is for --transport tcp"
        );
        ensure!(self.key_count >= 1, "key count must be >= 1");
        let digits = id_digits(self.key_count);
        ensure!(
            self.key_size.min > digits
                && self.key_size.max <= tern_memcache_proto::client::MAX_KEY_LEN,
            "key size must be in {}..=250 bytes to hold {} distinct keys",
            digits + 1,
            self.key_count
        );
        ensure!(
            self.value_size.max <= self.max_value,
            "value size exceeds max value"
        );
        ensure!(
            self.duration_s.is_some() || self.requests.is_some(),
            "give a duration or a request count"
        );
        if let Some(d) = self.duration_s {
            ensure!(
                d.is_finite() && d > 0.0 && d <= 86_400.0,
                "duration must be in (0, 86400] s"
            );
        }
        if let Some(n) = self.requests {
            ensure!(n >= 1, "request count must be >= 1");
        }
        ensure!(
            self.warmup_s.is_finite() && self.warmup_s >= 0.0,
            "warm-up must be >= 0 s"
        );
        ensure!(
            self.timeout_s.is_finite() && self.timeout_s > 0.0,
            "timeout must be > 0 s"
        );
        if let Mode::Open { rate, .. } = self.mode {
            ensure!(rate.is_finite() && rate > 0.0, "rate must be > 0");
        }
        if let KeyDistribution::Zipf { s } = self.key_distribution {
            ensure!(s.is_finite() && s > 0.0, "zipf exponent must be > 0");
        }
        ensure!(
            Op::ALL.iter().any(|&op| self.mix.weight(op) > 0),
            "mix has no positive weight"
        );
        match self.protocol {
            Protocol::MemcacheText | Protocol::MemcacheMeta => {}
            Protocol::Pacer | Protocol::Http | Protocol::Recommend => {
                ensure!(
                    self.transport == Transport::Tcp,
                    "the {} protocol runs over TCP only",
                    self.protocol
                );
                ensure!(!self.preload, "preload is for the memcached protocols");
            }
        }
        if self.protocol == Protocol::Pacer {
            self.pacer.validate()?;
        }
        if self.protocol == Protocol::Http {
            self.http.validate()?;
        }
        if self.protocol == Protocol::Recommend {
            ensure!(
                (1..=10_000).contains(&self.recommend.n),
                "--recommend-n must be in 1..=10000"
            );
            ensure!(
                self.recommend.deadline_ms <= 3_600_000,
                "--recommend-deadline-ms must be at most an hour"
            );
        }
        if self.transport == Transport::Udp {
            // One request per datagram (memcached reads at most 64 KiB per datagram).
            ensure!(
                self.value_size.max + (self.key_size.max + 8) * self.multiget <= 60_000,
                "UDP requests must fit one datagram: keep values + keys under 60000 bytes"
            );
            ensure!(
                self.protocol == Protocol::MemcacheText || self.multiget == 1,
                "meta multi-get over UDP is not supported: use --multiget 1"
            );
        }
        Ok(())
    }

    /// How many distinct ids the key distribution draws from.
    pub(crate) fn draw_count(&self) -> u64 {
        match self.protocol {
            Protocol::Pacer => self.pacer.campaigns.count(),
            Protocol::MemcacheText
            | Protocol::MemcacheMeta
            | Protocol::Http
            | Protocol::Recommend => self.key_count,
        }
    }

    pub(crate) fn warmup(&self) -> Duration {
        Duration::from_secs_f64(self.warmup_s)
    }

    pub(crate) fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.timeout_s)
    }
}

/// Most requests in one BIDS frame and candidates in one request: the pacer's default limits.
const MAX_BATCH: usize = 1024;
const MAX_CANDIDATES: usize = 32;

impl PacerWorkload {
    fn validate(&self) -> anyhow::Result<()> {
        ensure!(
            (1..=MAX_BATCH).contains(&self.batch),
            "batch must be in 1..={MAX_BATCH}"
        );
        ensure!(
            (1..=MAX_CANDIDATES).contains(&self.candidates),
            "candidates must be in 1..={MAX_CANDIDATES}"
        );
        ensure!(
            self.campaigns.count() >= self.candidates as u64,
            "the campaign range {}-{} holds fewer than {} distinct candidates",
            self.campaigns.first,
            self.campaigns.last,
            self.candidates
        );
        ensure!(
            self.currency.len() == 3 && self.currency.bytes().all(|b| b.is_ascii_uppercase()),
            "currency must be an ISO 4217 code such as USD, got {:?}",
            self.currency
        );
        ensure!(
            (0.0..=1.0).contains(&self.notices),
            "the notice fraction must be in 0..=1"
        );
        ensure!(
            (1..=3_600_000).contains(&self.deadline_ms),
            "the deadline must be in 1..=3600000 ms"
        );
        Ok(())
    }
}

impl HttpWorkload {
    fn validate(&self) -> anyhow::Result<()> {
        let token = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic());
        ensure!(
            token(&self.method),
            "HTTP method {:?} is not a token",
            self.method
        );
        ensure!(
            self.path.starts_with('/') && token(&self.path),
            "HTTP path {:?} must start with / and hold no spaces",
            self.path
        );
        for header in &self.headers {
            let (name, value) = header
                .split_once(':')
                .with_context(|| format!("HTTP header {header:?}: expected Name: value"))?;
            ensure!(token(name), "HTTP header name {name:?} is not a token");
            ensure!(
                !value.contains(['\r', '\n']),
                "HTTP header {header:?} holds a line break"
            );
            ensure!(
                !name.eq_ignore_ascii_case("content-length")
                    && !name.eq_ignore_ascii_case("transfer-encoding"),
                "the body's length is set from the body: drop the {name} header"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes_mixes_and_distributions() {
        assert_eq!("100".parse::<SizeRange>().unwrap(), SizeRange::fixed(100));
        assert_eq!(
            "10-20".parse::<SizeRange>().unwrap(),
            SizeRange { min: 10, max: 20 }
        );
        assert!("20-10".parse::<SizeRange>().is_err());
        let mix: Mix = "get=9,set=1".parse().unwrap();
        assert_eq!(
            (
                mix.weight(Op::Get),
                mix.weight(Op::Set),
                mix.weight(Op::Incr)
            ),
            (9, 1, 0)
        );
        assert!("get=0".parse::<Mix>().is_err());
        assert!("fetch=1".parse::<Mix>().is_err());
        assert_eq!(
            "zipf:1.2".parse::<KeyDistribution>().unwrap(),
            KeyDistribution::Zipf { s: 1.2 }
        );
        assert!("zipf:-1".parse::<KeyDistribution>().is_err());
        assert_eq!(
            "0.10-2.5".parse::<PriceRange>().unwrap(),
            PriceRange {
                min_micros: 100_000,
                max_micros: 2_500_000
            }
        );
        assert_eq!("3".parse::<PriceRange>().unwrap().max_micros, 3_000_000);
        for bad in ["1.1234567", "2-1", "x", ".5", "-1", "99999999999999999999"] {
            assert!(bad.parse::<PriceRange>().is_err(), "{bad}");
        }
        assert_eq!("7".parse::<IdRange>().unwrap().count(), 1);
        assert_eq!("1-100".parse::<IdRange>().unwrap().count(), 100);
        for text in ["7", "1-100"] {
            assert_eq!(text.parse::<IdRange>().unwrap().to_string(), text);
        }
        assert!("9-1".parse::<IdRange>().is_err());
    }

    #[test]
    fn pacer_and_http_workloads_are_checked() {
        let pacer = |w: PacerWorkload| Config {
            protocol: Protocol::Pacer,
            pacer: w,
            ..Config::default()
        };
        assert!(pacer(PacerWorkload::default()).validate().is_ok());
        let too_few_campaigns = PacerWorkload {
            campaigns: IdRange { first: 1, last: 2 },
            ..PacerWorkload::default()
        };
        assert!(pacer(too_few_campaigns).validate().is_err());
        let bad_currency = PacerWorkload {
            currency: "usd".to_string(),
            ..PacerWorkload::default()
        };
        assert!(pacer(bad_currency).validate().is_err());
        let over_one = PacerWorkload {
            notices: 1.5,
            ..PacerWorkload::default()
        };
        assert!(pacer(over_one).validate().is_err());
        let udp = Config {
            transport: Transport::Udp,
            ..pacer(PacerWorkload::default())
        };
        assert!(udp.validate().is_err());
        let http = |w: HttpWorkload| Config {
            protocol: Protocol::Http,
            http: w,
            ..Config::default()
        };
        assert!(http(HttpWorkload::default()).validate().is_ok());
        for header in [
            "NoColon",
            "Bad Name: x",
            "Content-Length: 5",
            "X-A: a\r\nX-B: b",
        ] {
            let w = HttpWorkload {
                headers: vec![header.to_string()],
                ..HttpWorkload::default()
            };
            assert!(http(w).validate().is_err(), "{header}");
        }
    }

    #[test]
    fn values_display_as_the_flag_values_users_type() {
        use clap::ValueEnum;
        assert_eq!(Protocol::MemcacheText.to_string(), "memcache-text");
        assert_eq!(Protocol::Pacer.to_string(), "pacer");
        assert_eq!(Transport::Tcp.to_string(), "tcp");
        assert_eq!(Arrival::Poisson.to_string(), "poisson");
        assert_eq!(RecommendWire::ThriftBinary.to_string(), "thrift-binary");
        // Every value reads back as itself, and is the name the JSON report gives it.
        for p in Protocol::value_variants() {
            assert_eq!(Protocol::from_str(&p.to_string(), false), Ok(*p));
            assert_eq!(serde_json::to_string(p).unwrap(), format!("\"{p}\""));
        }
        for t in Transport::value_variants() {
            assert_eq!(Transport::from_str(&t.to_string(), false), Ok(*t));
            assert_eq!(serde_json::to_string(t).unwrap(), format!("\"{t}\""));
        }
        for c in RecommendCall::value_variants() {
            assert_eq!(RecommendCall::from_str(&c.to_string(), false), Ok(*c));
        }
        let err = Config {
            protocol: Protocol::Http,
            transport: Transport::Udp,
            ..Config::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(err.to_string(), "the http protocol runs over TCP only");
    }

    #[test]
    fn config_round_trips_through_json() {
        let config = Config {
            mode: Mode::Open {
                rate: 1234.5,
                arrival: Arrival::Poisson,
            },
            key_distribution: KeyDistribution::Zipf { s: 0.99 },
            transport: Transport::Udp,
            requests: Some(10),
            server_pid: Some(42),
            ..Config::default()
        };
        let json = serde_json::to_string(&config).unwrap();
        assert_eq!(serde_json::from_str::<Config>(&json).unwrap(), config);
        assert!(
            json.contains(r#""mode":{"kind":"open","rate":1234.5,"arrival":"poisson"}"#),
            "{json}"
        );
    }

    #[test]
    fn rejects_unbounded_or_impossible_runs() {
        Config::default().validate().unwrap();
        let unbounded = Config {
            duration_s: None,
            requests: None,
            ..Config::default()
        };
        assert!(unbounded.validate().is_err());
        let tiny_keys = Config {
            key_size: SizeRange::fixed(4),
            key_count: 100_000,
            ..Config::default()
        };
        assert!(tiny_keys.validate().is_err());
        let zero_rate = Config {
            mode: Mode::Open {
                rate: 0.0,
                arrival: Arrival::Fixed,
            },
            ..Config::default()
        };
        assert!(zero_rate.validate().is_err());
    }
}
