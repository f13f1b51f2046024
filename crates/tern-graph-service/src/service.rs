//! `tern graph` on the runtime: framed Thrift in, replies out. Cheap calls (neighbours, popularity, info)
//! are answered on the I/O loop; the two-hop counts and the walks run on the CPU pool, so a long walk never
//! holds up the loop's other connections (seed 000's move of handlers off the I/O threads).

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

/// A frame as the service reads it.
pub type GraphRequest<'a> = FramedCall<IncomingCall<'a>>;

pub struct GraphService {
    data: Arc<GraphData>,
}

impl GraphService {
    pub fn new(data: GraphData) -> Self {
        GraphService {
            data: Arc::new(data),
        }
    }

    pub fn data(&self) -> &Arc<GraphData> {
        &self.data
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
                    return Outcome::Defer(Deferred::new(async move {
                        let reply = job.await.unwrap_or_else(|why| {
                            GraphReply::Error(GraphError::Overloaded(why.as_str().to_owned()))
                        });
                        let mut out = Vec::new();
                        count_error(&reply);
                        write_reply(&mut out, protocol, method.name(), seqid, &reply);
                        CALL_NS.record_duration(method_index(method), received.elapsed());
                        out
                    }));
                }
            }
        };
        count_error(&reply);
        write_reply(out, protocol, method.name(), seqid, &reply);
        CALL_NS.record_duration(method_index(method), received.elapsed());
        Outcome::Reply
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
