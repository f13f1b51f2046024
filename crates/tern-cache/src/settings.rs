//! memcached's command-line flags, so `tern cache` can replace `memcached` in an init script or a container
//! command line unchanged, and their translation into runtime and store settings.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{ArgAction, Args};
use tern_runtime::config::MAX_ADDRESSES;
use tern_runtime::{RuntimeConfig, Spread};

/// `tern cache` flags: memcached 1.6's, plus `--admin` for the metrics endpoint.
/// A flag given twice takes its last value, as memcached's getopt loop does (`-l` and `-o` add up).
#[derive(Args, Debug, Clone)]
#[command(disable_version_flag = true, args_override_self = true)]
pub struct CacheArgs {
    /// TCP port to listen on (default: 11211, or -U's port when only -U is given, as memcached; 0: off;
    /// -1: any free port, written to $MEMCACHED_PORT_FILENAME).
    #[arg(short = 'p', long = "port", allow_negative_numbers = true,
          value_parser = clap::value_parser!(i32).range(-1..=65535))]
    pub port: Option<i32>,
    /// UDP port to listen on (default: 0, off; UDP can amplify attacks, enable it only on trusted networks;
    /// -1: any free port).
    #[arg(short = 'U', long = "udp-port", default_value_t = 0, allow_negative_numbers = true,
          value_parser = clap::value_parser!(i32).range(-1..=65535))]
    pub udp_port: i32,
    /// Interface(s) to listen on, comma separated (default: 127.0.0.1; memcached's default is every
    /// interface, tern binds loopback unless told otherwise).
    #[arg(short = 'l', long = "listen", action = ArgAction::Append)]
    pub listen: Vec<String>,
    /// Unix socket to listen on (disables network support, as memcached's -s).
    #[arg(short = 's', long = "unix-socket")]
    pub unix_socket: Option<std::path::PathBuf>,
    /// Access mask of the Unix socket, in octal (default: 700).
    #[arg(short = 'a', long = "unix-mask", default_value = "700")]
    pub unix_mask: String,
    /// Enable the ascii "shutdown" command.
    #[arg(short = 'A', long = "enable-shutdown")]
    pub enable_shutdown: bool,
    /// Assume the identity of <user> (only when run as root).
    #[arg(short = 'u', long = "user")]
    pub user: Option<String>,
    /// Item memory in megabytes; a hard bound on memory used for items and their index.
    #[arg(short = 'm', long = "memory-limit", default_value_t = 64)]
    pub memory_mb: u64,
    /// Return an error when memory is exhausted instead of evicting.
    #[arg(short = 'M', long = "disable-evictions")]
    pub disable_evictions: bool,
    /// Maximum simultaneous connections.
    #[arg(short = 'c', long = "conn-limit", default_value_t = 1024)]
    pub conn_limit: usize,
    /// Verbose (-v errors and warnings, -vv also client commands).
    #[arg(short = 'v', long = "verbose", action = ArgAction::Count)]
    pub verbose: u8,
    /// Number of I/O threads (default: 4, as memcached).
    #[arg(short = 't', long = "threads", default_value_t = 4)]
    pub threads: usize,
    /// Maximum requests handled per connection per event (fairness between connections).
    #[arg(short = 'R', long = "max-reqs-per-event", default_value_t = 20)]
    pub reqs_per_event: u32,
    /// Disable CAS (CAS values read as 0).
    #[arg(short = 'C', long = "disable-cas")]
    pub disable_cas: bool,
    /// Listen backlog.
    #[arg(short = 'b', long = "listen-backlog", default_value_t = 1024)]
    pub backlog: u32,
    /// Protocol: ascii, binary, or auto (each connection's first byte picks text or binary, as memcached).
    #[arg(short = 'B', long = "protocol")]
    pub protocol: Option<String>,
    /// SASL authentication of binary connections (PLAIN, against the `MEMCACHED_SASL_PWDB` file of
    /// `user:password` lines); implies `-B binary`.
    #[arg(short = 'S', long = "enable-sasl")]
    pub enable_sasl: bool,
    /// ASCII authentication: text connections first authenticate with a user and password of this file
    /// (`user:password` lines); implies `-B ascii`.
    #[arg(short = 'Y', long = "auth-file")]
    pub auth_file: Option<std::path::PathBuf>,
    /// Restartable cache: stopped with SIGUSR1 (or `shutdown graceful`), the items are written to this file
    /// (and FILE.meta), and read back when the server starts again with the same file and settings. Use a
    /// RAM disk (tmpfs) or a fast local disk.
    #[arg(short = 'e', long = "memory-file")]
    pub memory_file: Option<std::path::PathBuf>,
    /// Maximum item size, e.g. 1m, 512k (min 1k, max 1024m).
    #[arg(short = 'I', long = "max-item-size", default_value = "1m")]
    pub max_item_size: String,
    /// Disable flush_all.
    #[arg(short = 'F', long = "disable-flush-all")]
    pub disable_flush_all: bool,
    /// Disable stats cachedump and lru_crawler metadump.
    #[arg(short = 'X', long = "disable-dumping")]
    pub disable_dumping: bool,
    /// Refuse `watch` (log streaming) commands.
    #[arg(short = 'W', long = "disable-watch")]
    pub disable_watch: bool,
    /// Use <char> as the delimiter between key prefixes and IDs for per-prefix stats (`stats detail`);
    /// default ':'. Giving it turns per-prefix stats on, as in memcached.
    #[arg(short = 'D', value_name = "char")]
    pub prefix_delimiter: Option<String>,
    /// Extended options, comma separated: idle_timeout=<s>, watcher_logbuf_size=<KB>, maxconns_fast, hashpower=<n>, no_lru_crawler,
    /// lru_crawler_sleep=<us>, lru_crawler_tocrawl=<n>, no_lru_maintainer, no_modern, track_sizes, spread=acceptor|reuseport (tern: who
    /// accepts), ...
    /// (memcached's slab, LRU and extstore options are accepted and ignored with a warning; an unknown one
    /// stops the start, as in memcached).
    #[arg(short = 'o', long = "extended", action = ArgAction::Append)]
    pub extended: Vec<String>,
    /// Serve TLS on the TCP listeners (those given as `-l notls:<ip>:<port>` excepted), with the `-o ssl_*`
    /// options: ssl_chain_cert, ssl_key, ssl_keyformat, ssl_verify_mode, ssl_ciphers, ssl_ca_cert,
    /// ssl_wbuf_size, ssl_session_cache, ssl_min_version.
    #[arg(short = 'Z', long = "enable-ssl")]
    pub enable_ssl: bool,
    /// Run in the background (fork; the parent exits at once, the server detaches from its terminal and
    /// works from `/`; its output goes to /dev/null unless -v).
    #[arg(short = 'd', long = "daemon")]
    pub daemon: bool,
    /// Write the process id to this file once listening (removed at exit when run with -d).
    #[arg(short = 'P', long = "pidfile")]
    pub pid_file: Option<std::path::PathBuf>,
    /// Print version and exit.
    #[arg(short = 'V', long = "version")]
    pub version: bool,
    /// Print the license and exit.
    #[arg(short = 'i', long = "license")]
    pub license: bool,
    /// Lock down all paged memory (mlockall; as in memcached, a refusal is a warning).
    #[arg(short = 'k', long = "lock-memory")]
    pub lock_memory: bool,
    /// Maximize the core file limit.
    #[arg(short = 'r', long = "enable-coredumps")]
    pub enable_coredumps: bool,
    /// Try to use large memory pages: each of the store's segments is one 2 MiB transparent huge page,
    /// aligned and advised, and its index tables are advised too (refused, as memcached refuses it, where
    /// the kernel has them off).
    #[arg(short = 'L', long = "enable-largepages")]
    pub enable_largepages: bool,
    /// Chunk size growth factor of memcached's slab classes (default: 1.25). tern has no slab classes; `me`
    /// reports an item's class (`cls=`) as memcached's would be under this factor.
    #[arg(short = 'f', long = "slab-growth-factor", value_name = "factor")]
    pub slab_growth_factor: Option<String>,
    /// Space for key, value and flags in memcached's smallest slab class (default: 48), for `me`'s `cls=`
    /// as -f.
    #[arg(short = 'n', long = "slab-min-size", value_name = "bytes")]
    pub slab_min_size: Option<String>,
    /// Number of NAPI ids (memcached places connections on worker threads by the NIC queue they came
    /// from; tern spreads them over its I/O loops with SO_REUSEPORT, and checks the flag as memcached).
    #[arg(short = 'N', long = "napi_ids", value_name = "num")]
    pub napi_ids: Option<String>,
    /// Serve the admin endpoint (/metrics, /stats, /healthz, the /dashboard page; its index at /) on this
    /// address (ADDR:PORT; a bare PORT means 127.0.0.1:PORT); off unless given.
    #[arg(long, value_name = "ADDR:PORT", value_parser = tern_metrics::parse_admin_addr)]
    pub admin: Option<SocketAddr>,
}

/// What a TCP connection speaks (`-B`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Ascii,
    Binary,
    /// memcached's negotiation: a connection whose first byte is the binary request magic speaks binary,
    /// any other text, for its whole life.
    Auto,
}

impl Protocol {
    /// The name `stats settings` reports (memcached's `prot_text`).
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Ascii => "ascii",
            Protocol::Binary => "binary",
            Protocol::Auto => "auto-negotiate",
        }
    }
}

/// The `-o` options Debian's memcached 1.6.18 (built with TLS and extstore) takes that tern cache has no use
/// for: its slab allocator, LRU segments, extstore and privileges. Checked against that build: every other
/// name but tern's own is refused there with `Illegal suboption`; except `relaxed_privileges`, which only
/// its debug build (`memcached-debug`) takes, and memcached's own test harness passes to every server it
/// starts (`t/lib/MemcachedTest.pm`).
const MEMCACHED_ONLY_OPTIONS: &[&str] = &[
    "relaxed_privileges",
    "no_hashexpand",
    "slab_reassign",
    "slab_automove",
    "slab_automove_ratio",
    "slab_automove_window",
    "slab_automove_freeratio",
    "tail_repair_time",
    "hash_algorithm",
    "hot_lru_pct",
    "warm_lru_pct",
    "hot_max_factor",
    "warm_max_factor",
    "temporary_ttl",
    "slab_sizes",
    "slab_chunk_max",
    "no_chunked_items",
    "no_slab_reassign",
    "no_slab_automove",
    "inline_ascii_resp",
    "no_inline_ascii_resp",
    "drop_privileges",
    "no_drop_privileges",
    "resp_obj_mem_limit",
    "sock_cookie_id",
    "ext_page_size",
    "ext_wbuf_size",
    "ext_threads",
    "ext_io_depth",
    "ext_path",
    "ext_item_size",
    "ext_item_age",
    "ext_low_ttl",
    "ext_recache_rate",
    "ext_compact_under",
    "ext_drop_under",
    "ext_max_sleep",
    "ext_max_frag",
    "ext_drop_unread",
];

/// memcached's TLS settings as given (`-Z` and the `-o ssl_*` options); `stats settings` reports them even
/// when TLS is off, as memcached built with TLS does.
#[derive(Debug, Clone)]
pub struct TlsOptions {
    pub enabled: bool,
    pub chain_cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// OpenSSL's file type number: 1 PEM, 2 DER (ASN.1).
    pub key_format: i32,
    /// memcached's `ssl_verify_mode` value, 0-3.
    pub verify_mode: u8,
    pub ciphers: Option<String>,
    pub ca_cert: Option<PathBuf>,
    /// Bytes (the option is in kilobytes).
    pub wbuf_size: usize,
    pub session_cache: bool,
    pub kernel_tls: bool,
    /// memcached's `ssl_min_version` value: 0 TLS 1.0, 1 TLS 1.1, 2 TLS 1.2, 3 TLS 1.3.
    pub min_version: u8,
}

impl Default for TlsOptions {
    fn default() -> Self {
        TlsOptions {
            enabled: false,
            chain_cert: None,
            key: None,
            key_format: 1,
            verify_mode: 0,
            ciphers: None,
            ca_cert: None,
            wbuf_size: 16 << 10,
            session_cache: false,
            kernel_tls: false,
            min_version: 2,
        }
    }
}

impl TlsOptions {
    /// OpenSSL's verification flags for `verify_mode`, as `stats settings` prints them (PEER = 1,
    /// FAIL_IF_NO_PEER_CERT = 2, CLIENT_ONCE = 4).
    pub fn openssl_verify_flags(&self) -> u8 {
        [0, 1, 3, 7][usize::from(self.verify_mode.min(3))]
    }

    /// memcached's name of the minimum version.
    pub fn min_version_name(&self) -> &'static str {
        ["tlsv1.0", "tlsv1.1", "tlsv1.2", "tlsv1.3"][usize::from(self.min_version.min(3))]
    }

    /// The server's TLS, when `-Z` is given: the files loaded and the settings checked. Errors are in
    /// memcached's words.
    pub fn start(&self) -> Result<Option<tern_runtime::Tls>, Unusable> {
        use tern_runtime::tls::{ClientAuth, KeyFormat, TlsVersion};
        if !self.enabled {
            return Ok(None);
        }
        let unusable = |message: &str| Err(Unusable(message.to_owned()));
        if self.kernel_tls {
            return unusable("Kernel TLS offload is not available");
        }
        let Some(chain) = self.chain_cert.clone() else {
            return unusable(
                "Error loading the certificate chain: (null) : no -o ssl_chain_cert given",
            );
        };
        let key_format = match self.key_format {
            1 => KeyFormat::Pem,
            2 => KeyFormat::Der,
            other => {
                return unusable(&format!(
                    "Error loading the key: -o ssl_keyformat={other}: 1 (PEM) or 2 (DER)"
                ))
            }
        };
        if self.min_version < 2 {
            tracing::warn!(
                "-o ssl_min_version={}: tern serves TLS 1.2 and 1.3 only (rustls has no older versions)",
                self.min_version
            );
        }
        let settings = tern_runtime::TlsSettings {
            // memcached's help: the key may be part of the chain file.
            key: self.key.clone().unwrap_or_else(|| chain.clone()),
            cert_chain: chain,
            key_format,
            client_ca: self.ca_cert.clone(),
            client_auth: match self.verify_mode {
                0 => ClientAuth::None,
                1 => ClientAuth::Optional,
                _ => ClientAuth::Required,
            },
            min_version: if self.min_version == 3 {
                TlsVersion::Tls13
            } else {
                TlsVersion::Tls12
            },
            cipher_suites: self.ciphers.clone(),
            session_cache: self.session_cache,
            write_buffer: self.wbuf_size,
        };
        tern_runtime::Tls::new(settings)
            .map(Some)
            .map_err(|e| Unusable(e.to_string()))
    }
}

/// Settings the server cannot start with, in memcached's words: memcached then exits with EX_USAGE (64),
/// the words alone on standard error.
#[derive(Debug)]
pub struct Unusable(pub String);

impl std::fmt::Display for Unusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unusable {}

/// What the flags mean, checked.
#[derive(Debug, Clone)]
pub struct Settings {
    pub unix: Option<(std::path::PathBuf, u32)>,
    /// `-a` as memcached reads it for `stats settings`' `umask` (C's `strtol` in base 8: the leading octal
    /// digits, 0 if none), with or without `-s`.
    pub unix_mask: u32,
    pub tcp: Vec<SocketAddr>,
    /// TCP addresses served without TLS when it is on (`-l notls:...`).
    pub plain_tcp: Vec<SocketAddr>,
    pub tls: TlsOptions,
    pub udp: Vec<SocketAddr>,
    pub interfaces: String,
    /// `-l` was given (memcached words a refused address by interface then, by port otherwise).
    pub interfaces_given: bool,
    /// `-p` and `-U` as given (`stats settings` reports them so, -1 included, as memcached does).
    pub port: i32,
    pub udp_port: i32,
    pub memory_limit: usize,
    pub evictions: bool,
    pub max_connections: usize,
    pub verbosity: u8,
    pub threads: usize,
    pub reqs_per_event: u32,
    pub cas_enabled: bool,
    pub backlog: u32,
    pub item_size_max: usize,
    pub shutdown_enabled: bool,
    pub flush_enabled: bool,
    pub dump_enabled: bool,
    /// `watch` is allowed (no `-W`).
    pub watch_enabled: bool,
    /// Each watcher's buffer, in bytes (`-o watcher_logbuf_size`, given in KB).
    pub watcher_logbuf_size: usize,
    /// `-o read_buf_mem_limit` (given in MB), in bytes; 0: no limit (see `Cache::responses_per_loop`).
    pub read_buf_mem_limit: usize,
    /// memcached's per-thread log buffer (`-o worker_logbuf_size`, in KB): reported in `stats settings`;
    /// tern's lines go straight to each watcher's buffer.
    pub worker_logbuf_size: usize,
    pub protocol: Protocol,
    /// `-S`: binary connections authenticate first (PLAIN or CRAM-MD5; Cyrus's configuration and user
    /// database, or `MEMCACHED_SASL_PWDB`: sasl.rs).
    pub sasl: Option<crate::sasl::Sasl>,
    /// `-Y`: text connections authenticate first, against this file.
    pub ascii_auth: Option<crate::auth_file::AuthFile>,
    pub idle_timeout: Option<Duration>,
    /// `-f` and `-n`: memcached's slab classes, for `me`'s `cls=` (footprint.rs).
    pub growth_factor: f64,
    pub slab_min_size: i32,
    /// `-k`: mlockall at start.
    pub lock_memory: bool,
    /// `-L`: transparent huge pages for the store's memory.
    pub large_pages: bool,
    pub lru_crawler: bool,
    /// memcached's LRU maintainer thread (`-o lru_maintainer`, `no_lru_maintainer`): with the crawler on,
    /// the background step looks for expired items (crawler.rs).
    pub lru_maintainer: bool,
    pub lru_crawler_sleep: u32,
    pub lru_crawler_tocrawl: u32,
    pub maxconns_fast: bool,
    /// `-o track_sizes`: `stats sizes` on from the start (report.rs).
    pub track_sizes: bool,
    /// Who accepts connections: an acceptor thread or each I/O loop (`-o spread=...`).
    pub spread: Spread,
    pub hashpower_init: u32,
    /// `-e`: where a graceful stop saves the items, for the next start to read back (restart.rs).
    pub memory_file: Option<std::path::PathBuf>,
    pub user: Option<String>,
    pub admin: Option<SocketAddr>,
    /// `stats detail`'s prefix delimiter (`-D`).
    pub prefix_delimiter: u8,
    /// Per-prefix stats on from the start (`-D` given).
    pub detail_enabled: bool,
    /// Where the `-vv` command log goes instead of standard error (not a memcached flag: for tests).
    pub verbose_log_file: Option<std::path::PathBuf>,
}

/// Parses memcached's size syntax: a number with an optional k/m/g suffix (bytes when bare).
pub fn parse_size(text: &str) -> anyhow::Result<usize> {
    let t = text.trim();
    let (digits, mult) = match t.char_indices().last() {
        Some((i, c)) if c.eq_ignore_ascii_case(&'k') => (&t[..i], 1usize << 10),
        Some((i, c)) if c.eq_ignore_ascii_case(&'m') => (&t[..i], 1 << 20),
        Some((i, c)) if c.eq_ignore_ascii_case(&'g') => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    let n: usize = digits
        .parse()
        .with_context(|| format!("bad size {text:?}"))?;
    n.checked_mul(mult)
        .with_context(|| format!("size {text:?} too large"))
}

impl CacheArgs {
    /// `-p`, or as memcached when only `-U` names a port: that port (`-U -1`: any free one of its own).
    fn tcp_port(&self) -> i32 {
        match self.port {
            Some(port) => port,
            None if self.udp_port != 0 => self.udp_port,
            None => 11211,
        }
    }

    pub fn settings(&self) -> anyhow::Result<Settings> {
        let (item_size_max, memory_limit) = self.checked_sizes()?;
        let (growth_factor, slab_min_size) = self.slab_classes()?;
        if self.enable_largepages {
            if let Err(why) = crate::process::check_huge_pages() {
                bail!("{why}\nCannot enable large pages on this system\n(There is no support as of this version)");
            }
        }
        let mut settings = Settings {
            tcp: Vec::new(),
            plain_tcp: Vec::new(),
            tls: TlsOptions {
                enabled: self.enable_ssl,
                ..TlsOptions::default()
            },
            udp: Vec::new(),
            // memcached joins the lists of several `-l` with commas.
            interfaces: if self.listen.is_empty() {
                "127.0.0.1".into()
            } else {
                self.listen.join(",")
            },
            interfaces_given: !self.listen.is_empty(),
            port: self.tcp_port(),
            udp_port: self.udp_port,
            memory_limit,
            evictions: !self.disable_evictions,
            max_connections: self.conn_limit,
            verbosity: self.verbose,
            threads: self.threads,
            reqs_per_event: self.reqs_per_event,
            cas_enabled: !self.disable_cas,
            backlog: self.backlog,
            item_size_max,
            shutdown_enabled: self.enable_shutdown,
            flush_enabled: !self.disable_flush_all,
            dump_enabled: !self.disable_dumping,
            watch_enabled: !self.disable_watch,
            watcher_logbuf_size: 256 << 10,
            worker_logbuf_size: 64 << 10,
            read_buf_mem_limit: 0,
            protocol: self.binding_protocol()?,
            sasl: self
                .enable_sasl
                .then(crate::sasl::Sasl::from_environment)
                .transpose()?,
            ascii_auth: match &self.auth_file {
                Some(path) => {
                    Some(crate::auth_file::AuthFile::load(path).map_err(anyhow::Error::msg)?)
                }
                None => None,
            },
            idle_timeout: None,
            lru_crawler: true,
            lru_maintainer: true,
            lru_crawler_sleep: 100,
            lru_crawler_tocrawl: 0,
            maxconns_fast: true,
            track_sizes: false,
            spread: RuntimeConfig::default().spread,
            hashpower_init: 0,
            memory_file: self.memory_file.clone(),
            user: self.user.clone(),
            unix: None,
            unix_mask: self
                .unix_mask
                .bytes()
                .take_while(|b| (b'0'..=b'7').contains(b))
                .fold(0u32, |mask, digit| {
                    mask.wrapping_mul(8).wrapping_add(u32::from(digit - b'0'))
                }),
            admin: self.admin,
            // memcached takes the first byte of the argument (an empty one reads as NUL).
            prefix_delimiter: self
                .prefix_delimiter
                .as_ref()
                .map_or(b':', |d| d.bytes().next().unwrap_or(0)),
            detail_enabled: self.prefix_delimiter.is_some(),
            verbose_log_file: None,
            growth_factor,
            slab_min_size,
            lock_memory: self.lock_memory,
            large_pages: self.enable_largepages,
        };
        self.apply_extended(&mut settings)?;
        if let Some(path) = &self.unix_socket {
            let mode = u32::from_str_radix(&self.unix_mask, 8)
                .ok()
                .filter(|m| *m <= 0o777)
                .with_context(|| format!("-a {}: not an octal mode", self.unix_mask))?;
            // memcached: a Unix socket disables network support.
            settings.unix = Some((path.clone(), mode));
            return Ok(settings);
        }
        self.listen_addresses(&mut settings)?;
        Ok(settings)
    }

    /// `-I` and `-m` in bytes, after memcached's checks of every numeric flag.
    fn checked_sizes(&self) -> anyhow::Result<(usize, usize)> {
        let item_size_max = parse_size(&self.max_item_size)?;
        if !(1024..=1 << 30).contains(&item_size_max) {
            bail!(
                "Item max size cannot be less than 1024 bytes or larger than 1024m (-I {})",
                self.max_item_size
            );
        }
        let memory_limit = usize::try_from(self.memory_mb)
            .ok()
            .and_then(|mb| mb.checked_mul(1 << 20))
            .context("-m is too large")?;
        if item_size_max > memory_limit / 2 {
            bail!(
                "Cannot set item size limit higher than 1/2 of memory max (-I {} with -m {})",
                self.max_item_size,
                self.memory_mb
            );
        }
        if self.threads == 0 || self.threads > 256 {
            bail!(
                "Number of threads must be between 1 and 256 (-t {})",
                self.threads
            );
        }
        if self.conn_limit == 0 {
            bail!(
                "Maximum connections must be greater than 0 (-c {})",
                self.conn_limit
            );
        }
        if self.reqs_per_event == 0 {
            bail!("Number of requests per event must be greater than 0 (-R)");
        }
        if self.napi_ids.as_deref().is_some_and(|n| c_atoi(n) <= 0) {
            bail!("Maximum number of NAPI IDs must be greater than 0");
        }
        Ok((item_size_max, memory_limit))
    }

    /// `-f` and `-n`, read as memcached reads them (C's `atof` and `atoi`: a leading number, the rest
    /// ignored), with its checks.
    fn slab_classes(&self) -> anyhow::Result<(f64, i32)> {
        let factor = self.slab_growth_factor.as_deref().map_or(1.25, c_atof);
        if factor <= 1.0 {
            bail!("Factor must be greater than 1");
        }
        let min_size = self.slab_min_size.as_deref().map_or(48, c_atoi);
        let min_size = min_size.clamp(i32::MIN.into(), i32::MAX.into()) as i32;
        if min_size == 0 {
            bail!("Chunk size must be greater than 0");
        }
        Ok((factor, min_size))
    }

    /// `-B`, with `-S` and `-Y` as memcached reads them: each picks its protocol unless `-B` was given (so
    /// `-S -Y` serves ASCII with authentication, SASL unused), and refuses one that does not fit it.
    fn binding_protocol(&self) -> anyhow::Result<Protocol> {
        let given = match self.protocol.as_deref() {
            None => None,
            Some("auto") => Some(Protocol::Auto),
            Some("ascii") => Some(Protocol::Ascii),
            Some("binary") => Some(Protocol::Binary),
            Some(other) => bail!("Invalid value for binding protocol: {other} -- should be one of auto, binary, or ascii"),
        };
        let usage = |words: &str| Err(Unusable(words.to_owned()).into());
        let mut protocol = given.unwrap_or(Protocol::Auto);
        if self.enable_sasl {
            match given {
                None => protocol = Protocol::Binary,
                Some(Protocol::Binary) => {}
                Some(_) => {
                    return usage("ERROR: You cannot allow the ASCII protocol while using SASL.")
                }
            }
            if self.udp_port != 0 {
                return usage("ERROR: Cannot enable UDP while using binary SASL authentication.");
            }
        }
        if self.auth_file.is_some() {
            match given {
                None => protocol = Protocol::Ascii,
                Some(Protocol::Ascii) => {}
                Some(_) => return usage("ERROR: You cannot allow the BINARY protocol while using ascii authentication tokens."),
            }
            if self.udp_port != 0 {
                return usage("Cannot use UDP with ascii authentication enabled (-U 0 to disable)");
            }
        }
        Ok(protocol)
    }

    /// The `-o` options tern cache knows; memcached's allocator and extstore knobs are ignored with a
    /// warning, and any other is refused as memcached refuses it.
    fn apply_extended(&self, settings: &mut Settings) -> anyhow::Result<()> {
        for opt in self
            .extended
            .iter()
            .flat_map(|o| o.split(','))
            .map(str::trim)
            .filter(|o| !o.is_empty())
        {
            let (name, value) = opt
                .split_once('=')
                .map_or((opt, None), |(n, v)| (n, Some(v)));
            let number = |what: &str| -> anyhow::Result<u64> {
                value
                    .with_context(|| format!("-o {what} needs a value"))?
                    .parse()
                    .with_context(|| format!("-o {what}: bad number {value:?}"))
            };
            let path = |what: &str| -> anyhow::Result<Option<PathBuf>> {
                Ok(Some(
                    value
                        .with_context(|| format!("Missing {what} argument"))?
                        .into(),
                ))
            };
            let tls = &mut settings.tls;
            match name {
                "ssl_chain_cert" => tls.chain_cert = path(name)?,
                "ssl_key" => tls.key = path(name)?,
                "ssl_ca_cert" => tls.ca_cert = path(name)?,
                "ssl_ciphers" => {
                    tls.ciphers = Some(value.context("Missing ssl_ciphers argument")?.into())
                }
                "ssl_keyformat" => {
                    tls.key_format = value
                        .and_then(|v| v.parse().ok())
                        .context("could not parse argument to ssl_keyformat")?
                }
                "ssl_verify_mode" => {
                    tls.verify_mode = value
                        .context("Missing ssl_verify_mode argument")?
                        .parse()
                        .ok()
                        .filter(|m| *m <= 3)
                        .context("Invalid ssl_verify_mode. Use help to see valid options.")?
                }
                "ssl_min_version" => {
                    tls.min_version = value
                        .context("Missing ssl_min_version argument")?
                        .parse()
                        .ok()
                        .filter(|m| *m <= 3)
                        .context("Invalid ssl_min_version. Use help to see valid options.")?
                }
                "ssl_wbuf_size" => {
                    let kb = value
                        .and_then(|v| v.parse::<usize>().ok())
                        .context("could not parse argument to ssl_wbuf_size")?;
                    tls.wbuf_size = kb.checked_mul(1024).context("ssl_wbuf_size is too large")?;
                }
                "ssl_session_cache" => tls.session_cache = true,
                "ssl_kernel_tls" => tls.kernel_tls = true,
                "idle_timeout" => {
                    let secs = number(name)?;
                    settings.idle_timeout = (secs > 0).then(|| Duration::from_secs(secs));
                }
                "watcher_logbuf_size" | "worker_logbuf_size" => {
                    let bytes = value
                        .and_then(|v| v.parse::<usize>().ok())
                        .and_then(|kb| kb.checked_mul(1024))
                        .with_context(|| format!("could not parse argument to {name}"))?;
                    if name == "watcher_logbuf_size" {
                        settings.watcher_logbuf_size = bytes;
                    } else {
                        settings.worker_logbuf_size = bytes;
                    }
                }
                "read_buf_mem_limit" => {
                    settings.read_buf_mem_limit = value
                        .and_then(|v| v.parse::<usize>().ok())
                        .and_then(|mb| mb.checked_mul(1 << 20))
                        .context("could not parse argument to read_buf_mem_limit")?;
                }
                "maxconns_fast" => settings.maxconns_fast = true,
                "no_maxconns_fast" => settings.maxconns_fast = false,
                "hashpower" => {
                    // memcached's bounds and words.
                    let power = value
                        .context("Missing numeric argument for hashpower")?
                        .parse::<i64>()
                        .unwrap_or(0);
                    anyhow::ensure!(
                        power >= 12,
                        "Initial hashtable multiplier of {power} is too low"
                    );
                    anyhow::ensure!(
                        power <= 32,
                        "Initial hashtable multiplier of {power} is too high\nChoose a value based on \"STAT hash_power_level\" from a running instance"
                    );
                    settings.hashpower_init = power as u32;
                }
                "lru_crawler" => settings.lru_crawler = true,
                "lru_maintainer" => settings.lru_maintainer = true,
                "no_lru_maintainer" => settings.lru_maintainer = false,
                "modern" => {}
                // memcached 1.4's defaults: of those tern has, no crawler, no maintainer, no maxconns_fast.
                "no_modern" => {
                    settings.lru_crawler = false;
                    settings.lru_maintainer = false;
                    settings.maxconns_fast = false;
                }
                "no_lru_crawler" => settings.lru_crawler = false,
                "lru_crawler_sleep" => settings.lru_crawler_sleep = number(name)? as u32,
                "lru_crawler_tocrawl" => settings.lru_crawler_tocrawl = number(name)? as u32,
                "track_sizes" => settings.track_sizes = true,
                // tern's own: who accepts connections (the runtime's `spread`, docs/architecture.md).
                "spread" => {
                    settings.spread = match value {
                        Some("acceptor") => Spread::Acceptor,
                        Some("reuseport") => Spread::Reuseport,
                        _ => bail!("-o spread: acceptor or reuseport, not {value:?}"),
                    }
                }
                // Options about memcached's slab allocator, LRU segments, extstore...: tern's storage
                // has no such knobs. Accepted so existing command lines keep working.
                other if MEMCACHED_ONLY_OPTIONS.contains(&other) => {
                    tracing::warn!("-o {other}: not applicable to tern cache, ignored")
                }
                // As memcached: a mistyped option stops the start, with its words (and its exit code, 1).
                _ => bail!("Illegal suboption \"{opt}\""),
            }
        }
        Ok(())
    }

    /// The TCP and UDP addresses of `-l` (each interface may name its own TCP port) with `-p` and `-U`.
    fn listen_addresses(&self, settings: &mut Settings) -> anyhow::Result<()> {
        for iface in settings
            .interfaces
            .clone()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            // memcached's `notls:` prefix: this listener stays plain while the others serve TLS.
            let (iface, plain) = match iface.strip_prefix("notls:") {
                Some(rest) if !self.enable_ssl => {
                    bail!("'notls' option is valid only when SSL is enabled ({rest})")
                }
                Some(rest) => (rest, true),
                None => (iface, false),
            };
            let (host, port) = match iface.rsplit_once(':') {
                Some((h, p)) if !h.contains(':') || h.ends_with(']') => (
                    h.trim_matches(|c| c == '[' || c == ']'),
                    Some(p.parse::<u16>().context("bad -l port")?),
                ),
                _ => (iface, None),
            };
            let ip: IpAddr = host
                .parse()
                .with_context(|| format!("-l {iface}: not an IP address"))?;
            if let Some(default_port) = bound_port(self.tcp_port()) {
                let addr = SocketAddr::new(ip, port.unwrap_or(default_port));
                settings.tcp.push(addr);
                if plain {
                    settings.plain_tcp.push(addr);
                }
            }
            // Interfaces naming the same IP with different TCP ports share its one UDP socket (memcached binds
            // it again, and the kernel delivers each datagram to one of the two).
            let udp = bound_port(self.udp_port).map(|port| SocketAddr::new(ip, port));
            if let Some(udp) = udp.filter(|a| a.port() == 0 || !settings.udp.contains(a)) {
                settings.udp.push(udp);
            }
        }
        if settings.tcp.len() > MAX_ADDRESSES || settings.udp.len() > MAX_ADDRESSES {
            bail!("-l: at most {MAX_ADDRESSES} interfaces");
        }
        Ok(())
    }
}

/// The port to bind for memcached's `-p`/`-U` value: none for 0 (off), any free one (0 to the kernel) for
/// -1.
fn bound_port(flag: i32) -> Option<u16> {
    match flag {
        0 => None,
        -1 => Some(0),
        port => u16::try_from(port).ok(),
    }
}

impl Settings {
    /// The runtime configuration these settings ask for.
    pub fn runtime_config(&self) -> RuntimeConfig {
        let mut cfg = RuntimeConfig {
            listen: self.tcp.first().copied(),
            listen_also: self.tcp.iter().skip(1).copied().collect(),
            udp: self.udp.first().copied(),
            udp_also: self.udp.iter().skip(1).copied().collect(),
            unix: self.unix.as_ref().map(|(path, _)| path.clone()),
            unix_mode: self.unix.as_ref().map_or(0o700, |(_, mode)| *mode),
            io_threads: self.threads,
            backlog: self.backlog,
            max_connections: self.max_connections,
            spread: self.spread,
            idle_timeout: self.idle_timeout,
            // A value plus its command line must fit in one frame.
            max_frame_bytes: self.item_size_max + 4096,
            ..RuntimeConfig::default()
        };
        // Cache requests are answered inline; a small pool suffices for any future offloaded work.
        cfg.executor.workers = 1;
        cfg
    }
}

/// C's `atoi` as memcached's flag parsing uses it: leading spaces, a sign and digits; anything after
/// them is ignored, and no number reads as 0 (overflow saturates, where C's is undefined).
fn c_atoi(text: &str) -> i64 {
    let text = text.trim_start();
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let value = digits
        .bytes()
        .take_while(u8::is_ascii_digit)
        .fold(0i64, |n, d| {
            n.saturating_mul(10).saturating_add(i64::from(d - b'0'))
        });
    if negative {
        -value
    } else {
        value
    }
}

/// C's `atof` as memcached's `-f` uses it: the longest leading decimal number, 0 if there is none.
fn c_atof(text: &str) -> f64 {
    let text = text.trim_start();
    (1..=text.len())
        .rev()
        .filter(|&end| text.is_char_boundary(end))
        .find_map(|end| {
            let prefix = &text[..end];
            // Rust also reads "inf" and "nan" words, which memcached's -f would reject anyway (the
            // factor check): only digits, a sign, a point and an exponent count here.
            prefix
                .bytes()
                .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b))
                .then(|| prefix.parse::<f64>().ok())
                .flatten()
        })
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use proptest::prelude::*;

    proptest! {
        /// memcached's size syntax round-trips, and junk is an error, never a panic.
        #[test]
        fn sizes_parse_or_fail_cleanly(n in 0usize..1 << 20, suffix in prop::sample::select(vec!["", "k", "K", "m", "M", "g"]), junk in ".{0,12}") {
            let mult = match suffix { "k" | "K" => 1 << 10, "m" | "M" => 1 << 20, "g" => 1 << 30, _ => 1 };
            prop_assert_eq!(parse_size(&format!("{n}{suffix}")).unwrap(), n * mult);
            let _ = parse_size(&junk);
        }
    }

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: CacheArgs,
    }

    fn settings(argv: &[&str]) -> anyhow::Result<Settings> {
        Cli::try_parse_from(std::iter::once("tern").chain(argv.iter().copied()))?
            .args
            .settings()
    }

    #[test]
    fn memcached_command_lines_parse() {
        let s = settings(&[
            "-p",
            "11311",
            "-U",
            "11311",
            "-m",
            "1024",
            "-c",
            "4096",
            "-t",
            "2",
            "-vv",
            "-I",
            "2m",
            "-M",
            "-C",
            "-A",
            "-o",
            "idle_timeout=30,modern",
            "-o",
            "no_lru_crawler",
        ])
        .unwrap();
        assert_eq!(s.tcp, vec!["127.0.0.1:11311".parse().unwrap()]);
        assert_eq!(s.udp, vec!["127.0.0.1:11311".parse().unwrap()]);
        assert_eq!(s.memory_limit, 1024 << 20);
        assert_eq!(
            (s.max_connections, s.threads, s.verbosity, s.item_size_max),
            (4096, 2, 2, 2 << 20)
        );
        assert!(!s.evictions && !s.cas_enabled && s.shutdown_enabled && !s.lru_crawler);
        assert_eq!(s.idle_timeout, Some(Duration::from_secs(30)));
        assert_eq!((s.prefix_delimiter, s.detail_enabled), (b':', false));
        let s = settings(&["-D", "#"]).unwrap();
        assert_eq!((s.prefix_delimiter, s.detail_enabled), (b'#', true));
        let s = settings(&["-l", "127.0.0.1:5000,127.0.0.1:5001", "-U", "5002"]).unwrap();
        assert_eq!(s.tcp.len(), 2);
        assert_eq!(s.udp, vec!["127.0.0.1:5002".parse().unwrap()]);
        let s = settings(&["-l", "0.0.0.0:5000"]).unwrap();
        assert_eq!(s.tcp, vec!["0.0.0.0:5000".parse().unwrap()]);
        assert!(s.udp.is_empty(), "UDP is off by default");
    }

    #[test]
    fn extended_options_memcached_takes_are_accepted_and_others_refused_as_it_refuses_them() {
        // memcached's allocator knobs: accepted (ignored, with a warning), several in one -o.
        assert!(settings(&[
            "-o",
            "slab_reassign,slab_automove=1,modern",
            "-o",
            "ext_path=/x:1G"
        ])
        .is_ok());
        // A mistyped one stops the start with memcached's words for it.
        for typo in ["idle_timeot=5", "slab_reasign", "relaxed_privilege"] {
            assert_eq!(
                settings(&["-o", typo]).unwrap_err().to_string(),
                format!("Illegal suboption \"{typo}\"")
            );
        }
    }

    #[test]
    fn bad_flags_are_explained() {
        assert!(settings(&["-I", "512"])
            .unwrap_err()
            .to_string()
            .contains("1024 bytes"));
        assert!(settings(&["-I", "64m", "-m", "64"])
            .unwrap_err()
            .to_string()
            .contains("1/2 of memory"));
        assert!(settings(&["-t", "0"])
            .unwrap_err()
            .to_string()
            .contains("threads"));
        assert_eq!(
            settings(&["-B", "binary"]).unwrap().protocol,
            Protocol::Binary
        );
        assert!(settings(&["-B", "both"])
            .unwrap_err()
            .to_string()
            .contains("should be one of auto, binary, or ascii"));
        assert!(settings(&["-l", "nowhere"])
            .unwrap_err()
            .to_string()
            .contains("not an IP"));
        // memcached starts with nothing to listen on, and so does tern (it waits for a signal).
        let nothing = settings(&["-p", "0"]).unwrap();
        assert!(nothing.tcp.is_empty() && nothing.udp.is_empty() && nothing.unix.is_none());
        // Only -U given: TCP on its port too, as memcached.
        let udp_only = settings(&["-U", "11222"]).unwrap();
        assert_eq!(udp_only.port, 11222);
        assert_eq!(udp_only.tcp[0].port(), 11222);
        assert_eq!(udp_only.udp[0].port(), 11222);
        assert_eq!(settings(&["-p", "11212"]).unwrap().udp, []);
        assert_eq!(settings(&[]).unwrap().tcp[0].port(), 11211);
        assert_eq!(parse_size("512k").unwrap(), 512 << 10);
        // A flag given twice takes its last value, as memcached's getopt loop; `-l` lists and `-o` add up.
        let twice = settings(&[
            "-m",
            "8",
            "-m",
            "16",
            "-l",
            "127.0.0.1:1",
            "-l",
            "127.0.0.2:2",
        ])
        .unwrap();
        assert_eq!(twice.memory_limit, 16 << 20);
        assert_eq!(twice.interfaces, "127.0.0.1:1,127.0.0.2:2");
        assert_eq!(twice.tcp.len(), 2);
        let options = settings(&["-o", "hashpower=13", "-o", "no_lru_crawler"]).unwrap();
        assert_eq!((options.hashpower_init, options.lru_crawler), (13, false));
        // Options apply in order, as memcached's loop applies them: `no_modern` then `lru_crawler` turns
        // the crawler back on, not the maintainer.
        let crawler_and_maintainer = |o: &str| {
            let s = settings(&["-o", o]).unwrap();
            (s.lru_crawler, s.lru_maintainer, s.maxconns_fast)
        };
        assert_eq!(crawler_and_maintainer("modern"), (true, true, true));
        assert_eq!(crawler_and_maintainer("no_modern"), (false, false, false));
        assert_eq!(
            crawler_and_maintainer("no_modern,lru_crawler"),
            (true, false, false)
        );
        assert_eq!(
            crawler_and_maintainer("no_lru_maintainer"),
            (true, false, true)
        );
        assert_eq!(
            crawler_and_maintainer("no_modern,lru_maintainer"),
            (false, true, false)
        );
        // `-o hashpower` within memcached's bounds, in its words.
        for (power, words) in [
            ("11", "is too low"),
            ("33", "is too high"),
            ("x", "of 0 is too low"),
        ] {
            let refused = settings(&["-o", &format!("hashpower={power}")]).unwrap_err();
            assert!(refused.to_string().contains(words), "{power}: {refused}");
        }
        assert!(settings(&["-s", "/tmp/x.sock", "-a", "9"])
            .unwrap_err()
            .to_string()
            .contains("octal"));
        let s = settings(&["-s", "/tmp/x.sock", "-a", "750"]).unwrap();
        assert_eq!(s.unix, Some(("/tmp/x.sock".into(), 0o750)));
        assert!(s.tcp.is_empty() && s.runtime_config().listen.is_none());
    }
}
