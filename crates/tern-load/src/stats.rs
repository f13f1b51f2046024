//! Per-thread measurements: latency histograms, outcomes by kind, throughput per second.

use hdrhistogram::Histogram;

/// What became of one key or request. Misses of every kind are counted, errors by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A get returned the value the key must hold.
    Hit,
    /// A get found no value.
    Miss,
    Stored,
    NotStored,
    Deleted,
    /// delete/incr/decr of a missing key.
    NotFound,
    Incremented,
    /// A get returned a value other than the one its key must hold.
    WrongValue,
    /// A get returned a key that was not asked for.
    WrongKey,
    /// A well-formed reply that does not answer the request (e.g. `STORED` to a get).
    UnexpectedReply,
    /// `ERROR`.
    Error,
    ClientError,
    ServerError,
    /// A reply that breaks the protocol; the connection is closed.
    ProtocolError,
    /// No reply within the timeout.
    Timeout,
    /// In flight on a connection that closed.
    Dropped,
}

impl Outcome {
    pub const COUNT: usize = 16;
    pub const ALL: [Outcome; Outcome::COUNT] = [
        Outcome::Hit,
        Outcome::Miss,
        Outcome::Stored,
        Outcome::NotStored,
        Outcome::Deleted,
        Outcome::NotFound,
        Outcome::Incremented,
        Outcome::WrongValue,
        Outcome::WrongKey,
        Outcome::UnexpectedReply,
        Outcome::Error,
        Outcome::ClientError,
        Outcome::ServerError,
        Outcome::ProtocolError,
        Outcome::Timeout,
        Outcome::Dropped,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Outcome::Hit => "hit",
            Outcome::Miss => "miss",
            Outcome::Stored => "stored",
            Outcome::NotStored => "not_stored",
            Outcome::Deleted => "deleted",
            Outcome::NotFound => "not_found",
            Outcome::Incremented => "incremented",
            Outcome::WrongValue => "wrong_value",
            Outcome::WrongKey => "wrong_key",
            Outcome::UnexpectedReply => "unexpected_reply",
            Outcome::Error => "error",
            Outcome::ClientError => "client_error",
            Outcome::ServerError => "server_error",
            Outcome::ProtocolError => "protocol_error",
            Outcome::Timeout => "timeout",
            Outcome::Dropped => "dropped",
        }
    }

    /// Whether this outcome means something went wrong (misses are not errors).
    pub fn is_error(self) -> bool {
        (self as usize) >= (Outcome::WrongValue as usize)
    }
}

/// Outcomes of one request, committed to the stats only once its whole reply is in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally(pub [u32; Outcome::COUNT]);

impl Tally {
    pub fn add(&mut self, outcome: Outcome) {
        self.0[outcome as usize] += 1;
    }

    pub fn get(&self, outcome: Outcome) -> u32 {
        self.0[outcome as usize]
    }
}

/// Highest latency a histogram records; larger values are clamped to it.
const MAX_LATENCY_NS: u64 = 3_600 * 1_000_000_000;

pub(crate) fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).expect("static histogram bounds are valid")
}

/// Everything one worker thread measured.
pub(crate) struct ThreadStats {
    /// From intended send time to reply (what a user of an open-loop service sees).
    pub latency: Histogram<u64>,
    /// From actual send time to reply (the server's and network's part alone).
    pub service: Histogram<u64>,
    pub outcomes: [u64; Outcome::COUNT],
    pub requests: u64,
    pub keys: u64,
    /// Replies completed in each second since the run started (warm-up included).
    pub timeline: Vec<u64>,
    /// Requests scheduled (open loop) but never sent before the run stopped.
    pub unsent: u64,
    /// When the last reply arrived, nanoseconds since the start.
    pub last_done_ns: u64,
    pub cpu_ns: u64,
    /// The first reason a connection broke, if one did.
    pub connection_error: Option<String>,
}

impl ThreadStats {
    pub fn new(seconds: usize) -> Self {
        ThreadStats {
            latency: new_histogram(),
            service: new_histogram(),
            outcomes: [0; Outcome::COUNT],
            requests: 0,
            keys: 0,
            timeline: vec![0; seconds],
            unsent: 0,
            last_done_ns: 0,
            cpu_ns: 0,
            connection_error: None,
        }
    }

    /// Records a finished request of `keys` keys. `measured` is false during warm-up.
    pub fn record(
        &mut self,
        tally: &Tally,
        keys: u32,
        latency_ns: u64,
        service_ns: u64,
        done_ns: u64,
        measured: bool,
    ) {
        let second = (done_ns / 1_000_000_000) as usize;
        if second >= self.timeline.len() {
            self.timeline.resize(second + 1, 0);
        }
        self.timeline[second] += 1;
        self.last_done_ns = self.last_done_ns.max(done_ns);
        if !measured {
            return;
        }
        self.requests += 1;
        self.keys += u64::from(keys);
        for (sum, n) in self.outcomes.iter_mut().zip(tally.0) {
            *sum += u64::from(n);
        }
        // Multi-get: every key waited as long as its request.
        let _ = self
            .latency
            .record_n(latency_ns.clamp(1, MAX_LATENCY_NS), u64::from(keys));
        let _ = self
            .service
            .record_n(service_ns.clamp(1, MAX_LATENCY_NS), u64::from(keys));
    }

    /// Records a request that never completed (timeout, dropped connection).
    pub fn record_failure(&mut self, outcome: Outcome, measured: bool) {
        if measured {
            self.requests += 1;
            self.outcomes[outcome as usize] += 1;
        }
    }

    pub fn note_connection_error(&mut self, why: &dyn std::fmt::Display) {
        if self.connection_error.is_none() {
            self.connection_error = Some(why.to_string());
        }
    }

    pub fn merge(&mut self, other: &ThreadStats) {
        self.latency
            .add(&other.latency)
            .expect("same histogram bounds");
        self.service
            .add(&other.service)
            .expect("same histogram bounds");
        for (sum, n) in self.outcomes.iter_mut().zip(other.outcomes) {
            *sum += n;
        }
        self.requests += other.requests;
        self.keys += other.keys;
        if other.timeline.len() > self.timeline.len() {
            self.timeline.resize(other.timeline.len(), 0);
        }
        for (sum, n) in self.timeline.iter_mut().zip(&other.timeline) {
            *sum += n;
        }
        self.unsent += other.unsent;
        self.last_done_ns = self.last_done_ns.max(other.last_done_ns);
        self.cpu_ns += other.cpu_ns;
        if self.connection_error.is_none() {
            self.connection_error.clone_from(&other.connection_error);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_table_is_consistent() {
        for (i, o) in Outcome::ALL.iter().enumerate() {
            assert_eq!(*o as usize, i);
        }
        assert!(!Outcome::Miss.is_error() && !Outcome::NotFound.is_error());
        assert!(Outcome::WrongValue.is_error() && Outcome::Dropped.is_error());
    }

    #[test]
    fn warm_up_is_counted_in_the_timeline_only() {
        let mut stats = ThreadStats::new(2);
        let mut tally = Tally::default();
        tally.add(Outcome::Hit);
        stats.record(&tally, 1, 1000, 900, 500_000_000, false);
        stats.record(&tally, 3, 2000, 1900, 2_500_000_000, true);
        assert_eq!(stats.timeline, [1, 0, 1]);
        assert_eq!((stats.requests, stats.keys), (1, 3));
        assert_eq!(stats.latency.len(), 3);
        assert_eq!(stats.outcomes[Outcome::Hit as usize], 1);
    }
}
