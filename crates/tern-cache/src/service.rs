//! The cache service: memcached's text and meta commands against the shared store, answered inline on the
//! I/O loop that read them (every command is a few hundred nanoseconds of work: offloading would only add
//! a hand-off).

use std::cell::{Cell, RefCell};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tern_cache_storage::{
    ArithOptions, ArithOutcome, DeleteOutcome, MetaGetOptions, Store, StoreMode, StoreOutcome,
    StoreRequest,
};
use tern_memcache_proto::reply::{
    self, ErrorReply, MetaDebugInfo, MetaFields, MetaStatus, MetadumpEntry, Status,
};
use tern_memcache_proto::request::{
    GetKind, LruCrawler, MetaFlags, MetaKey, MetaSetMode, ShutdownMode, StoreKind,
};
use tern_memcache_proto::{udp, Decoded, Limits, Request, Words};
use tern_runtime::{
    Cx, Datagrams, Decode, LoopInfo, Outcome, Output, Rejection, ReplyStream, ServerControl,
    Service, Step,
};

use crate::clock::{self, Clock};
use crate::conns::Conns;
use crate::detail::{Detail, LoopPrefixes, Op};
use crate::settings::Settings;
use crate::stats::{self, *};
use crate::vlog::{self, VerboseLog};

/// The version reported to clients: the memcached release whose behaviour tern cache reproduces (clients
/// and routers check it); `stats` also reports tern's own version.
pub const MEMCACHED_VERSION: &str = "1.6.18";

/// The cache service, shared by every I/O loop.
pub struct Cache {
    pub(crate) store: Store,
    pub(crate) settings: Settings,
    pub(crate) clock: Clock,
    limits: Limits,
    /// The verbosity level and the `-vv` command log.
    vlog: VerboseLog,
    /// Per-prefix stats (`stats detail`).
    detail: Detail,
    /// The open connections (`stats conns`).
    conns: Conns,
    /// Largest reply to one UDP datagram: a UDP reply is built whole (its header counts its datagrams), so
    /// it is bounded: one largest item plus room, and at least 4 MiB.
    udp_reply_max: usize,
}

/// Per-loop state: where memcached would last have written its replies out, so a multiget with a key over
/// the limit (or an over-long line) drops exactly the replies memcached drops (see
/// [`Request::GetKeyTooLong`]). A loop serves one connection's batch at a time.
pub struct CacheLoop {
    flushed_at: Cell<usize>,
    /// Requests handled since the batch's read: memcached handles `-R` + 1 of them per wakeup, then writes
    /// its replies out and yields.
    in_batch: Cell<u32>,
    /// The `NN` of `-vv` lines for the request being handled: the descriptor of its connection's socket,
    /// or of the UDP socket a datagram came on (memcached's connection numbers).
    log_id: Cell<usize>,
    /// This loop's per-prefix counts (`stats detail`), merged on `dump`.
    prefixes: Arc<Mutex<LoopPrefixes>>,
    /// Hashes of the keys of `mg` hits since replies were last written: memcached's unwritten reply still
    /// references such an item, so it cannot rewrite its number in place (see [`ArithOptions::replace`]).
    pinned: RefCell<Vec<u64>>,
    /// The service, for replies that go on after `handle` returns (a streamed get).
    cache: Arc<Cache>,
}

impl CacheLoop {
    /// memcached wrote its replies out up to `at`, releasing the items they referenced.
    fn flushed(&self, at: usize) {
        self.flushed_at.set(at);
        self.pinned.borrow_mut().clear();
    }

    fn pin(&self, key: &[u8]) {
        self.pinned.borrow_mut().push(key_hash(key));
    }

    fn is_pinned(&self, key: &[u8]) -> bool {
        let pinned = self.pinned.borrow();
        !pinned.is_empty() && pinned.contains(&key_hash(key))
    }

    /// The key's item was replaced by a new one (stored, deleted, rebuilt): earlier replies hold the old.
    fn unpin(&self, key: &[u8]) {
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

/// Values at least this long are sent from the store without a copy ([`tern_cache_storage::SharedValue`],
/// as memcached's replies reference items): no copy on the I/O thread, and nothing held per connection but
/// a reference while a client reads slowly. Below it, a copy costs less than sharing.
const SHARE_MIN: usize = 8 << 10;
/// Largest `stats cachedump` reply, as memcached's.
const CACHEDUMP_MAX_BYTES: usize = 2 << 20;
/// Reply bytes one step of a streamed get writes before it lets the runtime check the connection's limits.
const GET_STEP_BYTES: usize = 64 << 10;

/// The item classes an `lru_crawler metadump` lists: `all` (or `hash`), or a comma-separated list.
struct MetadumpClasses {
    all: bool,
    wanted: Vec<u8>,
}

impl MetadumpClasses {
    fn parse(classes: &[u8]) -> MetadumpClasses {
        MetadumpClasses {
            all: classes == b"all" || classes == b"hash",
            wanted: classes
                .split(|&b| b == b',')
                .filter_map(|c| std::str::from_utf8(c).ok()?.parse().ok())
                .collect(),
        }
    }
}

/// What a get needs from key to key (a get streamed to a slow reader goes on with it later).
struct GetReply {
    /// gat/gats: the new exptime.
    touch: Option<u32>,
    with_cas: bool,
    now: u32,
    /// The connection's number in `-vv` lines.
    log_id: usize,
}

impl GetReply {
    fn key(
        &self,
        cache: &Cache,
        key: &[u8],
        out: &mut Output,
        lp: &CacheLoop,
        log: Option<&mut Vec<u8>>,
    ) {
        cache.get_key(self.touch, key, self.now, lp, log, |item| {
            let cas = self.with_cas.then(|| cache.cas(item.cas));
            if item.value.len() >= SHARE_MIN {
                reply::write_value_header(out, item.key, item.flags, item.value.len(), cas);
                out.push_shared(Bytes::from_owner(item.share_value()), b"\r\n");
            } else {
                reply::write_value(out, item.key, item.flags, item.value, cas);
            }
        });
    }

    fn end(&self, out: &mut Output, lp: &CacheLoop, log: Option<&mut Vec<u8>>) {
        if let Some(log) = log {
            vlog::line(log, b'>', self.log_id, b"END");
        }
        reply::write_status(out, Status::End);
        // memcached writes its replies out after a get.
        lp.flushed(out.len());
    }
}

/// One frame of a connection's input.
pub enum Frame<'a> {
    /// A request, and its command line when the `-vv` log is on (else empty).
    Command(Request<'a>, &'a [u8]),
    /// The connection must close without a reply (a line past memcached's limit...): memcached then closes
    /// at once, so the replies it had not written yet are lost too.
    Abort,
}

/// What to do after a command.
enum Flow {
    Continue,
    /// Close after writing the pending replies (`quit`).
    Close,
    /// Close without writing the replies not written yet ([`Request::Hangup`]).
    Hangup,
}

/// What a command did besides writing its reply.
struct Answer {
    flow: Flow,
    /// memcached sends nothing for this command (`noreply`): the reply written is dropped.
    hidden: bool,
}

impl Answer {
    fn shown() -> Answer {
        Answer {
            flow: Flow::Continue,
            hidden: false,
        }
    }
}

/// Which replies of a command memcached's `-vv` log shows (those it writes through `out_string`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum LogReplies {
    /// Every reply line.
    All,
    /// Only error lines (meta commands answer through their own buffers; their errors through
    /// `out_errstring`), and for `me` a miss's `EN`.
    Errors { me: bool },
    /// Only replies that are not stats dumps (`STAT`, `PREFIX`, `ITEM` lines and their `END`).
    Stats,
    /// None (gets log their own `sending key` and `END` lines).
    None,
}

impl LogReplies {
    fn of(request: &Request<'_>) -> LogReplies {
        match request {
            Request::Get { .. } | Request::Quit | Request::Hangup => LogReplies::None,
            Request::LruCrawler(LruCrawler::Metadump { .. }) => LogReplies::None,
            Request::Stats { .. } => LogReplies::Stats,
            Request::MetaGet { .. }
            | Request::MetaSet { .. }
            | Request::MetaDelete { .. }
            | Request::MetaArithmetic { .. } => LogReplies::Errors { me: false },
            Request::MetaDebug { .. } => LogReplies::Errors { me: true },
            _ => LogReplies::All,
        }
    }

    fn select(self, reply: &[u8]) -> bool {
        let error = reply.starts_with(b"CLIENT_ERROR")
            || reply.starts_with(b"SERVER_ERROR")
            || reply.starts_with(b"ERROR");
        match self {
            LogReplies::All => true,
            LogReplies::Errors { me } => error || (me && reply == b"EN\r\n"),
            LogReplies::Stats => {
                !(reply.starts_with(b"STAT ")
                    || reply.starts_with(b"PREFIX ")
                    || reply.starts_with(b"ITEM ")
                    || reply == b"END\r\n")
            }
            LogReplies::None => false,
        }
    }
}

impl Cache {
    /// memcached's `-vv` line for a connection opening or closing.
    fn log_connection(&self, conn: u64, text: &[u8]) {
        if self.vlog.commands() {
            let mut log = Vec::with_capacity(40);
            vlog::line(&mut log, b'<', conn as usize, text);
            self.vlog.write(&log);
        }
    }

    pub fn new(settings: Settings) -> anyhow::Result<Cache> {
        let store = Store::new(tern_cache_storage::StoreConfig {
            memory_limit: settings.memory_limit,
            item_size_max: settings.item_size_max,
            evict: settings.evictions,
            // Every command's lookup counts an expired item, as in memcached; the counter is per thread.
            on_expired_lookup: || GET_EXPIRED.incr(),
            ..Default::default()
        })
        .map_err(|e| anyhow::anyhow!("cannot create the store: {e}"))?;
        let limits = Limits {
            max_item_size: settings.item_size_max,
            use_cas: settings.cas_enabled,
            ..Limits::default()
        };
        stats::register_all();
        Ok(Cache {
            store,
            vlog: VerboseLog::new(settings.verbosity, settings.verbose_log_file.clone()),
            detail: Detail::new(settings.prefix_delimiter, settings.detail_enabled),
            // Descriptors are numbered from 0 and reused: the connection limit plus room for the
            // listeners, log files and the runtime's own descriptors covers them.
            conns: Conns::new(settings.max_connections + 1024),
            udp_reply_max: settings.item_size_max.saturating_add(64 << 10).max(4 << 20),
            settings,
            clock: Clock::default(),
            limits,
        })
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    fn cas(&self, cas: u64) -> u64 {
        if self.settings.cas_enabled {
            cas
        } else {
            0
        }
    }

    /// Runs one command and writes its reply, always: when memcached would send nothing (`noreply`), the
    /// returned [`Answer::hidden`] says so and the caller drops the reply (after logging it for `-vv`, as
    /// memcached's `NOREPLY` lines). Shared by TCP (with the server's controls) and UDP. `log` collects the
    /// `-vv` lines a get writes itself (`sending key`, `END`).
    fn execute(
        &self,
        request: Request<'_>,
        now: u32,
        out: &mut Vec<u8>,
        control: Option<&ServerControl>,
        lp: &CacheLoop,
        log: Option<&mut Vec<u8>>,
    ) -> Answer {
        let mut hidden = false;
        match request {
            // Over TCP, `handle` answers gets itself (see `get_tcp`).
            Request::Get {
                kind,
                exptime,
                keys,
            } => self.get(kind, exptime, keys, now, out, None, lp, log),
            Request::GetKeyTooLong {
                kind,
                exptime,
                keys,
            } => {
                // memcached serves the keys before the long one (fetching, touching, counting them), then
                // drops what it had not written and answers the error: the values are never written here.
                let mut log = log;
                let touch = self.get_touch(kind, exptime, now);
                for key in keys {
                    self.get_key(touch, key, now, lp, log.as_deref_mut(), |_| {});
                }
                if let Some(log) = log {
                    vlog::line(log, b'>', lp.log_id.get(), b"END");
                }
                reply::write_error(out, ErrorReply::BadCommandLineFormat);
            }
            Request::Store {
                kind,
                key,
                flags,
                exptime,
                data,
                cas,
                noreply,
            } => {
                CMD_SET.incr();
                self.count_prefix(lp, key, Op::Set);
                let mode = match kind {
                    StoreKind::Set | StoreKind::Cas => StoreMode::Set,
                    StoreKind::Add => StoreMode::Add,
                    StoreKind::Replace => StoreMode::Replace,
                    StoreKind::Append => StoreMode::Append,
                    StoreKind::Prepend => StoreMode::Prepend,
                };
                let req = StoreRequest {
                    mode,
                    key,
                    value: data,
                    flags,
                    exptime: self.clock.expiry(i64::from(exptime), now),
                    cas: (kind == StoreKind::Cas).then_some(cas),
                    invalidate: false,
                    key_binary: false,
                };
                let outcome = self.store.store(&req, now);
                if let StoreOutcome::Stored { .. } = outcome {
                    lp.unpin(key);
                }
                if let (StoreOutcome::Exists, Some(log)) = (outcome, log) {
                    self.log_cas_failure(log, key, cas, now);
                }
                if kind == StoreKind::Cas {
                    match outcome {
                        StoreOutcome::Stored { .. } => CAS_HITS.incr(),
                        StoreOutcome::Exists => CAS_BADVAL.incr(),
                        StoreOutcome::NotFound => CAS_MISSES.incr(),
                        _ => {}
                    }
                }
                self.write_store_outcome(outcome, out);
                hidden = noreply;
            }
            Request::TooLarge {
                key,
                unlink_existing,
                noreply,
                meta,
            } => {
                STORE_TOO_LARGE.incr();
                if !meta {
                    self.count_prefix(lp, key.raw, Op::Set);
                }
                if unlink_existing {
                    let key = key.decoded();
                    self.store.delete(&key, now, None);
                    lp.unpin(&key);
                }
                reply::write_error(out, ErrorReply::ObjectTooLarge);
                hidden = noreply;
            }
            Request::BadDataChunk { key, noreply } => {
                self.count_prefix(lp, key, Op::Set);
                reply::write_error(out, ErrorReply::BadDataChunk);
                hidden = noreply;
            }
            Request::Delete { key, noreply } => {
                self.count_prefix(lp, key, Op::Delete);
                let status = match self.store.delete(key, now, None) {
                    DeleteOutcome::Deleted => {
                        lp.unpin(key);
                        DELETE_HITS.incr();
                        Status::Deleted
                    }
                    _ => {
                        DELETE_MISSES.incr();
                        Status::NotFound
                    }
                };
                reply::write_status(out, status);
                hidden = noreply;
            }
            Request::Arithmetic {
                incr,
                key,
                delta,
                noreply,
            } => {
                let opts = ArithOptions {
                    replace: lp.is_pinned(key),
                    ..ArithOptions::default()
                };
                let outcome = self.store.incr_decr(key, now, incr, delta, &opts);
                if opts.replace {
                    lp.unpin(key);
                }
                count_arith(incr, &outcome);
                match outcome {
                    ArithOutcome::Value { value, .. } => {
                        reply::write_number(out, value);
                    }
                    ArithOutcome::NotFound | ArithOutcome::Exists => {
                        reply::write_status(out, Status::NotFound)
                    }
                    ArithOutcome::NonNumeric => reply::write_error(out, ErrorReply::NonNumeric),
                    ArithOutcome::OutOfMemory => {
                        reply::write_error(out, ErrorReply::OutOfMemoryStoring)
                    }
                }
                hidden = noreply;
            }
            Request::Touch {
                key,
                exptime,
                noreply,
            } => {
                CMD_TOUCH.incr();
                let hit = self
                    .store
                    .touch(key, now, self.clock.expiry(i64::from(exptime), now));
                if hit {
                    TOUCH_HITS.incr()
                } else {
                    TOUCH_MISSES.incr()
                }
                reply::write_status(
                    out,
                    if hit {
                        Status::Touched
                    } else {
                        Status::NotFound
                    },
                );
                hidden = noreply;
            }
            Request::FlushAll { delay, noreply } => {
                if !self.settings.flush_enabled {
                    // memcached answers even with noreply here.
                    out.extend_from_slice(b"CLIENT_ERROR flush_all not allowed\r\n");
                    return Answer::shown();
                }
                CMD_FLUSH.incr();
                let at = (delay > 0).then(|| self.clock.expiry(i64::from(delay), now));
                let at = if self.settings.cas_enabled {
                    at
                } else {
                    // Without CAS values memcached has no exact cliff: its `oldest_live` is the flush's
                    // second itself, not the one before, so items stored later in that second are flushed
                    // too.
                    Some(at.unwrap_or(now) + 1)
                };
                self.store.flush_all(now, at);
                reply::write_status(out, Status::Ok);
                hidden = noreply;
            }
            Request::Version => reply::write_version(out, MEMCACHED_VERSION.as_bytes()),
            Request::Verbosity { level, noreply } => {
                self.vlog.set_level(level);
                reply::write_status(out, Status::Ok);
                hidden = noreply;
            }
            Request::Quit => {
                return Answer {
                    flow: Flow::Close,
                    hidden,
                }
            }
            Request::Hangup => {
                return Answer {
                    flow: Flow::Hangup,
                    hidden,
                }
            }
            Request::Shutdown(mode) => match (self.settings.shutdown_enabled, control) {
                (false, _) | (true, None) => {
                    reply::write_error(out, ErrorReply::ShutdownNotEnabled)
                }
                (true, Some(_)) if mode == ShutdownMode::Invalid => {
                    reply::write_error(out, ErrorReply::InvalidShutdownMode)
                }
                (true, Some(control)) => {
                    control.shutdown();
                    return Answer {
                        flow: Flow::Close,
                        hidden,
                    };
                }
            },
            Request::CacheMemlimit { megabytes, noreply } => {
                let reply: &[u8] = match megabytes {
                    None => b"ERROR\r\n",
                    Some(mb) if mb < 8 => {
                        b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n"
                    }
                    Some(mb) => {
                        self.store.set_memory_limit((mb as usize) << 20, now);
                        b"OK\r\n"
                    }
                };
                out.extend_from_slice(reply);
                hidden = noreply;
            }
            Request::Stats { args } => self.stats(args, now, out, control, lp.log_id.get() as u64),
            Request::LruCrawler(cmd) => self.lru_crawler(cmd, now, out),
            Request::Admin { command, args } => self.admin(command, args, out),
            Request::MetaGet { key, flags } => self.meta_get(key, &flags, now, out, lp),
            Request::MetaSet { key, flags, data } => {
                self.meta_set(key, &flags, data, now, out, log, lp)
            }
            Request::MetaDelete { key, flags } => self.meta_delete(key, &flags, now, out, lp),
            Request::MetaArithmetic { key, flags } => {
                self.meta_arithmetic(key, &flags, now, out, lp)
            }
            Request::MetaNoop => reply::write_status(out, Status::MetaNoop),
            Request::MetaDebug { key } => self.meta_debug(key, now, out),
            Request::Error(error) => reply::write_error(out, error),
            Request::Silent(error) => {
                // Written only for the `-vv` log (`>NN NOREPLY ...`), then dropped like any hidden reply.
                reply::write_error(out, error);
                hidden = true;
            }
        }
        Answer {
            flow: Flow::Continue,
            hidden,
        }
    }

    /// memcached's `-vv` line for a CAS mismatch (the item's CAS, then the request's).
    fn log_cas_failure(&self, log: &mut Vec<u8>, key: &[u8], requested: u64, now: u32) {
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

    /// Counts a classic command for its key's prefix (`stats detail`), when that is on.
    #[inline]
    fn count_prefix(&self, lp: &CacheLoop, key: &[u8], op: Op) {
        if self.detail.enabled() {
            self.detail.record(&lp.prefixes, key, op);
        }
    }

    /// get/gets/gat/gats. `units`, for UDP, receives where each reply unit ends (one per hit, `END` joined to
    /// the last; memcached numbers datagrams per unit).
    #[allow(clippy::too_many_arguments)]
    fn get(
        &self,
        kind: GetKind,
        exptime: i32,
        keys: Words<'_>,
        now: u32,
        out: &mut Vec<u8>,
        mut units: Option<&mut Vec<usize>>,
        lp: &CacheLoop,
        mut log: Option<&mut Vec<u8>>,
    ) {
        let start = out.len();
        let mut over = false;
        let last_hit = self.get_keys(
            kind,
            exptime,
            keys,
            now,
            out,
            units.as_deref_mut(),
            lp,
            log.as_deref_mut(),
            &mut over,
        );
        if over {
            // More than one UDP reply may hold: memcached's answer to a get whose reply it cannot hold.
            out.truncate(start);
            if let Some(units) = units {
                units.retain(|&end| end <= start);
                reply::write_error(out, ErrorReply::OutOfMemoryWritingGet);
                units.push(out.len());
            }
            return;
        }
        if let Some(log) = log {
            vlog::line(log, b'>', lp.log_id.get(), b"END");
        }
        reply::write_status(out, Status::End);
        // `END` joins the last key's unit: its value's, or a unit of its own when that key missed.
        if let Some(units) = units {
            match units.last_mut() {
                Some(last) if last_hit => *last = out.len(),
                _ => units.push(out.len()),
            }
        }
    }

    /// The keys of a get, without the `END`, copied into `out`; whether the last key hit. Past
    /// [`Cache::udp_reply_max`] bytes hits are still looked up and counted but no longer written, and `over`
    /// is set.
    #[allow(clippy::too_many_arguments)]
    fn get_keys(
        &self,
        kind: GetKind,
        exptime: i32,
        keys: Words<'_>,
        now: u32,
        out: &mut Vec<u8>,
        mut units: Option<&mut Vec<usize>>,
        lp: &CacheLoop,
        mut log: Option<&mut Vec<u8>>,
        over: &mut bool,
    ) -> bool {
        let touch = self.get_touch(kind, exptime, now);
        let with_cas = kind.returns_cas();
        let mut last_hit = false;
        for key in keys {
            let hit = self.get_key(touch, key, now, lp, log.as_deref_mut(), |item| {
                if out.len() + item.value.len() > self.udp_reply_max {
                    *over = true;
                }
                if !*over {
                    let cas = with_cas.then(|| self.cas(item.cas));
                    reply::write_value(out, item.key, item.flags, item.value, cas);
                }
            });
            if let (true, Some(units)) = (hit, units.as_deref_mut()) {
                units.push(out.len());
            }
            last_hit = hit;
        }
        last_hit
    }

    /// The new exptime a gat/gats sets, `None` for get/gets.
    fn get_touch(&self, kind: GetKind, exptime: i32, now: u32) -> Option<u32> {
        matches!(kind, GetKind::Gat | GetKind::Gats)
            .then(|| self.clock.expiry(i64::from(exptime), now))
    }

    /// One key of a get: looks it up (touching it for gat/gats), calls `write` on a hit (under the store's
    /// lock), and counts and logs it as memcached does. Whether it hit.
    fn get_key(
        &self,
        touch: Option<u32>,
        key: &[u8],
        now: u32,
        lp: &CacheLoop,
        log: Option<&mut Vec<u8>>,
        write: impl FnOnce(&tern_cache_storage::ItemView),
    ) -> bool {
        let hit = match touch {
            Some(exp) => self.store.get_and_touch(key, now, exp, write).is_some(),
            None => self.store.get(key, now, write).is_some(),
        };
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

    /// A get over TCP: hits go into `out`, large values by reference. Once the reply passes `room`, the keys
    /// left are answered by the returned stream, as the client reads.
    #[allow(clippy::too_many_arguments)]
    fn get_tcp(
        &self,
        kind: GetKind,
        exptime: i32,
        keys: Words<'_>,
        now: u32,
        out: &mut Output,
        room: usize,
        lp: &Rc<CacheLoop>,
        mut log: Option<&mut Vec<u8>>,
    ) -> Option<ReplyStream> {
        let mut get = GetReply {
            touch: self.get_touch(kind, exptime, now),
            with_cas: kind.returns_cas(),
            now,
            log_id: lp.log_id.get(),
        };
        let start = out.total_len();
        let mut keys = keys;
        while out.total_len() - start < room {
            let Some(key) = keys.next() else {
                get.end(out, lp, log);
                return None;
            };
            get.key(self, key, out, lp, log.as_deref_mut());
        }
        if keys.is_empty() {
            get.end(out, lp, log);
            return None;
        }
        let rest = keys.remainder().to_vec();
        let (cache, lp) = (lp.cache.clone(), lp.clone());
        let mut done = 0;
        Some(ReplyStream::new(move |out| {
            get.now = cache.clock.now();
            // Other connections' commands ran since: log this one's keys under its own number.
            lp.log_id.set(get.log_id);
            let mut log = cache.vlog.commands().then(Vec::new);
            let mut words = Words::new(&rest[done..]);
            let start = out.total_len();
            let step = loop {
                if out.total_len() - start >= GET_STEP_BYTES {
                    break Step::More;
                }
                match words.next() {
                    Some(key) => get.key(&cache, key, out, &lp, log.as_mut()),
                    None => {
                        get.end(out, &lp, log.as_mut());
                        break Step::Done;
                    }
                }
            };
            done = rest.len() - words.remainder().len();
            if let Some(log) = log {
                cache.vlog.write(&log);
            }
            step
        }))
    }

    fn count_store_failure(&self, outcome: StoreOutcome) {
        match outcome {
            StoreOutcome::TooLarge => STORE_TOO_LARGE.incr(),
            StoreOutcome::OutOfMemory => STORE_NO_MEMORY.incr(),
            _ => {}
        }
    }

    fn write_store_outcome(&self, outcome: StoreOutcome, out: &mut Vec<u8>) {
        self.count_store_failure(outcome);
        match outcome {
            StoreOutcome::Stored { .. } => reply::write_status(out, Status::Stored),
            StoreOutcome::NotStored => reply::write_status(out, Status::NotStored),
            StoreOutcome::Exists => reply::write_status(out, Status::Exists),
            StoreOutcome::NotFound => reply::write_status(out, Status::NotFound),
            StoreOutcome::TooLarge => reply::write_error(out, ErrorReply::ObjectTooLarge),
            StoreOutcome::OutOfMemory => reply::write_error(out, ErrorReply::OutOfMemoryStoring),
        }
    }

    /// Seconds left before `exptime` (memcached's `t` flag), -1 for none. Like memcached's `itoa_u32`, a
    /// time already past wraps around as an unsigned 32-bit number.
    fn ttl(exptime: u32, now: u32) -> i64 {
        if exptime == 0 {
            -1
        } else {
            i64::from(exptime.wrapping_sub(now))
        }
    }

    /// The exptime memcached reports for `t`: it applies `T` (and `N`, to an item the command created) in
    /// request order, printing `t` as it goes, so `t` before `T` shows the exptime before the touch.
    fn exptime_at_t(
        flags: &MetaFlags<'_>,
        before: u32,
        created: bool,
        touch: Option<u32>,
        vivify: Option<u32>,
        after: u32,
    ) -> u32 {
        let mut exptime = if created { 0 } else { before };
        for &flag in flags.order() {
            match flag {
                b't' => return exptime,
                b'T' => exptime = touch.unwrap_or(exptime),
                b'N' if created => exptime = vivify.unwrap_or(exptime),
                _ => {}
            }
        }
        after
    }

    fn meta_get(
        &self,
        key: MetaKey<'_>,
        flags: &MetaFlags<'_>,
        now: u32,
        out: &mut Vec<u8>,
        lp: &CacheLoop,
    ) {
        let expiry = |t: Option<i32>| t.map(|t| self.clock.expiry(i64::from(t), now));
        let order = flags.order();
        let position = |flag: u8| order.iter().position(|&f| f == flag);
        let opts = MetaGetOptions {
            touch: expiry(flags.ttl),
            vivify: expiry(flags.vivify_ttl),
            recache: expiry(flags.recache_ttl),
            // memcached applies the flags in request order: `R` before `T` sees the TTL before the touch.
            recache_before_touch: matches!(
                (position(b'R'), position(b'T')),
                (Some(r), Some(t)) if r < t
            ),
            no_bump: flags.no_update,
        };
        let decoded = key.decoded();
        let mut answer = |view: &tern_cache_storage::MetaView| {
            let item = &view.item;
            let fields = MetaFields {
                // A hit echoes the key as the item was stored (base64 if it was stored binary), a miss as
                // the request sent it.
                key: Some((item.key, item.key_binary)),
                size: Some(item.value.len()),
                ttl: Some(Self::ttl(
                    Self::exptime_at_t(
                        flags,
                        view.exptime_before,
                        view.created,
                        opts.touch,
                        opts.vivify,
                        item.exptime,
                    ),
                    now,
                )),
                cas: Some(self.cas(item.cas)),
                client_flags: Some(item.flags),
                last_access: Some(u64::from(now.saturating_sub(item.last_access))),
                fetched: Some(item.fetched),
                token_sent: view.already_won,
                stale: view.stale,
                won: view.won,
            };
            if flags.value {
                reply::write_meta(out, MetaStatus::Value(item.value.len()), flags, &fields);
                out.extend_from_slice(item.value);
                out.extend_from_slice(b"\r\n");
            } else {
                reply::write_meta(out, MetaStatus::Done, flags, &fields);
            }
            view.created
        };
        // memcached applies `T` and `N` in request order, so an item `N` creates keeps `N`'s TTL when `N`
        // comes after `T`; the store always applies `T` last. Then: look up (and touch) without vivifying
        // first, and vivify without touching on a miss.
        let vivify_last = matches!(
            (position(b'T'), position(b'N')),
            (Some(t), Some(n)) if n > t
        );
        let hit = if vivify_last {
            let lookup = MetaGetOptions {
                vivify: None,
                ..opts
            };
            let vivify = MetaGetOptions {
                touch: None,
                ..opts
            };
            self.store
                .meta_get(&decoded, now, &lookup, &mut answer)
                .or_else(|| self.store.meta_get(&decoded, now, &vivify, &mut answer))
        } else {
            self.store.meta_get(&decoded, now, &opts, &mut answer)
        };
        if hit.is_some() {
            // The reply references the item until it is written out.
            lp.pin(&decoded);
        }
        // As memcached 1.6.18: an item found or made by `N` counts as a touch hit when `T` is given, else
        // as a get hit; a miss counts as a get miss even with `T` (memcached only sees `T` on an item).
        match (hit, opts.touch) {
            (Some(_), Some(_)) => {
                CMD_TOUCH.incr();
                TOUCH_HITS.incr();
            }
            (Some(_), None) => {
                CMD_GET.incr();
                GET_HITS.incr();
            }
            (None, _) => {
                CMD_GET.incr();
                GET_MISSES.incr();
            }
        }
        if hit.is_none() && !flags.quiet {
            let fields = MetaFields {
                key: Some((&decoded, key.base64)),
                ..MetaFields::default()
            };
            reply::write_meta(out, MetaStatus::Miss, flags, &fields);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn meta_set(
        &self,
        key: MetaKey<'_>,
        flags: &MetaFlags<'_>,
        data: &[u8],
        now: u32,
        out: &mut Vec<u8>,
        log: Option<&mut Vec<u8>>,
        lp: &CacheLoop,
    ) {
        CMD_SET.incr();
        let decoded = key.decoded();
        let mode = match flags.set_mode() {
            MetaSetMode::Set => StoreMode::Set,
            MetaSetMode::Add => StoreMode::Add,
            MetaSetMode::Append => StoreMode::Append,
            MetaSetMode::Prepend => StoreMode::Prepend,
            MetaSetMode::Replace => StoreMode::Replace,
        };
        let req = StoreRequest {
            mode,
            key: &decoded,
            value: data,
            flags: flags.client_flags.unwrap_or(0),
            exptime: flags
                .ttl
                .map_or(0, |t| self.clock.expiry(i64::from(t), now)),
            cas: flags.compare_cas,
            invalidate: flags.invalidate,
            key_binary: key.base64,
        };
        let outcome = self.store.store(&req, now);
        if let StoreOutcome::Stored { .. } = outcome {
            lp.unpin(&decoded);
        }
        if let (StoreOutcome::Exists, Some(log), Some(cas)) = (outcome, log, flags.compare_cas) {
            self.log_cas_failure(log, &decoded, cas, now);
        }
        self.count_store_failure(outcome);
        // memcached echoes `c` on every `ms` reply: the new CAS, or 0 when nothing was stored.
        let mut fields = MetaFields {
            key: Some((&decoded, key.base64)),
            cas: Some(0),
            ..MetaFields::default()
        };
        let status = match outcome {
            StoreOutcome::Stored { cas } => {
                if flags.quiet {
                    return;
                }
                fields.cas = Some(self.cas(cas));
                MetaStatus::Done
            }
            StoreOutcome::NotStored => MetaStatus::NotStored,
            StoreOutcome::Exists => MetaStatus::Exists,
            StoreOutcome::NotFound => MetaStatus::NotFound,
            StoreOutcome::TooLarge => return reply::write_error(out, ErrorReply::ObjectTooLarge),
            StoreOutcome::OutOfMemory => {
                return reply::write_error(out, ErrorReply::OutOfMemoryStoring)
            }
        };
        reply::write_meta(out, status, flags, &fields);
    }

    fn meta_delete(
        &self,
        key: MetaKey<'_>,
        flags: &MetaFlags<'_>,
        now: u32,
        out: &mut Vec<u8>,
        lp: &CacheLoop,
    ) {
        let decoded = key.decoded();
        let outcome = if flags.invalidate {
            let exptime = flags.ttl.map(|t| self.clock.expiry(i64::from(t), now));
            self.store
                .mark_stale(&decoded, now, flags.compare_cas, exptime)
        } else {
            self.store.delete(&decoded, now, flags.compare_cas)
        };
        let status = match outcome {
            DeleteOutcome::Deleted => {
                if !flags.invalidate {
                    // (`md I` marks the same item stale: earlier replies still hold it.)
                    lp.unpin(&decoded);
                }
                DELETE_HITS.incr();
                if flags.quiet {
                    return;
                }
                MetaStatus::Done
            }
            DeleteOutcome::NotFound => {
                DELETE_MISSES.incr();
                MetaStatus::NotFound
            }
            DeleteOutcome::Exists => MetaStatus::Exists,
        };
        let fields = MetaFields {
            key: Some((&decoded, key.base64)),
            ..MetaFields::default()
        };
        reply::write_meta(out, status, flags, &fields);
    }

    fn meta_arithmetic(
        &self,
        key: MetaKey<'_>,
        flags: &MetaFlags<'_>,
        now: u32,
        out: &mut Vec<u8>,
        lp: &CacheLoop,
    ) {
        let decoded = key.decoded();
        let incr = flags.incr();
        let opts = ArithOptions {
            cas: flags.compare_cas,
            vivify: flags.vivify_ttl.map(|t| {
                (
                    flags.initial.unwrap_or(0),
                    self.clock.expiry(i64::from(t), now),
                )
            }),
            exptime: flags.ttl.map(|t| self.clock.expiry(i64::from(t), now)),
            replace: lp.is_pinned(&decoded),
        };
        let delta = flags.delta.unwrap_or(1);
        // `q` hides the reply of an update but not of a creation (`N`), and `t` depends on it too; the store
        // does not say which happened, so a vivifying `ma` first tries without vivifying. (Another client
        // creating the item between the two calls makes this one count as the creator: its reply is then
        // shown.) A created item gets the TTL of the last of `N` and `T`, as memcached applies them in order.
        let (outcome, created) = match opts.vivify {
            Some((initial, vivify_exptime)) => {
                let update = ArithOptions {
                    vivify: None,
                    ..opts
                };
                match self.store.incr_decr(&decoded, now, incr, delta, &update) {
                    ArithOutcome::NotFound => {
                        let exptime = flags.order().iter().fold(0, |exptime, &flag| match flag {
                            b'N' => vivify_exptime,
                            b'T' => opts.exptime.unwrap_or(exptime),
                            _ => exptime,
                        });
                        let create = ArithOptions {
                            vivify: Some((initial, exptime)),
                            exptime: None,
                            ..opts
                        };
                        let outcome = self.store.incr_decr(&decoded, now, incr, delta, &create);
                        (outcome, true)
                    }
                    outcome => (outcome, false),
                }
            }
            None => (
                self.store.incr_decr(&decoded, now, incr, delta, &opts),
                false,
            ),
        };
        if opts.replace {
            lp.unpin(&decoded);
        }
        count_arith(incr, &outcome);
        let mut fields = MetaFields {
            key: Some((&decoded, key.base64)),
            ..MetaFields::default()
        };
        match outcome {
            ArithOutcome::Value {
                value,
                cas,
                exptime,
                exptime_before,
            } => {
                fields.cas = Some(self.cas(cas));
                // `t` before `T` shows the TTL before the touch.
                let reported = Self::exptime_at_t(
                    flags,
                    exptime_before,
                    created,
                    opts.exptime,
                    opts.vivify.map(|(_, exptime)| exptime),
                    exptime,
                );
                fields.ttl = Some(Self::ttl(reported, now));
                if flags.quiet && !created {
                    return;
                }
                if flags.value {
                    let mut digits = itoa_buf(value);
                    reply::write_meta(out, MetaStatus::Value(digits.len()), flags, &fields);
                    digits.extend_from_slice(b"\r\n");
                    out.extend_from_slice(&digits);
                } else {
                    reply::write_meta(out, MetaStatus::Done, flags, &fields);
                }
            }
            ArithOutcome::NotFound => reply::write_meta(out, MetaStatus::NotFound, flags, &fields),
            ArithOutcome::Exists => reply::write_meta(out, MetaStatus::Exists, flags, &fields),
            ArithOutcome::NonNumeric => reply::write_error(out, ErrorReply::NonNumeric),
            ArithOutcome::OutOfMemory => reply::write_error(out, ErrorReply::OutOfMemoryStoring),
        }
    }

    fn meta_debug(&self, key: MetaKey<'_>, now: u32, out: &mut Vec<u8>) {
        // memcached 1.6.18 counts `cmd_meta` for `me` only (its `meta_cmds`, in process_meta_command).
        CMD_META.incr();
        let decoded = key.decoded();
        // Like memcached's `me`: no access recorded, and a stale item's token is not handed out.
        let found = self.store.peek(&decoded, now, |item| {
            let size = crate::footprint::item_size(
                item.key.len(),
                item.value.len(),
                item.flags,
                self.settings.cas_enabled,
            );
            let info = MetaDebugInfo {
                // memcached echoes a key in base64 when the item was stored with a binary key.
                key: (item.key, item.key_binary),
                exp: if item.exptime == 0 {
                    -1
                } else {
                    i64::from(now) - i64::from(item.exptime)
                },
                last_access: u64::from(now.saturating_sub(item.last_access)),
                cas: self.cas(item.cas),
                fetched: item.fetched,
                class: crate::footprint::slab_class(size),
                size: size as u64,
            };
            reply::write_meta_debug(out, &info);
        });
        if found.is_none() {
            // memcached 1.6.18 answers a missing key with `EN`, like an `mg` miss without flags.
            reply::write_meta(
                out,
                MetaStatus::Miss,
                &MetaFlags::default(),
                &MetaFields::default(),
            );
        }
    }

    /// The metadump lines of one shard's items.
    fn metadump_shard(&self, classes: &MetadumpClasses, shard: usize, now: u32, out: &mut Vec<u8>) {
        self.store.dump_shard(shard, now, |e| {
            if classes.all || classes.wanted.contains(&e.class_id) {
                reply::write_metadump_entry(
                    out,
                    &MetadumpEntry {
                        key: e.key,
                        expires_at: (e.exptime != 0).then(|| self.clock.unix(e.exptime)),
                        last_access: self.clock.unix(e.last_access),
                        cas: self.cas(e.cas),
                        fetched: e.fetched,
                        class: u32::from(e.class_id),
                        size: e.size as u64,
                    },
                );
            }
        });
    }

    /// `lru_crawler metadump` over TCP: a shard per step, as the client reads (a dump of a large cache is as
    /// large as its keys).
    fn metadump_stream(self: &Arc<Self>, classes: &[u8]) -> ReplyStream {
        let classes = MetadumpClasses::parse(classes);
        let cache = self.clone();
        let mut shard = 0;
        ReplyStream::new(move |out| {
            if shard == cache.store.shard_count() {
                reply::write_status(out, Status::End);
                return Step::Done;
            }
            cache.metadump_shard(&classes, shard, cache.clock.now(), out);
            shard += 1;
            Step::More
        })
    }

    fn lru_crawler(&self, cmd: LruCrawler<'_>, now: u32, out: &mut Vec<u8>) {
        match cmd {
            LruCrawler::Metadump { classes } => {
                if !self.settings.dump_enabled {
                    out.extend_from_slice(b"ERROR metadump not allowed\r\n");
                    return;
                }
                let classes = MetadumpClasses::parse(classes);
                for shard in 0..self.store.shard_count() {
                    self.metadump_shard(&classes, shard, now, out);
                }
                reply::write_status(out, Status::End);
            }
            // The store expires items in the background on its own; these tune memcached's crawler thread.
            LruCrawler::Crawl { .. }
            | LruCrawler::Tocrawl(_)
            | LruCrawler::Sleep(_)
            | LruCrawler::Enable
            | LruCrawler::Disable => reply::write_status(out, Status::Ok),
        }
    }

    fn admin(&self, command: &[u8], args: Words<'_>, out: &mut Vec<u8>) {
        let args: Vec<&[u8]> = args.collect();
        if let Some(reply) = crate::admin::answer(command, &args) {
            out.extend_from_slice(reply);
        }
    }

    /// `asking`: the connection the command came on.
    fn stats(
        &self,
        mut args: Words<'_>,
        now: u32,
        out: &mut Vec<u8>,
        control: Option<&ServerControl>,
        asking: u64,
    ) {
        let group = args.next();
        match group {
            None => self.stats_general(now, out, control),
            Some(b"settings") => self.stats_settings(out),
            Some(b"items") => self.stats_items(now, out),
            Some(b"slabs") => self.stats_slabs(out),
            Some(b"conns") => {
                self.conns.write(asking, now, out);
                reply::write_status(out, Status::End);
            }
            Some(b"sizes") => {
                reply::write_stat(out, b"sizes_status", b"disabled");
                reply::write_status(out, Status::End);
            }
            Some(b"reset") => {
                tern_metrics::reset();
                self.detail.clear();
                reply::write_status(out, Status::Reset);
            }
            Some(b"detail") => match args.next() {
                Some(b"on") => {
                    self.detail.set_enabled(true);
                    reply::write_status(out, Status::Ok)
                }
                Some(b"off") => {
                    self.detail.set_enabled(false);
                    reply::write_status(out, Status::Ok)
                }
                Some(b"dump") => self.detail.dump(out),
                _ => reply::write_error(out, ErrorReply::StatsDetailUsage),
            },
            Some(b"cachedump") => {
                if !self.settings.dump_enabled {
                    out.extend_from_slice(b"CLIENT_ERROR stats cachedump not allowed\r\n");
                    return;
                }
                let number = |w: Option<&[u8]>| {
                    w.and_then(|w| std::str::from_utf8(w).ok()?.parse::<u32>().ok())
                };
                let (Some(class), limit) = (number(args.next()), number(args.next()).unwrap_or(0))
                else {
                    reply::write_error(out, ErrorReply::Error);
                    return;
                };
                let mut n = 0;
                let start = out.len();
                let mut full = false;
                self.store.dump(now, |e| {
                    if full || u32::from(e.class_id) != class || (limit != 0 && n >= limit) {
                        return;
                    }
                    let exp = if e.exptime == 0 {
                        self.clock.process_started()
                    } else {
                        self.clock.unix(e.exptime)
                    };
                    let mut line = b"ITEM ".to_vec();
                    line.extend_from_slice(e.key);
                    line.extend_from_slice(format!(" [{} b; {} s]\r\n", e.size, exp).as_bytes());
                    // memcached caps the reply at 2 MiB, `END` included.
                    if out.len() - start + line.len() + 6 > CACHEDUMP_MAX_BYTES {
                        full = true;
                        return;
                    }
                    n += 1;
                    out.extend_from_slice(&line);
                });
                reply::write_status(out, Status::End);
            }
            Some(_) => reply::write_error(out, ErrorReply::Error),
        }
    }

    fn stats_general(&self, now: u32, out: &mut Vec<u8>, control: Option<&ServerControl>) {
        let snapshot = tern_metrics::snapshot();
        let store = self.store.stats();
        let (user, system) = rusage();
        let mut s = String::with_capacity(2048);
        let mut stat = |name: &str, value: &dyn std::fmt::Display| {
            let _ = write!(s, "STAT {name} {value}\r\n");
        };
        stat("pid", &std::process::id());
        stat("uptime", &Clock::uptime(now));
        stat("time", &self.clock.unix(now));
        stat("version", &MEMCACHED_VERSION);
        stat("tern_version", &env!("CARGO_PKG_VERSION"));
        stat("pointer_size", &(usize::BITS));
        stat("rusage_user", &format_args!("{user:.6}"));
        stat("rusage_system", &format_args!("{system:.6}"));
        stat("max_connections", &self.settings.max_connections);
        stat("curr_connections", &control.map_or(0, |c| c.connections()));
        stat(
            "total_connections",
            &snapshot
                .counter("tern_connections_accepted_total")
                .unwrap_or(0),
        );
        stat(
            "rejected_connections",
            &snapshot
                .counter("tern_connections_refused_total")
                .unwrap_or(0),
        );
        stat(
            "connection_structures",
            &control.map_or(0, |c| c.connections()),
        );
        for (name, value) in stats::totals(&snapshot) {
            stat(name, &value);
        }
        if self.settings.idle_timeout.is_some() {
            stat(
                "idle_kicks",
                &snapshot
                    .counter("tern_connections_idle_closed_total")
                    .unwrap_or(0),
            );
        }
        stat(
            "bytes_read",
            &snapshot.counter("tern_bytes_read_total").unwrap_or(0),
        );
        stat(
            "bytes_written",
            &snapshot.counter("tern_bytes_written_total").unwrap_or(0),
        );
        stat("limit_maxbytes", &store.limit_maxbytes);
        stat(
            "accepting_conns",
            &u8::from(!control.is_some_and(|c| c.is_shutting_down())),
        );
        // Past `-c` tern refuses each new connection (memcached's default `maxconns_fast`); it stops
        // accepting only for the runtime's pauses on EMFILE/ENFILE, which these count.
        stat(
            "listen_disabled_num",
            &snapshot.counter("tern_accept_pauses_total").unwrap_or(0),
        );
        stat(
            "time_in_listen_disabled_us",
            &snapshot
                .counter("tern_accept_paused_microseconds_total")
                .unwrap_or(0),
        );
        stat("threads", &self.settings.threads);
        stat(
            "conn_yields",
            &snapshot.counter(stats::CONN_YIELDS.name()).unwrap_or(0),
        );
        stat("hash_bytes", &store.hash_bytes);
        stat("malloc_fails", &store.malloc_fails);
        stat("bytes", &store.bytes);
        stat("curr_items", &store.curr_items);
        stat("total_items", &store.total_items);
        stat("expired_unfetched", &store.expired_unfetched);
        stat("evicted_unfetched", &store.evicted_unfetched);
        stat("evicted_active", &store.evicted_active);
        stat("evictions", &store.evictions);
        stat("reclaimed", &store.reclaimed);
        stat("crawler_reclaimed", &store.crawler_reclaimed);
        out.extend_from_slice(s.as_bytes());
        reply::write_status(out, Status::End);
    }

    fn stats_settings(&self, out: &mut Vec<u8>) {
        let st = &self.settings;
        let store = self.store.stats();
        let yes_no = |b: bool| if b { "yes" } else { "no" };
        let mut s = String::with_capacity(1024);
        let mut stat = |name: &str, value: &dyn std::fmt::Display| {
            let _ = write!(s, "STAT {name} {value}\r\n");
        };
        stat("maxbytes", &store.limit_maxbytes);
        stat("maxconns", &st.max_connections);
        stat("tcpport", &st.port);
        stat("udpport", &st.udp_port);
        stat("inter", &st.interfaces);
        stat("verbosity", &self.vlog.level());
        stat("evictions", &if st.evictions { "on" } else { "off" });
        stat("domain_socket", &"NULL");
        stat("shutdown_command", &yes_no(st.shutdown_enabled));
        stat("num_threads", &st.threads);
        stat("num_threads_per_udp", &st.threads);
        stat(
            "stat_key_prefix",
            &String::from_utf8_lossy(&[self.detail.delimiter()]),
        );
        stat("detail_enabled", &yes_no(self.detail.enabled()));
        stat("reqs_per_event", &st.reqs_per_event);
        stat("cas_enabled", &yes_no(st.cas_enabled));
        stat("tcp_backlog", &st.backlog);
        stat("binding_protocol", &"ascii");
        stat("auth_enabled_sasl", &"no");
        stat("auth_enabled_ascii", &"no");
        stat("item_size_max", &st.item_size_max);
        stat("maxconns_fast", &yes_no(st.maxconns_fast));
        stat("hashpower_init", &st.hashpower_init);
        stat("slab_reassign", &"no");
        stat("lru_crawler", &yes_no(st.lru_crawler));
        stat("lru_crawler_sleep", &st.lru_crawler_sleep);
        stat("lru_crawler_tocrawl", &st.lru_crawler_tocrawl);
        stat("flush_enabled", &yes_no(st.flush_enabled));
        stat("dump_enabled", &yes_no(st.dump_enabled));
        stat("idle_timeout", &st.idle_timeout.map_or(0, |d| d.as_secs()));
        stat("segment_size", &store.segment_size);
        out.extend_from_slice(s.as_bytes());
        reply::write_status(out, Status::End);
    }

    fn stats_items(&self, now: u32, out: &mut Vec<u8>) {
        let st = self.store.stats();
        let mut s = String::with_capacity(1024);
        for c in st.classes.iter().filter(|c| c.items > 0 || c.segments > 0) {
            let id = c.class_id;
            let mut stat = |name: &str, value: u64| {
                let _ = write!(s, "STAT items:{id}:{name} {value}\r\n");
            };
            stat("number", c.items);
            stat("age", u64::from(now.saturating_sub(clock::START)));
            stat("mem_requested", c.bytes);
            stat("evicted", c.evicted);
            stat("evicted_nonzero", c.evicted_nonzero);
            stat("evicted_time", u64::from(c.evicted_time));
            stat("outofmemory", c.outofmemory);
            stat("reclaimed", c.reclaimed);
            stat("expired_unfetched", c.expired_unfetched);
            stat("evicted_unfetched", c.evicted_unfetched);
            stat("evicted_active", c.evicted_active);
            stat("crawler_reclaimed", c.crawler_reclaimed);
        }
        out.extend_from_slice(s.as_bytes());
        reply::write_status(out, Status::End);
    }

    /// Classes are the store's queues and a "page" is a segment (the crate doc of tern-cache-storage
    /// describes the mapping). The store does not say which queue a command's item was in, so the first
    /// class listed carries the command counts and the others 0: the sums over the classes are `stats`'s
    /// totals, as in memcached (the Prometheus memcached_exporter needs `cmd_set`, `cas_hits` and
    /// `cas_badval` in every class).
    fn stats_slabs(&self, out: &mut Vec<u8>) {
        let st = self.store.stats();
        let snapshot = tern_metrics::snapshot();
        let mut s = String::with_capacity(1024);
        let mut active = 0;
        for c in st.classes.iter().filter(|c| c.segments > 0) {
            active += 1;
            let id = c.class_id;
            let mut stat = |name: &str, value: u64| {
                let _ = write!(s, "STAT {id}:{name} {value}\r\n");
            };
            stat("chunk_size", st.segment_size);
            stat("chunks_per_page", 1);
            stat("total_pages", c.segments);
            stat("total_chunks", c.segments);
            stat("used_chunks", c.segments);
            stat("free_chunks", 0);
            stat("free_chunks_end", 0);
            for (name, counter) in stats::PER_CLASS {
                let count = if active == 1 {
                    snapshot.counter(counter.name()).unwrap_or(0)
                } else {
                    0
                };
                stat(name, count);
            }
        }
        let _ = write!(
            s,
            "STAT active_slabs {active}\r\nSTAT total_malloced {}\r\n",
            st.total_malloced
        );
        out.extend_from_slice(s.as_bytes());
        reply::write_status(out, Status::End);
    }
}

/// The command line at the start of `input` as memcached's `-vv` log prints it: without its `\r\n` (or
/// `\n`), and ending at a NUL byte (memcached prints it as a C string).
fn command_line(input: &[u8]) -> &[u8] {
    let mut line = match memchr::memchr(b'\n', input) {
        Some(end) => &input[..end],
        None => input,
    };
    if line.len() > 1 && line.ends_with(b"\r") {
        line = &line[..line.len() - 1];
    }
    match memchr::memchr(0, line) {
        Some(nul) => &line[..nul],
        None => line,
    }
}

fn count_arith(incr: bool, outcome: &ArithOutcome) {
    let hit = matches!(outcome, ArithOutcome::Value { .. });
    match (incr, hit) {
        (true, true) => INCR_HITS.incr(),
        (true, false) => INCR_MISSES.incr(),
        (false, true) => DECR_HITS.incr(),
        (false, false) => DECR_MISSES.incr(),
    }
}

fn itoa_buf(n: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(24);
    reply::write_number(&mut v, n);
    v.truncate(v.len() - 2); // write_number ends the line
    v
}

/// CPU seconds (user, system) of this process.
fn rusage() -> (f64, f64) {
    // SAFETY: getrusage fills the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(ru.ru_utime), secs(ru.ru_stime))
}

impl Service for Cache {
    type Request<'a> = Frame<'a>;
    type Loop = CacheLoop;

    fn init_loop(self: &Arc<Self>, _info: &LoopInfo) -> CacheLoop {
        CacheLoop {
            flushed_at: Cell::new(0),
            in_batch: Cell::new(0),
            log_id: Cell::new(0),
            prefixes: self.detail.register(),
            pinned: RefCell::new(Vec::new()),
            cache: self.clone(),
        }
    }

    fn decode<'a>(&self, input: &'a [u8]) -> Decode<Frame<'a>> {
        match tern_memcache_proto::decode(input, &self.limits) {
            Decoded::Incomplete { needed } => Decode::Incomplete { needed },
            Decoded::Frame { request, consumed } => Decode::Frame {
                request: Frame::Command(
                    request,
                    if self.vlog.commands() {
                        command_line(input)
                    } else {
                        &[]
                    },
                ),
                consumed,
            },
            Decoded::Close { reply: None } => Decode::Frame {
                request: Frame::Abort,
                consumed: input.len(),
            },
            Decoded::Close { reply } => Decode::Close { reply },
        }
    }

    fn handle(&self, cx: &mut Cx<'_, Self>, frame: Frame<'_>, out: &mut Output) -> Outcome {
        let state = cx.loop_state;
        state.log_id.set(cx.conn as usize);
        if cx.first_in_batch || state.flushed_at.get() > out.len() {
            state.flushed(out.len());
            state.in_batch.set(0);
        }
        let (request, line) = match frame {
            Frame::Command(request, line) => (request, line),
            Frame::Abort => {
                out.truncate(state.flushed_at.get());
                return Outcome::Close;
            }
        };
        if matches!(request, Request::GetKeyTooLong { .. }) {
            // memcached drops the replies it had not written yet (see the request's doc), and the items
            // they held.
            out.truncate(state.flushed_at.get());
            state.flushed(out.len());
        }
        let flushes = request.flushes_replies();
        let now = self.clock.at(cx.received);
        self.conns.command(cx.conn, now);
        let mark = out.len();
        // memcached prints the command when it reads it, and each `out_string` reply as it is made.
        let mut log = self.vlog.commands().then(|| {
            let mut log = Vec::new();
            vlog::line(&mut log, b'<', state.log_id.get(), line);
            log
        });
        let mut stream = None;
        let answer = match request {
            Request::Get {
                kind,
                exptime,
                keys,
            } => {
                let rest = self.get_tcp(
                    kind,
                    exptime,
                    keys,
                    now,
                    out,
                    cx.output_room,
                    state,
                    log.as_mut(),
                );
                if let Some(log) = log {
                    self.vlog.write(&log);
                }
                stream = rest;
                Answer::shown()
            }
            Request::LruCrawler(LruCrawler::Metadump { classes }) if self.settings.dump_enabled => {
                if let Some(log) = log {
                    self.vlog.write(&log);
                }
                stream = Some(state.cache.metadump_stream(classes));
                Answer::shown()
            }
            request => {
                let shown = LogReplies::of(&request);
                let answer = self.execute(request, now, out, Some(cx.server), state, log.as_mut());
                if let Some(mut log) = log {
                    if shown.select(&out[mark..]) {
                        vlog::replies(&mut log, state.log_id.get(), &out[mark..], answer.hidden);
                    }
                    self.vlog.write(&log);
                }
                answer
            }
        };
        if answer.hidden {
            out.truncate(mark);
        }
        if let Flow::Hangup = answer.flow {
            out.truncate(state.flushed_at.get());
            return Outcome::Close;
        }
        let handled = state.in_batch.get() + 1;
        state.in_batch.set(handled);
        // memcached's budget of `-R` requests per event: the event that reads runs R + 1 of them, each later
        // one R (it starts by spending one); then it writes the replies out and yields.
        let per_event = self.settings.reqs_per_event;
        let yields = handled > per_event && (handled - 1) % per_event == 0;
        if yields {
            stats::CONN_YIELDS.incr();
        }
        if flushes || yields {
            state.flushed(out.len());
        }
        match (answer.flow, stream) {
            (Flow::Continue, Some(rest)) => Outcome::Stream(rest),
            (Flow::Continue, None) => Outcome::Reply,
            (Flow::Close | Flow::Hangup, _) => Outcome::Close,
        }
    }

    fn reject(&self, _request: &Frame<'_>, why: Rejection, out: &mut Vec<u8>) {
        out.extend_from_slice(b"SERVER_ERROR ");
        out.extend_from_slice(why.as_str().as_bytes());
        out.extend_from_slice(b"\r\n");
    }

    fn refuse_connection(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"ERROR Too many open connections\r\n");
    }

    fn connection_opened(&self, _state: &Rc<CacheLoop>, conn: u64) {
        self.conns.opened(conn, self.clock.now());
        self.log_connection(conn, b"new ascii client connection.");
    }

    fn connection_closed(&self, _state: &Rc<CacheLoop>, conn: u64) {
        self.conns.closed(conn);
        self.log_connection(conn, b"connection closed.");
    }

    /// UDP gets (memcached's frame header; one request per datagram; the reply split into datagrams of at most
    /// 1400 bytes with their own headers), sent from the loop's own socket.
    fn datagram(
        &self,
        state: &Rc<CacheLoop>,
        socket: u64,
        datagram: &[u8],
        _peer: SocketAddr,
        replies: &mut Datagrams,
    ) {
        let Some((request_id, payload)) = udp::parse_request(datagram) else {
            return;
        };
        let mut out = Vec::new();
        let mut units = Vec::new();
        let now = self.clock.now();
        let mut rest = payload;
        let mut log = self.vlog.commands().then(Vec::new);
        state.log_id.set(socket as usize);
        // The replies of the datagram's commands go out together, after the last one.
        state.flushed(0);
        // How much of `out` memcached would already have sent (after a get or `mn`).
        let mut flushed = 0;
        while !rest.is_empty() {
            let line = command_line(rest);
            match tern_memcache_proto::decode(rest, &self.limits) {
                Decoded::Frame { request, consumed } => {
                    rest = &rest[consumed.min(rest.len())..];
                    let flushes = request.flushes_replies();
                    if let Some(log) = log.as_mut() {
                        vlog::line(log, b'<', state.log_id.get(), line);
                    }
                    let mark = out.len();
                    let flow = match request {
                        Request::Get {
                            kind,
                            exptime,
                            keys,
                        } => {
                            self.get(
                                kind,
                                exptime,
                                keys,
                                now,
                                &mut out,
                                Some(&mut units),
                                state,
                                log.as_mut(),
                            );
                            Flow::Continue
                        }
                        other => {
                            let shown = LogReplies::of(&other);
                            let answer =
                                self.execute(other, now, &mut out, None, state, log.as_mut());
                            if let Some(log) = log.as_mut() {
                                if shown.select(&out[mark..]) {
                                    vlog::replies(
                                        log,
                                        state.log_id.get(),
                                        &out[mark..],
                                        answer.hidden,
                                    );
                                }
                            }
                            if answer.hidden {
                                out.truncate(mark);
                            }
                            if units.last().is_none_or(|&end| end < out.len()) {
                                units.push(out.len());
                            }
                            answer.flow
                        }
                    };
                    match flow {
                        Flow::Continue => {}
                        Flow::Close => break,
                        Flow::Hangup => {
                            out.truncate(flushed);
                            units.retain(|&end| end <= flushed);
                            break;
                        }
                    }
                    if flushes {
                        flushed = out.len();
                    }
                }
                // A request must fit its datagram: memcached answers an incomplete one with nothing.
                Decoded::Incomplete { .. } | Decoded::Close { .. } => break,
            }
        }
        if let Some(log) = log {
            self.vlog.write(&log);
        }
        state.flushed(0);
        let mut start = 0;
        for end in units {
            for (header, payload) in udp::reply_datagrams(request_id, &out[start..end]) {
                let d = replies.begin();
                d.extend_from_slice(&header);
                d.extend_from_slice(payload);
                replies.end();
            }
            start = end;
        }
    }
}
