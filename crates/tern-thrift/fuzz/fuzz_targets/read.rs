//! Reads arbitrary bytes as a Thrift server reads a request (a peer can send garbage): the frame, if the
//! bytes hold one, then the message in the protocol its first bytes name, and in each protocol regardless:
//! the message header, then its body skipped as a struct, as a server does with a call it does not know.
//! Readers must refuse bad input with an error, never a panic, and never read past their input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_thrift::{
    decode_frame, sniff, AnyReader, BinaryReader, CompactReader, FieldType, Framed, ProtocolRead,
};

/// The header, then the body skipped; both may fail, neither may panic or overrun.
fn read_message<'a>(mut reader: impl ProtocolRead<'a>, len: usize) {
    if reader.read_message_begin().is_ok() {
        let _ = reader.skip(FieldType::Struct);
    }
    assert!(reader.position() <= len);
}

fn read_payload(payload: &[u8]) {
    if let Some(kind) = sniff(payload) {
        read_message(AnyReader::new(kind, payload), payload.len());
    }
    read_message(BinaryReader::new(payload), payload.len());
    read_message(CompactReader::new(payload), payload.len());
}

fuzz_target!(|data: &[u8]| {
    if let Framed::Frame { payload, consumed } = decode_frame(data, 1 << 20) {
        assert_eq!(consumed, payload.len() + 4);
        assert!(consumed <= data.len());
        read_payload(payload);
    }
    read_payload(data);
});
