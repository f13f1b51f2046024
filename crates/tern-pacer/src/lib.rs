//! `tern pacer`, the budget pacer at the end of the bidding line: it decides, for each bid request a gateway
//! sends, whether a campaign spends money on it and at what price, so that no campaign goes over budget and
//! spend is spread over each campaign's flight. The core is pure and deterministic (the same input gives the
//! same answer): integer money in currency-typed newtypes ([`money`]), the gateway's length-prefixed binary
//! protocol ([`proto`]; both from `tern-pacer-proto`), a per-loop ledger of budget slices (reserve on bid, settle on billing, release on
//! loss or timeout, idempotent notices) fed by a [`coordinator`] so the hot path touches no shared counter,
//! immutable configuration snapshots and pacing strategies, and a seeded simulator ([`sim`]) that runs the
//! same decision code. Around it: the service on the tern runtime ([`service`]), which also speaks HTTP/1.1
//! on the same port for OpenRTB 2.6 bid requests and notice URLs (`tern-http`, [`openrtb`]), the per-campaign
//! admin JSON ([`admin`]), the configuration file watcher ([`config`]) or PostgreSQL as the source of truth
//! ([`pg`]), budget leases in Redis for several nodes sharing budgets ([`cluster`]), and a crash journal
//! of the ledgers so settled spend and in-flight reservations survive `kill -9` ([`journal`]). [`fixtures`]
//! holds the small configurations its tests, benches and fuzz targets share.

pub mod admin;
mod background;
mod cli;
pub mod cluster;
pub mod config;
pub mod coordinator;
pub mod fixtures;
pub mod journal;
pub mod ledger;
pub mod openrtb;
pub mod pacer;
pub mod pg;
pub mod record;
pub mod service;
pub mod sim;
pub mod snapshot;
pub mod strategy;

/// The gateway protocol and the money types live in `tern-pacer-proto` (shared with gateways and `tern load`).
pub use tern_pacer_proto::{gateway as proto, money};

pub use cli::{
    run, start_serving, PacerArgs, PacerCommand, ServeArgs, Serving, SimulateArgs, SourceWatcher,
};
