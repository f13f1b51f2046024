//! Decodes arbitrary bytes as a pacer's replies, on the gateway's side (what tern load and gateways read: a
//! server can send garbage too), frame after frame: nothing may panic, a frame says how much it used and
//! decodes the same from exactly those bytes, and an incomplete one never asks for less than it has.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_pacer::money::Usd;
use tern_pacer::proto::{decode_reply, Limits, Reply};
use tern_runtime::Decode;

fuzz_target!(|data: &[u8]| {
    for limits in [
        Limits::default(),
        Limits {
            max_body: 64,
            ..Limits::default()
        },
    ] {
        let mut input = data;
        loop {
            match decode_reply::<Usd>(input, &limits) {
                Decode::Incomplete { needed } | Decode::Interim { needed, .. } => {
                    assert!(needed.is_none_or(|n| n > input.len()));
                    break;
                }
                Decode::Close { .. } => break,
                Decode::Frame { request, consumed } => {
                    assert!(consumed > 0 && consumed <= input.len());
                    let again: Decode<Reply<Usd>> = decode_reply(&input[..consumed], &limits);
                    match again {
                        Decode::Frame {
                            request: same,
                            consumed: same_len,
                        } => assert!(same == request && same_len == consumed),
                        _ => panic!("a frame decodes the same from exactly its bytes"),
                    }
                    input = &input[consumed..];
                }
            }
        }
    }
});
