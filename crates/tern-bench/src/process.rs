//! Child processes for the experiments: start a server, find its address, read its RSS, and
//! stop it when dropped (experiments never leave processes behind).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// Ports for the servers started here come from outside the kernel's ephemeral range: a port from inside
/// it (bound to port 0 and released) can be taken meanwhile as a client connection's source port, or the
/// readiness probe's connection can connect to itself, and the server then fails to bind (a test saw a
/// refused connection in CI).
pub use tern_testkit::free_port;
pub use tern_testkit::ChildGuard;

/// Starts `tern <args>` (the running executable) and reads the address it prints as the last word of its
/// first line of standard output.
pub fn spawn_tern(args: &[&str]) -> anyhow::Result<(ChildGuard, SocketAddr)> {
    let exe = std::env::current_exe().context("finding the tern executable")?;
    let mut child = Command::new(exe)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting tern")?;
    let stdout = child.stdout.take().expect("piped stdout");
    let guard = ChildGuard(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    let addr = line
        .split_whitespace()
        .last()
        .and_then(|w| w.parse().ok())
        .with_context(|| format!("no address in tern's first line: {line:?}"))?;
    Ok((guard, addr))
}

/// A command as a shell line would give it: the program and its arguments, separated by spaces.
fn command_line(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Starts a command that listens on `addr` and waits until it accepts connections.
pub fn spawn_listening(cmd: &mut Command, addr: SocketAddr) -> anyhow::Result<ChildGuard> {
    let child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn()?;
    let guard = ChildGuard(child);
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect(addr).is_err() {
        if Instant::now() > deadline {
            bail!("{} did not start listening on {addr}", command_line(cmd));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(guard)
}

/// Resident set size of a process, in bytes (VmRSS of /proc/<pid>/status).
pub fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .context("no VmRSS")?;
    Ok(kb * 1024)
}

/// Raises this process's open-file limit to its hard limit (children inherit it). Returns the new limit.
pub fn raise_nofile_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
    lim.rlim_cur
}
