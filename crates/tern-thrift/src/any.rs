//! Either protocol behind one type, for a service that answers each client in the protocol it spoke.

use crate::{
    BinaryReader, BinaryWriter, CompactReader, CompactWriter, FieldType, MessageHeader,
    MessageType, ProtocolKind, ProtocolRead, ProtocolWrite, ThriftError,
};

/// Runs `$body` with `$inner` bound to whichever protocol's reader or writer `$self` holds.
macro_rules! delegate {
    ($self:ident, $inner:ident => $body:expr) => {
        match $self {
            Self::Binary($inner) => $body,
            Self::Compact($inner) => $body,
        }
    };
}

/// A reader of either protocol.
#[derive(Debug, Clone)]
pub enum AnyReader<'a> {
    Binary(BinaryReader<'a>),
    Compact(CompactReader<'a>),
}

impl<'a> AnyReader<'a> {
    pub fn new(kind: ProtocolKind, input: &'a [u8]) -> Self {
        match kind {
            ProtocolKind::Binary => Self::Binary(BinaryReader::new(input)),
            ProtocolKind::Compact => Self::Compact(CompactReader::new(input)),
        }
    }

    pub fn kind(&self) -> ProtocolKind {
        match self {
            Self::Binary(_) => ProtocolKind::Binary,
            Self::Compact(_) => ProtocolKind::Compact,
        }
    }
}

impl<'a> ProtocolRead<'a> for AnyReader<'a> {
    fn read_message_begin(&mut self) -> Result<MessageHeader<'a>, ThriftError> {
        delegate!(self, r => r.read_message_begin())
    }

    fn read_struct_begin(&mut self) -> Result<(), ThriftError> {
        delegate!(self, r => r.read_struct_begin())
    }

    fn read_struct_end(&mut self) -> Result<(), ThriftError> {
        delegate!(self, r => r.read_struct_end())
    }

    fn read_field_begin(&mut self) -> Result<Option<(FieldType, i16)>, ThriftError> {
        delegate!(self, r => r.read_field_begin())
    }

    fn read_bool(&mut self) -> Result<bool, ThriftError> {
        delegate!(self, r => r.read_bool())
    }

    fn read_byte(&mut self) -> Result<i8, ThriftError> {
        delegate!(self, r => r.read_byte())
    }

    fn read_i16(&mut self) -> Result<i16, ThriftError> {
        delegate!(self, r => r.read_i16())
    }

    fn read_i32(&mut self) -> Result<i32, ThriftError> {
        delegate!(self, r => r.read_i32())
    }

    fn read_i64(&mut self) -> Result<i64, ThriftError> {
        delegate!(self, r => r.read_i64())
    }

    fn read_double(&mut self) -> Result<f64, ThriftError> {
        delegate!(self, r => r.read_double())
    }

    fn read_uuid(&mut self) -> Result<[u8; 16], ThriftError> {
        delegate!(self, r => r.read_uuid())
    }

    fn read_binary(&mut self) -> Result<&'a [u8], ThriftError> {
        delegate!(self, r => r.read_binary())
    }

    fn read_string(&mut self) -> Result<&'a str, ThriftError> {
        delegate!(self, r => r.read_string())
    }

    fn read_list_begin(&mut self) -> Result<(FieldType, usize), ThriftError> {
        delegate!(self, r => r.read_list_begin())
    }

    fn read_set_begin(&mut self) -> Result<(FieldType, usize), ThriftError> {
        delegate!(self, r => r.read_set_begin())
    }

    fn read_map_begin(&mut self) -> Result<(FieldType, FieldType, usize), ThriftError> {
        delegate!(self, r => r.read_map_begin())
    }

    fn skip(&mut self, ty: FieldType) -> Result<(), ThriftError> {
        delegate!(self, r => r.skip(ty))
    }

    fn position(&self) -> usize {
        delegate!(self, r => r.position())
    }
}

/// A writer of either protocol.
#[derive(Debug, Clone)]
pub enum AnyWriter {
    Binary(BinaryWriter),
    Compact(CompactWriter),
}

impl AnyWriter {
    pub fn new(kind: ProtocolKind) -> Self {
        match kind {
            ProtocolKind::Binary => Self::Binary(BinaryWriter::new()),
            ProtocolKind::Compact => Self::Compact(CompactWriter::new()),
        }
    }

    pub fn kind(&self) -> ProtocolKind {
        match self {
            Self::Binary(_) => ProtocolKind::Binary,
            Self::Compact(_) => ProtocolKind::Compact,
        }
    }
}

impl ProtocolWrite for AnyWriter {
    fn write_message_begin(
        &mut self,
        out: &mut Vec<u8>,
        name: &str,
        kind: MessageType,
        seqid: i32,
    ) {
        delegate!(self, w => w.write_message_begin(out, name, kind, seqid))
    }

    fn write_struct_begin(&mut self, out: &mut Vec<u8>) {
        delegate!(self, w => w.write_struct_begin(out))
    }

    fn write_struct_end(&mut self, out: &mut Vec<u8>) {
        delegate!(self, w => w.write_struct_end(out))
    }

    fn write_field_begin(&mut self, out: &mut Vec<u8>, ty: FieldType, id: i16) {
        delegate!(self, w => w.write_field_begin(out, ty, id))
    }

    fn write_field_stop(&mut self, out: &mut Vec<u8>) {
        delegate!(self, w => w.write_field_stop(out))
    }

    fn write_bool(&mut self, out: &mut Vec<u8>, v: bool) {
        delegate!(self, w => w.write_bool(out, v))
    }

    fn write_byte(&mut self, out: &mut Vec<u8>, v: i8) {
        delegate!(self, w => w.write_byte(out, v))
    }

    fn write_i16(&mut self, out: &mut Vec<u8>, v: i16) {
        delegate!(self, w => w.write_i16(out, v))
    }

    fn write_i32(&mut self, out: &mut Vec<u8>, v: i32) {
        delegate!(self, w => w.write_i32(out, v))
    }

    fn write_i64(&mut self, out: &mut Vec<u8>, v: i64) {
        delegate!(self, w => w.write_i64(out, v))
    }

    fn write_double(&mut self, out: &mut Vec<u8>, v: f64) {
        delegate!(self, w => w.write_double(out, v))
    }

    fn write_uuid(&mut self, out: &mut Vec<u8>, v: &[u8; 16]) {
        delegate!(self, w => w.write_uuid(out, v))
    }

    fn write_binary(&mut self, out: &mut Vec<u8>, v: &[u8]) {
        delegate!(self, w => w.write_binary(out, v))
    }

    fn write_string(&mut self, out: &mut Vec<u8>, v: &str) {
        delegate!(self, w => w.write_string(out, v))
    }

    fn write_list_begin(&mut self, out: &mut Vec<u8>, elem: FieldType, len: usize) {
        delegate!(self, w => w.write_list_begin(out, elem, len))
    }

    fn write_set_begin(&mut self, out: &mut Vec<u8>, elem: FieldType, len: usize) {
        delegate!(self, w => w.write_set_begin(out, elem, len))
    }

    fn write_map_begin(&mut self, out: &mut Vec<u8>, key: FieldType, value: FieldType, len: usize) {
        delegate!(self, w => w.write_map_begin(out, key, value, len))
    }
}
