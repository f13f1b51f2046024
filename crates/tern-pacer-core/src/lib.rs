//! The budget pacer's decision core, with no I/O, no threads and no tokio: integer money and the gateway's
//! frames (from `tern-pacer-proto`, re-exported as [`money`] and [`proto`]), campaigns' creatives, seats and
//! deals and the exchange restrictions they meet ([`ads`]), a per-loop [`ledger`] of budget
//! slices (reserve on bid, settle on billing, release on loss or timeout, idempotent notices) fed by a
//! [`coordinator`] so the hot path touches no shared counter, immutable configuration [`snapshot`]s parsed
//! from the [`campaigns`] file format, pacing [`strategy`]s, the loop's decision code ([`pacer`]), the
//! shared [`state`] of a node and the [`board`] its loops publish to, and the [`record`]s the crash journal
//! keeps. The same input always gives the same answer, so the service, the simulator and the tests run the
//! same code. [`fixtures`] holds the small configurations tests, benches and fuzz targets share.

pub mod ads;
pub mod board;
pub mod campaigns;
pub mod coordinator;
pub mod fixtures;
pub mod ledger;
pub mod pacer;
pub mod record;
pub mod snapshot;
pub mod state;
pub mod strategy;

pub use tern_pacer_proto::{gateway as proto, money};
