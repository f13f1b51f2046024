//! Calls and replies as whole Thrift messages: a method's arguments struct and its result struct, framed.

use tern_thrift::{
    read_i64_list, read_message, read_reply_message, read_struct, write_message,
    ApplicationErrorKind, FieldType, MessageType, ProtocolKind, ProtocolRead, ProtocolWrite,
    ReplyError, ThriftError, WriteField,
};

use crate::messages::{
    CandidatesRequest, CandidatesResponse, GraphCall, GraphError, GraphInfo, GraphReply, Method,
};

/// A call as the server read it: its header, and its arguments or why they could not be taken.
#[derive(Debug)]
pub struct IncomingCall<'a> {
    pub protocol: ProtocolKind,
    pub name: &'a str,
    pub seqid: i32,
    pub call: Result<GraphCall, CallProblem>,
}

/// Why a call whose header was read cannot be served; each is answered with a `TApplicationException`.
#[derive(Debug, Clone, PartialEq)]
pub enum CallProblem {
    UnknownMethod,
    /// Not a `CALL` (or `ONEWAY`) message.
    InvalidMessageType,
    /// The arguments struct could not be read.
    BadArguments(String),
}

impl CallProblem {
    pub fn kind(&self) -> ApplicationErrorKind {
        match self {
            CallProblem::UnknownMethod => ApplicationErrorKind::UnknownMethod,
            CallProblem::InvalidMessageType => ApplicationErrorKind::InvalidMessageType,
            CallProblem::BadArguments(_) => ApplicationErrorKind::ProtocolError,
        }
    }

    pub fn message(&self, name: &str) -> String {
        match self {
            CallProblem::UnknownMethod => format!("Invalid method name: '{name}'"),
            CallProblem::InvalidMessageType => format!("{name}: not a call message"),
            CallProblem::BadArguments(why) => format!("{name}: bad arguments: {why}"),
        }
    }
}

/// Reads one call from a frame's payload. `Err` when not even the message header can be read (the caller
/// answers a protocol error with sequence id 0).
pub fn decode_call(payload: &[u8]) -> Result<IncomingCall<'_>, ThriftError> {
    let (protocol, header, mut r) = read_message(payload)?;
    let call = if !matches!(header.kind, MessageType::Call | MessageType::Oneway) {
        Err(CallProblem::InvalidMessageType)
    } else {
        match Method::from_name(header.name) {
            None => Err(CallProblem::UnknownMethod),
            Some(method) => {
                read_arguments(&mut r, method).map_err(|e| CallProblem::BadArguments(e.to_string()))
            }
        }
    };
    Ok(IncomingCall {
        protocol,
        name: header.name,
        seqid: header.seqid,
        call,
    })
}

fn read_arguments<'a>(
    r: &mut impl ProtocolRead<'a>,
    method: Method,
) -> Result<GraphCall, ThriftError> {
    let (mut account, mut limit, mut request) = (None, None, None);
    read_struct(r, |r, ty, id| {
        Ok(match (method, id, ty) {
            (Method::OutNeighbours | Method::InNeighbours, 1, FieldType::I64) => {
                account = Some(r.read_i64()?);
                true
            }
            (Method::OutNeighbours | Method::InNeighbours, 2, FieldType::I32) => {
                limit = Some(r.read_i32()?);
                true
            }
            (
                Method::FriendsOfFriends
                | Method::PersonalizedPagerank
                | Method::CoFollow
                | Method::PopularInRegion,
                1,
                FieldType::Struct,
            ) => {
                request = Some(CandidatesRequest::read(r)?);
                true
            }
            _ => false,
        })
    })?;
    Ok(match method {
        Method::OutNeighbours | Method::InNeighbours => GraphCall::Neighbours {
            method,
            account: account.ok_or(ThriftError::MissingField("account"))?,
            // Thrift leaves an unset i32 argument at 0; 0 means "as many as the server gives".
            limit: limit.unwrap_or(0),
        },
        Method::Info => GraphCall::Info,
        _ => GraphCall::Candidates {
            method,
            request: request.ok_or(ThriftError::MissingField("request"))?,
        },
    })
}

/// Writes a framed call.
pub fn write_call(out: &mut Vec<u8>, protocol: ProtocolKind, seqid: i32, call: &GraphCall) {
    let name = call.method().name();
    write_message(
        out,
        protocol,
        name,
        MessageType::Call,
        seqid,
        |w, out| match call {
            GraphCall::Neighbours { account, limit, .. } => {
                w.field_i64(out, 1, *account);
                w.field_i32(out, 2, *limit);
            }
            GraphCall::Candidates { request, .. } => {
                w.write_field_begin(out, FieldType::Struct, 1);
                request.write(w, out);
            }
            GraphCall::Info => {}
        },
    );
}

/// Writes a framed reply to call `name`/`seqid`: the result struct, with the value in field 0 or the
/// declared exception in its field.
pub fn write_reply(
    out: &mut Vec<u8>,
    protocol: ProtocolKind,
    name: &str,
    seqid: i32,
    reply: &GraphReply,
) {
    write_message(
        out,
        protocol,
        name,
        MessageType::Reply,
        seqid,
        |w, out| match reply {
            GraphReply::Neighbours(list) => w.field_i64_list(out, 0, list),
            GraphReply::Candidates(response) => {
                w.write_field_begin(out, FieldType::Struct, 0);
                response.write(w, out);
            }
            GraphReply::Info(info) => {
                w.write_field_begin(out, FieldType::Struct, 0);
                info.write(w, out);
            }
            GraphReply::Error(error) => {
                w.write_field_begin(out, FieldType::Struct, error.field_id());
                error.write(w, out);
            }
        },
    );
}

/// Reads a reply from a frame's payload: its sequence id and result (a value or a declared exception).
pub fn read_reply(payload: &[u8]) -> Result<(i32, GraphReply), ReplyError> {
    let (header, mut r) = read_reply_message(payload)?;
    let method = Method::from_name(header.name)
        .ok_or_else(|| ReplyError::UnknownMethod(header.name.into()))?;
    let mut reply = None;
    read_struct(&mut r, |r, ty, id| {
        Ok(match (method, id, ty) {
            (Method::OutNeighbours | Method::InNeighbours, 0, FieldType::List) => {
                reply = Some(GraphReply::Neighbours(read_i64_list(r)?));
                true
            }
            (Method::Info, 0, FieldType::Struct) => {
                reply = Some(GraphReply::Info(GraphInfo::read(r)?));
                true
            }
            (_, 0, FieldType::Struct) => {
                reply = Some(GraphReply::Candidates(CandidatesResponse::read(r)?));
                true
            }
            (_, 1..=3, FieldType::Struct) => {
                reply = Some(GraphReply::Error(GraphError::read(r, id)?));
                true
            }
            _ => false,
        })
    })?;
    Ok((header.seqid, reply.ok_or(ReplyError::MissingResult)?))
}

#[cfg(test)]
mod tests;
