//! The pacer's hot path without I/O: decode a BIDS frame of 10 requests with 3 candidates each, decide every
//! request (targeting, floor, budget, strategy, reservation) and encode the DECISIONS frame. Notices are
//! applied in their own frames so reservations are settled and the ledger stays at a steady size.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use tern_pacer::coordinator::{Coordinator, CoordinatorConfig};
use tern_pacer::ledger::LedgerConfig;
use tern_pacer::money::{Cpm, Micros, Usd};
use tern_pacer::pacer::LoopPacer;
use tern_pacer::proto::{
    decode_frame, encode_bids, encode_notices, CampaignId, Candidate, Device, Frame, Geo, ImpKey,
    Limits, Notice, NoticeKind, NoticeStatus, RequestHeader,
};
use tern_pacer::snapshot::{Campaign, Flight, Snapshot, Targeting};
use tern_pacer::strategy::{Even, Strategy, Throttle};
use tern_runtime::Decode;

const BATCH: usize = 10;

fn bench(c: &mut Criterion) {
    let strategies = [
        Strategy::HardCap,
        Strategy::Even(Even::default()),
        Strategy::Throttle(Throttle::default()),
    ];
    let snapshot = Snapshot::new(
        1,
        (0..100u32).map(|id| Campaign::<Usd> {
            id: CampaignId(id),
            budget: Micros::from_units(1_000_000_000),
            flight: Flight {
                start_ms: 0,
                end_ms: u64::MAX / 2,
            },
            max_cpm: Cpm::from_units(3),
            targeting: Targeting::default(),
            strategy: strategies[id as usize % 3].clone(),
        }),
    );
    let mut coordinator = Coordinator::new(CoordinatorConfig::default());
    for campaign in snapshot.campaigns() {
        coordinator.set_base_budget(campaign.id, campaign.budget);
    }
    let mut pacer = LoopPacer::new(LedgerConfig::default());
    coordinator.sync(0, &mut pacer.ledger);
    let limits = Limits::default();
    let mut auction_id = 0u64;
    let mut out = Vec::with_capacity(4096);
    let mut group = c.benchmark_group("pacer");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.bench_function("decode_decide_encode_10x3_with_billing", |b| {
        // Building the frames is the gateway's work: done in the untimed setup.
        let make_frames = || {
            let now_ms = 1_000_000 + auction_id / 100;
            let requests: Vec<_> = (0..BATCH)
                .map(|i| {
                    auction_id += 1;
                    let header = RequestHeader::<Usd> {
                        key: ImpKey {
                            auction_id,
                            imp_id: 0,
                        },
                        floor: Cpm::from_micros(500_000),
                        deadline_ms: now_ms + 50,
                        hour: 12,
                        device: Device::Phone,
                        geo: Geo(*b"US"),
                        site_id: 9,
                    };
                    let first = (auction_id % 98) as u32;
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
                auction_id,
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
            (now_ms, bids, notice_frame)
        };
        b.iter_batched(
            make_frames,
            |(now_ms, bids, notice_frame)| {
                out.clear();
                let Decode::Frame {
                    request: Frame::Bids(batch),
                    ..
                } = decode_frame::<Usd>(&bids, &limits)
                else {
                    panic!("frame");
                };
                pacer.decide_batch(&snapshot, &batch, now_ms, &mut out);
                let Decode::Frame {
                    request: Frame::Notices(batch),
                    ..
                } = decode_frame::<Usd>(&notice_frame, &limits)
                else {
                    panic!("frame");
                };
                out.clear();
                pacer.apply_notices(&batch, now_ms, &mut out, |_| NoticeStatus::Unknown);
                if now_ms % 100 == 0 {
                    pacer.tick(&snapshot, now_ms);
                    coordinator.sync(0, &mut pacer.ledger);
                }
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
