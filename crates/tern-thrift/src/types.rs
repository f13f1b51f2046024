//! The protocol-independent vocabulary: which protocol, what kind of message, a message's header, and the
//! types of fields and container elements.

use std::fmt;

/// How deeply structs may nest while reading, and structs and containers while skipping: enough for any
/// real schema, and it bounds the recursion that hostile input could otherwise drive into a stack overflow.
pub const MAX_DEPTH: usize = 64;

/// The two protocols a message can be encoded in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProtocolKind {
    Binary,
    Compact,
}

impl fmt::Display for ProtocolKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Binary => "binary",
            Self::Compact => "compact",
        })
    }
}

/// The protocol of the message at the start of `payload`, from its first bytes: `0x80 0x01` is strict
/// binary, `0x82` with version 1 in the low five bits of the next byte is compact, and a zero first byte is
/// non-strict binary (the top byte of its method name's length, zero for any name under 16 MiB). `None`
/// for anything else, including fewer bytes than that tells apart.
pub fn sniff(payload: &[u8]) -> Option<ProtocolKind> {
    match payload {
        [0x80, 0x01, ..] | [0x00, ..] => Some(ProtocolKind::Binary),
        [0x82, version_and_type, ..] if version_and_type & 0x1f == 1 => Some(ProtocolKind::Compact),
        _ => None,
    }
}

/// The kind of a message, with its code on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MessageType {
    Call = 1,
    Reply = 2,
    Exception = 3,
    Oneway = 4,
}

/// As Thrift names the message types (`T_CALL`...), in lower case: `call`, `reply`, `exception`, `oneway`.
impl fmt::Display for MessageType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Call => "call",
            Self::Reply => "reply",
            Self::Exception => "exception",
            Self::Oneway => "oneway",
        })
    }
}

impl TryFrom<u8> for MessageType {
    type Error = u8;

    /// The message type with wire code `code`, or the code back when it is none.
    fn try_from(code: u8) -> Result<Self, u8> {
        match code {
            1 => Ok(Self::Call),
            2 => Ok(Self::Reply),
            3 => Ok(Self::Exception),
            4 => Ok(Self::Oneway),
            _ => Err(code),
        }
    }
}

/// The start of every message: the method, what kind of message it is, and the sequence id a reply repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageHeader<'a> {
    pub name: &'a str,
    pub kind: MessageType,
    pub seqid: i32,
}

/// The type of a field or container element, with its `TType` code (the binary protocol's; the compact
/// protocol maps these to its own codes). The end of a struct, `TType` 0 (`STOP`), is not a type here:
/// [`ProtocolRead::read_field_begin`] returns `None` for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FieldType {
    Bool = 2,
    Byte = 3,
    Double = 4,
    I16 = 6,
    I32 = 8,
    I64 = 10,
    /// `string` and `binary` alike: the wire does not tell them apart.
    String = 11,
    Struct = 12,
    Map = 13,
    Set = 14,
    List = 15,
    Uuid = 16,
}

impl TryFrom<u8> for FieldType {
    type Error = u8;

    /// The type with `TType` code `code`, or the code back when it is none (0, `STOP`, included).
    fn try_from(code: u8) -> Result<Self, u8> {
        Ok(match code {
            2 => Self::Bool,
            3 => Self::Byte,
            4 => Self::Double,
            6 => Self::I16,
            8 => Self::I32,
            10 => Self::I64,
            11 => Self::String,
            12 => Self::Struct,
            13 => Self::Map,
            14 => Self::Set,
            15 => Self::List,
            16 => Self::Uuid,
            _ => return Err(code),
        })
    }
}
