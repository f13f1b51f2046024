//! Property tests of the decoder: it never panics, framing does not depend on how bytes arrive, and
//! `consumed`/`needed` stay within their contracts.

use proptest::prelude::*;
use tern_memcache_proto::{decode, Decoded, Limits, Request};

/// Pieces that make random input look like memcached traffic often enough to reach deep paths.
fn fragment() -> impl Strategy<Value = Vec<u8>> {
    let words: &[&[u8]] = &[
        b"get ",
        b"gets ",
        b"gat ",
        b"set ",
        b"add ",
        b"cas ",
        b"append ",
        b"incr ",
        b"decr ",
        b"delete ",
        b"touch ",
        b"flush_all",
        b"mg ",
        b"ms ",
        b"md ",
        b"ma ",
        b"mn",
        b"me ",
        b"stats",
        b"lru_crawler ",
        b"verbosity ",
        b"noreply",
        b" ",
        b"  ",
        b"\r\n",
        b"\n",
        b"\r",
        b"\0",
        b"0",
        b"1",
        b"5",
        b"-1",
        b"4294967297",
        b"18446744073709551616",
        b"k",
        b"YWJj",
        b"b",
        b"v",
        b"q",
        b"k",
        b"O12",
        b"T10",
        b"N5",
        b"MS",
        b"ME",
        b"Mx",
        b"D3",
        b"J7",
        b"F9",
        b"C1",
        b"I",
        b"\x80",
        b"\x7f",
    ];
    prop_oneof![
        proptest::sample::select(words).prop_map(|w| w.to_vec()),
        proptest::collection::vec(any::<u8>(), 1..8),
    ]
}

fn arbitrary_input() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(fragment(), 0..40).prop_map(|parts| parts.concat())
}

fn key() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_:]{1,12}"
}

/// One well-formed request (possibly one memcached answers with an error, but complete).
fn valid_request() -> impl Strategy<Value = Vec<u8>> {
    let data = proptest::collection::vec(any::<u8>(), 0..40);
    prop_oneof![
        proptest::collection::vec(key(), 1..6).prop_map(|keys| format!(
            "get {}\r\n",
            keys.join(" ")
        )
        .into_bytes()),
        (key(), any::<u32>(), -5i32..100, data.clone(), any::<bool>()).prop_map(
            |(k, flags, exp, data, noreply)| {
                let noreply = if noreply { " noreply" } else { "" };
                [
                    format!("set {k} {flags} {exp} {}{noreply}\r\n", data.len()).as_bytes(),
                    &data,
                    b"\r\n",
                ]
                .concat()
            }
        ),
        (key(), data.clone()).prop_map(|(k, data)| {
            [
                format!("ms {k} {} T0 F3 O9 k c\r\n", data.len()).as_bytes(),
                &data,
                b"\r\n",
            ]
            .concat()
        }),
        (key(), data).prop_map(|(k, data)| {
            // A bad data chunk: one byte more than announced.
            [
                format!("add {k} 0 0 {}\n", data.len()).as_bytes(),
                &data,
                b"x\r\n",
            ]
            .concat()
        }),
        key().prop_map(|k| format!("mg {k} v k s t f O1 q\r\n").into_bytes()),
        key().prop_map(|k| format!("md {k} q\n").into_bytes()),
        (key(), any::<u64>()).prop_map(|(k, d)| format!("incr {k} {d}\r\n").into_bytes()),
        key().prop_map(|k| format!("delete {k} 0 noreply\r\n").into_bytes()),
        key().prop_map(|k| format!("touch {k} x\r\n").into_bytes()),
        Just(b"mn\r\n".to_vec()),
        Just(b"version\r\n".to_vec()),
        Just(b"bogus\r\n".to_vec()),
        Just(b"\r\n".to_vec()),
    ]
}

/// Where the first line of `buf` ends (just past its newline).
fn line_end(buf: &[u8]) -> Option<usize> {
    buf.iter().position(|&b| b == b'\n').map(|i| i + 1)
}

fn swallows(request: &Request<'_>) -> bool {
    matches!(
        request,
        Request::TooLarge { .. }
            | Request::BadDataChunk { .. }
            | Request::Error(_)
            | Request::Silent(_)
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn decode_never_panics_and_keeps_its_contracts(input in arbitrary_input()) {
        let limits = Limits::default();
        let mut pos = 0;
        while pos < input.len() {
            let buf = &input[pos..];
            match decode(buf, &limits) {
                Decoded::Incomplete { needed } => {
                    if let Some(needed) = needed {
                        prop_assert!(needed > buf.len());
                    }
                    break;
                }
                Decoded::Close { .. } => break,
                Decoded::Frame { request, consumed } => {
                    let end = line_end(buf).expect("a frame needs a complete line");
                    prop_assert!(consumed >= end);
                    if consumed > buf.len() {
                        prop_assert!(swallows(&request), "{request:?} consumed {consumed} of {}", buf.len());
                    }
                    pos += consumed;
                }
            }
        }
    }

    #[test]
    fn framing_does_not_depend_on_arrival(requests in proptest::collection::vec(valid_request(), 1..8)) {
        let stream = requests.concat();
        let limits = Limits::default();
        let mut start = 0;
        while start < stream.len() {
            let Decoded::Frame { request, consumed } = decode(&stream[start..], &limits) else {
                panic!("a valid stream must decode whole");
            };
            let end = start + consumed;
            prop_assert!(end <= stream.len());
            // Every shorter arrival is Incomplete, with `needed` (when given) exactly the frame's length.
            for arrived in start..end {
                match decode(&stream[start..arrived], &limits) {
                    Decoded::Incomplete { needed: None } => {}
                    Decoded::Incomplete { needed: Some(needed) } => {
                        prop_assert!(needed > arrived - start);
                        prop_assert_eq!(needed, consumed);
                    }
                    other => prop_assert!(false, "{other:?} after {} of {consumed} bytes", arrived - start),
                }
            }
            // Bytes after the frame do not change it.
            prop_assert_eq!(decode(&stream[start..end], &limits), Decoded::Frame { request, consumed });
            start = end;
        }
    }
}

proptest! {
    /// `-Y`'s reader never panics, never uses bytes it does not have, and what it says of an input it says
    /// of any longer one (an incomplete one stays incomplete on its prefixes).
    #[test]
    fn ascii_auth_reader_keeps_its_contracts(
        parts in proptest::collection::vec(
            prop_oneof![
                Just(b"set ".to_vec()),
                Just(b"foo 0 0 ".to_vec()),
                Just(b"7".to_vec()),
                Just(b"\r\n".to_vec()),
                Just(b"foo bar".to_vec()),
                Just(b" ".to_vec()),
                Just(b"\0".to_vec()),
                proptest::collection::vec(any::<u8>(), 0..8),
            ],
            0..12,
        ),
        tail in proptest::collection::vec(any::<u8>(), 0..16),
    ) {
        use tern_memcache_proto::ascii_auth::{decode_ascii_auth, AuthDecoded};
        let input: Vec<u8> = parts.concat();
        let decoded = decode_ascii_auth(&input);
        match &decoded {
            AuthDecoded::Refused { consumed, .. } | AuthDecoded::Credentials { consumed, .. } => {
                prop_assert!(*consumed <= input.len());
                let mut longer = input.clone();
                longer.extend_from_slice(&tail);
                prop_assert_eq!(decode_ascii_auth(&longer), decoded.clone());
            }
            AuthDecoded::Incomplete { needed } => {
                prop_assert!(needed.is_none_or(|n| n > input.len()));
                for end in [0, input.len() / 2] {
                    let shorter = decode_ascii_auth(&input[..end]);
                    let incomplete = matches!(shorter, AuthDecoded::Incomplete { .. });
                    prop_assert!(incomplete, "a prefix of {} bytes", end);
                }
            }
            AuthDecoded::Close => prop_assert!(input.len() > 2048),
        }
    }
}

proptest! {
    /// A class list reads back as the classes written, in any order, with repeats and empty parts; one
    /// part that is not a class id (0, 64, a word, a sign) spoils the whole list, as memcached's
    /// `BADCLASS` does; no input panics.
    #[test]
    fn crawler_class_lists_read_as_memcached_reads_them(
        ids in proptest::collection::vec(1u32..=63, 0..10),
        bad in prop_oneof![Just("0"), Just("64"), Just("x"), Just("-1"), Just("1x"), Just("99999")],
        commas in proptest::collection::vec(0usize..3, 0..10),
        junk in proptest::collection::vec(any::<u8>(), 0..24),
    ) {
        use tern_memcache_proto::CrawlerClasses;
        let mut list = String::new();
        for (i, id) in ids.iter().enumerate() {
            list.push_str(&",".repeat(commas.get(i).copied().unwrap_or(1).max(usize::from(i > 0))));
            list.push_str(&id.to_string());
        }
        let want = ids.iter().fold(0u64, |m, id| m | 1 << id);
        prop_assert_eq!(CrawlerClasses::parse(list.as_bytes()), Some(CrawlerClasses::Ids(want)));
        for id in 0..64u8 {
            prop_assert_eq!(CrawlerClasses::Ids(want).contains(id), want & (1 << id) != 0);
        }
        let spoiled = format!("{list},{bad}");
        prop_assert_eq!(CrawlerClasses::parse(spoiled.as_bytes()), None);
        let _ = CrawlerClasses::parse(&junk);
    }
}
