//! Decodes arbitrary bytes as a binary-protocol connection would: packet after packet, checking the
//! decoder's contracts (a frame uses at least its header, extras and key; only a refused value or an unknown
//! command's swallow may reach past the input; an incomplete packet asks for more than it has).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_memcache_proto::binary::{decode_binary, BinaryCommand, BinaryDecoded, HEADER_LEN};
use tern_memcache_proto::Limits;

fuzz_target!(|data: &[u8]| {
    for limits in [
        Limits::default(),
        Limits {
            max_item_size: 96,
            ..Limits::default()
        },
    ] {
        let mut pos = 0;
        while pos < data.len() {
            let buf = &data[pos..];
            match decode_binary(buf, &limits) {
                BinaryDecoded::Incomplete { needed } => {
                    assert!(needed.is_none_or(|n| n > buf.len()));
                    break;
                }
                BinaryDecoded::BadMagic => break,
                BinaryDecoded::Frame {
                    header,
                    command,
                    consumed,
                } => {
                    let head = HEADER_LEN + usize::from(header.extlen) + usize::from(header.keylen);
                    assert!(consumed >= head);
                    if consumed > buf.len() {
                        assert!(matches!(
                            command,
                            BinaryCommand::TooLarge { .. } | BinaryCommand::Unknown
                        ));
                    }
                    if command.closes() {
                        break;
                    }
                    pos += consumed;
                }
            }
        }
    }
});
