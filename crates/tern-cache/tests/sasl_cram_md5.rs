//! `-S` with CRAM-MD5 and realms, against memcached 1.6.18 with Cyrus SASL reading the same configuration
//! (`mech_list: plain cram-md5`) and user database (`saslpasswd2`'s, users in the host's realm and in
//! another): the same mechanism list, the same answer to each CRAM-MD5 exchange (the challenge's shape
//! checked, its random part answered with the HMAC-MD5 of each server's own challenge) and to PLAIN with
//! realms (pylibmc authenticating with CRAM-MD5 is in tests/clients.rs). A test binary of its own: tern's `auth_cmds` are per
//! process, and tests/sasl_cyrus.rs counts them.

mod common;

use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::{binary_packet, binary_status, have, Cyrus};
use hmac::{Hmac, KeyInit, Mac};
use tern_memcache_proto::binary::{opcode, request_packet, HEADER_LEN};

fn request(op: u8, key: &[u8], value: &[u8]) -> Vec<u8> {
    request_packet(op, [0, 0, 0, 7], 0, &[], key, value)
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("the host's name")
        .trim()
        .to_owned()
}

/// How a CRAM-MD5 answer is made from the right digest.
#[derive(Clone, Copy, Debug)]
enum Answer {
    Right,
    WrongPassword,
    Uppercase,
    /// Bytes after the digest (Cyrus compares its first 32 bytes).
    Trailing,
    Short,
    NoSpace,
}

/// A CRAM-MD5 exchange on a fresh connection: the start (with `start_data`), the step answering the
/// challenge as `user` with `password`, a second step when `again`, then a GET to see whether the
/// connection is authenticated; a line per reply, the challenge reduced to its shape.
fn cram_exchange(
    addr: SocketAddr,
    start_data: &[u8],
    user: &str,
    password: &str,
    answer: Answer,
    again: bool,
) -> Vec<String> {
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut lines = Vec::new();
    let Some(start) = say(
        &mut lines,
        binary_packet(
            &mut conn,
            &request(opcode::SASL_AUTH, b"CRAM-MD5", start_data),
        ),
    ) else {
        return lines;
    };
    let challenge = start[HEADER_LEN..].to_vec();
    if binary_status(&start) == 0x21 {
        // `<random.time@host>`: digits, a dot, digits, the host.
        let text = String::from_utf8_lossy(&challenge);
        let inner = text
            .strip_prefix('<')
            .and_then(|t| t.strip_suffix(&format!("@{}>", host_name())));
        let shape_ok = inner.and_then(|t| t.split_once('.')).is_some_and(|(r, t)| {
            !r.is_empty() && !t.is_empty() && (r.to_owned() + t).bytes().all(|b| b.is_ascii_digit())
        });
        *lines.last_mut().unwrap() = format!("0x0021 challenge shaped as Cyrus's: {shape_ok}");
    }
    let key = match answer {
        Answer::WrongPassword => "not the password",
        _ => password,
    };
    let mut mac = Hmac::<md5::Md5>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(&challenge);
    let digest: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let text = match answer {
        Answer::Right | Answer::WrongPassword => format!("{user} {digest}"),
        Answer::Uppercase => format!("{user} {}", digest.to_uppercase()),
        Answer::Trailing => format!("{user} {digest}zz"),
        Answer::Short => format!("{user} {}", &digest[..31]),
        Answer::NoSpace => format!("{user}{digest}"),
    };
    let step = request(opcode::SASL_STEP, b"CRAM-MD5", text.as_bytes());
    for _ in 0..if again { 2 } else { 1 } {
        if say(&mut lines, binary_packet(&mut conn, &step)).is_none() {
            return lines;
        }
    }
    say(
        &mut lines,
        binary_packet(&mut conn, &request(opcode::GET, b"k", b"")),
    );
    lines
}

/// A reply as a line (its status and body), or `closed`.
fn say(lines: &mut Vec<String>, packet: Option<Vec<u8>>) -> Option<Vec<u8>> {
    let line = match &packet {
        Some(p) => format!(
            "{:#06x} {:?}",
            binary_status(p),
            String::from_utf8_lossy(&p[HEADER_LEN..])
        ),
        None => "closed".into(),
    };
    lines.push(line);
    packet
}

/// PLAIN's exchange in one start, then a GET.
fn plain_exchange(addr: SocketAddr, authcid: &str, password: &str) -> Vec<String> {
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let message = format!("\0{authcid}\0{password}");
    [
        request(opcode::SASL_AUTH, b"PLAIN", message.as_bytes()),
        request(opcode::GET, b"k", b""),
    ]
    .iter()
    .map(|r| match binary_packet(&mut conn, r) {
        Some(p) => format!("{:#06x}", binary_status(&p)),
        None => "closed".into(),
    })
    .collect()
}

#[test]
fn cram_md5_and_realms_answer_as_memcached_with_cyrus_sasl() {
    if !have("memcached") || !have("saslpasswd2") {
        return;
    }
    let cyrus = Cyrus::new(
        "cram-md5",
        "plain cram-md5",
        &[("alice", "wonderland"), ("bob@other", "builder")],
    );
    let memcached = cyrus.memcached();
    let tern = cyrus.tern();
    let host = host_name();
    let alice_here = format!("alice@{host}");

    let transcript = |addr: SocketAddr| {
        let mut lines = Vec::new();
        let mut conn = TcpStream::connect(addr).unwrap();
        let list = binary_packet(&mut conn, &request(opcode::SASL_LIST_MECHS, b"", b"")).unwrap();
        lines.push(String::from_utf8_lossy(&list[HEADER_LEN..]).into_owned());
        let cases: [(&[u8], &str, &str, Answer, bool); 12] = [
            (b"", "alice", "wonderland", Answer::Right, false),
            (b"", "alice", "wonderland", Answer::Right, true),
            (b"", "alice", "wonderland", Answer::WrongPassword, true),
            (b"", "nobody", "wonderland", Answer::Right, false),
            (b"", "bob@other", "builder", Answer::Right, false),
            (b"", "bob", "builder", Answer::Right, false),
            (b"", &alice_here, "wonderland", Answer::Right, false),
            (b"", "alice", "wonderland", Answer::Uppercase, false),
            (b"", "alice", "wonderland", Answer::Trailing, false),
            (b"", "alice", "wonderland", Answer::Short, false),
            (b"", "alice", "wonderland", Answer::NoSpace, false),
            (b"initial data", "alice", "wonderland", Answer::Right, false),
        ];
        for (start_data, user, password, answer, again) in cases {
            lines.push(format!("{user} {answer:?} again={again}"));
            lines.extend(cram_exchange(
                addr, start_data, user, password, answer, again,
            ));
        }
        for (authcid, password) in [
            ("bob@other", "builder"),
            ("bob", "builder"),
            (alice_here.as_str(), "wonderland"),
            ("alice@other", "wonderland"),
        ] {
            lines.push(format!("PLAIN {authcid}"));
            lines.extend(plain_exchange(addr, authcid, password));
        }
        lines
    };
    let memcached_says = transcript(memcached.addr);
    let tern_says = transcript(tern.addr);
    assert_eq!(tern_says, memcached_says, "tern (left), memcached (right)");
    // What the comparison rests on: the list in mech_list's order, a challenge of Cyrus's shape, and an
    // exchange that authenticates (the GET after it answered "Not found").
    assert_eq!(memcached_says[0], "PLAIN CRAM-MD5");
    assert_eq!(
        memcached_says[2..5],
        [
            "0x0021 challenge shaped as Cyrus's: true",
            "0x0000 \"Authenticated\"",
            "0x0001 \"Not found\"",
        ]
    );
}
