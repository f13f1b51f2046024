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
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, UdpSocket, UnixListener};
use mio::{Events, Interest, Poll, Token};
use slab::Slab;
use tokio::io::unix::AsyncFd;
use tokio::sync::{mpsc, Notify};

use crate::acceptor::Handoff;
use crate::config::{RuntimeConfig, MAX_ADDRESSES};
use crate::control::ServerControl;
use crate::metrics;
use crate::output::Output;
use crate::overload::Admission;
use crate::service::{CloseReason, Datagrams, LoopInfo, Service};
use crate::stream::Listener;
use crate::tls::Tls;

/// Wakes a loop blocked in its own poll: shutdown, a connection handed over by the acceptor.
pub(crate) const WAKER: Token = Token(usize::MAX - 4);
/// Listener `i` (TCP ones, then the Unix one) is `LISTENERS + i`; UDP socket `i` is `UDP_SOCKETS + i`.
/// Connections are slab keys, far below both.
const LISTENERS: usize = usize::MAX - 4 * MAX_ADDRESSES;
const UDP_SOCKETS: usize = usize::MAX - 2 * MAX_ADDRESSES;
/// Reads one connection may do per turn before the loop serves the others (fairness).
const READS_PER_TURN: usize = 4;
/// Connections closed per turn of the loop (see `IoLoop::close`): about 0.75 ms of closing here.
const CLOSES_PER_TURN: usize = 32;

mod accept;
mod conn;
mod deferred;
mod feed;
mod framing;
mod udp;

use conn::Conn;

pub(crate) struct LoopSetup<S: Service> {
    pub id: usize,
    /// The loop's poll set, made by the server so that its waker could be handed out before the loop starts.
    pub poll: Poll,
    pub loops: usize,
    pub service: Arc<S>,
    pub config: Arc<RuntimeConfig>,
    pub control: ServerControl,
    pub executor: tern_executor::Executor,
    /// One per TCP address (reuseport), with the TLS it serves if any; none when an acceptor thread hands
    /// connections over.
    pub listeners: Vec<(std::net::TcpListener, Option<Tls>)>,
    /// A clone of the server's Unix listener: every loop accepts from it (the kernel hands each connection
    /// to one of them).
    pub unix_listener: Option<std::os::unix::net::UnixListener>,
    /// One per UDP address.
    pub udp: Vec<std::net::UdpSocket>,
    pub handoff: Option<mpsc::UnboundedReceiver<Handoff>>,
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

/// A deferred reply, finished by its task, waiting for the loop to put it in place.
struct Completion {
    key: usize,
    generation: u32,
    /// The reply's slot; `None` for an unordered reply ([`crate::Deferred::unordered`]).
    seq: Option<u64>,
    reply: Vec<u8>,
    /// When the request was read, and its series in the service's latency family (if it has one).
    received: Instant,
    kind: Option<usize>,
}

#[derive(Default)]
struct Completions {
    done: RefCell<Vec<Completion>>,
    notify: Notify,
}

/// Feed connections with more to write, by slab key and generation, filled from any thread (`feed.rs`).
type WokenFeeds = Arc<std::sync::Mutex<Vec<(usize, u32)>>>;

enum Wake {
    Io,
    Completions,
    Shutdown,
    Handoff(Option<Handoff>),
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
    handoff: Option<mpsc::UnboundedReceiver<Handoff>>,
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
    /// Work left over from a turn that hit a per-turn budget: each connection at most once (`Conn::queued_again`).
    again_conns: Vec<usize>,
    /// Counts turns, so a connection an event already served this turn is not served again from
    /// `again_conns` in the same turn (`Conn::served_in`): every connection gets one share per turn.
    turn_number: u32,
    /// Connections that are done, closed at most `CLOSES_PER_TURN` per turn (see `close`).
    closing: VecDeque<usize>,
    again_accept: bool,
    again_udp: bool,
    draining_until: Option<Instant>,
    /// Where the loop's milliseconds count from (see `millis`).
    epoch: Instant,
    /// Feed connections with more to write (see `feed`).
    woken_feeds: WokenFeeds,
    /// The kinds (and how many of each) of the requests answered on the loop from the read being handled,
    /// recorded together in the service's latency family when the read is done (`framing.rs`).
    batch_kinds: Vec<(usize, u64)>,
}

impl<S: Service> IoLoop<S> {
    fn new(setup: LoopSetup<S>) -> io::Result<Self> {
        let poll = setup.poll;
        let mut listeners: Vec<Listener> = setup
            .listeners
            .into_iter()
            .map(|(l, tls)| Listener::Tcp(TcpListener::from_std(l), tls))
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
            turn_number: 0,
            closing: VecDeque::new(),
            again_accept: false,
            again_udp: false,
            batch_kinds: Vec::new(),
            draining_until: None,
            epoch: Instant::now(),
            woken_feeds: Default::default(),
        })
    }

    /// `t` in the loop's milliseconds: since the loop started, modulo 2^32 (compared with `wrapping_sub`;
    /// see `MAX_IDLE_TIMEOUT`).
    fn millis(&self, t: Instant) -> u32 {
        t.saturating_duration_since(self.epoch).as_millis() as u32
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
        self.turn_number = self.turn_number.wrapping_add(1);
        let again_conns = std::mem::take(&mut self.again_conns);
        for &key in &again_conns {
            if let Some(conn) = self.conns.get_mut(key) {
                conn.queued_again = false;
            }
        }
        let (again_accept, again_udp) = (
            std::mem::take(&mut self.again_accept),
            std::mem::take(&mut self.again_udp),
        );
        // A feed's waker wakes the poll (see `feed.rs`): without that event there is no list to look at.
        let mut feeds_woke = false;
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
                    WAKER => feeds_woke = true,
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
        if feeds_woke {
            self.serve_woken_feeds();
        }
        let now = Instant::now();
        for key in again_conns {
            let turn = self.turn_number;
            if self.conns.get(key).is_some_and(|c| c.served_in != turn) {
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

    /// Closes connections that were idle or held a partial request for too long, and enforces the drain
    /// deadline.
    fn sweep(&mut self, now: Instant) {
        let now_ms = self.millis(now);
        let idle = self.cfg.idle_timeout;
        let partial = self.cfg.partial_request_timeout;
        let mut expired = Vec::new();
        for (key, conn) in self.conns.iter().filter(|(_, c)| !c.closing) {
            // A feed is never idle: it writes when it has something to say.
            let pending = conn.has_pending_replies() || conn.is_feed();
            let stale_idle = idle.is_some_and(|t| {
                let idle_ms = now_ms.wrapping_sub(conn.last_active_ms);
                !pending && u128::from(idle_ms) >= t.as_millis()
            });
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
            self.close(key, CloseReason::IdleTimeout);
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
