//! The tern runtime: the thread model of the seeds as a library. N I/O loops (one per core by default), each
//! a tokio current-thread runtime that owns its connections, reads into a per-loop shared buffer, decodes
//! with the service's pure decoder, runs cheap handlers inline and defers the rest (to the CPU executor or to
//! outbound calls) while keeping replies in request order. The runtime owns everything about a connection:
//! accepting (SO_REUSEPORT listeners or one acceptor thread), TLS (rustls, [`tls`]), pipelining,
//! back-pressure, limits, timeouts, overload answers from the I/O thread, and graceful shutdown. A service is a [`Service`] implementation: a
//! decoder, a handler and the replies for refusals.

//!
//! ```text
//!  clients ─► listener ─► tern-acceptor thread ──round-robin──┐   (or one SO_REUSEPORT listener per loop)
//!                                                             ▼
//!  tern-io-N, one per core: a tokio current-thread runtime whose main task polls the loop's own epoll set
//!    accept (io_loop/accept.rs) ─► connections in a slab (io_loop/conn.rs)
//!    read + decode + admit + handle (io_loop/framing.rs) ─► replies in request order, written (io_loop/reply.rs)
//!    UDP datagrams (io_loop/udp.rs); deferred replies, timers, outbound calls as tokio tasks (outbound.rs)
//!          │ cx.offload(f)                                   ▲ the result wakes the caller's loop
//!          ▼                                                 │
//!  tern-executor workers: a fixed pool, idle workers on a LIFO stack, jobs past their queue timeout refused
//!  main thread: signals, then the graceful shutdown (server.rs, control.rs)
//! ```
//!
//! docs/architecture.md draws it in full and follows one request through these files.

mod acceptor;
pub mod background;
pub mod config;
mod control;
mod io_loop;
pub mod metrics;
pub mod outbound;
mod output;
mod overload;
pub mod server;
pub mod service;
mod stream;
pub mod tls;

pub use config::{BufferMode, ConfigError, RuntimeConfig, Spread};
pub use control::{ServerControl, ServerSocket, SocketKind};
pub use outbound::{
    collect_all, Backend, BackendRole, CallError, ClientCodec, Decoded, PoolConfig, Reachability,
};
pub use output::Output;
pub use server::{AddressInUse, RunningServer, Server, Stopped, Transport};
pub use service::{
    CloseReason, Cx, Datagrams, Decode, Deferred, Feed, FeedStep, LoopInfo, Outcome, Rejection,
    ReplyStream, Service, Step,
};
pub use tls::{Tls, TlsError, TlsSettings};
