//! Whole messages, for services and clients written by hand against an IDL: a framed message whose body is
//! one struct (a call's arguments, a reply's result), read in whichever protocol it came in; a struct read
//! field by field with unknown fields skipped; one-call field writers.

use crate::{
    read_application_exception, sniff, write_application_exception, write_frame, AnyReader,
    AnyWriter, ApplicationErrorKind, FieldType, MessageHeader, MessageType, ProtocolKind,
    ProtocolRead, ProtocolWrite, ThriftError,
};

/// Why a client could not take a reply's result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    #[error("unreadable reply: {0}")]
    Thrift(#[from] ThriftError),
    /// The server answered with a `TApplicationException`.
    #[error("the server refused the call ({kind}): {message}")]
    Application {
        kind: ApplicationErrorKind,
        message: String,
    },
    #[error("expected a reply, got a {0} message")]
    NotAReply(MessageType),
    #[error("a reply to a method this client does not know: \"{0}\"")]
    UnknownMethod(String),
    /// The result struct holds neither a value nor a declared exception.
    #[error("the reply has no result")]
    MissingResult,
}

/// Reads the header of the message in `payload` (a frame's), in the protocol its first bytes name, and
/// returns that protocol, the header, and the reader positioned at the message's body.
pub fn read_message(
    payload: &[u8],
) -> Result<(ProtocolKind, MessageHeader<'_>, AnyReader<'_>), ThriftError> {
    let Some(protocol) = sniff(payload) else {
        return Err(match payload {
            [first_byte, _, ..] => ThriftError::UnknownProtocol {
                first_byte: *first_byte,
            },
            _ => ThriftError::Truncated { position: 0 },
        });
    };
    let mut r = AnyReader::new(protocol, payload);
    let header = r.read_message_begin()?;
    Ok((protocol, header, r))
}

/// Reads the header of a reply in `payload`, as [`read_message`] does; a `TApplicationException` is read
/// into [`ReplyError::Application`], and a message of another type is [`ReplyError::NotAReply`].
pub fn read_reply_message(
    payload: &[u8],
) -> Result<(MessageHeader<'_>, AnyReader<'_>), ReplyError> {
    let (_, header, mut r) = read_message(payload)?;
    match header.kind {
        MessageType::Reply => Ok((header, r)),
        MessageType::Exception => {
            let (kind, message) = read_application_exception(&mut r)?;
            Err(ReplyError::Application { kind, message })
        }
        other => Err(ReplyError::NotAReply(other)),
    }
}

/// Reads a struct: `field` is called with each field's type and id and returns whether it read the value;
/// the fields it does not take are skipped.
pub fn read_struct<'a, R: ProtocolRead<'a> + ?Sized>(
    r: &mut R,
    mut field: impl FnMut(&mut R, FieldType, i16) -> Result<bool, ThriftError>,
) -> Result<(), ThriftError> {
    r.read_struct_begin()?;
    while let Some((ty, id)) = r.read_field_begin()? {
        if !field(r, ty, id)? {
            r.skip(ty)?;
        }
    }
    r.read_struct_end()
}

/// Reads a `list<i64>`.
pub fn read_i64_list<'a, R: ProtocolRead<'a> + ?Sized>(r: &mut R) -> Result<Vec<i64>, ThriftError> {
    read_list(r, FieldType::I64, "list<i64>", R::read_i64)
}

/// Reads a list whose elements must be of type `element` (`expected` names the list in the error), each
/// with `read`.
pub fn read_list<'a, R: ProtocolRead<'a> + ?Sized, T>(
    r: &mut R,
    element: FieldType,
    expected: &'static str,
    mut read: impl FnMut(&mut R) -> Result<T, ThriftError>,
) -> Result<Vec<T>, ThriftError> {
    let (got, len) = r.read_list_begin()?;
    if got != element {
        return Err(ThriftError::UnexpectedType(expected));
    }
    // The reader has checked `len` against the bytes left.
    let mut list = Vec::with_capacity(len);
    for _ in 0..len {
        list.push(read(r)?);
    }
    Ok(list)
}

/// Appends a framed message in `protocol` whose body is a struct of the fields `fields` writes (a call's
/// arguments, a reply's result); the struct's begin, stop and end are written around them.
pub fn write_message(
    out: &mut Vec<u8>,
    protocol: ProtocolKind,
    name: &str,
    kind: MessageType,
    seqid: i32,
    fields: impl FnOnce(&mut AnyWriter, &mut Vec<u8>),
) {
    write_frame(out, |out| {
        let mut w = AnyWriter::new(protocol);
        w.write_message_begin(out, name, kind, seqid);
        w.write_struct_begin(out);
        fields(&mut w, out);
        w.write_field_stop(out);
        w.write_struct_end(out);
    });
}

/// Appends a framed `TApplicationException` in `protocol` answering call `seqid` of `name`.
pub fn write_exception_message(
    out: &mut Vec<u8>,
    protocol: ProtocolKind,
    name: &str,
    seqid: i32,
    kind: ApplicationErrorKind,
    message: &str,
) {
    write_frame(out, |out| {
        write_application_exception(
            &mut AnyWriter::new(protocol),
            out,
            name,
            seqid,
            kind,
            message,
        );
    });
}

/// A field's header and value in one call, for every writer.
pub trait WriteField: ProtocolWrite {
    fn field_bool(&mut self, out: &mut Vec<u8>, id: i16, v: bool) {
        self.write_field_begin(out, FieldType::Bool, id);
        self.write_bool(out, v);
    }

    fn field_i32(&mut self, out: &mut Vec<u8>, id: i16, v: i32) {
        self.write_field_begin(out, FieldType::I32, id);
        self.write_i32(out, v);
    }

    fn field_i64(&mut self, out: &mut Vec<u8>, id: i16, v: i64) {
        self.write_field_begin(out, FieldType::I64, id);
        self.write_i64(out, v);
    }

    fn field_double(&mut self, out: &mut Vec<u8>, id: i16, v: f64) {
        self.write_field_begin(out, FieldType::Double, id);
        self.write_double(out, v);
    }

    fn field_string(&mut self, out: &mut Vec<u8>, id: i16, v: &str) {
        self.write_field_begin(out, FieldType::String, id);
        self.write_string(out, v);
    }

    fn field_i64_list(&mut self, out: &mut Vec<u8>, id: i16, v: &[i64]) {
        self.write_field_begin(out, FieldType::List, id);
        self.write_list_begin(out, FieldType::I64, v.len());
        for &item in v {
            self.write_i64(out, item);
        }
    }
}

impl<W: ProtocolWrite + ?Sized> WriteField for W {}
