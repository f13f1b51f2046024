//! The pacer's wire: the gateway protocol (length-prefixed binary frames of bid requests, decisions, notices
//! and acks between a bidding gateway and a pacer, [`gateway`]) and the money types it carries ([`money`]:
//! integer micro-units with the currency in the type). Pure code, bytes in and frames out, no I/O and
//! nothing of the runtime, so that the pacer service and every client of it (gateways, `tern load`) share
//! one definition without depending on each other.

pub mod gateway;
pub mod money;
