//! What decoding one reply gives: the reply's tally once it is complete, or the fault that ends the connection.

use tern_memcache_proto::client::ReplyError;

use crate::stats::{Outcome, Tally};

/// Result of decoding one request's reply.
// Returned by value and consumed at once, never stored: boxing the tally would allocate per reply.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decoded {
    Incomplete,
    Done { consumed: usize, tally: Tally },
}

/// A reply the connection cannot go on after: it is closed, and the request counted as
/// `outcome`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fault {
    pub outcome: Outcome,
    pub reason: String,
}

impl Fault {
    pub fn protocol(reason: impl Into<String>) -> Self {
        Fault {
            outcome: Outcome::ProtocolError,
            reason: reason.into(),
        }
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.outcome.name(), self.reason)
    }
}

impl From<ReplyError> for Fault {
    fn from(e: ReplyError) -> Self {
        Fault::protocol(e.to_string())
    }
}
