//! The per-thread event loop: non-blocking sockets on one epoll set, requests encoded straight
//! into each connection's reusable write buffer, replies decoded in place from its reusable read
//! buffer, and one write per connection per wake-up however many requests became due.
//!
//! epoll is used directly (not through mio) because open-loop pacing needs sub-millisecond
//! timeouts: `epoll_pwait2` takes a nanosecond timeout, where mio rounds up to milliseconds,
//! which would add up to 1 ms of send lateness to every measured latency.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use rand::rngs::SmallRng;
use tern_memcache_proto::client::{encode_udp_header, parse_udp_header, UdpHeader};

use crate::config::{Arrival, Config, Mode, Op, Transport};
use crate::link::{Link, TlsConnector};
use crate::protocol::{Codec, Decoded, Request};
use crate::stats::{Outcome, Tally, ThreadStats};
use crate::workload::{thread_rng, Pacer};

/// Owns an epoll instance.
struct Epoll {
    fd: RawFd,
}

impl Epoll {
    fn new() -> io::Result<Self> {
        // SAFETY: plain syscall; the result is checked.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Epoll { fd })
    }

    fn control(&self, op: libc::c_int, fd: RawFd, events: u32, token: usize) -> io::Result<()> {
        let mut event = libc::epoll_event {
            events,
            u64: token as u64,
        };
        // SAFETY: `event` outlives the call; fds are owned by the caller.
        if unsafe { libc::epoll_ctl(self.fd, op, fd, &mut event) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits up to `timeout` (forever when `None`); answers how many events were filled in.
    fn wait(
        &self,
        events: &mut [libc::epoll_event],
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        let spec = timeout.map(|t| libc::timespec {
            tv_sec: t.as_secs() as libc::time_t,
            tv_nsec: t.subsec_nanos() as libc::c_long,
        });
        let spec_ptr = spec
            .as_ref()
            .map_or(std::ptr::null(), |s| s as *const libc::timespec);
        // SAFETY: `events` is a valid buffer of the given length; `spec_ptr` is null or valid.
        let n = unsafe {
            libc::epoll_pwait2(
                self.fd,
                events.as_mut_ptr(),
                events.len() as libc::c_int,
                spec_ptr,
                std::ptr::null(),
            )
        };
        if n < 0 {
            let err = io::Error::last_os_error();
            return if err.kind() == io::ErrorKind::Interrupted {
                Ok(0)
            } else {
                Err(err)
            };
        }
        Ok(n as usize)
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        // SAFETY: we own the fd.
        unsafe { libc::close(self.fd) };
    }
}

/// CPU time this thread has used.
fn thread_cpu_ns() -> u64 {
    // SAFETY: rusage is plain old data; all-zero is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid out-parameter.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    ns(usage.ru_utime) + ns(usage.ru_stime)
}

/// One request on the wire.
#[derive(Debug, Clone, Copy)]
struct Pending {
    request: Request,
    /// How many ids the request has (in the connection's id queue).
    keys: u32,
    intended_ns: u64,
    sent_ns: u64,
}

/// Schedule state shared by both connection kinds.
struct Schedule {
    /// Intended send time of the next request (open loop).
    next_ns: f64,
}

struct TcpConn {
    stream: Option<Link>,
    wbuf: Vec<u8>,
    wpos: usize,
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    pending: VecDeque<Pending>,
    /// Pending follow-ups (not counted against the pipeline depth).
    follow_ups: usize,
    /// Key ids of the pending requests, in order.
    keys: VecDeque<u64>,
    writable_armed: bool,
    retry_at_ns: u64,
    schedule: Schedule,
}

struct UdpSlot {
    request_id: u16,
    pending: Pending,
    keys: Vec<u64>,
    reply: Vec<u8>,
    next_sequence: u16,
    total: u16,
    /// Datagrams that arrived ahead of their turn (rare on loopback).
    early: Vec<(u16, Vec<u8>)>,
}

struct UdpConn {
    socket: UdpSocket,
    slots: Vec<UdpSlot>,
    /// Indexes of slots with a request in flight.
    active: Vec<usize>,
    free: Vec<usize>,
    next_request_id: u16,
    schedule: Schedule,
}

enum Conns {
    Tcp(Vec<TcpConn>),
    Udp(Vec<UdpConn>),
}

/// What one worker thread is told to do.
pub(crate) struct ThreadPlan<'a> {
    pub config: &'a Config,
    pub codec: Codec,
    pub thread: usize,
    /// This thread's connections are `first_connection..first_connection + connections`.
    pub first_connection: usize,
    pub connections: usize,
    /// Requests this thread may send, if the run is bounded by count.
    pub budget: Option<u64>,
    /// Completed requests, for the progress line.
    pub progress: &'a AtomicU64,
}

/// Connected sockets of one thread, ready to run.
pub(crate) struct Worker<'a> {
    plan: ThreadPlan<'a>,
    epoll: Epoll,
    conns: Conns,
    tls: Option<TlsConnector>,
}

/// Initial read buffer per connection; grows for replies that do not fit.
const READ_BUFFER: usize = 16 * 1024;
const UDP_DATAGRAM_MAX: usize = 64 * 1024;
/// Wake at least this often to check timeouts, stop time and progress.
const MAX_SLEEP: Duration = Duration::from_millis(50);
/// An open-loop send due sooner than this is waited for by polling epoll without a timeout.
const POLL_BELOW: Duration = Duration::from_micros(20);
const RECONNECT_DELAY_NS: u64 = 100_000_000;

impl<'a> Worker<'a> {
    /// Opens this thread's connections.
    pub fn connect(plan: ThreadPlan<'a>) -> anyhow::Result<Self> {
        let config = plan.config;
        let epoll = Epoll::new().context("epoll_create1")?;
        let tls = match &config.tls {
            Some(options) => Some(TlsConnector::new(options, config.server)?),
            None => None,
        };
        let mut schedules = (0..plan.connections).map(|i| Schedule {
            next_ns: first_send_ns(config, plan.first_connection + i),
        });
        let conns = match config.transport {
            Transport::Tcp => {
                let mut conns = Vec::with_capacity(plan.connections);
                for token in 0..plan.connections {
                    let stream = crate::link::connect(config.server, tls.as_ref())
                        .with_context(|| format!("connecting to {}", config.server))?;
                    epoll.control(
                        libc::EPOLL_CTL_ADD,
                        stream.as_raw_fd(),
                        libc::EPOLLIN as u32,
                        token,
                    )?;
                    conns.push(TcpConn {
                        stream: Some(stream),
                        wbuf: Vec::with_capacity(4096),
                        wpos: 0,
                        rbuf: vec![0; READ_BUFFER],
                        rstart: 0,
                        rend: 0,
                        pending: VecDeque::with_capacity(config.pipeline),
                        follow_ups: 0,
                        keys: VecDeque::with_capacity(config.pipeline * config.multiget),
                        writable_armed: false,
                        retry_at_ns: 0,
                        schedule: schedules.next().expect("one schedule per connection"),
                    });
                }
                Conns::Tcp(conns)
            }
            Transport::Udp => {
                let mut conns = Vec::with_capacity(plan.connections);
                for token in 0..plan.connections {
                    let local: SocketAddr = if config.server.is_ipv4() {
                        ([0, 0, 0, 0], 0).into()
                    } else {
                        ([0u16; 8], 0).into()
                    };
                    let socket = UdpSocket::bind(local).context("binding a UDP socket")?;
                    socket
                        .connect(config.server)
                        .with_context(|| format!("connecting UDP to {}", config.server))?;
                    socket.set_nonblocking(true)?;
                    epoll.control(
                        libc::EPOLL_CTL_ADD,
                        socket.as_raw_fd(),
                        libc::EPOLLIN as u32,
                        token,
                    )?;
                    let slots = (0..config.pipeline)
                        .map(|_| UdpSlot {
                            request_id: 0,
                            pending: Pending {
                                request: Request::Memcache(Op::Get),
                                keys: 0,
                                intended_ns: 0,
                                sent_ns: 0,
                            },
                            keys: Vec::with_capacity(config.multiget),
                            reply: Vec::with_capacity(2048),
                            next_sequence: 0,
                            total: 0,
                            early: Vec::new(),
                        })
                        .collect();
                    conns.push(UdpConn {
                        socket,
                        slots,
                        active: Vec::with_capacity(config.pipeline),
                        free: (0..config.pipeline).rev().collect(),
                        next_request_id: (plan.first_connection + token) as u16,
                        schedule: schedules.next().expect("one schedule per connection"),
                    });
                }
                Conns::Udp(conns)
            }
        };
        Ok(Worker {
            plan,
            epoll,
            conns,
            tls,
        })
    }

    /// Runs until the stop time or request budget, then waits (up to the timeout) for replies.
    pub fn run(self, start: Instant) -> anyhow::Result<ThreadStats> {
        let Worker {
            plan,
            epoll,
            mut conns,
            tls,
        } = self;
        let config = plan.config;
        let warmup_ns = config.warmup().as_nanos() as u64;
        let stop_ns = config
            .duration_s
            .map_or(u64::MAX, |d| warmup_ns + (d * 1e9) as u64);
        let timeout_ns = config.timeout().as_nanos() as u64;
        let expected_seconds = config
            .duration_s
            .map_or(16, |d| (config.warmup_s + d) as usize + 2);
        let mut stats = ThreadStats::new(expected_seconds);
        let pacer = match config.mode {
            Mode::Open { rate, arrival } => Some(Pacer::new(
                rate / config.connections as f64,
                arrival == Arrival::Poisson,
            )?),
            Mode::Closed => None,
        };
        // Tight timer slack: open-loop sends should leave on time, not up to 50 µs late.
        // SAFETY: prctl with integer arguments.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong) };
        let mut loop_state = Loop {
            config,
            codec: plan.codec,
            rng: thread_rng(config.seed, plan.thread),
            pacer,
            start,
            warmup_ns,
            budget: plan.budget,
            stats: &mut stats,
            batch: Vec::with_capacity(config.multiget),
            completed: 0,
            tls,
        };
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
        let mut cpu_at_warmup = None;
        let mut drain_deadline_ns = None;
        let mut stopped_by_time = false;
        let mut all_down_since_ns: Option<u64> = None;
        let mut now = loop_state.now();
        loop {
            if cpu_at_warmup.is_none() && now >= warmup_ns {
                cpu_at_warmup = Some(thread_cpu_ns());
            }
            let issuing = now < stop_ns && loop_state.budget != Some(0);
            if !issuing && drain_deadline_ns.is_none() {
                drain_deadline_ns = Some(now + timeout_ns);
                stopped_by_time = now >= stop_ns;
            }
            // While draining, open-loop requests scheduled before the stop still go out (late),
            // so the slowest requests of the run are measured rather than left out.
            let send_until = if issuing {
                Some(now)
            } else if stopped_by_time && loop_state.pacer.is_some() {
                Some(now.min(stop_ns - 1))
            } else {
                None
            };
            let mut wake_ns = drain_deadline_ns
                .unwrap_or(stop_ns)
                .min(now + MAX_SLEEP.as_nanos() as u64);
            let mut in_flight = 0;
            match &mut conns {
                Conns::Tcp(list) => {
                    let mut connected = 0;
                    for (token, conn) in list.iter_mut().enumerate() {
                        let oldest = conn.pending.front().map(|p| p.sent_ns);
                        if oldest.is_some_and(|sent| now.saturating_sub(sent) >= timeout_ns) {
                            // A request/reply stream cannot skip a reply: start afresh.
                            let why = "no reply within the timeout";
                            loop_state.fail_tcp(conn, Outcome::Timeout, now, &why);
                        }
                        if let Some(limit) = send_until {
                            if conn.stream.is_none() && now >= conn.retry_at_ns {
                                loop_state.reconnect(&epoll, conn, token, now);
                            }
                            if conn.stream.is_some() {
                                loop_state.issue_tcp(conn, now, limit);
                            }
                        }
                        if let Err(e) = flush(&epoll, conn, token) {
                            loop_state.fail_tcp(conn, Outcome::Dropped, now, &e);
                        }
                        if issuing
                            && conn.pending.len() - conn.follow_ups < config.pipeline
                            && loop_state.pacer.is_some()
                        {
                            wake_ns = wake_ns.min(conn.schedule.next_ns as u64);
                        }
                        in_flight += conn.pending.len();
                        connected += usize::from(conn.stream.is_some());
                    }
                    // A server that stays unreachable ends the run instead of stalling it.
                    if connected > 0 {
                        all_down_since_ns = None;
                    } else if now - *all_down_since_ns.get_or_insert(now) >= timeout_ns {
                        loop_state.budget = Some(0);
                        loop_state
                            .stats
                            .note_connection_error(&"server unreachable: stopped the run");
                    }
                }
                Conns::Udp(list) => {
                    for conn in list.iter_mut() {
                        loop_state.expire_udp(conn, now, timeout_ns);
                        if let Some(limit) = send_until {
                            loop_state.issue_udp(conn, now, limit);
                        }
                        if issuing && !conn.free.is_empty() && loop_state.pacer.is_some() {
                            wake_ns = wake_ns.min(conn.schedule.next_ns as u64);
                        }
                        in_flight += conn.active.len();
                    }
                }
            }
            if let Some(deadline) = drain_deadline_ns {
                if in_flight == 0 || now >= deadline {
                    if stopped_by_time {
                        loop_state.count_unsent(&conns, stop_ns);
                    }
                    loop_state.fail_all(&mut conns, Outcome::Timeout);
                    break;
                }
            }
            let now_before_wait = loop_state.now();
            let mut timeout = Duration::from_nanos(wake_ns.saturating_sub(now_before_wait));
            if timeout < POLL_BELOW {
                // Polled, not slept: arming a timer this short costs more than the gap (on a VM,
                // an exit per timer; a quarter of the client's CPU at 160k sends per second), and
                // the send it waits for would leave late.
                timeout = Duration::ZERO;
            }
            let ready = epoll
                .wait(&mut events, Some(timeout))
                .context("epoll_pwait2")?;
            now = loop_state.now();
            for event in &events[..ready] {
                let token = event.u64 as usize;
                match &mut conns {
                    Conns::Tcp(list) => {
                        let conn = &mut list[token];
                        if conn.stream.is_none() {
                            continue;
                        }
                        if event.events & (libc::EPOLLIN | libc::EPOLLERR | libc::EPOLLHUP) as u32
                            != 0
                        {
                            loop_state.read_tcp(conn, now);
                        }
                        if event.events & libc::EPOLLOUT as u32 != 0 && conn.stream.is_some() {
                            if let Err(e) = flush(&epoll, conn, token) {
                                loop_state.fail_tcp(conn, Outcome::Dropped, now, &e);
                            }
                        }
                    }
                    Conns::Udp(list) => loop_state.read_udp(&mut list[token], now),
                }
            }
            plan.progress
                .fetch_add(std::mem::take(&mut loop_state.completed), Ordering::Relaxed);
        }
        plan.progress
            .fetch_add(loop_state.completed, Ordering::Relaxed);
        stats.cpu_ns = cpu_at_warmup.map_or(0, |at| thread_cpu_ns().saturating_sub(at));
        Ok(stats)
    }
}

/// Intended time of the first request of connection `index`: connections are staggered evenly
/// over one gap so that fixed-rate arrivals are evenly spaced overall.
fn first_send_ns(config: &Config, index: usize) -> f64 {
    match config.mode {
        Mode::Open { rate, .. } => 1e9 / rate * index as f64,
        Mode::Closed => 0.0,
    }
}

/// Writes as much of the write buffer as the socket takes (and the records a TLS session holds); arms
/// EPOLLOUT for the rest.
fn flush(epoll: &Epoll, conn: &mut TcpConn, token: usize) -> io::Result<()> {
    let Some(stream) = conn.stream.as_mut() else {
        return Ok(());
    };
    while conn.wpos < conn.wbuf.len() {
        match stream.write(&conn.wbuf[conn.wpos..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => conn.wpos += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    let written = conn.wpos == conn.wbuf.len();
    if written {
        conn.wbuf.clear();
        conn.wpos = 0;
    }
    let done = written && !stream.flush_pending()?;
    if done == conn.writable_armed {
        let events = if done {
            libc::EPOLLIN
        } else {
            libc::EPOLLIN | libc::EPOLLOUT
        } as u32;
        epoll.control(libc::EPOLL_CTL_MOD, stream.as_raw_fd(), events, token)?;
        conn.writable_armed = !done;
    }
    Ok(())
}

/// Per-thread state of the loop that every connection handler uses.
struct Loop<'s> {
    config: &'s Config,
    codec: Codec,
    rng: SmallRng,
    pacer: Option<Pacer>,
    start: Instant,
    warmup_ns: u64,
    budget: Option<u64>,
    stats: &'s mut ThreadStats,
    batch: Vec<u64>,
    completed: u64,
    tls: Option<TlsConnector>,
}

impl Loop<'_> {
    fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Takes the next request slot due by `limit`: its intended time, or `None` if nothing is
    /// due (closed loop: everything is due at once).
    fn due(&mut self, schedule: &mut Schedule, limit: u64) -> Option<u64> {
        if self.budget == Some(0) {
            return None;
        }
        let intended = match &self.pacer {
            None => limit,
            Some(pacer) => {
                if schedule.next_ns > limit as f64 {
                    return None;
                }
                let intended = schedule.next_ns as u64;
                schedule.next_ns += pacer.next_gap_ns(&mut self.rng);
                intended
            }
        };
        if let Some(budget) = self.budget.as_mut() {
            *budget -= 1;
        }
        Some(intended)
    }

    /// Draws the next request and its ids into `self.batch`.
    fn draw(&mut self) -> Request {
        self.codec.next_request(&mut self.rng, &mut self.batch)
    }

    fn issue_tcp(&mut self, conn: &mut TcpConn, now: u64, limit: u64) {
        while conn.pending.len() - conn.follow_ups < self.config.pipeline {
            let Some(intended_ns) = self.due(&mut conn.schedule, limit) else {
                break;
            };
            let request = self.draw();
            // Generated keys are valid by construction (checked by Config::validate).
            if self
                .codec
                .encode(&mut conn.wbuf, request, &self.batch)
                .is_err()
            {
                self.stats
                    .record_failure(Outcome::ClientError, intended_ns >= self.warmup_ns);
                continue;
            }
            conn.keys.extend(self.batch.iter().copied());
            conn.pending.push_back(Pending {
                request,
                keys: self.batch.len() as u32,
                intended_ns,
                sent_ns: now,
            });
        }
    }

    /// Queues the request the codec wants sent after the reply it just decoded, if any.
    fn follow_up_tcp(&mut self, conn: &mut TcpConn, now: u64) {
        if let Some(request) = self.codec.follow_up(&mut conn.wbuf, &mut self.batch) {
            conn.keys.extend(self.batch.iter().copied());
            conn.pending.push_back(Pending {
                request,
                keys: self.batch.len() as u32,
                intended_ns: now,
                sent_ns: now,
            });
            conn.follow_ups += 1;
        }
    }

    fn complete(&mut self, p: &Pending, tally: &Tally, now: u64) {
        let measured = p.intended_ns >= self.warmup_ns;
        if p.request.is_follow_up() {
            self.stats.record_follow_up(tally, measured);
            return;
        }
        self.completed += 1;
        let counted = self.codec.counted(p.request, p.keys as usize);
        self.stats.record(
            tally,
            counted,
            now.saturating_sub(p.intended_ns),
            now.saturating_sub(p.sent_ns),
            now,
            measured,
        );
    }

    /// Records a request that will get no reply.
    fn fail(&mut self, p: &Pending, outcome: Outcome) {
        let measured = p.intended_ns >= self.warmup_ns;
        if p.request.is_follow_up() {
            let mut tally = Tally::default();
            tally.add(outcome);
            self.stats.record_follow_up(&tally, measured);
        } else {
            self.stats.record_failure(outcome, measured);
        }
    }

    fn read_tcp(&mut self, conn: &mut TcpConn, now: u64) {
        while self.read_tcp_once(conn, now) {}
    }

    /// One read and the replies it completes; true when the stream may hold more that no readiness event
    /// will announce (a TLS session's decrypted records).
    fn read_tcp_once(&mut self, conn: &mut TcpConn, now: u64) -> bool {
        if conn.rstart == conn.rend {
            conn.rstart = 0;
            conn.rend = 0;
        } else if conn.rend == conn.rbuf.len() {
            if conn.rstart > 0 {
                conn.rbuf.copy_within(conn.rstart..conn.rend, 0);
                conn.rend -= conn.rstart;
                conn.rstart = 0;
            } else {
                // One reply larger than the buffer: grow, within the reply size limit.
                let limit = self.config.max_value + 64 * 1024;
                if conn.rbuf.len() >= limit {
                    let err = io::Error::other("reply exceeds the size limit");
                    self.fail_tcp(conn, Outcome::ProtocolError, now, &err);
                    return false;
                }
                conn.rbuf.resize((conn.rbuf.len() * 2).min(limit), 0);
            }
        }
        let stream = conn.stream.as_mut().expect("read on a live connection");
        let space = conn.rbuf.len() - conn.rend;
        let again = match stream.read(&mut conn.rbuf[conn.rend..]) {
            Ok(0) => {
                let err = io::Error::from(io::ErrorKind::UnexpectedEof);
                self.fail_tcp(conn, Outcome::Dropped, now, &err);
                return false;
            }
            Ok(n) => {
                conn.rend += n;
                n == space && stream.holds_input()
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                return false
            }
            Err(e) => {
                self.fail_tcp(conn, Outcome::Dropped, now, &e);
                return false;
            }
        };
        while let Some(&p) = conn.pending.front() {
            let input = &conn.rbuf[conn.rstart..conn.rend];
            let keys = &conn.keys;
            match self
                .codec
                .decode(input, p.request, p.keys as usize, |i| keys[i])
            {
                Ok(Decoded::Incomplete) => break,
                Ok(Decoded::Done { consumed, tally }) => {
                    conn.rstart += consumed;
                    conn.pending.pop_front();
                    conn.keys.drain(..p.keys as usize);
                    if p.request.is_follow_up() {
                        conn.follow_ups -= 1;
                    }
                    self.complete(&p, &tally, now);
                    self.follow_up_tcp(conn, now);
                }
                Err(fault) => {
                    self.fail_tcp(conn, fault.outcome, now, &fault);
                    return false;
                }
            }
        }
        if conn.pending.is_empty() && conn.rstart < conn.rend {
            let err = io::Error::other("bytes from the server with no request outstanding");
            self.fail_tcp(conn, Outcome::ProtocolError, now, &err);
            return false;
        }
        again && conn.stream.is_some()
    }

    /// Closes a broken connection: the head request gets `head`, the rest are dropped.
    fn fail_tcp(
        &mut self,
        conn: &mut TcpConn,
        head: Outcome,
        now: u64,
        why: &dyn std::fmt::Display,
    ) {
        self.stats.note_connection_error(why);
        conn.stream = None;
        conn.retry_at_ns = now + RECONNECT_DELAY_NS;
        let mut outcome = head;
        for p in conn.pending.drain(..) {
            self.fail(&p, outcome);
            outcome = Outcome::Dropped;
        }
        conn.follow_ups = 0;
        conn.keys.clear();
        conn.wbuf.clear();
        conn.wpos = 0;
        conn.rstart = 0;
        conn.rend = 0;
        conn.writable_armed = false;
    }

    fn reconnect(&mut self, epoll: &Epoll, conn: &mut TcpConn, token: usize, now: u64) {
        match crate::link::connect(self.config.server, self.tls.as_ref()) {
            Ok(stream) => {
                if epoll
                    .control(
                        libc::EPOLL_CTL_ADD,
                        stream.as_raw_fd(),
                        libc::EPOLLIN as u32,
                        token,
                    )
                    .is_ok()
                {
                    conn.stream = Some(stream);
                }
            }
            Err(e) => {
                self.stats.note_connection_error(&e);
                conn.retry_at_ns = now + RECONNECT_DELAY_NS;
            }
        }
    }

    fn issue_udp(&mut self, conn: &mut UdpConn, now: u64, limit: u64) {
        while let Some(&slot_index) = conn.free.last() {
            let Some(intended_ns) = self.due(&mut conn.schedule, limit) else {
                break;
            };
            let request = self.draw();
            let slot = &mut conn.slots[slot_index];
            let request_id = conn.next_request_id;
            conn.next_request_id = conn.next_request_id.wrapping_add(1);
            // The reply buffer doubles as the send buffer: it is free until the reply arrives.
            slot.reply.clear();
            encode_udp_header(
                &mut slot.reply,
                UdpHeader {
                    request_id,
                    sequence: 0,
                    total: 1,
                },
            );
            let measured = intended_ns >= self.warmup_ns;
            if self
                .codec
                .encode(&mut slot.reply, request, &self.batch)
                .is_err()
            {
                self.stats.record_failure(Outcome::ClientError, measured);
                continue;
            }
            if conn.socket.send(&slot.reply).is_err() {
                // A full socket buffer or an ICMP error from a closed port: the request is lost.
                self.stats.record_failure(Outcome::Dropped, measured);
                continue;
            }
            conn.free.pop();
            slot.request_id = request_id;
            slot.pending = Pending {
                request,
                keys: self.batch.len() as u32,
                intended_ns,
                sent_ns: now,
            };
            slot.keys.clear();
            slot.keys.extend_from_slice(&self.batch);
            slot.reply.clear();
            slot.next_sequence = 0;
            slot.total = 0;
            slot.early.clear();
            conn.active.push(slot_index);
        }
    }

    fn expire_udp(&mut self, conn: &mut UdpConn, now: u64, timeout_ns: u64) {
        let mut i = 0;
        while i < conn.active.len() {
            let slot_index = conn.active[i];
            let p = conn.slots[slot_index].pending;
            if now.saturating_sub(p.sent_ns) >= timeout_ns {
                self.stats
                    .record_failure(Outcome::Timeout, p.intended_ns >= self.warmup_ns);
                conn.active.swap_remove(i);
                conn.free.push(slot_index);
            } else {
                i += 1;
            }
        }
    }

    fn read_udp(&mut self, conn: &mut UdpConn, now: u64) {
        let mut datagram = [0u8; UDP_DATAGRAM_MAX];
        loop {
            let n = match conn.socket.recv(&mut datagram) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // WouldBlock ends the batch; ICMP errors surface here and show up as timeouts.
                Err(_) => return,
            };
            let Ok((header, payload)) = parse_udp_header(&datagram[..n]) else {
                self.stats.record_failure(Outcome::ProtocolError, true);
                continue;
            };
            // Replies to requests that already timed out are ignored.
            let Some(position) = conn
                .active
                .iter()
                .position(|&s| conn.slots[s].request_id == header.request_id)
            else {
                continue;
            };
            let slot_index = conn.active[position];
            let slot = &mut conn.slots[slot_index];
            // memcached may answer one request with several messages (1.6 sends each VALUE of
            // a multi-get as its own message), each with its own sequence numbers: reassemble
            // message by message, and try to decode after each complete one.
            if slot.next_sequence == slot.total {
                slot.next_sequence = 0;
                slot.total = header.total;
            }
            if header.total != slot.total {
                self.stats.record_failure(
                    Outcome::ProtocolError,
                    slot.pending.intended_ns >= self.warmup_ns,
                );
                conn.active.swap_remove(position);
                conn.free.push(slot_index);
                continue;
            }
            if header.sequence == slot.next_sequence {
                slot.reply.extend_from_slice(payload);
                slot.next_sequence += 1;
                while let Some(i) = slot
                    .early
                    .iter()
                    .position(|(seq, _)| *seq == slot.next_sequence)
                {
                    let (_, bytes) = slot.early.swap_remove(i);
                    slot.reply.extend_from_slice(&bytes);
                    slot.next_sequence += 1;
                }
            } else if header.sequence > slot.next_sequence
                && !slot.early.iter().any(|(s, _)| *s == header.sequence)
            {
                slot.early.push((header.sequence, payload.to_vec()));
            }
            if slot.next_sequence < slot.total {
                continue;
            }
            let p = slot.pending;
            let keys = &slot.keys;
            let outcome = self
                .codec
                .decode(&slot.reply, p.request, p.keys as usize, |i| keys[i]);
            match outcome {
                Ok(Decoded::Incomplete) => continue,
                Ok(Decoded::Done { consumed, tally }) if consumed == slot.reply.len() => {
                    self.complete(&p, &tally, now)
                }
                _ => self
                    .stats
                    .record_failure(Outcome::ProtocolError, p.intended_ns >= self.warmup_ns),
            }
            conn.active.swap_remove(position);
            conn.free.push(slot_index);
        }
    }

    /// Counts requests an open-loop schedule wanted sent before the stop but that never went
    /// out (the server fell behind or a connection was down).
    fn count_unsent(&mut self, conns: &Conns, until_ns: u64) {
        let Some(pacer) = &self.pacer else { return };
        let schedules: Vec<f64> = match conns {
            Conns::Tcp(c) => c.iter().map(|c| c.schedule.next_ns).collect(),
            Conns::Udp(c) => c.iter().map(|c| c.schedule.next_ns).collect(),
        };
        for mut next in schedules {
            while next < until_ns as f64 {
                if next >= self.warmup_ns as f64 {
                    self.stats.unsent += 1;
                }
                next += pacer.next_gap_ns(&mut self.rng);
            }
        }
    }

    /// Ends the run: whatever is still in flight gets `outcome`.
    fn fail_all(&mut self, conns: &mut Conns, outcome: Outcome) {
        match conns {
            Conns::Tcp(list) => {
                for conn in list {
                    for p in conn.pending.drain(..) {
                        self.fail(&p, outcome);
                    }
                    conn.follow_ups = 0;
                }
            }
            Conns::Udp(list) => {
                for conn in list {
                    for slot_index in conn.active.drain(..) {
                        let p = conn.slots[slot_index].pending;
                        self.stats
                            .record_failure(outcome, p.intended_ns >= self.warmup_ns);
                    }
                }
            }
        }
    }
}
