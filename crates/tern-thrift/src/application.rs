//! `TApplicationException`: the error a server answers when it cannot run a call (unknown method, bad
//! arguments, a handler failure), as a message of type `Exception` whose body is the struct
//! `{1: string message, 2: i32 type}`.

use crate::{FieldType, MessageType, ProtocolRead, ProtocolWrite, ThriftError};

/// The `type` field of a `TApplicationException`, with Apache Thrift's codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum ApplicationErrorKind {
    Unknown = 0,
    UnknownMethod = 1,
    InvalidMessageType = 2,
    WrongMethodName = 3,
    BadSequenceId = 4,
    MissingResult = 5,
    InternalError = 6,
    ProtocolError = 7,
    InvalidTransform = 8,
    InvalidProtocol = 9,
    UnsupportedClientType = 10,
}

impl ApplicationErrorKind {
    /// The kind with code `code`; a code this crate does not know is `Unknown`, as in Apache Thrift.
    pub fn from_code(code: i32) -> Self {
        match code {
            1 => Self::UnknownMethod,
            2 => Self::InvalidMessageType,
            3 => Self::WrongMethodName,
            4 => Self::BadSequenceId,
            5 => Self::MissingResult,
            6 => Self::InternalError,
            7 => Self::ProtocolError,
            8 => Self::InvalidTransform,
            9 => Self::InvalidProtocol,
            10 => Self::UnsupportedClientType,
            _ => Self::Unknown,
        }
    }

    /// Its name in Apache Thrift (`TApplicationException`'s constants): `UNKNOWN_METHOD`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Unknown => "UNKNOWN",
            Self::UnknownMethod => "UNKNOWN_METHOD",
            Self::InvalidMessageType => "INVALID_MESSAGE_TYPE",
            Self::WrongMethodName => "WRONG_METHOD_NAME",
            Self::BadSequenceId => "BAD_SEQUENCE_ID",
            Self::MissingResult => "MISSING_RESULT",
            Self::InternalError => "INTERNAL_ERROR",
            Self::ProtocolError => "PROTOCOL_ERROR",
            Self::InvalidTransform => "INVALID_TRANSFORM",
            Self::InvalidProtocol => "INVALID_PROTOCOL",
            Self::UnsupportedClientType => "UNSUPPORTED_CLIENT_TYPE",
        }
    }
}

impl std::fmt::Display for ApplicationErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

const MESSAGE_FIELD: i16 = 1;
const TYPE_FIELD: i16 = 2;

/// Writes a whole `TApplicationException` message answering call `seqid` of `method`.
pub fn write_application_exception<W: ProtocolWrite + ?Sized>(
    w: &mut W,
    out: &mut Vec<u8>,
    method: &str,
    seqid: i32,
    kind: ApplicationErrorKind,
    message: &str,
) {
    w.write_message_begin(out, method, MessageType::Exception, seqid);
    w.write_struct_begin(out);
    w.write_field_begin(out, FieldType::String, MESSAGE_FIELD);
    w.write_string(out, message);
    w.write_field_begin(out, FieldType::I32, TYPE_FIELD);
    w.write_i32(out, kind as i32);
    w.write_field_stop(out);
    w.write_struct_end(out);
}

/// Reads the body of a `TApplicationException`, once [`ProtocolRead::read_message_begin`] has returned a
/// header of type [`MessageType::Exception`]: its kind and message. Missing fields read as `Unknown` and
/// empty, and fields of other ids or types are skipped, as Apache Thrift's readers do.
pub fn read_application_exception<'a, R: ProtocolRead<'a> + ?Sized>(
    r: &mut R,
) -> Result<(ApplicationErrorKind, String), ThriftError> {
    let mut kind = ApplicationErrorKind::Unknown;
    let mut message = String::new();
    r.read_struct_begin()?;
    while let Some((ty, id)) = r.read_field_begin()? {
        match (id, ty) {
            // The text is for people and logs: a stray invalid byte must not hide the error itself.
            (MESSAGE_FIELD, FieldType::String) => {
                message = String::from_utf8_lossy(r.read_binary()?).into_owned();
            }
            (TYPE_FIELD, FieldType::I32) => kind = ApplicationErrorKind::from_code(r.read_i32()?),
            _ => r.skip(ty)?,
        }
    }
    r.read_struct_end()?;
    Ok((kind, message))
}
