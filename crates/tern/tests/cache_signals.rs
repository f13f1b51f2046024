//! Signals as memcached's operators send them, to tern cache and memcached (real processes): SIGHUP rereads
//! the `-Y` file (new users in, removed ones out; a broken file leaves the users as they were) and does not
//! stop the server.

use std::io::{Read, Write};
use std::process::Command;
use std::time::{Duration, Instant};

use tern_testkit::process::is_root;
use tern_testkit::{have, start_with_port_file};

/// memcached's `-Y` authentication on a new connection: its answer to `user password`.
fn authenticate(port: u16, user: &str, password: &str) -> String {
    let mut conn = tern_testkit::connect(([127, 0, 0, 1], port).into());
    let token = format!("{user} {password}");
    conn.write_all(format!("set auth 0 0 {}\r\n{token}\r\n", token.len()).as_bytes())
        .unwrap();
    let mut reply = Vec::new();
    let mut buf = [0u8; 256];
    while !reply.ends_with(b"\r\n") {
        let n = conn.read(&mut buf).unwrap();
        assert!(n > 0, "closed");
        reply.extend_from_slice(&buf[..n]);
    }
    String::from_utf8(reply).unwrap().trim_end().to_owned()
}

/// Waits (memcached rereads on its next clock tick, within a second) until `user` authenticates as `want`.
fn wait_for(port: u16, user: (&str, &str), want: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got = authenticate(port, user.0, user.1);
        if got == want || Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sighup_rereads_the_authentication_file_as_memcached_does() {
    if !have("memcached") {
        return;
    }
    let dir = tern_testkit::files::temp_dir("sighup");
    for server in ["memcached", "tern"] {
        let file = dir.join(format!("authfile-{server}"));
        std::fs::write(&file, "foo:bar\n").unwrap();
        let path = file.to_str().unwrap();
        let mut cmd = if server == "memcached" {
            let mut cmd = Command::new("memcached");
            if is_root() {
                cmd.args(["-u", "root"]);
            }
            cmd
        } else {
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_tern"));
            cmd.arg("cache");
            cmd
        };
        cmd.args(["-l", "127.0.0.1", "-p", "-1", "-Y", path]);
        let (child, ports) = start_with_port_file(cmd, &format!("sighup-{server}"));
        let port = ports[0].1;
        let hup = || {
            let status = Command::new("kill")
                .args(["-HUP", &child.pid().to_string()])
                .status()
                .unwrap();
            assert!(status.success());
        };
        assert_eq!(authenticate(port, "foo", "bar"), "STORED", "{server}");
        assert_eq!(
            authenticate(port, "new", "pass"),
            "CLIENT_ERROR authentication failure",
            "{server}"
        );
        std::fs::write(&file, "new:pass\n").unwrap();
        hup();
        assert_eq!(
            wait_for(port, ("new", "pass"), "STORED"),
            "STORED",
            "{server}"
        );
        assert_eq!(
            authenticate(port, "foo", "bar"),
            "CLIENT_ERROR authentication failure",
            "{server}: a user no longer in the file"
        );
        // A broken file: the users stay.
        std::fs::write(&file, "no colon here\n").unwrap();
        hup();
        std::thread::sleep(Duration::from_millis(1500));
        assert_eq!(authenticate(port, "new", "pass"), "STORED", "{server}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
