//! The one type every protocol crate and the runtime share: what a decoder found at the front of a
//! connection's input ([`Decode`]). Protocol crates (`tern-http`, the pacer's gateway
//! protocol) return it from pure functions, bytes in and frames out; the runtime (`tern-runtime`) acts on it.
//! It lives apart so that a protocol crate, and the load generator built on protocol crates, need nothing of
//! the runtime.

/// What decoding the front of a connection's input produced.
#[derive(Debug)]
pub enum Decode<R> {
    /// No complete frame yet (a normal result, not an error). `needed`, when known, is the total input length
    /// (from the start of the buffer given to `decode`) worth waiting for before decoding again.
    Incomplete { needed: Option<usize> },
    /// No complete frame yet, as `Incomplete`, and the peer waits for `reply` before it sends the rest: an
    /// interim answer such as HTTP/1.1's `100 Continue` to a request with `Expect: 100-continue`. The
    /// runtime writes `reply` once for the incomplete frame at the front of the input, however often the
    /// decoder returns it for that frame, after the replies of the requests before it (in request order,
    /// like any reply).
    Interim {
        reply: &'static [u8],
        needed: Option<usize>,
    },
    /// One frame. `consumed` may exceed the bytes given: the runtime then discards the rest as it arrives
    /// (e.g. memcached swallowing a value too large to store).
    Frame { request: R, consumed: usize },
    /// The connection must close, after `reply` is written.
    Close { reply: Option<&'static [u8]> },
}

impl<R> Decode<R> {
    /// The same result with the frame's request turned into another type (a service wrapping one of its
    /// protocols' requests in its own).
    pub fn map<S>(self, wrap: impl FnOnce(R) -> S) -> Decode<S> {
        match self {
            Decode::Frame { request, consumed } => Decode::Frame {
                request: wrap(request),
                consumed,
            },
            Decode::Incomplete { needed } => Decode::Incomplete { needed },
            Decode::Interim { reply, needed } => Decode::Interim { reply, needed },
            Decode::Close { reply } => Decode::Close { reply },
        }
    }
}
