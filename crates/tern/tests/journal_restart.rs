//! `tern pacer serve --journal-dir D` restarts at once after `kill -9` of the previous process (the lock of a
//! dead or dying holder is taken over), while a second live process on the same directory is refused.

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tern_testkit::free_port;

const TERN: &str = env!("CARGO_BIN_EXE_tern");
const CAMPAIGNS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/default-campaigns.toml");

/// Children killed and reaped on drop.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn pacer(dir: &std::path::Path, port: u16) -> Command {
    let mut cmd = Command::new(TERN);
    cmd.args(["pacer", "serve", "--config", CAMPAIGNS, "--journal-dir"])
        .arg(dir)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null());
    cmd
}

/// Waits until the pacer on `port` accepts, or fails if `child` exits first.
fn wait_serving(child: &mut Child, port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the pacer exited instead of serving: {status}");
        }
        assert!(Instant::now() < deadline, "the pacer did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_restart_right_after_kill_9_takes_the_journal_over() {
    let dir = std::env::temp_dir().join(format!("tern-journal-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port();
    let mut children = Children(vec![pacer(&dir, port)
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()]);
    wait_serving(children.0.last_mut().unwrap(), port);
    let holder = children.0[0].id();

    // A second live process on the same directory is refused at once, naming the holder.
    let second = pacer(&dir, free_port())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(!second.status.success());
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        err.contains(&format!("in use by pacer pid {holder}")),
        "{err}"
    );

    for _ in 0..10 {
        // SIGKILL without waiting for the process to be gone, then start the next one at once: it serves
        // (wait_serving fails if it exits instead; its error goes to this test's output).
        let killed = children.0.last().unwrap().id();
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(killed as libc::pid_t, libc::SIGKILL) };
        let port = free_port();
        children
            .0
            .push(pacer(&dir, port).stderr(Stdio::inherit()).spawn().unwrap());
        wait_serving(children.0.last_mut().unwrap(), port);
    }
    drop(children);
    let _ = std::fs::remove_dir_all(&dir);
}
