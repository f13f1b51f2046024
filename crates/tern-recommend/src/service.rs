//! `tern recommend` on the runtime. A request is read on an I/O loop (framed Thrift, or HTTP/JSON sniffed
//! on the same port), then runs as a deferred reply on that loop: the source calls fan out to the graph
//! shards at once, the candidates' features come from tern cache in one multi-get per node, and the
//! ranking runs on the CPU pool, never on the I/O thread. Every stage has its share of the request's
//! deadline; what missed it is reported and the answer is marked partial.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::{join_all, FutureExt};
use tern_cache_client::CacheClient;
use tern_http::{HttpRequest, Response};
use tern_metrics::{Counter, CounterFamily, HistogramConfig, HistogramFamily};
use tern_recommend_proto::{
    decode_call, json_answer, request_from_http, write_reply, IncomingCall, ProtocolKind,
    RecommendError, RecommendRequest, Recommendations,
};
use tern_runtime::{Cx, Decode, Deferred, LoopInfo, Outcome, Output, Rejection, Service};
use tern_thrift::{decode_framed_call, write_exception_message, FramedCall};

use crate::blocking::{recommend_blocking, BlockingBackends};
use crate::coalesce::{AnswerCache, InFlight};
use crate::config::{Execution, RecommendConfig};
use crate::fanout::{Called, Shards};
use crate::model::ModelSlot;
use crate::pressure::{watch_lag, Pressure};
use crate::request::Plan;

const STAGES: &[&str] = &["fanout", "features", "ranking", "total"];
const FANOUT: usize = 0;
const FEATURES: usize = 1;
const RANKING: usize = 2;
const TOTAL: usize = 3;

static STAGE_NS: HistogramFamily = HistogramFamily::new(
    "tern_recommend_stage_ns",
    "Time of each stage of a request (fanout: the source calls; features: the cache multi-get; ranking: \
     waiting for and running the model on the CPU pool; total: read to reply)",
    "stage",
    STAGES,
    HistogramConfig::LATENCY_NS,
);

static SHED: Counter = Counter::new(
    "tern_recommend_shed_total",
    "Requests answered Overloaded (refused by the runtime, by the loop shedding load, or by the CPU pool)",
);

static COALESCED: CounterFamily = CounterFamily::new(
    "tern_recommend_coalesced_total",
    "Work not done twice on a loop: requests that waited for an identical request in flight (request), \
     feature keys that waited for a multi-get already fetching them (feature_key)",
    "what",
    &["request", "feature_key"],
);

static CHAINING_CACHE: CounterFamily = CounterFamily::new(
    "tern_recommend_chaining_cache_total",
    "Chaining requests answered from the loop's recent answers (hit) or not (miss)",
    "outcome",
    &["hit", "miss"],
);

/// Where a reply goes: the Thrift call it answers, or an HTTP request.
#[derive(Debug, Clone)]
enum ReplyTo {
    Thrift {
        protocol: ProtocolKind,
        name: String,
        seqid: i32,
    },
    Http {
        keep_alive: bool,
        minor: u8,
    },
}

impl ReplyTo {
    fn write(&self, out: &mut Vec<u8>, reply: &Result<Recommendations, RecommendError>) {
        match self {
            ReplyTo::Thrift {
                protocol,
                name,
                seqid,
            } => write_reply(out, *protocol, name, *seqid, reply),
            ReplyTo::Http { keep_alive, minor } => {
                let (status, body) = json_answer(reply);
                write_json(out, status, &body, *keep_alive, *minor);
            }
        }
    }
}

fn write_json(out: &mut Vec<u8>, status: u16, body: &[u8], keep_alive: bool, minor: u8) {
    tern_http::write_response(
        out,
        &Response {
            status,
            content_type: "application/json",
            headers: &[],
            body,
        },
        keep_alive,
        minor,
    );
}

/// A request on the recommender's port.
#[derive(Debug)]
pub enum RecommendRequestFrame<'a> {
    Thrift(FramedCall<IncomingCall<'a>>),
    Http(HttpRequest<'a>),
}

pub struct RecommendService {
    /// Shared with every request's deferred reply (one reference count, not a copy, per request).
    config: Arc<RecommendConfig>,
    model: ModelSlot,
    /// With `Execution::Blocking`, the blocking clients every worker shares.
    blocking: Option<Arc<BlockingBackends>>,
}

/// Each loop's outbound pools (the graph shards and the cache nodes), its requests in flight and its
/// recent Chaining answers.
pub struct LoopState {
    shards: Shards,
    cache: CacheClient,
    in_flight: InFlight,
    chaining: AnswerCache,
    pressure: Rc<Pressure>,
}

impl RecommendService {
    pub fn new(config: RecommendConfig, model: ModelSlot) -> Self {
        let blocking = (config.execution == Execution::Blocking)
            .then(|| Arc::new(BlockingBackends::new(&config)));
        RecommendService {
            config: Arc::new(config),
            model,
            blocking,
        }
    }

    pub fn model(&self) -> &ModelSlot {
        &self.model
    }

    /// Checks what can be checked before any call.
    fn check(&self, request: &RecommendRequest) -> Result<(), RecommendError> {
        let max = self.config.max_results;
        if request.n < 1 || request.n as usize > max {
            return Err(RecommendError::BadRequest(format!(
                "n={} is not between 1 and {max}",
                request.n
            )));
        }
        if request.viewer < 0 || request.profile.is_some_and(|p| p < 0) {
            return Err(RecommendError::BadRequest(
                "accounts are not negative".into(),
            ));
        }
        if request.deadline_ms.is_some_and(|ms| ms <= 0) {
            return Err(RecommendError::BadRequest(
                "deadline_ms must be positive".into(),
            ));
        }
        Ok(())
    }

    /// Runs one checked request on this loop, or waits for an identical one already running; the future
    /// yields the reply bytes. `None`: the loop is shedding load and the request is refused.
    fn serve(
        &self,
        cx: &Cx<'_, Self>,
        request: RecommendRequest,
        reply_to: ReplyTo,
    ) -> Option<Deferred> {
        let received = cx.received;
        if let Some(backends) = &self.blocking {
            return Some(self.serve_blocking(cx, Arc::clone(backends), request, reply_to));
        }
        let state = Rc::clone(cx.loop_state);
        let answer = match state.in_flight.get(&request) {
            Some(answer) => {
                COALESCED.incr(0);
                answer
            }
            None if !state.pressure.admit(received) => return None,
            None => {
                let deadline = cx
                    .deadline
                    .unwrap_or(received + self.config.default_deadline);
                let executor = cx.executor.clone();
                let model = self.model.current();
                let config = Arc::clone(&self.config);
                let key = request.clone();
                let running = Rc::clone(&state);
                let answer = async move {
                    let state = running;
                    let key = request.clone();
                    let reply = recommend(
                        &state, &config, &executor, model, request, received, deadline,
                    )
                    .await;
                    state.pressure.finished();
                    state.in_flight.remove(&key);
                    let answer = Rc::new(reply);
                    if key.profile.is_some() && answer.as_ref().as_ref().is_ok_and(|r| !r.partial) {
                        state
                            .chaining
                            .insert(key, Rc::clone(&answer), Instant::now());
                    }
                    answer
                }
                .boxed_local()
                .shared();
                state.in_flight.insert(key, answer.clone());
                answer
            }
        };
        Some(Deferred::new(async move {
            let reply = answer.await;
            let mut out = Vec::new();
            reply_to.write(&mut out, &reply);
            STAGE_NS.record_duration(TOTAL, received.elapsed());
            out
        }))
    }
}

impl RecommendService {
    /// The blocking baseline: the whole request on a worker of the fixed pool.
    fn serve_blocking(
        &self,
        cx: &Cx<'_, Self>,
        backends: Arc<BlockingBackends>,
        request: RecommendRequest,
        reply_to: ReplyTo,
    ) -> Deferred {
        let received = cx.received;
        let deadline = cx
            .deadline
            .unwrap_or(received + self.config.default_deadline);
        let config = Arc::clone(&self.config);
        let model = self.model.current();
        let job = cx.offload(move || {
            recommend_blocking(&backends, &config, &model, request, received, deadline)
        });
        Deferred::new(async move {
            let reply = job.await.unwrap_or_else(|why| {
                SHED.incr();
                Err(RecommendError::Overloaded(format!(
                    "overloaded: {}",
                    why.as_str()
                )))
            });
            let mut out = Vec::new();
            reply_to.write(&mut out, &reply);
            STAGE_NS.record_duration(TOTAL, received.elapsed());
            out
        })
    }
}

/// Sources, features, ranking: one request from its checked form to its answer.
async fn recommend(
    state: &LoopState,
    config: &RecommendConfig,
    executor: &tern_executor::Executor,
    model: Arc<tern_model::Model>,
    request: RecommendRequest,
    received: Instant,
    deadline: Instant,
) -> Result<Recommendations, RecommendError> {
    let plan = Plan::new(
        config,
        &request,
        state.pressure.skipped(),
        received,
        deadline,
    );
    // The sources, and whom the viewer follows and is followed by, all at once.
    let started = Instant::now();
    let calls = plan
        .calls(config)
        .into_iter()
        .map(|call| state.shards.call(plan.viewer, call, plan.source_until));
    let answers: Vec<Called> = join_all(calls).await;
    STAGE_NS.record_duration(FANOUT, started.elapsed());
    let gathered = plan.gather(config, answers)?;
    // The viewer's and the candidates' features, one multi-get per cache node.
    let started = Instant::now();
    let keys = gathered.feature_keys();
    let coalesced = state.cache.coalesced_keys();
    let fetched = state.cache.get_many(&keys.keys(), plan.gather_until).await;
    COALESCED.add(1, state.cache.coalesced_keys() - coalesced);
    STAGE_NS.record_duration(FEATURES, started.elapsed());
    let ranking = gathered.ranking(fetched, request, config);
    let model_version = model.version().to_owned();
    let started = Instant::now();
    let ranked = match config.execution {
        // Seed 000's mistake, kept to measure it: the CPU work holds up the loop's other requests.
        Execution::Inline => Ok((Duration::ZERO, ranking.run(&model))),
        _ => {
            executor
                .offload_before(deadline, move || (started.elapsed(), ranking.run(&model)))
                .await
        }
    };
    let now = Instant::now();
    STAGE_NS.record_duration(RANKING, now - started);
    // A job refused for waiting past its deadline waited at least until now.
    let waited = ranked.as_ref().map_or(now - started, |(waited, _)| *waited);
    state.pressure.waited(waited, now);
    let (_, ranked) = ranked.map_err(|why| {
        SHED.incr();
        RecommendError::Overloaded(format!("overloaded: {}", Rejection::from(why).as_str()))
    })?;
    Ok(ranked.answer(model_version))
}

/// Whether the input starts an HTTP request rather than a Thrift frame: a frame starts with its length's
/// high byte, 0 for any frame under 16 MiB, while a request line starts with an upper-case method.
fn looks_like_http(input: &[u8]) -> bool {
    input.first().is_some_and(u8::is_ascii_uppercase)
}

impl Service for RecommendService {
    type Request<'a> = RecommendRequestFrame<'a>;
    type Loop = LoopState;

    fn name(&self) -> &'static str {
        "recommend"
    }

    fn init_loop(self: &Arc<Self>, _info: &LoopInfo) -> LoopState {
        let nodes: Vec<(SocketAddr, u32)> = self.config.cache.iter().map(|&a| (a, 1)).collect();
        let pressure = Rc::new(Pressure::new(self.config.pressure, Instant::now()));
        if self.config.pressure.watches() {
            tokio::task::spawn_local(watch_lag(Rc::downgrade(&pressure)));
        }
        LoopState {
            shards: Shards::new(&self.config.graph, &self.config.pool, self.config.hedge),
            cache: CacheClient::new(&nodes, self.config.cache_hash, self.config.pool.clone())
                .with_role(crate::fanout::FEATURES_ROLE),
            in_flight: InFlight::default(),
            chaining: AnswerCache::new(self.config.chaining_ttl, self.config.chaining_entries),
            pressure,
        }
    }

    fn decode<'a>(&self, input: &'a [u8]) -> Decode<RecommendRequestFrame<'a>> {
        if looks_like_http(input) {
            return tern_http::decode_request(input, &self.config.http)
                .map(RecommendRequestFrame::Http);
        }
        decode_framed_call(input, self.config.max_frame_bytes, decode_call)
            .map(RecommendRequestFrame::Thrift)
    }

    fn deadline(&self, request: &RecommendRequestFrame<'_>, received: Instant) -> Option<Instant> {
        let ms = match request {
            RecommendRequestFrame::Thrift(FramedCall::Call(IncomingCall {
                request: Ok(r),
                ..
            })) => r.deadline_ms,
            RecommendRequestFrame::Http(http) => http
                .query_param("deadline_ms")
                .and_then(Result::ok)
                .and_then(|v| v.parse().ok()),
            _ => None,
        };
        let wait = ms
            .filter(|&ms: &i32| ms > 0)
            .map_or(self.config.default_deadline, |ms| {
                Duration::from_millis(ms as u64)
            });
        Some(received + wait)
    }

    fn handle(
        &self,
        cx: &mut Cx<'_, Self>,
        request: RecommendRequestFrame<'_>,
        out: &mut Output,
    ) -> Outcome {
        let (request, reply_to) = match request {
            RecommendRequestFrame::Thrift(FramedCall::Refused(refusal)) => {
                refusal.write(out);
                return if refusal.close {
                    Outcome::Close
                } else {
                    Outcome::Reply
                };
            }
            RecommendRequestFrame::Thrift(FramedCall::Call(call)) => match call.request {
                Err((kind, message)) => {
                    write_exception_message(
                        out,
                        call.protocol,
                        call.name,
                        call.seqid,
                        kind,
                        &message,
                    );
                    return Outcome::Reply;
                }
                Ok(request) => (
                    request,
                    ReplyTo::Thrift {
                        protocol: call.protocol,
                        name: call.name.to_owned(),
                        seqid: call.seqid,
                    },
                ),
            },
            RecommendRequestFrame::Http(http) => {
                let reply_to = ReplyTo::Http {
                    keep_alive: http.keep_alive,
                    minor: http.minor_version,
                };
                match request_from_http(http.method, http.path(), |name| http.query_param(name)) {
                    Ok(request) => (request, reply_to),
                    Err(refusal) => {
                        let body = tern_recommend_proto::error_json(&refusal.message);
                        write_json(
                            out,
                            refusal.status,
                            &body,
                            http.keep_alive,
                            http.minor_version,
                        );
                        return if http.keep_alive {
                            Outcome::Reply
                        } else {
                            Outcome::Close
                        };
                    }
                }
            }
        };
        let closes = matches!(
            reply_to,
            ReplyTo::Http {
                keep_alive: false,
                ..
            }
        );
        let answered = if closes {
            Outcome::Close
        } else {
            Outcome::Reply
        };
        if let Err(e) = self.check(&request) {
            reply_to.write(out, &Err(e));
            return answered;
        }
        let chaining = cx.loop_state.chaining.enabled() && request.profile.is_some();
        if chaining {
            if let Some(answer) = cx.loop_state.chaining.get(&request, cx.received) {
                CHAINING_CACHE.incr(0);
                reply_to.write(out, &answer);
                STAGE_NS.record_duration(TOTAL, cx.received.elapsed());
                return answered;
            }
            CHAINING_CACHE.incr(1);
        }
        let Some(deferred) = self.serve(cx, request, reply_to.clone()) else {
            SHED.incr();
            let cap = cx.loop_state.pressure.cap().unwrap_or(0);
            let why = format!("overloaded: shedding load ({cap} requests at once on this loop)");
            reply_to.write(out, &Err(RecommendError::Overloaded(why)));
            return answered;
        };
        Outcome::Defer(if closes {
            deferred.then_close()
        } else {
            deferred
        })
    }

    fn reject(&self, request: &RecommendRequestFrame<'_>, why: Rejection, out: &mut Vec<u8>) {
        SHED.incr();
        let refusal = Err(RecommendError::Overloaded(format!(
            "overloaded: {}",
            why.as_str()
        )));
        match request {
            RecommendRequestFrame::Thrift(FramedCall::Call(call)) => {
                write_reply(out, call.protocol, call.name, call.seqid, &refusal)
            }
            RecommendRequestFrame::Http(http) => {
                let (status, body) = json_answer(&refusal);
                write_json(out, status, &body, http.keep_alive, http.minor_version);
            }
            RecommendRequestFrame::Thrift(FramedCall::Refused(refusal)) => refusal.write(out),
        }
    }
}
