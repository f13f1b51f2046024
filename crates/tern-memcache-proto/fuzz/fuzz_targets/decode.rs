//! Decodes arbitrary bytes as a connection would: frame after frame, checking the decoder's contracts.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_memcache_proto::{decode, CrawlerClasses, Decoded, Limits, LruCrawler, Request};

fuzz_target!(|data: &[u8]| {
    // A small item limit reaches the too-large path with short inputs.
    for limits in [
        Limits::default(),
        Limits {
            max_item_size: 64,
            max_line_len: 64,
            ..Limits::default()
        },
    ] {
        let mut pos = 0;
        while pos < data.len() {
            let buf = &data[pos..];
            match decode(buf, &limits) {
                Decoded::Incomplete { needed } => {
                    assert!(needed.is_none_or(|n| n > buf.len()));
                    break;
                }
                Decoded::Close { .. } => break,
                Decoded::Frame { request, consumed } => {
                    let line_end = buf
                        .iter()
                        .position(|&b| b == b'\n')
                        .expect("frame without a line")
                        + 1;
                    assert!(consumed >= line_end);
                    if consumed > buf.len() {
                        assert!(matches!(
                            request,
                            Request::TooLarge { .. }
                                | Request::BadDataChunk { .. }
                                | Request::Error(_)
                                | Request::Silent(_)
                        ));
                    }
                    if let Request::Get { keys, .. } = &request {
                        assert!(keys
                            .clone()
                            .all(|k| !k.is_empty() && k.len() <= limits.max_key_len));
                    }
                    // The crawler's class lists, read as the server reads them: only ids 1 to 63.
                    if let Request::LruCrawler(
                        LruCrawler::Crawl { classes } | LruCrawler::Metadump { classes },
                    ) = &request
                    {
                        if let Some(CrawlerClasses::Ids(ids)) = CrawlerClasses::parse(classes) {
                            assert_eq!(ids & 1, 0);
                        }
                    }
                    pos += consumed;
                }
            }
        }
    }
    // `-Y`'s reader of unauthenticated connections, on the same bytes.
    use tern_memcache_proto::ascii_auth::{decode_ascii_auth, AuthDecoded};
    match decode_ascii_auth(data) {
        AuthDecoded::Refused { consumed, .. } | AuthDecoded::Credentials { consumed, .. } => {
            assert!(consumed <= data.len())
        }
        AuthDecoded::Incomplete { needed } => assert!(needed.is_none_or(|n| n > data.len())),
        AuthDecoded::Close => assert!(data.len() > 2048),
    }
});
