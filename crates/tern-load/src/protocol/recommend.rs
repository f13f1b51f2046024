//! tern recommend's calls (`idl/recommend.thrift`): Suggested Users and Chaining over framed Thrift, binary or
//! compact, or the same calls as HTTP `GET`s of its JSON front. Viewers (and Chaining's profiles) are the
//! run's keys, drawn with its key distribution (uniform or Zipf) over accounts `0..--keys`. A request's ids
//! are its sequence id, its viewer and, for Chaining, its profile; every answer is checked against them: no
//! more than `n` items, no item twice, never the viewer or the profile.

use std::io::Write as _;

use rand::rngs::SmallRng;
use rand::Rng;
use tern_http::{ResponseError, ResponseHead};
use tern_recommend_proto::{
    read_reply, write_call, ProtocolKind, RecommendError, RecommendRequest, Recommendations,
    ReplyError, SourceStatus, CHAINING_PATH, SUGGESTED_USERS_PATH,
};
use tern_thrift::{decode_frame, Framed};

use super::reply::{Decoded, Fault};
use crate::config::{Config, RecommendCall, RecommendWire};
use crate::stats::{Outcome, Tally};
use crate::workload::KeyChooser;

/// What marks a partial answer in the JSON front's body.
const PARTIAL: &[u8] = b"\"partial\":true";
const NO_ITEMS: &[u8] = b"\"items\":[]";

pub(crate) struct RecommendCodec {
    call: RecommendCall,
    n: i32,
    deadline_ms: u32,
    wire: RecommendWire,
    host: String,
    max_reply: usize,
    next_seqid: u32,
}

impl RecommendCodec {
    pub fn new(config: &Config) -> Self {
        let w = &config.recommend;
        RecommendCodec {
            call: w.call,
            n: w.n,
            deadline_ms: w.deadline_ms,
            wire: w.wire,
            host: config.server.to_string(),
            max_reply: config.max_value,
            next_seqid: 0,
        }
    }

    /// Draws the next request's ids: its sequence id, the viewer, and for Chaining a profile.
    pub fn draw(&mut self, rng: &mut SmallRng, keys: &mut KeyChooser, ids: &mut Vec<u64>) {
        self.next_seqid = self.next_seqid.wrapping_add(1) & i32::MAX as u32;
        ids.push(u64::from(self.next_seqid));
        let viewer = keys.next(rng);
        ids.push(viewer);
        let chaining = match self.call {
            RecommendCall::SuggestedUsers => false,
            RecommendCall::Chaining => true,
            RecommendCall::Mixed => rng.random_bool(0.5),
        };
        if chaining {
            // Another account than the viewer when there is one (a bounded number of draws).
            let mut profile = keys.next(rng);
            for _ in 0..8 {
                if profile != viewer {
                    break;
                }
                profile = keys.next(rng);
            }
            ids.push(profile);
        }
    }

    fn request(&self, ids: &[u64]) -> RecommendRequest {
        let mut request = match ids {
            [_, viewer, profile] => {
                RecommendRequest::chaining(*viewer as i64, *profile as i64, self.n)
            }
            _ => RecommendRequest::suggested_users(ids[1] as i64, self.n),
        };
        request.deadline_ms = (self.deadline_ms > 0).then_some(self.deadline_ms as i32);
        request
    }

    pub fn encode(&self, out: &mut Vec<u8>, ids: &[u64]) {
        let request = self.request(ids);
        let protocol = match self.wire {
            RecommendWire::ThriftBinary => ProtocolKind::Binary,
            RecommendWire::ThriftCompact => ProtocolKind::Compact,
            RecommendWire::Http => {
                let path = match request.profile {
                    Some(profile) => format!(
                        "{CHAINING_PATH}?viewer={}&profile={profile}&n={}",
                        request.viewer, request.n
                    ),
                    None => format!(
                        "{SUGGESTED_USERS_PATH}?viewer={}&n={}",
                        request.viewer, request.n
                    ),
                };
                let _ = write!(out, "GET {path}");
                if let Some(ms) = request.deadline_ms {
                    let _ = write!(out, "&deadline_ms={ms}");
                }
                let _ = write!(out, " HTTP/1.1\r\nHost: {}\r\n\r\n", self.host);
                return;
            }
        };
        write_call(out, protocol, ids[0] as i32, &request);
    }

    pub fn decode(
        &self,
        input: &[u8],
        id_at: impl Fn(usize) -> u64,
        ids: usize,
    ) -> Result<Decoded, Fault> {
        if self.wire == RecommendWire::Http {
            return self.decode_http(input);
        }
        let (payload, consumed) = match decode_frame(input, self.max_reply) {
            Framed::Incomplete { .. } => return Ok(Decoded::Incomplete),
            Framed::TooLarge { length } => {
                return Err(Fault::protocol(format!(
                    "a reply of {length} bytes (--max-value)"
                )))
            }
            Framed::Frame { payload, consumed } => (payload, consumed),
        };
        let outcome = match read_reply(payload) {
            Ok((seqid, _)) if seqid as u64 != id_at(0) => Outcome::WrongBatch,
            Ok((_, Ok(recs))) => check(&recs, id_at(1), (ids == 3).then(|| id_at(2)), self.n),
            Ok((_, Err(RecommendError::BadRequest(_)))) => Outcome::BadRequest,
            Ok((_, Err(RecommendError::Overloaded(_)))) => Outcome::Overloaded,
            Err(ReplyError::Application { .. }) => Outcome::ServerError,
            Err(e) => return Err(Fault::protocol(e.to_string())),
        };
        let mut tally = Tally::default();
        tally.add(outcome);
        Ok(Decoded::Done { consumed, tally })
    }

    /// An HTTP answer: its status, and for a `200` whether the JSON says `partial`.
    fn decode_http(&self, input: &[u8]) -> Result<Decoded, Fault> {
        let outcome = match tern_http::decode_response(input, false, self.max_reply) {
            Ok(None) => return Ok(Decoded::Incomplete),
            Ok(Some(ResponseHead { status, consumed })) => {
                let body = &input[..consumed];
                let outcome = match status {
                    200 if body.windows(NO_ITEMS.len()).any(|w| w == NO_ITEMS) => {
                        Outcome::RecommendedEmpty
                    }
                    200 if body.windows(PARTIAL.len()).any(|w| w == PARTIAL) => {
                        Outcome::RecommendedPartial
                    }
                    200 => Outcome::Recommended,
                    400 => Outcome::BadRequest,
                    503 => Outcome::Overloaded,
                    _ => Outcome::UnexpectedReply,
                };
                (outcome, consumed)
            }
            Err(e @ ResponseError::TooLarge { .. }) => {
                return Err(Fault::protocol(format!("{e} (--max-value)")))
            }
            Err(e) => return Err(Fault::protocol(e.to_string())),
        };
        let mut tally = Tally::default();
        tally.add(outcome.0);
        Ok(Decoded::Done {
            consumed: outcome.1,
            tally,
        })
    }
}

/// How an answer to `viewer` (and `profile`) counts: wrong when it has more than `n` items, an item twice,
/// the viewer or the profile among them, or a source that timed out, failed or was shed without the answer
/// being marked partial.
fn check(recs: &Recommendations, viewer: u64, profile: Option<u64>, n: i32) -> Outcome {
    let mut accounts: Vec<i64> = recs.items.iter().map(|i| i.account).collect();
    let named = |a: i64| a as u64 == viewer || Some(a as u64) == profile;
    if accounts.len() > n as usize || accounts.iter().any(|&a| named(a)) {
        return Outcome::UnexpectedReply;
    }
    let missed = recs.sources.iter().any(|s| {
        matches!(
            s.status,
            SourceStatus::Timeout | SourceStatus::Error | SourceStatus::Shed
        )
    });
    if missed && !recs.partial {
        return Outcome::UnexpectedReply;
    }
    if accounts.is_empty() {
        return Outcome::RecommendedEmpty;
    }
    accounts.sort_unstable();
    accounts.dedup();
    if accounts.len() != recs.items.len() {
        return Outcome::UnexpectedReply;
    }
    if recs.partial {
        Outcome::RecommendedPartial
    } else {
        Outcome::Recommended
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_recommend_proto::{write_reply, Recommendation, SourceReport};

    fn config(wire: RecommendWire, call: RecommendCall) -> Config {
        let mut c = Config {
            protocol: crate::config::Protocol::Recommend,
            ..Config::default()
        };
        c.recommend.wire = wire;
        c.recommend.call = call;
        c.recommend.n = 3;
        c
    }

    fn answer(accounts: &[i64], partial: bool) -> Recommendations {
        Recommendations {
            items: accounts
                .iter()
                .map(|&account| Recommendation {
                    account,
                    score: 1.0,
                    source: "co_follow".into(),
                })
                .collect(),
            partial,
            sources: Vec::new(),
            model_version: "m".into(),
        }
    }

    /// An answer whose walk timed out, marked partial or not.
    fn timed_out(partial: bool) -> Recommendations {
        let mut recs = answer(&[1], partial);
        recs.sources.push(SourceReport {
            source: "personalized_pagerank".into(),
            status: SourceStatus::Timeout,
            latency_us: 60_000,
            candidates: 0,
        });
        recs
    }

    fn outcome(decoded: Decoded) -> Outcome {
        match decoded {
            Decoded::Done { tally, .. } => Outcome::ALL
                .into_iter()
                .find(|&o| tally.get(o) == 1)
                .expect("one outcome"),
            Decoded::Incomplete => panic!("incomplete"),
        }
    }

    #[test]
    fn thrift_answers_are_checked_against_their_request() {
        for wire in [RecommendWire::ThriftBinary, RecommendWire::ThriftCompact] {
            let codec = RecommendCodec::new(&config(wire, RecommendCall::Chaining));
            let ids = [7u64, 100, 200];
            let mut out = Vec::new();
            codec.encode(&mut out, &ids);
            let payload = match decode_frame(&out, 1 << 20) {
                Framed::Frame { payload, .. } => payload.to_vec(),
                other => panic!("{other:?}"),
            };
            let call = tern_recommend_proto::decode_call(&payload).unwrap();
            assert_eq!(call.name, "chaining");
            let request = call.request.unwrap();
            assert_eq!(
                (request.viewer, request.profile, request.n),
                (100, Some(200), 3)
            );
            let protocol = call.protocol;
            let cases = [
                (Ok(answer(&[1, 2, 3], false)), 7, Outcome::Recommended),
                (Ok(answer(&[1], true)), 7, Outcome::RecommendedPartial),
                (
                    Ok(answer(&[1, 2, 3, 4], false)),
                    7,
                    Outcome::UnexpectedReply,
                ),
                (Ok(answer(&[1, 200], false)), 7, Outcome::UnexpectedReply),
                (Ok(answer(&[5, 5], false)), 7, Outcome::UnexpectedReply),
                (Ok(answer(&[1], false)), 8, Outcome::WrongBatch),
                (Ok(answer(&[], true)), 7, Outcome::RecommendedEmpty),
                (Ok(timed_out(false)), 7, Outcome::UnexpectedReply),
                (Ok(timed_out(true)), 7, Outcome::RecommendedPartial),
                (
                    Err(RecommendError::BadRequest("x".into())),
                    7,
                    Outcome::BadRequest,
                ),
                (
                    Err(RecommendError::Overloaded("x".into())),
                    7,
                    Outcome::Overloaded,
                ),
            ];
            for (reply, seqid, want) in cases {
                let mut bytes = Vec::new();
                write_reply(&mut bytes, protocol, "chaining", seqid, &reply);
                assert_eq!(
                    codec.decode(&bytes[..bytes.len() - 1], |i| ids[i], 3),
                    Ok(Decoded::Incomplete)
                );
                assert_eq!(
                    outcome(codec.decode(&bytes, |i| ids[i], 3).unwrap()),
                    want,
                    "{reply:?}"
                );
            }
        }
    }

    #[test]
    fn http_requests_name_the_call_and_answers_count_by_status() {
        let codec =
            RecommendCodec::new(&config(RecommendWire::Http, RecommendCall::SuggestedUsers));
        let mut out = Vec::new();
        codec.encode(&mut out, &[1, 42]);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with("GET /v1/suggested-users?viewer=42&n=3 HTTP/1.1\r\n"),
            "{text}"
        );
        let reply = |status: &str, body: &str| {
            format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
        };
        for (status, body, want) in [
            (
                "200 OK",
                r#"{"items":[{"account":1}],"partial":false}"#,
                Outcome::Recommended,
            ),
            (
                "200 OK",
                r#"{"items":[{"account":1}],"partial":true}"#,
                Outcome::RecommendedPartial,
            ),
            (
                "200 OK",
                r#"{"items":[],"partial":true}"#,
                Outcome::RecommendedEmpty,
            ),
            ("400 Bad Request", r#"{"error":"x"}"#, Outcome::BadRequest),
            (
                "503 Service Unavailable",
                r#"{"error":"x"}"#,
                Outcome::Overloaded,
            ),
        ] {
            let bytes = reply(status, body);
            assert_eq!(
                outcome(codec.decode(bytes.as_bytes(), |_| 0, 2).unwrap()),
                want
            );
        }
    }
}
