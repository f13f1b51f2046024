use crate::{ProtocolKind, MAX_DEPTH};

/// Why a reader refused its input. Positions are byte offsets into the reader's input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ThriftError {
    #[error("the input ends inside the value at byte {position}")]
    Truncated { position: usize },
    #[error("not a message in a Thrift protocol this crate reads: it starts with byte {first_byte:#04x}")]
    UnknownProtocol { first_byte: u8 },
    #[error("unsupported {protocol} protocol version {version} (only version 1 exists)")]
    BadVersion {
        protocol: ProtocolKind,
        version: u16,
    },
    #[error("invalid message type {code} at byte {position}")]
    InvalidMessageType { code: u8, position: usize },
    #[error("invalid field type code {code} at byte {position}")]
    InvalidFieldType { code: u8, position: usize },
    #[error("negative size {size} at byte {position}")]
    NegativeSize { size: i32, position: usize },
    #[error("size {size} at byte {position} is more than the {remaining} bytes left can hold")]
    SizeOverRemaining {
        size: u64,
        remaining: usize,
        position: usize,
    },
    #[error("the varint at byte {position} overflows its type")]
    VarintOverflow { position: usize },
    #[error("the string at byte {position} is not valid UTF-8")]
    InvalidUtf8 { position: usize },
    #[error("values nest more than {MAX_DEPTH} levels deep at byte {position}")]
    TooDeep { position: usize },
    /// A schema's required field is absent (for hand-written struct readers).
    #[error("required field {0} is missing")]
    MissingField(&'static str),
    /// A field or element has a type, or an enum a value, other than the schema's (for hand-written
    /// struct readers).
    #[error("unexpected type or value: expected {0}")]
    UnexpectedType(&'static str),
}

impl ThriftError {
    /// Whether more bytes after the input could have completed it: the input ended inside a value, or a
    /// size claims more bytes than are left. For a whole frame's payload that is malformed input; on an
    /// unframed (buffered transport) stream it means "wait for more".
    pub fn is_incomplete(&self) -> bool {
        matches!(
            self,
            Self::Truncated { .. } | Self::SizeOverRemaining { .. }
        )
    }
}
