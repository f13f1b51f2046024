//! `tern pacer` as a service on the tern runtime: the gateway protocol decoded in the I/O loop, every batch
//! decided inline on one configuration snapshot by the loop's own pacer (ledger slices, controllers), and
//! notices applied where the reservation lives. The only shared state is the snapshot (read through
//! arc-swap, no lock) and the coordinator (a mutex taken once per `sync_interval_ms` per loop, and for
//! notices that arrived on a loop that does not hold their reservation).
//!
//! A loop syncs when a frame arrives and `sync_interval_ms` has passed, so a loop without traffic keeps
//! its slices (at most a slice target per campaign) until its next frame.
//!
//! The same port speaks HTTP/1.1 (the OpenRTB front and the notice URLs, [`crate::openrtb`]): each request
//! is sniffed, a gateway frame starts with `b"TP"` and an HTTP request with a method token
//! ([`looks_like_http`]), and both are decided by the same loop pacer on the same ledger.

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tern_runtime::{Cx, Decode, LoopInfo, Outcome, Output, Rejection, Service};

use tern_http::{HttpLimits, HttpRequest};
use tern_metrics::{CounterFamily, HistogramConfig, HistogramFamily};
use tern_pacer_core::coordinator::CoordinatorConfig;
use tern_pacer_core::ledger::LedgerConfig;
use tern_pacer_core::money::Currency;
use tern_pacer_core::pacer::LoopPacer;
use tern_pacer_core::proto::{
    decode_frame, encode_acks, Decision, DecisionsWriter, Frame, Limits, NoticeStatus, Status,
    DECISION_NAMES,
};
use tern_pacer_core::snapshot::Snapshot;
use tern_pacer_core::state::PacerState;
use tern_pacer_store::journal::{Durable, JournalConfig};

static DECISIONS: CounterFamily = CounterFamily::new(
    "tern_pacer_decisions_total",
    "Impressions decided (gateway requests and OpenRTB impressions that reached the pacer), by outcome: Bid, \
     or the no-bid reason (BudgetExhausted, Paced, BelowFloor, Overloaded, ...)",
    "outcome",
    &DECISION_NAMES,
);

/// The service's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacerConfig {
    pub limits: Limits,
    pub ledger: LedgerConfig,
    pub coordinator: CoordinatorConfig,
    /// How often a busy loop syncs its slices and ticks its controllers.
    pub sync_interval_ms: u64,
    /// Bounds on HTTP requests.
    pub http: HttpLimits,
    /// Most impressions in one OpenRTB BidRequest; more is a `400` (each one may reserve budget).
    pub openrtb_max_imps: usize,
    /// The front is served over TLS (`--tls-cert`): notice URLs are `https://`.
    pub https: bool,
}

impl Default for PacerConfig {
    fn default() -> Self {
        PacerConfig {
            limits: Limits::default(),
            ledger: LedgerConfig::default(),
            coordinator: CoordinatorConfig::default(),
            sync_interval_ms: 10,
            http: HttpLimits::default(),
            openrtb_max_imps: 64,
            https: false,
        }
    }
}

/// The pacer service, in currency `C`.
pub struct PacerService<C> {
    config: PacerConfig,
    /// The snapshot, coordinator and board, shared with the sources of truth and the admin view.
    state: Arc<PacerState<C>>,
    /// The crash journal, when the node keeps one ([`PacerService::with_journal`]).
    journal: Option<Durable>,
}

/// Whether `input` (the front of a connection's unread bytes) starts like an HTTP request: a method token
/// is upper-case letters, and empty lines may come before a request (RFC 9112 §2.2). The gateway
/// protocol's frames start with `b"TP"`, which no HTTP method does; a lone `T` waits for its second byte.
pub fn looks_like_http(input: &[u8]) -> bool {
    match input {
        [] | [b'T'] => false,
        [b'T', b'P', ..] => false,
        [first, ..] => first.is_ascii_uppercase() || matches!(first, b'\r' | b'\n'),
    }
}

/// A request on the pacer's port: a gateway frame or an HTTP request.
#[derive(Debug, Clone, Copy)]
pub enum PacerRequest<'a, C> {
    Gateway(Frame<'a, C>),
    Http(HttpRequest<'a>),
}

/// A loop's own state.
pub struct LoopState<C> {
    id: usize,
    pacer: RefCell<LoopPacer<C>>,
    last_sync_ms: Cell<u64>,
    service: Arc<PacerService<C>>,
}

impl<C> Drop for LoopState<C> {
    /// A last sync as the loop stops, so the coordinator knows the spend of the notices that came after
    /// the loop's last sync (a node sharing budgets reports it before releasing its leases).
    fn drop(&mut self) {
        let pacer = self.pacer.get_mut();
        self.service
            .state
            .coordinator()
            .sync(self.id, &mut pacer.ledger);
    }
}

pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl<C: Currency> PacerService<C> {
    pub fn new(config: PacerConfig, snapshot: Snapshot<C>) -> Self {
        PacerService {
            state: Arc::new(PacerState::new(config.coordinator, snapshot)),
            config,
            journal: None,
        }
    }

    /// A service that journals its ledgers in `journal.dir` and starts from what the journal there holds:
    /// the settled spend and the reservations still in flight before a crash ([`tern_pacer_store::journal`]).
    pub fn with_journal(
        config: PacerConfig,
        snapshot: Snapshot<C>,
        journal: JournalConfig,
    ) -> std::io::Result<Self> {
        let journal = JournalConfig {
            forget_after_ms: config
                .ledger
                .forget_after_ms
                .max(config.ledger.reservation_ttl_ms),
            ..journal
        };
        let durable = Durable::open(journal, unix_ms())?;
        let mut service = Self::new(config, snapshot);
        durable.restore_granted(&mut service.state.coordinator());
        service.journal = Some(durable);
        Ok(service)
    }

    /// The crash journal, if any.
    pub fn journal(&self) -> Option<&Durable> {
        self.journal.as_ref()
    }

    /// The shared pacing state: sources of truth install into it, the admin view reads it.
    pub fn state(&self) -> &Arc<PacerState<C>> {
        &self.state
    }
}

/// The time each request took on the server, by kind (`Service::request_latency`): a gateway batch is one
/// request, whatever it carries.
static REQUEST_NS: HistogramFamily = HistogramFamily::new(
    "tern_pacer_request_duration_ns",
    "Time from the read that completed a request to its reply ready to write, by kind",
    "kind",
    &["bids", "notices", "openrtb", "http_notice", "http_other"],
    HistogramConfig::REQUEST_NS,
);

impl<C: Currency> Service for PacerService<C> {
    type Request<'a> = PacerRequest<'a, C>;
    type Loop = LoopState<C>;

    fn name(&self) -> &'static str {
        "pacer"
    }

    fn request_latency(&self) -> Option<&'static HistogramFamily> {
        Some(&REQUEST_NS)
    }

    fn request_kind(&self, request: &PacerRequest<'_, C>) -> usize {
        match request {
            PacerRequest::Gateway(Frame::Bids(_)) => 0,
            PacerRequest::Gateway(Frame::Notices(_)) => 1,
            PacerRequest::Http(http) => match http.path() {
                crate::openrtb::AUCTION_PATH => 2,
                "/win" | "/billing" | "/loss" => 3,
                _ => 4,
            },
        }
    }

    fn init_loop(self: &Arc<Self>, info: &LoopInfo) -> LoopState<C> {
        let mut pacer = LoopPacer::new(self.config.ledger);
        if let Some(journal) = &self.journal {
            journal.attach(&mut pacer.ledger, info.id, info.loops, unix_ms());
        }
        let mut coordinator = self.state.coordinator();
        coordinator.set_loops(info.loops);
        coordinator.sync(info.id, &mut pacer.ledger);
        self.state.board().publish(info.id, &pacer, unix_ms());
        LoopState {
            id: info.id,
            pacer: RefCell::new(pacer),
            last_sync_ms: Cell::new(unix_ms()),
            service: Arc::clone(self),
        }
    }

    fn decode<'a>(&self, input: &'a [u8]) -> Decode<PacerRequest<'a, C>> {
        if looks_like_http(input) {
            return tern_http::decode_request(input, &self.config.http).map(PacerRequest::Http);
        }
        decode_frame(input, &self.config.limits).map(PacerRequest::Gateway)
    }

    /// A gateway batch is as many requests as it carries: the loop decides one batch per turn of a
    /// connection, then serves the others (an OpenRTB request counts one, whatever its impressions).
    fn weight(&self, request: &PacerRequest<'_, C>) -> usize {
        match request {
            PacerRequest::Gateway(Frame::Bids(batch)) => batch.len(),
            PacerRequest::Gateway(Frame::Notices(batch)) => batch.len(),
            PacerRequest::Http(_) => 1,
        }
    }

    fn handle(
        &self,
        cx: &mut Cx<'_, Self>,
        request: PacerRequest<'_, C>,
        out: &mut Output,
    ) -> Outcome {
        let now_ms = unix_ms();
        let state: &LoopState<C> = cx.loop_state;
        // Handlers run one at a time on their loop and never hold this across an await: no double borrow.
        let mut pacer = state.pacer.borrow_mut();
        let snapshot = self.state.current();
        let synced = now_ms
            >= state
                .last_sync_ms
                .get()
                .saturating_add(self.config.sync_interval_ms);
        if synced {
            let mut coordinator = self.state.coordinator();
            coordinator.sync(state.id, &mut pacer.ledger);
            // Under the coordinator's lock, so the admin view's grants always add up (see `admin`).
            self.state.board().publish(state.id, &pacer, now_ms);
            drop(coordinator);
            pacer.tick(&snapshot, now_ms);
            state.last_sync_ms.set(now_ms);
        }
        let outcome = match request {
            PacerRequest::Gateway(Frame::Bids(batch)) => {
                pacer.decide_batch(&snapshot, &batch, now_ms, out);
                Outcome::Reply
            }
            PacerRequest::Gateway(Frame::Notices(batch)) => {
                pacer.apply_notices(&batch, now_ms, out, |notice| {
                    self.state.coordinator().forward(state.id, now_ms, notice)
                });
                Outcome::Reply
            }
            PacerRequest::Http(request) => {
                let clock = crate::openrtb::Clock {
                    received_ms: now_ms.saturating_sub(cx.received.elapsed().as_millis() as u64),
                    now_ms,
                };
                let keep_alive = crate::openrtb::serve(
                    &mut pacer,
                    &snapshot,
                    &request,
                    crate::openrtb::Front {
                        max_imps: self.config.openrtb_max_imps,
                        https: self.config.https,
                    },
                    clock,
                    out,
                    |notice| self.state.coordinator().forward(state.id, now_ms, notice),
                );
                if keep_alive {
                    Outcome::Reply
                } else {
                    Outcome::Close
                }
            }
        };
        for (index, count) in pacer.take_decisions().into_iter().enumerate() {
            if count > 0 {
                DECISIONS.add(index, count);
            }
        }
        if synced {
            // Once more with this request's effect, so the admin view is fresh on a quiet loop.
            self.state.board().publish(state.id, &pacer, now_ms);
        }
        outcome
    }

    /// A refused bid is a no-bid that says why (`Overloaded`), counted as a decision: for a gateway batch each
    /// of its requests, for an OpenRTB auction a `204` with `X-Tern-No-Bid: Overloaded`, counted once (its
    /// body is not read). A refused notice is not applied and says so (`Refused`; over HTTP a `503`, which
    /// an exchange retries).
    fn reject(&self, request: &PacerRequest<'_, C>, _why: Rejection, out: &mut Vec<u8>) {
        match request {
            PacerRequest::Http(http)
                if http.method == "POST" && http.path() == crate::openrtb::AUCTION_PATH =>
            {
                DECISIONS.incr(Decision::<C>::NoBid(Status::Overloaded).index());
                tern_http::write_response(
                    out,
                    &tern_http::Response {
                        status: 204,
                        content_type: "text/plain; charset=utf-8",
                        headers: &[("X-Tern-No-Bid", Status::Overloaded.name())],
                        body: b"",
                    },
                    http.keep_alive,
                    http.minor_version,
                )
            }
            PacerRequest::Http(request) => tern_http::write_response(
                out,
                &tern_http::Response {
                    status: 503,
                    content_type: "text/plain; charset=utf-8",
                    headers: &[],
                    body: b"overloaded\n",
                },
                request.keep_alive,
                request.minor_version,
            ),
            PacerRequest::Gateway(Frame::Bids(batch)) => {
                DECISIONS.add(
                    Decision::<C>::NoBid(Status::Overloaded).index(),
                    batch.len() as u64,
                );
                let mut w = DecisionsWriter::begin(out, batch.batch_id);
                for _ in 0..batch.len() {
                    w.push::<C>(Decision::NoBid(Status::Overloaded));
                }
                w.finish();
            }
            PacerRequest::Gateway(Frame::Notices(batch)) => {
                encode_acks(out, &vec![NoticeStatus::Refused; batch.len()])
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::looks_like_http;

    #[test]
    fn sniffs_http_apart_from_gateway_frames() {
        assert!(looks_like_http(b"GET /"));
        assert!(looks_like_http(b"TRACE /"));
        assert!(looks_like_http(b"P"));
        assert!(looks_like_http(b"\r\nGET /"));
        assert!(!looks_like_http(b"T"));
        assert!(!looks_like_http(b"TP\x01"));
        assert!(!looks_like_http(b"\x00"));
        assert!(!looks_like_http(b""));
    }
}
