//! The real systems the tests compare tern with or talk to, each on free loopback ports, waited for until
//! it serves, and stopped on drop. A port found free may be taken by another test's server before the peer
//! binds it (the peer then exits): such a port is given up for another, a few times.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::net::{free_port, free_udp_port};
use crate::process::{have, is_root, ChildGuard};

/// How long a peer may take to start serving.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Ports tried before a peer is declared unable to start.
const PORT_TRIES: usize = 5;

fn loopback(port: u16) -> SocketAddr {
    ([127, 0, 0, 1], port).into()
}

/// Sends `request` on a fresh connection to `addr` and whether the first reply line starts with `expect`.
fn answers(addr: SocketAddr, request: &[u8], expect: &str) -> bool {
    let Ok(mut conn) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
    let mut line = String::new();
    conn.write_all(request).is_ok()
        && BufReader::new(conn).read_line(&mut line).is_ok()
        && line.starts_with(expect)
}

/// Starts `command` on a fresh port until `serving(port)` holds, trying a few ports; panics if none works.
fn start_on_free_port(
    what: &str,
    mut command: impl FnMut(u16) -> Command,
    serving: impl Fn(u16) -> bool,
) -> (ChildGuard, u16) {
    for _ in 0..PORT_TRIES {
        let port = free_port();
        let mut child = ChildGuard(
            command(port)
                .spawn()
                .unwrap_or_else(|e| panic!("{what} starts: {e}")),
        );
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if serving(port) {
                return (child, port);
            }
            if let Ok(Some(_)) = child.0.try_wait() {
                break; // the port was taken: try another
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    panic!("{what} did not start on any of {PORT_TRIES} ports");
}

/// The real memcached (the Debian package, 1.6.18 on the CI image), text protocol only (`-B ascii`, which
/// later `flags` may override), one worker thread, killed on drop.
pub struct Memcached {
    child: ChildGuard,
    pub addr: SocketAddr,
    /// Its UDP address, when started with UDP.
    pub udp: Option<SocketAddr>,
}

impl Memcached {
    pub fn start(flags: &[&str]) -> Memcached {
        Memcached::start_logging(flags, false, None)
    }

    pub fn start_with(flags: &[&str], udp: bool) -> Memcached {
        Memcached::start_logging(flags, udp, None)
    }

    /// Starts memcached with its standard error going to `stderr` (for `-vv`), if given.
    pub fn start_logging(flags: &[&str], udp: bool, stderr: Option<&Path>) -> Memcached {
        Memcached::start_in(flags, udp, stderr, &[])
    }

    /// Starts memcached with these environment variables set (`SASL_CONF_PATH` for `-S`).
    pub fn start_with_env(flags: &[&str], env: &[(&str, &Path)]) -> Memcached {
        Memcached::start_in(flags, false, None, env)
    }

    fn start_in(
        flags: &[&str],
        udp: bool,
        stderr: Option<&Path>,
        env: &[(&str, &Path)],
    ) -> Memcached {
        let udp_port = if udp { free_udp_port() } else { 0 };
        let (child, port) = start_on_free_port(
            "memcached",
            |port| {
                let mut cmd = Command::new("memcached");
                cmd.args(["-B", "ascii", "-l", "127.0.0.1", "-t", "1"])
                    .args(["-p", &port.to_string(), "-U", &udp_port.to_string()])
                    .args(flags)
                    .envs(env.iter().copied())
                    .stdout(Stdio::null())
                    .stderr(match stderr {
                        Some(path) => {
                            Stdio::from(std::fs::File::create(path).expect("memcached's log file"))
                        }
                        None => Stdio::null(),
                    });
                if is_root() {
                    cmd.args(["-u", "root"]);
                }
                cmd
            },
            // A connection only, no command: a command would show in the `-vv` log a test compares.
            |port| TcpStream::connect(loopback(port)).is_ok(),
        );
        Memcached {
            child,
            addr: loopback(port),
            udp: udp.then(|| loopback(udp_port)),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// How memcached ended, if it has: a test that loses its connection tells memcached's own crash apart
    /// from a refusal.
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child.0.try_wait().ok().flatten()
    }
}

/// A Redis server without persistence, killed on drop.
pub struct Redis {
    _child: ChildGuard,
    pub addr: SocketAddr,
}

impl Redis {
    /// `None` (after saying why) when redis-server is not installed.
    pub fn start() -> Option<Redis> {
        if !have("redis-server") {
            return None;
        }
        let (child, port) = start_on_free_port(
            "redis-server",
            |port| {
                let mut cmd = Command::new("redis-server");
                cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                    .args(["--save", "", "--appendonly", "no"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                cmd
            },
            |port| answers(loopback(port), b"PING\r\n", "+PONG"),
        );
        Some(Redis {
            _child: child,
            addr: loopback(port),
        })
    }

    /// The URL of its database 0.
    pub fn url(&self) -> String {
        format!("redis://{}/0", self.addr)
    }
}

/// Where Debian's postgresql-15 package puts its programs.
const POSTGRES_BIN: &str = "/usr/lib/postgresql/15/bin";

/// A PostgreSQL 15 server in a fresh temporary directory, stopped (fast shutdown) and removed on drop.
pub struct Postgres {
    child: ChildGuard,
    pub port: u16,
    dir: PathBuf,
}

/// The uid and gid to run PostgreSQL as: `postgres`'s when we are root (it refuses to run as root).
fn postgres_user() -> Option<(u32, u32)> {
    let id = |args: &[&str]| -> Option<u32> {
        let out = Command::new("id").args(args).output().ok()?;
        String::from_utf8(out.stdout).ok()?.trim().parse().ok()
    };
    if !is_root() {
        return None;
    }
    Some((id(&["-u", "postgres"])?, id(&["-g", "postgres"])?))
}

fn as_postgres(mut cmd: Command) -> Command {
    use std::os::unix::process::CommandExt;
    if let Some((uid, gid)) = postgres_user() {
        cmd.uid(uid).gid(gid);
    }
    cmd
}

impl Postgres {
    /// Starts a fresh server (`name` tells its directory apart), or `None` (after saying why) when PostgreSQL
    /// 15 is not installed.
    pub fn start(name: &str) -> Option<Postgres> {
        let bin = Path::new(POSTGRES_BIN);
        if !have(&format!("{POSTGRES_BIN}/initdb")) {
            return None;
        }
        let dir = std::env::temp_dir().join(format!("tern-pg-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("postgres directory");
        if let Some((uid, gid)) = postgres_user() {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).expect("chown to postgres");
        }
        let data = dir.join("data");
        let status = as_postgres(Command::new(bin.join("initdb")))
            .args(["-D", data.to_str().expect("utf-8 path")])
            .args([
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ])
            .stdout(Stdio::null())
            .status()
            .expect("initdb runs");
        assert!(status.success(), "initdb failed");
        let (child, port) = start_on_free_port(
            "postgres",
            |port| {
                let log = std::fs::File::create(dir.join("postgres.log")).expect("postgres log");
                let mut cmd = as_postgres(Command::new(bin.join("postgres")));
                cmd.args(["-D", data.to_str().expect("utf-8 path")])
                    .args([
                        "-p",
                        &port.to_string(),
                        "-k",
                        dir.to_str().expect("utf-8 path"),
                    ])
                    .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
                    .args(["-c", "shared_buffers=16MB", "-c", "max_connections=20"])
                    .stdout(Stdio::null())
                    .stderr(log);
                cmd
            },
            |port| {
                Command::new(bin.join("pg_isready"))
                    .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string()])
                    .status()
                    .is_ok_and(|s| s.success())
            },
        );
        Some(Postgres { child, port, dir })
    }

    /// The URL to connect as the `postgres` superuser (trust authentication).
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // SIGINT is PostgreSQL's fast shutdown: clients are disconnected, shared memory released.
        // SAFETY: kill on the pid of our own child.
        unsafe { libc::kill(self.child.pid() as libc::pid_t, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(self.child.0.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// twemproxy (nutcracker) with one pool named `tern`, killed and its directory removed on drop.
pub struct Nutcracker {
    _child: ChildGuard,
    pub addr: SocketAddr,
    dir: PathBuf,
}

impl Nutcracker {
    /// Starts nutcracker with a pool configured by `pool` (YAML lines indented by two spaces: `hash`,
    /// `distribution`, `servers`...; `listen` is added here).
    pub fn start(pool: &str) -> Nutcracker {
        let dir = std::env::temp_dir().join(format!(
            "tern-nutcracker-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).expect("nutcracker directory");
        let (child, port) = start_on_free_port(
            "nutcracker",
            |port| {
                let conf = dir.join("nutcracker.yml");
                std::fs::write(&conf, format!("tern:\n  listen: 127.0.0.1:{port}\n{pool}"))
                    .expect("nutcracker.yml");
                let mut cmd = Command::new("nutcracker");
                cmd.arg("-c")
                    .arg(&conf)
                    .args(["-s", &free_port().to_string(), "-a", "127.0.0.1"])
                    .arg("-p")
                    .arg(dir.join("nutcracker.pid"))
                    .arg("-o")
                    .arg(dir.join("nutcracker.log"))
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                cmd
            },
            |port| TcpStream::connect(loopback(port)).is_ok(),
        );
        Nutcracker {
            _child: child,
            addr: loopback(port),
            dir,
        }
    }
}

impl Drop for Nutcracker {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
