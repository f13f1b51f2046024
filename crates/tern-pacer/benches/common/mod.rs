//! What the pacer's benches share: the gateway's side of a batch (a BIDS frame of 10 requests with 3
//! candidates each, and the NOTICES frame billing each bid), the pacer's side (decode, decide, answer, then
//! apply the billing notices), and the periodic tick and sync that keep a loop's slices topped up.

// Each bench uses part of it.
#![allow(dead_code)]

use tern_pacer::coordinator::Coordinator;
use tern_pacer::money::{Cpm, Usd};
use tern_pacer::pacer::LoopPacer;
use tern_pacer::proto::{
    decode_frame, encode_bids, encode_notices, CampaignId, Candidate, Device, Frame, Geo, ImpKey,
    Limits, Notice, NoticeKind, NoticeStatus, RequestHeader,
};
use tern_pacer::snapshot::Snapshot;
use tern_pacer::strategy::Strategy;
use tern_runtime::Decode;

/// Requests in a BIDS frame.
pub const BATCH: usize = 10;

/// 100 campaigns with a budget that never runs out, bidding up to 3 USD CPM, paced by `strategy(id)`.
pub fn hundred_campaigns(strategy: impl Fn(u32) -> Strategy) -> Snapshot<Usd> {
    Snapshot::new(
        1,
        (0..100u32).map(|id| {
            tern_pacer::fixtures::campaign(id, 1_000_000_000, Cpm::from_units(3), strategy(id))
        }),
    )
}

/// A BIDS frame of [`BATCH`] requests for the auctions after `*auction_id` (3 of the 100 campaigns as
/// candidates each, at 2 or 3 USD CPM, over a 0.5 USD floor), and the NOTICES frame billing each at 1 USD
/// CPM to its first candidate.
pub fn batch_frames(auction_id: &mut u64, deadline_ms: u64) -> (Vec<u8>, Vec<u8>) {
    let requests: Vec<_> = (0..BATCH)
        .map(|i| {
            *auction_id += 1;
            let header = RequestHeader::<Usd> {
                key: ImpKey {
                    auction_id: *auction_id,
                    imp_id: 0,
                },
                floor: Cpm::from_micros(500_000),
                deadline_ms,
                hour: 12,
                device: Device::Phone,
                geo: Geo(*b"US"),
                site_id: 9,
            };
            let first = (*auction_id % 98) as u32;
            let candidates: Vec<_> = (first..first + 3)
                .map(|id| Candidate {
                    campaign: CampaignId(id),
                    max_bid: Cpm::from_units(2 + i as u64 % 2),
                })
                .collect();
            (header, candidates)
        })
        .collect();
    let mut bids = Vec::new();
    encode_bids(
        &mut bids,
        *auction_id,
        requests.iter().map(|(h, c)| (h, c.as_slice())),
    );
    let notices: Vec<Notice<Usd>> = requests
        .iter()
        .map(|(h, c)| Notice {
            kind: NoticeKind::Billing,
            key: h.key,
            campaign: c[0].campaign,
            price: Cpm::from_units(1),
        })
        .collect();
    let mut notice_frame = Vec::new();
    encode_notices(&mut notice_frame, &notices);
    (bids, notice_frame)
}

/// The pacer's work for one batch: decode the BIDS frame, decide it into `out`, then decode and apply the
/// NOTICES frame.
pub fn decide_and_bill(
    pacer: &mut LoopPacer<Usd>,
    snapshot: &Snapshot<Usd>,
    (bids, notices): (&[u8], &[u8]),
    now_ms: u64,
    out: &mut Vec<u8>,
) {
    let limits = Limits::default();
    out.clear();
    let Decode::Frame {
        request: Frame::Bids(batch),
        ..
    } = decode_frame::<Usd>(bids, &limits)
    else {
        panic!("a BIDS frame");
    };
    pacer.decide_batch(snapshot, &batch, now_ms, out);
    let Decode::Frame {
        request: Frame::Notices(batch),
        ..
    } = decode_frame::<Usd>(notices, &limits)
    else {
        panic!("a NOTICES frame");
    };
    out.clear();
    pacer.apply_notices(&batch, now_ms, out, |_| NoticeStatus::Unknown);
}

/// [`tick_and_sync`] once every 100 ms of the benches' clock (which moves a millisecond every 100 auctions).
pub fn tick_every_100_ms(
    pacer: &mut LoopPacer<Usd>,
    coordinator: &mut Coordinator<Usd>,
    snapshot: &Snapshot<Usd>,
    now_ms: u64,
) {
    if now_ms % 100 == 0 {
        tick_and_sync(pacer, coordinator, snapshot, now_ms);
    }
}

/// What a loop does every sync interval: tick the controllers and sync the slices with the coordinator.
pub fn tick_and_sync(
    pacer: &mut LoopPacer<Usd>,
    coordinator: &mut Coordinator<Usd>,
    snapshot: &Snapshot<Usd>,
    now_ms: u64,
) {
    pacer.tick(snapshot, now_ms);
    coordinator.sync(0, &mut pacer.ledger);
}
