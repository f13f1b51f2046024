//! Child processes that never outlive their test, and the check that a peer is installed.

use std::process::{Child, Command, Stdio};

/// A child process killed and reaped on drop.
pub struct ChildGuard(pub Child);

impl ChildGuard {
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether `program` (a name on the PATH, or a path) is installed. A test that needs a missing one says so and
/// passes on a developer's machine; under CI (where `scripts/install-test-deps.sh` installs every peer
/// first) a missing one is a failure.
pub fn have(program: &str) -> bool {
    let found = if program.contains('/') {
        std::path::Path::new(program).exists()
    } else {
        Command::new("sh")
            .args(["-c", &format!("command -v {program}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "`{program}` is missing in CI"
        );
        eprintln!(
            "SKIPPED: `{program}` is not installed (scripts/install-test-deps.sh installs it)"
        );
    }
    found
}

/// Whether this process runs as root (memcached then needs `-u root`, PostgreSQL another user).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Starts a memcached-compatible server (`cmd`, given `-p -1` and/or `-U -1`) with `$MEMCACHED_PORT_FILENAME`
/// set, the way memcached's own test harness finds its free ports, and returns it with the `(KIND, port)` pairs
/// it wrote (`("TCP INET", 40123)`, ...). Asking the server for its port, instead of picking a free one and
/// passing it, leaves no window in which another test's server can take the port.
pub fn start_with_port_file(mut cmd: Command, name: &str) -> (ChildGuard, Vec<(String, u16)>) {
    let path = std::env::temp_dir().join(format!("tern-port-file-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let child = ChildGuard(
        cmd.env("MEMCACHED_PORT_FILENAME", &path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("server starts"),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    // The server writes `<path>.lck` and renames it: the file is whole once it exists.
    let text = loop {
        if let Ok(text) = std::fs::read_to_string(&path) {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no port file at {}",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let _ = std::fs::remove_file(&path);
    let ports = text
        .lines()
        .map(|line| {
            let (kind, port) = line.rsplit_once(": ").expect("`KIND: PORT`");
            (kind.to_owned(), port.parse().expect("a port number"))
        })
        .collect();
    (child, ports)
}
