//! Byte-exact encodings from the compact protocol's spec, and what the reader refuses.

use super::*;
use crate::tests::{read_value, write_value, Value};

fn written(write: impl FnOnce(&mut CompactWriter, &mut Vec<u8>)) -> Vec<u8> {
    let mut out = Vec::new();
    write(&mut CompactWriter::new(), &mut out);
    out
}

/// Writes `value`, checks its bytes are `expected`, and reads it back.
fn check(value: &Value, expected: &[u8]) {
    let mut out = Vec::new();
    write_value(&mut CompactWriter::new(), &mut out, value);
    assert_eq!(out, expected, "{value:?}");
    let mut r = CompactReader::new(&out);
    assert_eq!(&read_value(&mut r, value.field_type()).unwrap(), value);
    assert_eq!(r.position(), out.len());
}

#[test]
fn message_headers() {
    let bytes = written(|w, out| w.write_message_begin(out, "ping", MessageType::Call, 1));
    assert_eq!(bytes, [0x82, 0x21, 0x01, 0x04, b'p', b'i', b'n', b'g']);
    // The sequence id is a plain varint, five bytes when negative.
    let bytes = written(|w, out| w.write_message_begin(out, "x", MessageType::Reply, -1));
    assert_eq!(
        bytes,
        [0x82, 0x41, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01, b'x']
    );
    let header = CompactReader::new(&bytes).read_message_begin().unwrap();
    assert_eq!(
        header,
        MessageHeader {
            name: "x",
            kind: MessageType::Reply,
            seqid: -1
        }
    );
    let bytes = written(|w, out| w.write_message_begin(out, "", MessageType::Exception, 300));
    assert_eq!(bytes, [0x82, 0x61, 0xac, 0x02, 0x00]);
    let bytes = written(|w, out| w.write_message_begin(out, "", MessageType::Oneway, 0));
    assert_eq!(bytes, [0x82, 0x81, 0x00, 0x00]);
}

#[test]
fn integers_are_zigzag_varints() {
    check(&Value::I32(0), &[0x00]);
    check(&Value::I32(-1), &[0x01]);
    check(&Value::I32(1), &[0x02]);
    check(&Value::I32(150), &[0xac, 0x02]);
    check(&Value::I32(i32::MIN), &[0xff, 0xff, 0xff, 0xff, 0x0f]);
    check(&Value::I32(i32::MAX), &[0xfe, 0xff, 0xff, 0xff, 0x0f]);
    check(&Value::I16(i16::MIN), &[0xff, 0xff, 0x03]);
    check(&Value::I16(-64), &[0x7f]);
    check(&Value::I16(64), &[0x80, 0x01]);
    check(
        &Value::I64(i64::MIN),
        &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
    );
    check(
        &Value::I64(i64::MAX),
        &[0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
    );
    check(&Value::Byte(-2), &[0xfe]);
    // Doubles are little-endian.
    check(
        &Value::Double(1.0f64.to_bits()),
        &[0, 0, 0, 0, 0, 0, 0xf0, 0x3f],
    );
    check(&Value::Binary(b"hi".to_vec()), &[0x02, b'h', b'i']);
    check(&Value::Binary(Vec::new()), &[0x00]);
}

#[test]
fn field_headers() {
    #[rustfmt::skip]
    check(
        &Value::Struct(vec![
            (1, Value::I32(150)),      // delta 1: short form
            (2, Value::I16(-1)),
            (18, Value::I64(7)),       // delta 16: long form, the id a zigzag varint
            (17, Value::Byte(-2)),     // backwards: long form
            (32, Value::Bool(true)),   // delta 15: short; the value is the type
            (33, Value::Bool(false)),
            (-3, Value::I32(0)),       // negative id: long form
            (-2, Value::Double(0)),    // delta 1 from a negative id
            (0, Value::Binary(Vec::new())),
            (0, Value::Byte(0)),       // delta 0: long form
            (300, Value::Bool(false)), // a bool field in the long form
        ]),
        &[
            0x15, 0xac, 0x02,
            0x14, 0x01,
            0x06, 0x24, 0x0e,
            0x03, 0x22, 0xfe,
            0xf1,
            0x12,
            0x05, 0x05, 0x00,
            0x17, 0, 0, 0, 0, 0, 0, 0, 0,
            0x28, 0x00,
            0x03, 0x00, 0x00,
            0x02, 0xd8, 0x04,
            0x00,
        ],
    );
}

#[test]
fn nested_structs_keep_their_own_field_ids() {
    #[rustfmt::skip]
    check(
        &Value::Struct(vec![
            (5, Value::Struct(vec![(1, Value::I32(1)), (40, Value::Bool(true))])),
            (6, Value::I32(2)),  // delta 1 from 5, not from the inner 40
        ]),
        &[
            0x5c,
                0x15, 0x02,
                0x01, 0x50,
                0x00,
            0x15, 0x04,
            0x00,
        ],
    );
}

#[test]
fn lists_sets_and_maps() {
    check(&Value::List(FieldType::I32, Vec::new()), &[0x05]);
    check(
        &Value::List(
            FieldType::I64,
            vec![Value::I64(1), Value::I64(-1), Value::I64(2)],
        ),
        &[0x36, 0x02, 0x01, 0x04],
    );
    // Bool elements are a byte each, 1 true and 2 false; the element type is 1.
    check(
        &Value::Set(FieldType::Bool, vec![Value::Bool(true), Value::Bool(false)]),
        &[0x21, 0x01, 0x02],
    );
    // 14 elements fit the short form, 15 take the long one.
    let bytes = |n: u8| (0..n).map(|b| Value::Byte(b as i8)).collect::<Vec<_>>();
    let mut expected = vec![0xe3];
    expected.extend(0..14);
    check(&Value::List(FieldType::Byte, bytes(14)), &expected);
    let mut expected = vec![0xf3, 0x0f];
    expected.extend(0..15);
    check(&Value::List(FieldType::Byte, bytes(15)), &expected);
    let mut expected = vec![0xf5, 0xac, 0x02];
    expected.extend([0; 300]);
    check(
        &Value::Set(FieldType::I32, vec![Value::I32(0); 300]),
        &expected,
    );

    // An empty map is one zero byte, without types.
    check(
        &Value::Map(EMPTY_MAP_TYPE, EMPTY_MAP_TYPE, Vec::new()),
        &[0x00],
    );
    check(
        &Value::Map(
            FieldType::String,
            FieldType::I32,
            vec![(Value::Binary(b"a".to_vec()), Value::I32(1))],
        ),
        &[0x01, 0x85, 0x01, b'a', 0x02],
    );
    let mut expected = vec![0x1d];
    expected.extend([7; 16]);
    check(
        &Value::List(FieldType::Uuid, vec![Value::Uuid([7; 16])]),
        &expected,
    );
}

#[test]
fn reads_what_other_writers_send() {
    // A bool element type of 2 (older writers), and a stop byte with a non-zero delta nibble.
    let mut r = CompactReader::new(&[0x22, 0x01, 0x02]);
    assert_eq!(r.read_list_begin().unwrap(), (FieldType::Bool, 2));
    assert!(r.read_bool().unwrap());
    assert!(!r.read_bool().unwrap());
    let mut r = CompactReader::new(&[0x10]);
    r.read_struct_begin().unwrap();
    assert_eq!(r.read_field_begin().unwrap(), None);
    // A negative sequence id sign-extended to a 64-bit varint.
    let mut bytes = vec![0x82, 0x21];
    bytes.extend([
        0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x00,
    ]);
    assert_eq!(
        CompactReader::new(&bytes)
            .read_message_begin()
            .unwrap()
            .seqid,
        -2
    );
}

#[test]
fn refuses_bad_input() {
    assert_eq!(
        CompactReader::new(&[0x80, 0x01, 0, 1]).read_message_begin(),
        Err(ThriftError::UnknownProtocol { first_byte: 0x80 })
    );
    assert_eq!(
        CompactReader::new(&[0x82, 0x22, 0, 0]).read_message_begin(),
        Err(ThriftError::BadVersion {
            protocol: ProtocolKind::Compact,
            version: 2
        })
    );
    assert_eq!(
        CompactReader::new(&[0x82, 0xa1, 0, 0]).read_message_begin(),
        Err(ThriftError::InvalidMessageType {
            code: 5,
            position: 1
        })
    );
    // Eleven continuation bytes, and a value past 32 bits where an i32 is expected.
    assert_eq!(
        CompactReader::new(&[0xff; 11]).read_i64(),
        Err(ThriftError::VarintOverflow { position: 0 })
    );
    assert_eq!(
        CompactReader::new(&[0x80, 0x80, 0x80, 0x80, 0x10]).read_i32(),
        Err(ThriftError::VarintOverflow { position: 0 })
    );
    assert_eq!(
        CompactReader::new(&[0x80]).read_i32(),
        Err(ThriftError::Truncated { position: 1 })
    );
    assert_eq!(
        CompactReader::new(&[0x1e]).read_field_begin(),
        Err(ThriftError::InvalidFieldType {
            code: 14,
            position: 0
        })
    );
    // A list claiming 2^31 - 1 elements is refused before anything is sized by it.
    assert_eq!(
        CompactReader::new(&[0xf6, 0xff, 0xff, 0xff, 0xff, 0x07, 0x00]).read_list_begin(),
        Err(ThriftError::SizeOverRemaining {
            size: 0x7fff_ffff,
            remaining: 1,
            position: 1
        })
    );
    assert!(CompactReader::new(&[0x03, 0x33, 0x01, 0x02, 0x03])
        .read_map_begin()
        .is_err());
    assert_eq!(
        CompactReader::new(&[0x02, 0xc3, 0xa9]).read_string(),
        Ok("é")
    );
    assert_eq!(
        CompactReader::new(&[0x02, 0xc3, 0x28]).read_string(),
        Err(ThriftError::InvalidUtf8 { position: 0 })
    );
}

#[test]
fn nesting_is_bounded() {
    // Struct field 1 holding a struct, a hundred deep.
    let bytes = [0x1c].repeat(100);
    assert!(matches!(
        CompactReader::new(&bytes).skip(FieldType::Struct),
        Err(ThriftError::TooDeep { .. })
    ));
    let bytes = [0x19].repeat(100);
    assert!(matches!(
        CompactReader::new(&bytes).skip(FieldType::List),
        Err(ThriftError::TooDeep { .. })
    ));
}

#[test]
fn writing_deeper_than_the_readers_allow_keeps_field_ids_right() {
    let mut w = CompactWriter::new();
    let mut out = Vec::new();
    let depth = MAX_DEPTH + 3;
    for _ in 0..depth {
        w.write_struct_begin(&mut out);
        w.write_field_begin(&mut out, FieldType::I32, 3);
        w.write_i32(&mut out, 0);
        w.write_field_begin(&mut out, FieldType::Struct, 4);
    }
    // The deepest field 4's value, then the rest of every level.
    w.write_struct_begin(&mut out);
    w.write_field_stop(&mut out);
    w.write_struct_end(&mut out);
    for _ in 0..depth {
        w.write_field_begin(&mut out, FieldType::I32, 5);
        w.write_i32(&mut out, 0);
        w.write_field_stop(&mut out);
        w.write_struct_end(&mut out);
    }
    // Read it by hand, without the reader's depth limit: every level's fields are 3, 4 and 5.
    let mut ids = Vec::new();
    let mut last = vec![0i16];
    let mut at = 0;
    while at < out.len() {
        let header = out[at];
        at += 1;
        if header == 0 {
            last.pop();
            continue;
        }
        let id = match header >> 4 {
            0 => {
                let id = unzigzag(u64::from(out[at])) as i16;
                at += 1;
                id
            }
            delta => last.last().unwrap() + i16::from(delta),
        };
        *last.last_mut().unwrap() = id;
        ids.push(id);
        match header & 0x0f {
            5 => at += 1,
            12 => last.push(0),
            _ => unreachable!(),
        }
    }
    assert_eq!(ids.len(), depth * 3);
    assert!(ids.chunks(2).take(depth).all(|pair| pair == [3, 4]));
    assert!(ids[depth * 2..].iter().all(|&id| id == 5));
}
