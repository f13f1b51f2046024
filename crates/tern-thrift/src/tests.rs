//! Both protocols through the traits: arbitrary values written then read back, framing, sniffing, and
//! readers fed arbitrary or damaged bytes.

use proptest::prelude::*;
use proptest::sample::Index;

use crate::*;

/// Any Thrift value, with its types, as a test writes and reads it back.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Bool(bool),
    Byte(i8),
    I16(i16),
    I32(i32),
    I64(i64),
    /// The bits, so that NaNs compare equal.
    Double(u64),
    Binary(Vec<u8>),
    Uuid([u8; 16]),
    Struct(Vec<(i16, Value)>),
    List(FieldType, Vec<Value>),
    Set(FieldType, Vec<Value>),
    Map(FieldType, FieldType, Vec<(Value, Value)>),
}

impl Value {
    pub(crate) fn field_type(&self) -> FieldType {
        match self {
            Self::Bool(_) => FieldType::Bool,
            Self::Byte(_) => FieldType::Byte,
            Self::I16(_) => FieldType::I16,
            Self::I32(_) => FieldType::I32,
            Self::I64(_) => FieldType::I64,
            Self::Double(_) => FieldType::Double,
            Self::Binary(_) => FieldType::String,
            Self::Uuid(_) => FieldType::Uuid,
            Self::Struct(_) => FieldType::Struct,
            Self::List(..) => FieldType::List,
            Self::Set(..) => FieldType::Set,
            Self::Map(..) => FieldType::Map,
        }
    }

    /// The value as a reader of `kind` returns it: the compact protocol drops an empty map's types.
    fn as_read(&self, kind: ProtocolKind) -> Self {
        let as_read = |v: &Self| v.as_read(kind);
        match self {
            Self::Struct(fields) => {
                Self::Struct(fields.iter().map(|(id, v)| (*id, as_read(v))).collect())
            }
            Self::List(ty, items) => Self::List(*ty, items.iter().map(as_read).collect()),
            Self::Set(ty, items) => Self::Set(*ty, items.iter().map(as_read).collect()),
            Self::Map(_, _, entries) if entries.is_empty() && kind == ProtocolKind::Compact => {
                Self::Map(
                    crate::compact::EMPTY_MAP_TYPE,
                    crate::compact::EMPTY_MAP_TYPE,
                    Vec::new(),
                )
            }
            Self::Map(k, v, entries) => Self::Map(
                *k,
                *v,
                entries
                    .iter()
                    .map(|(k, v)| (as_read(k), as_read(v)))
                    .collect(),
            ),
            leaf => leaf.clone(),
        }
    }
}

pub(crate) fn write_value(w: &mut impl ProtocolWrite, out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Bool(v) => w.write_bool(out, *v),
        Value::Byte(v) => w.write_byte(out, *v),
        Value::I16(v) => w.write_i16(out, *v),
        Value::I32(v) => w.write_i32(out, *v),
        Value::I64(v) => w.write_i64(out, *v),
        Value::Double(bits) => w.write_double(out, f64::from_bits(*bits)),
        Value::Binary(v) => w.write_binary(out, v),
        Value::Uuid(v) => w.write_uuid(out, v),
        Value::Struct(fields) => {
            w.write_struct_begin(out);
            for (id, field) in fields {
                w.write_field_begin(out, field.field_type(), *id);
                write_value(w, out, field);
            }
            w.write_field_stop(out);
            w.write_struct_end(out);
        }
        Value::List(ty, items) | Value::Set(ty, items) => {
            if matches!(value, Value::List(..)) {
                w.write_list_begin(out, *ty, items.len());
            } else {
                w.write_set_begin(out, *ty, items.len());
            }
            items.iter().for_each(|item| write_value(w, out, item));
        }
        Value::Map(k, v, entries) => {
            w.write_map_begin(out, *k, *v, entries.len());
            for (key, value) in entries {
                write_value(w, out, key);
                write_value(w, out, value);
            }
        }
    }
}

/// A value of type `ty`, with the types the input gives for its parts.
pub(crate) fn read_value<'a>(
    r: &mut impl ProtocolRead<'a>,
    ty: FieldType,
) -> Result<Value, ThriftError> {
    Ok(match ty {
        FieldType::Bool => Value::Bool(r.read_bool()?),
        FieldType::Byte => Value::Byte(r.read_byte()?),
        FieldType::I16 => Value::I16(r.read_i16()?),
        FieldType::I32 => Value::I32(r.read_i32()?),
        FieldType::I64 => Value::I64(r.read_i64()?),
        FieldType::Double => Value::Double(r.read_double()?.to_bits()),
        FieldType::String => Value::Binary(r.read_binary()?.to_vec()),
        FieldType::Uuid => Value::Uuid(r.read_uuid()?),
        FieldType::Struct => {
            r.read_struct_begin()?;
            let mut fields = Vec::new();
            while let Some((ty, id)) = r.read_field_begin()? {
                fields.push((id, read_value(r, ty)?));
            }
            r.read_struct_end()?;
            Value::Struct(fields)
        }
        FieldType::List | FieldType::Set => {
            let (element, len) = if ty == FieldType::List {
                r.read_list_begin()?
            } else {
                r.read_set_begin()?
            };
            // Safe to reserve: the reader has checked the length against the bytes left.
            let mut items = Vec::with_capacity(len);
            for _ in 0..len {
                items.push(read_value(r, element)?);
            }
            if ty == FieldType::List {
                Value::List(element, items)
            } else {
                Value::Set(element, items)
            }
        }
        FieldType::Map => {
            let (k, v, len) = r.read_map_begin()?;
            let mut entries = Vec::with_capacity(len);
            for _ in 0..len {
                entries.push((read_value(r, k)?, read_value(r, v)?));
            }
            Value::Map(k, v, entries)
        }
    })
}

/// The shape of a value: its type, and its parts' shapes (every element of a container has the same).
#[derive(Debug, Clone)]
enum Shape {
    Leaf(FieldType),
    Struct(Vec<(i16, Shape)>),
    List(Box<Shape>),
    Set(Box<Shape>),
    Map(Box<Shape>, Box<Shape>),
}

impl Shape {
    fn field_type(&self) -> FieldType {
        match self {
            Self::Leaf(ty) => *ty,
            Self::Struct(_) => FieldType::Struct,
            Self::List(_) => FieldType::List,
            Self::Set(_) => FieldType::Set,
            Self::Map(..) => FieldType::Map,
        }
    }
}

fn shape() -> impl Strategy<Value = Shape> {
    let leaf = prop::sample::select(vec![
        FieldType::Bool,
        FieldType::Byte,
        FieldType::I16,
        FieldType::I32,
        FieldType::I64,
        FieldType::Double,
        FieldType::String,
        FieldType::Uuid,
    ])
    .prop_map(Shape::Leaf);
    leaf.prop_recursive(4, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec((any::<i16>(), inner.clone()), 0..6).prop_map(Shape::Struct),
            inner.clone().prop_map(|e| Shape::List(Box::new(e))),
            inner.clone().prop_map(|e| Shape::Set(Box::new(e))),
            (inner.clone(), inner).prop_map(|(k, v)| Shape::Map(Box::new(k), Box::new(v))),
        ]
    })
}

fn value(shape: &Shape) -> BoxedStrategy<Value> {
    use prop::collection::vec;
    match shape {
        Shape::Leaf(FieldType::Bool) => any::<bool>().prop_map(Value::Bool).boxed(),
        Shape::Leaf(FieldType::Byte) => any::<i8>().prop_map(Value::Byte).boxed(),
        Shape::Leaf(FieldType::I16) => any::<i16>().prop_map(Value::I16).boxed(),
        Shape::Leaf(FieldType::I32) => any::<i32>().prop_map(Value::I32).boxed(),
        Shape::Leaf(FieldType::I64) => any::<i64>().prop_map(Value::I64).boxed(),
        Shape::Leaf(FieldType::Double) => any::<u64>().prop_map(Value::Double).boxed(),
        Shape::Leaf(FieldType::Uuid) => any::<[u8; 16]>().prop_map(Value::Uuid).boxed(),
        Shape::Leaf(_) => vec(any::<u8>(), 0..40).prop_map(Value::Binary).boxed(),
        Shape::Struct(fields) => fields
            .iter()
            .map(|(id, field)| (Just(*id), value(field)))
            .collect::<Vec<_>>()
            .prop_map(Value::Struct)
            .boxed(),
        Shape::List(element) => {
            let ty = element.field_type();
            vec(value(element), 0..20)
                .prop_map(move |items| Value::List(ty, items))
                .boxed()
        }
        Shape::Set(element) => {
            let ty = element.field_type();
            vec(value(element), 0..20)
                .prop_map(move |items| Value::Set(ty, items))
                .boxed()
        }
        Shape::Map(key, val) => {
            let (k, v) = (key.field_type(), val.field_type());
            vec((value(key), value(val)), 0..10)
                .prop_map(move |entries| Value::Map(k, v, entries))
                .boxed()
        }
    }
}

/// A struct of arbitrary fields.
fn body() -> impl Strategy<Value = Value> {
    prop::collection::vec((any::<i16>(), shape()), 0..8)
        .prop_flat_map(|fields| value(&Shape::Struct(fields)))
}

fn message_types() -> impl Strategy<Value = MessageType> {
    prop::sample::select(vec![
        MessageType::Call,
        MessageType::Reply,
        MessageType::Exception,
        MessageType::Oneway,
    ])
}

const KINDS: [ProtocolKind; 2] = [ProtocolKind::Binary, ProtocolKind::Compact];

fn message(
    kind: ProtocolKind,
    name: &str,
    message_type: MessageType,
    seqid: i32,
    body: &Value,
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = AnyWriter::new(kind);
    w.write_message_begin(&mut out, name, message_type, seqid);
    write_value(&mut w, &mut out, body);
    out
}

/// Reads a message header and skips its body, as a server meeting an unknown method does, then reads the
/// body from the start as values; neither may panic, and both stay within the input.
fn read_anyhow(kind: ProtocolKind, bytes: &[u8]) {
    let mut r = AnyReader::new(kind, bytes);
    if r.read_message_begin().is_ok() {
        let after_header = r.position();
        let _ = r.skip(FieldType::Struct);
        assert!(r.position() <= bytes.len());
        let mut r = AnyReader::new(kind, &bytes[after_header..]);
        let _ = read_value(&mut r, FieldType::Struct);
    }
    for ty in [
        FieldType::Struct,
        FieldType::Map,
        FieldType::List,
        FieldType::String,
    ] {
        let mut r = AnyReader::new(kind, bytes);
        let _ = r.skip(ty);
        assert!(r.position() <= bytes.len());
    }
}

proptest! {
    #[test]
    fn messages_round_trip(
        name in "\\PC{0,12}",
        message_type in message_types(),
        seqid in any::<i32>(),
        body in body(),
    ) {
        for kind in KINDS {
            let bytes = message(kind, &name, message_type, seqid, &body);
            prop_assert_eq!(sniff(&bytes), Some(kind));

            let mut r = AnyReader::new(kind, &bytes);
            let header = r.read_message_begin().unwrap();
            prop_assert_eq!(header, MessageHeader { name: &name, kind: message_type, seqid });
            prop_assert_eq!(read_value(&mut r, FieldType::Struct).unwrap(), body.as_read(kind));
            prop_assert_eq!(r.position(), bytes.len());

            let mut r = AnyReader::new(kind, &bytes);
            r.read_message_begin().unwrap();
            r.skip(FieldType::Struct).unwrap();
            prop_assert_eq!(r.position(), bytes.len());
        }
    }

    #[test]
    fn concrete_and_any_readers_agree(body in body()) {
        let bytes = message(ProtocolKind::Binary, "m", MessageType::Call, 1, &body);
        let mut r = BinaryReader::new(&bytes);
        r.read_message_begin().unwrap();
        prop_assert_eq!(read_value(&mut r, FieldType::Struct).unwrap(), body.clone());

        let bytes = message(ProtocolKind::Compact, "m", MessageType::Call, 1, &body);
        let mut r = CompactReader::new(&bytes);
        r.read_message_begin().unwrap();
        prop_assert_eq!(
            read_value(&mut r, FieldType::Struct).unwrap(),
            body.as_read(ProtocolKind::Compact)
        );
    }

    #[test]
    fn frames_round_trip(payloads in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..50), 1..4)) {
        let mut stream = Vec::new();
        for payload in &payloads {
            write_frame(&mut stream, |out| out.extend_from_slice(payload));
        }
        let mut input = &stream[..];
        for payload in &payloads {
            let Framed::Frame { payload: got, consumed } = decode_frame(input, 64) else {
                panic!("no frame in {input:?}");
            };
            prop_assert_eq!(got, &payload[..]);
            prop_assert_eq!(consumed, payload.len() + 4);
            for cut in 0..consumed {
                let needed = if cut < 4 { 4 } else { consumed };
                prop_assert_eq!(decode_frame(&input[..cut], 64), Framed::Incomplete { needed });
            }
            input = &input[consumed..];
        }
        prop_assert!(input.is_empty());
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = sniff(&bytes);
        if let Framed::Frame { consumed, .. } = decode_frame(&bytes, 1 << 20) {
            prop_assert!(consumed <= bytes.len());
        }
        for kind in KINDS {
            read_anyhow(kind, &bytes);
        }
    }

    #[test]
    fn damaged_messages_never_panic(
        body in body(),
        damage in prop::collection::vec((any::<Index>(), any::<u8>()), 1..4),
        cut in any::<Index>(),
    ) {
        for kind in KINDS {
            let mut bytes = message(kind, "method", MessageType::Call, 9, &body);
            for (at, byte) in &damage {
                let at = at.index(bytes.len());
                bytes[at] = *byte;
            }
            read_anyhow(kind, &bytes);
            let cut = cut.index(bytes.len() + 1);
            read_anyhow(kind, &bytes[..cut]);
        }
    }
}

#[test]
fn frames() {
    assert_eq!(decode_frame(&[], 10), Framed::Incomplete { needed: 4 });
    assert_eq!(
        decode_frame(&[0, 0, 0, 2, 7, 8, 9], 10),
        Framed::Frame {
            payload: &[7, 8],
            consumed: 6
        }
    );
    assert_eq!(
        decode_frame(&[0, 0, 0, 11], 10),
        Framed::TooLarge { length: 11 }
    );
    // A negative length, such as an unframed strict binary message's first word.
    assert_eq!(
        decode_frame(&[0x80, 1, 0, 1], usize::MAX),
        Framed::TooLarge {
            length: 0x8001_0001
        }
    );

    let mut out = vec![0xaa];
    write_frame(&mut out, |out| out.extend_from_slice(b"abc"));
    assert_eq!(out, [0xaa, 0, 0, 0, 3, b'a', b'b', b'c']);
}

#[test]
fn sniffs_protocols() {
    assert_eq!(sniff(&[0x80, 0x01, 0, 1]), Some(ProtocolKind::Binary));
    assert_eq!(sniff(&[0, 0, 0, 4]), Some(ProtocolKind::Binary));
    assert_eq!(sniff(&[0x82, 0x21]), Some(ProtocolKind::Compact));
    assert_eq!(sniff(&[0x82, 0x22]), None);
    assert_eq!(sniff(&[0x80, 0x02]), None);
    assert_eq!(sniff(b"GET / HTTP/1.1"), None);
    assert_eq!(sniff(&[0x82]), None);
    assert_eq!(sniff(&[]), None);
}

#[test]
fn application_exceptions_round_trip() {
    for kind in KINDS {
        let mut out = Vec::new();
        write_application_exception(
            &mut AnyWriter::new(kind),
            &mut out,
            "lookup",
            7,
            ApplicationErrorKind::UnknownMethod,
            "no method lookup",
        );
        let mut r = AnyReader::new(kind, &out);
        assert_eq!(
            r.read_message_begin().unwrap(),
            MessageHeader {
                name: "lookup",
                kind: MessageType::Exception,
                seqid: 7
            }
        );
        assert_eq!(
            read_application_exception(&mut r).unwrap(),
            (
                ApplicationErrorKind::UnknownMethod,
                "no method lookup".to_owned()
            )
        );
        assert_eq!(r.position(), out.len());
    }
}

#[test]
fn application_exception_fields_are_optional_and_extensible() {
    // Only the type, an unknown field 3 before it, and a code this crate does not know.
    let body = Value::Struct(vec![
        (3, Value::List(FieldType::I32, vec![Value::I32(1)])),
        (2, Value::I32(99)),
    ]);
    for kind in KINDS {
        let mut out = Vec::new();
        write_value(&mut AnyWriter::new(kind), &mut out, &body);
        let got = read_application_exception(&mut AnyReader::new(kind, &out)).unwrap();
        assert_eq!(got, (ApplicationErrorKind::Unknown, String::new()));
    }
}

#[test]
fn error_messages_say_what_is_wrong() {
    let e = ThriftError::SizeOverRemaining {
        size: 1 << 31,
        remaining: 3,
        position: 5,
    };
    assert_eq!(
        e.to_string(),
        "size 2147483648 at byte 5 is more than the 3 bytes left can hold"
    );
    assert!(e.is_incomplete());
    let e = ThriftError::BadVersion {
        protocol: ProtocolKind::Compact,
        version: 2,
    };
    assert_eq!(
        e.to_string(),
        "unsupported compact protocol version 2 (only version 1 exists)"
    );
    assert!(!e.is_incomplete());
}

/// The payload of the one frame in `bytes`.
fn payload(bytes: &[u8]) -> &[u8] {
    match decode_frame(bytes, 1 << 20) {
        Framed::Frame { payload, consumed } if consumed == bytes.len() => payload,
        other => panic!("not one frame: {other:?}"),
    }
}

#[test]
fn whole_messages_round_trip() {
    for kind in KINDS {
        let mut out = Vec::new();
        write_message(&mut out, kind, "rank", MessageType::Call, 3, |w, out| {
            w.field_i64(out, 1, -5);
            w.field_string(out, 2, "x");
            w.field_bool(out, 3, true);
            w.field_double(out, 4, 0.5);
            w.field_i32(out, 5, 9);
            w.field_i64_list(out, 17, &[1, i64::MIN]);
        });
        // The one-call field writers write what the field-by-field calls do.
        let body = Value::Struct(vec![
            (1, Value::I64(-5)),
            (2, Value::Binary(b"x".to_vec())),
            (3, Value::Bool(true)),
            (4, Value::Double(0.5f64.to_bits())),
            (5, Value::I32(9)),
            (
                17,
                Value::List(FieldType::I64, vec![Value::I64(1), Value::I64(i64::MIN)]),
            ),
        ]);
        let payload = payload(&out);
        assert_eq!(payload, message(kind, "rank", MessageType::Call, 3, &body));

        let (protocol, header, mut r) = read_message(payload).unwrap();
        assert_eq!(protocol, kind);
        assert_eq!(
            header,
            MessageHeader {
                name: "rank",
                kind: MessageType::Call,
                seqid: 3
            }
        );
        let (mut account, mut list, mut flag) = (None, None, None);
        read_struct(&mut r, |r, ty, id| {
            Ok(match (id, ty) {
                (1, FieldType::I64) => {
                    account = Some(r.read_i64()?);
                    true
                }
                (3, FieldType::Bool) => {
                    flag = Some(r.read_bool()?);
                    true
                }
                (17, FieldType::List) => {
                    list = Some(read_i64_list(r)?);
                    true
                }
                _ => false,
            })
        })
        .unwrap();
        assert_eq!((account, flag), (Some(-5), Some(true)));
        assert_eq!(list, Some(vec![1, i64::MIN]));
        assert_eq!(r.position(), payload.len());
    }
}

#[test]
fn replies_and_what_is_not_one() {
    for kind in KINDS {
        let mut out = Vec::new();
        write_message(&mut out, kind, "rank", MessageType::Reply, 4, |w, out| {
            w.field_i32(out, 0, 1)
        });
        let (header, mut r) = read_reply_message(payload(&out)).unwrap();
        assert_eq!((header.name, header.seqid), ("rank", 4));
        assert_eq!(
            read_value(&mut r, FieldType::Struct).unwrap(),
            Value::Struct(vec![(0, Value::I32(1))])
        );

        let mut out = Vec::new();
        write_exception_message(
            &mut out,
            kind,
            "rank",
            4,
            ApplicationErrorKind::InternalError,
            "boom",
        );
        assert_eq!(
            read_reply_message(payload(&out)).map(|_| ()),
            Err(ReplyError::Application {
                kind: ApplicationErrorKind::InternalError,
                message: "boom".to_owned()
            })
        );

        let mut out = Vec::new();
        write_message(&mut out, kind, "rank", MessageType::Call, 4, |_, _| {});
        assert_eq!(
            read_reply_message(payload(&out)).map(|_| ()),
            Err(ReplyError::NotAReply(MessageType::Call))
        );
    }
    assert_eq!(
        read_message(b"GET / HTTP/1.1").map(|_| ()),
        Err(ThriftError::UnknownProtocol { first_byte: b'G' })
    );
    assert_eq!(
        read_message(&[]).map(|_| ()),
        Err(ThriftError::Truncated { position: 0 })
    );
    let mut out = Vec::new();
    BinaryWriter::new().write_list_begin(&mut out, FieldType::I32, 0);
    assert_eq!(
        read_i64_list(&mut BinaryReader::new(&out)),
        Err(ThriftError::UnexpectedType("list<i64>"))
    );
}

#[test]
fn reply_errors_read_as_thrift_names_them() {
    let refused = ReplyError::Application {
        kind: ApplicationErrorKind::UnknownMethod,
        message: "no such method".into(),
    };
    assert_eq!(
        refused.to_string(),
        "the server refused the call (UNKNOWN_METHOD): no such method"
    );
    assert_eq!(
        ReplyError::NotAReply(MessageType::Call).to_string(),
        "expected a reply, got a call message"
    );
    assert_eq!(
        ReplyError::UnknownMethod("getX".into()).to_string(),
        "a reply to a method this client does not know: \"getX\""
    );
}
