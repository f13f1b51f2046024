//! The cache itself, whatever door a command comes in by: the shared store and settings, each loop's own
//! state, and the command core that every door (text, meta, UDP, and the next ones) runs against the store,
//! counting each command as memcached counts it. Nothing here writes a reply.

use std::cell::{Cell, RefCell};
use std::io::Write as _;
use std::sync::{Arc, Mutex};

use tern_cache_storage::{
    ArithOptions, ArithOutcome, DeleteOutcome, Stale, Store, StoreOutcome, StoreRequest, StoreStats,
};
use tern_memcache_proto::request::{GetKind, StoreKind};
use tern_memcache_proto::Limits;

use crate::clock::Clock;
use crate::conns::Conns;
use crate::detail::{Detail, LoopPrefixes, Op};
use crate::settings::Settings;
use crate::stats::{self, *};
use crate::vlog::{self, VerboseLog};
use crate::watch::{self, Watchers};

/// Values at least this long are sent from the store without a copy ([`tern_cache_storage::SharedValue`],
/// as memcached's replies reference items): no copy on the I/O thread, and nothing held per connection but
/// a reference while a client reads slowly. Below it, a copy costs less than sharing.
pub(crate) const SHARE_MIN: usize = 8 << 10;

/// The version reported to clients: the memcached release whose behaviour tern cache reproduces (clients
/// and routers check it); `stats` also reports tern's own version.
pub const MEMCACHED_VERSION: &str = "1.6.18";

/// The cache service, shared by every I/O loop.
pub struct Cache {
    pub(crate) store: Store,
    pub(crate) settings: Settings,
    pub(crate) clock: Clock,
    pub(crate) limits: Limits,
    /// The verbosity level and the `-vv` command log.
    pub(crate) vlog: VerboseLog,
    /// Per-prefix stats (`stats detail`).
    pub(crate) detail: Detail,
    /// The open connections (`stats conns`).
    pub(crate) conns: Conns,
    /// Largest reply to one UDP datagram: a UDP reply is built whole (its header counts its datagrams), so
    /// it is bounded: one largest item plus room, and at least 4 MiB.
    pub(crate) udp_reply_max: usize,
    /// The TLS of the TCP listeners (`-Z`), for `refresh_certs` and the `ssl_*` stats.
    pub(crate) tls: Option<tern_runtime::Tls>,
    /// `watch` connections and what they are sent.
    pub(crate) watchers: Arc<Watchers>,
    /// Response objects each loop may hold for unwritten replies under `-o read_buf_mem_limit`, `None`
    /// without it (see [`responses_per_loop`]).
    pub(crate) responses_per_loop: Option<u32>,
    /// `shutdown graceful` asked for the stop: memcached's SIGUSR1, after which `-e` saves the items.
    pub(crate) graceful_stop: std::sync::atomic::AtomicBool,
    /// The LRU crawler's state (`lru_crawler ...`).
    pub(crate) crawler: crate::crawler::Crawler,
    /// memcached's slab classes under `-f` and `-n`, for `me`'s `cls=`.
    pub(crate) slab_classes: crate::footprint::SlabClasses,
    /// `stats sizes` on (`stats sizes_enable`, `-o track_sizes`).
    pub(crate) track_sizes: std::sync::atomic::AtomicBool,
    /// memcached's `settings.oldest_live` as `stats settings`' `oldest` shows it: set by each `flush_all`
    /// to the time before which items count as flushed (the store applies it).
    pub(crate) oldest_live: std::sync::atomic::AtomicU32,
    /// The store's counters and the crawler's starts as the last `stats reset` found them: the stats show
    /// what came since (the store's counters are never zeroed under its shards' feet).
    pub(crate) reset_baseline: std::sync::Mutex<(StoreStats, u64)>,
}

/// memcached's read buffer, which also holds a bundle of response objects (`READ_BUFFER_SIZE`).
const READ_BUFFER_SIZE: usize = 16 << 10;
/// Response objects in one bundle: memcached 1.6.18's `MAX_RESP_PER_BUNDLE` on x86-64 (its `sizes` tool:
/// 1,184-byte objects in a 16 KB buffer with a 24-byte header).
const RESPONSES_PER_BUNDLE: usize = 13;

/// What `-o read_buf_mem_limit` leaves each loop, as memcached divides it: the limit split over the worker
/// threads in 16 KB buffers (at least one), one of which holds the input of the connection being served;
/// the others hold bundles of response objects, one object per command and per key of a get (a miss
/// included) until the replies are written. tern keeps no such objects; it counts them, so that a batch of
/// commands or a multi-get that would not fit is refused where memcached refuses it.
fn responses_per_loop(settings: &Settings) -> Option<u32> {
    if settings.read_buf_mem_limit == 0 {
        return None;
    }
    let per_thread = settings.read_buf_mem_limit / settings.threads.max(1);
    let buffers = (per_thread / READ_BUFFER_SIZE).max(1);
    Some(u32::try_from((buffers - 1) * RESPONSES_PER_BUNDLE).unwrap_or(u32::MAX))
}

/// Per-loop state: where memcached would last have written its replies out, so a multiget with a key over
/// the limit (or an over-long line) drops exactly the replies memcached drops (see
/// [`Request::GetKeyTooLong`]). A loop serves one connection's batch at a time.
pub struct CacheLoop {
    pub(crate) flushed_at: Cell<usize>,
    /// Requests handled since the batch's read: memcached handles `-R` + 1 of them per wakeup, then writes
    /// its replies out and yields.
    pub(crate) in_batch: Cell<u32>,
    /// The `NN` of `-vv` lines for the request being handled: the descriptor of its connection's socket,
    /// or of the UDP socket a datagram came on (memcached's connection numbers).
    pub(crate) log_id: Cell<usize>,
    /// This loop's per-prefix counts (`stats detail`), merged on `dump`.
    pub(crate) prefixes: Arc<Mutex<LoopPrefixes>>,
    /// Hashes of the keys of `mg` hits since replies were last written: memcached's unwritten reply still
    /// references such an item, so it cannot rewrite its number in place (see [`ArithOptions::replace`]).
    pub(crate) pinned: RefCell<Vec<u64>>,
    /// The service, for replies that go on after `handle` returns (a streamed get).
    pub(crate) cache: Arc<Cache>,
    /// Connections of this loop that authenticated with SASL (`-S`).
    pub(crate) authenticated: RefCell<std::collections::HashSet<u64>>,
    /// Where each connection's SASL exchange stands (Cyrus SASL's state in memcached).
    pub(crate) sasl: RefCell<std::collections::HashMap<u64, SaslExchange>>,
    /// Connections of this loop closing because of what they sent (`watch connevents` says `reason=error`).
    pub(crate) closing_on_error: RefCell<std::collections::HashSet<u64>>,
    /// Response objects memcached would hold for the replies not written yet (see [`responses_per_loop`]).
    pub(crate) responses: Cell<u32>,
}

/// A connection's SASL exchange.
#[derive(Clone, Debug, Default)]
pub(crate) struct SaslExchange {
    /// The mechanism of a start that went on or succeeded (memcached's `sasl_started`): a step may follow.
    pub(crate) started: Option<SaslStarted>,
    /// An authentication succeeded (Cyrus's `doneflag`): the exchange cannot start again.
    pub(crate) done: bool,
}

/// What a SASL start began.
#[derive(Clone, Debug)]
pub(crate) enum SaslStarted {
    Plain,
    /// CRAM-MD5's challenge, until its one step.
    CramMd5(Option<Vec<u8>>),
}

impl CacheLoop {
    /// memcached wrote its replies out up to `at`, releasing the items they referenced.
    pub(crate) fn flushed(&self, at: usize) {
        self.flushed_at.set(at);
        self.pinned.borrow_mut().clear();
        self.responses.set(0);
    }

    pub(crate) fn pin(&self, key: &[u8]) {
        self.pinned.borrow_mut().push(key_hash(key));
    }

    pub(crate) fn is_pinned(&self, key: &[u8]) -> bool {
        let pinned = self.pinned.borrow();
        !pinned.is_empty() && pinned.contains(&key_hash(key))
    }

    /// The key's item was replaced by a new one (stored, deleted, rebuilt): earlier replies hold the old.
    pub(crate) fn unpin(&self, key: &[u8]) {
        let mut pinned = self.pinned.borrow_mut();
        if !pinned.is_empty() {
            let hash = key_hash(key);
            pinned.retain(|&h| h != hash);
        }
    }
}

/// FNV-1a: a cheap hash to recognise the keys of unwritten `mg` replies (a collision only makes an incr
/// build a new item where memcached would have rewritten in place).
fn key_hash(key: &[u8]) -> u64 {
    key.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// What to do after a command.
pub(crate) enum Flow {
    Continue,
    /// Close after writing the pending replies (`quit`).
    Close,
    /// Close without writing the replies not written yet ([`Request::Hangup`]).
    Hangup,
}

/// What a command did besides writing its reply.
pub(crate) struct Answer {
    pub(crate) flow: Flow,
    /// memcached sends nothing for this command (`noreply`): the reply written is dropped.
    pub(crate) hidden: bool,
}

impl Answer {
    pub(crate) fn shown() -> Answer {
        Answer {
            flow: Flow::Continue,
            hidden: false,
        }
    }
}

impl Cache {
    /// memcached's `-vv` line for a connection opening or closing.
    pub(crate) fn log_connection(&self, conn: u64, text: &[u8]) {
        if self.vlog.commands() {
            let mut log = Vec::with_capacity(40);
            vlog::line(&mut log, b'<', conn as usize, text);
            self.vlog.write(&log);
        }
    }

    pub fn new(settings: Settings) -> anyhow::Result<Cache> {
        let clock = Clock::default();
        let watchers = Arc::new(Watchers::new(settings.watcher_logbuf_size));
        let store = Store::new(tern_cache_storage::StoreConfig {
            memory_limit: settings.memory_limit,
            item_size_max: settings.item_size_max,
            evict: settings.evictions,
            // Every command's lookup counts an expired item, as in memcached; the counter is per thread.
            on_stale_lookup: |stale| match stale {
                Stale::Expired => GET_EXPIRED.incr(),
                Stale::Flushed => GET_FLUSHED.incr(),
            },
            on_evict: Some(log_evictions(watchers.clone(), clock)),
            huge_pages: settings.large_pages,
            // `-L`: a segment is one huge page (2 MiB), so all of it can be backed by one.
            segment_size: if settings.large_pages {
                2 << 20
            } else {
                tern_cache_storage::StoreConfig::default().segment_size
            },
            // memcached's table starts at 2^hashpower buckets, 2^16 unless `-o hashpower` (or a restart's
            // metadata) says otherwise.
            index_slots: 1
                << if settings.hashpower_init == 0 {
                    16
                } else {
                    settings.hashpower_init
                },
            ..Default::default()
        })
        .map_err(|e| anyhow::anyhow!("cannot create the store: {e}"))?;
        let limits = Limits {
            max_item_size: settings.item_size_max,
            use_cas: settings.cas_enabled,
            ..Limits::default()
        };
        stats::register_all();
        let tls = settings.tls.start()?;
        Ok(Cache {
            tls,
            watchers,
            responses_per_loop: responses_per_loop(&settings),
            graceful_stop: Default::default(),
            crawler: crate::crawler::Crawler::new(&settings),
            slab_classes: crate::footprint::SlabClasses::new(
                settings.growth_factor,
                settings.slab_min_size,
            ),
            track_sizes: settings.track_sizes.into(),
            oldest_live: Default::default(),
            reset_baseline: Default::default(),
            store,
            vlog: VerboseLog::new(settings.verbosity, settings.verbose_log_file.clone()),
            detail: Detail::new(settings.prefix_delimiter, settings.detail_enabled),
            // Descriptors are numbered from 0 and reused: the connection limit plus room for the
            // listeners, log files and the runtime's own descriptors covers them.
            conns: Conns::new(settings.max_connections + 1024),
            udp_reply_max: settings.item_size_max.saturating_add(64 << 10).max(4 << 20),
            settings,
            clock,
            limits,
        })
    }

    /// The TLS the server is to serve with (`-Z`), if any.
    pub fn tls(&self) -> Option<&tern_runtime::Tls> {
        self.tls.as_ref()
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub(crate) fn cas(&self, cas: u64) -> u64 {
        if self.settings.cas_enabled {
            cas
        } else {
            0
        }
    }

    /// Counts a classic command for its key's prefix (`stats detail`), when that is on.
    #[inline]
    pub(crate) fn count_prefix(&self, lp: &CacheLoop, key: &[u8], op: Op) {
        if self.detail.enabled() {
            self.detail.record(&lp.prefixes, key, op);
        }
    }

    /// The new exptime a gat/gats sets, `None` for get/gets.
    pub(crate) fn get_touch(&self, kind: GetKind, exptime: i32, now: u32) -> Option<u32> {
        matches!(kind, GetKind::Gat | GetKind::Gats)
            .then(|| self.clock.expiry(i64::from(exptime), now))
    }

    /// One key of a get: looks it up (touching it for gat/gats), calls `write` on a hit (under the store's
    /// lock), and counts and logs it as memcached does. Whether it hit.
    pub(crate) fn get_key(
        &self,
        touch: Option<u32>,
        key: &[u8],
        now: u32,
        lp: &CacheLoop,
        log: Option<&mut Vec<u8>>,
        write: impl FnOnce(&tern_cache_storage::ItemView),
    ) -> bool {
        let mut size = 0;
        let write = |item: &tern_cache_storage::ItemView| {
            size = item.value.len();
            write(item)
        };
        let hit = match touch {
            Some(exp) => self.store.get_and_touch(key, now, exp, write).is_some(),
            None => self.store.get(key, now, write).is_some(),
        };
        self.log_fetch(lp, key, hit.then_some(size));
        if self.detail.enabled() {
            self.detail.record(&lp.prefixes, key, Op::Get { hit });
        }
        // memcached counts gat/gats as touches only, not as gets.
        if touch.is_some() {
            CMD_TOUCH.incr();
            if hit {
                TOUCH_HITS.incr()
            } else {
                TOUCH_MISSES.incr()
            }
        } else {
            CMD_GET.incr();
            if hit {
                GET_HITS.incr()
            } else {
                GET_MISSES.incr()
            }
        }
        if let (true, Some(log)) = (hit, log) {
            let mut text = b"sending key ".to_vec();
            text.extend_from_slice(key);
            vlog::line(log, b'>', lp.log_id.get(), &text);
        }
        hit
    }

    /// A classic storage command (`set`, `add`, `replace`, `append`, `prepend`, `cas`), counted as memcached
    /// counts it (but `store_too_large`/`store_no_memory`: [`Cache::count_store_failure`]); `log` receives
    /// memcached's `-vv` line for a CAS mismatch.
    pub(crate) fn store_item(
        &self,
        lp: &CacheLoop,
        kind: StoreKind,
        req: &StoreRequest<'_>,
        now: u32,
        log: Option<&mut Vec<u8>>,
    ) -> StoreOutcome {
        CMD_SET.incr();
        self.count_prefix(lp, req.key, Op::Set);
        let outcome = self.store_logged(lp, kind, req, now);
        if let StoreOutcome::Stored { .. } = outcome {
            lp.unpin(req.key);
        }
        if let (StoreOutcome::Exists, Some(log), Some(cas)) = (outcome, log, req.cas) {
            self.log_cas_failure(log, req.key, cas, now);
        }
        if kind == StoreKind::Cas {
            match outcome {
                StoreOutcome::Stored { .. } => CAS_HITS.incr(),
                StoreOutcome::Exists => CAS_BADVAL.incr(),
                StoreOutcome::NotFound => CAS_MISSES.incr(),
                _ => {}
            }
        }
        outcome
    }

    /// `delete` (with the binary protocol's CAS check when `cas` is given), counted as memcached counts it:
    /// a CAS mismatch is neither a hit nor a miss.
    pub(crate) fn delete_item(
        &self,
        lp: &CacheLoop,
        key: &[u8],
        cas: Option<u64>,
        now: u32,
    ) -> DeleteOutcome {
        self.count_prefix(lp, key, Op::Delete);
        self.log_lookup(lp, key, now);
        let outcome = self.store.delete(key, now, cas);
        match outcome {
            DeleteOutcome::Deleted => {
                lp.unpin(key);
                DELETE_HITS.incr();
            }
            DeleteOutcome::NotFound => DELETE_MISSES.incr(),
            DeleteOutcome::Exists => {}
        }
        outcome
    }

    /// `incr`/`decr`, with `opts` (the binary protocol's CAS check and creation of a missing counter). An
    /// item an unwritten `mg` reply still references is rebuilt, not rewritten in place.
    pub(crate) fn incr_decr_item(
        &self,
        lp: &CacheLoop,
        incr: bool,
        key: &[u8],
        delta: u64,
        opts: ArithOptions,
        now: u32,
    ) -> ArithOutcome {
        let opts = ArithOptions {
            replace: lp.is_pinned(key),
            ..opts
        };
        self.log_lookup(lp, key, now);
        let outcome = self.store.incr_decr(key, now, incr, delta, &opts);
        if opts.replace {
            lp.unpin(key);
        }
        count_arith(incr, &outcome);
        outcome
    }

    /// `touch`: whether the key was there.
    pub(crate) fn touch_item(&self, lp: &CacheLoop, key: &[u8], exptime: i32, now: u32) -> bool {
        CMD_TOUCH.incr();
        self.log_lookup(lp, key, now);
        let hit = self
            .store
            .touch(key, now, self.clock.expiry(i64::from(exptime), now));
        if hit {
            TOUCH_HITS.incr()
        } else {
            TOUCH_MISSES.incr()
        }
        hit
    }

    /// `flush_all` (the caller checks it is allowed): now, or `delay` seconds from now.
    pub(crate) fn flush_all(&self, delay: i32, now: u32) {
        CMD_FLUSH.incr();
        let at = (delay > 0).then(|| self.clock.expiry(i64::from(delay), now));
        // memcached's `oldest_live`: the flush's second, or with CAS values the one before it (items
        // stored in the flush's second after it have larger CAS values and survive).
        let flush_time = at.unwrap_or(now);
        let oldest = if self.settings.cas_enabled {
            flush_time - 1
        } else {
            flush_time
        };
        self.oldest_live
            .store(oldest, std::sync::atomic::Ordering::Relaxed);
        let at = if self.settings.cas_enabled {
            at
        } else {
            // Without CAS values memcached has no exact cliff: its `oldest_live` is the flush's second
            // itself, not the one before, so items stored later in that second are flushed too.
            Some(flush_time + 1)
        };
        self.store.flush_all(now, at);
    }

    /// memcached's `-vv` line for a CAS mismatch (the item's CAS, then the request's).
    pub(crate) fn log_cas_failure(&self, log: &mut Vec<u8>, key: &[u8], requested: u64, now: u32) {
        if let Some(current) = self.store.peek(key, now, |item| item.cas) {
            log.extend_from_slice(
                format!(
                    "CAS:  failure: expected {}, got {requested}\n",
                    self.cas(current)
                )
                .as_bytes(),
            );
        }
    }

    /// Response objects left for this loop's unwritten replies; `None` when there is no limit.
    pub(crate) fn responses_left(&self, lp: &CacheLoop) -> Option<u32> {
        Some(self.responses_per_loop?.saturating_sub(lp.responses.get()))
    }

    /// Takes `n` response objects (see [`responses_per_loop`]).
    pub(crate) fn take_responses(&self, lp: &CacheLoop, n: u32) {
        lp.responses.set(lp.responses.get().saturating_add(n));
    }

    /// Stores, with the `watch` lines memcached writes for it: the lookup a store makes first, then the
    /// store (with an append's new size).
    pub(crate) fn store_logged(
        &self,
        lp: &CacheLoop,
        kind: StoreKind,
        req: &StoreRequest<'_>,
        now: u32,
    ) -> StoreOutcome {
        if !self.watchers.wants(watch::FETCHERS | watch::MUTATIONS) {
            return self.store.store(req, now);
        }
        let old_size = self.store.peek(req.key, now, |item| item.value.len());
        self.log_fetch(lp, req.key, old_size);
        let outcome = self.store.store(req, now);
        self.log_store(lp, kind, req, outcome, old_size, now);
        outcome
    }

    /// The `watch fetchers` line of a command that looks `key` up without a get (delete, touch, incr/decr
    /// and their meta forms), logged before the command runs, as memcached's lookup is. Costs a lookup
    /// only while someone watches fetches.
    pub(crate) fn log_lookup(&self, lp: &CacheLoop, key: &[u8], now: u32) {
        if self.watchers.wants(watch::FETCHERS) {
            let size = self.store.peek(key, now, |item| item.value.len());
            self.log_fetch(lp, key, size);
        }
    }

    /// A `watch fetchers` line for a lookup of `key`: its value's size if found. tern's store has no slab
    /// classes (`clsid=0`), and an expired or flushed item reads as not found.
    pub(crate) fn log_fetch(&self, lp: &CacheLoop, key: &[u8], found: Option<usize>) {
        self.watchers.log(watch::FETCHERS, |line| {
            line.extend_from_slice(b"type=item_get key=");
            watch::uri_encode(line, key);
            let status = if found.is_some() {
                "found"
            } else {
                "not_found"
            };
            let _ = write!(
                line,
                " status={status} clsid=0 cfd={} size={}",
                lp.log_id.get(),
                found.unwrap_or(0)
            );
        });
    }

    /// A `watch mutations` line for a storage command; `old_size`: the value it found, if any.
    fn log_store(
        &self,
        lp: &CacheLoop,
        kind: StoreKind,
        req: &StoreRequest<'_>,
        outcome: StoreOutcome,
        old_size: Option<usize>,
        now: u32,
    ) {
        self.watchers.log(watch::MUTATIONS, |line| {
            line.extend_from_slice(b"type=item_store key=");
            watch::uri_encode(line, req.key);
            let status = match outcome {
                StoreOutcome::Stored { .. } => "stored",
                StoreOutcome::NotStored => "not_stored",
                StoreOutcome::Exists => "exists",
                StoreOutcome::NotFound => "not_found",
                StoreOutcome::TooLarge => "too_large",
                StoreOutcome::OutOfMemory => "no_memory",
            };
            let cmd = match kind {
                StoreKind::Set => "set",
                StoreKind::Add => "add",
                StoreKind::Replace => "replace",
                StoreKind::Append => "append",
                StoreKind::Prepend => "prepend",
                StoreKind::Cas => "cas",
            };
            // memcached prints the seconds left, 0 for an item that never expires.
            let ttl = if req.exptime == 0 {
                0
            } else {
                req.exptime.wrapping_sub(now)
            };
            // The item stored: an append's holds the old value and the new.
            let size = match (kind, outcome) {
                (StoreKind::Append | StoreKind::Prepend, StoreOutcome::Stored { .. }) => {
                    old_size.unwrap_or(0) + req.value.len()
                }
                _ => req.value.len(),
            };
            let _ = write!(
                line,
                " status={status} cmd={cmd} ttl={ttl} clsid=0 cfd={} size={size}",
                lp.log_id.get(),
            );
        });
    }

    /// `store_too_large` and `store_no_memory` for a text or meta storage command (memcached counts neither
    /// for binary ones).
    pub(crate) fn count_store_failure(&self, outcome: StoreOutcome) {
        match outcome {
            StoreOutcome::TooLarge => STORE_TOO_LARGE.incr(),
            StoreOutcome::OutOfMemory => STORE_NO_MEMORY.incr(),
            _ => {}
        }
    }
}

/// The store's eviction hook: a `watch evictions` line per item evicted (memcached's `type=eviction`: `ttl`
/// the seconds it had left, -1 for none; `la` the seconds since its last access).
fn log_evictions(watchers: Arc<Watchers>, clock: Clock) -> tern_cache_storage::EvictHook {
    tern_cache_storage::EvictHook(Arc::new(move |item| {
        watchers.log(watch::EVICTIONS, |line| {
            let now = clock.now();
            line.extend_from_slice(b"type=eviction key=");
            watch::uri_encode(line, item.key);
            let ttl = if item.exptime == 0 {
                -1
            } else {
                i64::from(item.exptime) - i64::from(now)
            };
            let _ = write!(
                line,
                " fetch={} ttl={ttl} la={} clsid=0 size={}",
                if item.fetched { "yes" } else { "no" },
                now.saturating_sub(item.last_access),
                item.value_len
            );
        })
    }))
}

/// `incr_hits`, `incr_misses` and the `decr_` pair as memcached counts them (its `do_add_delta` and callers):
/// a hit is a number changed, a miss a key not found; a counter made on a miss from an initial value (binary,
/// `ma N`), a non-numeric value, a CAS mismatch and a failed allocation count as neither.
pub(crate) fn count_arith(incr: bool, outcome: &ArithOutcome) {
    let hit = match outcome {
        ArithOutcome::Value { created: false, .. } => true,
        ArithOutcome::NotFound => false,
        ArithOutcome::Value { created: true, .. }
        | ArithOutcome::NonNumeric
        | ArithOutcome::Exists
        | ArithOutcome::OutOfMemory => return,
    };
    match (incr, hit) {
        (true, true) => INCR_HITS.incr(),
        (true, false) => INCR_MISSES.incr(),
        (false, true) => DECR_HITS.incr(),
        (false, false) => DECR_MISSES.incr(),
    }
}
