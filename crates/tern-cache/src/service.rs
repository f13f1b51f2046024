//! tern cache on the tern runtime: decoding a connection's input into frames, and for each the door that
//! answers it ([`crate::dispatch`]), with memcached's batching of replies (`-R`) and its `-vv` log. Every
//! command is a few hundred nanoseconds of work, answered inline on the I/O loop that read it: offloading
//! would only add a hand-off.

use std::cell::{Cell, RefCell};
use std::io::Write as _;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use tern_memcache_proto::ascii_auth::{self, AuthDecoded};
use tern_memcache_proto::binary::{self, BinaryCommand, BinaryDecoded, Header};
use tern_memcache_proto::request::LruCrawler;
use tern_memcache_proto::{Decoded, Request, Words};
use tern_metrics::{HistogramConfig, HistogramFamily};
use tern_runtime::{
    CloseReason, Cx, Datagrams, Decode, LoopInfo, Outcome, Output, Rejection, ReplyStream,
    ServerControl, Service,
};

use crate::cache::{Answer, Cache, CacheLoop, Flow};
use crate::settings::Protocol;
use crate::stats;
use crate::text::{command_line, LogReplies};
use crate::vlog;
use crate::watch;

/// What a connection speaks, kept by the runtime per connection (`Service::decode_conn`): undecided until its
/// first bytes arrive.
const UNDECIDED: u8 = 0;
const TEXT: u8 = 1;
const BINARY: u8 = 2;
/// Text, not authenticated yet (`-Y`).
const TEXT_UNAUTHENTICATED: u8 = 3;

/// One frame of a connection's input.
pub enum Frame<'a> {
    /// A request, and its command line when the `-vv` log is on (else empty).
    Command(Request<'a>, &'a [u8]),
    /// A binary-protocol request, and its header's bytes as sent (for the `-vv` log).
    Binary(Header, BinaryCommand<'a>, &'a [u8]),
    /// An unauthenticated connection's input under `-Y`: the reply, and whether it was an attempt to
    /// authenticate that succeeded (`Some(true)`) or failed.
    AsciiAuth(&'static [u8], Option<bool>),
    /// The connection must close without a reply (a line past memcached's limit...): memcached then closes
    /// at once, so the replies it had not written yet are lost too.
    Abort,
}

/// The time each command took on the server, by kind (`Service::request_latency`): the families
/// memcached's `stats` counts commands by, text, meta and binary alike; a multi-get is one request.
static REQUEST_NS: HistogramFamily = HistogramFamily::new(
    "tern_cache_request_duration_ns",
    "Time from the read that completed a command to its reply ready to write, by command (TCP and Unix sockets)",
    "command",
    &["get", "set", "delete", "incr_decr", "touch", "meta", "other"],
    HistogramConfig::REQUEST_NS,
);
const KIND_GET: usize = 0;
const KIND_SET: usize = 1;
const KIND_DELETE: usize = 2;
const KIND_INCR_DECR: usize = 3;
const KIND_TOUCH: usize = 4;
const KIND_META: usize = 5;
const KIND_OTHER: usize = 6;

impl Service for Cache {
    type Request<'a> = Frame<'a>;
    type Loop = CacheLoop;

    fn name(&self) -> &'static str {
        "cache"
    }

    fn request_latency(&self) -> Option<&'static HistogramFamily> {
        Some(&REQUEST_NS)
    }

    fn request_kind(&self, frame: &Frame<'_>) -> usize {
        match frame {
            Frame::Command(request, _) => match request {
                Request::Get { .. } | Request::GetKeyTooLong { .. } => KIND_GET,
                Request::Store { .. }
                | Request::TooLarge { meta: false, .. }
                | Request::BadDataChunk { .. } => KIND_SET,
                Request::Delete { .. } => KIND_DELETE,
                Request::Arithmetic { .. } => KIND_INCR_DECR,
                Request::Touch { .. } => KIND_TOUCH,
                Request::MetaGet { .. }
                | Request::MetaSet { .. }
                | Request::MetaDelete { .. }
                | Request::MetaArithmetic { .. }
                | Request::MetaNoop
                | Request::MetaDebug { .. }
                | Request::TooLarge { meta: true, .. } => KIND_META,
                _ => KIND_OTHER,
            },
            Frame::Binary(_, command, _) => match command {
                BinaryCommand::Get { .. } => KIND_GET,
                BinaryCommand::Store { .. }
                | BinaryCommand::Concat { .. }
                | BinaryCommand::TooLarge { .. } => KIND_SET,
                BinaryCommand::Delete { .. } => KIND_DELETE,
                BinaryCommand::Arith { .. } => KIND_INCR_DECR,
                BinaryCommand::Touch { .. } | BinaryCommand::Gat { .. } => KIND_TOUCH,
                _ => KIND_OTHER,
            },
            Frame::AsciiAuth(..) | Frame::Abort => KIND_OTHER,
        }
    }

    fn init_loop(self: &Arc<Self>, _info: &LoopInfo) -> CacheLoop {
        CacheLoop {
            flushed_at: Cell::new(0),
            in_batch: Cell::new(0),
            log_id: Cell::new(0),
            prefixes: self.detail.register(),
            pinned: RefCell::new(Vec::new()),
            cache: self.clone(),
            authenticated: RefCell::default(),
            sasl: RefCell::default(),
            closing_on_error: RefCell::default(),
            responses: Cell::new(0),
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

    /// memcached's `-B`: a connection speaks text or binary for its whole life, under `auto` by its first
    /// byte (the binary request magic or not).
    fn decode_conn<'a>(&self, input: &'a [u8], conn_state: &mut u8) -> Decode<Frame<'a>> {
        if *conn_state == UNDECIDED {
            let speaks_binary = match self.settings.protocol {
                Protocol::Ascii => false,
                Protocol::Binary => true,
                Protocol::Auto => input.first() == Some(&binary::REQUEST_MAGIC),
            };
            *conn_state = match (speaks_binary, &self.settings.ascii_auth) {
                (true, _) => BINARY,
                (false, Some(_)) => TEXT_UNAUTHENTICATED,
                (false, None) => TEXT,
            };
        }
        if *conn_state == TEXT {
            return self.decode(input);
        }
        if *conn_state == TEXT_UNAUTHENTICATED {
            return self.decode_unauthenticated(input, conn_state);
        }
        match binary::decode_binary(input, &self.limits) {
            BinaryDecoded::Incomplete { needed } => Decode::Incomplete { needed },
            // memcached closes at once, without a reply.
            BinaryDecoded::BadMagic => Decode::Frame {
                request: Frame::Abort,
                consumed: input.len(),
            },
            BinaryDecoded::Frame {
                header,
                command,
                consumed,
            } => Decode::Frame {
                request: Frame::Binary(header, command, &input[..binary::HEADER_LEN]),
                consumed,
            },
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
            Frame::Binary(header, command, raw_header) => {
                if let Some(refused) = self.take_response(cx.conn, state, out) {
                    return refused;
                }
                let now = self.clock.at(cx.received);
                self.conns.command(cx.conn, now);
                let id = cx.conn as usize;
                let mut log = self.vlog.commands().then(Vec::new);
                if let Some(log) = log.as_mut() {
                    crate::binary::log_request(log, id, raw_header, &header, &command);
                }
                let authenticated = header.allowed_unauthenticated()
                    || state.authenticated.borrow().contains(&cx.conn);
                if let (Some(log), Some(_)) = (log.as_mut(), &self.settings.sasl) {
                    let text = format!(
                        "authenticated() in cmd 0x{:02x} is {authenticated}\n",
                        header.opcode
                    );
                    log.extend_from_slice(text.as_bytes());
                }
                let refused = self.settings.sasl.is_some()
                    && command != BinaryCommand::BadLengths
                    && !authenticated;
                let before = out.total_len();
                let mark = out.len();
                let outcome = if refused {
                    binary::write_error(out, &header, binary::Status::AuthError, None);
                    Outcome::Close
                } else {
                    // NOOP and most errors make memcached write its replies out; QUIT ends the
                    // connection.
                    let ends = matches!(command, BinaryCommand::Noop | BinaryCommand::Quit { .. });
                    let answer = self.answer_binary(
                        &header,
                        command,
                        now,
                        out,
                        Some(cx.server),
                        state,
                        cx.conn,
                    );
                    // The response's status, when one was written (an error is one response).
                    let status = out
                        .get(mark + 6..mark + 8)
                        .map(|s| u16::from_be_bytes([s[0], s[1]]));
                    let flushes = ends
                        || status.is_some_and(|status| binary::response_flushes(&header, status));
                    self.after_command(state, answer, None, flushes, out)
                };
                if let Some(mut log) = log {
                    let written = out.to_vec();
                    crate::binary::log_responses(
                        &mut log,
                        id,
                        written.get(before..).unwrap_or_default(),
                    );
                    self.vlog.write(&log);
                }
                return outcome;
            }
            Frame::AsciiAuth(reply, attempt) => {
                if let Some(ok) = attempt {
                    stats::AUTH_CMDS.incr();
                    if !ok {
                        stats::AUTH_ERRORS.incr();
                    }
                }
                out.extend_from_slice(reply);
                return Outcome::Reply;
            }
            Frame::Abort => {
                out.truncate(state.flushed_at.get());
                state.closing_on_error.borrow_mut().insert(cx.conn);
                return Outcome::Close;
            }
        };
        if matches!(request, Request::GetKeyTooLong { .. }) {
            // memcached drops the replies it had not written yet (see the request's doc), and the items
            // they held.
            out.truncate(state.flushed_at.get());
            state.flushed(out.len());
        }
        if let Some(refused) = self.out_of_responses(&request, cx.conn, state, out) {
            return refused;
        }
        if let Request::Admin {
            command: b"watch",
            args,
        } = request
        {
            return self.start_watch(args, state, out);
        }
        let flushes = request.flushes_replies();
        let now = self.clock.at(cx.received);
        self.conns.command(cx.conn, now);
        let mark = out.len();
        // memcached prints the command when it reads it, and each `out_string` reply as it is made.
        let log = self.vlog.commands().then(|| {
            let mut log = Vec::new();
            vlog::line(&mut log, b'<', state.log_id.get(), line);
            log
        });
        let (answer, stream) =
            self.answer_tcp(request, now, out, cx.output_room, cx.server, state, log);
        if answer.hidden {
            out.truncate(mark);
        }
        self.after_command(state, answer, stream, flushes, out)
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
        self.log_connection_event(conn, None);
        if self.vlog.commands() {
            let text = format!("new {} client connection.", self.settings.protocol.name());
            self.log_connection(conn, text.as_bytes());
        }
    }

    fn request_incomplete(&self, _state: &Rc<CacheLoop>, conn: u64, needed: Option<usize>) {
        self.conns.incomplete(conn, needed.is_some());
    }

    fn connection_closed(&self, state: &Rc<CacheLoop>, conn: u64, why: CloseReason) {
        let refused = state.closing_on_error.borrow_mut().remove(&conn);
        let reason = match why {
            _ if refused => "error",
            CloseReason::Normal => "normal",
            CloseReason::Error => "error",
            CloseReason::IdleTimeout => "idle_timeout",
            CloseReason::Shutdown => "shutdown",
        };
        self.log_connection_event(conn, Some(reason));
        state.authenticated.borrow_mut().remove(&conn);
        state.sasl.borrow_mut().remove(&conn);
        self.conns.closed(conn);
        self.log_connection(conn, b"connection closed.");
    }

    fn datagram(
        &self,
        state: &Rc<CacheLoop>,
        socket: u64,
        datagram: &[u8],
        _peer: SocketAddr,
        replies: &mut Datagrams,
    ) {
        self.serve_datagram(state, socket, datagram, replies);
    }
}

impl Cache {
    /// Under `-o read_buf_mem_limit`, takes the response objects the command needs (one, and one per further
    /// key of a get) and answers as memcached does when they run out: a get looks up the keys it has objects
    /// for, then drops every reply not written yet and says `SERVER_ERROR out of memory writing get
    /// response`; any other command closes the connection, its unwritten replies dropped.
    fn out_of_responses(
        &self,
        request: &Request<'_>,
        conn: u64,
        state: &CacheLoop,
        out: &mut Output,
    ) -> Option<Outcome> {
        let left = self.responses_left(state)?;
        let Request::Get {
            kind,
            exptime,
            keys,
        } = request
        else {
            return self.take_response(conn, state, out);
        };
        if left == 0 {
            return self.take_response(conn, state, out);
        }
        let wanted = u32::try_from(keys.clone().count()).unwrap_or(u32::MAX);
        if wanted <= left {
            self.take_responses(state, wanted);
            return None;
        }
        stats::RESPONSE_OBJ_OOM.incr();
        let fitting: Vec<&[u8]> = keys.clone().take(left as usize).collect();
        let fitting = fitting.join(&b' ');
        let now = self.clock.now();
        let mut discarded = Vec::new();
        self.get(
            *kind,
            *exptime,
            Words::new(&fitting),
            now,
            &mut discarded,
            None,
            state,
            None,
        );
        out.truncate(state.flushed_at.get());
        state.flushed(out.len());
        self.take_responses(state, 1);
        out.extend_from_slice(b"SERVER_ERROR out of memory writing get response\r\n");
        Some(Outcome::Reply)
    }

    /// Takes the one response object a command needs under `-o read_buf_mem_limit`; with none left the
    /// connection closes, its unwritten replies dropped.
    fn take_response(&self, conn: u64, state: &CacheLoop, out: &mut Output) -> Option<Outcome> {
        match self.responses_left(state)? {
            0 => {
                stats::RESPONSE_OBJ_OOM.incr();
                out.truncate(state.flushed_at.get());
                state.closing_on_error.borrow_mut().insert(conn);
                Some(Outcome::Close)
            }
            _ => {
                self.take_responses(state, 1);
                None
            }
        }
    }

    /// `watch [kinds]`: the connection becomes a log stream (see `watch.rs`), with memcached's answers to a
    /// refused one.
    fn start_watch(&self, args: Words<'_>, state: &CacheLoop, out: &mut Output) -> Outcome {
        let words: Vec<&[u8]> = args.collect();
        // memcached reads a last `noreply` as such, then refuses it as a kind, silently.
        let noreply = words.last() == Some(&&b"noreply"[..]);
        let refusal: &[u8] = if !self.settings.watch_enabled {
            b"CLIENT_ERROR watch commands not allowed\r\n"
        } else if out.len() > state.flushed_at.get() {
            // Replies to commands read with it are not written yet: they would mix with the log lines.
            b"ERROR cannot pipeline other commands before watch\r\n"
        } else {
            match watch::parse_kinds(words.iter().copied()) {
                None => b"ERROR\r\n",
                Some(kinds) => match self.watchers.watch(kinds) {
                    Ok(feed) => {
                        out.extend_from_slice(b"OK\r\n");
                        return Outcome::Feed(feed);
                    }
                    Err(watch::Refused::TooMany) => {
                        b"WATCHER_TOO_MANY log watcher limit reached\r\n"
                    }
                },
            }
        };
        if !noreply {
            out.extend_from_slice(refusal);
        }
        Outcome::Reply
    }

    /// A `watch connevents` line: `closed` is `None` for a new connection, else the reason it closed.
    fn log_connection_event(&self, conn: u64, closed: Option<&str>) {
        if !self.watchers.wants(watch::CONNEVENTS) {
            return;
        }
        let Ok(raw) = i32::try_from(conn) else {
            return;
        };
        // Safety: the runtime calls the connection hooks on the loop that owns the open socket `conn`, which
        // stays open for the duration of this call; the borrow does not outlive it.
        let socket = unsafe { std::os::fd::BorrowedFd::borrow_raw(raw) };
        let peer = socket2::SockRef::from(&socket).peer_addr().ok();
        let (ip, port, transport) = match peer.as_ref().and_then(|a| a.as_socket()) {
            Some(addr) => (addr.ip().to_string(), addr.port(), "tcp"),
            // memcached's Unix clients: `rip=unix rport=0 transport=local`.
            None => ("unix".to_owned(), 0, "local"),
        };
        self.watchers.log(watch::CONNEVENTS, |line| {
            let _ = match closed {
                None => write!(
                    line,
                    "type=conn_new rip={ip} rport={port} transport={transport} cfd={conn}"
                ),
                Some(reason) => write!(
                    line,
                    "type=conn_close rip={ip} rport={port} transport={transport} reason={reason} cfd={conn}"
                ),
            };
        });
    }

    /// `-Y`: a text connection's input before it authenticates (memcached's `try_read_command_asciiauth`);
    /// the right user and password make it a text connection like any other.
    fn decode_unauthenticated<'a>(
        &self,
        input: &'a [u8],
        conn_state: &mut u8,
    ) -> Decode<Frame<'a>> {
        let (reply, attempt, consumed): (&'static [u8], _, _) =
            match ascii_auth::decode_ascii_auth(input) {
                AuthDecoded::Incomplete { needed } => return Decode::Incomplete { needed },
                AuthDecoded::Close => {
                    return Decode::Frame {
                        request: Frame::Abort,
                        consumed: input.len(),
                    }
                }
                AuthDecoded::Refused { reply, consumed } => (reply, None, consumed),
                AuthDecoded::Credentials {
                    user,
                    password,
                    consumed,
                } => {
                    let file = self.settings.ascii_auth.as_ref().expect("-Y");
                    if file.check(user, password) {
                        *conn_state = TEXT;
                        (b"STORED\r\n", Some(true), consumed)
                    } else {
                        (
                            b"CLIENT_ERROR authentication failure\r\n",
                            Some(false),
                            consumed,
                        )
                    }
                }
            };
        Decode::Frame {
            request: Frame::AsciiAuth(reply, attempt),
            consumed,
        }
    }

    /// What every command of a TCP connection ends with: a hang-up drops the unwritten replies, the `-R`
    /// budget is counted, and the runtime told what comes next.
    fn after_command(
        &self,
        state: &CacheLoop,
        answer: Answer,
        stream: Option<ReplyStream>,
        flushes: bool,
        out: &mut Output,
    ) -> Outcome {
        if let Flow::Hangup = answer.flow {
            out.truncate(state.flushed_at.get());
            state
                .closing_on_error
                .borrow_mut()
                .insert(state.log_id.get() as u64);
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

    /// A command over TCP: gets and metadumps may leave a stream that answers the rest as the client reads;
    /// everything else goes through [`Cache::execute`]. Writes the `-vv` lines of the command.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn answer_tcp(
        &self,
        request: Request<'_>,
        now: u32,
        out: &mut Output,
        room: usize,
        control: &ServerControl,
        lp: &Rc<CacheLoop>,
        log: Option<Vec<u8>>,
    ) -> (Answer, Option<ReplyStream>) {
        let mut log = log;
        let mark = out.len();
        let (answer, stream) = match request {
            Request::Get {
                kind,
                exptime,
                keys,
            } => {
                let rest = self.get_tcp(kind, exptime, keys, now, out, room, lp, log.as_mut());
                (Answer::shown(), rest)
            }
            Request::LruCrawler(LruCrawler::Metadump { classes }) => {
                let pipelined = out.len() > lp.flushed_at.get();
                match self.metadump_start(classes, pipelined) {
                    Ok(classes) => (Answer::shown(), Some(lp.cache.metadump_stream(classes))),
                    Err(refused) => {
                        out.extend_from_slice(refused);
                        (Answer::shown(), None)
                    }
                }
            }
            request => {
                let shown = LogReplies::of(&request);
                let answer = match request {
                    // Into the connection's output, so a large value is shared, not copied (`MetaOut`).
                    Request::MetaGet { key, flags } => {
                        self.meta_get(key, &flags, now, out, lp);
                        Answer::shown()
                    }
                    request => self.execute(request, now, out, Some(control), lp, log.as_mut()),
                };
                if let Some(log) = log.as_mut() {
                    if shown.select(&out[mark..]) {
                        vlog::replies(log, lp.log_id.get(), &out[mark..], answer.hidden);
                    }
                }
                (answer, None)
            }
        };
        if let Some(log) = log {
            self.vlog.write(&log);
        }
        (answer, stream)
    }
}
