//! memcached's `-d` and `-P`, as init scripts use them: the command returns at once with success, the
//! server goes on in its own session, in `/`, its standard streams on /dev/null, its pid in the file
//! (`stats`' `pid` too); SIGTERM stops it and removes the file. tern cache and memcached are run the same
//! way and held to the same checks. Every daemon started here is killed on return.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tern_testkit::{start_with_port_file, stats_reply};

const TERN: &str = env!("CARGO_BIN_EXE_tern");

/// Kills the daemon named by a pid file when the test ends, however it ends.
struct Daemon {
    pid: i32,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: a signal to a process this test started.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
    }
}

fn alive(pid: i32) -> bool {
    // The process is gone once it is a zombie too (its parent, init, reaps it in its own time).
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    })
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stats_pid(port: u16) -> i32 {
    let mut conn = tern_testkit::connect(([127, 0, 0, 1], port).into());
    stats_reply(&mut conn, "")
        .lines()
        .find_map(|l| l.strip_prefix("STAT pid "))
        .and_then(|pid| pid.parse().ok())
        .expect("a pid line")
}

fn check_daemon(mut cmd: Command, name: &str) {
    let pid_file: PathBuf =
        std::env::temp_dir().join(format!("tern-daemon-{}-{name}.pid", std::process::id()));
    let _ = std::fs::remove_file(&pid_file);
    cmd.args(["-d", "-P"])
        .arg(&pid_file)
        .args(["-l", "127.0.0.1", "-p", "-1"]);
    let (mut launcher, ports) = start_with_port_file(cmd, name);
    let launcher_pid = launcher.0.id() as i32;
    let status = launcher.0.wait().unwrap();
    assert!(
        status.success(),
        "{name}: the command returns success: {status}"
    );
    wait_until("the pid file", || pid_file.exists());
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .expect("a pid");
    let daemon = Daemon { pid };
    assert_ne!(pid, launcher_pid, "{name}: the server runs in a child");
    assert!(alive(pid), "{name}");
    assert_eq!(stats_pid(ports[0].1), pid, "{name}: stats pid");
    // Its own session, in `/`, its standard streams on /dev/null.
    // SAFETY: getsid has no preconditions.
    assert_eq!(
        unsafe { libc::getsid(pid) },
        pid,
        "{name}: a session of its own"
    );
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap(),
        Path::new("/"),
        "{name}"
    );
    for fd in 0..3 {
        assert_eq!(
            std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).unwrap(),
            Path::new("/dev/null"),
            "{name}: descriptor {fd}"
        );
    }
    // SAFETY: a signal to the daemon this test started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    wait_until("the server to stop", || !alive(pid));
    assert!(
        !pid_file.exists(),
        "{name}: the pid file is removed at exit"
    );
    drop(daemon);
}

#[test]
fn runs_in_the_background_with_a_pid_file_as_memcached_does() {
    if Command::new("memcached").arg("-h").output().is_ok() {
        let mut memcached = Command::new("memcached");
        memcached.args(["-u", "root"]);
        check_daemon(memcached, "memcached");
    } else {
        assert!(
            std::env::var_os("CI").is_none(),
            "memcached is not installed"
        );
    }
    let mut tern = Command::new(TERN);
    tern.arg("cache");
    check_daemon(tern, "tern");
}
