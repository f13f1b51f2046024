use proptest::prelude::*;
use tern_thrift::{decode_frame, Framed};

use super::*;
use crate::messages::Candidate;

const PROTOCOLS: [ProtocolKind; 2] = [ProtocolKind::Binary, ProtocolKind::Compact];

/// The payload of the one frame in `bytes`.
fn payload(bytes: &[u8]) -> &[u8] {
    match decode_frame(bytes, 1 << 20) {
        Framed::Frame { payload, consumed } => {
            assert_eq!(consumed, bytes.len());
            payload
        }
        other => panic!("not one frame: {other:?}"),
    }
}

fn calls() -> Vec<GraphCall> {
    let mut request = CandidatesRequest::for_viewer(42);
    request.profile = Some(-7);
    request.deadline_ms = Some(15);
    request.seed = Some(i64::MAX);
    vec![
        GraphCall::Neighbours {
            method: Method::OutNeighbours,
            account: 1 << 40,
            limit: 5,
        },
        GraphCall::Neighbours {
            method: Method::InNeighbours,
            account: 0,
            limit: 0,
        },
        GraphCall::Candidates {
            method: Method::CoFollow,
            request,
        },
        GraphCall::Candidates {
            method: Method::PersonalizedPagerank,
            request: CandidatesRequest::for_viewer(3),
        },
        GraphCall::Info,
    ]
}

#[test]
fn calls_read_back_as_written_in_both_protocols() {
    for protocol in PROTOCOLS {
        for (seqid, call) in calls().into_iter().enumerate() {
            let mut out = Vec::new();
            write_call(&mut out, protocol, seqid as i32, &call);
            let incoming = decode_call(payload(&out)).unwrap();
            assert_eq!(incoming.protocol, protocol);
            assert_eq!(incoming.name, call.method().name());
            assert_eq!(incoming.seqid, seqid as i32);
            assert_eq!(incoming.call, Ok(call));
        }
    }
}

#[test]
fn replies_read_back_as_written_in_both_protocols() {
    let candidates = CandidatesResponse {
        candidates: vec![
            Candidate {
                account: 9,
                score: 0.25,
                common: 3,
                adamic_adar: 1.5,
                in_region: true,
            },
            Candidate {
                account: -1,
                score: 0.0,
                common: 0,
                adamic_adar: 0.0,
                in_region: false,
            },
        ],
        steps: 1000,
        cut_short: true,
    };
    let replies = [
        (Method::OutNeighbours, GraphReply::Neighbours(vec![1, 2, 3])),
        (Method::FriendsOfFriends, GraphReply::Candidates(candidates)),
        (
            Method::Info,
            GraphReply::Info(GraphInfo {
                accounts: 10,
                follows: 20,
                directed: true,
                shard: 1,
                shards: 2,
                regions: 3,
            }),
        ),
        (
            Method::CoFollow,
            GraphReply::Error(GraphError::WrongShard {
                message: "account 5 is served by shard 0/2".into(),
                shard: 0,
                shards: 2,
            }),
        ),
        (
            Method::PopularInRegion,
            GraphReply::Error(GraphError::BadRequest("unknown account 5".into())),
        ),
        (
            Method::PopularInRegion,
            GraphReply::Error(GraphError::Overloaded("queue full".into())),
        ),
    ];
    for protocol in PROTOCOLS {
        for (method, reply) in &replies {
            let mut out = Vec::new();
            write_reply(&mut out, protocol, method.name(), 77, reply);
            assert_eq!(read_reply(payload(&out)), Ok((77, reply.clone())));
        }
    }
}

#[test]
fn unknown_methods_and_bad_arguments_are_told_apart() {
    for protocol in PROTOCOLS {
        let mut out = Vec::new();
        write_message(
            &mut out,
            protocol,
            "no_such_method",
            MessageType::Call,
            5,
            |_, _| {},
        );
        let incoming = decode_call(payload(&out)).unwrap();
        assert_eq!((incoming.name, incoming.seqid), ("no_such_method", 5));
        assert_eq!(incoming.call, Err(CallProblem::UnknownMethod));

        // friends_of_friends without its request struct.
        let mut out = Vec::new();
        write_message(
            &mut out,
            protocol,
            "friends_of_friends",
            MessageType::Call,
            6,
            |_, _| {},
        );
        let incoming = decode_call(payload(&out)).unwrap();
        assert!(
            matches!(&incoming.call, Err(CallProblem::BadArguments(why)) if why.contains("request")),
            "{incoming:?}"
        );
    }
}

#[test]
fn application_exceptions_reach_the_caller() {
    for protocol in PROTOCOLS {
        let mut out = Vec::new();
        tern_thrift::write_exception_message(
            &mut out,
            protocol,
            "nope",
            1,
            ApplicationErrorKind::UnknownMethod,
            "Invalid method name: 'nope'",
        );
        assert_eq!(
            read_reply(payload(&out)),
            Err(ReplyError::Application {
                kind: ApplicationErrorKind::UnknownMethod,
                message: "Invalid method name: 'nope'".into()
            })
        );
    }
}

#[test]
fn a_candidate_column_of_another_length_is_refused() {
    for protocol in PROTOCOLS {
        let mut out = Vec::new();
        write_message(
            &mut out,
            protocol,
            "friends_of_friends",
            MessageType::Reply,
            3,
            |w, out| {
                w.write_field_begin(out, FieldType::Struct, 0);
                w.write_struct_begin(out);
                w.write_field_begin(out, FieldType::List, 4);
                w.write_list_begin(out, FieldType::I64, 2);
                w.write_i64(out, 1);
                w.write_i64(out, 2);
                w.write_field_begin(out, FieldType::List, 5);
                w.write_list_begin(out, FieldType::Double, 1);
                w.write_double(out, 0.5);
                w.write_field_stop(out);
                w.write_struct_end(out);
            },
        );
        assert!(matches!(
            read_reply(payload(&out)),
            Err(ReplyError::Thrift(ThriftError::UnexpectedType(_)))
        ));
    }
}

fn candidate() -> impl Strategy<Value = Candidate> {
    (
        any::<i64>(),
        -1e9f64..1e9,
        any::<i32>(),
        0f64..100.0,
        any::<bool>(),
    )
        .prop_map(
            |(account, score, common, adamic_adar, in_region)| Candidate {
                account,
                score,
                common,
                adamic_adar,
                in_region,
            },
        )
}

proptest! {
    /// Any candidates read back as written, in both protocols, whichever columns go empty (all-default ones
    /// do: `zeroed` clears the two-hop and region fields of every candidate).
    #[test]
    fn candidates_read_back_as_written(
        candidates in proptest::collection::vec(candidate(), 0..40),
        zeroed in any::<bool>(),
        steps in any::<i64>(),
    ) {
        let candidates = candidates
            .into_iter()
            .map(|c| if zeroed { Candidate { common: 0, adamic_adar: 0.0, in_region: false, ..c } } else { c })
            .collect();
        let reply = GraphReply::Candidates(CandidatesResponse { candidates, steps, cut_short: zeroed });
        for protocol in PROTOCOLS {
            let mut out = Vec::new();
            write_reply(&mut out, protocol, "co_follow", 8, &reply);
            prop_assert_eq!(read_reply(payload(&out)), Ok((8, reply.clone())));
        }
    }

    /// Garbage never panics either side.
    #[test]
    fn garbage_is_an_error_not_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode_call(&bytes);
        let _ = read_reply(&bytes);
    }

    /// Every truncation of a valid call is refused or read, never a panic.
    #[test]
    fn truncated_calls_are_refused(cut in 0usize..64, compact in any::<bool>()) {
        let protocol = if compact { ProtocolKind::Compact } else { ProtocolKind::Binary };
        let mut out = Vec::new();
        write_call(&mut out, protocol, 1, &calls()[2]);
        let body = payload(&out);
        let cut = cut.min(body.len());
        let _ = decode_call(&body[..cut]);
    }
}
