//! The user database reader against the files Cyrus SASL's own `saslpasswd2` writes (Debian's sasl2-bin):
//! enough users that the hash file grows past one bucket page, a password long enough to go to overflow
//! pages (saslpasswd2 keeps at most 2,048 bytes of a password), users in other realms, and users deleted again. Skipped (with a message) when `saslpasswd2` is
//! not installed.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use tern_memcache_proto::sasl::{sasldb_get, sasldb_key};

/// `saslpasswd2` run on `db` for `user`, with `password` on its standard input (`None`: delete the user).
fn saslpasswd2(db: &Path, user: &str, realm: &str, password: Option<&[u8]>) {
    let mut cmd = Command::new("saslpasswd2");
    cmd.args(["-a", "memcached", "-u", realm, "-f"]).arg(db);
    match password {
        Some(_) => cmd.args(["-c", "-p"]),
        None => cmd.arg("-d"),
    };
    let mut child = cmd
        .arg(user)
        .stdin(Stdio::piped())
        .spawn()
        .expect("saslpasswd2 runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(password.unwrap_or_default())
        .unwrap();
    assert!(child.wait().unwrap().success(), "saslpasswd2 {user}");
}

#[test]
fn reads_every_password_saslpasswd2_wrote() {
    if !tern_testkit::have("saslpasswd2") {
        eprintln!("skipped: saslpasswd2 (sasl2-bin) is not installed");
        return;
    }
    let dir = tern_testkit::files::temp_dir("sasldb");
    let db = dir.join("sasldb2");
    let password = |i: usize| format!("password-{i}-{}", "p".repeat(i % 40)).into_bytes();
    let users = 300;
    for i in 0..users {
        saslpasswd2(&db, &format!("user{i}"), "vm", Some(&password(i)));
    }
    let long = vec![b'L'; 2000];
    saslpasswd2(&db, "long", "vm", Some(&long));
    saslpasswd2(&db, "user7", "other", Some(b"elsewhere"));
    for i in (0..users).step_by(10) {
        saslpasswd2(&db, &format!("user{i}"), "vm", None);
    }
    saslpasswd2(&db, "user11", "vm", Some(b"changed"));

    let file = std::fs::read(&db).unwrap();
    assert!(file.len() > 16 * 1024, "the file grew past a few pages");
    let get = |user: &str, realm: &str| {
        sasldb_get(&file, &sasldb_key(user.as_bytes(), realm.as_bytes())).unwrap()
    };
    for i in 0..users {
        let expected = match i {
            _ if i % 10 == 0 => None,
            11 => Some(b"changed".to_vec()),
            _ => Some(password(i)),
        };
        assert_eq!(get(&format!("user{i}"), "vm"), expected, "user{i}");
    }
    assert_eq!(get("long", "vm"), Some(long));
    assert_eq!(get("user7", "other"), Some(b"elsewhere".to_vec()));
    assert_eq!(get("user8", "other"), None);
    assert_eq!(get("nobody", "vm"), None);
    std::fs::remove_dir_all(&dir).unwrap();
}
