//! Calls and replies as whole Thrift messages, framed.

use tern_thrift::{
    read_message, read_reply_message, read_struct, write_message, ApplicationErrorKind, FieldType,
    MessageType, ProtocolKind, ProtocolWrite, ReplyError, ThriftError,
};

use crate::messages::{Method, RecommendError, RecommendRequest, Recommendations};

/// A call as the server read it: its header, and its request or why it cannot be served (answered with a
/// `TApplicationException` of that kind and message).
#[derive(Debug)]
pub struct IncomingCall<'a> {
    pub protocol: ProtocolKind,
    pub name: &'a str,
    pub seqid: i32,
    pub request: Result<RecommendRequest, (ApplicationErrorKind, String)>,
}

/// Reads one call from a frame's payload. `Err` when not even the message header can be read.
pub fn decode_call(payload: &[u8]) -> Result<IncomingCall<'_>, ThriftError> {
    let (protocol, header, mut r) = read_message(payload)?;
    let request = if !matches!(header.kind, MessageType::Call | MessageType::Oneway) {
        Err((
            ApplicationErrorKind::InvalidMessageType,
            format!("{}: not a call message", header.name),
        ))
    } else {
        match Method::from_name(header.name) {
            None => Err((
                ApplicationErrorKind::UnknownMethod,
                format!("Invalid method name: '{}'", header.name),
            )),
            Some(method) => {
                let mut request = None;
                read_struct(&mut r, |r, ty, id| {
                    Ok(match (id, ty) {
                        (1, FieldType::Struct) => {
                            request = Some(RecommendRequest::read(r, method)?);
                            true
                        }
                        _ => false,
                    })
                })
                .and_then(|()| request.ok_or(ThriftError::MissingField("request")))
                .map_err(|e| {
                    (
                        ApplicationErrorKind::ProtocolError,
                        format!("{}: bad arguments: {e}", header.name),
                    )
                })
            }
        }
    };
    Ok(IncomingCall {
        protocol,
        name: header.name,
        seqid: header.seqid,
        request,
    })
}

/// Writes a framed call of the request's method.
pub fn write_call(
    out: &mut Vec<u8>,
    protocol: ProtocolKind,
    seqid: i32,
    request: &RecommendRequest,
) {
    let name = request.method().name();
    write_message(out, protocol, name, MessageType::Call, seqid, |w, out| {
        w.write_field_begin(out, FieldType::Struct, 1);
        request.write(w, out);
    });
}

/// Writes a framed reply: the recommendations in field 0, or a declared exception in its field.
pub fn write_reply(
    out: &mut Vec<u8>,
    protocol: ProtocolKind,
    name: &str,
    seqid: i32,
    reply: &Result<Recommendations, RecommendError>,
) {
    write_message(
        out,
        protocol,
        name,
        MessageType::Reply,
        seqid,
        |w, out| match reply {
            Ok(recs) => {
                w.write_field_begin(out, FieldType::Struct, 0);
                recs.write(w, out);
            }
            Err(error) => {
                w.write_field_begin(out, FieldType::Struct, error.field_id());
                error.write(w, out);
            }
        },
    );
}

/// Reads a reply: its sequence id and the recommendations or the declared exception.
pub fn read_reply(
    payload: &[u8],
) -> Result<(i32, Result<Recommendations, RecommendError>), ReplyError> {
    let (header, mut r) = read_reply_message(payload)?;
    if Method::from_name(header.name).is_none() {
        return Err(ReplyError::UnknownMethod(header.name.into()));
    }
    let mut reply = None;
    read_struct(&mut r, |r, ty, id| {
        Ok(match (id, ty) {
            (0, FieldType::Struct) => {
                reply = Some(Ok(Recommendations::read(r)?));
                true
            }
            (1 | 2, FieldType::Struct) => {
                reply = Some(Err(RecommendError::read(r, id)?));
                true
            }
            _ => false,
        })
    })?;
    Ok((header.seqid, reply.ok_or(ReplyError::MissingResult)?))
}

#[cfg(test)]
mod tests;
