//! The text protocol's door: memcached's classic commands (`get` and its kin, the storage commands,
//! `delete`, `incr`/`decr`, `touch`, `flush_all`) answered with its text replies, gets streamed to a slow
//! reader over TCP, and which replies memcached's `-vv` log shows.

use std::rc::Rc;

use bytes::Bytes;
use tern_cache_storage::{
    ArithOptions, ArithOutcome, DeleteOutcome, StoreMode, StoreOutcome, StoreRequest,
};
use tern_memcache_proto::reply::{self, ErrorReply, Status};
use tern_memcache_proto::request::{GetKind, LruCrawler, MetaKey, StoreKind};
use tern_memcache_proto::{Request, Words};
use tern_runtime::{Output, ReplyStream, Step};

use crate::cache::{Answer, Cache, CacheLoop, SHARE_MIN};
use crate::detail::Op;
use crate::stats::STORE_TOO_LARGE;
use crate::vlog;

/// Reply bytes one step of a streamed get writes before it lets the runtime check the connection's limits.
const GET_STEP_BYTES: usize = 64 << 10;

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

/// Which replies of a command memcached's `-vv` log shows (those it writes through `out_string`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogReplies {
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
    pub(crate) fn of(request: &Request<'_>) -> LogReplies {
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

    pub(crate) fn select(self, reply: &[u8]) -> bool {
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
    /// A classic command that is not a get, answered in `out` (see [`Cache::execute`]); a request of
    /// another door is handed back.
    // The request is handed back by value, once per command: boxing it would allocate per command.
    #[allow(clippy::result_large_err)]
    pub(crate) fn execute_text<'a>(
        &self,
        request: Request<'a>,
        now: u32,
        out: &mut Vec<u8>,
        lp: &CacheLoop,
        log: Option<&mut Vec<u8>>,
    ) -> Result<Answer, Request<'a>> {
        let mut log = log;
        let request = match self.execute_storage(request, now, out, lp, log.as_deref_mut()) {
            Ok(answer) => return Ok(answer),
            Err(other) => other,
        };
        let noreply = match request {
            Request::GetKeyTooLong {
                kind,
                exptime,
                keys,
            } => {
                self.get_key_too_long(kind, exptime, keys, now, out, lp, log);
                false
            }
            Request::Delete { key, noreply } => {
                let deleted = self.delete_item(lp, key, None, now) == DeleteOutcome::Deleted;
                reply::write_status(
                    out,
                    if deleted {
                        Status::Deleted
                    } else {
                        Status::NotFound
                    },
                );
                noreply
            }
            Request::Arithmetic {
                incr,
                key,
                delta,
                noreply,
            } => {
                let outcome =
                    self.incr_decr_item(lp, incr, key, delta, ArithOptions::default(), now);
                write_arith_outcome(outcome, out);
                noreply
            }
            Request::Touch {
                key,
                exptime,
                noreply,
            } => {
                let hit = self.touch_item(lp, key, exptime, now);
                reply::write_status(
                    out,
                    if hit {
                        Status::Touched
                    } else {
                        Status::NotFound
                    },
                );
                noreply
            }
            Request::FlushAll { delay, noreply } => {
                if !self.settings.flush_enabled {
                    // memcached answers even with noreply here.
                    out.extend_from_slice(b"CLIENT_ERROR flush_all not allowed\r\n");
                    return Ok(Answer::shown());
                }
                self.flush_all(delay, now);
                reply::write_status(out, Status::Ok);
                noreply
            }
            other => return Err(other),
        };
        Ok(Answer {
            hidden: noreply,
            ..Answer::shown()
        })
    }

    /// The storage commands (`set`, `add`, `replace`, `append`, `prepend`, `cas`, and those refused for
    /// their size or their data block); a request of another kind is handed back.
    #[allow(clippy::result_large_err)] // as `execute_text`
    fn execute_storage<'a>(
        &self,
        request: Request<'a>,
        now: u32,
        out: &mut Vec<u8>,
        lp: &CacheLoop,
        log: Option<&mut Vec<u8>>,
    ) -> Result<Answer, Request<'a>> {
        let noreply = match request {
            Request::Store {
                kind,
                key,
                flags,
                exptime,
                data,
                cas,
                noreply,
            } => {
                let req = StoreRequest {
                    mode: store_mode(kind),
                    key,
                    value: data,
                    flags,
                    exptime: self.clock.expiry(i64::from(exptime), now),
                    cas: (kind == StoreKind::Cas).then_some(cas),
                    invalidate: false,
                    key_binary: false,
                };
                let outcome = self.store_item(lp, kind, &req, now, log);
                self.count_store_failure(outcome);
                write_store_outcome(outcome, out);
                noreply
            }
            Request::TooLarge {
                key,
                unlink_existing,
                noreply,
                meta,
            } => {
                STORE_TOO_LARGE.incr();
                self.refuse_too_large(key, unlink_existing, meta, now, lp);
                reply::write_error(out, ErrorReply::ObjectTooLarge);
                noreply
            }
            Request::BadDataChunk { key, noreply } => {
                self.count_prefix(lp, key, Op::Set);
                reply::write_error(out, ErrorReply::BadDataChunk);
                noreply
            }
            other => return Err(other),
        };
        Ok(Answer {
            hidden: noreply,
            ..Answer::shown()
        })
    }

    /// A storage command whose item can never fit: counted by `stats detail`, and for `set` and every `ms`
    /// the existing item is unlinked as memcached does, so that stale data does not persist. (`store_too_large`
    /// is the caller's: memcached counts it for text and meta commands, never for binary ones.)
    pub(crate) fn refuse_too_large(
        &self,
        key: MetaKey<'_>,
        unlink_existing: bool,
        meta: bool,
        now: u32,
        lp: &CacheLoop,
    ) {
        if !meta {
            self.count_prefix(lp, key.raw, Op::Set);
        }
        if unlink_existing {
            let key = key.decoded();
            self.store.delete(&key, now, None);
            lp.unpin(&key);
        }
    }

    /// A get with a key over the limit: memcached serves the keys before the long one (fetching, touching,
    /// counting them), then drops what it had not written and answers the error: the values are never
    /// written here.
    #[allow(clippy::too_many_arguments)]
    fn get_key_too_long(
        &self,
        kind: GetKind,
        exptime: i32,
        keys: Words<'_>,
        now: u32,
        out: &mut Vec<u8>,
        lp: &CacheLoop,
        mut log: Option<&mut Vec<u8>>,
    ) {
        let touch = self.get_touch(kind, exptime, now);
        for key in keys {
            self.get_key(touch, key, now, lp, log.as_deref_mut(), |_| {});
        }
        if let Some(log) = log {
            vlog::line(log, b'>', lp.log_id.get(), b"END");
        }
        reply::write_error(out, ErrorReply::BadCommandLineFormat);
    }

    /// get/gets/gat/gats into a buffer (over UDP, or through [`Cache::execute`]). `units`, for UDP, receives
    /// where each reply unit ends (one per hit, `END` joined to the last; memcached numbers datagrams per
    /// unit). Past [`Cache::udp_reply_max`] bytes, hits are still looked up and counted but no longer written,
    /// and the answer is memcached's error for a get whose reply it cannot hold.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn get(
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
        let touch = self.get_touch(kind, exptime, now);
        let with_cas = kind.returns_cas();
        let mut over = false;
        let mut last_hit = false;
        let mut ahead = self.store.lookahead(keys.clone());
        for key in keys {
            ahead.advance();
            let hit = self.get_key(touch, key, now, lp, log.as_deref_mut(), |item| {
                over |= out.len() + item.value.len() > self.udp_reply_max;
                if !over {
                    let cas = with_cas.then(|| self.cas(item.cas));
                    reply::write_value(out, item.key, item.flags, item.value, cas);
                }
            });
            if let (true, Some(units)) = (hit, units.as_deref_mut()) {
                units.push(out.len());
            }
            last_hit = hit;
        }
        if over {
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

    /// A get over TCP: hits go into `out`, large values by reference. Once the reply passes `room`, the keys
    /// left are answered by the returned stream, as the client reads.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn get_tcp(
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
        let mut ahead = self.store.lookahead(keys.clone());
        while out.total_len() - start < room {
            let Some(key) = keys.next() else {
                get.end(out, lp, log);
                return None;
            };
            ahead.advance();
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
            let mut ahead = cache.store.lookahead(words.clone());
            let start = out.total_len();
            let step = loop {
                if out.total_len() - start >= GET_STEP_BYTES {
                    break Step::More;
                }
                match words.next() {
                    Some(key) => {
                        ahead.advance();
                        get.key(&cache, key, out, &lp, log.as_mut())
                    }
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
}

/// What a classic storage command asks of the store.
fn store_mode(kind: StoreKind) -> StoreMode {
    match kind {
        StoreKind::Set | StoreKind::Cas => StoreMode::Set,
        StoreKind::Add => StoreMode::Add,
        StoreKind::Replace => StoreMode::Replace,
        StoreKind::Append => StoreMode::Append,
        StoreKind::Prepend => StoreMode::Prepend,
    }
}

fn write_store_outcome(outcome: StoreOutcome, out: &mut Vec<u8>) {
    match outcome {
        StoreOutcome::Stored { .. } => reply::write_status(out, Status::Stored),
        StoreOutcome::NotStored => reply::write_status(out, Status::NotStored),
        StoreOutcome::Exists => reply::write_status(out, Status::Exists),
        StoreOutcome::NotFound => reply::write_status(out, Status::NotFound),
        StoreOutcome::TooLarge => reply::write_error(out, ErrorReply::ObjectTooLarge),
        StoreOutcome::OutOfMemory => reply::write_error(out, ErrorReply::OutOfMemoryStoring),
    }
}

fn write_arith_outcome(outcome: ArithOutcome, out: &mut Vec<u8>) {
    match outcome {
        ArithOutcome::Value { value, .. } => reply::write_number(out, value),
        ArithOutcome::NotFound | ArithOutcome::Exists => reply::write_status(out, Status::NotFound),
        ArithOutcome::NonNumeric => reply::write_error(out, ErrorReply::NonNumeric),
        ArithOutcome::OutOfMemory => reply::write_error(out, ErrorReply::OutOfMemoryStoring),
    }
}

/// The command line at the start of `input` as memcached's `-vv` log prints it: without its `\r\n` (or
/// `\n`), and ending at a NUL byte (memcached prints it as a C string).
pub(crate) fn command_line(input: &[u8]) -> &[u8] {
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
