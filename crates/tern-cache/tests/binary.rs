//! The binary protocol against the real memcached 1.6.18: seeded random requests of every opcode (quiet and
//! key-returning forms, CAS from earlier responses, counters created by incr, values over the item limit,
//! broken headers) go to both servers one at a time, each followed by a NOOP, and the responses up to the
//! NOOP's must be equal packet for packet. CAS values are compared by identity (each server's are renamed
//! in order of first appearance), as in `differential.rs`; a request that sends a CAS sends each server the
//! value it returned. Requests that close the connection (QUIT, invalid headers) end a stream.
//!
//! Also here: binary over UDP, the two protocols sharing one store, and `-S` (SASL for binary
//! connections; `-Y`, ASCII authentication, is tested in `ascii_auth.rs`, a process of its own, since both
//! count `auth_cmds`).
//!
//! `TERN_BIN_SEED` (default 1) and `TERN_BIN_STREAMS` (default 150) choose the run. memcached runs
//! without its LRU crawler and maintainer threads, whose passing references to items made its incr answers
//! vary between runs of the same stream.

mod common;

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{binary_status as status, have, Memcached, Tern};
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use tern_memcache_proto::binary::{
    opcode, write_request, Header, HEADER_LEN, REQUEST_MAGIC, RESPONSE_MAGIC,
};

/// The NOOP that ends each request's responses.
const SENTINEL_OPAQUE: [u8; 4] = [0xfe, 0xed, 0xfa, 0xce];

/// A CAS a request sends: none, the n-th distinct CAS a server returned, or one no item has.
#[derive(Clone, Copy, Debug)]
enum Cas {
    Zero,
    Seen(usize),
    Stale,
}

/// One request, before each server's CAS is filled in.
#[derive(Clone, Debug)]
struct Request {
    op: u8,
    extras: Vec<u8>,
    key: Vec<u8>,
    value: Vec<u8>,
    cas: Cas,
    /// Overrides the body length (a header that lies).
    bodylen: Option<u32>,
    opaque: [u8; 4],
    /// Bytes after the packet: what memcached swallows after an unknown command (its body length again).
    trailing: Vec<u8>,
}

impl Request {
    fn encode(&self, cas: u64) -> Vec<u8> {
        let bodylen = self
            .bodylen
            .unwrap_or((self.extras.len() + self.key.len() + self.value.len()) as u32);
        let header = Header {
            opcode: self.op,
            extlen: self.extras.len() as u8,
            keylen: self.key.len() as u16,
            bodylen,
            opaque: self.opaque,
            cas,
        };
        let mut out = Vec::new();
        write_request(&mut out, &header, &self.extras, &self.key, &self.value);
        out.extend_from_slice(&self.trailing);
        out
    }

    fn closes(&self) -> bool {
        self.bodylen.is_some()
            || self.key.len() > 250
            || matches!(self.op, opcode::QUIT | opcode::QUITQ)
    }
}

const KEYS: &[&[u8]] = &[b"a", b"b", b"counter", b"k1", b"\xc3\xa9t\xc3\xa9"];

struct Generator {
    rng: StdRng,
}

impl Generator {
    fn key(&mut self) -> Vec<u8> {
        match self.rng.random_range(0..30) {
            0 => vec![b'L'; 250],
            _ => KEYS.choose(&mut self.rng).unwrap().to_vec(),
        }
    }

    fn value(&mut self) -> Vec<u8> {
        match self.rng.random_range(0..10) {
            0 => Vec::new(),
            1 => b"12".to_vec(),
            2 => b"18446744073709551615".to_vec(),
            3 => vec![b'v'; self.rng.random_range(9_000..20_000)],
            _ => (0..self.rng.random_range(1..40))
                .map(|_| self.rng.random())
                .collect(),
        }
    }

    fn exptime(&mut self) -> u32 {
        *[0u32, 0, 0, 1000, 2_592_000, 2_592_001, u32::MAX]
            .choose(&mut self.rng)
            .unwrap()
    }

    fn cas(&mut self) -> Cas {
        match self.rng.random_range(0..6) {
            0 => Cas::Stale,
            1 | 2 => Cas::Seen(self.rng.random_range(0..6)),
            _ => Cas::Zero,
        }
    }

    fn request(&mut self) -> Request {
        let op = *[
            opcode::GET,
            opcode::GETQ,
            opcode::GETK,
            opcode::GETKQ,
            opcode::SET,
            opcode::SETQ,
            opcode::ADD,
            opcode::ADDQ,
            opcode::REPLACE,
            opcode::REPLACEQ,
            opcode::APPEND,
            opcode::PREPENDQ,
            opcode::DELETE,
            opcode::DELETEQ,
            opcode::INCREMENT,
            opcode::DECREMENTQ,
            opcode::TOUCH,
            opcode::GAT,
            opcode::GATQ,
            opcode::GATK,
            opcode::GATKQ,
            opcode::VERSION,
            opcode::NOOP,
            opcode::VERBOSITY,
            opcode::SASL_LIST_MECHS,
            0x42,
            opcode::QUIT,
            opcode::QUITQ,
        ]
        .choose(&mut self.rng)
        .unwrap();
        let key = self.key();
        let exptime = self.exptime();
        let (extras, value) = match op {
            opcode::SET
            | opcode::SETQ
            | opcode::ADD
            | opcode::ADDQ
            | opcode::REPLACE
            | opcode::REPLACEQ => {
                let flags: u32 = *[0, 1, u32::MAX].choose(&mut self.rng).unwrap();
                let mut extras = flags.to_be_bytes().to_vec();
                extras.extend_from_slice(&exptime.to_be_bytes());
                let value = if self.rng.random_range(0..25) == 0 {
                    vec![b'x'; 1 << 20]
                } else {
                    self.value()
                };
                (extras, value)
            }
            opcode::APPEND | opcode::PREPENDQ => (Vec::new(), self.value()),
            opcode::INCREMENT | opcode::DECREMENTQ => {
                let delta: u64 = *[1, 5, u64::MAX].choose(&mut self.rng).unwrap();
                let mut extras = delta.to_be_bytes().to_vec();
                extras.extend_from_slice(&7u64.to_be_bytes());
                extras.extend_from_slice(&exptime.to_be_bytes());
                (extras, Vec::new())
            }
            opcode::TOUCH | opcode::GAT | opcode::GATQ | opcode::GATK | opcode::GATKQ => {
                (exptime.to_be_bytes().to_vec(), Vec::new())
            }
            opcode::VERBOSITY => (1u32.to_be_bytes().to_vec(), Vec::new()),
            _ => (Vec::new(), Vec::new()),
        };
        let keyless = matches!(
            op,
            opcode::VERSION
                | opcode::NOOP
                | opcode::VERBOSITY
                | opcode::SASL_LIST_MECHS
                | opcode::QUIT
                | opcode::QUITQ
                | 0x42
        );
        let mut request = Request {
            op,
            extras,
            key: if keyless { Vec::new() } else { key },
            value,
            cas: self.cas(),
            bodylen: None,
            opaque: self.rng.random(),
            trailing: if op == opcode::VERBOSITY {
                b"swal".to_vec()
            } else {
                Vec::new()
            },
        };
        // Now and then a header that breaks its opcode's rules: a key where none belongs, or a body
        // shorter than the key.
        let keyless_known = matches!(
            op,
            opcode::VERSION | opcode::NOOP | opcode::QUIT | opcode::SASL_LIST_MECHS
        );
        match self.rng.random_range(0..60) {
            0 if keyless_known => request.key = b"k".to_vec(),
            1 if !request.key.is_empty() => {
                // Without the value: memcached closes with it unread, and the reset may lose the reply.
                request.bodylen = Some(0);
                request.value.clear();
            }
            _ => {}
        }
        request
    }
}

/// Reads response packets until the sentinel NOOP's (which is not returned) or the end of the connection.
fn read_responses(conn: &mut TcpStream) -> (Vec<Vec<u8>>, bool) {
    let mut packets = Vec::new();
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 1 << 16];
    loop {
        while buf.len() >= HEADER_LEN {
            assert_eq!(buf[0], RESPONSE_MAGIC, "a response packet");
            let bodylen = u32::from_be_bytes(buf[8..12].try_into().unwrap()) as usize;
            if buf.len() < HEADER_LEN + bodylen {
                break;
            }
            let packet: Vec<u8> = buf.drain(..HEADER_LEN + bodylen).collect();
            if packet[1] == opcode::NOOP && packet[12..16] == SENTINEL_OPAQUE {
                return (packets, false);
            }
            packets.push(packet);
        }
        match conn.read(&mut chunk) {
            Ok(0) => return (packets, true),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return (packets, true),
            Err(e) => panic!("no end of responses: {e}"),
        }
    }
}

/// One server's side of a run: its connection and the CAS values it returned, in order of appearance.
struct Side {
    conn: TcpStream,
    seen: Vec<u64>,
    names: HashMap<u64, usize>,
}

impl Side {
    fn new(conn: TcpStream) -> Side {
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Side {
            conn,
            seen: Vec::new(),
            names: HashMap::new(),
        }
    }

    fn cas(&self, cas: Cas) -> u64 {
        match cas {
            Cas::Zero => 0,
            Cas::Stale => 0x7fff_ffff_0000,
            Cas::Seen(n) => self.seen.get(n).copied().unwrap_or(0x7fff_ffff_0001),
        }
    }

    /// Sends `request` then the sentinel; the responses with CAS values renamed, and whether it closed.
    fn run(&mut self, request: &Request) -> (Vec<Vec<u8>>, bool) {
        let mut bytes = request.encode(self.cas(request.cas));
        let mut sentinel = vec![REQUEST_MAGIC, opcode::NOOP, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        sentinel.extend_from_slice(&SENTINEL_OPAQUE);
        sentinel.extend_from_slice(&[0; 8]);
        bytes.extend_from_slice(&sentinel);
        if self.conn.write_all(&bytes).is_err() {
            return (Vec::new(), true);
        }
        let (mut packets, closed) = read_responses(&mut self.conn);
        for packet in &mut packets {
            let cas = u64::from_be_bytes(packet[16..24].try_into().unwrap());
            if cas != 0 {
                let next = self.names.len();
                let name = *self.names.entry(cas).or_insert_with(|| {
                    self.seen.push(cas);
                    next
                });
                packet[16..24].copy_from_slice(&(name as u64 + 1).to_be_bytes());
            }
        }
        (packets, closed)
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn binary_responses_equal_memcacheds() {
    if !have("memcached") {
        return;
    }
    let seed = env_u64("TERN_BIN_SEED", 1);
    let streams = env_u64("TERN_BIN_STREAMS", 150);
    let mut generator = Generator {
        rng: StdRng::seed_from_u64(seed),
    };
    // memcached's background LRU threads take references to items now and then, and an incr then makes a
    // new item instead of rewriting the number in place (`7` where it is otherwise `7 `): without them its
    // answers are reproducible.
    let memcached = Memcached::start(&["-B", "auto", "-o", "no_lru_crawler,no_lru_maintainer"]);
    let tern = Tern::start(&["-B", "auto"]);
    let mut requests = 0;
    for stream in 0..streams {
        let mut theirs = Side::new(common::connect(memcached.addr));
        let mut ours = Side::new(tern.connect());
        let mut history = Vec::new();
        for step in 0..generator.rng.random_range(1..40) {
            let request = generator.request();
            history.push(format!(
                "op {:#04x} key {:?} extras {:02x?} value {} bytes {:02x?} cas {:?} bodylen {:?}",
                request.op,
                String::from_utf8_lossy(&request.key[..request.key.len().min(12)]),
                request.extras,
                request.value.len(),
                &request.value[..request.value.len().min(40)],
                request.cas,
                request.bodylen,
            ));
            requests += 1;
            let (want, their_close) = theirs.run(&request);
            let (got, our_close) = ours.run(&request);
            assert!(
                want == got && their_close == our_close,
                "seed {seed}, stream {stream}, step {step} (the last of these): {history:#?}\n memcached (closed {their_close}): {:?}\n tern cache (closed {our_close}): {:?}",
                want.iter().map(|p| cut(p)).collect::<Vec<_>>(),
                got.iter().map(|p| cut(p)).collect::<Vec<_>>(),
            );
            if request.closes() || their_close {
                break;
            }
        }
    }
    println!("{requests} requests in {streams} streams, seed {seed}: equal");
}

fn cut(packet: &[u8]) -> String {
    let shown = &packet[..packet.len().min(80)];
    format!("{shown:02x?} ({} bytes)", packet.len())
}

/// A text client and a binary client on the same server see each other's items (the stores are one), and
/// `-B ascii` makes a binary request text garbage while `-B binary` closes a text connection, as memcached.
#[test]
fn protocols_share_the_store_and_b_picks_the_door() {
    if !have("memcached") {
        return;
    }
    for flags in [["-B", "ascii"], ["-B", "binary"]] {
        let memcached = Memcached::start(&flags);
        let tern = Tern::start(&flags);
        let get = Request {
            op: opcode::GET,
            extras: Vec::new(),
            key: b"k".to_vec(),
            value: Vec::new(),
            cas: Cas::Zero,
            bodylen: None,
            opaque: [0; 4],
            trailing: Vec::new(),
        };
        let text_then_binary = |addr| {
            let mut conn = common::connect(addr);
            conn.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
            let _ = conn.write_all(b"version\r\n");
            let _ = conn.write_all(&get.encode(0));
            let mut got = Vec::new();
            let mut chunk = [0u8; 4096];
            loop {
                match conn.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&chunk[..n]),
                }
                if got.ends_with(b"ERROR\r\n") {
                    break;
                }
            }
            got
        };
        assert_eq!(
            text_then_binary(tern.addr),
            text_then_binary(memcached.addr),
            "{flags:?}"
        );
    }
    let tern = Tern::start(&[]);
    let mut text = tern.connect();
    text.write_all(b"set shared 3 0 2\r\nhi\r\n").unwrap();
    let mut stored = [0u8; 8];
    text.read_exact(&mut stored).unwrap();
    let mut binary = Side::new(tern.connect());
    let get = Request {
        op: opcode::GETK,
        extras: Vec::new(),
        key: b"shared".to_vec(),
        value: Vec::new(),
        cas: Cas::Zero,
        bodylen: None,
        opaque: [1, 2, 3, 4],
        trailing: Vec::new(),
    };
    let (packets, closed) = binary.run(&get);
    assert!(!closed);
    assert_eq!(packets.len(), 1);
    let packet = &packets[0];
    assert_eq!(&packet[6..8], &[0, 0], "success");
    assert_eq!(&packet[12..16], &[1, 2, 3, 4], "the opaque echoed");
    assert_eq!(&packet[HEADER_LEN..], b"\0\0\0\x03sharedhi");
}

/// A request with no extras and no CAS, for the SASL exchanges.
fn plain_request(op: u8, key: &[u8], value: &[u8]) -> Request {
    Request {
        op,
        extras: Vec::new(),
        key: key.to_vec(),
        value: value.to_vec(),
        cas: Cas::Zero,
        bodylen: None,
        opaque: [0, 0, 0, 9],
        trailing: Vec::new(),
    }
}

/// `-S`: a binary connection must authenticate (SASL PLAIN against the password file) before anything but
/// the SASL commands and VERSION; a refused command closes the connection, a failed authentication does not.
#[test]
fn sasl_plain_guards_every_command_but_its_own() {
    let dir = tern_testkit::files::temp_dir("sasl");
    let pwdb = dir.join("pwdb");
    std::fs::write(&pwdb, "alice:wonderland\n").unwrap();
    let path = pwdb.clone();
    // No memcached.conf in `dir`: both mechanisms offered, the passwords from the file.
    let conf = dir.to_str().unwrap().to_owned();
    let tern = Tern::start_tweaked(&["-S"], false, move |s| {
        s.sasl = Some(tern_cache::sasl::Sasl::new(Some(&conf), Some(path)).unwrap())
    });
    let request = plain_request;
    let one = |conn: &mut TcpStream, request: &Request| {
        common::binary_packet(conn, &request.encode(0)).expect("a reply")
    };
    // Unauthenticated: VERSION is answered, a GET is refused and the connection closed.
    let mut conn = tern.connect();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert_eq!(
        status(&one(&mut conn, &request(opcode::VERSION, b"", b""))),
        0
    );
    let refused = one(&mut conn, &request(opcode::GET, b"k", b""));
    assert_eq!(status(&refused), 0x20, "auth error");
    assert_eq!(&refused[HEADER_LEN..], b"Auth failure.");
    let mut rest = Vec::new();
    assert_eq!(conn.read_to_end(&mut rest).unwrap_or(0), 0, "closed");

    let mut conn = Side::new(tern.connect());
    let mechanisms = one(&mut conn.conn, &request(opcode::SASL_LIST_MECHS, b"", b""));
    assert_eq!(&mechanisms[HEADER_LEN..], b"CRAM-MD5 PLAIN");
    let wrong = request(opcode::SASL_AUTH, b"PLAIN", b"\0alice\0wrong");
    assert_eq!(status(&one(&mut conn.conn, &wrong)), 0x20);
    // A failed authentication keeps the connection.
    let right = request(opcode::SASL_AUTH, b"PLAIN", b"\0alice\0wonderland");
    let accepted = one(&mut conn.conn, &right);
    assert_eq!(status(&accepted), 0);
    assert_eq!(&accepted[HEADER_LEN..], b"Authenticated");
    let mut set = request(opcode::SET, b"k", b"v");
    set.extras = vec![0; 8];
    let (packets, _) = conn.run(&set);
    assert_eq!(status(&packets[0]), 0, "stored once authenticated");
    let (packets, _) = conn.run(&request(opcode::GET, b"k", b""));
    assert_eq!(&packets[0][HEADER_LEN..], b"\0\0\0\0v");
    let (packets, _) = conn.run(&request(opcode::STAT, b"", b""));
    let stat = |name: &[u8]| {
        packets
            .iter()
            .find(|p| {
                p[2..4] == (name.len() as u16).to_be_bytes() && p[HEADER_LEN..].starts_with(name)
            })
            .map(|p| p[HEADER_LEN + name.len()..].to_vec())
    };
    assert_eq!(stat(b"auth_cmds").as_deref(), Some(&b"2"[..]));
    assert_eq!(stat(b"auth_errors").as_deref(), Some(&b"1"[..]));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Binary requests over UDP (memcached picks the protocol per datagram): a set, a get, an incr and a miss,
/// each response in datagrams of its own with memcached's frame header, equal to memcached's but for CAS.
#[test]
fn binary_over_udp_answers_as_memcached() {
    if !have("memcached") {
        return;
    }
    let memcached = Memcached::start_with(&["-B", "auto"], true);
    let tern = Tern::start_udp(&["-B", "auto"]);
    let mut set_extras = 5u32.to_be_bytes().to_vec();
    set_extras.extend_from_slice(&0u32.to_be_bytes());
    let mut incr_extras = 3u64.to_be_bytes().to_vec();
    incr_extras.extend_from_slice(&10u64.to_be_bytes());
    incr_extras.extend_from_slice(&0u32.to_be_bytes());
    let request = |op: u8, extras: Vec<u8>, key: &[u8], value: &[u8]| Request {
        op,
        extras,
        key: key.to_vec(),
        value: value.to_vec(),
        cas: Cas::Zero,
        bodylen: None,
        opaque: [0; 4],
        trailing: Vec::new(),
    };
    let requests = [
        request(opcode::SET, set_extras, b"udpkey", b"value over udp"),
        request(opcode::GETK, Vec::new(), b"udpkey", b""),
        request(opcode::INCREMENT, incr_extras, b"udpcounter", b""),
        request(opcode::GET, Vec::new(), b"udpmissing", b""),
    ];
    let ask = |addr: std::net::SocketAddr| {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut answers = Vec::new();
        for (id, request) in requests.iter().enumerate() {
            // memcached's UDP frame header: request id, sequence 0, one datagram, reserved.
            let mut datagram = vec![0, id as u8, 0, 0, 0, 1, 0, 0];
            datagram.extend_from_slice(&request.encode(0));
            socket.send_to(&datagram, addr).unwrap();
            let mut buf = vec![0u8; 2048];
            let n = socket.recv(&mut buf).expect("a reply datagram");
            let mut reply = buf[..n].to_vec();
            // The response's CAS (after the 8-byte frame header) differs by design.
            let cas_nonzero = reply[8 + 16..8 + 24].iter().any(|&b| b != 0);
            reply[8 + 16..8 + 24].fill(0);
            answers.push((reply, cas_nonzero));
        }
        answers
    };
    let (theirs, ours) = (ask(memcached.udp.unwrap()), ask(tern.udp.unwrap()));
    for ((want, want_cas), (got, got_cas)) in theirs.iter().zip(&ours) {
        assert_eq!(want, got, "a UDP binary response");
        assert_eq!(want_cas, got_cas, "a CAS where memcached sends one");
    }
}

/// A value over `-I` is refused only once all of it has arrived (memcached swallows it, then answers), in
/// both protocols, and an unknown opcode's body likewise: spymemcached's binary connection fails when the
/// answer comes while it is still writing the value (found by its checks, 2026-11-27).
#[test]
fn a_refused_value_is_answered_once_it_has_all_arrived_as_memcached() {
    if !have("memcached") {
        return;
    }
    let declared = 3 << 20;
    let mut big_set = Vec::new();
    let header = Header {
        opcode: opcode::SET,
        extlen: 8,
        keylen: 3,
        bodylen: 8 + 3 + declared as u32,
        opaque: [0, 0, 0, 1],
        cas: 0,
    };
    write_request(&mut big_set, &header, &[0; 8], b"big", &[]);
    let mut unknown = Vec::new();
    let header = Header {
        opcode: 0xfe,
        extlen: 4,
        keylen: 2,
        bodylen: 6,
        opaque: [0, 0, 0, 2],
        cas: 0,
    };
    // Extras and key lengths as the header says (write_request takes them from the parts), no body yet.
    write_request(&mut unknown, &header, &[0; 4], b"ab", &[]);
    unknown.truncate(HEADER_LEN);
    let text_set = format!("set big 0 0 {declared}\r\n").into_bytes();
    // (request head, bytes of its body sent at first, the rest)
    let cases: [(&[u8], usize, usize); 3] = [
        (&big_set, 1000, declared - 1000),
        // the body's 6 bytes and 5 of the 6 memcached swallows after it
        (&unknown, 11, 1),
        (&text_set, 1000, declared + 2 - 1000),
    ];
    let tern = Tern::start(&["-B", "auto"]);
    let memcached = Memcached::start(&["-B", "auto"]);
    for (head, first, rest) in cases {
        let mut answers = Vec::new();
        for addr in [tern.addr, memcached.addr] {
            let mut conn = common::connect(addr);
            conn.write_all(head).unwrap();
            conn.write_all(&vec![b'x'; first]).unwrap();
            conn.set_read_timeout(Some(Duration::from_millis(300)))
                .unwrap();
            let mut answer = vec![0u8; 4096];
            let early = match conn.read(&mut answer) {
                Ok(n) => n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => 0,
                Err(e) => panic!("{:?} on {addr}: {e}", &head[..2]),
            };
            conn.write_all(&vec![b'x'; rest]).unwrap();
            let answered_early = early > 0;
            if !answered_early {
                conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let n = conn
                    .read(&mut answer)
                    .unwrap_or_else(|e| panic!("{:?} on {addr}: {e}", &head[..2]));
                answer.truncate(n);
            } else {
                answer.truncate(early);
            }
            answers.push((answered_early, answer));
        }
        assert_eq!(
            answers[0],
            answers[1],
            "{:?}: tern, then memcached",
            &head[..2]
        );
        assert!(!answers[0].0, "answered before the rest arrived");
        assert!(!answers[0].1.is_empty());
    }
}

/// A wrong magic byte makes memcached drop the connection and the replies it has not written yet; but an
/// error response (its `write_bin_error` goes to `conn_mwrite`) writes out everything queued before the
/// garbage arrives, unless the request's body is being swallowed, while successes and GETK's misses wait.
/// Each batch goes in one write, garbage last; tern must send what memcached sends, byte for byte (tern
/// dropped the error responses too until Dalli's checks saw it, 2026-11-28).
#[test]
fn replies_before_a_wrong_magic_byte_are_kept_as_memcached_keeps_them() {
    if !have("memcached") {
        return;
    }
    let packet = |op: u8, extras: &[u8], key: &[u8], value: &[u8]| {
        let header = Header {
            opcode: op,
            extlen: extras.len() as u8,
            keylen: key.len() as u16,
            bodylen: (extras.len() + key.len() + value.len()) as u32,
            opaque: [0, 0, 0, op],
            cas: 0,
        };
        let mut out = Vec::new();
        write_request(&mut out, &header, extras, key, value);
        out
    };
    let set = |key: &[u8], value: &[u8]| packet(opcode::SET, &[0; 8], key, value);
    let incr = packet(
        opcode::INCREMENT,
        &[
            0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff,
        ],
        b"w",
        b"",
    );
    let batches: Vec<(&str, Vec<u8>)> = vec![
        ("a GET miss", packet(opcode::GET, &[], b"nope", b"")),
        ("a GETK miss", packet(opcode::GETK, &[], b"nope", b"")),
        (
            "a hit",
            [set(b"k", b"v"), packet(opcode::GET, &[], b"k", b"")].concat(),
        ),
        (
            "a set, a DELETE miss, a set",
            [
                set(b"k", b"v"),
                packet(opcode::DELETE, &[], b"nope", b""),
                set(b"j", b"v"),
            ]
            .concat(),
        ),
        ("a non-numeric INCR", [set(b"w", b"abc"), incr].concat()),
        ("an unknown command", packet(0xfe, &[], b"", b"")),
        (
            "an unknown command with a body",
            packet(0xfe, &[], b"", b"xy"),
        ),
        (
            "an ADD that exists",
            [set(b"k", b"v"), packet(opcode::ADD, &[0; 8], b"k", b"v")].concat(),
        ),
    ];
    let tern = Tern::start(&["-B", "binary"]);
    let memcached = Memcached::start(&["-B", "binary"]);
    for (what, batch) in &batches {
        let answers: Vec<Vec<u8>> = [tern.addr, memcached.addr]
            .into_iter()
            .map(|addr| {
                let mut conn = common::connect(addr);
                conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                conn.write_all(&[&batch[..], &[0x5a; 24]].concat()).unwrap();
                let mut answer = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    match conn.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => answer.extend_from_slice(&buf[..n]),
                        Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
                        Err(e) => panic!("{what} on {addr}: no close: {e}"),
                    }
                }
                // CAS values are each server's own: zeroed in every whole response.
                let mut at = 0;
                while at + HEADER_LEN <= answer.len() {
                    answer[at + 16..at + 24].fill(0);
                    let body = u32::from_be_bytes(answer[at + 8..at + 12].try_into().unwrap());
                    at += HEADER_LEN + body as usize;
                }
                answer
            })
            .collect();
        assert_eq!(answers[0], answers[1], "{what}: tern, then memcached");
    }
}
