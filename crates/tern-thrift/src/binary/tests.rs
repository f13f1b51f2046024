//! Byte-exact encodings from the binary protocol's spec, and what the reader refuses.

use super::*;

fn written(write: impl FnOnce(&mut BinaryWriter, &mut Vec<u8>)) -> Vec<u8> {
    let mut out = Vec::new();
    write(&mut BinaryWriter::new(), &mut out);
    out
}

#[test]
fn strict_message_header() {
    let bytes = written(|w, out| w.write_message_begin(out, "ping", MessageType::Call, 1));
    assert_eq!(
        bytes,
        [0x80, 0x01, 0x00, 0x01, 0, 0, 0, 4, b'p', b'i', b'n', b'g', 0, 0, 0, 1]
    );
    let header = BinaryReader::new(&bytes).read_message_begin().unwrap();
    assert_eq!(
        header,
        MessageHeader {
            name: "ping",
            kind: MessageType::Call,
            seqid: 1
        }
    );

    let bytes = written(|w, out| w.write_message_begin(out, "", MessageType::Oneway, -2));
    assert_eq!(
        bytes,
        [0x80, 0x01, 0x00, 0x04, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xfe]
    );
}

#[test]
fn non_strict_message_header() {
    // Name length, name, type, sequence id.
    let bytes = [0, 0, 0, 4, b'p', b'i', b'n', b'g', 2, 0, 0, 0, 7];
    let mut r = BinaryReader::new(&bytes);
    let header = r.read_message_begin().unwrap();
    assert_eq!(
        header,
        MessageHeader {
            name: "ping",
            kind: MessageType::Reply,
            seqid: 7
        }
    );
    assert_eq!(r.position(), bytes.len());
}

#[test]
fn struct_of_every_type() {
    let bytes = written(|w, out| {
        w.write_struct_begin(out);
        w.write_field_begin(out, FieldType::Bool, 1);
        w.write_bool(out, true);
        w.write_field_begin(out, FieldType::Byte, 2);
        w.write_byte(out, -1);
        w.write_field_begin(out, FieldType::I16, 3);
        w.write_i16(out, -2);
        w.write_field_begin(out, FieldType::I32, 4);
        w.write_i32(out, 0x0102_0304);
        w.write_field_begin(out, FieldType::I64, -5);
        w.write_i64(out, -1);
        w.write_field_begin(out, FieldType::Double, 300);
        w.write_double(out, 1.0);
        w.write_field_begin(out, FieldType::String, 7);
        w.write_string(out, "hé");
        w.write_field_begin(out, FieldType::List, 8);
        w.write_list_begin(out, FieldType::I16, 2);
        w.write_i16(out, 1);
        w.write_i16(out, 2);
        w.write_field_begin(out, FieldType::Map, 9);
        w.write_map_begin(out, FieldType::String, FieldType::Bool, 1);
        w.write_string(out, "k");
        w.write_bool(out, false);
        w.write_field_begin(out, FieldType::Set, 10);
        w.write_set_begin(out, FieldType::Byte, 0);
        w.write_field_begin(out, FieldType::Uuid, 11);
        w.write_uuid(out, &[0xab; 16]);
        w.write_field_begin(out, FieldType::Struct, 12);
        w.write_struct_begin(out);
        w.write_field_stop(out);
        w.write_struct_end(out);
        w.write_field_stop(out);
        w.write_struct_end(out);
    });
    #[rustfmt::skip]
    let mut expected = vec![
        2, 0, 1, 1,
        3, 0, 2, 0xff,
        6, 0, 3, 0xff, 0xfe,
        8, 0, 4, 1, 2, 3, 4,
        10, 0xff, 0xfb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        4, 0x01, 0x2c, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0,
        11, 0, 7, 0, 0, 0, 3, b'h', 0xc3, 0xa9,
        15, 0, 8, 6, 0, 0, 0, 2, 0, 1, 0, 2,
        13, 0, 9, 11, 2, 0, 0, 0, 1, 0, 0, 0, 1, b'k', 0,
        14, 0, 10, 3, 0, 0, 0, 0,
        16, 0, 11,
    ];
    expected.extend([0xab; 16]);
    expected.extend([12, 0, 12, 0, 0]);
    assert_eq!(bytes, expected);

    let mut r = BinaryReader::new(&bytes);
    r.read_struct_begin().unwrap();
    assert_eq!(r.read_field_begin().unwrap(), Some((FieldType::Bool, 1)));
    assert!(r.read_bool().unwrap());
    assert_eq!(r.read_field_begin().unwrap(), Some((FieldType::Byte, 2)));
    assert_eq!(r.read_byte().unwrap(), -1);
    assert_eq!(r.read_field_begin().unwrap(), Some((FieldType::I16, 3)));
    assert_eq!(r.read_i16().unwrap(), -2);
    assert_eq!(r.read_field_begin().unwrap(), Some((FieldType::I32, 4)));
    assert_eq!(r.read_i32().unwrap(), 0x0102_0304);
    assert_eq!(r.read_field_begin().unwrap(), Some((FieldType::I64, -5)));
    assert_eq!(r.read_i64().unwrap(), -1);
    assert_eq!(
        r.read_field_begin().unwrap(),
        Some((FieldType::Double, 300))
    );
    assert_eq!(r.read_double().unwrap(), 1.0);
    assert_eq!(r.read_field_begin().unwrap(), Some((FieldType::String, 7)));
    assert_eq!(r.read_string().unwrap(), "hé");
    assert_eq!(r.read_field_begin().unwrap(), Some((FieldType::List, 8)));
    assert_eq!(r.read_list_begin().unwrap(), (FieldType::I16, 2));
    assert_eq!((r.read_i16().unwrap(), r.read_i16().unwrap()), (1, 2));
    assert_eq!(r.read_field_begin().unwrap(), Some((FieldType::Map, 9)));
    assert_eq!(
        r.read_map_begin().unwrap(),
        (FieldType::String, FieldType::Bool, 1)
    );
    assert_eq!(r.read_string().unwrap(), "k");
    assert!(!r.read_bool().unwrap());
    assert_eq!(r.read_field_begin().unwrap(), Some((FieldType::Set, 10)));
    assert_eq!(r.read_set_begin().unwrap(), (FieldType::Byte, 0));
    assert_eq!(r.read_field_begin().unwrap(), Some((FieldType::Uuid, 11)));
    assert_eq!(r.read_uuid().unwrap(), [0xab; 16]);
    assert_eq!(r.read_field_begin().unwrap(), Some((FieldType::Struct, 12)));
    r.skip(FieldType::Struct).unwrap();
    assert_eq!(r.read_field_begin().unwrap(), None);
    r.read_struct_end().unwrap();
    assert_eq!(r.position(), bytes.len());
}

#[test]
fn refuses_bad_headers() {
    let mut r = BinaryReader::new(&[0x80, 0x02, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(
        r.read_message_begin(),
        Err(ThriftError::BadVersion {
            protocol: ProtocolKind::Binary,
            version: 2
        })
    );
    let mut r = BinaryReader::new(&[0x80, 0x01, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(
        r.read_message_begin(),
        Err(ThriftError::InvalidMessageType {
            code: 5,
            position: 3
        })
    );
    // A non-strict name longer than the input.
    let mut r = BinaryReader::new(&[0, 0, 1, 0, b'x']);
    assert_eq!(
        r.read_message_begin(),
        Err(ThriftError::SizeOverRemaining {
            size: 256,
            remaining: 1,
            position: 0
        })
    );
    let mut r = BinaryReader::new(&[0, 0, 0, 1, 0xff, 1, 0, 0, 0, 0]);
    assert_eq!(
        r.read_message_begin(),
        Err(ThriftError::InvalidUtf8 { position: 0 })
    );
}

#[test]
fn refuses_bad_values() {
    assert_eq!(
        BinaryReader::new(&[1, 0, 1]).read_field_begin(),
        Err(ThriftError::InvalidFieldType {
            code: 1,
            position: 0
        })
    );
    assert_eq!(
        BinaryReader::new(&[0xff, 0xff, 0xff, 0xfe]).read_binary(),
        Err(ThriftError::NegativeSize {
            size: -2,
            position: 0
        })
    );
    assert_eq!(
        BinaryReader::new(&[0, 0, 1]).read_i32(),
        Err(ThriftError::Truncated { position: 0 })
    );
    // A list claiming 2^31 - 1 elements is refused before anything is sized by it.
    assert_eq!(
        BinaryReader::new(&[10, 0x7f, 0xff, 0xff, 0xff, 0, 0]).read_list_begin(),
        Err(ThriftError::SizeOverRemaining {
            size: 0x7fff_ffff,
            remaining: 2,
            position: 1
        })
    );
    // A map's entries take two bytes at least.
    assert!(BinaryReader::new(&[3, 3, 0, 0, 0, 2, 1, 2, 3])
        .read_map_begin()
        .is_err());
    assert!(BinaryReader::new(&[3, 3, 0, 0, 0, 2, 1, 2, 3, 4])
        .read_map_begin()
        .is_ok());
}

#[test]
fn nesting_is_bounded() {
    // Struct field 1 holding a struct, a hundred deep.
    let bytes: Vec<u8> = [12, 0, 1].repeat(100);
    let mut r = BinaryReader::new(&bytes);
    assert!(matches!(
        r.skip(FieldType::Struct),
        Err(ThriftError::TooDeep { .. })
    ));
    // Lists of lists, without structs.
    let bytes: Vec<u8> = [15, 0, 0, 0, 1].repeat(100);
    assert!(matches!(
        BinaryReader::new(&bytes).skip(FieldType::List),
        Err(ThriftError::TooDeep { .. })
    ));
    // Reading by hand is bounded too.
    let mut r = BinaryReader::new(&[]);
    for _ in 0..MAX_DEPTH {
        r.read_struct_begin().unwrap();
    }
    assert!(r.read_struct_begin().is_err());
}
