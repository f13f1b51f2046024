//! Feeds arbitrary bytes to the pacer's side of the gateway protocol, frame after frame as a connection
//! would, and decides or applies whatever decodes, against a small fixed configuration. Nothing may panic,
//! every reply must decode, and a decoder must never ask for less input than it has.
//!
//! From `crates/tern-pacer`, on stable Rust:
//! `mkdir -p fuzz/corpus/decode && RUSTC_BOOTSTRAP=1 cargo fuzz run decode fuzz/corpus/decode fuzz/seeds/decode -- -max_total_time=60`
//! (`fuzz/seeds/decode` holds valid BIDS and NOTICES frames to start from).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_pacer::coordinator::{Coordinator, CoordinatorConfig};
use tern_pacer::ledger::LedgerConfig;
use tern_pacer::money::{Cpm, Micros, Usd};
use tern_pacer::pacer::LoopPacer;
use tern_pacer::proto::{
    decode_frame, decode_reply, CampaignId, Frame, Limits, NoticeStatus, Reply,
};
use tern_pacer::snapshot::{Campaign, Flight, Snapshot, Targeting};
use tern_pacer::strategy::{Even, Strategy};
use tern_runtime::Decode;

fuzz_target!(|data: &[u8]| {
    let limits = Limits::default();
    let snapshot = Snapshot::new(
        1,
        (1..=3).map(|id| Campaign::<Usd> {
            id: CampaignId(id),
            budget: Micros::from_units(100),
            flight: Flight {
                start_ms: 0,
                end_ms: u64::MAX,
            },
            max_cpm: Cpm::from_units(5),
            targeting: Targeting::default(),
            strategy: if id == 1 {
                Strategy::HardCap
            } else {
                Strategy::Even(Even::default())
            },
        }),
    );
    let mut coordinator = Coordinator::new(CoordinatorConfig::default());
    for c in snapshot.campaigns() {
        coordinator.set_base_budget(c.id, c.budget);
    }
    let mut pacer = LoopPacer::new(LedgerConfig::default());
    coordinator.sync(0, &mut pacer.ledger);
    let mut input = data;
    let mut now_ms = 1_000;
    loop {
        let mut out = Vec::new();
        match decode_frame::<Usd>(input, &limits) {
            Decode::Incomplete { needed } => {
                assert!(needed.is_none_or(|n| n > input.len()));
                break;
            }
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
