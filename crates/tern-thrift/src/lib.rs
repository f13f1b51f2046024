//! Apache Thrift's wire formats for tern's Thrift services: the framed transport, the binary and compact
//! protocols (a reader over a byte slice and a writer into a `Vec<u8>` for each, behind the [`ProtocolRead`]
//! and [`ProtocolWrite`] traits, with [`AnyReader`] and [`AnyWriter`] to serve both from one decoder), and
//! `TApplicationException`, as specified in Apache Thrift's `doc/specs` and written by its libraries, plus
//! helpers for services written by hand against an IDL (whole framed messages, [`read_struct`],
//! [`WriteField`]). Pure code, bytes in and values out, no I/O: a reader borrows strings and binaries from
//! its input, and bad input is an error ([`ThriftError`]), never a panic, a hang or an allocation sized by
//! the input's claims.

mod any;
mod application;
mod binary;
mod compact;
mod error;
mod frame;
mod input;
mod message;
mod protocol;
mod serve;
#[cfg(test)]
mod tests;
mod types;

pub use any::{AnyReader, AnyWriter};
pub use application::{
    read_application_exception, write_application_exception, ApplicationErrorKind,
};
pub use binary::{BinaryReader, BinaryWriter};
pub use compact::{CompactReader, CompactWriter};
pub use error::ThriftError;
pub use frame::{decode_frame, write_frame, Framed};
pub use message::{
    read_i64_list, read_list, read_message, read_reply_message, read_struct,
    write_exception_message, write_message, ReplyError, WriteField,
};
pub use protocol::{ProtocolRead, ProtocolWrite};
pub use serve::{decode_framed_call, FramedCall, Refusal};
pub use types::{sniff, FieldType, MessageHeader, MessageType, ProtocolKind, MAX_DEPTH};
