//! HTTP/1.1 on the pacer's port, for the OpenRTB front and the notice URLs: pure parse and compose, bytes
//! in, requests out, no I/O. The request head is parsed by `httparse`; this module adds the message framing
//! of RFC 9112 that the pacer needs and its limits.
//!
//! - Bodies are framed by `Content-Length` only. A request with `Transfer-Encoding` (chunked or not) is
//!   answered `411 Length Required` and the connection closed: the pacer's clients (exchanges, `curl`,
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

use tern_runtime::Decode;

/// Most header fields the parser has room for; [`HttpLimits::max_headers`] is capped at it.
pub const MAX_HEADERS: usize = 64;

/// Bounds on what an HTTP client may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Largest request head (request line and header fields, with the blank line), in bytes.
    pub max_head_bytes: usize,
    /// Most header fields in one request (at most [`MAX_HEADERS`]).
    pub max_headers: usize,
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// Most impressions in one OpenRTB BidRequest; more is a `400` (each one may reserve budget).
    pub max_imps: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_head_bytes: 8 * 1024,
            max_headers: 32,
            max_body_bytes: 64 * 1024,
            max_imps: 64,
        }
    }
}

/// One HTTP request, borrowing from the connection's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpRequest<'a> {
    pub method: &'a str,
    /// The request target as sent: the path and, after `?`, the query.
    pub target: &'a str,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    /// Whether the connection stays open after the reply.
    pub keep_alive: bool,
    pub host: Option<&'a str>,
    pub content_type: Option<&'a str>,
    pub body: &'a [u8],
}

impl<'a> HttpRequest<'a> {
    /// The target's path, without the query.
    pub fn path(&self) -> &'a str {
        self.target.split_once('?').map_or(self.target, |(p, _)| p)
    }

    /// The target's query (after `?`), if any.
    pub fn query(&self) -> Option<&'a str> {
        self.target.split_once('?').map(|(_, q)| q)
    }

    /// The first value of query parameter `name`, percent-decoded (`+` is a space, as in HTML forms).
    /// `None` if absent; `Some(Err(()))` if its decoding is not UTF-8.
    pub fn query_param(&self, name: &str) -> Option<Result<String, ()>> {
        let query = self.query()?;
        query.split('&').find_map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (key == name).then(|| {
                let value = value.replace('+', " ");
                percent_encoding::percent_decode_str(&value)
                    .decode_utf8()
                    .map(|v| v.into_owned())
                    .map_err(|_| ())
            })
        })
    }
}

macro_rules! close_with {
    ($status:literal) => {
        concat!(
            "HTTP/1.1 ",
            $status,
            "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .as_bytes()
    };
}

/// The replies sent before closing a connection whose request could not be framed.
pub const BAD_REQUEST: &[u8] = close_with!("400 Bad Request");
pub const LENGTH_REQUIRED: &[u8] = close_with!("411 Length Required");
pub const CONTENT_TOO_LARGE: &[u8] = close_with!("413 Content Too Large");
pub const HEADERS_TOO_LARGE: &[u8] = close_with!("431 Request Header Fields Too Large");
pub const EXPECTATION_FAILED: &[u8] = close_with!("417 Expectation Failed");

/// The interim response to `Expect: 100-continue`: send the body.
pub const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

fn close<R>(reply: &'static [u8]) -> Decode<R> {
    Decode::Close { reply: Some(reply) }
}

/// Whether `input` (the front of a connection's unread bytes) starts like an HTTP request: a method token
/// is upper-case letters, and empty lines may come before a request (RFC 9112 §2.2). The gateway
/// protocol's frames start with `b"TP"`, which no HTTP method does; a lone `T` waits for its second byte.
pub fn looks_like_http(input: &[u8]) -> bool {
    match input {
        [] | [b'T'] => false,
        [b'T', b'P', ..] => false,
        [first, ..] => first.is_ascii_uppercase() || matches!(first, b'\r' | b'\n'),
    }
}

/// Decodes the request at the front of `input`, in the tern runtime's contract: `Incomplete` until the head
/// and the whole body are in (`Interim` with [`CONTINUE`] instead while an `Expect: 100-continue` request has
/// sent its head and none of its body), a request and the bytes it took, or a close with the reply to send
/// first.
pub fn decode_request<'a>(input: &'a [u8], limits: &HttpLimits) -> Decode<HttpRequest<'a>> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers[..limits.max_headers.min(MAX_HEADERS)]);
    let head_len = match parsed.parse(input) {
        Ok(httparse::Status::Complete(len)) if len <= limits.max_head_bytes => len,
        Ok(httparse::Status::Complete(_)) | Err(httparse::Error::TooManyHeaders) => {
            return close(HEADERS_TOO_LARGE)
        }
        Ok(httparse::Status::Partial) if input.len() >= limits.max_head_bytes => {
            return close(HEADERS_TOO_LARGE)
        }
        Ok(httparse::Status::Partial) => return Decode::Incomplete { needed: None },
        Err(_) => return close(BAD_REQUEST),
    };
    let (Some(method), Some(target), Some(minor_version)) =
        (parsed.method, parsed.path, parsed.version)
    else {
        return close(BAD_REQUEST);
    };
    let mut content_length: Option<usize> = None;
    let mut host = None;
    let mut content_type = None;
    let mut keep_alive = minor_version >= 1;
    let mut expect_continue = false;
    let mut unmet_expectation = false;
    for header in parsed.headers.iter() {
        let name = header.name;
        let Ok(value) = std::str::from_utf8(header.value) else {
            if name.eq_ignore_ascii_case("content-length") {
                return close(BAD_REQUEST);
            }
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            let Some(length) = parse_content_length(value) else {
                return close(BAD_REQUEST);
            };
            if content_length.is_some_and(|l| l != length) {
                return close(BAD_REQUEST);
            }
            content_length = Some(length);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return close(LENGTH_REQUIRED);
        } else if name.eq_ignore_ascii_case("host") {
            host = Some(value);
        } else if name.eq_ignore_ascii_case("content-type") {
            content_type = Some(value);
        } else if name.eq_ignore_ascii_case("expect") {
            // A list of expectations; `100-continue` is the only one defined. HTTP/1.0 has none (RFC 9110
            // §10.1.1: a server ignores them in an HTTP/1.0 request).
            for token in value.split(',').map(str::trim).filter(|t| !t.is_empty()) {
                if token.eq_ignore_ascii_case("100-continue") {
                    expect_continue = minor_version >= 1;
                } else {
                    unmet_expectation |= minor_version >= 1;
                }
            }
        } else if name.eq_ignore_ascii_case("connection") {
            for token in value.split(',').map(str::trim) {
                if token.eq_ignore_ascii_case("close") {
                    keep_alive = false;
                } else if token.eq_ignore_ascii_case("keep-alive") && minor_version == 0 {
                    keep_alive = true;
                }
            }
        }
    }
    let body_len = content_length.unwrap_or(0);
    if body_len > limits.max_body_bytes {
        return close(CONTENT_TOO_LARGE);
    }
    if unmet_expectation {
        return close(EXPECTATION_FAILED);
    }
    let end = head_len + body_len;
    let Some(body) = input.get(head_len..end) else {
        if expect_continue && input.len() == head_len {
            // The client waits for this before it sends the body.
            return Decode::Interim {
                reply: CONTINUE,
                needed: Some(end),
            };
        }
        return Decode::Incomplete { needed: Some(end) };
    };
    Decode::Frame {
        request: HttpRequest {
            method,
            target,
            minor_version,
            keep_alive,
            host,
            content_type,
            body,
        },
        consumed: end,
    }
}

/// `Content-Length`: digits only (no sign, no spaces inside), and a value that fits.
fn parse_content_length(value: &str) -> Option<usize> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok()
}

/// The reason phrase of the statuses the pacer sends.
pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        411 => "Length Required",
        413 => "Content Too Large",
        417 => "Expectation Failed",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "",
    }
}

/// What a reply carries.
#[derive(Debug, Clone, Copy)]
pub struct Response<'a> {
    pub status: u16,
    /// `Content-Type` of the body; ignored without a body.
    pub content_type: &'a str,
    /// Further header fields (names and values must be valid header text: no CR or LF).
    pub headers: &'a [(&'a str, &'a str)],
    pub body: &'a [u8],
}

/// Writes an HTTP/1.1 response to `out`. `keep_alive` is the request's: a reply that ends the connection
/// says `Connection: close`; a reply to an HTTP/1.0 request that keeps it says `Connection: keep-alive`.
/// A `204` or `304` carries no body and no `Content-Length` (RFC 9110 §8.6).
pub fn write_response(out: &mut Vec<u8>, response: &Response<'_>, keep_alive: bool, minor: u8) {
    use std::io::Write;
    let status = response.status;
    // Writing to a Vec cannot fail.
    let _ = write!(out, "HTTP/1.1 {status} {}\r\n", reason(status));
    let bodiless = matches!(status, 204 | 304) || (100..200).contains(&status);
    if !bodiless {
        let _ = write!(out, "Content-Length: {}\r\n", response.body.len());
        if !response.body.is_empty() {
            let _ = write!(out, "Content-Type: {}\r\n", response.content_type);
        }
    }
    for (name, value) in response.headers {
        let _ = write!(out, "{name}: {value}\r\n");
    }
    if !keep_alive {
        out.extend_from_slice(b"Connection: close\r\n");
    } else if minor == 0 {
        out.extend_from_slice(b"Connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !bodiless {
        out.extend_from_slice(response.body);
    }
}

/// Percent-encodes `text` for a query parameter value (everything but unreserved characters).
pub fn encode_query_value(text: &str) -> String {
    /// RFC 3986 unreserved characters stay as they are.
    const ESCAPED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(text, ESCAPED).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frame(input: &[u8]) -> (HttpRequest<'_>, usize) {
        match decode_request(input, &HttpLimits::default()) {
            Decode::Frame { request, consumed } => (request, consumed),
            other => panic!("expected a request, got {other:?}"),
        }
    }

    fn closed_with(input: &[u8], limits: &HttpLimits) -> &'static [u8] {
        match decode_request(input, limits) {
            Decode::Close { reply: Some(reply) } => reply,
            other => panic!("expected a close, got {other:?}"),
        }
    }

    #[test]
    fn parses_a_post_with_a_body_and_leaves_the_next_request() {
        let input = b"POST /openrtb2/auction?x=1 HTTP/1.1\r\nHost: pacer:7400\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}GET /";
        let (request, consumed) = frame(input);
        assert_eq!(consumed, input.len() - 5);
        assert_eq!(request.method, "POST");
        assert_eq!(request.path(), "/openrtb2/auction");
        assert_eq!(request.query(), Some("x=1"));
        assert_eq!(request.host, Some("pacer:7400"));
        assert_eq!(request.content_type, Some("application/json"));
        assert_eq!(request.body, b"{}");
        assert!(request.keep_alive);
    }

    #[test]
    fn waits_for_the_head_and_then_for_the_whole_body() {
        let limits = HttpLimits::default();
        assert!(matches!(
            decode_request(b"GET / HTTP/1.1\r\nHost: a\r\n", &limits),
            Decode::Incomplete { needed: None }
        ));
        let head = b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\n";
        let mut input = head.to_vec();
        input.extend_from_slice(b"12345");
        match decode_request(&input, &limits) {
            Decode::Incomplete { needed } => assert_eq!(needed, Some(head.len() + 10)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn connection_semantics_follow_the_version() {
        let keep = |input: &[u8]| frame(input).0.keep_alive;
        assert!(keep(b"GET / HTTP/1.1\r\n\r\n"));
        assert!(!keep(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n"));
        assert!(!keep(b"GET / HTTP/1.1\r\nConnection: foo, Close\r\n\r\n"));
        assert!(!keep(b"GET / HTTP/1.0\r\n\r\n"));
        assert!(keep(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
    }

    #[test]
    fn refuses_what_it_cannot_frame_with_the_right_status() {
        let limits = HttpLimits {
            max_head_bytes: 64,
            max_headers: 2,
            max_body_bytes: 4,
            max_imps: 1,
        };
        let long = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(80));
        assert_eq!(closed_with(long.as_bytes(), &limits), HEADERS_TOO_LARGE);
        // Over the limit before the head ends: no need to wait for the rest.
        assert_eq!(
            closed_with(&long.as_bytes()[..70], &limits),
            HEADERS_TOO_LARGE
        );
        assert_eq!(
            closed_with(b"GET / HTTP/1.1\r\na: 1\r\nb: 2\r\nc: 3\r\n\r\n", &limits),
            HEADERS_TOO_LARGE
        );
        assert_eq!(
            closed_with(b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n", &limits),
            CONTENT_TOO_LARGE
        );
        assert_eq!(
            closed_with(
                b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
                &limits
            ),
            LENGTH_REQUIRED
        );
        for bad in [
            &b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"[..],
            b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
            b"GET / HTTP/1.1\r\nBad Header\r\n\r\n",
            b"GET / HTTP/2.0\r\n\r\n",
        ] {
            assert_eq!(closed_with(bad, &limits), BAD_REQUEST, "{bad:?}");
        }
        // The same length twice is one length.
        let (request, _) =
            frame(b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx");
        assert_eq!(request.body, b"x");
    }

    #[test]
    fn expect_100_continue_is_answered_while_the_body_is_missing() {
        let limits = HttpLimits {
            max_body_bytes: 100,
            ..HttpLimits::default()
        };
        let head =
            b"POST /openrtb2/auction HTTP/1.1\r\nExpect: 100-Continue\r\nContent-Length: 4\r\n\r\n";
        match decode_request(head, &limits) {
            Decode::Interim { reply, needed } => {
                assert_eq!(reply, CONTINUE);
                assert_eq!(needed, Some(head.len() + 4));
            }
            other => panic!("{other:?}"),
        }
        // Part of the body is in: the client is sending it already.
        let mut input = head.to_vec();
        input.extend_from_slice(b"{}");
        assert!(matches!(
            decode_request(&input, &limits),
            Decode::Incomplete { needed: Some(n) } if n == head.len() + 4
        ));
        // All of it: the request, and no interim response.
        input.extend_from_slice(b"  ");
        assert!(matches!(
            decode_request(&input, &limits),
            Decode::Frame { consumed, .. } if consumed == input.len()
        ));
        // Nothing to continue: no body, or HTTP/1.0 (which has no interim responses), or a partial head.
        let no_body = b"GET /win HTTP/1.1\r\nExpect: 100-continue\r\n\r\n";
        assert!(matches!(
            decode_request(no_body, &limits),
            Decode::Frame { .. }
        ));
        let old = b"POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n";
        assert!(matches!(
            decode_request(old, &limits),
            Decode::Incomplete { .. }
        ));
        assert!(matches!(
            decode_request(&head[..head.len() - 2], &limits),
            Decode::Incomplete { needed: None }
        ));
        // Refused on the head: the final status instead of a `100`, and a close.
        let too_large = b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 101\r\n\r\n";
        assert_eq!(closed_with(too_large, &limits), CONTENT_TOO_LARGE);
        for unmet in [
            &b"POST / HTTP/1.1\r\nExpect: 200-ok\r\nContent-Length: 4\r\n\r\n"[..],
            b"POST / HTTP/1.1\r\nExpect: 100-continue, x=1\r\nContent-Length: 4\r\n\r\n",
        ] {
            assert_eq!(closed_with(unmet, &limits), EXPECTATION_FAILED);
        }
        let ignored = b"POST / HTTP/1.0\r\nExpect: 200-ok\r\nContent-Length: 0\r\n\r\n";
        assert!(matches!(
            decode_request(ignored, &limits),
            Decode::Frame { .. }
        ));
    }

    #[test]
    fn sniffs_http_apart_from_gateway_frames() {
        assert!(looks_like_http(b"GET /"));
        assert!(looks_like_http(b"TRACE /"));
        assert!(looks_like_http(b"P"));
        assert!(looks_like_http(b"\r\nGET /"));
        assert!(!looks_like_http(b"T"));
        assert!(!looks_like_http(b"TP\x01"));
        assert!(!looks_like_http(b"\x00"));
        assert!(!looks_like_http(b""));
    }

    #[test]
    fn query_params_are_percent_decoded() {
        let (request, _) = frame(
            b"GET /win?auction=a%2Fb+c&imp=1&price=${AUCTION_PRICE}&bad=%FF HTTP/1.1\r\n\r\n",
        );
        assert_eq!(request.query_param("auction"), Some(Ok("a/b c".into())));
        assert_eq!(request.query_param("imp"), Some(Ok("1".into())));
        assert_eq!(
            request.query_param("price"),
            Some(Ok("${AUCTION_PRICE}".into()))
        );
        assert_eq!(request.query_param("bad"), Some(Err(())));
        assert_eq!(request.query_param("campaign"), None);
        assert_eq!(encode_query_value("a/b c~"), "a%2Fb%20c~");
    }

    fn parse_response(bytes: &[u8]) -> (u16, Vec<(String, String)>, &[u8]) {
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut response = httparse::Response::new(&mut headers);
        let httparse::Status::Complete(head) = response.parse(bytes).unwrap() else {
            panic!("partial response");
        };
        let headers = response
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_ascii_lowercase(),
                    String::from_utf8(h.value.to_vec()).unwrap(),
                )
            })
            .collect();
        (response.code.unwrap(), headers, &bytes[head..])
    }

    #[test]
    fn responses_carry_length_type_and_connection() {
        let mut out = Vec::new();
        let response = Response {
            status: 200,
            content_type: "application/json",
            headers: &[("X-Reason", "none")],
            body: b"{}",
        };
        write_response(&mut out, &response, false, 1);
        let (status, headers, body) = parse_response(&out);
        assert_eq!(status, 200);
        assert_eq!(body, b"{}");
        for expected in [
            ("content-length", "2"),
            ("content-type", "application/json"),
            ("x-reason", "none"),
            ("connection", "close"),
        ] {
            assert!(
                headers.contains(&(expected.0.into(), expected.1.into())),
                "{headers:?}"
            );
        }
        out.clear();
        let no_content = Response {
            status: 204,
            body: b"ignored",
            ..response
        };
        write_response(&mut out, &no_content, true, 0);
        let (status, headers, body) = parse_response(&out);
        assert_eq!((status, body), (204, &b""[..]));
        assert!(!headers.iter().any(|(n, _)| n == "content-length"));
        assert!(headers.contains(&("connection".into(), "keep-alive".into())));
    }

    fn request_bytes(
        method: &str,
        path: &str,
        headers: &[(String, String)],
        body: &[u8],
        minor: u8,
    ) -> Vec<u8> {
        let mut out = format!("{method} {path} HTTP/1.{minor}\r\n").into_bytes();
        for (name, value) in headers {
            out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
        }
        out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
        out.extend_from_slice(body);
        out
    }

    proptest! {
        #[test]
        fn never_panics_and_never_overreaches(input in proptest::collection::vec(any::<u8>(), 0..600)) {
            let limits = HttpLimits {
                max_head_bytes: 256,
                max_headers: 8,
                max_body_bytes: 64,
                max_imps: 1,
            };
            match decode_request(&input, &limits) {
                Decode::Frame { consumed, request } => {
                    prop_assert!(consumed <= input.len());
                    prop_assert!(request.body.len() <= limits.max_body_bytes);
                }
                Decode::Incomplete { needed } => {
                    prop_assert!(needed.is_none_or(|n| n > input.len()));
                    prop_assert!(input.len() < limits.max_head_bytes || needed.is_some());
                }
                Decode::Close { reply } => prop_assert!(reply.is_some()),
                Decode::Interim { reply, needed } => {
                    prop_assert_eq!(reply, CONTINUE);
                    prop_assert!(needed.is_some_and(|n| n > input.len()));
                }
            }
        }

        #[test]
        fn composed_requests_round_trip_at_any_split(
            method in "(GET|POST|PUT|DELETE)",
            path in "/[a-z0-9/_.~-]{0,30}(\\?[a-z0-9=&%]{0,20})?",
            headers in proptest::collection::vec(("X-[A-Za-z]{1,10}", "[ -~]{0,20}"), 0..5),
            body in proptest::collection::vec(any::<u8>(), 0..100),
            minor in 0u8..2,
            split in any::<prop::sample::Index>(),
        ) {
            let headers: Vec<(String, String)> =
                headers.into_iter().map(|(n, v)| (n, v.trim().to_string())).collect();
            let bytes = request_bytes(&method, &path, &headers, &body, minor);
            let limits = HttpLimits::default();
            let (request, consumed) = match decode_request(&bytes, &limits) {
                Decode::Frame { request, consumed } => (request, consumed),
                other => return Err(TestCaseError::fail(format!("{other:?}"))),
            };
            prop_assert_eq!(consumed, bytes.len());
            prop_assert_eq!(request.method, method.as_str());
            prop_assert_eq!(request.target, path.as_str());
            prop_assert_eq!(request.minor_version, minor);
            prop_assert_eq!(request.keep_alive, minor == 1);
            prop_assert_eq!(request.body, &body[..]);
            // Any strict prefix is incomplete, never an error or a request.
            let cut = split.index(bytes.len());
            let is_incomplete = matches!(
                decode_request(&bytes[..cut], &limits),
                Decode::Incomplete { .. }
            );
            prop_assert!(is_incomplete);
        }

        #[test]
        fn written_responses_parse_back(
            status in prop::sample::select(vec![200u16, 204, 400, 404, 405, 503]),
            body in proptest::collection::vec(any::<u8>(), 0..100),
            keep_alive in any::<bool>(),
        ) {
            let mut out = Vec::new();
            let response = Response { status, content_type: "text/plain", headers: &[], body: &body };
            write_response(&mut out, &response, keep_alive, 1);
            let (parsed, headers, rest) = parse_response(&out);
            prop_assert_eq!(parsed, status);
            if status == 204 {
                prop_assert!(rest.is_empty());
            } else {
                prop_assert_eq!(rest, &body[..]);
                let length = body.len().to_string();
                prop_assert!(headers.contains(&("content-length".into(), length)));
            }
            prop_assert_eq!(
                headers.contains(&("connection".into(), "close".into())),
                !keep_alive
            );
        }
    }
}
