//! The two traits every protocol implements: reading from a byte slice and writing into a buffer.

use crate::{FieldType, MessageHeader, MessageType, ThriftError, MAX_DEPTH};

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
/// buffer can be framed with [`write_frame`](crate::write_frame)). The calls mirror [`ProtocolRead`]'s: a struct is
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
