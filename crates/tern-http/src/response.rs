//! Responses: written by servers, read back by clients.

/// The reason phrase of the statuses tern's services send (empty for others).
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

/// Most header fields a response may have for [`decode_response`].
pub const MAX_RESPONSE_HEADERS: usize = 64;

/// A whole response at the front of a client's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHead {
    pub status: u16,
    /// Bytes of the response, head and body.
    pub consumed: usize,
}

/// Why a response cannot be read, and with it the rest of the connection's stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseError {
    /// Not HTTP/1.x as `httparse` reads it.
    Malformed(String),
    /// A `1xx` response; the client sends no `Expect`, so none may come.
    UnexpectedInterim(u16),
    /// A `Content-Length` that is not one decimal number, or two that differ.
    BadLength,
    /// A status that has a body, without a `Content-Length` (chunked or read-until-close).
    NoLength(u16),
    /// A body longer than the client accepts.
    TooLarge { length: usize, max: usize },
}

impl std::fmt::Display for ResponseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResponseError::Malformed(why) => write!(f, "bad HTTP response: {why}"),
            ResponseError::UnexpectedInterim(status) => {
                write!(f, "interim response {status}: none was asked for")
            }
            ResponseError::BadLength => f.write_str("bad Content-Length"),
            ResponseError::NoLength(status) => {
                write!(f, "{status} response without Content-Length")
            }
            ResponseError::TooLarge { length, max } => {
                write!(f, "{length}-byte body is over the limit of {max}")
            }
        }
    }
}

impl std::error::Error for ResponseError {}

/// Reads the response at the front of `input`: `Ok(None)` until it is whole (head and body), then its status
/// and length. `bodiless_request`: the request was `HEAD`, whose response announces a length but carries no
/// body. A `204` or `304` has no body either, whatever it announces.
pub fn decode_response(
    input: &[u8],
    bodiless_request: bool,
    max_body: usize,
) -> Result<Option<ResponseHead>, ResponseError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_RESPONSE_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let head_len = match response.parse(input) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(ResponseError::Malformed(e.to_string())),
    };
    let status = response.code.unwrap_or(0);
    if (100..200).contains(&status) {
        return Err(ResponseError::UnexpectedInterim(status));
    }
    let mut length: Option<usize> = None;
    for header in response.headers.iter() {
        if header.name.eq_ignore_ascii_case("content-length") {
            let value = std::str::from_utf8(header.value)
                .ok()
                .map(str::trim)
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<usize>().ok())
                .ok_or(ResponseError::BadLength)?;
            if length.is_some_and(|l| l != value) {
                return Err(ResponseError::BadLength);
            }
            length = Some(value);
        }
    }
    let body_len = if bodiless_request || matches!(status, 204 | 304) {
        0
    } else {
        length.ok_or(ResponseError::NoLength(status))?
    };
    if body_len > max_body {
        return Err(ResponseError::TooLarge {
            length: body_len,
            max: max_body,
        });
    }
    let consumed = head_len + body_len;
    Ok((input.len() >= consumed).then_some(ResponseHead { status, consumed }))
}
