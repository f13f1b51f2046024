//! The fan-out: one request's calls to the graph shards, all in flight at once from the I/O loop (seed
//! 000's non-blocking outbound calls), each with its own budget under the request's deadline, and what each
//! source did.

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures::future::{select, Either};
use tern_graph_proto::{
    read_reply, write_call, CandidatesRequest, GraphCall, GraphError, GraphReply, Method,
    ProtocolKind, ReplyError,
};
use tern_metrics::CounterFamily;
use tern_recommend_proto::{SourceReport, SourceStatus};
use tern_runtime::{Backend, BackendRole, CallError, ClientCodec, Decoded, PoolConfig};
use tern_thrift::{decode_frame, read_message, Framed};

use crate::hedge::{HedgeBudget, HedgePolicy, LatencyWindow};

/// Largest reply accepted from a graph shard.
const MAX_REPLY_BYTES: usize = 16 << 20;

/// `tern graph`'s client side for the runtime's outbound pools: framed compact Thrift (the smaller of the
/// two on the wire), replies matched to calls in order.
pub struct GraphCodec;

impl ClientCodec for GraphCodec {
    type Request = GraphCall;
    type Response = Result<GraphReply, ReplyError>;

    fn encode(&self, call: &GraphCall, id: i32, out: &mut Vec<u8>) {
        write_call(out, ProtocolKind::Compact, id, call);
    }

    fn decode(&self, input: &[u8]) -> Result<Option<Decoded<Self::Response>>, String> {
        match decode_frame(input, MAX_REPLY_BYTES) {
            Framed::Incomplete { .. } => Ok(None),
            Framed::TooLarge { length } => Err(format!("a reply of {length} bytes")),
            Framed::Frame { payload, consumed } => {
                // `tern graph` answers each call when it is done (its walks take longer than its
                // neighbour lists): the reply's sequence id says which call it answers.
                let (_, header, _) = read_message(payload).map_err(|e| e.to_string())?;
                Ok(Some(Decoded {
                    reply: read_reply(payload).map(|(_, reply)| reply),
                    consumed,
                    id: Some(header.seqid),
                }))
            }
        }
    }
}

static GRAPH_CALLS: CounterFamily = CounterFamily::new(
    "tern_recommend_graph_calls_total",
    "Calls to the graph shards: each source or neighbour call once (call), the second calls sent to another \
     replica when the first was slow (hedge), and calls sent again to another replica when the first's \
     connection failed (failover)",
    "kind",
    &["call", "hedge", "failover"],
);
const CALL: usize = 0;
const HEDGE: usize = 1;
const FAILOVER: usize = 2;

static HEDGES: CounterFamily = CounterFamily::new(
    "tern_recommend_hedges_total",
    "Calls out longer than their source's recent percentile: hedged and the hedge answered first (won), \
     hedged and the first call answered first (lost), or not hedged for want of budget (denied)",
    "outcome",
    &["won", "lost", "denied"],
);
const WON: usize = 0;
const LOST: usize = 1;
const DENIED: usize = 2;

/// A graph replica, as the lines logged when it is unreachable and back name it.
pub const GRAPH_ROLE: BackendRole = BackendRole {
    what: "tern graph replica",
    meanwhile: "its shard's calls go to the shard's other replicas if it has any, else the viewers on that \
                shard get partial answers without those sources, until it is back; check that tern graph runs \
                there",
};

/// A cache node holding features, as the lines logged when it is unreachable and back name it.
pub const FEATURES_ROLE: BackendRole = BackendRole {
    what: "tern cache node",
    meanwhile: "candidates whose features it holds are ranked without them (answers marked partial) until \
                it is back; check that tern cache runs there (a restarted node needs its features again: \
                tern recommend prepare)",
};

/// The graph service's shards as one loop reaches them: per shard, a pool per replica, used in turn, and
/// each source's recent latencies there, which say when a call is slow enough to hedge.
pub struct Shards {
    replicas: Vec<Vec<Rc<Backend<GraphCodec>>>>,
    /// Per shard, per method (in `Method::ALL`'s order).
    sources: Vec<Vec<SourceState>>,
    hedge_budget: Option<HedgeBudget>,
}

/// A source on a shard, as one loop sees it.
struct SourceState {
    /// Its calls' turn among the replicas: kept per source, so that every source's calls spread over all
    /// replicas (a turn shared by a request's calls, one per source, would send each source to the same
    /// replica request after request).
    next: Cell<usize>,
    latencies: LatencyWindow,
}

type CallResult = Result<Result<GraphReply, ReplyError>, CallError>;

/// Whether a result settles the call: an answer, or the call's own mistake. An overloaded or failed
/// replica's answer does not, if another replica may still give one.
fn settles(result: &CallResult) -> bool {
    matches!(result, Ok(Ok(reply)) if !matches!(reply, GraphReply::Error(GraphError::Overloaded(_))))
}

impl Shards {
    pub fn new(
        shards: &[Vec<SocketAddr>],
        pool: &PoolConfig,
        hedge: Option<HedgePolicy>,
    ) -> Shards {
        let percentile = hedge.map_or(HedgePolicy::DEFAULT.percentile, |h| h.percentile);
        Shards {
            replicas: shards
                .iter()
                .map(|replicas| {
                    replicas
                        .iter()
                        .map(|&addr| Backend::with_role(addr, GraphCodec, pool.clone(), GRAPH_ROLE))
                        .collect()
                })
                .collect(),
            sources: shards
                .iter()
                .map(|_| {
                    Method::ALL
                        .iter()
                        .map(|_| SourceState {
                            next: Cell::new(0),
                            latencies: LatencyWindow::new(percentile),
                        })
                        .collect()
                })
                .collect(),
            hedge_budget: hedge.map(|h| HedgeBudget::new(h.budget)),
        }
    }

    /// Calls `call` on the viewer's shard until `deadline`: on one replica, then on another if the first
    /// is slower than the source's recent percentile (within the hedging budget) or its connection fails;
    /// the first answer wins and the other call is dropped (its late reply is ignored).
    pub async fn call(&self, viewer: i64, call: GraphCall, deadline: Instant) -> Called {
        let started = Instant::now();
        let shard = tern_graph::shard_of(viewer as u64, self.replicas.len() as u32) as usize;
        let replicas = &self.replicas[shard];
        let method = Method::ALL
            .iter()
            .position(|&m| m == call.method())
            .unwrap_or(0);
        let source = &self.sources[shard][method];
        let turn = source.next.get();
        source.next.set(turn.wrapping_add(1));
        let first = &replicas[turn % replicas.len()];
        let other = (replicas.len() > 1).then(|| &replicas[(turn + 1) % replicas.len()]);
        let latencies = &source.latencies;
        GRAPH_CALLS.incr(CALL);
        if let Some(budget) = &self.hedge_budget {
            budget.earn();
        }
        // The hedge's call, declared before the first call's future so both may borrow alike.
        let mut hedge_call: Option<GraphCall> = None;
        let mut primary = std::pin::pin!(first.call(&call, deadline));
        let hedge_at = self
            .hedge_budget
            .as_ref()
            .zip(other)
            .zip(latencies.threshold())
            .map(|((budget, other), after)| (budget, other, (started + after).min(deadline)));
        let mut result = match hedge_at {
            None => primary.await,
            Some((budget, other, at)) => {
                match tokio::time::timeout_at(at.into(), primary.as_mut()).await {
                    Ok(result) => result,
                    Err(_) if budget.take() => {
                        GRAPH_CALLS.incr(HEDGE);
                        let again = hedge_call.insert(with_time_left(&call, deadline));
                        let second = std::pin::pin!(other.call(again, deadline));
                        // Both calls are the same future type: whichever ends first, the other is `rest`.
                        let (result, rest, outcome) = match select(primary, second).await {
                            Either::Left((result, rest)) => (result, rest, LOST),
                            Either::Right((result, rest)) => (result, rest, WON),
                        };
                        HEDGES.incr(outcome);
                        if settles(&result) {
                            result
                        } else {
                            rest.await
                        }
                    }
                    Err(_) => {
                        HEDGES.incr(DENIED);
                        primary.await
                    }
                }
            }
        };
        latencies.record(started.elapsed());
        if let (Err(CallError::Connection(_)), Some(other)) = (&result, other) {
            if Instant::now() < deadline {
                GRAPH_CALLS.incr(FAILOVER);
                result = other.call(&with_time_left(&call, deadline), deadline).await;
            }
        }
        Called {
            latency: started.elapsed(),
            result,
        }
    }
}

/// `call` sent again later: a source call tells the source the time it has left now.
fn with_time_left(call: &GraphCall, deadline: Instant) -> GraphCall {
    match call {
        GraphCall::Candidates { method, request } => source_call(
            *method,
            request.viewer,
            request.profile,
            request.limit as usize,
            deadline,
        ),
        other => other.clone(),
    }
}

/// One outbound call's result and how long it took.
pub struct Called {
    pub latency: Duration,
    pub result: Result<Result<GraphReply, ReplyError>, CallError>,
}

impl Called {
    /// The call's status as the answer reports it, and its candidates if it gave some.
    pub fn report(
        self,
        source: Method,
    ) -> (SourceReport, Option<Vec<tern_graph_proto::Candidate>>) {
        let (status, candidates) = match self.result {
            Ok(Ok(GraphReply::Candidates(r))) => (SourceStatus::Ok, Some(r.candidates)),
            Err(CallError::Timeout) => (SourceStatus::Timeout, None),
            Ok(Ok(GraphReply::Error(GraphError::Overloaded(_)))) | Ok(_) | Err(_) => {
                (SourceStatus::Error, None)
            }
        };
        let report = SourceReport {
            source: source.name().to_owned(),
            status,
            latency_us: i32::try_from(self.latency.as_micros()).unwrap_or(i32::MAX),
            candidates: candidates.as_ref().map_or(0, |c| c.len() as i32),
        };
        (report, candidates)
    }

    /// A neighbour list, if the call gave one.
    pub fn neighbours(self) -> Option<Vec<i64>> {
        match self.result {
            Ok(Ok(GraphReply::Neighbours(mut list))) => {
                list.sort_unstable();
                Some(list)
            }
            _ => None,
        }
    }
}

/// A source call for `viewer` asking `limit` candidates, telling the source how long it has.
pub fn source_call(
    method: Method,
    viewer: i64,
    profile: Option<i64>,
    limit: usize,
    deadline: Instant,
) -> GraphCall {
    let left = deadline.saturating_duration_since(Instant::now());
    GraphCall::Candidates {
        method,
        request: CandidatesRequest {
            viewer,
            profile,
            limit: limit as i32,
            deadline_ms: Some(i32::try_from(left.as_millis()).unwrap_or(i32::MAX)),
            seed: Some(viewer),
        },
    }
}
