//! Property tests of the client codec (`tern_memcache_proto::client`): replies split at any
//! point parse as `Incomplete` until whole, arbitrary bytes never panic, and what the encoders
//! write is well-formed.

use proptest::prelude::*;
use tern_memcache_proto::client::{
    encode_get, encode_meta_get, encode_storage, parse_reply, parse_udp_header, Limits, MetaStatus,
    Parse, Reply, StorageCommand,
};

/// An owned reply and its wire form.
#[derive(Debug, Clone)]
enum Wire {
    Value {
        key: Vec<u8>,
        flags: u32,
        cas: Option<u64>,
        data: Vec<u8>,
    },
    Meta {
        data: Vec<u8>,
        flags: Vec<u8>,
    },
    Line(&'static [u8]),
    Number(u64),
}

impl Wire {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Wire::Value {
                key,
                flags,
                cas,
                data,
            } => {
                let mut out = b"VALUE ".to_vec();
                out.extend_from_slice(key);
                out.extend_from_slice(format!(" {flags} {}", data.len()).as_bytes());
                if let Some(cas) = cas {
                    out.extend_from_slice(format!(" {cas}").as_bytes());
                }
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(data);
                out.extend_from_slice(b"\r\n");
                out
            }
            Wire::Meta { data, flags } => {
                let mut out = format!("VA {}", data.len()).into_bytes();
                if !flags.is_empty() {
                    out.push(b' ');
                    out.extend_from_slice(flags);
                }
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(data);
                out.extend_from_slice(b"\r\n");
                out
            }
            Wire::Line(line) => [*line, b"\r\n"].concat(),
            Wire::Number(n) => format!("{n}\r\n").into_bytes(),
        }
    }

    fn matches(&self, reply: &Reply<'_>) -> bool {
        match (self, reply) {
            (
                Wire::Value {
                    key,
                    flags,
                    cas,
                    data,
                },
                Reply::Value {
                    key: k,
                    flags: f,
                    cas: c,
                    data: d,
                },
            ) => key == k && flags == f && cas == c && data == d,
            (
                Wire::Meta { data, flags },
                Reply::Meta {
                    status: MetaStatus::Value,
                    flags: f,
                    data: Some(d),
                },
            ) => data == d && flags == f,
            (Wire::Number(n), Reply::Number(m)) => n == m,
            (Wire::Line(b"END"), Reply::End)
            | (Wire::Line(b"STORED"), Reply::Stored)
            | (Wire::Line(b"NOT_FOUND"), Reply::NotFound)
            | (Wire::Line(b"ERROR"), Reply::Error)
            | (
                Wire::Line(b"EN"),
                Reply::Meta {
                    status: MetaStatus::Miss,
                    ..
                },
            )
            | (
                Wire::Line(b"HD"),
                Reply::Meta {
                    status: MetaStatus::Stored,
                    ..
                },
            ) => true,
            _ => false,
        }
    }
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(0x21u8..0x7f, 1..40)
}

fn wire() -> impl Strategy<Value = Wire> {
    let data = proptest::collection::vec(any::<u8>(), 0..300);
    prop_oneof![
        (
            key(),
            any::<u32>(),
            proptest::option::of(any::<u64>()),
            data.clone()
        )
            .prop_map(|(key, flags, cas, data)| Wire::Value {
                key,
                flags,
                cas,
                data
            }),
        (data, proptest::collection::vec(0x21u8..0x7f, 0..20))
            .prop_map(|(data, flags)| Wire::Meta { data, flags }),
        prop_oneof![
            Just(&b"END"[..]),
            Just(&b"STORED"[..]),
            Just(&b"NOT_FOUND"[..]),
            Just(&b"ERROR"[..]),
            Just(&b"EN"[..]),
            Just(&b"HD"[..])
        ]
        .prop_map(Wire::Line),
        any::<u64>().prop_map(Wire::Number),
    ]
}

proptest! {
    #[test]
    fn a_stream_of_replies_parses_back_and_every_prefix_is_incomplete(replies in proptest::collection::vec(wire(), 1..6)) {
        let limits = Limits::default();
        let stream: Vec<u8> = replies.iter().flat_map(|r| r.bytes()).collect();
        let mut pos = 0;
        for expected in &replies {
            let len = expected.bytes().len();
            for cut in pos..pos + len {
                prop_assert_eq!(parse_reply(&stream[pos..cut], &limits), Ok(Parse::Incomplete));
            }
            match parse_reply(&stream[pos..], &limits) {
                Ok(Parse::Complete { reply, consumed }) => {
                    prop_assert!(expected.matches(&reply), "{:?} vs {:?}", expected, reply);
                    prop_assert_eq!(consumed, len);
                }
                other => prop_assert!(false, "{:?} gave {:?}", expected, other),
            }
            pos += len;
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_never_overrun(input in proptest::collection::vec(any::<u8>(), 0..600)) {
        let limits = Limits { max_line: 128, max_value: 256 };
        if let Ok(Parse::Complete { consumed, .. }) = parse_reply(&input, &limits) {
            prop_assert!(consumed > 0 && consumed <= input.len());
        }
        let _ = parse_udp_header(&input);
    }

    #[test]
    fn encoded_requests_are_single_lines_plus_data(keys in proptest::collection::vec(key(), 1..5), value in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut out = Vec::new();
        encode_get(&mut out, keys.iter().map(|k| &k[..]), false).unwrap();
        prop_assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 1);
        prop_assert_eq!(&out[out.len() - 2..], b"\r\n");
        let mut set = Vec::new();
        encode_storage(&mut set, StorageCommand::Set, &keys[0], 1, 2, &value, false).unwrap();
        let header = format!("set {} 1 2 {}\r\n", String::from_utf8_lossy(&keys[0]), value.len());
        prop_assert_eq!(&set[..header.len()], header.as_bytes());
        prop_assert_eq!(&set[header.len()..set.len() - 2], &value[..]);
        let mut mg = Vec::new();
        encode_meta_get(&mut mg, &keys[0], b"v").unwrap();
        prop_assert_eq!(mg.len(), keys[0].len() + 7);
    }

    #[test]
    fn keys_with_whitespace_or_too_long_are_rejected(mut k in key(), at in 0usize..40, bad in prop_oneof![Just(b' '), Just(b'\r'), Just(b'\n'), Just(0u8)]) {
        let at = at % k.len();
        k[at] = bad;
        let mut out = Vec::new();
        prop_assert!(encode_get(&mut out, [&k[..]], false).is_err());
        prop_assert!(out.is_empty());
        prop_assert!(encode_meta_get(&mut out, &[b'a'; 251], b"").is_err());
    }
}
