//! The contract between the runtime and a service: pure decoding, a handler, and the replies the runtime
//! asks for when it refuses work itself.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Waker;
use std::time::Instant;

use crate::control::ServerControl;
use crate::output::Output;

pub use tern_wire::Decode;

/// What a handler did with a request.
pub enum Outcome {
    /// The reply (possibly empty) is in the output buffer.
    Reply,
    /// The reply is in the output buffer; close the connection once it is written.
    Close,
    /// The reply comes later: the future runs on this loop and yields the reply bytes. Replies still go out in
    /// request order.
    Defer(Deferred),
    /// The reply is what is in the output buffer, then what the stream produces: the runtime runs the stream
    /// a step at a time while the connection's unsent output is under `max_output_bytes`, and pauses it (and
    /// the connection's later requests) until the socket drains. For replies too big to build at once (a
    /// multi-get of many keys, a large batch): memory stays bounded when the peer reads slowly or never.
    Stream(ReplyStream),
    /// The reply is what is in the output buffer; then the connection becomes a one-way feed until the peer
    /// closes it: the runtime writes what the feed produces whenever the socket has room, and reads and drops
    /// whatever the peer sends (memcached's `watch`, whose log lines come from other threads). The rest of
    /// the input read with this request is dropped too.
    Feed(Feed),
}

/// Why a connection closed, as [`Service::connection_closed`] hears it (memcached's `conn_close` reasons).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CloseReason {
    /// The peer closed it, or the service asked to close after its reply ([`Outcome::Close`]).
    #[default]
    Normal,
    /// The decoder refused what the peer sent ([`Decode::Close`]), or reading or writing failed.
    Error,
    /// Idle, or holding a partial request, for longer than the configured timeout.
    IdleTimeout,
    /// The server is shutting down.
    Shutdown,
}

/// What a [`Feed`] did when the runtime asked it for more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedStep {
    /// It wrote something; it may have more.
    Wrote,
    /// Nothing to write now: it keeps the waker it was given and wakes it when it has more.
    Idle,
}

/// A connection's endless output (see [`Outcome::Feed`]), produced a bounded step at a time. The waker may
/// be woken from any thread; the connection's loop then asks the feed again. Dropped when the connection
/// closes.
pub struct Feed(Box<FeedFn>);

/// A feed's step: writes what it has into the output, or keeps the waker.
type FeedFn = dyn FnMut(&mut Output, &Waker) -> FeedStep;

impl Feed {
    pub fn new(step: impl FnMut(&mut Output, &Waker) -> FeedStep + 'static) -> Self {
        Feed(Box::new(step))
    }

    /// Asks the feed for more, as the runtime does when the connection's socket has room.
    pub fn step(&mut self, out: &mut Output, waker: &Waker) -> FeedStep {
        (self.0)(out, waker)
    }
}

/// Whether a [`ReplyStream`] has more to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    More,
    Done,
}

/// The rest of a reply, produced a bounded step at a time (see [`Outcome::Stream`]). Each call writes the
/// next part into the output; a step should be small (one value, a few hundred entries) since the runtime
/// checks the limits between steps.
pub struct ReplyStream(pub(crate) Box<dyn FnMut(&mut Output) -> Step>);

impl ReplyStream {
    pub fn new(step: impl FnMut(&mut Output) -> Step + 'static) -> Self {
        ReplyStream(Box::new(step))
    }
}

/// A reply that is not ready yet. It runs as a task on the connection's own loop.
pub struct Deferred {
    pub(crate) reply: Pin<Box<dyn Future<Output = Vec<u8>>>>,
    pub(crate) close_after: bool,
    pub(crate) unordered: bool,
}

impl Deferred {
    pub fn new(fut: impl Future<Output = Vec<u8>> + 'static) -> Self {
        Deferred {
            reply: Box::pin(fut),
            close_after: false,
            unordered: false,
        }
    }

    /// The reply leaves as soon as it is ready, ahead of the replies to earlier requests still pending, and
    /// later requests do not wait for it: for protocols whose replies name their request (a Thrift reply's
    /// sequence id), so that one slow call does not hold up the calls pipelined behind it (head-of-line
    /// blocking). Replies of a connection's ordered requests keep their order among themselves.
    pub fn unordered(mut self) -> Self {
        self.unordered = true;
        self
    }

    /// The connection closes once this reply is written (an HTTP/1.0 request, or `Connection: close`): no
    /// later request of the connection is read.
    pub fn then_close(mut self) -> Self {
        self.close_after = true;
        self
    }
}

/// Why the runtime refused a request without running its handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// The server has `max_in_flight` requests in flight.
    InFlightLimit,
    /// Over the configured rate limit.
    RateLimit,
    /// Waited too long for a CPU worker (the queue timeout).
    QueueTimeout,
    /// Passed its deadline before its handler or a CPU worker took it.
    DeadlineExpired,
    /// The CPU pool's queue is full.
    QueueFull,
    /// The server is shutting down.
    ShuttingDown,
    /// The handler's offloaded work panicked (the worker survives).
    Failed,
}

impl From<tern_executor::Rejected> for Rejection {
    fn from(r: tern_executor::Rejected) -> Self {
        match r {
            tern_executor::Rejected::QueueFull => Rejection::QueueFull,
            tern_executor::Rejected::QueueTimeout => Rejection::QueueTimeout,
            tern_executor::Rejected::DeadlineExpired => Rejection::DeadlineExpired,
            tern_executor::Rejected::ShutDown => Rejection::ShuttingDown,
            tern_executor::Rejected::Panicked => Rejection::Failed,
        }
    }
}

impl Rejection {
    pub fn as_str(self) -> &'static str {
        match self {
            Rejection::InFlightLimit => "in-flight limit",
            Rejection::RateLimit => "rate limit",
            Rejection::QueueTimeout => "queue timeout",
            Rejection::DeadlineExpired => "deadline expired",
            Rejection::QueueFull => "queue full",
            Rejection::ShuttingDown => "shutting down",
            Rejection::Failed => "handler failed",
        }
    }
}

/// Facts about the loop a piece of per-loop state is made for.
#[derive(Debug, Clone)]
pub struct LoopInfo {
    /// 0-based index of the loop.
    pub id: usize,
    /// Number of loops in the server.
    pub loops: usize,
}

/// What a handler may use besides the request: its loop's state, the time the request was read, its
/// deadline, and the server's controls.
pub struct Cx<'a, S: Service> {
    pub loop_state: &'a Rc<S::Loop>,
    pub loop_id: usize,
    /// The connection the request came on: its socket's file descriptor (unique among open connections;
    /// what memcached's logs call the connection), as given to [`Service::connection_opened`].
    pub conn: u64,
    /// When the bytes holding this request were read.
    pub received: Instant,
    /// This is the first request decoded from the bytes of one read (the replies before it are out).
    pub first_in_batch: bool,
    /// This request's deadline: from its protocol ([`Service::deadline`]), else the configured
    /// `request_deadline` from `received`, if one is set.
    pub deadline: Option<Instant>,
    pub server: &'a ServerControl,
    pub executor: &'a tern_executor::Executor,
    /// How many more bytes (copied or shared) the output may take before the runtime stops producing for
    /// this connection. A handler whose reply would pass it may write part and return [`Outcome::Stream`]
    /// for the rest (the limit is soft: a reply past it is still sent whole).
    pub output_room: usize,
}

impl<S: Service> Cx<'_, S> {
    /// Runs `f` on the CPU pool (folly's `.via(executor)`): the future resolves on this loop. A job that waits
    /// past the queue timeout or this request's deadline is not run and yields the reason, so the handler can
    /// answer "overloaded" in its protocol.
    pub fn offload<F, T>(&self, f: F) -> impl Future<Output = Result<T, Rejection>> + 'static
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let job = match self.deadline {
            Some(deadline) => self.executor.offload_before(deadline, f),
            None => self.executor.offload(f),
        };
        async move { job.await.map_err(Rejection::from) }
    }
}

/// Replies to UDP datagrams, built in one buffer. Each `push` makes one datagram.
#[derive(Default)]
pub struct Datagrams {
    buf: Vec<u8>,
    ends: Vec<usize>,
}

impl Datagrams {
    /// Starts a datagram and returns the buffer to write it into; `end` closes it.
    pub fn begin(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }
    /// Ends the datagram whose bytes were written since the previous `end`.
    pub fn end(&mut self) {
        self.ends.push(self.buf.len());
    }
    pub fn push(&mut self, datagram: &[u8]) {
        self.buf.extend_from_slice(datagram);
        self.end();
    }
    pub fn len(&self) -> usize {
        self.ends.len()
    }
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        let mut start = 0;
        self.ends.iter().map(move |&end| {
            let d = &self.buf[start..end];
            start = end;
            d
        })
    }
    pub fn clear(&mut self) {
        self.buf.clear();
        self.ends.clear();
    }
}

/// A service on the runtime. Decoding is pure (bytes in, frames out); the handler runs on the I/O loop that
/// read the request and either answers inline or defers (to the CPU executor, to outbound calls...).
///
/// Work on a loop runs for requests: while a loop has nothing in flight it sleeps in its own poll set, not in
/// tokio, so a task a service spawns on the loop outside [`Outcome::Defer`] only runs promptly while requests
/// are in flight. Keep background work on its own thread.
pub trait Service: Send + Sync + Sized + 'static {
    /// One decoded request, usually borrowing from the input (zero-copy).
    type Request<'a>;
    /// State each loop owns (never shared across threads): caches, outbound pools, per-loop counters.
    type Loop: 'static;

    fn init_loop(self: &Arc<Self>, info: &LoopInfo) -> Self::Loop;

    fn decode<'a>(&self, input: &'a [u8]) -> Decode<Self::Request<'a>>;

    /// Decodes with a byte of state the runtime keeps per connection for the service (0 when it opens), for
    /// a service whose connections settle on one of several protocols at their first bytes (memcached's
    /// `-B auto` picks text or binary once per connection). The default ignores it.
    fn decode_conn<'a>(&self, input: &'a [u8], _conn_state: &mut u8) -> Decode<Self::Request<'a>> {
        self.decode(input)
    }

    fn handle(
        &self,
        cx: &mut Cx<'_, Self>,
        request: Self::Request<'_>,
        out: &mut Output,
    ) -> Outcome;

    /// The deadline the request carries in its protocol (a timeout field, an absolute expiry), if any. It
    /// replaces the configured `request_deadline` for this request: a request already past it when its turn
    /// comes is answered [`Rejection::DeadlineExpired`] without running, and [`Cx::deadline`] carries it to
    /// `offload` and outbound calls.
    fn deadline(&self, _request: &Self::Request<'_>, _received: Instant) -> Option<Instant> {
        None
    }

    /// The service's name in metrics shared by every service (`tern_service_connections_open{service}`);
    /// empty (the default) leaves it out of them.
    fn name(&self) -> &'static str {
        ""
    }

    /// Where the runtime records how long each request took on the server, by kind (see
    /// [`Service::request_kind`]): from the read that completed it to its reply being ready to write, for
    /// a request answered on the loop the time of the whole read's batch (its replies go out together),
    /// for a deferred one the time to its completion. `None` (the default) records nothing. UDP datagrams
    /// are the service's own (see [`Service::datagram`]).
    fn request_latency(&self) -> Option<&'static tern_metrics::HistogramFamily> {
        None
    }

    /// The request's series in [`Service::request_latency`]'s family (an index into its label values).
    fn request_kind(&self, _request: &Self::Request<'_>) -> usize {
        0
    }

    /// How many requests of work the frame holds, for the per-turn budget (`max_requests_per_turn`): 1 for a
    /// single request, its count for a frame that batches many (a gateway's batch of 1,000 bids is 1,000 of
    /// the budget, so a connection pipelining such batches holds the loop one batch per turn, not 64).
    fn weight(&self, _request: &Self::Request<'_>) -> usize {
        1
    }

    /// Answers a request the runtime refused (overload), in the service's protocol, from the I/O thread.
    fn reject(&self, request: &Self::Request<'_>, why: Rejection, out: &mut Vec<u8>);

    /// The reply sent to a connection refused because the server is at `max_connections`, before closing it.
    fn refuse_connection(&self, _out: &mut Vec<u8>) {}

    /// Called on the loop when it takes connection `conn` (see [`Cx::conn`]), before any of its requests.
    fn connection_opened(&self, _state: &Rc<Self::Loop>, _conn: u64) {}

    /// Called on the loop when connection `conn` starts holding an incomplete request, and again when the
    /// decoder learns its length: `needed` is the length the decoder said the whole request has (`None`
    /// while it does not know, e.g. a command line not yet ended). The connection's next request handled
    /// (or its close) ends it.
    fn request_incomplete(&self, _state: &Rc<Self::Loop>, _conn: u64, _needed: Option<usize>) {}

    /// Called on the loop when connection `conn` closes (the client's close, an error, a timeout, a
    /// protocol close), after its last request; not for connections still open when a loop exits at
    /// shutdown.
    fn connection_closed(&self, _state: &Rc<Self::Loop>, _conn: u64, _why: CloseReason) {}

    /// Handles one UDP datagram from `peer`, received on the loop's UDP socket `socket` (its file descriptor,
    /// what memcached's logs call a UDP connection), pushing reply datagrams. Services without UDP keep the
    /// default.
    fn datagram(
        &self,
        _state: &Rc<Self::Loop>,
        _socket: u64,
        _datagram: &[u8],
        _peer: SocketAddr,
        _replies: &mut Datagrams,
    ) {
    }
}
