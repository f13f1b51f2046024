//! The wire formats of `tern recommend`: the messages of `idl/recommend.thrift` over Thrift's framed
//! transport, binary or compact protocol, both sides (the server decodes calls and writes replies; `tern
//! load` and the tests write calls and decode replies), and the HTTP/JSON front's paths and answers. Pure:
//! bytes in, messages out, no I/O; written by hand against `tern-thrift` like `tern-graph-proto`.

mod call;
mod http;
mod messages;

pub use call::{decode_call, read_reply, write_call, write_reply, IncomingCall};
pub use http::{
    error_json, json_answer, request_from_http, HttpRefusal, CHAINING_PATH, SUGGESTED_USERS_PATH,
};
pub use messages::{
    Method, RecommendError, RecommendRequest, Recommendation, Recommendations, SourceReport,
    SourceStatus,
};
pub use tern_thrift::{ProtocolKind, ReplyError};
