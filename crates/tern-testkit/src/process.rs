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
