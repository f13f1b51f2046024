//! Apache Thrift's wire formats for tern's Thrift services: the framed transport, the binary and compact
//! protocols (a reader over a byte slice and a writer into a `Vec<u8>` for each, behind the [`ProtocolRead`]
//! and [`ProtocolWrite`] traits, with [`AnyReader`] and [`AnyWriter`] to serve both from one decoder), and
//! `TApplicationException`, as specified in Apache Thrift's `doc/specs` and written by its libraries, plus
//! helpers for services written by hand against an IDL (whole framed messages, [`read_struct`],
//! [`WriteField`]). Pure code, bytes in and values out, no I/O: a reader borrows strings and binaries from
//! its input, and bad input is an error ([`ThriftError`]), never a panic, a hang or an allocation sized by
//! the input's claims.

mod any;
mod application;
mod binary;
mod compact;
mod error;
mod frame;
mod input;
mod message;
mod serve;
#[cfg(test)]
mod tests;

use std::fmt;

pub use any::{AnyReader, AnyWriter};
pub use application::{
    read_application_exception, write_application_exception, ApplicationErrorKind,
};
pub use binary::{BinaryReader, BinaryWriter};
pub use compact::{CompactReader, CompactWriter};
pub use error::ThriftError;
pub use frame::{decode_frame, write_frame, Framed};
pub use message::{
    read_i64_list, read_message, read_reply_message, read_struct, write_exception_message,
    write_message, ReplyError, WriteField,
};
pub use serve::{decode_framed_call, FramedCall, Refusal};

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

impl MessageType {
    /// The message type with code `code`, read at `position`.
    fn from_wire(code: u8, position: usize) -> Result<Self, ThriftError> {
        Self::try_from(code).map_err(|code| ThriftError::InvalidMessageType { code, position })
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

/// Reads one protocol's encoding from a byte slice, in the order the values were written. Strings and
/// binaries borrow from the input. Every size and count read is checked against the bytes left (each
/// element takes at least one byte in both protocols), so a caller may reserve capacity for the count it
/// gets back.
///
/// A struct is `read_struct_begin`, then `read_field_begin` and the field's value until it returns `None`,
/// then `read_struct_end`; the begin and end calls matter to the compact protocol (field ids are deltas
/// within a struct) and bound the nesting to [`MAX_DEPTH`]. Lists, sets and maps have no end call.
pub trait ProtocolRead<'a> {
    fn read_message_begin(&mut self) -> Result<MessageHeader<'a>, ThriftError>;
    fn read_struct_begin(&mut self) -> Result<(), ThriftError>;
    fn read_struct_end(&mut self) -> Result<(), ThriftError>;
    /// The next field's type and id, or `None` at the end of the struct.
    fn read_field_begin(&mut self) -> Result<Option<(FieldType, i16)>, ThriftError>;
    fn read_bool(&mut self) -> Result<bool, ThriftError>;
    fn read_byte(&mut self) -> Result<i8, ThriftError>;
    fn read_i16(&mut self) -> Result<i16, ThriftError>;
    fn read_i32(&mut self) -> Result<i32, ThriftError>;
    fn read_i64(&mut self) -> Result<i64, ThriftError>;
    fn read_double(&mut self) -> Result<f64, ThriftError>;
    /// A `uuid`: 16 bytes, in the big-endian order of RFC 4122.
    fn read_uuid(&mut self) -> Result<[u8; 16], ThriftError>;
    fn read_binary(&mut self) -> Result<&'a [u8], ThriftError>;

    /// A binary that must be UTF-8.
    fn read_string(&mut self) -> Result<&'a str, ThriftError> {
        let position = self.position();
        let bytes = self.read_binary()?;
        std::str::from_utf8(bytes).map_err(|_| ThriftError::InvalidUtf8 { position })
    }

    /// A list's element type and length.
    fn read_list_begin(&mut self) -> Result<(FieldType, usize), ThriftError>;

    /// A set's element type and length (encoded as a list is).
    fn read_set_begin(&mut self) -> Result<(FieldType, usize), ThriftError> {
        self.read_list_begin()
    }

    /// A map's key type, value type and number of entries. The compact protocol writes no types for an
    /// empty map, so check the types only when the length is not zero (an empty compact map reports
    /// [`FieldType::Byte`] for both).
    fn read_map_begin(&mut self) -> Result<(FieldType, FieldType, usize), ThriftError>;

    /// Reads past a value of type `ty` (a field the reader does not know, say), up to [`MAX_DEPTH`] levels
    /// of nested structs and containers.
    fn skip(&mut self, ty: FieldType) -> Result<(), ThriftError> {
        skip_nested(self, ty, 0)
    }

    /// Bytes of the input read so far.
    fn position(&self) -> usize;
}

fn skip_nested<'a, R: ProtocolRead<'a> + ?Sized>(
    r: &mut R,
    ty: FieldType,
    depth: usize,
) -> Result<(), ThriftError> {
    if depth >= MAX_DEPTH {
        return Err(ThriftError::TooDeep {
            position: r.position(),
        });
    }
    match ty {
        FieldType::Bool => r.read_bool().map(drop),
        FieldType::Byte => r.read_byte().map(drop),
        FieldType::Double => r.read_double().map(drop),
        FieldType::I16 => r.read_i16().map(drop),
        FieldType::I32 => r.read_i32().map(drop),
        FieldType::I64 => r.read_i64().map(drop),
        FieldType::String => r.read_binary().map(drop),
        FieldType::Uuid => r.read_uuid().map(drop),
        FieldType::Struct => {
            r.read_struct_begin()?;
            while let Some((field_type, _)) = r.read_field_begin()? {
                skip_nested(r, field_type, depth + 1)?;
            }
            r.read_struct_end()
        }
        FieldType::List | FieldType::Set => {
            let (element, len) = r.read_list_begin()?;
            (0..len).try_for_each(|_| skip_nested(r, element, depth + 1))
        }
        FieldType::Map => {
            let (key, value, len) = r.read_map_begin()?;
            (0..len).try_for_each(|_| {
                skip_nested(r, key, depth + 1)?;
                skip_nested(r, value, depth + 1)
            })
        }
    }
}

/// Writes one protocol's encoding into the caller's buffer (kept apart from the writer so that the same
/// buffer can be framed with [`write_frame`]). The calls mirror [`ProtocolRead`]'s: a struct is
/// `write_struct_begin`, then `write_field_begin` and the field's value per field, `write_field_stop` and
/// `write_struct_end`. The methods take `&mut self` because the compact protocol keeps state: the last
/// field id of each open struct, and a bool field's header, which it writes only with the value.
///
/// Lengths past what the protocol can carry (over `i32::MAX` in binary, over `u32::MAX` in compact) are
/// written so that every reader refuses them rather than misreads them; they do not fit a frame anyway.
pub trait ProtocolWrite {
    fn write_message_begin(&mut self, out: &mut Vec<u8>, name: &str, kind: MessageType, seqid: i32);
    fn write_struct_begin(&mut self, out: &mut Vec<u8>);
    fn write_struct_end(&mut self, out: &mut Vec<u8>);
    fn write_field_begin(&mut self, out: &mut Vec<u8>, ty: FieldType, id: i16);
    fn write_field_stop(&mut self, out: &mut Vec<u8>);
    fn write_bool(&mut self, out: &mut Vec<u8>, v: bool);
    fn write_byte(&mut self, out: &mut Vec<u8>, v: i8);
    fn write_i16(&mut self, out: &mut Vec<u8>, v: i16);
    fn write_i32(&mut self, out: &mut Vec<u8>, v: i32);
    fn write_i64(&mut self, out: &mut Vec<u8>, v: i64);
    fn write_double(&mut self, out: &mut Vec<u8>, v: f64);
    /// A `uuid`: 16 bytes, in the big-endian order of RFC 4122.
    fn write_uuid(&mut self, out: &mut Vec<u8>, v: &[u8; 16]);
    fn write_binary(&mut self, out: &mut Vec<u8>, v: &[u8]);

    fn write_string(&mut self, out: &mut Vec<u8>, v: &str) {
        self.write_binary(out, v.as_bytes());
    }

    fn write_list_begin(&mut self, out: &mut Vec<u8>, elem: FieldType, len: usize);

    /// A set's header (encoded as a list's is).
    fn write_set_begin(&mut self, out: &mut Vec<u8>, elem: FieldType, len: usize) {
        self.write_list_begin(out, elem, len);
    }

    fn write_map_begin(&mut self, out: &mut Vec<u8>, key: FieldType, value: FieldType, len: usize);
}
