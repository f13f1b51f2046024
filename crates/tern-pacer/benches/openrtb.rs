//! The pacer's OpenRTB path without I/O: decode an HTTP/1.1 request carrying a BidRequest (one impression),
//! parse the JSON, match 30 campaigns' targeting, decide and reserve, write the BidResponse; then decode and
//! apply the billing notice its `burl` points at, so the ledger stays at a steady size.

mod common;

use common::tick_every_100_ms;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use tern_http::{decode_request, Decode, HttpLimits};
use tern_pacer::money::Cpm;
use tern_pacer::openrtb::{serve, Clock, Front};
use tern_pacer::proto::{Geo, NoticeStatus};
use tern_pacer::snapshot::{Campaign, Snapshot, Targeting};
use tern_pacer::strategy::{Even, Strategy};

/// The pacer's default limit of impressions per BidRequest.
const FRONT: Front = Front {
    max_imps: 64,
    https: false,
};

fn bench(c: &mut Criterion) {
    // A third of the campaigns want the US, a third Germany, a third anyone: 20 candidates per request.
    let snapshot = Snapshot::new(
        1,
        (0..30u32).map(|id| {
            let strategy = if id % 2 == 0 {
                Strategy::HardCap
            } else {
                Strategy::Even(Even::default())
            };
            let max_cpm = Cpm::from_micros(2_000_000 + u64::from(id) * 10_000);
            Campaign {
                targeting: Targeting {
                    geos: match id % 3 {
                        0 => vec![Geo(*b"US")],
                        1 => vec![Geo(*b"DE")],
                        _ => Vec::new(),
                    },
                    ..Targeting::default()
                },
                ads: tern_pacer::fixtures::banner_ads(id),
                ..tern_pacer::fixtures::campaign(id, 1_000_000_000, max_cpm, strategy)
            }
        }),
    );
    let (mut coordinator, mut pacer) = tern_pacer::fixtures::funded(&snapshot);
    let limits = HttpLimits::default();
    let mut auction = 0u64;
    let mut out = Vec::with_capacity(4096);
    let mut group = c.benchmark_group("pacer_openrtb");
    group.throughput(Throughput::Elements(1));
    group.bench_function("http_bidrequest_decide_bidresponse_with_billing", |b| {
        // The exchange's work, untimed: a fresh auction id each time.
        let make_request = || {
            auction += 1;
            let body = format!(
                r#"{{"id":"auction-{auction}","at":2,"cur":["USD"],"tmax":120,"imp":[{{"id":"1","bidfloor":0.5,"bidfloorcur":"USD","banner":{{"w":300,"h":250,"battr":[9]}}}}],"bcat":["IAB25","IAB26"],"badv":["spam.example"],"site":{{"id":"77","domain":"news.example"}},"device":{{"devicetype":4,"ua":"Mozilla/5.0","ip":"192.0.2.1","geo":{{"country":"USA","utcoffset":-300}}}},"user":{{"id":"u1"}}}}"#
            );
            let request = format!(
                "POST /openrtb2/auction HTTP/1.1\r\nHost: pacer:7400\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            (1_000_000 + auction / 100, request.into_bytes())
        };
        b.iter_batched(
            make_request,
            |(now_ms, request)| {
                let clock = Clock {
                    received_ms: now_ms,
                    now_ms,
                };
                out.clear();
                let Decode::Frame { request, .. } = decode_request(&request, &limits) else {
                    panic!("request");
                };
                serve(&mut pacer, &snapshot, &request, FRONT, clock, &mut out, |_| {
                    NoticeStatus::Unknown
                });
                // The exchange fires the billing URL from the response, with its price filled in (found by a
                // plain search: parsing the whole response is the exchange's cost, not the pacer's).
                let text = std::str::from_utf8(&out).expect("UTF-8");
                let burl = text
                    .split_once(r#""burl":"http://pacer:7400"#)
                    .and_then(|(_, rest)| rest.split_once('"'))
                    .expect("a bid with a burl")
                    .0;
                let target = burl.replace("${AUCTION_PRICE}", "1.25");
                let notice = format!("GET {target} HTTP/1.1\r\n\r\n");
                let Decode::Frame { request, .. } = decode_request(notice.as_bytes(), &limits)
                else {
                    panic!("notice");
                };
                out.clear();
                serve(&mut pacer, &snapshot, &request, FRONT, clock, &mut out, |_| {
                    NoticeStatus::Unknown
                });
                tick_every_100_ms(&mut pacer, &mut coordinator, &snapshot, now_ms);
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
