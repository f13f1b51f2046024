//! Runtime configuration: every limit the runtime enforces, with defaults, loadable from TOML.

use serde::Deserialize;
use std::net::SocketAddr;
use std::time::Duration;

/// How accepted TCP connections are spread over the I/O loops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Spread {
    /// Each loop owns a listener bound with SO_REUSEPORT; the kernel spreads connections by a hash of the
    /// addresses. Accepting runs on the I/O threads, and a connecting client's wake-up places the loop on the
    /// client's CPU: on one machine, a burst of connects delays the loop's other clients by milliseconds
    /// (docs/benchmarks.md).
    Reuseport,
    /// One acceptor thread hands accepted sockets to the loops round-robin (fbthrift's and memcached's
    /// model, seed 002's "minimal work on network threads"): the I/O threads do no accept work, a connect
    /// burst does not delay their clients, and connections spread evenly. Measured as efficient as
    /// `Reuseport` per CPU-second (docs/benchmarks.md), hence the default.
    #[default]
    Acceptor,
}

/// Where a connection keeps the bytes it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum BufferMode {
    /// Reads land in one buffer per loop; a connection holds bytes only while it has a partial request or
    /// unsent replies (memcached-at-Facebook's per-thread shared buffers).
    #[default]
    Shared,
    /// Every connection owns a read buffer of `read_buffer_bytes` for its whole life (the classic design,
    /// kept as the baseline of the `conn-memory` experiment).
    PerConnection,
}

/// The longest `idle_timeout`: a connection's last activity is kept in 32 bits of milliseconds, compared
/// modulo 2^32 (49 days), so a timeout must stay well below half of that.
pub const MAX_IDLE_TIMEOUT: Duration = Duration::from_secs(24 * 24 * 3600);

/// Most TCP (and, separately, UDP) addresses one server serves.
pub const MAX_ADDRESSES: usize = 32;

/// All the knobs of the runtime. Durations are humantime strings in TOML (`"250ms"`, `"30s"`); optional
/// timeouts are off when absent.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeConfig {
    /// Number of I/O loops (threads); 0 means one per core.
    pub io_threads: usize,
    /// TCP address to serve; `None` serves no TCP.
    pub listen: Option<SocketAddr>,
    /// Unix domain socket to serve (memcached's `-s`); an existing socket file there is replaced.
    pub unix: Option<std::path::PathBuf>,
    /// Permissions of the Unix socket file (memcached's `-a`, default 0700).
    pub unix_mode: u32,
    /// UDP address to serve; `None` (the default) serves no UDP.
    pub udp: Option<SocketAddr>,
    /// More TCP addresses served by the same loops (memcached's `-l a,b`): every loop accepts on each.
    pub listen_also: Vec<SocketAddr>,
    /// More UDP addresses, with one socket per loop on each, like `udp`.
    pub udp_also: Vec<SocketAddr>,
    pub spread: Spread,
    /// listen(2) backlog.
    pub backlog: u32,
    /// Connections open at once, server-wide; one more is answered with the service's refusal and closed.
    pub max_connections: usize,
    /// Requests in flight (deferred, not yet answered) at once, server-wide; split evenly over the loops so the
    /// check touches no shared counter. 0 means unlimited.
    pub max_in_flight: usize,
    /// Requests per second accepted, server-wide (split over the loops); 0 means unlimited.
    pub rate_limit: u64,
    /// Deadline of a request from the time it was read, when its protocol carries none.
    #[serde(with = "humantime_serde")]
    pub request_deadline: Option<Duration>,
    /// Close a connection that sent nothing for this long.
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Option<Duration>,
    /// Close a connection that holds an incomplete request for this long (slow clients cannot pin memory).
    #[serde(with = "humantime_serde")]
    pub partial_request_timeout: Option<Duration>,
    /// Largest frame a connection may buffer while it is incomplete; past it the connection is closed.
    pub max_frame_bytes: usize,
    /// Reply bytes a connection may have unsent before the runtime stops producing more for it: it stops
    /// decoding its requests and pauses a streamed reply (a multi-get, a batch) until the socket drains
    /// (back-pressure within a request as between requests). A reply is never cut: the one that passes the
    /// limit is finished first, so a connection holds at most this plus one reply, or one step of a stream.
    /// Shared references (a cache value sent without copying) count at their full length.
    pub max_output_bytes: usize,
    /// Bytes the loop writes to one connection per turn before it serves the others: one client fetching a
    /// large reply does not hold the thread.
    pub max_bytes_per_turn: usize,
    /// Requests of one connection the loop handles per turn before it serves the others (memcached's `-R`):
    /// a deep pipeline does not hold the thread either. The rest waits in the connection's buffer.
    pub max_requests_per_turn: usize,
    /// Size of the per-loop read buffer (and of each connection's buffer in `per-connection` mode).
    pub read_buffer_bytes: usize,
    pub buffer_mode: BufferMode,
    /// First pause of accepting after EMFILE/ENFILE; doubles on each repeat up to the max.
    #[serde(with = "humantime_serde")]
    pub accept_backoff_min: Duration,
    #[serde(with = "humantime_serde")]
    pub accept_backoff_max: Duration,
    /// How long a graceful shutdown waits for in-flight requests before closing everything.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// The CPU pool handlers offload to (`[executor]` table; its `queue_timeout` is the runtime's queue
    /// timeout).
    pub executor: tern_executor::Config,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            io_threads: 0,
            listen: None,
            unix: None,
            unix_mode: 0o700,
            udp: None,
            listen_also: Vec::new(),
            udp_also: Vec::new(),
            spread: Spread::Acceptor,
            backlog: 1024,
            max_connections: 10_240,
            max_in_flight: 65_536,
            rate_limit: 0,
            request_deadline: None,
            idle_timeout: None,
            partial_request_timeout: Some(Duration::from_secs(30)),
            max_frame_bytes: 2 << 20,
            max_output_bytes: 256 << 10,
            max_bytes_per_turn: 128 << 10,
            max_requests_per_turn: 64,
            read_buffer_bytes: 64 << 10,
            buffer_mode: BufferMode::Shared,
            accept_backoff_min: Duration::from_millis(10),
            accept_backoff_max: Duration::from_millis(100),
            shutdown_grace: Duration::from_secs(5),
            executor: tern_executor::Config::default(),
        }
    }
}

/// A configuration that cannot work, with a message saying which field and why.
#[derive(Debug, thiserror::Error)]
#[error("invalid runtime configuration: {0}")]
pub struct ConfigError(pub String);

impl RuntimeConfig {
    /// Parses a TOML table (unknown fields are errors, so typos are caught).
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let cfg: RuntimeConfig = toml::from_str(text).map_err(|e| ConfigError(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks the limits make sense together.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |m: &str| Err(ConfigError(m.to_string()));
        if self.listen.is_none() && self.udp.is_none() && self.unix.is_none() {
            return fail("nothing to serve: set `listen`, `unix` and/or `udp`");
        }
        if !self.listen_also.is_empty() && self.listen.is_none() {
            return fail("`listen_also` needs `listen`");
        }
        if !self.udp_also.is_empty() && self.udp.is_none() {
            return fail("`udp_also` needs `udp`");
        }
        if self.listen_also.len() >= MAX_ADDRESSES || self.udp_also.len() >= MAX_ADDRESSES {
            return fail("at most 32 TCP and 32 UDP addresses");
        }
        if self.io_threads > 1024 {
            return fail("io_threads must be at most 1024");
        }
        if self.max_connections == 0 {
            return fail("max_connections must be at least 1");
        }
        if self.read_buffer_bytes < 512 {
            return fail("read_buffer_bytes must be at least 512");
        }
        if self.max_frame_bytes < self.read_buffer_bytes.min(4096) {
            return fail("max_frame_bytes must be at least 4096 (or the read buffer size)");
        }
        if self.max_output_bytes < 4096 {
            return fail("max_output_bytes must be at least 4096");
        }
        if self.max_requests_per_turn == 0 {
            return fail("max_requests_per_turn must be at least 1");
        }
        if self.max_bytes_per_turn < 4096 {
            return fail("max_bytes_per_turn must be at least 4096");
        }
        if self.accept_backoff_min.is_zero() || self.accept_backoff_max < self.accept_backoff_min {
            return fail("accept backoff needs 0 < accept_backoff_min <= accept_backoff_max");
        }
        if [
            self.request_deadline,
            self.idle_timeout,
            self.partial_request_timeout,
        ]
        .contains(&Some(Duration::ZERO))
        {
            return fail("timeouts must be above zero (leave a timeout out to disable it)");
        }
        if self.idle_timeout > Some(MAX_IDLE_TIMEOUT) {
            return fail("idle_timeout must be at most 24 days");
        }
        self.executor
            .validate()
            .map_err(|e| ConfigError(e.to_string()))?;
        Ok(())
    }

    /// The number of I/O loops this config asks for, resolving 0 to the number of cores.
    pub fn loops(&self) -> usize {
        if self.io_threads > 0 {
            self.io_threads
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_round_trip_and_validation() {
        let cfg = RuntimeConfig::from_toml(
            "listen = \"127.0.0.1:0\"\nio_threads = 2\nspread = \"acceptor\"\nbuffer_mode = \"per-connection\"\n\
             idle_timeout = \"1m 30s\"\n[executor]\nworkers = 3\nqueue_timeout = \"50ms\"\n",
        )
        .unwrap();
        assert_eq!(cfg.io_threads, 2);
        assert_eq!(cfg.spread, Spread::Acceptor);
        assert_eq!(cfg.buffer_mode, BufferMode::PerConnection);
        assert_eq!(cfg.idle_timeout, Some(Duration::from_secs(90)));
        assert_eq!(cfg.executor.workers, 3);
        assert_eq!(cfg.executor.queue_timeout, Some(Duration::from_millis(50)));
        let err =
            RuntimeConfig::from_toml("listen = \"127.0.0.1:0\"\nio_thread = 2\n").unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
        let err = RuntimeConfig::from_toml("io_threads = 2\n").unwrap_err();
        assert!(err.to_string().contains("nothing to serve"), "{err}");
    }
}
