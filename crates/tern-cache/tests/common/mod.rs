//! Shared by the integration tests: an in-process tern cache on 127.0.0.1 port 0, the real memcached 1.6.18
//! on a free port (killed on drop), raw-socket exchanges, and a guard for the external tools.
#![allow(dead_code, unused_imports)] // each test binary uses its own part of this module

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use tern_cache::{Cache, CacheArgs, Settings};
use tern_runtime::RunningServer;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: CacheArgs,
}

/// A tern cache served from this process, on 127.0.0.1 port 0 (and UDP when `udp`), stopped on drop.
pub struct Tern {
    running: Option<RunningServer>,
    pub addr: SocketAddr,
    pub udp: Option<SocketAddr>,
    pub cache: Arc<Cache>,
}

impl Tern {
    /// Starts with memcached flags (`-p`/`-U`/`-l` are chosen here).
    pub fn start(flags: &[&str]) -> Tern {
        Tern::start_with(flags, false)
    }

    pub fn start_udp(flags: &[&str]) -> Tern {
        Tern::start_with(flags, true)
    }

    fn start_with(flags: &[&str], udp: bool) -> Tern {
        Tern::start_tweaked(flags, udp, |_| {})
    }

    /// Starts with memcached flags, then lets `tweak` change the settings (e.g. where `-vv` lines go).
    pub fn start_tweaked(flags: &[&str], udp: bool, tweak: impl FnOnce(&mut Settings)) -> Tern {
        let argv = ["tern", "-p", "1", "-t", "2"].iter().chain(flags);
        let mut settings = Cli::try_parse_from(argv)
            .expect("flags parse")
            .args
            .settings()
            .expect("flags are valid");
        tweak(&mut settings);
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        settings.tcp = vec![any];
        settings.udp = if udp { vec![any] } else { Vec::new() };
        let server = tern_cache::server(settings).expect("cache");
        let cache = server.service().clone();
        let running = server.start().expect("tern cache starts");
        Tern {
            addr: running.local_addr().expect("tcp address"),
            udp: running.udp_addr(),
            running: Some(running),
            cache,
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn connect(&self) -> TcpStream {
        connect(self.addr)
    }

    pub fn connections(&self) -> usize {
        self.running
            .as_ref()
            .map_or(0, |r| r.control().connections())
    }

    /// Stops the server and waits for its threads.
    pub fn stop(&mut self) {
        if let Some(running) = self.running.take() {
            running.shutdown();
            running.join();
        }
    }
}

impl Drop for Tern {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A tern cache from exactly these flags (its own `-p`, `-U`, `-l`), for tests of the listening flags.
pub fn start_exact(flags: &[&str]) -> RunningServer {
    let settings = Cli::try_parse_from(["tern"].iter().chain(flags))
        .expect("flags parse")
        .args
        .settings()
        .expect("flags are valid");
    tern_cache::server(settings)
        .expect("cache")
        .start()
        .expect("tern cache starts")
}

pub use tern_testkit::{connect, free_port, free_udp_port, have, ChildGuard, Memcached};

/// Sent after a stream; its reply marks the end of the stream's replies (no stream uses this key).
pub const SENTINEL: &[u8] = b"mg tern-test-sentinel Oend k\r\n";
pub const SENTINEL_REPLY: &[u8] = b"EN Oend ktern-test-sentinel\r\n";

/// Writes `input`, then the sentinel, and reads every reply up to the sentinel's (or to the close).
/// Returns the replies and whether the server closed the connection.
pub fn exchange(conn: &mut TcpStream, input: &[u8]) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let mut written = conn.write_all(input);
    if written.is_ok() {
        if !input.is_empty() && !input.ends_with(b"\n") {
            // Let the server read the unterminated line on its own before the sentinel completes it.
            std::thread::sleep(Duration::from_millis(30));
        }
        written = conn.write_all(SENTINEL);
    }
    if written.is_err() {
        // The server closed the connection (what it wrote before may be lost to the reset).
        let _ = conn.read_to_end(&mut out);
        return (out, true);
    }
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match conn.read(&mut buf) {
            Ok(0) => return (out, true),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return (out, true),
            Err(e) => panic!(
                "no end of replies to {:?} ... {:?}: {e}; got {:?}",
                String::from_utf8_lossy(&input[..input.len().min(300)]),
                String::from_utf8_lossy(&input[input.len().saturating_sub(600)..]),
                String::from_utf8_lossy(&out)
            ),
        }
        if out.ends_with(SENTINEL_REPLY) {
            out.truncate(out.len() - SENTINEL_REPLY.len());
            return (out, false);
        }
    }
}

/// One request on a fresh connection; the replies as text.
pub fn ask(addr: SocketAddr, input: &str) -> String {
    let mut conn = connect(addr);
    String::from_utf8_lossy(&exchange(&mut conn, input.as_bytes()).0).into_owned()
}

/// `name value` for each of `names` in one `stats` reply (`name absent` for a missing one), for comparing
/// counters between servers.
pub fn stat_values(addr: SocketAddr, names: &[&str]) -> Vec<String> {
    let stats = ask(addr, "stats\r\n");
    names
        .iter()
        .map(|name| {
            let value = stats.lines().find_map(|l| {
                l.strip_prefix("STAT ")?
                    .strip_prefix(name)?
                    .strip_prefix(' ')
            });
            format!("{name} {}", value.unwrap_or("absent"))
        })
        .collect()
}

/// The value of one `stats` line.
pub fn stat(addr: SocketAddr, group: &str, name: &str) -> Option<String> {
    let command = if group.is_empty() {
        "stats\r\n".to_string()
    } else {
        format!("stats {group}\r\n")
    };
    let replies = ask(addr, &command);
    replies.lines().find_map(|line| {
        let mut words = line.split(' ');
        (words.next() == Some("STAT") && words.next() == Some(name))
            .then(|| words.next().unwrap_or("").to_string())
    })
}

/// Sends each command on one connection, one at a time, and returns every reply in order.
pub fn replies_to(addr: SocketAddr, commands: &[Vec<u8>]) -> Vec<u8> {
    let mut conn = connect(addr);
    let mut all = Vec::new();
    for command in commands {
        let (reply, closed) = exchange(&mut conn, command);
        assert!(!closed, "{:?}", String::from_utf8_lossy(command));
        all.extend_from_slice(&reply);
    }
    all
}

/// Sends one binary request alone and reads one response packet back; `None` if the server closed the
/// connection instead.
pub fn binary_packet(conn: &mut TcpStream, request: &[u8]) -> Option<Vec<u8>> {
    use tern_memcache_proto::binary::HEADER_LEN;
    conn.write_all(request).ok()?;
    let mut header = [0u8; HEADER_LEN];
    conn.read_exact(&mut header).ok()?;
    let bodylen = u32::from_be_bytes(header[8..12].try_into().unwrap()) as usize;
    let mut packet = header.to_vec();
    packet.resize(HEADER_LEN + bodylen, 0);
    conn.read_exact(&mut packet[HEADER_LEN..]).ok()?;
    Some(packet)
}

/// A binary response's status.
pub fn binary_status(packet: &[u8]) -> u16 {
    u16::from_be_bytes([packet[6], packet[7]])
}

/// A Cyrus SASL setup of memcached's in a directory of its own (removed on drop): a user database written
/// by `saslpasswd2` and a `memcached.conf` with a `mech_list` naming it, for memcached (`SASL_CONF_PATH`)
/// and tern alike.
pub struct Cyrus {
    pub dir: std::path::PathBuf,
}

impl Cyrus {
    /// `users`: name (`user` or `user@realm`; the host's realm when none is named) and password.
    pub fn new(name: &str, mech_list: &str, users: &[(&str, &str)]) -> Cyrus {
        use std::process::{Command, Stdio};
        let dir = tern_testkit::files::temp_dir(name);
        let sasldb = dir.join("sasldb2");
        for (user, password) in users {
            let mut saslpasswd = Command::new("saslpasswd2")
                .args(["-p", "-a", "memcached", "-c", "-f"])
                .arg(&sasldb)
                .arg(user)
                .stdin(Stdio::piped())
                .spawn()
                .expect("saslpasswd2 runs");
            let mut stdin = saslpasswd.stdin.take().unwrap();
            stdin.write_all(password.as_bytes()).unwrap();
            drop(stdin);
            assert!(saslpasswd.wait().unwrap().success(), "saslpasswd2 {user}");
        }
        std::fs::write(
            dir.join("memcached.conf"),
            format!(
                "mech_list: {mech_list}\nsasldb_path: {}\n",
                sasldb.display()
            ),
        )
        .unwrap();
        Cyrus { dir }
    }

    /// memcached with `-S` reading this setup.
    pub fn memcached(&self) -> tern_testkit::Memcached {
        tern_testkit::Memcached::start_with_env(
            &["-B", "binary", "-S"],
            &[("SASL_CONF_PATH", self.dir.as_path())],
        )
    }

    /// tern with `-S` reading the same setup.
    pub fn tern(&self) -> Tern {
        let conf = self.dir.to_str().expect("a UTF-8 path").to_owned();
        Tern::start_tweaked(&["-S"], false, move |s| {
            s.sasl = Some(tern_cache::sasl::Sasl::new(Some(&conf), None).expect("the setup reads"))
        })
    }
}

impl Drop for Cyrus {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
