//! The binary protocol: fixed-width big-endian integers and doubles, `TType` codes as they are, i32 sizes.

use crate::input::Input;
use crate::{
    FieldType, MessageHeader, MessageType, ProtocolKind, ProtocolRead, ProtocolWrite, ThriftError,
    MAX_DEPTH,
};

#[cfg(test)]
mod tests;

/// The high half of a strict message's first word: the top bit, then version 1.
const VERSION_1: [u8; 2] = [0x80, 0x01];

/// Reads the binary protocol from a byte slice. Messages may be strict (versioned, as Apache Thrift writes
/// by default) or the old non-strict form (the method name first).
#[derive(Debug, Clone)]
pub struct BinaryReader<'a> {
    input: Input<'a>,
    /// Structs open now, for [`MAX_DEPTH`].
    depth: usize,
}

impl<'a> BinaryReader<'a> {
    pub fn new(input: &'a [u8]) -> Self {
        Self {
            input: Input::new(input),
            depth: 0,
        }
    }

    fn field_type(&mut self) -> Result<FieldType, ThriftError> {
        let position = self.input.position;
        let code = self.input.byte()?;
        FieldType::try_from(code).map_err(|code| ThriftError::InvalidFieldType { code, position })
    }

    /// An i32 length, checked to be non-negative, and where it was read.
    fn length(&mut self) -> Result<(usize, usize), ThriftError> {
        let position = self.input.position;
        let size = self.read_i32()?;
        let len =
            usize::try_from(size).map_err(|_| ThriftError::NegativeSize { size, position })?;
        Ok((len, position))
    }

    /// A collection's length, checked to fit the bytes left as values of at least `min_bytes` each.
    fn count(&mut self, min_bytes: u64) -> Result<usize, ThriftError> {
        let (len, position) = self.length()?;
        self.input.count(len as u64, min_bytes, position)
    }

    fn utf8(bytes: &'a [u8], position: usize) -> Result<&'a str, ThriftError> {
        std::str::from_utf8(bytes).map_err(|_| ThriftError::InvalidUtf8 { position })
    }
}

impl<'a> ProtocolRead<'a> for BinaryReader<'a> {
    fn read_message_begin(&mut self) -> Result<MessageHeader<'a>, ThriftError> {
        let start = self.input.position;
        let word = self.input.array::<4>()?;
        if word[0] & 0x80 != 0 {
            // Strict: version, an unused byte, the type; then the name and the sequence id.
            if word[..2] != VERSION_1 {
                return Err(ThriftError::BadVersion {
                    protocol: ProtocolKind::Binary,
                    version: u16::from_be_bytes([word[0], word[1]]) & 0x7fff,
                });
            }
            let kind = crate::input::message_type(word[3], start + 3)?;
            let name = self.read_string()?;
            let seqid = self.read_i32()?;
            Ok(MessageHeader { name, kind, seqid })
        } else {
            // Non-strict: the word is the name's length; then the name, the type and the sequence id.
            let name_len = u32::from_be_bytes(word) as usize;
            let name = Self::utf8(self.input.slice(name_len, start)?, start)?;
            let kind_position = self.input.position;
            let kind = crate::input::message_type(self.input.byte()?, kind_position)?;
            let seqid = self.read_i32()?;
            Ok(MessageHeader { name, kind, seqid })
        }
    }

    fn read_struct_begin(&mut self) -> Result<(), ThriftError> {
        if self.depth == MAX_DEPTH {
            return Err(ThriftError::TooDeep {
                position: self.input.position,
            });
        }
        self.depth += 1;
        Ok(())
    }

    fn read_struct_end(&mut self) -> Result<(), ThriftError> {
        self.depth = self.depth.saturating_sub(1);
        Ok(())
    }

    fn read_field_begin(&mut self) -> Result<Option<(FieldType, i16)>, ThriftError> {
        let position = self.input.position;
        let code = self.input.byte()?;
        if code == 0 {
            return Ok(None);
        }
        let ty = FieldType::try_from(code)
            .map_err(|code| ThriftError::InvalidFieldType { code, position })?;
        Ok(Some((ty, self.read_i16()?)))
    }

    fn read_bool(&mut self) -> Result<bool, ThriftError> {
        // Writers send 1 for true; like Apache Thrift's C++ and Python readers, any non-zero byte is true.
        Ok(self.input.byte()? != 0)
    }

    fn read_byte(&mut self) -> Result<i8, ThriftError> {
        Ok(i8::from_be_bytes(self.input.array()?))
    }

    fn read_i16(&mut self) -> Result<i16, ThriftError> {
        Ok(i16::from_be_bytes(self.input.array()?))
    }

    fn read_i32(&mut self) -> Result<i32, ThriftError> {
        Ok(i32::from_be_bytes(self.input.array()?))
    }

    fn read_i64(&mut self) -> Result<i64, ThriftError> {
        Ok(i64::from_be_bytes(self.input.array()?))
    }

    fn read_double(&mut self) -> Result<f64, ThriftError> {
        Ok(f64::from_be_bytes(self.input.array()?))
    }

    fn read_uuid(&mut self) -> Result<[u8; 16], ThriftError> {
        self.input.array()
    }

    fn read_binary(&mut self) -> Result<&'a [u8], ThriftError> {
        let (len, position) = self.length()?;
        self.input.slice(len, position)
    }

    fn read_list_begin(&mut self) -> Result<(FieldType, usize), ThriftError> {
        let element = self.field_type()?;
        Ok((element, self.count(1)?))
    }

    fn read_map_begin(&mut self) -> Result<(FieldType, FieldType, usize), ThriftError> {
        let key = self.field_type()?;
        let value = self.field_type()?;
        // A key and a value, at least a byte each.
        Ok((key, value, self.count(2)?))
    }

    fn position(&self) -> usize {
        self.input.position
    }
}

/// Writes the binary protocol, messages in the strict form (as Apache Thrift does by default).
#[derive(Debug, Default, Clone)]
pub struct BinaryWriter;

impl BinaryWriter {
    pub fn new() -> Self {
        Self
    }
}

/// A size as the binary protocol's i32; one it cannot carry becomes -1, which every reader refuses.
fn write_size(out: &mut Vec<u8>, len: usize) {
    out.extend_from_slice(&i32::try_from(len).unwrap_or(-1).to_be_bytes());
}

impl ProtocolWrite for BinaryWriter {
    fn write_message_begin(
        &mut self,
        out: &mut Vec<u8>,
        name: &str,
        kind: MessageType,
        seqid: i32,
    ) {
        out.extend_from_slice(&VERSION_1);
        out.extend_from_slice(&[0, kind as u8]);
        self.write_string(out, name);
        self.write_i32(out, seqid);
    }

    fn write_struct_begin(&mut self, _out: &mut Vec<u8>) {}

    fn write_struct_end(&mut self, _out: &mut Vec<u8>) {}

    fn write_field_begin(&mut self, out: &mut Vec<u8>, ty: FieldType, id: i16) {
        out.push(ty as u8);
        self.write_i16(out, id);
    }

    fn write_field_stop(&mut self, out: &mut Vec<u8>) {
        out.push(0);
    }

    fn write_bool(&mut self, out: &mut Vec<u8>, v: bool) {
        out.push(u8::from(v));
    }

    fn write_byte(&mut self, out: &mut Vec<u8>, v: i8) {
        out.extend_from_slice(&v.to_be_bytes());
    }

    fn write_i16(&mut self, out: &mut Vec<u8>, v: i16) {
        out.extend_from_slice(&v.to_be_bytes());
    }

    fn write_i32(&mut self, out: &mut Vec<u8>, v: i32) {
        out.extend_from_slice(&v.to_be_bytes());
    }

    fn write_i64(&mut self, out: &mut Vec<u8>, v: i64) {
        out.extend_from_slice(&v.to_be_bytes());
    }

    fn write_double(&mut self, out: &mut Vec<u8>, v: f64) {
        out.extend_from_slice(&v.to_be_bytes());
    }

    fn write_uuid(&mut self, out: &mut Vec<u8>, v: &[u8; 16]) {
        out.extend_from_slice(v);
    }

    fn write_binary(&mut self, out: &mut Vec<u8>, v: &[u8]) {
        write_size(out, v.len());
        out.extend_from_slice(v);
    }

    fn write_list_begin(&mut self, out: &mut Vec<u8>, elem: FieldType, len: usize) {
        out.push(elem as u8);
        write_size(out, len);
    }

    fn write_map_begin(&mut self, out: &mut Vec<u8>, key: FieldType, value: FieldType, len: usize) {
        out.extend_from_slice(&[key as u8, value as u8]);
        write_size(out, len);
    }
}
