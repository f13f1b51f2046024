//! The wire format of `tern graph`, the recommender's candidate sources: the messages of `idl/graph.thrift`
//! over Thrift's framed transport, binary or compact protocol, both sides (the server decodes calls and
//! writes replies; the recommender and `tern load` write calls and decode replies). Pure: bytes in, messages
//! out, no I/O. Written by hand against `tern-thrift`'s readers and writers rather than generated, since the
//! IDL is small and generated Rust would bring a runtime of its own; the Python client generated from the
//! same IDL by Apache Thrift's compiler checks that both agree.

mod call;
mod messages;

pub use call::{decode_call, read_reply, write_call, write_reply, CallProblem, IncomingCall};
pub use messages::{
    Candidate, CandidatesRequest, CandidatesResponse, GraphCall, GraphError, GraphInfo, GraphReply,
    Method,
};
pub use tern_thrift::{ProtocolKind, ReplyError};
