//! `-Y authfile` (memcached's ASCII authentication) against memcached itself. A test binary of its own: the
//! authentication counters are per process, and `binary.rs`'s SASL test counts them too.

mod common;

use std::io::Write;
use std::time::Duration;

use common::{have, Memcached, Tern};

/// `-Y`: a text connection answers nothing but an authentication `set` until it authenticates, with
/// memcached's replies, counts the attempts, and is an ordinary connection once authenticated (memcached's
/// `t/ascii-auth.t`, against memcached itself).
#[test]
fn ascii_authentication_answers_as_memcached() {
    if !have("memcached") {
        return;
    }
    let dir = tern_testkit::files::temp_dir("ascii-auth");
    let authfile = dir.join("authfile");
    std::fs::write(&authfile, "foo:bar\nbaaaz:quux\n").unwrap();
    let path = authfile.to_str().unwrap();
    let memcached = Memcached::start(&["-Y", path]);
    let tern = Tern::start(&["-Y", path]);
    let steps: &[(&str, usize)] = &[
        ("set foo 0 0 2\r\nhi\r\n", 1),
        ("get foo\r\n", 1),
        ("set foo 0 0 7\r\nfoo bab\r\n", 1),
        ("set a b c\r\n", 1),
        ("set foo 0 0 7\r\nfoo barXY", 1),
        ("set foo 0 0 7\r\nfoo bar\r\n", 1),
        ("set toast 0 0 2\r\nhi\r\n", 1),
        ("get toast\r\n", 3),
    ];
    let replies = |addr| {
        let conn = common::connect(addr);
        conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut reader = std::io::BufReader::new(conn.try_clone().unwrap());
        let mut conn = conn;
        let mut got = Vec::new();
        for (input, lines) in steps {
            conn.write_all(input.as_bytes()).unwrap();
            for _ in 0..*lines {
                let mut line = String::new();
                std::io::BufRead::read_line(&mut reader, &mut line).unwrap();
                got.push(line);
            }
        }
        // The attempts' counters, on the authenticated connection.
        conn.write_all(b"stats\r\n").unwrap();
        loop {
            let mut line = String::new();
            std::io::BufRead::read_line(&mut reader, &mut line).unwrap();
            if line == "END\r\n" || line.is_empty() {
                break;
            }
            if line.starts_with("STAT auth_") {
                got.push(line);
            }
        }
        got
    };
    let (theirs, ours) = (replies(memcached.addr), replies(tern.addr));
    assert_eq!(ours, theirs);
    assert!(theirs
        .iter()
        .any(|l| l.starts_with("CLIENT_ERROR authentication failure")));
    assert!(
        theirs.contains(&"STAT auth_cmds 2\r\n".to_string()),
        "{theirs:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
