//! Reads arbitrary bytes as a server's responses, as `tern load`'s HTTP client does (a server can send
//! garbage too): response after response, checking that a whole response never claims more than it was
//! given, that it reads the same from exactly its own bytes, and that every shorter prefix of it is
//! incomplete (a client must never act on half a response).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_http::decode_response;

fuzz_target!(|data: &[u8]| {
    for (bodiless, max_body) in [(false, 1 << 20), (true, 1 << 20), (false, 16)] {
        let mut input = data;
        while let Ok(Some(head)) = decode_response(input, bodiless, max_body) {
            assert!(head.consumed > 0 && head.consumed <= input.len());
            let own = &input[..head.consumed];
            assert_eq!(decode_response(own, bodiless, max_body), Ok(Some(head)));
            for cut in [0, head.consumed / 2, head.consumed - 1] {
                assert_eq!(decode_response(&own[..cut], bodiless, max_body), Ok(None));
            }
            input = &input[head.consumed..];
        }
    }
});
