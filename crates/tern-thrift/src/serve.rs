//! A Thrift service's side of a connection, in the tern runtime's terms: a frame read as a call, or
//! refused with the `TApplicationException` Thrift servers answer (a frame whose message cannot be read, a
//! frame over the size limit).

use tern_wire::Decode;

use crate::{
    decode_frame, write_exception_message, ApplicationErrorKind, Framed, ProtocolKind, ThriftError,
};

/// A frame at the front of a service's input.
#[derive(Debug)]
pub enum FramedCall<C> {
    /// The service's reading of a call (which may itself be an unknown method or bad arguments).
    Call(C),
    /// A frame that could not be taken as a call.
    Refused(Refusal),
}

/// Why a frame is no call, answered with a protocol error (sequence id 0: the message's own is unknown).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub message: String,
    /// The frame was over the size limit: its bytes are not read, so the connection closes after the answer.
    pub close: bool,
}

impl Refusal {
    /// Writes the framed `TApplicationException` (binary: the protocol of a message that could not be read
    /// is unknown, and every Thrift client reads binary).
    pub fn write(&self, out: &mut Vec<u8>) {
        write_exception_message(
            out,
            ProtocolKind::Binary,
            "",
            0,
            ApplicationErrorKind::ProtocolError,
            &self.message,
        );
    }
}

/// Reads the frame at the front of `input` with `read` (a service's call decoder, given the payload).
pub fn decode_framed_call<'a, C>(
    input: &'a [u8],
    max_frame_bytes: usize,
    read: impl FnOnce(&'a [u8]) -> Result<C, ThriftError>,
) -> Decode<FramedCall<C>> {
    match decode_frame(input, max_frame_bytes) {
        Framed::Incomplete { needed } => Decode::Incomplete {
            needed: Some(needed),
        },
        Framed::TooLarge { length } => Decode::Frame {
            request: FramedCall::Refused(Refusal {
                message: format!("frame of {length} bytes is over the limit of {max_frame_bytes}"),
                close: true,
            }),
            consumed: input.len(),
        },
        Framed::Frame { payload, consumed } => Decode::Frame {
            request: match read(payload) {
                Ok(call) => FramedCall::Call(call),
                Err(e) => FramedCall::Refused(Refusal {
                    message: e.to_string(),
                    close: false,
                }),
            },
            consumed,
        },
    }
}
