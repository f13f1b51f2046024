//! One I/O loop: a tokio current-thread runtime whose main task multiplexes every connection of the loop
//! through its own `mio` poll set.
//!
//! Why not one tokio task per connection: a task cell plus a tokio I/O registration costs several hundred
//! bytes per idle connection, and the runtime's goal is <= 300 bytes. Here an idle connection is one slab
//! entry (a socket and a few flags); bytes are held only while a request is partial or replies are unsent
//! (reads land in the loop's shared buffer). It also lets the loop read and write exactly once per wake-up
//! where a request fits a read. Deferred replies, timers and outbound calls are ordinary tokio tasks on the
//! same thread.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{self, Read};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream, UdpSocket, UnixListener};
use mio::{Events, Interest, Poll, Token};
use slab::Slab;
use tokio::io::unix::AsyncFd;
use tokio::sync::{mpsc, Notify};

use crate::acceptor::{is_resource_exhaustion, refuse};
use crate::config::{BufferMode, RuntimeConfig, MAX_ADDRESSES};
use crate::control::ServerControl;
use crate::metrics;
use crate::output::{Output, Unsent};
use crate::overload::Admission;
use crate::service::{
    Cx, Datagrams, Decode, LoopInfo, Outcome, Rejection, ReplyStream, Service, Step,
};
use crate::stream::{Listener, Stream};

/// Wakes a loop blocked in its own poll: shutdown, a connection handed over by the acceptor.
pub(crate) const WAKER: Token = Token(usize::MAX - 4);
/// Listener `i` (TCP ones, then the Unix one) is `LISTENERS + i`; UDP socket `i` is `UDP_SOCKETS + i`.
/// Connections are slab keys, far below both.
const LISTENERS: usize = usize::MAX - 4 * MAX_ADDRESSES;
const UDP_SOCKETS: usize = usize::MAX - 2 * MAX_ADDRESSES;
/// Reads one connection may do per turn before the loop serves the others (fairness).
const READS_PER_TURN: usize = 4;
/// Accepts per turn, for the same reason.
const ACCEPTS_PER_TURN: usize = 4;
/// Connections closed per turn of the loop (see `IoLoop::close`): about 0.75 ms of closing here.
const CLOSES_PER_TURN: usize = 32;
const DATAGRAMS_PER_TURN: usize = 64;
/// Spare room guaranteed when reading into a connection's own buffer.
const MIN_OWN_READ: usize = 4096;

pub(crate) struct LoopSetup<S: Service> {
    pub id: usize,
    /// The loop's poll set, made by the server so that its waker could be handed out before the loop starts.
    pub poll: Poll,
    pub loops: usize,
    pub service: Arc<S>,
    pub config: Arc<RuntimeConfig>,
    pub control: ServerControl,
    pub executor: tern_executor::Executor,
    /// One per TCP address (reuseport); none when an acceptor thread hands connections over.
    pub listeners: Vec<std::net::TcpListener>,
    /// A clone of the server's Unix listener: every loop accepts from it (the kernel hands each connection
    /// to one of them).
    pub unix_listener: Option<std::os::unix::net::UnixListener>,
    /// One per UDP address.
    pub udp: Vec<std::net::UdpSocket>,
    pub handoff: Option<mpsc::UnboundedReceiver<std::net::TcpStream>>,
}

/// Runs one loop on its own thread. `rt` is built by the server before anything accepts (see `Server::start`).
pub(crate) fn run_loop_thread<S: Service>(setup: LoopSetup<S>, rt: tokio::runtime::Runtime) {
    let local = tokio::task::LocalSet::new();
    tern_metrics::set_thread_name(&format!("io-{}", setup.id));
    let control = setup.control.clone();
    let id = setup.id;
    if let Err(e) = local.block_on(&rt, async move { IoLoop::new(setup)?.run().await }) {
        tracing::error!("io loop {id} failed: {e}");
        control.shutdown();
    }
}

/// A reply slot of a connection that has deferred or streamed replies: replies leave strictly in request order.
enum Slot {
    /// A deferred reply not finished yet.
    Waiting,
    Ready(Unsent),
    /// A reply still being produced; it runs once it is the first slot.
    Streaming(ReplyStream),
}

/// What a connection holds only while it is busy; dropped when it becomes idle (in shared-buffer mode).
#[derive(Default)]
struct Busy {
    /// Bytes of an incomplete request, or of requests left for a later turn (in per-connection mode, the
    /// connection's own read buffer).
    input: Vec<u8>,
    /// Bytes at the front of `input` already handled: dropped lazily, so that a deep pipeline handled a
    /// turn's budget at a time is not moved to the front of its buffer after every turn.
    input_done: usize,
    /// Do not decode again before `input` holds this many bytes.
    needed: usize,
    /// When the oldest incomplete request started arriving.
    partial_since: Option<Instant>,
    /// The decoder's interim reply ([`Decode::Interim`]) for the incomplete request is written.
    interim_sent: bool,
    /// `input` may hold complete requests left undecoded when the output backed up or a reply streams.
    stalled: bool,
    /// A slot holds a [`Slot::Streaming`] reply: later requests wait undecoded until it ends.
    streaming: bool,
    /// Bytes still to discard from the stream (a frame consumed more than it had).
    skip: usize,
    /// Replies not yet written, in order.
    output: Unsent,
    /// Replies of deferred or streamed requests and of the requests after them; `head_seq` is the first
    /// slot's number.
    slots: VecDeque<Slot>,
    head_seq: u64,
}

impl Busy {
    fn unsent(&self) -> usize {
        self.output.len()
    }
    fn is_idle(&self) -> bool {
        self.input.is_empty() && self.skip == 0 && self.output.is_empty() && self.slots.is_empty()
    }
    fn stream_first(&self) -> bool {
        matches!(self.slots.front(), Some(Slot::Streaming(_)))
    }
    /// Moves the finished replies at the front of the slots to the output, up to the first unfinished one.
    fn release_ready(&mut self) {
        while let Some(Slot::Ready(_)) = self.slots.front() {
            if let Some(Slot::Ready(mut bytes)) = self.slots.pop_front() {
                self.output.append(&mut bytes);
            }
            self.head_seq += 1;
        }
    }
}

/// Runs `stream` until it ends (true) or `out` holds `limit` bytes (false).
fn run_stream(stream: &mut ReplyStream, out: &mut Output, limit: usize) -> bool {
    while out.total_len() < limit {
        if (stream.0)(out) == Step::Done {
            return true;
        }
    }
    false
}

struct Conn {
    stream: Stream,
    /// Tells a reused slab key from the connection a deferred reply was meant for.
    generation: u32,
    readable: bool,
    writable: bool,
    /// epoll reported the peer's FIN: keep reading until EOF even after a short read, since no further edge will
    /// come for bytes and FIN that arrived together.
    read_closed: bool,
    /// The peer sent EOF; close once the pending replies are out.
    peer_closed: bool,
    /// Close once the pending replies are out (a handler or the decoder asked to).
    close_after_flush: bool,
    last_active: Instant,
    busy: Option<Box<Busy>>,
    /// Done and waiting in the loop's close queue: no longer served.
    closing: bool,
}

impl Conn {
    fn has_pending_replies(&self) -> bool {
        self.busy
            .as_ref()
            .is_some_and(|b| b.unsent() > 0 || !b.slots.is_empty())
    }

    /// Requests read but not decoded yet (the output backed up, or a reply streams).
    fn has_stalled_input(&self) -> bool {
        self.busy.as_ref().is_some_and(|b| b.stalled)
    }

    /// Work the loop can do for this connection now, without a new event: its output is drained and it has a
    /// streamed reply to go on with, requests left undecoded, or a socket that may hold more.
    fn has_more_work(&self) -> bool {
        let Some(busy) = self.busy.as_ref() else {
            return self.readable && !self.peer_closed && !self.close_after_flush;
        };
        if busy.unsent() > 0 {
            return false;
        }
        busy.stream_first()
            || (busy.stalled && !busy.streaming)
            || (self.readable
                && !self.peer_closed
                && !self.close_after_flush
                && busy.slots.is_empty())
    }
}

/// A deferred reply, finished by its task, waiting for the loop to put it in place.
struct Completion {
    key: usize,
    generation: u32,
    seq: u64,
    reply: Vec<u8>,
}

#[derive(Default)]
struct Completions {
    done: RefCell<Vec<Completion>>,
    notify: Notify,
}

enum Wake {
    Io,
    Completions,
    Shutdown,
    Handoff(Option<std::net::TcpStream>),
    Tick,
    AcceptResume,
    Again,
}

struct IoLoop<S: Service> {
    id: usize,
    service: Arc<S>,
    cfg: Arc<RuntimeConfig>,
    control: ServerControl,
    executor: tern_executor::Executor,
    state: Rc<S::Loop>,
    /// The loop's own poll set (an epoll descriptor), registered with tokio's reactor so the main task sleeps
    /// in tokio, alongside its timers and other tasks, rather than in a blocking poll.
    poll: AsyncFd<Poll>,
    events: Events,
    conns: Slab<Conn>,
    next_generation: u32,
    /// TCP listeners, then the Unix one; emptied when draining.
    listeners: Vec<Listener>,
    udp: Vec<UdpSocket>,
    handoff: Option<mpsc::UnboundedReceiver<std::net::TcpStream>>,
    read_buf: Box<[u8]>,
    out: Output,
    /// Bytes written to the connection being served in this turn (see `max_bytes_per_turn`).
    turn_written: usize,
    /// Requests of the connection being served handled in this turn (see `max_requests_per_turn`).
    turn_requests: usize,
    datagrams: Datagrams,
    completions: Rc<Completions>,
    admission: Admission,
    accept_backoff: Duration,
    accept_paused_until: Option<Instant>,
    /// Work left over from a turn that hit a per-turn budget.
    again_conns: Vec<usize>,
    /// Connections that are done, closed at most `CLOSES_PER_TURN` per turn (see `close`).
    closing: VecDeque<usize>,
    again_accept: bool,
    again_udp: bool,
    draining_until: Option<Instant>,
}

impl<S: Service> IoLoop<S> {
    fn new(setup: LoopSetup<S>) -> io::Result<Self> {
        let poll = setup.poll;
        let mut listeners: Vec<Listener> = setup
            .listeners
            .into_iter()
            .map(|l| Listener::Tcp(TcpListener::from_std(l)))
            .chain(
                setup
                    .unix_listener
                    .map(|l| Listener::Unix(UnixListener::from_std(l))),
            )
            .collect();
        for (i, l) in listeners.iter_mut().enumerate() {
            poll.registry()
                .register(l.source(), Token(LISTENERS + i), Interest::READABLE)?;
        }
        let mut udp: Vec<UdpSocket> = setup.udp.into_iter().map(UdpSocket::from_std).collect();
        for (i, u) in udp.iter_mut().enumerate() {
            poll.registry()
                .register(u, Token(UDP_SOCKETS + i), Interest::READABLE)?;
        }
        let cfg = setup.config;
        let info = LoopInfo {
            id: setup.id,
            loops: setup.loops,
        };
        Ok(IoLoop {
            id: setup.id,
            state: Rc::new(setup.service.init_loop(&info)),
            service: setup.service,
            admission: Admission::new(&cfg, setup.loops),
            accept_backoff: cfg.accept_backoff_min,
            read_buf: vec![0u8; cfg.read_buffer_bytes].into_boxed_slice(),
            cfg,
            control: setup.control,
            executor: setup.executor,
            // SAFETY: the AsyncFd owns the Poll, which owns the descriptor, so it stays open and the same for
            // the AsyncFd's whole life.
            poll: unsafe { AsyncFd::register_with_interest(poll, tokio::io::Interest::READABLE) }
                .map_err(io::Error::from)?,
            events: Events::with_capacity(1024),
            conns: Slab::new(),
            next_generation: 0,
            listeners,
            udp,
            handoff: setup.handoff,
            out: Output::with_capacity(64 << 10),
            turn_written: 0,
            turn_requests: 0,
            datagrams: Datagrams::default(),
            completions: Rc::new(Completions::default()),
            accept_paused_until: None,
            again_conns: Vec::new(),
            closing: VecDeque::new(),
            again_accept: false,
            again_udp: false,
            draining_until: None,
        })
    }

    fn tick_period(&self) -> Duration {
        let mut period = Duration::from_secs(1);
        for t in [self.cfg.idle_timeout, self.cfg.partial_request_timeout]
            .into_iter()
            .flatten()
        {
            period = period.min(t / 4);
        }
        if self.draining_until.is_some() {
            period = period.min(Duration::from_millis(20));
        }
        period.max(Duration::from_millis(10))
    }

    async fn run(mut self) -> io::Result<()> {
        let completions = self.completions.clone();
        let mut shutdown = self.control.subscribe();
        let mut handoff = self.handoff.take();
        // One timer for the sweep, re-armed only when it fires (a new one per wake-up would register and remove
        // a timer-wheel entry every time the loop sleeps).
        let tick = tokio::time::sleep_until((Instant::now() + self.tick_period()).into());
        tokio::pin!(tick);
        let mut tick_at = Instant::now() + self.tick_period();
        // Blocking in the loop's own poll, not in tokio, when nothing is in flight: a request arriving at a
        // sleeping loop then costs one wake-up, not the two of a poll set nested in tokio's (the kernel
        // propagates the readiness through both). With requests in flight (deferred replies, outbound calls,
        // their timers), the loop sleeps in tokio so those tasks run.
        let mut direct_wait = Duration::ZERO;
        loop {
            self.turn(direct_wait)?;
            direct_wait = Duration::ZERO;
            if let Some(until) = self.draining_until {
                if self.conns.is_empty() || Instant::now() >= until {
                    break;
                }
            }
            let has_again = !self.again_conns.is_empty()
                || self.again_accept
                || self.again_udp
                || !self.closing.is_empty();
            let now = Instant::now();
            if self.control.is_shutting_down() && self.draining_until.is_none() {
                self.start_drain();
                tick_at = now + self.tick_period();
                tick.as_mut().reset(tick_at.into());
            }
            while let Some(stream) = handoff.as_mut().and_then(|rx| rx.try_recv().ok()) {
                self.handoff_conn(stream);
            }
            if self.accept_paused_until.is_some_and(|t| now >= t) {
                self.accept_paused_until = None;
                self.again_accept = true;
                continue;
            }
            if now >= tick_at {
                self.sweep(now);
                tick_at = now + self.tick_period();
                tick.as_mut().reset(tick_at.into());
            }
            let quiet = self.admission.in_flight() == 0 && completions.done.borrow().is_empty();
            if quiet && !has_again {
                let until = self.accept_paused_until.map_or(tick_at, |t| t.min(tick_at));
                direct_wait = until
                    .saturating_duration_since(now)
                    .max(Duration::from_millis(1));
                continue;
            }
            let accept_resume = self.accept_paused_until;
            let draining = self.draining_until.is_some();
            let wake = tokio::select! {
                biased;
                _ = tokio::task::yield_now(), if has_again => Wake::Again,
                guard = self.poll.readable() => {
                    guard?.clear_ready();
                    Wake::Io
                }
                _ = completions.notify.notified() => Wake::Completions,
                _ = shutdown.wait_for(|s| *s), if !draining => Wake::Shutdown,
                s = async { match handoff.as_mut() { Some(rx) => rx.recv().await, None => std::future::pending().await } } => Wake::Handoff(s),
                _ = tokio::time::sleep_until(accept_resume.unwrap_or_else(Instant::now).into()), if accept_resume.is_some() => Wake::AcceptResume,
                _ = &mut tick => Wake::Tick,
            };
            match wake {
                Wake::Io | Wake::Completions | Wake::Again => {}
                Wake::Shutdown => {
                    self.start_drain();
                    tick_at = Instant::now() + self.tick_period();
                    tick.as_mut().reset(tick_at.into());
                }
                Wake::Handoff(Some(stream)) => self.handoff_conn(stream),
                Wake::Handoff(None) => handoff = None,
                Wake::AcceptResume => {
                    self.accept_paused_until = None;
                    self.again_accept = true;
                }
                Wake::Tick => {
                    self.sweep(Instant::now());
                    tick_at = Instant::now() + self.tick_period();
                    tick.as_mut().reset(tick_at.into());
                }
            }
        }
        // Whatever is left past the grace period is closed.
        let keys: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
        for key in keys {
            self.close_now(key);
        }
        Ok(())
    }

    /// Handles everything ready now without sleeping: socket events, finished deferred replies, and work left
    /// over from the previous turn.
    /// `wait`: how long the first poll may block (zero when the loop sleeps in tokio instead).
    fn turn(&mut self, mut wait: Duration) -> io::Result<()> {
        let again_conns = std::mem::take(&mut self.again_conns);
        let (again_accept, again_udp) = (
            std::mem::take(&mut self.again_accept),
            std::mem::take(&mut self.again_udp),
        );
        loop {
            match self
                .poll
                .get_mut()
                .poll(&mut self.events, Some(std::mem::take(&mut wait)))
            {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            let now = Instant::now();
            // Taken out so the handlers can borrow the loop mutably (an empty Events allocates nothing).
            let events = std::mem::replace(&mut self.events, Events::with_capacity(0));
            let mut n = 0;
            for e in events.iter() {
                n += 1;
                match e.token() {
                    WAKER => {}
                    Token(t) if t >= UDP_SOCKETS => self.serve_udp(t - UDP_SOCKETS),
                    Token(t) if t >= LISTENERS => self.accept(t - LISTENERS),
                    Token(key) => {
                        let Some(conn) = self.conns.get_mut(key) else {
                            continue;
                        };
                        conn.readable |= e.is_readable() || e.is_read_closed() || e.is_error();
                        conn.read_closed |= e.is_read_closed() || e.is_error();
                        conn.writable |= e.is_writable() || e.is_write_closed();
                        self.serve(key, now);
                    }
                }
            }
            let full = n == events.capacity();
            self.events = events;
            if !full {
                break;
            }
        }
        self.apply_completions();
        let now = Instant::now();
        for key in again_conns {
            if self.conns.contains(key) {
                self.serve(key, now);
            }
        }
        if again_accept && self.accept_paused_until.is_none() {
            self.accept_all();
        }
        if again_udp {
            for i in 0..self.udp.len() {
                self.serve_udp(i);
            }
        }
        for _ in 0..CLOSES_PER_TURN {
            match self.closing.pop_front() {
                Some(key) => self.close_now(key),
                None => break,
            }
        }
        Ok(())
    }

    /// Accepts from every listener (after a pause or a turn that hit its budget).
    fn accept_all(&mut self) {
        for i in 0..self.listeners.len() {
            self.accept(i);
        }
    }

    fn accept(&mut self, which: usize) {
        if self.accept_paused_until.is_some() || self.draining_until.is_some() {
            return;
        }
        for _ in 0..ACCEPTS_PER_TURN {
            let Some(listener) = self.listeners.get(which) else {
                return;
            };
            match listener.accept() {
                Ok(stream) => {
                    self.accept_backoff = self.cfg.accept_backoff_min;
                    self.add_conn(stream, false);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if is_resource_exhaustion(&e) => {
                    // The pending connection stays queued and the listener stays readable: retrying now would
                    // spin. Pause, doubling the pause while the condition lasts.
                    tracing::warn!(
                        "io loop {}: accept: {e}; pausing accepts for {:?}",
                        self.id,
                        self.accept_backoff
                    );
                    metrics::ACCEPT_PAUSES.incr();
                    metrics::ACCEPT_PAUSED_MICROS
                        .add(u64::try_from(self.accept_backoff.as_micros()).unwrap_or(u64::MAX));
                    self.accept_paused_until = Some(Instant::now() + self.accept_backoff);
                    self.accept_backoff =
                        (self.accept_backoff * 2).min(self.cfg.accept_backoff_max);
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => tracing::debug!("io loop {}: accept: {e}", self.id),
            }
        }
        self.again_accept = true;
    }

    /// A connection the acceptor thread handed over (already counted against the cap).
    fn handoff_conn(&mut self, stream: std::net::TcpStream) {
        if self.draining_until.is_some() {
            self.control.remove_connection();
        } else {
            self.add_conn(Stream::Tcp(TcpStream::from_std(stream)), true);
        }
    }

    /// Takes a new connection into the loop; `counted` says the acceptor already counted it against the cap.
    fn add_conn(&mut self, mut stream: Stream, counted: bool) {
        if !counted && !self.control.try_add_connection() {
            metrics::CONNECTIONS_REFUSED.incr();
            let mut refusal = Vec::new();
            self.service.refuse_connection(&mut refusal);
            refuse(&mut stream, &refusal);
            return;
        }
        stream.set_nodelay();
        let entry = self.conns.vacant_entry();
        let key = entry.key();
        if let Err(e) = self.poll.get_ref().registry().register(
            &mut stream,
            Token(key),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            tracing::warn!("io loop {}: cannot register connection: {e}", self.id);
            self.control.remove_connection();
            return;
        }
        self.next_generation = self.next_generation.wrapping_add(1);
        let busy = (self.cfg.buffer_mode == BufferMode::PerConnection).then(|| {
            Box::new(Busy {
                input: Vec::with_capacity(self.cfg.read_buffer_bytes),
                ..Busy::default()
            })
        });
        metrics::CONNECTIONS_ACCEPTED.incr();
        metrics::CONNECTIONS_OPEN.incr();
        let conn = stream.fd();
        entry.insert(Conn {
            stream,
            generation: self.next_generation,
            readable: false,
            writable: true,
            read_closed: false,
            peer_closed: false,
            close_after_flush: false,
            last_active: Instant::now(),
            busy,
            closing: false,
        });
        self.service.connection_opened(&self.state, conn);
    }

    /// Queues a connection that is done for closing. Closing a socket is the costly part of a connection's
    /// end (on loopback it also runs the peer's side of the teardown: ~23 us of kernel time each here, for
    /// memcached as for tern); when thousands of clients leave at once, closing each as its EOF is read would
    /// make the loop's other clients wait behind all of them. Queued, at most `CLOSES_PER_TURN` are closed
    /// per turn, between the turns that serve everyone else.
    fn close(&mut self, key: usize) {
        if let Some(conn) = self.conns.get_mut(key) {
            if !conn.closing {
                conn.closing = true;
                self.closing.push_back(key);
            }
        }
    }

    fn close_now(&mut self, key: usize) {
        if self.conns.contains(key) {
            // No deregistering: closing the socket (when `conn` drops) takes it out of the poll set, since no
            // other descriptor refers to it; one system call less per close when thousands close at once.
            let conn = self.conns.remove(key);
            self.control.remove_connection();
            metrics::CONNECTIONS_OPEN.decr();
            // Before the socket is closed (when `conn` drops), so its number is not reused yet.
            self.service
                .connection_closed(&self.state, conn.stream.fd());
        }
    }

    /// Frees a connection's busy state once it holds nothing (shared-buffer mode keeps idle connections lean).
    fn settle(&mut self, key: usize) {
        let per_connection = self.cfg.buffer_mode == BufferMode::PerConnection;
        let draining = self.draining_until.is_some();
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        let idle = conn.busy.as_ref().is_none_or(|b| b.is_idle());
        if idle && !per_connection {
            conn.busy = None;
        }
        // A peer that sent its requests and closed its side still gets the replies to all of them.
        let quiet = !conn.has_pending_replies();
        let finished =
            conn.close_after_flush || draining || (conn.peer_closed && !conn.has_stalled_input());
        if quiet && finished {
            self.close(key);
        }
    }

    /// Serves one connection: writes what is pending, then goes on with a streamed reply, with requests left
    /// undecoded, or reads, decodes and handles new ones, until it would block, its output backs up, or it
    /// used its share of the turn (reads and bytes).
    fn serve(&mut self, key: usize, now: Instant) {
        if self.conns.get(key).is_none_or(|c| c.closing) {
            return;
        }
        self.turn_written = 0;
        self.turn_requests = 0;
        for _ in 0..READS_PER_TURN {
            if !self.flush(key) {
                return;
            }
            if self.turn_written >= self.cfg.max_bytes_per_turn
                || self.turn_requests >= self.cfg.max_requests_per_turn
            {
                break;
            }
            let Some(conn) = self.conns.get(key) else {
                return;
            };
            let busy = conn.busy.as_deref();
            let backed_up = busy.is_some_and(|b| b.unsent() > 0);
            let streaming = busy.is_some_and(|b| b.streaming);
            if !backed_up && busy.is_some_and(Busy::stream_first) {
                self.resume_stream(key);
                continue;
            }
            if !backed_up && !streaming && conn.has_stalled_input() {
                if let Err(e) = self.handle_own_input(key, now) {
                    tracing::debug!("io loop {}: connection {key}: {e}", self.id);
                    self.close(key);
                    return;
                }
                continue;
            }
            if !conn.readable
                || conn.peer_closed
                || conn.close_after_flush
                || backed_up
                || streaming
            {
                self.settle(key);
                return;
            }
            match self.read_and_handle(key, now) {
                Ok(true) => {}
                Ok(false) => {
                    if self.flush(key) {
                        // What the read left undecoded (the output filled up) continues next turn.
                        if self.conns.get(key).is_some_and(Conn::has_more_work) {
                            self.again_conns.push(key);
                        }
                    }
                    self.settle(key);
                    return;
                }
                Err(e) => {
                    tracing::debug!("io loop {}: connection {key}: {e}", self.id);
                    self.close(key);
                    return;
                }
            }
        }
        if self.flush(key) {
            self.settle(key);
            if self.conns.get(key).is_some_and(Conn::has_more_work) {
                self.again_conns.push(key);
            }
        }
    }

    /// One read and the requests it completes. Ok(true): the socket may hold more.
    fn read_and_handle(&mut self, key: usize, now: Instant) -> io::Result<bool> {
        let conn = &mut self.conns[key];
        let own_buffer = conn
            .busy
            .as_ref()
            .is_some_and(|b| !b.input.is_empty() || b.input.capacity() > 0);
        let (n, more) = if own_buffer {
            let busy = conn.busy.as_mut().expect("own buffer");
            let want = busy
                .needed
                .saturating_sub(busy.input.len() - busy.input_done)
                .max(MIN_OWN_READ);
            busy.input.reserve(want);
            let len = busy.input.len();
            let cap = busy.input.capacity();
            busy.input.resize(cap, 0);
            let r = conn.stream.read(&mut busy.input[len..]);
            match r {
                Ok(n) => {
                    busy.input.truncate(len + n);
                    (n, n == cap - len)
                }
                Err(e) => {
                    busy.input.truncate(len);
                    return self.read_error(key, e);
                }
            }
        } else {
            match conn.stream.read(&mut self.read_buf) {
                Ok(n) => (n, n == self.read_buf.len()),
                Err(e) => return self.read_error(key, e),
            }
        };
        let conn = &mut self.conns[key];
        if n == 0 {
            conn.peer_closed = true;
            conn.readable = false;
            return Ok(false);
        }
        if !more && !conn.read_closed {
            // A short read drained the socket; edge-triggered epoll reports the next arrival.
            conn.readable = false;
        }
        metrics::BYTES_READ.add(n as u64);
        conn.last_active = now;
        if own_buffer {
            self.handle_own_input(key, now)?;
        } else {
            let buf = std::mem::take(&mut self.read_buf);
            let result = self.handle_input(key, &buf[..n], now);
            let keep = match result {
                Ok(keep) => keep,
                Err(e) => {
                    self.read_buf = buf;
                    return Err(e);
                }
            };
            if keep > 0 {
                if let Some(conn) = self.conns.get_mut(key) {
                    let busy = conn.busy.get_or_insert_with(Box::default);
                    busy.input.reserve(keep.max(busy.needed));
                    busy.input.extend_from_slice(&buf[n - keep..n]);
                }
            }
            self.read_buf = buf;
        }
        // After a FIN the next read returns the end of the stream; no further edge will announce it.
        Ok(more
            || self
                .conns
                .get(key)
                .is_some_and(|c| c.read_closed && !c.peer_closed))
    }

    /// Decodes and handles what the connection's own buffer holds.
    fn handle_own_input(&mut self, key: usize, now: Instant) -> io::Result<()> {
        let busy = self.conns[key].busy.as_mut().expect("own buffer");
        busy.stalled = false;
        let mut input = std::mem::take(&mut busy.input);
        let done = busy.input_done;
        let keep = self.handle_input(key, &input[done..], now)?;
        if let Some(busy) = self.conns.get_mut(key).and_then(|c| c.busy.as_mut()) {
            let handled = input.len() - keep;
            if keep == 0 {
                input.clear();
                busy.input_done = 0;
            } else if handled >= input.len() / 2 {
                // Moving what is left costs less than what was handled since the last move.
                input.drain(..handled);
                busy.input_done = 0;
            } else {
                busy.input_done = handled;
            }
            if input.is_empty() && self.cfg.buffer_mode == BufferMode::Shared {
                input = Vec::new();
            }
            busy.input = input;
        }
        Ok(())
    }

    fn read_error(&mut self, key: usize, e: io::Error) -> io::Result<bool> {
        match e.kind() {
            io::ErrorKind::WouldBlock => {
                self.conns[key].readable = false;
                Ok(false)
            }
            io::ErrorKind::Interrupted => Ok(true),
            _ => Err(e),
        }
    }

    /// Decodes and handles the requests in `bytes`. Returns how many bytes at its end are left for later: an
    /// incomplete request, or requests not decoded because the output backed up.
    fn handle_input(&mut self, key: usize, bytes: &[u8], now: Instant) -> io::Result<usize> {
        let mut pos = 0;
        // Bytes the stream still owes to a frame that consumed more than it had.
        let busy = self.conns[key].busy.as_mut();
        if let Some(b) = busy {
            if b.skip > 0 {
                let n = b.skip.min(bytes.len());
                b.skip -= n;
                pos = n;
            }
            if b.needed > bytes.len() {
                return Ok(bytes.len() - pos);
            }
            b.needed = 0;
        }
        let deadline = self.cfg.request_deadline.map(|d| now + d);
        let mut frames = 0u64;
        let result = self.handle_frames(key, bytes, pos, now, deadline, &mut frames);
        metrics::REQUESTS.add(frames);
        result
    }

    fn handle_frames(
        &mut self,
        key: usize,
        bytes: &[u8],
        mut pos: usize,
        now: Instant,
        deadline: Option<Instant>,
        frames: &mut u64,
    ) -> io::Result<usize> {
        let limit = self.cfg.max_output_bytes;
        while pos < bytes.len() {
            let streaming = self.conns[key].busy.as_ref().is_some_and(|b| b.streaming);
            let budget_spent = self.turn_requests >= self.cfg.max_requests_per_turn;
            if self.out.total_len() >= limit || streaming || budget_spent {
                // Back-pressure, or the turn's budget: stop here; the rest waits in the connection until the
                // replies are out, or until the loop has served the others.
                self.conns[key]
                    .busy
                    .get_or_insert_with(Box::default)
                    .stalled = true;
                break;
            }
            match self.service.decode(&bytes[pos..]) {
                Decode::Incomplete { needed } => {
                    return self.hold_incomplete(key, bytes.len() - pos, needed, None, now);
                }
                Decode::Interim { reply, needed } => {
                    return self.hold_incomplete(key, bytes.len() - pos, needed, Some(reply), now);
                }
                Decode::Frame { request, consumed } => {
                    if consumed == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "decoder consumed nothing",
                        ));
                    }
                    let avail = bytes.len() - pos;
                    if consumed > avail {
                        self.conns[key].busy.get_or_insert_with(Box::default).skip =
                            consumed - avail;
                        pos = bytes.len();
                    } else {
                        pos += consumed;
                    }
                    if let Some(b) = self.conns[key].busy.as_mut() {
                        b.partial_since = None;
                        b.interim_sent = false;
                    }
                    let ordered = self.conns[key]
                        .busy
                        .as_ref()
                        .is_some_and(|b| !b.slots.is_empty());
                    let mark = self.out.len();
                    *frames += 1;
                    self.turn_requests += 1;
                    let deadline = self.service.deadline(&request, now).or(deadline);
                    // Reading the clock only for requests that have a deadline keeps the common path free of it.
                    let admitted = match deadline {
                        Some(d) if Instant::now() >= d => Err(Rejection::DeadlineExpired),
                        _ => self.admission.admit(now),
                    };
                    let outcome = match admitted {
                        Err(why) => {
                            metrics::REJECTED.incr(match why {
                                Rejection::InFlightLimit => 0,
                                Rejection::RateLimit => 1,
                                _ => 2,
                            });
                            self.service.reject(&request, why, &mut self.out);
                            Outcome::Reply
                        }
                        Ok(()) => {
                            let mut cx = Cx {
                                loop_state: &self.state,
                                loop_id: self.id,
                                conn: self.conns[key].stream.fd(),
                                received: now,
                                first_in_batch: *frames == 1,
                                deadline,
                                server: &self.control,
                                executor: &self.executor,
                                output_room: limit.saturating_sub(self.out.total_len()),
                            };
                            self.service.handle(&mut cx, request, &mut self.out)
                        }
                    };
                    let conn = &mut self.conns[key];
                    if ordered {
                        // Once a reply is pending, later replies queue behind it.
                        let busy = conn.busy.as_mut().expect("ordered");
                        let mut reply = Unsent::default();
                        self.out.split_into(mark, &mut reply);
                        if !reply.is_empty() {
                            busy.slots.push_back(Slot::Ready(reply));
                        }
                    }
                    match outcome {
                        Outcome::Reply => {}
                        Outcome::Stream(mut stream) => {
                            // Next in order when nothing is pending before it: it writes straight on.
                            if ordered || !run_stream(&mut stream, &mut self.out, limit) {
                                let busy = conn.busy.get_or_insert_with(Box::default);
                                busy.slots.push_back(Slot::Streaming(stream));
                                busy.streaming = true;
                            }
                        }
                        Outcome::Close => {
                            conn.close_after_flush = true;
                            return Ok(0);
                        }
                        Outcome::Defer(deferred) => {
                            let busy = conn.busy.get_or_insert_with(Box::default);
                            let seq = busy.head_seq + busy.slots.len() as u64;
                            busy.slots.push_back(Slot::Waiting);
                            self.admission.started();
                            let done = self.completions.clone();
                            let generation = conn.generation;
                            tokio::task::spawn_local(async move {
                                let reply = deferred.0.await;
                                done.done.borrow_mut().push(Completion {
                                    key,
                                    generation,
                                    seq,
                                    reply,
                                });
                                done.notify.notify_one();
                            });
                        }
                    }
                }
                Decode::Close { reply } => {
                    if let Some(reply) = reply {
                        let conn = &mut self.conns[key];
                        match conn.busy.as_mut().filter(|b| !b.slots.is_empty()) {
                            Some(b) => b.slots.push_back(Slot::Ready(Unsent::from(reply))),
                            None => self.out.extend_from_slice(reply),
                        }
                    }
                    self.conns[key].close_after_flush = true;
                    return Ok(0);
                }
            }
        }
        Ok(bytes.len() - pos)
    }

    /// Keeps the `held` bytes of an incomplete frame for later (returns how many), and writes the decoder's
    /// interim reply for that frame, once.
    fn hold_incomplete(
        &mut self,
        key: usize,
        held: usize,
        needed: Option<usize>,
        interim: Option<&'static [u8]>,
        now: Instant,
    ) -> io::Result<usize> {
        if held > self.cfg.max_frame_bytes || needed.is_some_and(|n| n > self.cfg.max_frame_bytes) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "frame over max_frame_bytes",
            ));
        }
        let busy = self.conns[key].busy.get_or_insert_with(Box::default);
        busy.needed = needed.unwrap_or(0);
        busy.partial_since.get_or_insert(now);
        if let Some(reply) = interim.filter(|_| !busy.interim_sent) {
            // In request order: behind the replies still pending for the requests before it.
            busy.interim_sent = true;
            if busy.slots.is_empty() {
                self.out.extend_from_slice(reply);
            } else {
                busy.slots.push_back(Slot::Ready(Unsent::from(reply)));
            }
        }
        Ok(held)
    }

    /// Writes the connection's pending replies and whatever the last read produced. Returns false when the
    /// connection is gone or its socket is full (it will be served again when writable).
    fn flush(&mut self, key: usize) -> bool {
        let Some(conn) = self.conns.get_mut(key) else {
            self.out.clear();
            return false;
        };
        // Replies of earlier requests still queued go first.
        let pending = conn.busy.as_mut().filter(|b| b.unsent() > 0);
        let result = match pending {
            Some(busy) => {
                self.out.drain_after(0, &mut busy.output);
                busy.output.write_to(&mut conn.stream)
            }
            None if self.out.total_len() == 0 => Ok(0),
            None => self.out.write_to(&mut conn.stream).inspect(|&n| {
                if n < self.out.total_len() {
                    let busy = conn.busy.get_or_insert_with(Box::default);
                    self.out.drain_after(n, &mut busy.output);
                }
                self.out.clear();
            }),
        };
        match result {
            Ok(n) => {
                metrics::BYTES_WRITTEN.add(n as u64);
                self.turn_written += n;
                let done = conn.busy.as_ref().is_none_or(|b| b.unsent() == 0);
                if !done {
                    conn.writable = false;
                }
                done
            }
            Err(e) => {
                self.out.clear();
                tracing::debug!("io loop {}: connection {key}: write: {e}", self.id);
                self.close(key);
                false
            }
        }
    }

    /// Runs the streamed reply at the front of the connection's slots until it ends or the output reaches the
    /// limit; once it ends, the finished replies behind it follow.
    fn resume_stream(&mut self, key: usize) {
        let limit = self.cfg.max_output_bytes;
        let Some(busy) = self.conns.get_mut(key).and_then(|c| c.busy.as_mut()) else {
            return;
        };
        let Some(Slot::Streaming(stream)) = busy.slots.front_mut() else {
            return;
        };
        if !run_stream(stream, &mut self.out, limit) {
            return;
        }
        busy.slots.pop_front();
        busy.head_seq += 1;
        busy.streaming = false;
        if !busy.slots.is_empty() {
            // What the stream wrote goes before the replies queued behind it.
            self.out.drain_after(0, &mut busy.output);
            busy.release_ready();
        }
    }

    fn apply_completions(&mut self) {
        let done = std::mem::take(&mut *self.completions.done.borrow_mut());
        let now = Instant::now();
        for c in done {
            self.admission.finished();
            let Some(conn) = self.conns.get_mut(c.key) else {
                continue;
            };
            if conn.generation != c.generation {
                continue;
            }
            let Some(busy) = conn.busy.as_mut() else {
                continue;
            };
            let Some(slot) = busy.slots.get_mut((c.seq - busy.head_seq) as usize) else {
                continue;
            };
            *slot = Slot::Ready(Unsent::from(c.reply));
            busy.release_ready();
            self.serve(c.key, now);
        }
    }

    fn serve_udp(&mut self, which: usize) {
        for _ in 0..DATAGRAMS_PER_TURN {
            let Some(sock) = self.udp.get(which) else {
                return;
            };
            let (n, peer) = match sock.recv_from(&mut self.read_buf) {
                Ok(v) => {
                    metrics::DATAGRAMS.incr();
                    v
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::debug!("io loop {}: udp recv: {e}", self.id);
                    continue;
                }
            };
            self.datagrams.clear();
            let socket = std::os::fd::AsRawFd::as_raw_fd(sock) as u64;
            self.service.datagram(
                &self.state,
                socket,
                &self.read_buf[..n],
                peer,
                &mut self.datagrams,
            );
            for d in self.datagrams.iter() {
                // A full socket buffer drops the reply, as UDP does; the client retries.
                if let Err(e) = sock.send_to(d, peer) {
                    tracing::debug!("io loop {}: udp send: {e}", self.id);
                }
            }
        }
        self.again_udp = true;
    }

    /// Closes connections that were idle or held a partial request for too long, and enforces the drain
    /// deadline.
    fn sweep(&mut self, now: Instant) {
        let idle = self.cfg.idle_timeout;
        let partial = self.cfg.partial_request_timeout;
        let mut expired = Vec::new();
        for (key, conn) in self.conns.iter().filter(|(_, c)| !c.closing) {
            let pending = conn.has_pending_replies();
            let stale_idle =
                idle.is_some_and(|t| !pending && now.duration_since(conn.last_active) >= t);
            let stale_partial = partial.is_some_and(|t| {
                conn.busy
                    .as_ref()
                    .and_then(|b| b.partial_since)
                    .is_some_and(|since| now.duration_since(since) >= t)
            });
            if stale_idle {
                metrics::IDLE_CLOSED.incr();
            }
            if stale_idle || stale_partial {
                expired.push(key);
            }
        }
        for key in expired {
            self.close(key);
        }
    }

    /// Graceful shutdown: stop accepting, close connections with nothing in flight, and let the others finish
    /// their replies until the grace period ends.
    fn start_drain(&mut self) {
        self.draining_until = Some(Instant::now() + self.cfg.shutdown_grace);
        for mut l in std::mem::take(&mut self.listeners) {
            let _ = self.poll.get_ref().registry().deregister(l.source());
        }
        for mut u in std::mem::take(&mut self.udp) {
            let _ = self.poll.get_ref().registry().deregister(&mut u);
        }
        let keys: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
        for key in keys {
            self.settle(key);
        }
    }
}
