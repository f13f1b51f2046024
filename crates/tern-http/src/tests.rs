//! The request decoder and the response writer, alone and round trip.

use super::*;
use proptest::prelude::*;
use tern_wire::Decode;

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
    let (request, _) = frame(b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx");
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
fn query_params_are_percent_decoded() {
    let (request, _) =
        frame(b"GET /win?auction=a%2Fb+c&imp=1&price=${AUCTION_PRICE}&bad=%FF HTTP/1.1\r\n\r\n");
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

#[test]
fn a_client_reads_whole_responses_one_after_another() {
    let mut two = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello".to_vec();
    let first = two.len();
    two.extend_from_slice(b"HTTP/1.1 204 No Content\r\n\r\n");
    for cut in 0..first {
        assert_eq!(decode_response(&two[..cut], false, 1000), Ok(None), "{cut}");
    }
    assert_eq!(
        decode_response(&two, false, 1000),
        Ok(Some(ResponseHead {
            status: 200,
            consumed: first
        }))
    );
    assert_eq!(
        decode_response(&two[first..], false, 1000),
        Ok(Some(ResponseHead {
            status: 204,
            consumed: two.len() - first
        }))
    );
    // A HEAD's response announces a length and carries nothing.
    let head = b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n";
    assert_eq!(
        decode_response(head, true, 10),
        Ok(Some(ResponseHead {
            status: 200,
            consumed: head.len()
        }))
    );
}

#[test]
fn a_client_refuses_responses_that_lose_the_stream() {
    let read = |bytes: &[u8]| decode_response(bytes, false, 1000);
    assert_eq!(
        read(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
        Err(ResponseError::NoLength(200))
    );
    for bad in [
        &b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
    ] {
        assert_eq!(read(bad), Err(ResponseError::BadLength), "{bad:?}");
    }
    assert_eq!(
        read(b"HTTP/1.1 200 OK\r\nContent-Length: 1001\r\n\r\n"),
        Err(ResponseError::TooLarge {
            length: 1001,
            max: 1000
        })
    );
    assert!(matches!(
        read(b"SSH-2.0-OpenSSH\r\n"),
        Err(ResponseError::Malformed(_))
    ));
    assert_eq!(
        read(b"HTTP/1.1 100 Continue\r\n\r\n"),
        Err(ResponseError::UnexpectedInterim(100))
    );
}

proptest! {
    #[test]
    fn a_response_split_anywhere_is_incomplete_until_whole(
        status in 200u16..600,
        body in proptest::collection::vec(any::<u8>(), 0..300),
        cut in any::<prop::sample::Index>(),
    ) {
        let body = if status == 204 || status == 304 { Vec::new() } else { body };
        let mut response =
            format!("HTTP/1.1 {status} X\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
        response.extend_from_slice(&body);
        let cut = cut.index(response.len());
        prop_assert_eq!(decode_response(&response[..cut], false, 1000), Ok(None));
        prop_assert_eq!(
            decode_response(&response, false, 1000),
            Ok(Some(ResponseHead { status, consumed: response.len() }))
        );
    }

    #[test]
    fn any_bytes_read_as_a_response_never_panic_nor_overreach(
        bytes in proptest::collection::vec(any::<u8>(), 0..300),
        bodiless in any::<bool>(),
    ) {
        let mut headed = b"HTTP/1.1 200 OK\r\n".to_vec();
        headed.extend_from_slice(&bytes);
        for input in [&bytes[..], &headed[..]] {
            if let Ok(Some(head)) = decode_response(input, bodiless, 100) {
                prop_assert!(head.consumed <= input.len());
            }
        }
    }
}
