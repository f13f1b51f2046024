//! `-S` against memcached's own SASL: memcached 1.6.18 with Cyrus SASL and tern cache reading the same
//! configuration (PLAIN only) and user database (made with `saslpasswd2`) get the same binary SASL exchanges, and
//! count them alike. A test binary of its own: tern's `auth_cmds` are per process.

mod common;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::{binary_packet, binary_status, have, Cyrus};
use tern_memcache_proto::binary::{opcode, request_packet, HEADER_LEN};

/// A request: its opcode and its bytes.
fn request(op: u8, extras: &[u8], key: &[u8], value: &[u8]) -> (u8, Vec<u8>) {
    (op, request_packet(op, [0, 0, 0, 9], 0, extras, key, value))
}

/// Each reply's opcode, status and body, a line each, and `closed` where the server closed the connection;
/// a connection per sequence.
fn transcript(addr: SocketAddr, sequences: &[Vec<(u8, Vec<u8>)>]) -> Vec<String> {
    let mut lines = Vec::new();
    for sequence in sequences {
        let mut conn = TcpStream::connect(addr).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        for (op, bytes) in sequence {
            match binary_packet(&mut conn, bytes) {
                Some(packet) => lines.push(format!(
                    "{op:#04x} {:#06x} {:?}",
                    binary_status(&packet),
                    String::from_utf8_lossy(&packet[HEADER_LEN..])
                )),
                None => {
                    lines.push(format!("{op:#04x} closed"));
                    break;
                }
            }
        }
        lines.push("--".into());
    }
    lines
}

/// Every SASL command takes the connection's authentication away (a mechanism list too), a second
/// authentication on a connection fails (Cyrus's exchange is done), a step without a start fails, PLAIN
/// goes in one step or two (an empty start, then the message), mechanism names are read without regard
/// to case, one over 32 bytes is refused before SASL sees it, and a refused command closes the
/// connection; `auth_cmds` and `auth_errors` count the same.
#[test]
fn sasl_exchanges_answer_as_memcached_with_cyrus_sasl() {
    if !have("memcached") || !have("saslpasswd2") {
        return;
    }
    let cyrus = Cyrus::new("cyrus", "plain", &[("alice", "wonderland")]);
    let memcached = cyrus.memcached();
    let tern = cyrus.tern();

    let right = || request(opcode::SASL_AUTH, b"", b"PLAIN", b"\0alice\0wonderland");
    let list = || request(opcode::SASL_LIST_MECHS, b"", b"", b"");
    let get = || request(opcode::GET, b"", b"k", b"");
    let version = || request(opcode::VERSION, b"", b"", b"");
    let sequences = [
        vec![
            list(),
            request(opcode::SASL_AUTH, b"", b"PLAIN", b"\0alice\0wrong"),
            request(opcode::SASL_AUTH, b"", b"PLAIN", b"\0nobody\0wonderland"),
            right(),
            request(opcode::SET, &[0; 8], b"k", b"v"),
            // Once done, a new exchange fails and leaves the connection unauthenticated: the GET is refused
            // and the connection closed.
            right(),
            get(),
            version(),
        ],
        vec![
            right(),
            get(),
            // A mechanism list takes the authentication away too.
            list(),
            get(),
            version(),
        ],
        vec![
            request(opcode::SASL_STEP, b"", b"PLAIN", b"\0alice\0wonderland"),
            request(opcode::SASL_AUTH, b"", b"CRAM-MD5", b""),
            right(),
            version(),
            request(opcode::SASL_STEP, b"", b"PLAIN", b""),
            get(),
        ],
        vec![
            request(opcode::SASL_AUTH, b"", &[b'M'; 33], b""),
            right(),
            get(),
            // Refused before SASL sees it: the authentication stays.
            request(opcode::SASL_AUTH, b"", &[b'M'; 33], b""),
            get(),
            request(opcode::STAT, b"", b"auth_cmds", b""),
        ],
        // PLAIN in two steps: an empty start is answered "continue", the step carries the message.
        vec![
            request(opcode::SASL_AUTH, b"", b"PLAIN", b""),
            request(opcode::SASL_STEP, b"", b"PLAIN", b"\0alice\0wonderland"),
            get(),
        ],
        vec![
            request(opcode::SASL_AUTH, b"", b"PLAIN", b""),
            request(opcode::SASL_STEP, b"", b"PLAIN", b"\0alice\0wrong"),
            request(opcode::SASL_AUTH, b"", b"PLAIN", b""),
            request(opcode::SASL_AUTH, b"", b"PLAIN", b"\0alice\0wonderland"),
            get(),
        ],
        // Mechanism names are read without regard to case.
        vec![
            request(opcode::SASL_AUTH, b"", b"plain", b"\0alice\0wonderland"),
            get(),
        ],
    ];
    let memcached_says = transcript(memcached.addr, &sequences);
    let tern_says = transcript(tern.addr, &sequences);
    assert_eq!(tern_says, memcached_says, "tern (left), memcached (right)");
    // What the comparison rests on: the second exchange refused, the connection closed after.
    assert!(memcached_says.contains(&"0x21 0x0020 \"Auth failure.\"".to_string()));
    assert!(memcached_says.contains(&"0x0b closed".to_string()));
    let counts = |addr| {
        let mut conn = TcpStream::connect(addr).unwrap();
        binary_packet(&mut conn, &right().1).expect("authenticated");
        let (_, stat) = request(opcode::STAT, b"", b"", b"");
        conn.write_all(&stat).unwrap();
        let mut found = Vec::new();
        while let Some(packet) = binary_packet(&mut conn, &[]) {
            let keylen = u16::from_be_bytes([packet[2], packet[3]]) as usize;
            if keylen == 0 {
                break;
            }
            let key = &packet[HEADER_LEN..HEADER_LEN + keylen];
            if key.starts_with(b"auth_") {
                found.push(String::from_utf8_lossy(&packet[HEADER_LEN..]).into_owned());
            }
        }
        found
    };
    let tern_counts = counts(tern.addr);
    assert_eq!(tern_counts.len(), 2, "{tern_counts:?}");
    assert_eq!(tern_counts, counts(memcached.addr));
}
