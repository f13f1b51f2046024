//! The compact protocol: zigzag varint integers, little-endian doubles, field ids as deltas from the
//! previous field of the struct, a bool field's value in its field header, and small sizes packed with the
//! element type into one byte.

use crate::input::Input;
use crate::{
    FieldType, MessageHeader, MessageType, ProtocolKind, ProtocolRead, ProtocolWrite, ThriftError,
    MAX_DEPTH,
};

#[cfg(test)]
mod tests;

const PROTOCOL_ID: u8 = 0x82;
const VERSION: u8 = 1;
const VERSION_MASK: u8 = 0x1f;
const TYPE_SHIFT: u32 = 5;

/// The compact type codes of a bool field's header: the value itself. As a collection's element type
/// either means bool (writers disagree on which to send), and as an element value 1 is true.
const TRUE: u8 = 1;
const FALSE: u8 = 2;

/// A list or set header's size nibble that says the size follows as a varint.
const LONG_SIZE: u8 = 0x0f;

/// What [`CompactReader::read_map_begin`] reports as the key and value types of an empty map, which
/// carries none.
pub(crate) const EMPTY_MAP_TYPE: FieldType = FieldType::Byte;

fn compact_code(ty: FieldType) -> u8 {
    match ty {
        FieldType::Bool => TRUE,
        FieldType::Byte => 3,
        FieldType::I16 => 4,
        FieldType::I32 => 5,
        FieldType::I64 => 6,
        FieldType::Double => 7,
        FieldType::String => 8,
        FieldType::List => 9,
        FieldType::Set => 10,
        FieldType::Map => 11,
        FieldType::Struct => 12,
        FieldType::Uuid => 13,
    }
}

/// The type with compact code `code` (read at `position`, for the error).
fn field_type(code: u8, position: usize) -> Result<FieldType, ThriftError> {
    Ok(match code {
        TRUE | FALSE => FieldType::Bool,
        3 => FieldType::Byte,
        4 => FieldType::I16,
        5 => FieldType::I32,
        6 => FieldType::I64,
        7 => FieldType::Double,
        8 => FieldType::String,
        9 => FieldType::List,
        10 => FieldType::Set,
        11 => FieldType::Map,
        12 => FieldType::Struct,
        13 => FieldType::Uuid,
        _ => return Err(ThriftError::InvalidFieldType { code, position }),
    })
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

/// Reads the compact protocol from a byte slice.
#[derive(Debug, Clone)]
pub struct CompactReader<'a> {
    input: Input<'a>,
    /// The id of the last field read in the current struct: the base of the next field's delta.
    last_field_id: i16,
    /// The enclosing structs' last field ids, restored by `read_struct_end`; a fixed array, since the
    /// nesting is bounded, so that a reader never allocates.
    enclosing_field_ids: [i16; MAX_DEPTH],
    depth: usize,
    /// A bool field's value, read with its header, for the `read_bool` that follows.
    pending_bool: Option<bool>,
}

impl<'a> CompactReader<'a> {
    pub fn new(input: &'a [u8]) -> Self {
        Self {
            input: Input::new(input),
            last_field_id: 0,
            enclosing_field_ids: [0; MAX_DEPTH],
            depth: 0,
            pending_bool: None,
        }
    }

    /// A ULEB128 varint of up to 64 bits.
    fn varint(&mut self) -> Result<u64, ThriftError> {
        let position = self.input.position;
        let mut value = 0u64;
        let mut shift = 0;
        loop {
            let byte = self.input.byte()?;
            let bits = u64::from(byte & 0x7f);
            // The tenth byte has room for the top bit only.
            if shift == 63 && bits > 1 {
                return Err(ThriftError::VarintOverflow { position });
            }
            value |= bits << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
            shift += 7;
            if shift > 63 {
                return Err(ThriftError::VarintOverflow { position });
            }
        }
    }

    /// A varint that must fit in `T`.
    fn varint_as<T: TryFrom<u64>>(&mut self) -> Result<T, ThriftError> {
        let position = self.input.position;
        T::try_from(self.varint()?).map_err(|_| ThriftError::VarintOverflow { position })
    }

    /// A varint size, checked to fit the bytes left as values of at least `min_bytes` each.
    fn count(&mut self, min_bytes: u64) -> Result<usize, ThriftError> {
        let position = self.input.position;
        let size = u64::from(self.varint_as::<u32>()?);
        self.input.count(size, min_bytes, position)
    }
}

impl<'a> ProtocolRead<'a> for CompactReader<'a> {
    fn read_message_begin(&mut self) -> Result<MessageHeader<'a>, ThriftError> {
        let first_byte = self.input.byte()?;
        if first_byte != PROTOCOL_ID {
            return Err(ThriftError::UnknownProtocol { first_byte });
        }
        let position = self.input.position;
        let type_and_version = self.input.byte()?;
        if type_and_version & VERSION_MASK != VERSION {
            return Err(ThriftError::BadVersion {
                protocol: ProtocolKind::Compact,
                version: u16::from(type_and_version & VERSION_MASK),
            });
        }
        let kind = crate::input::message_type(type_and_version >> TYPE_SHIFT, position)?;
        // The i32 is sent as an unsigned varint (5 bytes when negative); keeping its low 32 bits also accepts
        // a writer that sign-extended it to 64.
        let seqid = self.varint()? as u32 as i32;
        let name = self.read_string()?;
        Ok(MessageHeader { name, kind, seqid })
    }

    fn read_struct_begin(&mut self) -> Result<(), ThriftError> {
        let Some(slot) = self.enclosing_field_ids.get_mut(self.depth) else {
            return Err(ThriftError::TooDeep {
                position: self.input.position,
            });
        };
        *slot = self.last_field_id;
        self.depth += 1;
        self.last_field_id = 0;
        Ok(())
    }

    fn read_struct_end(&mut self) -> Result<(), ThriftError> {
        // An unmatched end is the caller's slip, not the input's: it leaves the reader at the top level.
        if self.depth > 0 {
            self.depth -= 1;
            self.last_field_id = self.enclosing_field_ids[self.depth];
        }
        Ok(())
    }

    fn read_field_begin(&mut self) -> Result<Option<(FieldType, i16)>, ThriftError> {
        self.pending_bool = None;
        let position = self.input.position;
        let header = self.input.byte()?;
        let code = header & 0x0f;
        // Apache Thrift's readers end the struct on a zero type whatever the delta nibble says.
        if code == 0 {
            return Ok(None);
        }
        let ty = field_type(code, position)?;
        let delta = header >> 4;
        let id = if delta == 0 {
            self.read_i16()?
        } else {
            self.last_field_id.wrapping_add(i16::from(delta))
        };
        self.last_field_id = id;
        if ty == FieldType::Bool {
            self.pending_bool = Some(code == TRUE);
        }
        Ok(Some((ty, id)))
    }

    fn read_bool(&mut self) -> Result<bool, ThriftError> {
        match self.pending_bool.take() {
            Some(value) => Ok(value),
            None => Ok(self.input.byte()? == TRUE),
        }
    }

    fn read_byte(&mut self) -> Result<i8, ThriftError> {
        Ok(i8::from_le_bytes(self.input.array()?))
    }

    fn read_i16(&mut self) -> Result<i16, ThriftError> {
        // A zigzagged u16 is in i16's range.
        Ok(unzigzag(self.varint_as::<u16>()?.into()) as i16)
    }

    fn read_i32(&mut self) -> Result<i32, ThriftError> {
        // A zigzagged u32 is in i32's range.
        Ok(unzigzag(self.varint_as::<u32>()?.into()) as i32)
    }

    fn read_i64(&mut self) -> Result<i64, ThriftError> {
        Ok(unzigzag(self.varint()?))
    }

    fn read_double(&mut self) -> Result<f64, ThriftError> {
        Ok(f64::from_le_bytes(self.input.array()?))
    }

    fn read_uuid(&mut self) -> Result<[u8; 16], ThriftError> {
        self.input.array()
    }

    fn read_binary(&mut self) -> Result<&'a [u8], ThriftError> {
        let position = self.input.position;
        let len = self.count(1)?;
        self.input.slice(len, position)
    }

    fn read_list_begin(&mut self) -> Result<(FieldType, usize), ThriftError> {
        let position = self.input.position;
        let header = self.input.byte()?;
        let element = field_type(header & 0x0f, position)?;
        let len = match header >> 4 {
            LONG_SIZE => self.count(1)?,
            short => self.input.count(u64::from(short), 1, position)?,
        };
        Ok((element, len))
    }

    fn read_map_begin(&mut self) -> Result<(FieldType, FieldType, usize), ThriftError> {
        // A key and a value, at least a byte each.
        let len = self.count(2)?;
        if len == 0 {
            return Ok((EMPTY_MAP_TYPE, EMPTY_MAP_TYPE, 0));
        }
        let position = self.input.position;
        let types = self.input.byte()?;
        let key = field_type(types >> 4, position)?;
        let value = field_type(types & 0x0f, position)?;
        Ok((key, value, len))
    }

    fn position(&self) -> usize {
        self.input.position
    }
}

/// Writes the compact protocol.
#[derive(Debug, Clone)]
pub struct CompactWriter {
    /// The id of the last field written in the current struct, the base of the next field's delta; `None`
    /// when unknown, which writes the next field id in full.
    last_field_id: Option<i16>,
    /// The enclosing structs' last field ids, restored by `write_struct_end`. A fixed array, so that a
    /// writer never allocates: a struct nested deeper than [`MAX_DEPTH`] (which readers refuse anyway) has
    /// no slot, and the struct around it continues with its ids in full. (Within the array's depth the last
    /// id is always known.)
    enclosing_field_ids: [i16; MAX_DEPTH],
    depth: usize,
    /// A bool field's id: its header carries the value, so it waits for `write_bool`.
    pending_bool_field: Option<i16>,
}

impl Default for CompactWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl CompactWriter {
    pub fn new() -> Self {
        Self {
            last_field_id: Some(0),
            enclosing_field_ids: [0; MAX_DEPTH],
            depth: 0,
            pending_bool_field: None,
        }
    }

    fn field_header(&mut self, out: &mut Vec<u8>, code: u8, id: i16) {
        let delta = self
            .last_field_id
            .map(|last| i32::from(id) - i32::from(last));
        match delta {
            Some(delta @ 1..=15) => out.push(((delta as u8) << 4) | code),
            _ => {
                out.push(code);
                self.write_i16(out, id);
            }
        }
        self.last_field_id = Some(id);
    }
}

fn write_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

impl ProtocolWrite for CompactWriter {
    fn write_message_begin(
        &mut self,
        out: &mut Vec<u8>,
        name: &str,
        kind: MessageType,
        seqid: i32,
    ) {
        out.extend_from_slice(&[PROTOCOL_ID, ((kind as u8) << TYPE_SHIFT) | VERSION]);
        // Not zigzagged: the i32's bits as an unsigned varint, as Apache Thrift's writers send it.
        write_varint(out, u64::from(seqid as u32));
        self.write_string(out, name);
    }

    fn write_struct_begin(&mut self, _out: &mut Vec<u8>) {
        if let Some(slot) = self.enclosing_field_ids.get_mut(self.depth) {
            *slot = self.last_field_id.unwrap_or_default();
        }
        self.depth += 1;
        self.last_field_id = Some(0);
    }

    fn write_struct_end(&mut self, _out: &mut Vec<u8>) {
        self.depth = self.depth.saturating_sub(1);
        self.last_field_id = self.enclosing_field_ids.get(self.depth).copied();
    }

    fn write_field_begin(&mut self, out: &mut Vec<u8>, ty: FieldType, id: i16) {
        if ty == FieldType::Bool {
            self.pending_bool_field = Some(id);
        } else {
            self.field_header(out, compact_code(ty), id);
        }
    }

    fn write_field_stop(&mut self, out: &mut Vec<u8>) {
        out.push(0);
    }

    fn write_bool(&mut self, out: &mut Vec<u8>, v: bool) {
        let code = if v { TRUE } else { FALSE };
        match self.pending_bool_field.take() {
            Some(id) => self.field_header(out, code, id),
            None => out.push(code),
        }
    }

    fn write_byte(&mut self, out: &mut Vec<u8>, v: i8) {
        out.extend_from_slice(&v.to_le_bytes());
    }

    fn write_i16(&mut self, out: &mut Vec<u8>, v: i16) {
        write_varint(out, zigzag(v.into()));
    }

    fn write_i32(&mut self, out: &mut Vec<u8>, v: i32) {
        write_varint(out, zigzag(v.into()));
    }

    fn write_i64(&mut self, out: &mut Vec<u8>, v: i64) {
        write_varint(out, zigzag(v));
    }

    fn write_double(&mut self, out: &mut Vec<u8>, v: f64) {
        out.extend_from_slice(&v.to_le_bytes());
    }

    fn write_uuid(&mut self, out: &mut Vec<u8>, v: &[u8; 16]) {
        out.extend_from_slice(v);
    }

    fn write_binary(&mut self, out: &mut Vec<u8>, v: &[u8]) {
        write_varint(out, v.len() as u64);
        out.extend_from_slice(v);
    }

    fn write_list_begin(&mut self, out: &mut Vec<u8>, elem: FieldType, len: usize) {
        let code = compact_code(elem);
        match u8::try_from(len) {
            Ok(short @ 0..LONG_SIZE) => out.push((short << 4) | code),
            _ => {
                out.push((LONG_SIZE << 4) | code);
                write_varint(out, len as u64);
            }
        }
    }

    fn write_map_begin(&mut self, out: &mut Vec<u8>, key: FieldType, value: FieldType, len: usize) {
        write_varint(out, len as u64);
        if len > 0 {
            out.push((compact_code(key) << 4) | compact_code(value));
        }
    }
}
