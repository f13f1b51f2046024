//! tern load: an open- and closed-loop load generator for tern's benchmarks. Each worker
//! thread drives its share of the connections from one epoll loop, encoding requests straight
//! into reusable per-connection buffers and checking every reply (a get must return exactly the
//! value a set of that key writes; a pacer decision must bid one of its request's candidates
//! between the floor and the maximum bid; misses, no-bids and errors are counted by kind). In
//! open-loop mode requests follow a fixed or Poisson schedule and latency counts from the
//! scheduled send time, so a stalled server cannot hide queueing (coordinated omission);
//! closed-loop mode keeps a fixed number of requests in flight for peak throughput. Results are
//! HDR histograms merged across threads, reported as a table, JSON ([`Report`]) and PNG or SVG
//! charts, with the client's and optionally the server's CPU use. Protocols: memcached text and
//! meta over TCP and UDP, tern pacer's gateway protocol (batches of bid requests, billing
//! notices) and HTTP/1.1; a new protocol is a variant of [`Protocol`] and an arm in the codec.

pub mod cli;
pub mod config;
mod engine;
mod link;
pub mod plot;
mod protocol;
pub mod report;
mod run;
pub mod stats;
mod workload;

pub use cli::{run, LoadArgs};
pub use config::{
    Arrival, Config, HttpWorkload, IdRange, KeyDistribution, Mix, Mode, Op, PacerWorkload,
    PriceRange, Protocol, SizeRange, Transport, DEFAULT_CAMPAIGNS,
};
pub use report::{compare_table, Report};
pub use run::{process_cpu, process_cpu_seconds, run_load, ProcessCpu};
pub use stats::Outcome;
