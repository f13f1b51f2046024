//! memcached's `-d` (run in the background) and `-P` (the pid file), done as memcached does them: fork, the
//! parent exits at once with success, the child starts a session, moves to `/` and, unless verbose, points
//! its standard streams at `/dev/null`; the pid file is written through `<file>.tmp` once the server
//! listens, and removed at exit when the server was daemonized.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::settings::CacheArgs;

/// Detaches the process from its terminal. Must run before any thread starts: a forked child keeps only
/// the thread that forked.
pub(crate) fn daemonize(keep_streams: bool) -> anyhow::Result<()> {
    let threads: Vec<String> = std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .flatten()
                .filter_map(|task| std::fs::read_to_string(task.path().join("comm")).ok())
                .map(|name| name.trim().to_owned())
                .collect()
        })
        .unwrap_or_default();
    if threads.len() > 1 {
        anyhow::bail!(
            "-d: cannot run in the background once threads have started ({})",
            threads.join(", ")
        );
    }
    // SAFETY: the process has one thread (checked above), so the child is a full copy of it.
    match unsafe { libc::fork() } {
        -1 => {
            return Err(std::io::Error::last_os_error())
                .context("failed to daemon() in order to daemonize")
        }
        0 => {}
        // SAFETY: the parent leaves at once without running destructors or flushing anything the child
        // also holds, as memcached's `_exit`.
        _ => unsafe { libc::_exit(0) },
    }
    // SAFETY: plain system calls on the child's own process and descriptors.
    unsafe {
        if libc::setsid() == -1 {
            return Err(std::io::Error::last_os_error()).context("setsid");
        }
    }
    std::env::set_current_dir("/").context("chdir /")?;
    if !keep_streams {
        let null = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
            .context("/dev/null")?;
        use std::os::fd::AsRawFd;
        for fd in [libc::STDIN_FILENO, libc::STDOUT_FILENO, libc::STDERR_FILENO] {
            // SAFETY: duplicating an open descriptor over a standard one.
            if unsafe { libc::dup2(null.as_raw_fd(), fd) } < 0 {
                return Err(std::io::Error::last_os_error()).context("dup2");
            }
        }
    }
    Ok(())
}

/// The `-P` file: the process's pid, written whole or not at all. A file naming a live process is
/// replaced with a warning, as memcached does; failures are reported and the server runs on.
pub(crate) struct PidFile {
    path: PathBuf,
    remove_at_exit: bool,
}

impl PidFile {
    /// `-P`'s file, written now; removed when dropped if the server runs with `-d` (as memcached).
    pub(crate) fn of(args: &CacheArgs) -> Option<PidFile> {
        let path = args.pid_file.as_deref()?;
        Some(PidFile::write(path, args.daemon))
    }

    fn write(path: &Path, remove_at_exit: bool) -> PidFile {
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|text| text.trim().parse::<i32>().ok())
        {
            // SAFETY: signal 0 only asks whether the process exists.
            if unsafe { libc::kill(pid, 0) } == 0 {
                eprintln!("WARNING: The pid file contained the following (running) pid: {pid}");
            }
        }
        let mut partial = path.as_os_str().to_owned();
        partial.push(".tmp");
        let written = std::fs::write(&partial, format!("{}\n", std::process::id()))
            .and_then(|()| std::fs::rename(&partial, path));
        if let Err(e) = written {
            eprintln!("Could not write the pid file {}: {e}", path.display());
        }
        PidFile {
            path: path.to_owned(),
            remove_at_exit,
        }
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        if self.remove_at_exit {
            if let Err(e) = std::fs::remove_file(&self.path) {
                eprintln!("Could not remove the pid file {}: {e}", self.path.display());
            }
        }
    }
}
