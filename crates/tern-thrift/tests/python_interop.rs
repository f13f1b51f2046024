//! Interop with Apache Thrift's own library, in Python (Debian's python3-thrift, under `/usr/bin/python3`):
//! a message with a field of every type, written by one side and read by the other, in both directions and
//! both protocols, using the library's raw protocol methods (no generated code). The values travel to Python
//! as JSON, typed (`{"<id>": [type, value]}` for a struct, `[type, items]` for a list or set, `[key type,
//! value type, entries]` for a map), and come back in the same form.

use tern_testkit::thrift::{python_has_thrift, run_python};

use tern_thrift::{
    read_application_exception, write_application_exception, AnyReader, AnyWriter,
    ApplicationErrorKind, FieldType, MessageHeader, MessageType, ProtocolKind, ProtocolRead,
    ProtocolWrite,
};

/// `write <protocol> <json>` prints the hex of the message; `read <protocol> <hex>` prints the message as
/// JSON; `write_exception` and `read_exception` do the same for a `TApplicationException`.
const SCRIPT: &str = r#"
import json, sys
from thrift.Thrift import TApplicationException, TMessageType, TType
from thrift.protocol.TBinaryProtocol import TBinaryProtocol
from thrift.protocol.TCompactProtocol import TCompactProtocol
from thrift.transport.TTransport import TMemoryBuffer

PROTOCOLS = {
    "binary": TBinaryProtocol,
    "binary-non-strict": lambda t: TBinaryProtocol(t, strictWrite=False),
    "compact": TCompactProtocol,
}

def write_value(p, t, v):
    if t == TType.BOOL: p.writeBool(v)
    elif t == TType.BYTE: p.writeByte(v)
    elif t == TType.I16: p.writeI16(v)
    elif t == TType.I32: p.writeI32(v)
    elif t == TType.I64: p.writeI64(v)
    elif t == TType.DOUBLE: p.writeDouble(v)
    elif t == TType.STRING: p.writeString(v)
    elif t == TType.STRUCT:
        p.writeStructBegin("S")
        for fid, (ft, fv) in v.items():
            p.writeFieldBegin("f", ft, int(fid))
            write_value(p, ft, fv)
            p.writeFieldEnd()
        p.writeFieldStop()
        p.writeStructEnd()
    elif t == TType.LIST or t == TType.SET:
        et, items = v
        if t == TType.LIST: p.writeListBegin(et, len(items))
        else: p.writeSetBegin(et, len(items))
        for item in items: write_value(p, et, item)
        if t == TType.LIST: p.writeListEnd()
        else: p.writeSetEnd()
    elif t == TType.MAP:
        kt, vt, entries = v
        p.writeMapBegin(kt, vt, len(entries))
        for key, value in entries:
            write_value(p, kt, key)
            write_value(p, vt, value)
        p.writeMapEnd()
    else: raise ValueError("type %d" % t)

def read_value(p, t):
    if t == TType.BOOL: return p.readBool()
    if t == TType.BYTE: return p.readByte()
    if t == TType.I16: return p.readI16()
    if t == TType.I32: return p.readI32()
    if t == TType.I64: return p.readI64()
    if t == TType.DOUBLE: return p.readDouble()
    if t == TType.STRING: return p.readString()
    if t == TType.STRUCT:
        fields = {}
        p.readStructBegin()
        while True:
            _, ft, fid = p.readFieldBegin()
            if ft == TType.STOP: break
            fields[str(fid)] = [ft, read_value(p, ft)]
            p.readFieldEnd()
        p.readStructEnd()
        return fields
    if t == TType.LIST or t == TType.SET:
        et, n = p.readListBegin() if t == TType.LIST else p.readSetBegin()
        items = [read_value(p, et) for _ in range(n)]
        if t == TType.LIST: p.readListEnd()
        else: p.readSetEnd()
        return [et, items]
    if t == TType.MAP:
        kt, vt, n = p.readMapBegin()
        entries = [[read_value(p, kt), read_value(p, vt)] for _ in range(n)]
        p.readMapEnd()
        return [kt, vt, entries]
    raise ValueError("type %d" % t)

def dump(value):
    print(json.dumps(value, ensure_ascii=False, separators=(",", ":")))

mode, protocol, arg = sys.argv[1], PROTOCOLS[sys.argv[2]], sys.argv[3]
if mode == "write":
    message = json.loads(arg)
    out = TMemoryBuffer()
    p = protocol(out)
    p.writeMessageBegin(message["name"], message["type"], message["seqid"])
    write_value(p, TType.STRUCT, message["body"])
    p.writeMessageEnd()
    print(out.getvalue().hex())
elif mode == "read":
    p = protocol(TMemoryBuffer(bytes.fromhex(arg)))
    name, type, seqid = p.readMessageBegin()
    body = read_value(p, TType.STRUCT)
    p.readMessageEnd()
    dump({"name": name, "type": type, "seqid": seqid, "body": body})
elif mode == "write_exception":
    out = TMemoryBuffer()
    p = protocol(out)
    p.writeMessageBegin("lookup", TMessageType.EXCEPTION, 12)
    TApplicationException(TApplicationException.INTERNAL_ERROR, arg).write(p)
    p.writeMessageEnd()
    print(out.getvalue().hex())
elif mode == "read_exception":
    p = protocol(TMemoryBuffer(bytes.fromhex(arg)))
    name, type, seqid = p.readMessageBegin()
    e = TApplicationException()
    e.read(p)
    p.readMessageEnd()
    dump({"name": name, "type": type, "seqid": seqid, "message": e.message, "kind": e.type})
"#;

/// Runs the script and returns what it printed.
fn python(mode: &str, protocol: &str, arg: &str) -> String {
    let output = run_python(SCRIPT, &[mode, protocol, arg], None);
    String::from_utf8(output.stdout)
        .expect("UTF-8 output")
        .trim_end()
        .to_owned()
}

fn protocol_name(kind: ProtocolKind) -> &'static str {
    match kind {
        ProtocolKind::Binary => "binary",
        ProtocolKind::Compact => "compact",
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
        .collect()
}

/// A Thrift value with its types.
#[derive(Debug, Clone, PartialEq)]
enum V {
    Bool(bool),
    Byte(i8),
    I16(i16),
    I32(i32),
    I64(i64),
    Double(f64),
    Str(String),
    Struct(Vec<(i16, V)>),
    List(FieldType, Vec<V>),
    Set(FieldType, Vec<V>),
    Map(FieldType, FieldType, Vec<(V, V)>),
}

impl V {
    fn field_type(&self) -> FieldType {
        match self {
            Self::Bool(_) => FieldType::Bool,
            Self::Byte(_) => FieldType::Byte,
            Self::I16(_) => FieldType::I16,
            Self::I32(_) => FieldType::I32,
            Self::I64(_) => FieldType::I64,
            Self::Double(_) => FieldType::Double,
            Self::Str(_) => FieldType::String,
            Self::Struct(_) => FieldType::Struct,
            Self::List(..) => FieldType::List,
            Self::Set(..) => FieldType::Set,
            Self::Map(..) => FieldType::Map,
        }
    }

    /// The value as this crate reads it back in `kind`: the compact protocol sends no types for an empty
    /// map, which the reader reports as `Byte`.
    fn as_read(&self, kind: ProtocolKind) -> Self {
        let as_read = |v: &Self| v.as_read(kind);
        match self {
            Self::Struct(fields) => {
                Self::Struct(fields.iter().map(|(id, v)| (*id, as_read(v))).collect())
            }
            Self::List(ty, items) => Self::List(*ty, items.iter().map(as_read).collect()),
            Self::Set(ty, items) => Self::Set(*ty, items.iter().map(as_read).collect()),
            Self::Map(_, _, entries) if entries.is_empty() && kind == ProtocolKind::Compact => {
                Self::Map(FieldType::Byte, FieldType::Byte, Vec::new())
            }
            Self::Map(k, v, entries) => {
                let entries = entries.iter().map(|(k, v)| (as_read(k), as_read(v)));
                Self::Map(*k, *v, entries.collect())
            }
            leaf => leaf.clone(),
        }
    }
}

/// The script's JSON form of `v`. With `empty_compact_map`, an empty map's types are 0 (`STOP`), as Python
/// reads them from the compact protocol, which sends none.
fn json(v: &V, empty_compact_map: bool) -> String {
    let join = |parts: Vec<String>| parts.join(",");
    let code = |ty: FieldType| ty as u8;
    match v {
        V::Bool(b) => b.to_string(),
        V::Byte(n) => n.to_string(),
        V::I16(n) => n.to_string(),
        V::I32(n) => n.to_string(),
        V::I64(n) => n.to_string(),
        // Rust's and Python's shortest round-trip forms agree for the sample's doubles.
        V::Double(x) => format!("{x:?}"),
        V::Str(s) => format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\"")),
        V::Struct(fields) => format!(
            "{{{}}}",
            join(
                fields
                    .iter()
                    .map(|(id, f)| format!(
                        "\"{id}\":[{},{}]",
                        code(f.field_type()),
                        json(f, empty_compact_map)
                    ))
                    .collect()
            )
        ),
        V::List(ty, items) | V::Set(ty, items) => format!(
            "[{},[{}]]",
            code(*ty),
            join(items.iter().map(|i| json(i, empty_compact_map)).collect())
        ),
        V::Map(k, v, entries) => {
            let (k, v) = if entries.is_empty() && empty_compact_map {
                (0, 0)
            } else {
                (code(*k), code(*v))
            };
            let entries = entries.iter().map(|(key, value)| {
                format!(
                    "[{},{}]",
                    json(key, empty_compact_map),
                    json(value, empty_compact_map)
                )
            });
            format!("[{k},{v},[{}]]", join(entries.collect()))
        }
    }
}

fn message_json(header: &MessageHeader<'_>, body: &V, kind: ProtocolKind) -> String {
    format!(
        "{{\"name\":\"{}\",\"type\":{},\"seqid\":{},\"body\":{}}}",
        header.name,
        header.kind as u8,
        header.seqid,
        json(body, kind == ProtocolKind::Compact)
    )
}

fn write_value(w: &mut impl ProtocolWrite, out: &mut Vec<u8>, v: &V) {
    match v {
        V::Bool(b) => w.write_bool(out, *b),
        V::Byte(n) => w.write_byte(out, *n),
        V::I16(n) => w.write_i16(out, *n),
        V::I32(n) => w.write_i32(out, *n),
        V::I64(n) => w.write_i64(out, *n),
        V::Double(x) => w.write_double(out, *x),
        V::Str(s) => w.write_string(out, s),
        V::Struct(fields) => {
            w.write_struct_begin(out);
            for (id, field) in fields {
                w.write_field_begin(out, field.field_type(), *id);
                write_value(w, out, field);
            }
            w.write_field_stop(out);
            w.write_struct_end(out);
        }
        V::List(ty, items) => {
            w.write_list_begin(out, *ty, items.len());
            items.iter().for_each(|item| write_value(w, out, item));
        }
        V::Set(ty, items) => {
            w.write_set_begin(out, *ty, items.len());
            items.iter().for_each(|item| write_value(w, out, item));
        }
        V::Map(k, v, entries) => {
            w.write_map_begin(out, *k, *v, entries.len());
            for (key, value) in entries {
                write_value(w, out, key);
                write_value(w, out, value);
            }
        }
    }
}

fn read_value<'a>(r: &mut impl ProtocolRead<'a>, ty: FieldType) -> V {
    match ty {
        FieldType::Bool => V::Bool(r.read_bool().unwrap()),
        FieldType::Byte => V::Byte(r.read_byte().unwrap()),
        FieldType::I16 => V::I16(r.read_i16().unwrap()),
        FieldType::I32 => V::I32(r.read_i32().unwrap()),
        FieldType::I64 => V::I64(r.read_i64().unwrap()),
        FieldType::Double => V::Double(r.read_double().unwrap()),
        FieldType::String => V::Str(r.read_string().unwrap().to_owned()),
        FieldType::Struct => {
            r.read_struct_begin().unwrap();
            let mut fields = Vec::new();
            while let Some((ty, id)) = r.read_field_begin().unwrap() {
                fields.push((id, read_value(r, ty)));
            }
            r.read_struct_end().unwrap();
            V::Struct(fields)
        }
        FieldType::List => {
            let (element, len) = r.read_list_begin().unwrap();
            V::List(element, (0..len).map(|_| read_value(r, element)).collect())
        }
        FieldType::Set => {
            let (element, len) = r.read_set_begin().unwrap();
            V::Set(element, (0..len).map(|_| read_value(r, element)).collect())
        }
        FieldType::Map => {
            let (k, v, len) = r.read_map_begin().unwrap();
            let entries = (0..len).map(|_| (read_value(r, k), read_value(r, v)));
            V::Map(k, v, entries.collect())
        }
        FieldType::Uuid => panic!("python3-thrift 0.17 has no uuid"),
    }
}

const HEADER: MessageHeader<'static> = MessageHeader {
    name: "lookup",
    kind: MessageType::Call,
    seqid: -123_456,
};

/// A struct with a field of every type Python's library has, and ids that take both of the compact
/// protocol's field header forms.
fn sample() -> V {
    use FieldType as T;
    let s = |s: &str| V::Str(s.to_owned());
    V::Struct(vec![
        (1, V::Bool(true)),
        (2, V::Byte(-7)),
        (3, V::I16(-300)),
        (4, V::I32(123_456_789)),
        (5, V::I64(-9_876_543_210_123)),
        (6, V::Double(-2.5)),
        (7, s("héllo \"wörld\" ✓")),
        (
            8,
            V::List(T::I64, vec![V::I64(1), V::I64(-2), V::I64(3_000_000_000)]),
        ),
        (
            9,
            V::Map(
                T::String,
                T::I32,
                vec![(s("a"), V::I32(1)), (s("bé"), V::I32(-2))],
            ),
        ),
        (10, V::Set(T::I32, vec![V::I32(5), V::I32(-6)])),
        (
            11,
            V::Struct(vec![
                (1, V::I32(42)),
                (2, V::Bool(false)),
                (3, V::List(T::Bool, vec![V::Bool(true), V::Bool(false)])),
                (20, V::Struct(Vec::new())),
            ]),
        ),
        // Over 14 elements: the compact protocol's long list header.
        (
            12,
            V::List(T::String, (0..20).map(|i| s(&format!("s{i}"))).collect()),
        ),
        (13, V::Map(T::I32, T::String, Vec::new())),
        // Deltas over 15 (compact's long field header), a bool among them.
        (40, V::Bool(false)),
        (41, V::I16(7)),
        (100, V::Double(0.1)),
    ])
}

fn written_by_us(kind: ProtocolKind) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = AnyWriter::new(kind);
    w.write_message_begin(&mut out, HEADER.name, HEADER.kind, HEADER.seqid);
    write_value(&mut w, &mut out, &sample());
    out
}

#[test]
fn python_reads_what_we_write() {
    if !python_has_thrift() {
        return;
    }
    for kind in [ProtocolKind::Binary, ProtocolKind::Compact] {
        let read = python("read", protocol_name(kind), &hex(&written_by_us(kind)));
        assert_eq!(read, message_json(&HEADER, &sample(), kind), "{kind}");
    }
}

#[test]
fn we_read_what_python_writes() {
    if !python_has_thrift() {
        return;
    }
    for (protocol, kind) in [
        ("binary", ProtocolKind::Binary),
        ("binary-non-strict", ProtocolKind::Binary),
        ("compact", ProtocolKind::Compact),
    ] {
        let bytes = unhex(&python(
            "write",
            protocol,
            &message_json(&HEADER, &sample(), kind),
        ));
        let mut r = AnyReader::new(kind, &bytes);
        assert_eq!(r.read_message_begin().unwrap(), HEADER, "{protocol}");
        let body = read_value(&mut r, FieldType::Struct);
        assert_eq!(body, sample().as_read(kind), "{protocol}");
        assert_eq!(r.position(), bytes.len(), "{protocol}");
        // Python and this crate write the same message byte for byte (both strict, in binary).
        if protocol != "binary-non-strict" {
            assert_eq!(hex(&bytes), hex(&written_by_us(kind)), "{protocol}");
        }
    }
}

#[test]
fn application_exceptions_interoperate() {
    if !python_has_thrift() {
        return;
    }
    let message = "handler failed: é";
    for kind in [ProtocolKind::Binary, ProtocolKind::Compact] {
        let mut ours = Vec::new();
        write_application_exception(
            &mut AnyWriter::new(kind),
            &mut ours,
            "lookup",
            12,
            ApplicationErrorKind::InternalError,
            message,
        );
        assert_eq!(
            python("read_exception", protocol_name(kind), &hex(&ours)),
            format!(
                "{{\"name\":\"lookup\",\"type\":3,\"seqid\":12,\"message\":\"{message}\",\"kind\":6}}"
            ),
            "{kind}"
        );

        let theirs = unhex(&python("write_exception", protocol_name(kind), message));
        let mut r = AnyReader::new(kind, &theirs);
        assert_eq!(
            r.read_message_begin().unwrap(),
            MessageHeader {
                name: "lookup",
                kind: MessageType::Exception,
                seqid: 12
            }
        );
        assert_eq!(
            read_application_exception(&mut r).unwrap(),
            (ApplicationErrorKind::InternalError, message.to_owned())
        );
        assert_eq!(theirs, ours, "{kind}");
    }
}
