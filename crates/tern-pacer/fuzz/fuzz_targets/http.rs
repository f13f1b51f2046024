//! Feeds arbitrary bytes to the pacer's HTTP/1.1 front as one connection would, request after request, and
//! serves whatever decodes (auctions, notices, unknown routes) against a small fixed configuration. Nothing
//! may panic, a decoder must never ask for less input than it has nor take more than it was given, and every
//! reply must be one well-formed HTTP/1.1 response whose body matches its `Content-Length`.
//!
//! From `crates/tern-pacer`, on stable Rust:
//! `mkdir -p fuzz/corpus/http && RUSTC_BOOTSTRAP=1 cargo fuzz run http fuzz/corpus/http fuzz/seeds/http -- -max_total_time=60`
//! (`fuzz/seeds/http` holds a bid request, notices and a pipelined burst to start from).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_pacer::fixtures::{funded, hard_cap_then_even, three_campaigns};
use tern_http::{decode_request, Decode, HttpLimits};
use tern_pacer::money::Usd;
use tern_pacer::openrtb::{serve, Clock, Front};
use tern_pacer::proto::NoticeStatus;

/// Checks that `reply` is exactly one HTTP/1.1 response (a final one, or a `100 Continue`).
fn check_reply(reply: &[u8]) {
    let mut headers = [httparse::EMPTY_HEADER; 16];
    let mut response = httparse::Response::new(&mut headers);
    let Ok(httparse::Status::Complete(head)) = response.parse(reply) else {
        panic!("not a whole response: {:?}", String::from_utf8_lossy(reply));
    };
    let status = response.code.expect("a status");
    let length = response
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .map(|h| {
            std::str::from_utf8(h.value)
                .unwrap()
                .parse::<usize>()
                .unwrap()
        });
    match length {
        Some(length) => assert_eq!(reply.len() - head, length),
        None => assert!(matches!(status, 100 | 204) && reply.len() == head),
    }
}

fuzz_target!(|data: &[u8]| {
    let limits = HttpLimits {
        max_head_bytes: 2048,
        max_headers: 16,
        max_body_bytes: 4096,
    };
    // Notice URLs over https or http, by the input's length (both are written the same way otherwise).
    let front = Front {
        max_imps: 8,
        https: data.len() % 2 == 1,
    };
    // Campaign `id` bids up to `id` USD CPM; campaign 3 wants the US only.
    let snapshot = three_campaigns::<Usd>(100, hard_cap_then_even);
    let (mut coordinator, mut pacer) = funded(&snapshot);
    let mut input = data;
    let mut now_ms = 1_000_000;
    loop {
        match decode_request(input, &limits) {
            Decode::Incomplete { needed } => {
                assert!(needed.is_none_or(|n| n > input.len()));
                break;
            }
            Decode::Interim { reply, needed } => {
                assert!(needed.is_some_and(|n| n > input.len()));
                check_reply(reply);
                break;
            }
            Decode::Close { reply } => {
                check_reply(reply.expect("framing errors carry a response"));
                break;
            }
            Decode::Frame { request, consumed } => {
                assert!(consumed > 0 && consumed <= input.len());
                let mut out = Vec::new();
                let clock = Clock {
                    received_ms: now_ms,
                    now_ms,
                };
                let keep_alive = serve(
                    &mut pacer,
                    &snapshot,
                    &request,
                    front,
                    clock,
                    &mut out,
                    |_| NoticeStatus::Unknown,
                );
                check_reply(&out);
                if !keep_alive {
                    break;
                }
                input = &input[consumed..];
                now_ms += 7;
            }
        }
        coordinator.sync(0, &mut pacer.ledger);
    }
});
