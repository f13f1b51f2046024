//! tern cache: a memcached 1.6.18-compatible cache server on the tern runtime (seed 001). It is a thin
//! composition, Pelikan-style: `tern-memcache-proto` decodes and composes the text, meta and binary protocols,
//! `tern-cache-storage` keeps the items, and this crate maps commands onto the store exactly as memcached
//! answers them (checked byte for byte against the real memcached by `tests/differential.rs`), keeps
//! memcached's counters per thread (and its per-prefix `stats detail` counts per loop), reads memcached's
//! command-line flags, logs commands for `-vv`, and runs the server (TCP with optional TLS, optional UDP with
//! per-loop reply sockets, the admin endpoint, memcached's LRU crawler and background expiry).
//!
//! Deliberate differences from memcached (details and the known, not yet fixed ones in
//! `docs/cache-compat.md`):
//! - CAS values are unique and increasing but not consecutive (the store derives them from log positions).
//! - Slab, LRU and extstore administration is answered as memcached answers it, with no effect (the
//!   `lru_crawler` commands work); `stats slabs`/`stats items` describe the store's segments under
//!   memcached's names.
//! - TLS (`-Z`, the runtime's, on rustls) has no TLS 1.0/1.1, no kernel TLS and no OpenSSL cipher strings.
//! - `-l` defaults to 127.0.0.1 and takes a comma-separated list of interfaces (each `ip[:port]`).
//! - The binary protocol's commands are not written to the `-vv` log (memcached dumps their header bytes).
//! - `stats detail` counts per I/O loop and merges on `dump` (memcached: one table behind a global lock).
//! - `-vv` logs memcached's command lines and replies from a writer thread; `NN` is the I/O loop's number, and
//!   the slab-class, listening and connection open/close lines are not written.

mod admin;
mod auth_file;
mod background;
mod binary;
mod cache;
mod clock;
mod conns;
mod crawler;
mod daemon;
mod detail;
mod dispatch;
mod dump;
mod footprint;
mod gauges;
mod meta;
mod process;
mod report;
mod restart;
pub mod sasl;
mod service;
pub mod settings;
pub mod stats;
mod text;
mod udp;
mod vlog;
mod watch;

pub use cache::{Cache, MEMCACHED_VERSION};
pub use service::Frame;
pub use settings::{CacheArgs, Settings};

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::Path;

use anyhow::Context;
use tern_runtime::Server;

/// memcached's message for an address it cannot listen on: by the `-l` interfaces when given, else by port.
fn listen_failure(settings: &Settings, taken: &tern_runtime::AddressInUse) -> String {
    // strerror(EADDRINUSE), as memcached's perror prints it.
    let cause = "Address already in use";
    if settings.interfaces_given {
        format!(
            "failed to listen on one of interface(s) {}: {cause}",
            settings.interfaces
        )
    } else {
        let transport = match taken.transport {
            tern_runtime::Transport::Tcp => "TCP",
            tern_runtime::Transport::Udp => "UDP",
        };
        format!(
            "failed to listen on {transport} port {}: {cause}",
            taken.addr.port()
        )
    }
}

/// The cache server these settings describe, ready to start: its store, and TLS on its TCP listeners when
/// `-Z` is given (but on `notls:` ones).
pub fn server(settings: Settings) -> anyhow::Result<Server<Cache>> {
    let plain = settings.plain_tcp.clone();
    let server = Server::new(settings.runtime_config(), Cache::new(settings)?);
    background::spawn(server.service())?;
    Ok(match server.service().tls().cloned() {
        Some(tls) => server.with_tls(tls, plain),
        None => server,
    })
}

/// The first line of `-V`, `-i` and `-h`: memcached's own (`memcached 1.6.18`), which tools read the
/// server's version from (Dalli's test harness reads `memcached -h`'s), then tern's.
pub fn version_line() -> String {
    format!(
        "memcached {MEMCACHED_VERSION} (tern cache {})",
        env!("CARGO_PKG_VERSION")
    )
}

/// Runs `tern cache` with memcached's flags until SIGINT, SIGTERM or SIGUSR1 (graceful), or `shutdown`.
pub fn run(args: &CacheArgs) -> anyhow::Result<()> {
    if args.version {
        println!("{}", version_line());
        return Ok(());
    }
    if args.license {
        println!(
            "{}\n\nLicensed under {} (SPDX), at your option.",
            version_line(),
            env!("CARGO_PKG_LICENSE")
        );
        return Ok(());
    }
    let mut settings = match args.settings() {
        Ok(settings) => settings,
        Err(e) if e.is::<settings::Unusable>() => {
            // memcached's words alone, and its exit code (EX_USAGE).
            eprintln!("{e}");
            std::process::exit(64);
        }
        Err(e) => return Err(e),
    };
    // As memcached: the core limit while still privileged, the memory lock after the fork (a child does
    // not inherit it).
    if args.enable_coredumps {
        process::enable_coredumps()?;
    }
    if let Some(user) = &settings.user {
        drop_privileges(user)?;
    }
    // As memcached: after the identity change, before anything else starts (a fork keeps one thread).
    if args.daemon {
        daemon::daemonize(settings.verbosity > 0)?;
    }
    if settings.lock_memory {
        process::lock_memory();
    }
    let _log = tern_metrics::logging::init(&tern_metrics::logging::LogConfig {
        filter: match settings.verbosity {
            0 => "warn",
            1 => "info",
            _ => "debug",
        }
        .into(),
        ..Default::default()
    })?;
    if settings.tcp.is_empty() && settings.udp.is_empty() && settings.unix.is_none() {
        let _pid_file = daemon::PidFile::of(args);
        return serve_nothing();
    }
    // `-e`: what the last graceful stop saved, if it fits these settings (it may size the index).
    let saved = restart::check(&mut settings)?;
    // The admin endpoint first: once the server accepts, clients may take every descriptor.
    let admin = match settings.admin {
        Some(addr) => Some(tern_metrics::AdminServer::builder(addr).start()?),
        None => None,
    };
    let server = match server(settings.clone()) {
        Ok(server) => server,
        Err(e) if e.is::<settings::Unusable>() => {
            // memcached's exit code (EX_USAGE) for TLS settings it cannot use.
            eprintln!("{e}");
            std::process::exit(64);
        }
        Err(e) => return Err(e),
    };
    let cache = server.service().clone();
    if let Some(saved) = &saved {
        restart::restore(saved, &cache.store, &cache.clock);
    }
    let _store_gauges = gauges::store_gauges(&cache);
    let mut running = match server.start() {
        Ok(running) => running,
        Err(e) => {
            if let Some(taken) = tern_runtime::AddressInUse::of(&e) {
                // memcached's words and exit code (EX_OSERR) for an address something else serves.
                eprintln!("{}", listen_failure(&settings, taken));
                std::process::exit(71);
            }
            return Err(e).context("starting tern cache");
        }
    };
    let _pid_file = daemon::PidFile::of(args);
    if let Some(path) = std::env::var_os("MEMCACHED_PORT_FILENAME") {
        if settings.unix.is_none() {
            write_port_file(Path::new(&path), running.local_addrs(), running.udp_addrs());
        }
    }
    match (running.local_addr(), running.udp_addr()) {
        (Some(tcp), Some(udp)) => println!("tern cache listening on tcp {tcp} and udp {udp}"),
        (Some(tcp), None) => println!("tern cache listening on {tcp}"),
        (None, Some(udp)) => println!("tern cache listening on udp {udp}"),
        (None, None) => {
            if let Some((path, _)) = &settings.unix {
                println!("tern cache listening on {}", path.display());
            }
        }
    }
    // memcached rereads its -Y file on SIGHUP; one that cannot be read leaves the users as they were.
    if let Some(file) = settings.ascii_auth.clone() {
        running.on_hangup(move || match file.reload() {
            Ok(()) => tracing::info!("SIGHUP: reloaded {}", file.path.display()),
            Err(e) => tracing::warn!("SIGHUP: {e}; the users stay as they were"),
        });
    }
    let stopped = running.run_until_signal()?;
    if let Some(a) = admin {
        a.set_draining();
        a.shutdown()?;
    }
    cache.crawler.stop_thread();
    // memcached saves its restartable cache on a graceful stop only (SIGUSR1, `shutdown graceful`).
    if stopped == tern_runtime::Stopped::Graceful
        || cache
            .graceful_stop
            .load(std::sync::atomic::Ordering::Relaxed)
    {
        restart::save(&settings, &cache.store, &cache.clock)?;
    }
    Ok(())
}

/// `-p 0` without `-U` or `-s`: memcached starts anyway, listening on nothing (its port file empty), until
/// a signal stops it; so does tern.
fn serve_nothing() -> anyhow::Result<()> {
    tracing::warn!("-p 0 and no -U or -s: listening on nothing until SIGTERM or SIGINT");
    if let Some(path) = std::env::var_os("MEMCACHED_PORT_FILENAME") {
        write_port_file(Path::new(&path), &[], &[]);
    }
    // SAFETY: a signal set built and waited on by this thread only; the signals are blocked first so
    // that sigwait takes them instead of their default action.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        let mut signal = 0;
        libc::sigwait(&set, &mut signal);
    }
    Ok(())
}

/// memcached's port file, for test harnesses that start it on free ports (`-p -1`, `-U -1`): a line per
/// listening socket, `TCP INET: <port>` (`INET6` for IPv6, `UDP` for datagrams), written to `<path>.lck` and
/// renamed to `path` once whole, so a reader never sees half of it. As memcached, a file that cannot be
/// written is reported on standard error and the server runs on.
fn write_port_file(path: &Path, tcp: &[SocketAddr], udp: &[SocketAddr]) {
    let mut text = String::new();
    for (transport, addrs) in [("TCP", tcp), ("UDP", udp)] {
        for addr in addrs {
            let family = if addr.is_ipv4() { "INET" } else { "INET6" };
            text += &format!("{transport} {family}: {}\n", addr.port());
        }
    }
    let mut partial = path.as_os_str().to_owned();
    partial.push(".lck");
    let written = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&partial)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .and_then(|()| std::fs::rename(&partial, path));
    if let Err(e) = written {
        eprintln!("Failed to write \"{}\": {e}", path.display());
    }
}

/// memcached's `-u`: when started as root, switch to `user` before serving.
fn drop_privileges(user: &str) -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(());
    }
    let name = std::ffi::CString::new(user).context("bad -u user name")?;
    // SAFETY: getpwnam with a valid C string; the result is read before any other passwd call.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        anyhow::bail!("can't find the user {user} to switch to");
    }
    // SAFETY: pw is non-null and points to a passwd entry.
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    // SAFETY: plain system calls; the group first, while we still may.
    if unsafe { libc::setgid(gid) } != 0 || unsafe { libc::setuid(uid) } != 0 {
        anyhow::bail!(
            "failed to assume the identity of {user}: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}
