//! What a run does: target, protocol, workload, pacing and bounds.

use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{bail, ensure, Context};
use serde::{Deserialize, Serialize};

/// Wire protocol spoken to the server. New protocols (the pacer's binary batch protocol,
/// HTTP/1.1) are new variants here plus an arm in `protocol.rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// memcached text protocol (`get`, `set`, ...).
    MemcacheText,
    /// memcached meta protocol (`mg`, `ms`, ...).
    MemcacheMeta,
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

    pub(crate) fn warmup(&self) -> Duration {
        Duration::from_secs_f64(self.warmup_s)
    }

    pub(crate) fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.timeout_s)
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
