//! HTTP/1.1 on keep-alive connections: the same request every time (built once), except that
//! each `${SEQ}` in the body is replaced by an id unique to the request ([`RunIds`]), e.g. for
//! OpenRTB auction ids. Responses are framed by `tern_http::decode_response` and counted by
//! status code. A response must say how long its body is (Content-Length), or have none by its
//! status: on a keep-alive connection anything else leaves no way to find the next response, so it
//! is a protocol error and closes the connection.

use std::io::Write as _;

use tern_http::{ResponseError, ResponseHead};

use super::ids::RunIds;
use super::reply::{Decoded, Fault};
use crate::config::Config;
use crate::stats::{Outcome, Tally};

/// Replaced in the body by each request's own id.
pub const SEQ_PLACEHOLDER: &str = "${SEQ}";

pub(crate) struct HttpCodec {
    /// The request line and headers, without the body's length.
    head: Vec<u8>,
    /// The body, split at each placeholder.
    body_parts: Vec<Vec<u8>>,
    /// The whole request when the body has no placeholder.
    fixed: Option<Vec<u8>>,
    /// Whether a Content-Length is sent (always with a body, or for methods that expect one).
    sends_length: bool,
    ids: RunIds,
    /// HEAD responses announce a length but carry no body.
    head_request: bool,
    max_body: usize,
}

impl HttpCodec {
    pub fn new(config: &Config, thread: usize) -> Self {
        let w = &config.http;
        let mut head = format!(
            "{} {} HTTP/1.1\r\nHost: {}\r\n",
            w.method, w.path, config.server
        );
        for header in &w.headers {
            head.push_str(header.trim());
            head.push_str("\r\n");
        }
        let bodiless = matches!(w.method.as_str(), "GET" | "HEAD" | "DELETE" | "OPTIONS");
        let mut codec = HttpCodec {
            head: head.into_bytes(),
            body_parts: split_at_placeholder(&w.body),
            fixed: None,
            sends_length: !w.body.is_empty() || !bodiless,
            ids: RunIds::new(config, thread),
            head_request: w.method == "HEAD",
            max_body: config.max_value,
        };
        if codec.body_parts.len() == 1 {
            let mut request = Vec::new();
            codec.write_request(&mut request, b"");
            codec.fixed = Some(request);
        }
        codec
    }

    fn write_request(&self, out: &mut Vec<u8>, id: &[u8]) {
        out.extend_from_slice(&self.head);
        if self.sends_length {
            let parts: usize = self.body_parts.iter().map(Vec::len).sum();
            let length = parts + (self.body_parts.len() - 1) * id.len();
            let _ = write!(out, "Content-Length: {length}\r\n");
        }
        out.extend_from_slice(b"\r\n");
        for (i, part) in self.body_parts.iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(id);
            }
            out.extend_from_slice(part);
        }
    }

    pub fn encode(&mut self, out: &mut Vec<u8>) {
        match &self.fixed {
            Some(request) => out.extend_from_slice(request),
            None => {
                let mut digits = [0u8; 20];
                let id = decimal(self.ids.next_id(), &mut digits);
                self.write_request(out, id);
            }
        }
    }

    /// Decodes the response at the front of `input` (framing by `tern_http`).
    pub fn decode(&self, input: &[u8]) -> Result<Decoded, Fault> {
        match tern_http::decode_response(input, self.head_request, self.max_body) {
            Ok(None) => Ok(Decoded::Incomplete),
            Ok(Some(ResponseHead { status, consumed })) => {
                let mut tally = Tally::default();
                tally.add(status_outcome(status));
                Ok(Decoded::Done { consumed, tally })
            }
            Err(ResponseError::NoLength(status)) => Err(Fault {
                outcome: Outcome::HttpNoLength,
                reason: format!("{status} response without Content-Length"),
            }),
            Err(e @ ResponseError::TooLarge { .. }) => {
                Err(Fault::protocol(format!("{e} (--max-value)")))
            }
            Err(e) => Err(Fault::protocol(e.to_string())),
        }
    }
}

/// The body's pieces between placeholders (one piece when there is none).
fn split_at_placeholder(body: &[u8]) -> Vec<Vec<u8>> {
    let marker = SEQ_PLACEHOLDER.as_bytes();
    let mut parts = Vec::new();
    let mut rest = body;
    while let Some(at) = rest.windows(marker.len()).position(|w| w == marker) {
        parts.push(rest[..at].to_vec());
        rest = &rest[at + marker.len()..];
    }
    parts.push(rest.to_vec());
    parts
}

/// `n` in decimal, in `buf`.
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[at..];
        }
    }
}

fn status_outcome(code: u16) -> Outcome {
    match code {
        200 => Outcome::Http200,
        204 => Outcome::Http204,
        201..=299 => Outcome::Http2xx,
        300..=399 => Outcome::Http3xx,
        400 => Outcome::Http400,
        404 => Outcome::Http404,
        429 => Outcome::Http429,
        401..=499 => Outcome::Http4xx,
        500 => Outcome::Http500,
        503 => Outcome::Http503,
        _ => Outcome::Http5xx,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::config::{HttpWorkload, Protocol};

    fn codec(method: &str, body: &[u8]) -> HttpCodec {
        HttpCodec::new(
            &Config {
                server: "127.0.0.1:8080".parse().unwrap(),
                protocol: Protocol::Http,
                max_value: 1000,
                http: HttpWorkload {
                    method: method.to_string(),
                    path: "/openrtb".to_string(),
                    headers: vec!["Content-Type: application/json".to_string()],
                    body: body.to_vec(),
                },
                ..Config::default()
            },
            0,
        )
    }

    fn done(d: Decoded) -> (usize, Tally) {
        match d {
            Decoded::Done { consumed, tally } => (consumed, tally),
            Decoded::Incomplete => panic!("incomplete"),
        }
    }

    #[test]
    fn builds_one_request_with_its_length() {
        let mut c = codec("POST", b"{}");
        let mut out = Vec::new();
        c.encode(&mut out);
        assert_eq!(
            out,
            b"POST /openrtb HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
        );
        let mut get = Vec::new();
        codec("GET", b"").encode(&mut get);
        assert!(!String::from_utf8(get).unwrap().contains("Content-Length"));
    }

    #[test]
    fn each_request_gets_its_own_id_in_the_body() {
        let mut c = codec("POST", br#"{"id":"a-${SEQ}","n":"${SEQ}"}"#);
        let (mut first, mut second) = (Vec::new(), Vec::new());
        c.encode(&mut first);
        c.encode(&mut second);
        let body_of = |request: &[u8]| {
            let text = String::from_utf8(request.to_vec()).unwrap();
            let (head, body) = text.split_once("\r\n\r\n").unwrap();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(length, body.len(), "{text}");
            body.to_string()
        };
        let (a, b) = (body_of(&first), body_of(&second));
        assert_ne!(a, b);
        let id = a
            .strip_prefix(r#"{"id":"a-"#)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        assert!(id.parse::<u64>().is_ok(), "{a}");
        assert_eq!(a, format!(r#"{{"id":"a-{id}","n":"{id}"}}"#));
        let mut digits = [0; 20];
        assert_eq!(decimal(0, &mut digits), b"0");
        assert_eq!(
            decimal(u64::MAX, &mut digits),
            u64::MAX.to_string().as_bytes()
        );
    }

    #[test]
    fn responses_are_whole_before_they_count() {
        let c = codec("POST", b"{}");
        let mut two = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello".to_vec();
        let first = two.len();
        two.extend_from_slice(b"HTTP/1.1 204 No Content\r\n\r\n");
        for cut in 0..first {
            assert_eq!(c.decode(&two[..cut]).unwrap(), Decoded::Incomplete, "{cut}");
        }
        let (consumed, tally) = done(c.decode(&two).unwrap());
        assert_eq!((consumed, tally.get(Outcome::Http200)), (first, 1));
        let (consumed, tally) = done(c.decode(&two[first..]).unwrap());
        assert_eq!(
            (consumed, tally.get(Outcome::Http204)),
            (two.len() - first, 1)
        );
        let (_, tally) = done(
            c.decode(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                .unwrap(),
        );
        assert_eq!(tally.get(Outcome::Http404), 1);
        assert!(Outcome::Http404.is_error() && !Outcome::Http204.is_error());
    }

    #[test]
    fn responses_that_lose_the_stream_are_faults() {
        let c = codec("GET", b"");
        let no_length = c
            .decode(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
            .unwrap_err();
        assert_eq!(no_length.outcome, Outcome::HttpNoLength);
        let bad = c
            .decode(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n")
            .unwrap_err();
        assert_eq!(bad.outcome, Outcome::ProtocolError);
        let huge = c
            .decode(b"HTTP/1.1 200 OK\r\nContent-Length: 1001\r\n\r\n")
            .unwrap_err();
        assert!(huge.reason.contains("limit"), "{huge}");
        assert!(c.decode(b"SSH-2.0-OpenSSH\r\n").is_err());
        assert!(c.decode(b"HTTP/1.1 100 Continue\r\n\r\n").is_err());
    }

    proptest! {
        /// Framing is `tern_http`'s (tested there); here, every status is counted under its own outcome.
        #[test]
        fn each_status_counts_once_under_its_outcome(status in 200u16..600) {
            let response = format!("HTTP/1.1 {status} X\r\nContent-Length: 0\r\n\r\n");
            let (consumed, tally) = done(codec("GET", b"").decode(response.as_bytes()).unwrap());
            prop_assert_eq!(consumed, response.len());
            prop_assert_eq!(tally.0.iter().sum::<u32>(), 1);
            prop_assert_eq!(tally.get(status_outcome(status)), 1);
        }
    }
}
