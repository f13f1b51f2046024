use proptest::prelude::*;
use tern_thrift::{decode_frame, Framed};

use super::*;
use crate::messages::{Recommendation, SourceReport, SourceStatus};

const PROTOCOLS: [ProtocolKind; 2] = [ProtocolKind::Binary, ProtocolKind::Compact];

fn payload(bytes: &[u8]) -> &[u8] {
    match decode_frame(bytes, 1 << 20) {
        Framed::Frame { payload, consumed } => {
            assert_eq!(consumed, bytes.len());
            payload
        }
        other => panic!("not one frame: {other:?}"),
    }
}

#[test]
fn both_methods_read_back_as_written() {
    let mut chaining = RecommendRequest::chaining(5, 9, 30);
    chaining.deadline_ms = Some(40);
    chaining.exclude = vec![1, 2, 3];
    let mut suggested = RecommendRequest::suggested_users(-4, 10);
    suggested.exclude = vec![8];
    for protocol in PROTOCOLS {
        for request in [&chaining, &suggested] {
            let mut out = Vec::new();
            write_call(&mut out, protocol, 12, request);
            let call = decode_call(payload(&out)).unwrap();
            assert_eq!(
                (call.protocol, call.name, call.seqid),
                (protocol, request.method().name(), 12)
            );
            assert_eq!(call.request.as_ref(), Ok(request));
        }
    }
}

#[test]
fn replies_read_back_as_written() {
    let recs = Recommendations {
        items: vec![Recommendation {
            account: 77,
            score: -1.25,
            source: "friends_of_friends".into(),
        }],
        partial: true,
        sources: vec![SourceReport {
            source: "personalized_pagerank".into(),
            status: SourceStatus::Timeout,
            latency_us: 15_000,
            candidates: 0,
        }],
        model_version: "0123abcd".into(),
    };
    for protocol in PROTOCOLS {
        for reply in [
            Ok(recs.clone()),
            Err(RecommendError::BadRequest("unknown account 3".into())),
            Err(RecommendError::Overloaded("queue timeout".into())),
        ] {
            let mut out = Vec::new();
            write_reply(&mut out, protocol, "chaining", 3, &reply);
            assert_eq!(read_reply(payload(&out)), Ok((3, reply)));
        }
    }
}

#[test]
fn chaining_without_a_profile_is_a_protocol_error() {
    let mut out = Vec::new();
    // A suggested_users request sent as chaining: no profile field.
    tern_thrift::write_message(
        &mut out,
        ProtocolKind::Binary,
        "chaining",
        tern_thrift::MessageType::Call,
        1,
        |w, out| {
            w.write_field_begin(out, FieldType::Struct, 1);
            RecommendRequest::suggested_users(1, 2).write(w, out);
        },
    );
    let call = decode_call(payload(&out)).unwrap();
    let (kind, message) = call.request.unwrap_err();
    assert_eq!(kind, ApplicationErrorKind::ProtocolError);
    assert!(message.contains("profile"), "{message}");
}

proptest! {
    #[test]
    fn garbage_is_an_error_not_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode_call(&bytes);
        let _ = read_reply(&bytes);
    }
}
