//! Feeds arbitrary bytes to the pacer's side of the gateway protocol, frame after frame as a connection
//! would, and decides or applies whatever decodes, against a small fixed configuration. Nothing may panic,
//! every reply must decode, and a decoder must never ask for less input than it has.
//!
//! From `crates/tern-pacer`, on stable Rust:
//! `mkdir -p fuzz/corpus/decode && RUSTC_BOOTSTRAP=1 cargo fuzz run decode fuzz/corpus/decode fuzz/seeds/decode -- -max_total_time=60`
//! (`fuzz/seeds/decode` holds valid BIDS and NOTICES frames to start from).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_pacer::fixtures::{campaign, funded, hard_cap_then_even};
use tern_pacer::money::{Cpm, Usd};
use tern_pacer::proto::{decode_frame, decode_reply, Frame, Limits, NoticeStatus, Reply};
use tern_pacer::snapshot::Snapshot;
use tern_runtime::Decode;

fuzz_target!(|data: &[u8]| {
    let limits = Limits::default();
    let snapshot = Snapshot::<Usd>::new(
        1,
        (1..=3).map(|id| campaign(id, 100, Cpm::from_units(5), hard_cap_then_even(id))),
    );
    let (mut coordinator, mut pacer) = funded(&snapshot);
    let mut input = data;
    let mut now_ms = 1_000;
    loop {
        let mut out = Vec::new();
        match decode_frame::<Usd>(input, &limits) {
            Decode::Incomplete { needed } => {
                assert!(needed.is_none_or(|n| n > input.len()));
                break;
            }
            Decode::Interim { .. } => panic!("the gateway protocol has no interim replies"),
            Decode::Close { reply } => {
                let frame = reply.expect("frame errors carry an ERROR frame");
                assert!(matches!(
                    decode_reply::<Usd>(frame, &limits),
                    Decode::Frame {
                        request: Reply::Error { .. },
                        ..
                    }
                ));
                break;
            }
            Decode::Frame { request, consumed } => {
                assert!(consumed > 0 && consumed <= input.len());
                match request {
                    Frame::Bids(batch) => pacer.decide_batch(&snapshot, &batch, now_ms, &mut out),
                    Frame::Notices(batch) => {
                        pacer.apply_notices(&batch, now_ms, &mut out, |_| NoticeStatus::Unknown)
                    }
                }
                match decode_reply::<Usd>(&out, &limits) {
                    Decode::Frame { consumed, .. } => assert_eq!(consumed, out.len()),
                    other => panic!("the pacer's reply does not decode: {other:?}"),
                }
                input = &input[consumed..];
                now_ms += 7;
            }
        }
        coordinator.sync(0, &mut pacer.ledger);
    }
});
