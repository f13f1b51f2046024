//! Interim replies ([`Decode::Interim`], e.g. HTTP's `100 Continue`) over real sockets: written once per
//! incomplete request however often the decoder asks, and in request order behind a deferred reply.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use tern_runtime::{
    BufferMode, Cx, Decode, Deferred, LoopInfo, Outcome, Output, Rejection, RunningServer,
    RuntimeConfig, Server, Service,
};

/// A line protocol: `PUT n` and `n` bytes of body (answered `GOT <body>`; while the body is incomplete the
/// decoder asks for the interim `GO` every time it is called, with no `needed` hint, so the runtime's
/// once-per-request rule is what keeps it to one), `SLOW` (answered `SLOWED` later, from the CPU pool), and
/// `END` (answered `BYE`, then the connection closes).
struct Interim;

enum Request<'a> {
    Put(&'a [u8]),
    Slow,
    End,
}

impl Service for Interim {
    type Request<'a> = Request<'a>;
    type Loop = ();

    fn init_loop(self: &Arc<Self>, _info: &LoopInfo) {}

    fn decode<'a>(&self, input: &'a [u8]) -> Decode<Request<'a>> {
        let Some(eol) = input.windows(2).position(|w| w == b"\r\n") else {
            return Decode::Incomplete { needed: None };
        };
        let line = &input[..eol];
        let head = eol + 2;
        let frame = |request, consumed| Decode::Frame { request, consumed };
        match line {
            b"SLOW" => frame(Request::Slow, head),
            b"END" => frame(Request::End, head),
            _ => {
                let Some(len) = line
                    .strip_prefix(b"PUT ")
                    .and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok())
                else {
                    return Decode::Close {
                        reply: Some(b"ERROR\r\n"),
                    };
                };
                match input.get(head..head + len) {
                    Some(body) => frame(Request::Put(body), head + len),
                    None => Decode::Interim {
                        reply: b"GO\r\n",
                        needed: None,
                    },
                }
            }
        }
    }

    fn handle(&self, cx: &mut Cx<'_, Self>, request: Request<'_>, out: &mut Output) -> Outcome {
        match request {
            Request::Put(body) => {
                out.extend_from_slice(b"GOT ");
                out.extend_from_slice(body);
                out.extend_from_slice(b"\r\n");
                Outcome::Reply
            }
            Request::Slow => {
                let slept = cx.offload(|| std::thread::sleep(Duration::from_millis(50)));
                Outcome::Defer(Deferred::new(async move {
                    slept.await.expect("the pool runs it");
                    b"SLOWED\r\n".to_vec()
                }))
            }
            Request::End => {
                out.extend_from_slice(b"BYE\r\n");
                Outcome::Close
            }
        }
    }

    fn reject(&self, _request: &Request<'_>, _why: Rejection, out: &mut Vec<u8>) {
        out.extend_from_slice(b"BUSY\r\n");
    }
}

fn start(mode: BufferMode) -> RunningServer {
    let cfg = RuntimeConfig {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        io_threads: 1,
        buffer_mode: mode,
        ..RuntimeConfig::default()
    };
    Server::new(cfg, Interim).start().expect("server starts")
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

fn expect(s: &mut TcpStream, want: &[u8]) {
    let mut got = vec![0u8; want.len()];
    s.read_exact(&mut got).expect("reply bytes");
    assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(want));
}

/// Sends `pieces` one at a time, with a pause after each so that each is a read of its own.
fn trickle(s: &mut TcpStream, pieces: &[&[u8]]) {
    for piece in pieces {
        s.write_all(piece).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_interim_reply_goes_out_once_per_request_and_in_order() {
    for mode in [BufferMode::Shared, BufferMode::PerConnection] {
        let server = start(mode);
        let mut s = connect(server.local_addr().unwrap());
        // The interim reply of the PUT waits for the deferred reply of the SLOW before it.
        s.write_all(b"SLOW\r\nPUT 5\r\n").unwrap();
        expect(&mut s, b"SLOWED\r\nGO\r\n");
        // The decoder asks for the interim again at every piece of the body: it is not sent again.
        trickle(&mut s, &[b"ab", b"c", b"de"]);
        expect(&mut s, b"GOT abcde\r\n");
        // The next request gets its own; a request whose body came with its head is answered at once.
        s.write_all(b"PUT 2\r\n").unwrap();
        expect(&mut s, b"GO\r\n");
        trickle(&mut s, &[b"x", b"yPUT 3\r\nxyzEND\r\n"]);
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&rest),
            "GOT xy\r\nGOT xyz\r\nBYE\r\n",
            "{mode:?}"
        );
        server.shutdown();
        server.join();
    }
}
