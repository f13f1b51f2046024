//! A tiny line protocol on the tern runtime: the example of a service, and the target of the runtime's own
//! tests and benchmarks. Requests are lines ending in `\n` (an optional `\r` before it is ignored):
//!
//! | request          | reply                      | where it runs                        |
//! |------------------|----------------------------|--------------------------------------|
//! | `PING`           | `PONG`                     | inline on the I/O loop               |
//! | `ECHO <text>`    | `<text>`                   | inline                               |
//! | `SPIN <micros>`  | `DONE`                     | inline, burning CPU for that long    |
//! | `WORK <micros>`  | `DONE`                     | offloaded to the CPU pool, burning   |
//! | `SLEEP <millis>` | `SLEPT`                    | deferred on a timer (in flight)      |
//! | `BIG <bytes>`    | that many `x`, then `\r\n` | inline; streamed past the output room |
//!
//! Any request may be prefixed with `WITHIN <millis> ` to give it a deadline that long after it was read (the
//! protocol's own deadline, which replaces the configured one): a request whose deadline has passed when its
//! turn comes is refused without running.
//!
//! Every reply is one line ending in `\r\n`, in request order (pipelining is fine; a slow request holds up
//! the replies behind it on its connection, not other connections).
//!
//! Errors leave the connection open: `-ERR unknown command` (commands are upper case),
//! `-ERR wrong number of arguments`, `-ERR bad number` (not decimal digits, or over the limit),
//! `-ERR bad deadline`, `-ERR WITHIN needs a request`. A request the runtime refuses is answered
//! `-ERR overloaded (<reason>)` without running (`deadline expired`, `in-flight limit`, `rate limit`,
//! `queue timeout`, `queue full`, `shutting down`); a connection over the server's limit gets
//! `-ERR too many connections` and is closed.
//!
//! Limits: a line is at most [`MAX_LINE`] (1024) bytes before its line end, and a longer one closes the
//! connection after `-ERR line too long`; `SPIN` and `WORK` at most 10,000,000 µs, `SLEEP` and `WITHIN` at
//! most 10,000 ms ([`MAX_WAIT_MICROS`]); `BIG` at most [`MAX_BIG`] (64 MiB).
//!
//! Over UDP (`tern ping --udp ADDR`), a `PING` datagram (with or without its `\r\n`) gets `PONG\r\n`,
//! and any other `-ERR unknown command\r\n`. `crates/tern/tests/ping_protocol.rs` checks all of this
//! against the `tern ping` binary.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_metrics::{HistogramConfig, HistogramFamily};
use tern_runtime::{
    Cx, Datagrams, Decode, Deferred, LoopInfo, Outcome, Output, Rejection, ReplyStream, Service,
    Step,
};

/// The longest request line accepted.
pub const MAX_LINE: usize = 1024;
/// The largest `BIG` reply.
pub const MAX_BIG: usize = 64 << 20;
/// Bytes of a `BIG` reply written per step.
const BIG_CHUNK: usize = 64 << 10;

/// Writes the next chunk of a `BIG` reply (`left` bytes of `x` to go, then `\r\n`).
fn big_chunk(left: &mut usize, out: &mut Output) -> Step {
    let chunk = (*left).min(BIG_CHUNK);
    let len = out.len();
    out.resize(len + chunk, b'x');
    *left -= chunk;
    if *left > 0 {
        return Step::More;
    }
    out.extend_from_slice(b"\r\n");
    Step::Done
}
/// The longest `SPIN` or `SLEEP`.
pub const MAX_WAIT_MICROS: u64 = 10_000_000;

/// One ping request, borrowing from the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<'a> {
    Ping,
    Echo(&'a [u8]),
    Spin(Duration),
    Work(Duration),
    Sleep(Duration),
    Big(usize),
    Invalid(&'static str),
}

/// One request line: the request, and the deadline its `WITHIN` prefix gives, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line<'a> {
    pub request: Request<'a>,
    pub within: Option<Duration>,
}

/// Decodes one request line: pure, so it can be tested and fuzzed alone.
pub fn decode(input: &[u8]) -> Decode<Line<'_>> {
    let Some(nl) = memchr::memchr(b'\n', &input[..input.len().min(MAX_LINE + 2)]) else {
        if input.len() > MAX_LINE + 1 {
            return Decode::Close {
                reply: Some(b"-ERR line too long\r\n"),
            };
        }
        return Decode::Incomplete { needed: None };
    };
    let line = &input[..nl];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = match line.strip_prefix(b"WITHIN ") {
        None => Line {
            request: parse_request(line),
            within: None,
        },
        Some(rest) => match memchr::memchr(b' ', rest) {
            Some(sp) => match number(&rest[..sp], MAX_WAIT_MICROS / 1000) {
                Some(ms) => Line {
                    request: parse_request(&rest[sp + 1..]),
                    within: Some(Duration::from_millis(ms)),
                },
                None => Line {
                    request: Request::Invalid("bad deadline"),
                    within: None,
                },
            },
            None => Line {
                request: Request::Invalid("WITHIN needs a request"),
                within: None,
            },
        },
    };
    Decode::Frame {
        request: line,
        consumed: nl + 1,
    }
}

fn parse_request(line: &[u8]) -> Request<'_> {
    let (cmd, arg) = match memchr::memchr(b' ', line) {
        Some(sp) => (&line[..sp], Some(&line[sp + 1..])),
        None => (line, None),
    };
    match (cmd, arg) {
        (b"PING", None) => Request::Ping,
        (b"ECHO", Some(text)) => Request::Echo(text),
        (b"SPIN", Some(n)) => number(n, MAX_WAIT_MICROS)
            .map_or(Request::Invalid("bad number"), |n| {
                Request::Spin(Duration::from_micros(n))
            }),
        (b"WORK", Some(n)) => number(n, MAX_WAIT_MICROS)
            .map_or(Request::Invalid("bad number"), |n| {
                Request::Work(Duration::from_micros(n))
            }),
        (b"SLEEP", Some(n)) => number(n, MAX_WAIT_MICROS / 1000)
            .map_or(Request::Invalid("bad number"), |n| {
                Request::Sleep(Duration::from_millis(n))
            }),
        (b"BIG", Some(n)) => number(n, MAX_BIG as u64)
            .map_or(Request::Invalid("bad number"), |n| Request::Big(n as usize)),
        (b"PING" | b"ECHO" | b"SPIN" | b"WORK" | b"SLEEP" | b"BIG", _) => {
            Request::Invalid("wrong number of arguments")
        }
        _ => Request::Invalid("unknown command"),
    }
}

fn number(digits: &[u8], max: u64) -> Option<u64> {
    if digits.is_empty() || digits.len() > 20 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits)
        .ok()?
        .parse()
        .ok()
        .filter(|&n| n <= max)
}

/// Burns CPU (not sleeps) for `d`: the stand-in for real handler work.
pub fn spin(d: Duration) {
    let start = Instant::now();
    while start.elapsed() < d {
        std::hint::spin_loop();
    }
}

fn overloaded(why: Rejection) -> Vec<u8> {
    format!("-ERR overloaded ({})\r\n", why.as_str()).into_bytes()
}

/// The ping service.
#[derive(Debug, Default)]
pub struct Ping;

/// The time each request took on the server, by command (`Service::request_latency`).
static REQUEST_NS: HistogramFamily = HistogramFamily::new(
    "tern_ping_request_duration_ns",
    "Time from the read that completed a request to its reply ready to write, by command",
    "command",
    &["ping", "echo", "spin", "work", "sleep", "big", "invalid"],
    HistogramConfig::REQUEST_NS,
);

impl Service for Ping {
    type Request<'a> = Line<'a>;
    type Loop = ();

    fn name(&self) -> &'static str {
        "ping"
    }

    fn request_latency(&self) -> Option<&'static HistogramFamily> {
        Some(&REQUEST_NS)
    }

    fn request_kind(&self, line: &Line<'_>) -> usize {
        match line.request {
            Request::Ping => 0,
            Request::Echo(_) => 1,
            Request::Spin(_) => 2,
            Request::Work(_) => 3,
            Request::Sleep(_) => 4,
            Request::Big(_) => 5,
            Request::Invalid(_) => 6,
        }
    }

    fn init_loop(self: &Arc<Self>, _info: &LoopInfo) {}

    fn decode<'a>(&self, input: &'a [u8]) -> Decode<Line<'a>> {
        decode(input)
    }

    fn deadline(&self, line: &Line<'_>, received: Instant) -> Option<Instant> {
        line.within.map(|d| received + d)
    }

    fn handle(&self, cx: &mut Cx<'_, Self>, line: Line<'_>, out: &mut Output) -> Outcome {
        match line.request {
            Request::Ping => out.extend_from_slice(b"PONG\r\n"),
            Request::Echo(text) => {
                out.extend_from_slice(text);
                out.extend_from_slice(b"\r\n");
            }
            Request::Spin(d) => {
                spin(d);
                out.extend_from_slice(b"DONE\r\n");
            }
            Request::Work(d) => {
                let work = cx.offload(move || spin(d));
                return Outcome::Defer(Deferred::new(async move {
                    match work.await {
                        Ok(()) => b"DONE\r\n".to_vec(),
                        Err(why) => overloaded(why),
                    }
                }));
            }
            Request::Sleep(d) => {
                return Outcome::Defer(Deferred::new(async move {
                    tokio::time::sleep(d).await;
                    b"SLEPT\r\n".to_vec()
                }))
            }
            Request::Big(n) => {
                let mut left = n;
                if n > cx.output_room {
                    // Produced a chunk at a time as the peer reads: a client that asks for 64 MiB and never
                    // reads costs the server one chunk, not the whole reply.
                    return Outcome::Stream(ReplyStream::new(move |out| big_chunk(&mut left, out)));
                }
                while big_chunk(&mut left, out) == Step::More {}
            }
            Request::Invalid(why) => {
                out.extend_from_slice(b"-ERR ");
                out.extend_from_slice(why.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
        }
        Outcome::Reply
    }

    fn reject(&self, _line: &Line<'_>, why: Rejection, out: &mut Vec<u8>) {
        out.extend_from_slice(&overloaded(why));
    }

    fn refuse_connection(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"-ERR too many connections\r\n");
    }

    fn datagram(
        &self,
        _state: &Rc<()>,
        _socket: u64,
        datagram: &[u8],
        _peer: SocketAddr,
        replies: &mut Datagrams,
    ) {
        let line = datagram.strip_suffix(b"\r\n").unwrap_or(datagram);
        if line == b"PING" {
            replies.push(b"PONG\r\n");
        } else {
            replies.push(b"-ERR unknown command\r\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frame(input: &[u8]) -> (Request<'_>, usize) {
        match decode(input) {
            Decode::Frame { request, consumed } => {
                assert_eq!(request.within, None);
                (request.request, consumed)
            }
            other => panic!("expected a frame, got {other:?}"),
        }
    }

    #[test]
    fn decodes_each_command() {
        assert_eq!(frame(b"PING\r\n"), (Request::Ping, 6));
        assert_eq!(frame(b"PING\nPING\n"), (Request::Ping, 5));
        assert_eq!(frame(b"ECHO a b\r\n"), (Request::Echo(b"a b"), 10));
        assert_eq!(
            frame(b"SPIN 10\r\n").0,
            Request::Spin(Duration::from_micros(10))
        );
        assert_eq!(
            frame(b"SLEEP 5\r\n").0,
            Request::Sleep(Duration::from_millis(5))
        );
        assert_eq!(frame(b"BIG 3\r\n").0, Request::Big(3));
        assert_eq!(frame(b"BIG x\r\n").0, Request::Invalid("bad number"));
        assert_eq!(
            frame(b"SLEEP 99999999\r\n").0,
            Request::Invalid("bad number")
        );
        assert_eq!(
            frame(b"PING x\r\n").0,
            Request::Invalid("wrong number of arguments")
        );
        assert_eq!(frame(b"NOPE\r\n").0, Request::Invalid("unknown command"));
        assert_eq!(
            frame(b"WITHIN x PING\r\n").0,
            Request::Invalid("bad deadline")
        );
        assert_eq!(
            frame(b"WITHIN 5\r\n").0,
            Request::Invalid("WITHIN needs a request")
        );
        match decode(b"WITHIN 7 SPIN 3\r\n") {
            Decode::Frame { request, .. } => assert_eq!(
                request,
                Line {
                    request: Request::Spin(Duration::from_micros(3)),
                    within: Some(Duration::from_millis(7)),
                }
            ),
            other => panic!("{other:?}"),
        }
        assert!(matches!(decode(b"PIN"), Decode::Incomplete { .. }));
        assert!(matches!(
            decode(&[b'a'; MAX_LINE + 2]),
            Decode::Close { .. }
        ));
        assert!(matches!(
            decode(&[b'a'; MAX_LINE]),
            Decode::Incomplete { .. }
        ));
    }

    proptest! {
        #[test]
        fn decode_never_panics_and_consumes_within_input(input in proptest::collection::vec(any::<u8>(), 0..2100)) {
            if let Decode::Frame { consumed, .. } = decode(&input) {
                prop_assert!(consumed >= 1 && consumed <= input.len());
            }
        }

        #[test]
        fn split_input_decodes_the_same(text in "[A-Z ]{0,40}", split in 0usize..45) {
            let line = format!("ECHO {text}\r\n");
            let bytes = line.as_bytes();
            let split = split.min(bytes.len());
            let whole = frame(bytes);
            prop_assert_eq!(whole.1, bytes.len());
            if split < bytes.len() {
                let is_incomplete = matches!(decode(&bytes[..split]), Decode::Incomplete { .. });
                prop_assert!(is_incomplete);
            }
        }
    }
}

/// The client side of the ping protocol, for outbound calls ([`tern_runtime::Backend`]).
pub mod client {
    use tern_runtime::{ClientCodec, Decoded};

    /// A request a client sends.
    #[derive(Debug, Clone)]
    pub enum Call {
        Ping,
        Echo(String),
        Sleep(u64),
        Spin(u64),
    }

    /// Replies are lines, returned without their line ending.
    #[derive(Debug, Default)]
    pub struct PingCodec;

    impl ClientCodec for PingCodec {
        type Request = Call;
        type Response = Vec<u8>;

        fn encode(&self, call: &Call, _id: i32, out: &mut Vec<u8>) {
            match call {
                Call::Ping => out.extend_from_slice(b"PING\r\n"),
                Call::Echo(text) => out.extend_from_slice(format!("ECHO {text}\r\n").as_bytes()),
                Call::Sleep(ms) => out.extend_from_slice(format!("SLEEP {ms}\r\n").as_bytes()),
                Call::Spin(us) => out.extend_from_slice(format!("SPIN {us}\r\n").as_bytes()),
            }
        }

        fn decode(&self, input: &[u8]) -> Result<Option<Decoded<Vec<u8>>>, String> {
            match memchr::memchr(b'\n', input) {
                Some(nl) => {
                    let line = &input[..nl];
                    Ok(Some(Decoded::in_order(
                        line.strip_suffix(b"\r").unwrap_or(line).to_vec(),
                        nl + 1,
                    )))
                }
                None if input.len() > 1 << 20 => Err("reply line over 1 MiB".into()),
                None => Ok(None),
            }
        }
    }
}
