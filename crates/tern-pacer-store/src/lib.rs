//! Where the pacer's state lives beyond one process, each part on its own thread and never on an I/O loop:
//! the crash [`journal`] of the ledgers (settled spend and in-flight reservations survive `kill -9`), the
//! sources of truth that install configurations into a node's [`tern_pacer_core::state::PacerState`] (the
//! campaigns file, [`watch`]ed; or PostgreSQL, [`pg`]), and budget leases in Redis for several nodes
//! sharing budgets ([`cluster`]).

pub mod cluster;
pub mod journal;
pub mod pg;
pub mod watch;
