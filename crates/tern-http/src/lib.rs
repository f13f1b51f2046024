//! HTTP/1.1 for tern's services and its load generator: pure parse and compose, bytes in, requests or
//! responses out, no I/O (used by the pacer's OpenRTB front and notice URLs and by `tern load`'s HTTP
//! client). Heads are parsed by `httparse`; this crate adds the message framing of RFC 9112 and its limits.
//!
//! - Bodies are framed by `Content-Length` only. A request with `Transfer-Encoding` (chunked or not) is
//!   answered `411 Length Required` and the connection closed: a service's clients (exchanges, `curl`,
//!   load generators) send small JSON bodies with a length, and refusing chunked framing keeps the parser
//!   free of a second, rarely used body path. Conflicting `Content-Length` values are a `400` and a close.
//! - Limits ([`HttpLimits`]): a request head over `max_head_bytes` or with more than `max_headers` header
//!   fields is answered `431` and the connection closed; a body over `max_body_bytes` is answered `413` and
//!   the connection closed (its bytes are not read). A head `httparse` refuses is a `400` and a close.
//! - Keep-alive and pipelining as in HTTP/1.1: requests on one connection are answered in order; an
//!   HTTP/1.1 request keeps the connection open unless it says `Connection: close`; an HTTP/1.0 request
//!   closes it unless it says `Connection: keep-alive` (and then the reply says so too).
//! - `Expect: 100-continue` (RFC 9110 §10.1.1; `curl` sends it with bodies over 1 KiB and then waits up to
//!   1 s): once the head of such an HTTP/1.1 request is in and none of its body, the decoder answers
//!   [`Decode::Interim`] with `100 Continue`, which the runtime writes once, in order, and the body follows.
//!   No `100` is sent when some of the body has already arrived, for a request without a body, or to
//!   HTTP/1.0 (which has no interim responses). A request refused on its head gets its final status
//!   instead and the connection closes before the body is read: over `max_body_bytes` a `413`, and an
//!   expectation other than `100-continue` a `417 Expectation Failed`.
//! - Clients ([`decode_response`]): a response must say how long its body is (`Content-Length`), or have
//!   none by its status or the request's method; on a keep-alive connection anything else leaves no way to
//!   find the next response, so it is an error, as is an interim response nobody asked for.

mod request;
mod response;
#[cfg(test)]
mod tests;

pub use request::*;
pub use response::*;
pub use tern_wire::Decode;
