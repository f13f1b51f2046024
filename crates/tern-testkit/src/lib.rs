//! The test kit: what the workspace's tests (and the experiments of `tern-bench`) repeat, in one place. Free
//! loopback ports ([`net`]), child processes killed and reaped on drop and the check that a peer program is
//! installed ([`process`]), and the real systems tern is compared with and talks to, each started on free
//! ports and stopped on drop: memcached, Redis, PostgreSQL and twemproxy ([`peers`]); Apache Thrift's Python
//! client generated from the repository's IDL files ([`thrift`]); test certificates ([`tls`]); and charts a test draws, opened back
//! ([`files`]). Everything binds
//! 127.0.0.1 only and waits a bounded time.

pub mod files;
pub mod net;
pub mod peers;
pub mod process;
pub mod thrift;
pub mod tls;

pub use net::{connect, free_port, free_udp_port, stats_reply, wait_for_port};
pub use peers::{Memcached, Nutcracker, Postgres, Redis};
pub use process::{have, start_with_port_file, ChildGuard};
