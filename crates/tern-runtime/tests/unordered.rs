//! Unordered deferred replies (`Deferred::unordered`): a slow call does not hold up the calls pipelined
//! behind it on its connection, ordered replies keep their order among themselves, and a connection the
//! client closes still gets every reply it asked for before it is closed. On the client side, a `Backend`
//! whose codec names calls matches replies by id, whatever their order.

#[macro_use]
mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::time::{Duration, Instant};

use tern_runtime::{
    Backend, CallError, ClientCodec, Cx, Decoded, Deferred, Outcome, Output, PoolConfig, Rejection,
    RuntimeConfig, Server, Service,
};

/// `U <ms> <tag>` answers `<tag>` after `ms` milliseconds, unordered; `O <ms> <tag>` the same, in order;
/// anything else answers itself at once.
struct Lines;

impl Service for Lines {
    line_service!();

    fn handle(&self, _cx: &mut Cx<'_, Self>, request: &[u8], out: &mut Output) -> Outcome {
        let line = std::str::from_utf8(request).unwrap_or("");
        let mut words = line.split(' ');
        let kind = words.next().unwrap_or("");
        if kind != "U" && kind != "O" {
            out.extend_from_slice(request);
            out.extend_from_slice(b"\n");
            return Outcome::Reply;
        }
        let ms: u64 = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
        let tag = format!("{}\n", words.next().unwrap_or(""));
        let later = Deferred::new(async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            tag.into_bytes()
        });
        Outcome::Defer(if kind == "U" {
            later.unordered()
        } else {
            later
        })
    }

    fn reject(&self, _request: &&[u8], _why: Rejection, out: &mut Vec<u8>) {
        out.extend_from_slice(b"X\n");
    }
}

fn serve() -> tern_runtime::RunningServer {
    let cfg = RuntimeConfig {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        io_threads: 1,
        ..RuntimeConfig::default()
    };
    Server::new(cfg, Lines).start().unwrap()
}

fn lines(reader: &mut BufReader<std::net::TcpStream>, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| {
            let mut line = String::new();
            reader.read_line(&mut line).expect("a reply line");
            line.trim_end().to_owned()
        })
        .collect()
}

#[test]
fn a_slow_unordered_reply_does_not_hold_up_the_replies_behind_it() {
    let server = serve();
    let conn = std::net::TcpStream::connect(server.local_addr().unwrap()).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    (&conn)
        .write_all(b"U 300 slow\nU 10 quick\nnow\nO 50 first\nO 0 second\nthen\n")
        .unwrap();
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let started = std::time::Instant::now();
    let got = lines(&mut reader, 6);
    // Inline replies leave at once, the ordered pair in its order (and the inline reply after the ordered
    // pair waits for it), the slow unordered one last.
    assert_eq!(got, ["now", "quick", "first", "second", "then", "slow"]);
    assert!(started.elapsed() >= Duration::from_millis(250));
    server.shutdown();
    server.join();
}

#[test]
fn a_client_that_closes_gets_its_unordered_replies_first() {
    let server = serve();
    let mut conn = std::net::TcpStream::connect(server.local_addr().unwrap()).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    conn.write_all(b"U 100 a\nU 20 b\nc\n").unwrap();
    conn.shutdown(std::net::Shutdown::Write).unwrap();
    let mut got = String::new();
    conn.read_to_string(&mut got)
        .expect("the server closes after the replies");
    assert_eq!(got, "c\nb\na\n");
    server.shutdown();
    server.join();
}

/// Calls `U <ms> <id>` (a delay): the reply, the id, names its call.
struct DelayCodec;

impl ClientCodec for DelayCodec {
    type Request = u64;
    type Response = ();

    fn encode(&self, ms: &u64, id: i32, out: &mut Vec<u8>) {
        out.extend_from_slice(format!("U {ms} {id}\n").as_bytes());
    }

    fn decode(&self, input: &[u8]) -> Result<Option<Decoded<()>>, String> {
        let Some(eol) = input.iter().position(|&b| b == b'\n') else {
            return Ok(None);
        };
        let id = std::str::from_utf8(&input[..eol])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or("not an id")?;
        Ok(Some(Decoded {
            reply: (),
            consumed: eol + 1,
            id: Some(id),
        }))
    }
}

#[test]
fn a_backend_matches_replies_by_the_id_they_name() {
    let server = serve();
    let addr = server.local_addr().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tokio::task::LocalSet::new().block_on(&rt, async move {
        let backend = Backend::new(
            addr,
            DelayCodec,
            PoolConfig {
                connections: 1,
                ..PoolConfig::default()
            },
        );
        let far = Instant::now() + Duration::from_secs(5);
        // One connection: the quick call, sent after the slow one, is answered first.
        let slow = async {
            backend.call(&300, far).await.unwrap();
            Instant::now()
        };
        let quick = async {
            backend.call(&10, far).await.unwrap();
            Instant::now()
        };
        let (slow_done, quick_done) = futures::join!(slow, quick);
        assert!(quick_done + Duration::from_millis(200) < slow_done);
        // A call whose caller gives up is answered later; the reply is dropped and the connection goes on.
        let gave_up = backend
            .call(&200, Instant::now() + Duration::from_millis(20))
            .await;
        assert_eq!(gave_up, Err(CallError::Timeout));
        for _ in 0..3 {
            backend.call(&0, far).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        backend.call(&0, far).await.unwrap();
    });
    server.shutdown();
    server.join();
}
