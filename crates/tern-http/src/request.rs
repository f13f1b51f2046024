//! The server side: request heads and bodies in, requests out, with the limits and the refusals.

use tern_wire::Decode;

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
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_head_bytes: 8 * 1024,
            max_headers: 32,
            max_body_bytes: 64 * 1024,
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
