//! Per-thread measurements: latency histograms, outcomes by kind, throughput per second.

use hdrhistogram::Histogram;

/// How a completed request counts in the stats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counted {
    /// Keys, decisions or responses, for the second throughput figure.
    pub units: u32,
    /// Latency samples: each key of a multi-get waited as long as its request; a batch is one
    /// sample.
    pub samples: u32,
}

macro_rules! outcomes {
    ($($(#[$doc:meta])* $variant:ident = $name:literal, $error:literal;)*) => {
        /// What became of one key, decision or request. Misses and no-bids of every kind are
        /// counted, errors by kind.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Outcome {
            $($(#[$doc])* $variant,)*
        }

        impl Outcome {
            pub const ALL: [Outcome; Outcome::COUNT] = [$(Outcome::$variant,)*];
            pub const COUNT: usize = [$($name,)*].len();

            /// The name in reports.
            pub fn name(self) -> &'static str {
                match self {
                    $(Outcome::$variant => $name,)*
                }
            }

            /// Whether this outcome means something went wrong (misses and no-bids are not
            /// errors).
            pub fn is_error(self) -> bool {
                match self {
                    $(Outcome::$variant => $error,)*
                }
            }
        }
    };
}

outcomes! {
    /// A get returned the value the key must hold.
    Hit = "hit", false;
    /// A get found no value.
    Miss = "miss", false;
    Stored = "stored", false;
    NotStored = "not_stored", false;
    Deleted = "deleted", false;
    /// delete/incr/decr of a missing key.
    NotFound = "not_found", false;
    Incremented = "incremented", false;
    /// The pacer bid, with a price between the floor and the candidate's maximum bid.
    Bid = "bid", false;
    NoBidNoCandidates = "no_bid_no_candidates", false;
    NoBidUnknownCampaign = "no_bid_unknown_campaign", false;
    NoBidFlightInactive = "no_bid_flight_inactive", false;
    NoBidNotTargeted = "no_bid_not_targeted", false;
    NoBidBelowFloor = "no_bid_below_floor", false;
    NoBidPaced = "no_bid_paced", false;
    NoBidBudgetExhausted = "no_bid_budget_exhausted", false;
    /// The pacer's budget source (its cluster's Redis) is not answering.
    NoBidBudgetUnavailable = "no_bid_budget_unavailable", false;
    NoBidExpired = "no_bid_expired", false;
    NoBidDuplicateImpression = "no_bid_duplicate_impression", false;
    NoBidOverloaded = "no_bid_overloaded", false;
    /// A billing notice changed the pacer's ledger.
    AckApplied = "ack_applied", false;
    AckDuplicate = "ack_duplicate", false;
    AckUnknown = "ack_unknown", false;
    AckLateBilled = "ack_late_billed", false;
    AckForwarded = "ack_forwarded", false;
    AckRefused = "ack_refused", false;
    /// tern recommend answered in full.
    Recommended = "recommended", false;
    /// tern recommend answered without some source or feature (its `partial` flag).
    RecommendedPartial = "recommended_partial", false;
    /// tern recommend answered with no items at all (partial or not).
    RecommendedEmpty = "recommended_empty", false;
    /// tern recommend refused the request as overloaded (declared exception or `503`).
    Overloaded = "overloaded", false;
    Http200 = "http_200", false;
    Http204 = "http_204", false;
    /// Another 2xx status.
    Http2xx = "http_2xx", false;
    Http3xx = "http_3xx", false;
    /// A get returned a value other than the one its key must hold.
    WrongValue = "wrong_value", true;
    /// A get returned a key that was not asked for.
    WrongKey = "wrong_key", true;
    /// A bid naming a campaign that was not a candidate, or a price above the candidate's
    /// maximum bid or below the floor.
    WrongDecision = "wrong_decision", true;
    /// A reply frame for another batch, or with another number of entries than asked for.
    WrongBatch = "wrong_batch", true;
    /// The pacer called a well-formed request malformed.
    NoBidMalformed = "no_bid_malformed", true;
    /// The pacer called a notice malformed or naming the wrong campaign.
    AckRejected = "ack_rejected", true;
    /// tern recommend called a request bad (an unknown account, say: keep --keys within the graph).
    BadRequest = "bad_request", true;
    Http400 = "http_400", true;
    Http404 = "http_404", true;
    Http429 = "http_429", true;
    /// Another 4xx status.
    Http4xx = "http_4xx", true;
    Http500 = "http_500", true;
    Http503 = "http_503", true;
    /// Another 5xx status, or one outside 100..=599.
    Http5xx = "http_5xx", true;
    /// A well-formed reply that does not answer the request (e.g. `STORED` to a get).
    UnexpectedReply = "unexpected_reply", true;
    /// `ERROR`.
    Error = "error", true;
    ClientError = "client_error", true;
    /// memcached's `SERVER_ERROR`, or the pacer's ERROR frame.
    ServerError = "server_error", true;
    /// A reply that breaks the protocol; the connection is closed.
    ProtocolError = "protocol_error", true;
    /// An HTTP response on a keep-alive connection without a Content-Length; the connection is
    /// closed.
    HttpNoLength = "http_no_length", true;
    /// No reply within the timeout.
    Timeout = "timeout", true;
    /// In flight on a connection that closed.
    Dropped = "dropped", true;
}

/// Outcomes of one request, committed to the stats only once its whole reply is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally(pub [u32; Outcome::COUNT]);

impl Default for Tally {
    fn default() -> Self {
        Tally([0; Outcome::COUNT])
    }
}

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

    /// Records a finished request. `measured` is false during warm-up.
    pub fn record(
        &mut self,
        tally: &Tally,
        counted: Counted,
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
        self.keys += u64::from(counted.units);
        self.add_outcomes(tally);
        let samples = u64::from(counted.samples);
        let _ = self
            .latency
            .record_n(latency_ns.clamp(1, MAX_LATENCY_NS), samples);
        let _ = self
            .service
            .record_n(service_ns.clamp(1, MAX_LATENCY_NS), samples);
    }

    /// Records the outcomes of a follow-up (a notice after a bid): counted by kind, but not a
    /// request of the run nor a latency sample.
    pub fn record_follow_up(&mut self, tally: &Tally, measured: bool) {
        if measured {
            self.add_outcomes(tally);
        }
    }

    fn add_outcomes(&mut self, tally: &Tally) {
        for (sum, n) in self.outcomes.iter_mut().zip(tally.0) {
            *sum += u64::from(n);
        }
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
        let one = Counted {
            units: 1,
            samples: 1,
        };
        let three = Counted {
            units: 3,
            samples: 3,
        };
        stats.record(&tally, one, 1000, 900, 500_000_000, false);
        stats.record(&tally, three, 2000, 1900, 2_500_000_000, true);
        assert_eq!(stats.timeline, [1, 0, 1]);
        assert_eq!((stats.requests, stats.keys), (1, 3));
        assert_eq!(stats.latency.len(), 3);
        assert_eq!(stats.outcomes[Outcome::Hit as usize], 1);
    }
}
