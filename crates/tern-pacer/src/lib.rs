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
mod cli;
pub mod openrtb;
pub mod service;

/// The decision core, the durability and sources of truth, and the simulator are crates of their own
/// (`tern-pacer-core`, `tern-pacer-store`, `tern-pacer-sim`); their modules are re-exported here under the
/// names the service has always used.
pub use tern_pacer_core::{
    ads, board, campaigns, coordinator, fixtures, ledger, money, pacer, proto, record, snapshot,
    state, strategy,
};
pub use tern_pacer_sim as sim;
pub use tern_pacer_store::{cluster, journal, pg, watch};

pub use cli::{
    run, simulation, simulation_json, start_serving, PacerArgs, PacerCommand, ServeArgs, Serving,
    SimulateArgs, SourceWatcher,
};
