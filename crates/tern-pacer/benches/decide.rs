//! The pacer's hot path without I/O: decode a BIDS frame of 10 requests with 3 candidates each, decide every
//! request (targeting, floor, budget, strategy, reservation) and encode the DECISIONS frame. Notices are
//! applied in their own frames so reservations are settled and the ledger stays at a steady size.

mod common;

use common::{batch_frames, decide_and_bill, hundred_campaigns, tick_every_100_ms, BATCH};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use tern_pacer::strategy::{Even, Strategy, Throttle};

fn bench(c: &mut Criterion) {
    let snapshot = hundred_campaigns(|id| match id % 3 {
        0 => Strategy::HardCap,
        1 => Strategy::Even(Even::default()),
        _ => Strategy::Throttle(Throttle::default()),
    });
    let (mut coordinator, mut pacer) = tern_pacer::fixtures::funded(&snapshot);
    let mut auction_id = 0u64;
    let mut out = Vec::with_capacity(4096);
    let mut group = c.benchmark_group("pacer");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.bench_function("decode_decide_encode_10x3_with_billing", |b| {
        // Building the frames is the gateway's work: done in the untimed setup.
        let make_frames = || {
            let now_ms = 1_000_000 + auction_id / 100;
            let (bids, notices) = batch_frames(&mut auction_id, now_ms + 50);
            (now_ms, bids, notices)
        };
        b.iter_batched(
            make_frames,
            |(now_ms, bids, notices)| {
                decide_and_bill(&mut pacer, &snapshot, (&bids, &notices), now_ms, &mut out);
                tick_every_100_ms(&mut pacer, &mut coordinator, &snapshot, now_ms);
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
