use proptest::prelude::*;

use super::*;
use crate::money::{Eur, Usd};

fn header_strategy() -> impl Strategy<Value = RequestHeader<Usd>> {
    (
        any::<u64>(),
        any::<u32>(),
        any::<u64>(),
        any::<u64>(),
        0u8..24,
        0usize..5,
        prop_oneof![
            Just(*b"--"),
            (b'A'..=b'Z', b'A'..=b'Z').prop_map(|(a, b)| [a, b])
        ],
        any::<u64>(),
    )
        .prop_map(
            |(auction_id, imp_id, floor, deadline_ms, hour, device, geo, site_id)| RequestHeader {
                key: ImpKey { auction_id, imp_id },
                floor: Cpm::from_micros(floor),
                deadline_ms,
                hour,
                device: Device::ALL[device],
                geo: Geo(geo),
                site_id,
            },
        )
}

fn request_strategy() -> impl Strategy<Value = (RequestHeader<Usd>, Vec<Candidate<Usd>>)> {
    let candidate = (any::<u32>(), any::<u64>()).prop_map(|(c, p)| Candidate {
        campaign: CampaignId(c),
        max_bid: Cpm::from_micros(p),
    });
    (
        header_strategy(),
        proptest::collection::vec(candidate, 0..=32),
    )
}

fn encode(batch_id: u64, requests: &[(RequestHeader<Usd>, Vec<Candidate<Usd>>)]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_bids(
        &mut out,
        batch_id,
        requests.iter().map(|(h, c)| (h, c.as_slice())),
    );
    out
}

fn expect_bids(input: &[u8]) -> (BidBatch<'_, Usd>, usize) {
    match decode_frame::<Usd>(input, &Limits::default()) {
        Decode::Frame {
            request: Frame::Bids(batch),
            consumed,
        } => (batch, consumed),
        other => panic!("expected a bids frame, got {other:?}"),
    }
}

proptest! {
    #[test]
    fn bids_round_trip(batch_id: u64, requests in proptest::collection::vec(request_strategy(), 0..20)) {
        let bytes = encode(batch_id, &requests);
        let (batch, consumed) = expect_bids(&bytes);
        prop_assert_eq!(consumed, bytes.len());
        prop_assert_eq!(batch.batch_id, batch_id);
        prop_assert_eq!(batch.len(), requests.len());
        let decoded: Vec<_> = batch.requests().collect();
        prop_assert_eq!(decoded.len(), requests.len());
        for (got, (header, candidates)) in decoded.into_iter().zip(&requests) {
            let got = got.expect("valid request");
            prop_assert_eq!(&got.header, header);
            prop_assert_eq!(&got.candidates.collect::<Vec<_>>(), candidates);
        }
    }

    /// Any prefix of a frame is incomplete, and says how much to wait for.
    #[test]
    fn prefixes_are_incomplete(requests in proptest::collection::vec(request_strategy(), 1..5), cut in any::<prop::sample::Index>()) {
        let bytes = encode(7, &requests);
        let cut = cut.index(bytes.len());
        match decode_frame::<Usd>(&bytes[..cut], &Limits::default()) {
            Decode::Incomplete { needed: Some(n) } => prop_assert!(n > cut && n <= bytes.len()),
            other => prop_assert!(false, "prefix of {} gave {:?}", cut, other),
        }
    }

    /// Arbitrary bytes never panic the decoder, and whatever it accepts it can iterate in full.
    #[test]
    fn decoding_garbage_never_panics(mut bytes in proptest::collection::vec(any::<u8>(), 0..600), valid_header: bool, kind in 0u8..7) {
        if valid_header && bytes.len() >= HEADER_LEN {
            // Steer the fuzzing past the header checks so the bodies get exercised too.
            let body_len = (bytes.len() - HEADER_LEN) as u32;
            bytes[..HEADER_LEN].copy_from_slice(&[b'T', b'P', VERSION, kind, 0, 0, 0, 0]);
            bytes[4..8].copy_from_slice(&body_len.to_le_bytes());
        }
        exercise(&bytes);
    }

    /// A request with a bad field is rejected alone; its neighbours decode.
    #[test]
    fn one_bad_request_does_not_fail_the_batch(requests in proptest::collection::vec(request_strategy(), 3..6), victim in any::<prop::sample::Index>(), fault in 0usize..4) {
        let victim = victim.index(requests.len());
        let mut bytes = Vec::new();
        let mut w = FrameWriter::begin(&mut bytes, Kind::Bids);
        let body = w.body();
        body.extend_from_slice(&9u64.to_le_bytes());
        body.extend_from_slice(b"USD");
        body.extend_from_slice(&(requests.len() as u16).to_le_bytes());
        let mut expected = Status::MalformedTruncated;
        for (i, (header, candidates)) in requests.iter().enumerate() {
            let start = body.len();
            put_request(body, header, candidates.iter().copied());
            if i == victim {
                // Offsets inside the request: 2 (length prefix) + 28 hour, 29 device, 30 geo.
                expected = match fault {
                    0 => { body[start + 2 + 28] = 24; Status::MalformedHour }
                    1 => { body[start + 2 + 29] = 5; Status::MalformedDevice }
                    2 => { body[start + 2 + 30] = b'a'; Status::MalformedGeo }
                    _ => {
                        body.push(0);
                        let len = u16::from_le_bytes([body[start], body[start + 1]]) + 1;
                        body[start..start + 2].copy_from_slice(&len.to_le_bytes());
                        Status::MalformedTrailing
                    }
                };
            }
        }
        w.finish();
        let (batch, _) = expect_bids(&bytes);
        for (i, got) in batch.requests().enumerate() {
            if i == victim {
                prop_assert_eq!(got.map(|r| r.header), Err(expected));
            } else {
                prop_assert_eq!(got.map(|r| r.header), Ok(requests[i].0));
            }
        }
    }

    #[test]
    fn decisions_round_trip(batch_id: u64, raw in proptest::collection::vec((any::<bool>(), any::<u32>(), any::<u64>(), 0usize..Status::ALL.len()), 0..50)) {
        let decisions: Vec<Decision<Usd>> = raw.iter().map(|&(bid, c, p, s)| if bid {
            Decision::Bid { campaign: CampaignId(c), price: Cpm::from_micros(p) }
        } else {
            Decision::NoBid(Status::ALL[s])
        }).collect();
        let mut out = Vec::new();
        let mut w = DecisionsWriter::begin(&mut out, batch_id);
        for d in &decisions {
            w.push(*d);
        }
        w.finish();
        match decode_reply::<Usd>(&out, &Limits::default()) {
            Decode::Frame { request, consumed } => {
                prop_assert_eq!(consumed, out.len());
                prop_assert_eq!(request, Reply::Decisions { batch_id, decisions });
            }
            other => prop_assert!(false, "{:?}", other),
        }
    }

    #[test]
    fn notices_and_acks_round_trip(raw in proptest::collection::vec((0usize..3, any::<u64>(), any::<u32>(), any::<u32>(), any::<u64>()), 0..50), acks in proptest::collection::vec(0usize..NoticeStatus::ALL.len(), 0..50)) {
        let kinds = [NoticeKind::Win, NoticeKind::Billing, NoticeKind::Loss];
        let notices: Vec<Notice<Usd>> = raw.iter().map(|&(k, a, i, c, p)| Notice {
            kind: kinds[k],
            key: ImpKey { auction_id: a, imp_id: i },
            campaign: CampaignId(c),
            price: Cpm::from_micros(p),
        }).collect();
        let mut out = Vec::new();
        encode_notices(&mut out, &notices);
        match decode_frame::<Usd>(&out, &Limits::default()) {
            Decode::Frame { request: Frame::Notices(batch), consumed } => {
                prop_assert_eq!(consumed, out.len());
                let got: Vec<_> = batch.notices().collect::<Result<_, _>>().expect("valid notices");
                prop_assert_eq!(got, notices);
            }
            other => prop_assert!(false, "{:?}", other),
        }
        let acks: Vec<_> = acks.into_iter().map(|i| NoticeStatus::ALL[i]).collect();
        let mut out = Vec::new();
        encode_acks(&mut out, &acks);
        match decode_reply::<Usd>(&out, &Limits::default()) {
            Decode::Frame { request, .. } => prop_assert_eq!(request, Reply::Acks(acks)),
            other => prop_assert!(false, "{:?}", other),
        }
    }
}

/// Decodes a frame and walks everything in it, as the pacer would.
pub(crate) fn exercise(bytes: &[u8]) {
    match decode_frame::<Usd>(bytes, &Limits::default()) {
        Decode::Frame { request, consumed } => {
            assert!(consumed <= bytes.len() && consumed >= HEADER_LEN);
            match request {
                Frame::Bids(batch) => {
                    assert_eq!(batch.requests().count(), batch.len());
                    for r in batch.requests().flatten() {
                        assert!(r.candidates.count() <= 32);
                    }
                }
                Frame::Notices(batch) => assert_eq!(batch.notices().count(), batch.len()),
            }
        }
        Decode::Incomplete { needed } => assert!(needed.is_some_and(|n| n > bytes.len())),
        Decode::Close { reply } => assert!(reply.is_some()),
        Decode::Interim { .. } => panic!("the gateway protocol has no interim replies"),
    }
    let _ = decode_reply::<Usd>(bytes, &Limits::default());
}

fn close_reason(bytes: &[u8], limits: &Limits) -> String {
    match decode_frame::<Usd>(bytes, limits) {
        Decode::Close { reply: Some(frame) } => match decode_reply::<Usd>(frame, limits) {
            Decode::Frame {
                request: Reply::Error { message, .. },
                consumed,
            } => {
                assert_eq!(consumed, frame.len());
                message
            }
            other => panic!("error frame does not decode: {other:?}"),
        },
        other => panic!("expected close, got {other:?}"),
    }
}

#[test]
fn frame_level_errors_close_with_an_error_frame() {
    let limits = Limits::default();
    assert_eq!(close_reason(b"GET / HTTP/1.1\r\n", &limits), "bad magic");
    assert_eq!(
        close_reason(b"TP\x02", &limits),
        "unsupported protocol version"
    );
    assert_eq!(
        close_reason(b"TP\x01\x02\0\0\0\0", &limits),
        "unexpected frame kind"
    );
    assert_eq!(
        close_reason(b"TP\x01\x01\xff\xff\xff\xff", &limits),
        "frame body over the limit"
    );
    // A bids frame in euros sent to a dollar pacer.
    let mut euros = Vec::new();
    encode_bids::<Eur>(&mut euros, 1, std::iter::empty());
    assert_eq!(close_reason(&euros, &limits), "currency is not the pacer's");
    // A request length running past the body.
    let mut bad = encode(1, &[]);
    bad[8 + 11..8 + 13].copy_from_slice(&1u16.to_le_bytes());
    bad.extend_from_slice(&[50, 0, 1, 2]);
    let body_len = (bad.len() - HEADER_LEN) as u32;
    bad[4..8].copy_from_slice(&body_len.to_le_bytes());
    assert_eq!(
        close_reason(&bad, &limits),
        "entry lengths do not match the frame body"
    );
    let few = Limits {
        max_requests: 1,
        ..limits
    };
    let header = RequestHeader::<Usd> {
        key: ImpKey {
            auction_id: 1,
            imp_id: 1,
        },
        floor: Cpm::ZERO,
        deadline_ms: 0,
        hour: 0,
        device: Device::Unknown,
        geo: Geo::UNKNOWN,
        site_id: 0,
    };
    let two = encode(1, &[(header, vec![]), (header, vec![])]);
    assert_eq!(close_reason(&two, &few), "too many entries in one frame");
}

#[test]
fn too_many_candidates_is_a_bad_request_not_a_bad_frame() {
    let header = RequestHeader::<Usd> {
        key: ImpKey {
            auction_id: 1,
            imp_id: 2,
        },
        floor: Cpm::from_micros(1),
        deadline_ms: 3,
        hour: 4,
        device: Device::Tv,
        geo: Geo(*b"FR"),
        site_id: 5,
    };
    let many = vec![
        Candidate {
            campaign: CampaignId(1),
            max_bid: Cpm::from_micros(1)
        };
        33
    ];
    let bytes = encode(1, &[(header, many), (header, vec![])]);
    let (batch, _) = expect_bids(&bytes);
    let got: Vec<_> = batch.requests().map(|r| r.map(|r| r.header)).collect();
    assert_eq!(
        got,
        vec![Err(Status::MalformedTooManyCandidates), Ok(header)]
    );
}

#[test]
fn frames_are_consumed_one_at_a_time() {
    let mut bytes = encode(1, &[]);
    encode_notices::<Usd>(&mut bytes, &[]);
    let (_, consumed) = expect_bids(&bytes);
    match decode_frame::<Usd>(&bytes[consumed..], &Limits::default()) {
        Decode::Frame {
            request: Frame::Notices(n),
            consumed: c,
        } => {
            assert!(n.is_empty());
            assert_eq!(consumed + c, bytes.len());
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn unknown_notice_kind_is_rejected_alone() {
    let notice = Notice::<Usd> {
        kind: NoticeKind::Loss,
        key: ImpKey {
            auction_id: 1,
            imp_id: 1,
        },
        campaign: CampaignId(1),
        price: Cpm::ZERO,
    };
    let mut bytes = Vec::new();
    encode_notices(&mut bytes, &[notice, notice]);
    bytes[HEADER_LEN + 5] = 9;
    match decode_frame::<Usd>(&bytes, &Limits::default()) {
        Decode::Frame {
            request: Frame::Notices(batch),
            ..
        } => {
            assert_eq!(
                batch.notices().collect::<Vec<_>>(),
                vec![Err(()), Ok(notice)]
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn every_decision_is_named_as_its_debug_form() {
    let bid = Decision::<crate::money::Usd>::Bid {
        campaign: CampaignId(1),
        price: crate::money::Cpm::from_units(1),
    };
    assert_eq!(DECISION_NAMES[bid.index()], "Bid");
    for status in Status::ALL {
        let decision = Decision::<crate::money::Usd>::NoBid(status);
        assert_eq!(DECISION_NAMES[decision.index()], format!("{status:?}"));
    }
}

#[test]
fn statuses_display_the_names_metrics_and_openrtb_answers_use() {
    // The names are part of the wire (no-bid headers, notice answers, metric labels): each is the variant's
    // name, and distinct.
    let names: Vec<String> = Status::ALL.iter().map(ToString::to_string).collect();
    assert_eq!(names, DECISION_NAMES[1..]);
    assert_eq!(Status::BudgetExhausted.to_string(), "BudgetExhausted");
    let notices: Vec<String> = NoticeStatus::ALL.iter().map(ToString::to_string).collect();
    assert_eq!(
        notices,
        [
            "Applied",
            "Duplicate",
            "Unknown",
            "CampaignMismatch",
            "LateBilled",
            "Malformed",
            "Forwarded",
            "Refused"
        ]
    );
}
