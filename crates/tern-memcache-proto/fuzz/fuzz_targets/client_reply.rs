//! Parses arbitrary bytes as a server's replies, as a client would read them (a server can send garbage
//! too): reply after reply, checking that a complete reply says how much it used, that it parses the same
//! from exactly those bytes, and that an incomplete one stays incomplete on every shorter prefix.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_memcache_proto::client::{parse_reply, Limits, Parse};

fuzz_target!(|data: &[u8]| {
    for limits in [
        Limits::default(),
        Limits {
            max_line: 32,
            max_value: 16,
        },
    ] {
        let mut pos = 0;
        while pos < data.len() {
            let buf = &data[pos..];
            match parse_reply(buf, &limits) {
                Ok(Parse::Complete { reply, consumed }) => {
                    assert!(consumed > 0 && consumed <= buf.len());
                    assert_eq!(
                        parse_reply(&buf[..consumed], &limits),
                        Ok(Parse::Complete { reply, consumed }),
                        "a reply parses the same from exactly its bytes"
                    );
                    pos += consumed;
                }
                Ok(Parse::Incomplete) => {
                    for end in [0, buf.len() / 2] {
                        assert_eq!(parse_reply(&buf[..end], &limits), Ok(Parse::Incomplete));
                    }
                    break;
                }
                Err(_) => break,
            }
        }
    }
});
