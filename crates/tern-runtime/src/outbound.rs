//! Outbound calls from the I/O loops, never blocking: a per-loop pool of connections to one backend, requests
//! pipelined over each connection, a deadline on every call, and [`collect_all`] to await several calls with
//! one deadline and keep whatever arrived (folly's `collectAll` with a timeout).
//!
//! A [`Backend`] belongs to one loop (it is `!Send`): keep it in the service's per-loop state, so calls made by
//! handlers on that loop reuse its connections and their replies wake that loop.
//!
//! Whether a backend can be reached is the process's business, not a loop's: every loop's pools to one
//! address share a [`Reachability`], which logs one warning when connections to it start failing (its
//! address, the cause, what happens meanwhile and what to check) and one info line when it is reached
//! again (how long it was out), never a line per failed call.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::fmt::Display;
use std::future::Future;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, Notify};

/// The client side of a protocol: encode a request, decode one reply from the front of the input.
pub trait ClientCodec: 'static {
    type Request;
    type Response: 'static;
    /// Writes `request`. `id` numbers the call on its connection: a protocol whose replies name their call
    /// (a Thrift sequence id) writes it and gives it back from [`ClientCodec::decode`]; others ignore it.
    fn encode(&self, request: &Self::Request, id: i32, out: &mut Vec<u8>);
    /// `Ok(None)`: the reply is incomplete. `Ok(Some(decoded))`: one reply. `Err`: the stream cannot be
    /// decoded; the connection is dropped and its calls fail.
    fn decode(&self, input: &[u8]) -> Result<Option<Decoded<Self::Response>>, String>;
}

/// One reply read from a connection.
#[derive(Debug)]
pub struct Decoded<R> {
    pub reply: R,
    /// Bytes of input it took.
    pub consumed: usize,
    /// The id of the call it answers, for protocols whose replies name their call (they may then come in any
    /// order: a slow call does not hold up the ones behind it); `None`: it answers the oldest call waiting.
    pub id: Option<i32>,
}

impl<R> Decoded<R> {
    /// A reply to the oldest call waiting.
    pub fn in_order(reply: R, consumed: usize) -> Self {
        Decoded {
            reply,
            consumed,
            id: None,
        }
    }
}

/// Why a call produced no reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("deadline passed")]
    Timeout,
    #[error("backend connection failed: {0}")]
    Connection(String),
    #[error("too many calls pending on the backend")]
    Overloaded,
    #[error("backend sent an undecodable reply: {0}")]
    Protocol(String),
}

/// Limits of a backend pool.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// Connections per loop to the backend; calls are spread round-robin.
    pub connections: usize,
    pub connect_timeout: Duration,
    /// Calls waiting for a reply on one connection; one more fails at once with `Overloaded`.
    pub max_pending: usize,
    /// Largest reply accepted; past it the connection is dropped.
    pub max_reply_bytes: usize,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            connections: 2,
            connect_timeout: Duration::from_millis(500),
            max_pending: 4096,
            max_reply_bytes: 16 << 20,
        }
    }
}

/// What a backend is to the service calling it, for the lines logged when it becomes unreachable and when
/// it is back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BackendRole {
    /// What it is, before its address: "graph shard", "cache node".
    pub what: &'static str,
    /// What happens while it is out and what to check, after the cause: "answers leave out ... until it is
    /// back; check that ... runs there".
    pub meanwhile: &'static str,
}

impl BackendRole {
    /// A backend the caller did not describe.
    pub const GENERIC: BackendRole = BackendRole {
        what: "backend",
        meanwhile:
            "calls to it fail until it is back; check that it runs and is reachable from here",
    };
}

/// Whether one backend can be reached, shared by every pool of the process that calls it (one per loop):
/// the first failed connection after a success logs a warning, the first success after failures an info
/// line, so an outage is two lines whatever the request rate and the number of loops.
pub struct Reachability {
    addr: SocketAddr,
    role: BackendRole,
    /// Fast path for the usual case, a connection made to a backend that was up.
    down: AtomicBool,
    state: Mutex<ReachState>,
}

struct ReachState {
    /// Since when it has been out, while it is.
    down_since: Option<Instant>,
    /// When it was last found back: a failure of an attempt begun before then is old news.
    up_since: Option<Instant>,
    /// Attempts that failed in the current outage.
    failures: u64,
}

/// Every [`Reachability`] in use, by address and role.
static REACHABILITY: Mutex<BTreeMap<(SocketAddr, BackendRole), Weak<Reachability>>> =
    Mutex::new(BTreeMap::new());

impl Reachability {
    /// The process's view of `addr` in `role`, shared with every other caller asking for the same.
    pub fn of(addr: SocketAddr, role: BackendRole) -> Arc<Reachability> {
        let mut all = REACHABILITY.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(shared) = all.get(&(addr, role)).and_then(Weak::upgrade) {
            return shared;
        }
        all.retain(|_, r| r.strong_count() > 0);
        let shared = Arc::new(Reachability {
            addr,
            role,
            down: AtomicBool::new(false),
            state: Mutex::new(ReachState {
                down_since: None,
                up_since: None,
                failures: 0,
            }),
        });
        all.insert((addr, role), Arc::downgrade(&shared));
        shared
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn role(&self) -> BackendRole {
        self.role
    }

    /// It is out: the last attempt to reach it failed.
    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::Acquire)
    }

    /// An attempt begun at `attempted` failed with `cause`. Logs a warning if that starts an outage;
    /// answers whether it did.
    pub fn failed(&self, attempted: Instant, cause: &dyn Display) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.up_since.is_some_and(|up| attempted < up) {
            // Begun before another caller found it back: says nothing about it now.
            return false;
        }
        state.failures += 1;
        if state.down_since.is_some() {
            return false;
        }
        state.down_since = Some(Instant::now());
        self.down.store(true, Ordering::Release);
        let BackendRole { what, meanwhile } = self.role;
        tracing::warn!("{what} {} is unreachable: {cause}; {meanwhile}", self.addr);
        true
    }

    /// An attempt to reach it succeeded. Logs an info line if that ends an outage; answers whether it did.
    pub fn reached(&self) -> bool {
        if !self.is_down() {
            return false;
        }
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let Some(since) = state.down_since.take() else {
            return false;
        };
        let now = Instant::now();
        state.up_since = Some(now);
        let failures = std::mem::take(&mut state.failures);
        self.down.store(false, Ordering::Release);
        tracing::info!(
            "{} {} is reachable again after {:.1} s out ({failures} failed connection attempt{})",
            self.role.what,
            self.addr,
            now.duration_since(since).as_secs_f64(),
            if failures == 1 { "" } else { "s" }
        );
        true
    }
}

type Waiter<R> = oneshot::Sender<Result<R, CallError>>;

/// One pipelined connection: requests are appended to `queue` and written in batches by its writer task;
/// its reader task answers `waiting`, by the id a reply names or else in order.
struct Channel<C: ClientCodec> {
    queue: RefCell<Vec<u8>>,
    /// Calls sent and not answered, oldest first, with their ids.
    waiting: RefCell<VecDeque<(i32, Waiter<C::Response>)>>,
    next_id: Cell<i32>,
    /// Its replies have named their calls so far.
    names_calls: Cell<bool>,
    wake_writer: Notify,
    broken: Cell<bool>,
}

impl<C: ClientCodec> Channel<C> {
    fn fail_all(&self, err: CallError) {
        self.broken.set(true);
        self.queue.borrow_mut().clear();
        for (_, w) in self.waiting.borrow_mut().drain(..) {
            let _ = w.send(Err(err.clone()));
        }
        // Wake the writer so it notices and exits.
        self.wake_writer.notify_one();
    }

    /// Queues `request` for the writer and returns where its reply will come.
    fn send(
        &self,
        codec: &C,
        request: &C::Request,
        max_pending: usize,
    ) -> Result<oneshot::Receiver<Result<C::Response, CallError>>, CallError> {
        let mut waiting = self.waiting.borrow_mut();
        if waiting.len() >= max_pending && self.names_calls.get() {
            // Replies that name their call can be waited for by id only: calls whose callers gave up
            // make room (a late reply to one is ignored).
            waiting.retain(|(_, w)| !w.is_closed());
        }
        if waiting.len() >= max_pending {
            return Err(CallError::Overloaded);
        }
        let (tx, rx) = oneshot::channel();
        let id = self.next_id.get();
        self.next_id.set(id.wrapping_add(1));
        codec.encode(request, id, &mut self.queue.borrow_mut());
        waiting.push_back((id, tx));
        Ok(rx)
    }

    /// Hands `decoded` to the call it answers. Err: a reply in order with no call waiting.
    fn answer(&self, decoded: Decoded<C::Response>) -> Result<(), CallError> {
        let mut waiting = self.waiting.borrow_mut();
        self.names_calls.set(decoded.id.is_some());
        let waiter = match decoded.id {
            None => waiting.pop_front().map(|(_, w)| w),
            // Usually the oldest; a reply to a call no longer waiting (its caller gave up and the channel
            // dropped it to make room) is ignored.
            Some(id) => match waiting.iter().position(|(i, _)| *i == id) {
                Some(at) => waiting.remove(at).map(|(_, w)| w),
                None => return Ok(()),
            },
        };
        match waiter {
            Some(w) => {
                let _ = w.send(Ok(decoded.reply));
                Ok(())
            }
            None => Err(CallError::Protocol("reply without a request".into())),
        }
    }
}

/// A per-loop pool of pipelined connections to one backend.
pub struct Backend<C: ClientCodec> {
    addr: SocketAddr,
    reachability: RefCell<Arc<Reachability>>,
    codec: Rc<C>,
    cfg: PoolConfig,
    channels: RefCell<Vec<Option<Rc<Channel<C>>>>>,
    next: Cell<usize>,
}

impl<C: ClientCodec> Backend<C> {
    pub fn new(addr: SocketAddr, codec: C, cfg: PoolConfig) -> Rc<Self> {
        Backend::with_role(addr, codec, cfg, BackendRole::GENERIC)
    }

    /// A pool to `addr` in `role`: what the lines logged when it is unreachable and back call it.
    pub fn with_role(addr: SocketAddr, codec: C, cfg: PoolConfig, role: BackendRole) -> Rc<Self> {
        let connections = cfg.connections.max(1);
        Rc::new(Backend {
            addr,
            reachability: RefCell::new(Reachability::of(addr, role)),
            codec: Rc::new(codec),
            cfg,
            channels: RefCell::new((0..connections).map(|_| None).collect()),
            next: Cell::new(0),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Describes the backend as `role` from now on.
    pub fn set_role(&self, role: BackendRole) {
        *self.reachability.borrow_mut() = Reachability::of(self.addr, role);
    }

    /// Whether the process can reach the backend, as its last connection attempt found.
    pub fn reachability(&self) -> Arc<Reachability> {
        self.reachability.borrow().clone()
    }

    /// Sends `request` and waits for its reply until `deadline`. Must run on a loop (a tokio LocalSet).
    pub async fn call(
        &self,
        request: &C::Request,
        deadline: Instant,
    ) -> Result<C::Response, CallError> {
        let channel = self.channel(deadline).await?;
        let rx = channel.send(&self.codec, request, self.cfg.max_pending)?;
        channel.wake_writer.notify_one();
        // On timeout the reply still arrives later and is dropped: the connection stays in step.
        match tokio::time::timeout_at(deadline.into(), rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(CallError::Connection("connection closed".into())),
            Err(_) => Err(CallError::Timeout),
        }
    }

    /// The next connection round-robin, connecting it if it is not up.
    async fn channel(&self, deadline: Instant) -> Result<Rc<Channel<C>>, CallError> {
        let slot = self.next.get();
        self.next.set(slot.wrapping_add(1));
        let slot = slot % self.channels.borrow().len();
        if let Some(ch) = self.channels.borrow()[slot]
            .as_ref()
            .filter(|c| !c.broken.get())
        {
            return Ok(ch.clone());
        }
        let attempted = Instant::now();
        let connect_limit = attempted + self.cfg.connect_timeout;
        let limit = deadline.min(connect_limit);
        let stream =
            match tokio::time::timeout_at(limit.into(), TcpStream::connect(self.addr)).await {
                Ok(Ok(s)) => {
                    self.reachability().reached();
                    s
                }
                Ok(Err(e)) => {
                    self.reachability().failed(attempted, &e);
                    return Err(CallError::Connection(e.to_string()));
                }
                Err(_) => {
                    // Only the connect timeout says the backend is out; the call's own deadline, shorter,
                    // says nothing about it.
                    if connect_limit <= deadline {
                        self.reachability().failed(
                            attempted,
                            &format_args!(
                                "no connection within the connect timeout ({} ms)",
                                self.cfg.connect_timeout.as_millis()
                            ),
                        );
                    }
                    return Err(CallError::Timeout);
                }
            };
        // Another call may have connected this slot while we waited.
        if let Some(ch) = self.channels.borrow()[slot]
            .as_ref()
            .filter(|c| !c.broken.get())
        {
            return Ok(ch.clone());
        }
        let _ = stream.set_nodelay(true);
        let channel = Rc::new(Channel {
            queue: RefCell::new(Vec::new()),
            waiting: RefCell::new(VecDeque::new()),
            next_id: Cell::new(0),
            names_calls: Cell::new(false),
            wake_writer: Notify::new(),
            broken: Cell::new(false),
        });
        let (mut reader, mut writer) = stream.into_split();
        let ch = channel.clone();
        tokio::task::spawn_local(async move {
            let mut batch = Vec::new();
            loop {
                ch.wake_writer.notified().await;
                if ch.broken.get() {
                    return;
                }
                std::mem::swap(&mut batch, &mut ch.queue.borrow_mut());
                if batch.is_empty() {
                    continue;
                }
                if let Err(e) = writer.write_all(&batch).await {
                    ch.fail_all(CallError::Connection(e.to_string()));
                    return;
                }
                batch.clear();
            }
        });
        let ch = channel.clone();
        let codec = self.codec.clone();
        let max_reply = self.cfg.max_reply_bytes;
        tokio::task::spawn_local(async move {
            let mut buf: Vec<u8> = Vec::with_capacity(16 << 10);
            loop {
                if buf.capacity() - buf.len() < 4096 {
                    buf.reserve(16 << 10);
                }
                match reader.read_buf(&mut buf).await {
                    Ok(0) => {
                        ch.fail_all(CallError::Connection(
                            "backend closed the connection".into(),
                        ));
                        return;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        ch.fail_all(CallError::Connection(e.to_string()));
                        return;
                    }
                }
                let mut pos = 0;
                loop {
                    match codec.decode(&buf[pos..]) {
                        Ok(Some(decoded)) => {
                            pos += decoded.consumed.max(1);
                            if let Err(e) = ch.answer(decoded) {
                                ch.fail_all(e);
                                return;
                            }
                        }
                        Ok(None) => break,
                        Err(e) => {
                            ch.fail_all(CallError::Protocol(e));
                            return;
                        }
                    }
                }
                buf.drain(..pos);
                if buf.len() > max_reply {
                    ch.fail_all(CallError::Protocol("reply over max_reply_bytes".into()));
                    return;
                }
            }
        });
        self.channels.borrow_mut()[slot] = Some(channel.clone());
        Ok(channel)
    }
}

/// Awaits every call until `deadline` and returns each one's result in order: a call not finished by then is
/// `Err(CallError::Timeout)`, the others keep their replies (partial results, never all-or-nothing).
pub async fn collect_all<T, F>(
    calls: impl IntoIterator<Item = F>,
    deadline: Instant,
) -> Vec<Result<T, CallError>>
where
    F: Future<Output = Result<T, CallError>>,
{
    let bounded = calls.into_iter().map(|call| async move {
        match tokio::time::timeout_at(deadline.into(), call).await {
            Ok(result) => result,
            Err(_) => Err(CallError::Timeout),
        }
    });
    futures::future::join_all(bounded).await
}
