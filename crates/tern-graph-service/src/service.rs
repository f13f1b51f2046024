//! `tern graph` on the runtime: framed Thrift in, replies out. Cheap calls (neighbours, popularity, info)
//! are answered on the I/O loop; the two-hop counts and the walks run on the CPU pool, so a long walk never
//! holds up the loop's other connections (seed 000's move of handlers off the I/O threads).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_graph_proto::{
    decode_call, write_reply, GraphCall, GraphError, GraphReply, IncomingCall, Method, ProtocolKind,
};
use tern_metrics::{CounterFamily, HistogramConfig, HistogramFamily};
use tern_runtime::{Cx, Decode, Deferred, LoopInfo, Outcome, Output, Rejection, Service};
use tern_thrift::{decode_framed_call, write_exception_message, ApplicationErrorKind, FramedCall};

use crate::answer::GraphData;

const METHODS: &[&str] = &[
    "out_neighbours",
    "in_neighbours",
    "friends_of_friends",
    "personalized_pagerank",
    "co_follow",
    "popular_in_region",
    "info",
];

static CALL_NS: HistogramFamily = HistogramFamily::new(
    "tern_graph_call_ns",
    "Time from reading a call to its reply, by method",
    "method",
    METHODS,
    HistogramConfig::LATENCY_NS,
);

static ERRORS: CounterFamily = CounterFamily::new(
    "tern_graph_errors_total",
    "Calls answered with an exception, by kind",
    "kind",
    &["bad_request", "wrong_shard", "overloaded", "application"],
);

fn method_index(method: Method) -> usize {
    Method::ALL
        .iter()
        .position(|&m| m == method)
        .expect("every method is listed")
}

fn count_error(reply: &GraphReply) {
    if let GraphReply::Error(e) = reply {
        ERRORS.incr(match e {
            GraphError::BadRequest(_) => 0,
            GraphError::WrongShard { .. } => 1,
            GraphError::Overloaded(_) => 2,
        });
    }
}

/// Writes a call's reply message, counted and timed.
fn answer(
    out: &mut Vec<u8>,
    protocol: ProtocolKind,
    method: Method,
    seqid: i32,
    received: Instant,
    reply: &GraphReply,
) {
    count_error(reply);
    write_reply(out, protocol, method.name(), seqid, reply);
    CALL_NS.record_duration(method_index(method), received.elapsed());
}

/// The reply message of a call answered later.
fn answer_later(
    protocol: ProtocolKind,
    method: Method,
    seqid: i32,
    received: Instant,
    reply: &GraphReply,
) -> Vec<u8> {
    let mut out = Vec::new();
    answer(&mut out, protocol, method, seqid, received, reply);
    out
}

/// A frame as the service reads it.
pub type GraphRequest<'a> = FramedCall<IncomingCall<'a>>;

pub struct GraphService {
    data: Arc<GraphData>,
    /// Replies leave as they are ready, named by their sequence id (see [`GraphService::in_order`]).
    unordered: bool,
    fault: Option<Fault>,
    /// Calls seen by the fault injection, to pick the delayed ones.
    calls: AtomicU64,
}

/// Fault injection for experiments (`--inject-delay-*`): a share of the calls, of one method or all, answer
/// only after a delay, as a replica in a garbage-collection pause or behind a noisy neighbour would. The
/// delay costs no CPU: the reply waits on a timer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fault {
    pub delay: Duration,
    /// Share of the calls delayed, 0 to 1, spread evenly (every 1/share-th call, in a seeded order).
    pub share: f64,
    /// Only this method's calls (all methods when `None`).
    pub method: Option<Method>,
}

impl GraphService {
    pub fn new(data: GraphData) -> Self {
        GraphService {
            data: Arc::new(data),
            unordered: true,
            fault: None,
            calls: AtomicU64::new(0),
        }
    }

    /// Answers every connection's calls in the order they came: for clients that pipeline calls and match
    /// replies by order rather than by sequence id. By default a call is answered when it is done, so a
    /// long walk does not hold up the neighbour lists asked after it on the same connection.
    pub fn in_order(mut self) -> Self {
        self.unordered = false;
        self
    }

    pub fn with_fault(mut self, fault: Fault) -> Self {
        self.fault = Some(fault);
        self
    }

    pub fn data(&self) -> &Arc<GraphData> {
        &self.data
    }

    /// The delay the fault injection gives this call, if any.
    fn injected_delay(&self, method: Method) -> Option<Duration> {
        let fault = self
            .fault
            .filter(|f| f.method.is_none_or(|m| m == method))?;
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        // A call is delayed when its number, scrambled, falls in the first `share` of the u64 range: an
        // even spread without runs.
        let picked = (tern_graph::splitmix64(n) as f64) < fault.share * u64::MAX as f64;
        picked.then_some(fault.delay)
    }

    /// A reply produced later, in the order the service answers in.
    fn defer(&self, deferred: Deferred) -> Outcome {
        Outcome::Defer(if self.unordered {
            deferred.unordered()
        } else {
            deferred
        })
    }
}

fn exception(
    out: &mut Vec<u8>,
    protocol: ProtocolKind,
    name: &str,
    seqid: i32,
    kind: ApplicationErrorKind,
    message: &str,
) {
    ERRORS.incr(3);
    write_exception_message(out, protocol, name, seqid, kind, message);
}

impl Service for GraphService {
    type Request<'a> = GraphRequest<'a>;
    type Loop = ();

    fn name(&self) -> &'static str {
        "graph"
    }

    fn init_loop(self: &Arc<Self>, _info: &LoopInfo) {}

    fn decode<'a>(&self, input: &'a [u8]) -> Decode<GraphRequest<'a>> {
        decode_framed_call(input, self.data.limits.max_frame_bytes, decode_call)
    }

    fn deadline(&self, request: &GraphRequest<'_>, received: Instant) -> Option<Instant> {
        let FramedCall::Call(IncomingCall {
            call: Ok(GraphCall::Candidates { request, .. }),
            ..
        }) = request
        else {
            return None;
        };
        let wait = match request.deadline_ms {
            Some(ms) => Duration::from_millis(u64::try_from(ms).unwrap_or(0)),
            None => self.data.limits.default_deadline,
        };
        Some(received + wait)
    }

    fn handle(
        &self,
        cx: &mut Cx<'_, Self>,
        request: GraphRequest<'_>,
        out: &mut Output,
    ) -> Outcome {
        let call = match request {
            FramedCall::Call(call) => call,
            FramedCall::Refused(refusal) => {
                ERRORS.incr(3);
                refusal.write(out);
                return if refusal.close {
                    Outcome::Close
                } else {
                    Outcome::Reply
                };
            }
        };
        let (protocol, seqid) = (call.protocol, call.seqid);
        let graph_call = match call.call {
            Ok(c) => c,
            Err(problem) => {
                exception(
                    out,
                    protocol,
                    call.name,
                    seqid,
                    problem.kind(),
                    &problem.message(call.name),
                );
                return Outcome::Reply;
            }
        };
        let method = graph_call.method();
        let received = cx.received;
        let delay = self.injected_delay(method);
        let reply = match graph_call {
            GraphCall::Info => self.data.info(),
            GraphCall::Neighbours {
                method,
                account,
                limit,
            } => self.data.neighbours(method, account, limit),
            GraphCall::Candidates {
                method: Method::PopularInRegion,
                request,
            } => self
                .data
                .candidates(Method::PopularInRegion, &request, cx.deadline),
            GraphCall::Candidates { method, request } => {
                if let Err(e) = self.data.check(method, &request) {
                    GraphReply::Error(e)
                } else {
                    let data = Arc::clone(&self.data);
                    let deadline = cx.deadline;
                    let job = cx.offload(move || data.candidates(method, &request, deadline));
                    return self.defer(Deferred::new(async move {
                        let reply = job.await.unwrap_or_else(|why| {
                            GraphReply::Error(GraphError::Overloaded(why.as_str().to_owned()))
                        });
                        if let Some(delay) = delay {
                            tokio::time::sleep_until((received + delay).into()).await;
                        }
                        answer_later(protocol, method, seqid, received, &reply)
                    }));
                }
            }
        };
        match delay {
            None => {
                answer(out, protocol, method, seqid, received, &reply);
                Outcome::Reply
            }
            Some(delay) => self.defer(Deferred::new(async move {
                tokio::time::sleep_until((received + delay).into()).await;
                answer_later(protocol, method, seqid, received, &reply)
            })),
        }
    }

    fn reject(&self, request: &GraphRequest<'_>, why: Rejection, out: &mut Vec<u8>) {
        let message = format!("overloaded: {}", why.as_str());
        match request {
            FramedCall::Call(IncomingCall {
                protocol,
                name,
                seqid,
                call: Ok(call),
            }) if call.method() != Method::Info => {
                ERRORS.incr(2);
                write_reply(
                    out,
                    *protocol,
                    name,
                    *seqid,
                    &GraphReply::Error(GraphError::Overloaded(message)),
                );
            }
            FramedCall::Call(IncomingCall {
                protocol,
                name,
                seqid,
                ..
            }) => {
                exception(
                    out,
                    *protocol,
                    name,
                    *seqid,
                    ApplicationErrorKind::InternalError,
                    &message,
                );
            }
            _ => exception(
                out,
                ProtocolKind::Binary,
                "",
                0,
                ApplicationErrorKind::InternalError,
                &message,
            ),
        }
    }
}
