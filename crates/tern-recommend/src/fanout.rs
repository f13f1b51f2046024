//! The fan-out: one request's calls to the graph shards, all in flight at once from the I/O loop (seed
//! 000's non-blocking outbound calls), each with its own budget under the request's deadline, and what each
//! source did.

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tern_graph_proto::{
    read_reply, write_call, CandidatesRequest, GraphCall, GraphError, GraphReply, Method,
    ProtocolKind, ReplyError,
};
use tern_recommend_proto::{SourceReport, SourceStatus};
use tern_runtime::{Backend, CallError, ClientCodec, Decoded, PoolConfig};
use tern_thrift::{decode_frame, read_message, Framed};

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

/// The graph service's shards as one loop reaches them: per shard, a pool per replica, used in turn.
pub struct Shards {
    replicas: Vec<Vec<Rc<Backend<GraphCodec>>>>,
    next: Cell<usize>,
}

impl Shards {
    pub fn new(shards: &[Vec<SocketAddr>], pool: &PoolConfig) -> Shards {
        Shards {
            replicas: shards
                .iter()
                .map(|replicas| {
                    replicas
                        .iter()
                        .map(|&addr| Backend::new(addr, GraphCodec, pool.clone()))
                        .collect()
                })
                .collect(),
            next: Cell::new(0),
        }
    }

    /// The pool of a replica of the shard that serves `account`.
    fn for_account(&self, account: i64) -> &Backend<GraphCodec> {
        let shard = tern_graph::shard_of(account as u64, self.replicas.len() as u32) as usize;
        let replicas = &self.replicas[shard];
        let turn = self.next.get();
        self.next.set(turn.wrapping_add(1));
        &replicas[turn % replicas.len()]
    }

    /// Calls `call` on the viewer's shard until `deadline`.
    pub async fn call(&self, viewer: i64, call: GraphCall, deadline: Instant) -> Called {
        let started = Instant::now();
        let result = self.for_account(viewer).call(&call, deadline).await;
        Called {
            latency: started.elapsed(),
            result,
        }
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
