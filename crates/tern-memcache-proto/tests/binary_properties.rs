//! Property tests of the binary decoder: it never panics, framing does not depend on how the bytes arrive,
//! and a well-formed request of every opcode decodes to what was encoded.

use proptest::prelude::*;
use tern_memcache_proto::binary::{
    decode_binary, opcode, request_packet, write_request, BinaryCommand, BinaryDecoded,
    BinaryStore, Header, HEADER_LEN, REQUEST_MAGIC,
};
use tern_memcache_proto::Limits;

/// A request packet from its parts; `bodylen` as given (it may lie).
fn packet(op: u8, extras: &[u8], key: &[u8], value: &[u8], bodylen: u32, cas: u64) -> Vec<u8> {
    let header = Header {
        opcode: op,
        extlen: extras.len() as u8,
        keylen: key.len() as u16,
        bodylen,
        opaque: [0xde, 0xad, 0xbe, 0xef],
        cas,
    };
    let mut out = Vec::new();
    write_request(&mut out, &header, extras, key, value);
    out
}

fn honest(op: u8, extras: &[u8], key: &[u8], value: &[u8], cas: u64) -> Vec<u8> {
    request_packet(op, [0xde, 0xad, 0xbe, 0xef], cas, extras, key, value)
}

fn limits() -> impl Strategy<Value = Limits> {
    prop_oneof![
        Just(Limits::default()),
        Just(Limits {
            max_item_size: 96,
            ..Limits::default()
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Arbitrary headers over arbitrary bytes: a frame consumes at least its header and extras and key, an
    /// incomplete answer stays incomplete on every shorter prefix, and a frame decodes the same from any
    /// longer input.
    #[test]
    fn framing_holds_for_any_header(
        op in prop_oneof![0u8..=0x24, any::<u8>()],
        extlen in prop_oneof![Just(0usize), Just(4), Just(8), Just(20), 0usize..32],
        keylen in prop_oneof![0usize..8, Just(250), Just(251)],
        value_len in 0usize..200,
        lie in -40i64..40,
        tail in proptest::collection::vec(any::<u8>(), 0..64),
        limits in limits(),
    ) {
        let extras = vec![7u8; extlen];
        let key = vec![b'k'; keylen];
        let value = vec![b'v'; value_len];
        let bodylen = ((extlen + keylen + value_len) as i64 + lie).max(0) as u32;
        let mut input = packet(op, &extras, &key, &value, bodylen, 1);
        input.extend_from_slice(&tail);
        match decode_binary(&input, &limits) {
            BinaryDecoded::Frame { command, consumed, .. } => {
                prop_assert!(consumed >= HEADER_LEN + extlen + keylen);
                if consumed <= input.len() {
                    let exact = decode_binary(&input[..consumed], &limits);
                    let BinaryDecoded::Frame { command: again, consumed: again_consumed, .. } = exact else {
                        return Err(TestCaseError::fail("a frame decodes from exactly its bytes"));
                    };
                    prop_assert_eq!(again, command);
                    prop_assert_eq!(again_consumed, consumed);
                }
            }
            BinaryDecoded::Incomplete { needed } => {
                if let Some(needed) = needed {
                    prop_assert!(needed > input.len());
                }
                for end in [0, input.len() / 2, input.len().saturating_sub(1)] {
                    let shorter = decode_binary(&input[..end], &limits);
                    prop_assert!(matches!(shorter, BinaryDecoded::Incomplete { .. }), "prefix of {} bytes", end);
                }
            }
            BinaryDecoded::BadMagic => prop_assert!(false, "the magic was right"),
        }
    }

    /// Any first byte but the request magic is refused once a header's worth has arrived.
    #[test]
    fn a_wrong_magic_is_refused(first in any::<u8>(), rest in proptest::collection::vec(any::<u8>(), 23..64)) {
        prop_assume!(first != REQUEST_MAGIC);
        let mut input = vec![first];
        input.extend_from_slice(&rest);
        prop_assert_eq!(decode_binary(&input, &Limits::default()), BinaryDecoded::BadMagic);
    }

    /// Well-formed storage and arithmetic requests decode to their fields, cut anywhere before their end
    /// they are incomplete.
    #[test]
    fn well_formed_requests_decode_to_their_fields(
        key in proptest::collection::vec(b'a'..=b'z', 1..250),
        value in proptest::collection::vec(any::<u8>(), 0..300),
        flags in any::<u32>(),
        exptime in any::<u32>(),
        delta in any::<u64>(),
        initial in any::<u64>(),
        cas in any::<u64>(),
        quiet in any::<bool>(),
    ) {
        let mut extras = flags.to_be_bytes().to_vec();
        extras.extend_from_slice(&exptime.to_be_bytes());
        let op = if quiet { opcode::ADDQ } else { opcode::ADD };
        let set = honest(op, &extras, &key, &value, cas);
        for cut in [0, HEADER_LEN, set.len() - 1] {
            let cut_short = decode_binary(&set[..cut], &Limits::default());
            prop_assert!(matches!(cut_short, BinaryDecoded::Incomplete { .. }), "cut at {}", cut);
        }
        let BinaryDecoded::Frame { header, command, consumed } = decode_binary(&set, &Limits::default()) else {
            return Err(TestCaseError::fail("an add decodes"));
        };
        prop_assert_eq!(consumed, set.len());
        prop_assert_eq!(header.cas, cas);
        prop_assert_eq!(header.opaque, [0xde, 0xad, 0xbe, 0xef]);
        prop_assert_eq!(command, BinaryCommand::Store {
            kind: BinaryStore::Add, key: &key, flags, exptime, value: &value, quiet,
        });

        let mut extras = delta.to_be_bytes().to_vec();
        extras.extend_from_slice(&initial.to_be_bytes());
        extras.extend_from_slice(&exptime.to_be_bytes());
        let op = if quiet { opcode::DECREMENTQ } else { opcode::DECREMENT };
        let arith = honest(op, &extras, &key, &[], 0);
        let BinaryDecoded::Frame { command, consumed, .. } = decode_binary(&arith, &Limits::default()) else {
            return Err(TestCaseError::fail("a decrement decodes"));
        };
        prop_assert_eq!(consumed, arith.len());
        prop_assert_eq!(command, BinaryCommand::Arith { incr: false, key: &key, delta, initial, exptime, quiet });
    }
}
