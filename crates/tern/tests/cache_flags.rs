//! memcached 1.6.18's command-line flags that act on the process or on its slab classes (`-f`, `-n`, `-k`,
//! `-r`, `-L`, `-N`, `-i`), on tern cache and on memcached (real processes): the same flags start both or
//! stop both with memcached's words, and do what memcached's do.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

use tern_testkit::{have, start_with_port_file, stats_reply, ChildGuard};

mod common;
use common::CacheServer as Server;

fn command(server: Server, args: &[&str]) -> Command {
    let mut cmd = server.command();
    cmd.args(["-l", "127.0.0.1", "-U", "0"]).args(args);
    cmd
}

fn start(server: Server, args: &[&str], name: &str) -> (ChildGuard, TcpStream) {
    let mut all = vec!["-p", "-1"];
    all.extend_from_slice(args);
    let (child, ports) = start_with_port_file(command(server, &all), name);
    let conn = TcpStream::connect(("127.0.0.1", ports[0].1)).expect("connects");
    (child, conn)
}

/// The servers to compare: tern, and memcached when installed.
fn servers() -> Vec<Server> {
    let mut servers = vec![Server::Tern];
    if have("memcached") {
        servers.push(Server::Memcached);
    }
    servers
}

fn ask(conn: &mut TcpStream, request: &[u8], reply_end: &[u8]) -> String {
    conn.write_all(request).unwrap();
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    while !reply.ends_with(reply_end) {
        let n = conn.read(&mut buf).expect("a reply");
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&reply));
        reply.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&reply).into_owned()
}

/// `me`'s size and class of items of several sizes, and `stats settings`' slab lines.
fn footprints(conn: &mut TcpStream) -> Vec<String> {
    let mut seen = Vec::new();
    for (i, len) in [1usize, 30, 100, 1000, 20_000, 300_000, 900_000]
        .iter()
        .enumerate()
    {
        let set = format!("set k{i} {i} 0 {len}\r\n{}\r\n", "v".repeat(*len));
        assert_eq!(ask(conn, set.as_bytes(), b"\r\n"), "STORED\r\n");
        let me = ask(conn, format!("me k{i}\r\n").as_bytes(), b"\r\n");
        // Access times and CAS values are each server's own.
        seen.extend(
            me.split_whitespace()
                .filter(|w| w.starts_with("cls=") || w.starts_with("size="))
                .map(str::to_owned),
        );
    }
    let settings = stats_reply(conn, "settings");
    seen.extend(
        settings
            .lines()
            .filter(|l| l.starts_with("STAT growth_factor") || l.starts_with("STAT chunk_size"))
            .map(str::to_owned),
    );
    seen
}

#[test]
fn the_slab_flags_give_me_and_stats_settings_memcached_s_numbers() {
    let cases: [&[&str]; 4] = [
        &[],
        &["-f", "2", "-n", "100"],
        // Never grows past 96 bytes: 62 classes of 96, then the largest.
        &["-f", "1.01"],
        // Read as C's atof and atoi: the leading number.
        &["-f", "1.5x", "-n", "64junk"],
    ];
    for (n, args) in cases.iter().enumerate() {
        let seen: Vec<Vec<String>> = servers()
            .into_iter()
            .map(|server| {
                let (_child, mut conn) = start(server, args, &format!("slab-{n}-{server:?}"));
                footprints(&mut conn)
            })
            .collect();
        assert_eq!(seen[0].len(), 7 * 2 + 2, "{args:?}: {:?}", seen[0]);
        if let [tern, memcached] = &seen[..] {
            assert_eq!(tern, memcached, "{args:?}");
        }
    }
}

#[test]
fn refused_flags_stop_both_with_memcached_s_words() {
    for (args, words) in [
        (&["-f", "1"][..], "Factor must be greater than 1"),
        (&["-f", "abc"], "Factor must be greater than 1"),
        (&["-n", "0"], "Chunk size must be greater than 0"),
        (&["-n", "x"], "Chunk size must be greater than 0"),
        (
            &["-N", "0"],
            "Maximum number of NAPI IDs must be greater than 0",
        ),
    ] {
        for server in servers() {
            let out = command(server, args)
                .args(["-p", "0"])
                .stdin(Stdio::null())
                .output()
                .expect("runs");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{server:?} {args:?}: {stderr}");
            assert!(stderr.contains(words), "{server:?} {args:?}: {stderr}");
        }
    }
}

/// One field of /proc/PID/status, in kB.
fn status_kb(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .trim()
                .strip_suffix(" kB")?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("{field} in {status}"))
}

#[test]
fn lock_memory_coredumps_and_large_pages_act_on_the_process() {
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .is_ok_and(|s| !s.contains("[never]"));
    let mut args = vec!["-k", "-r", "-N", "2"];
    if thp {
        args.push("-L");
    }
    for server in servers() {
        let (child, mut conn) = start(server, &args, &format!("process-{server:?}"));
        assert_eq!(
            ask(&mut conn, b"version\r\n", b"\r\n").split(' ').next(),
            Some("VERSION")
        );
        let pid = child.0.id();
        // -k: memory locked (where the limit allows it; as root it does).
        if tern_testkit::process::is_root() {
            assert!(status_kb(pid, "VmLck:") > 0, "{server:?}: nothing locked");
        }
        // -r: the core file limit raised (to unlimited as root).
        let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
        let core = limits
            .lines()
            .find(|l| l.starts_with("Max core file size"))
            .unwrap();
        if tern_testkit::process::is_root() {
            assert!(core.contains("unlimited"), "{server:?}: {core}");
        }
        assert!(
            !core.split_whitespace().any(|w| w == "0"),
            "{server:?}: {core}"
        );
    }
    // -i: the license, and nothing started.
    for server in servers() {
        let out = server.command().arg("-i").output().expect("runs");
        assert!(out.status.success(), "{server:?}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("1.6.18"),
            "{server:?}"
        );
    }
}

/// Tools find the server's version in the first line of `-V`, `-i` or `-h` (Dalli's test harness matches
/// `memcached -h | head -1` against `^memcached (\d\.\d\.\d+)`): tern's first lines start as memcached's.
#[test]
fn the_version_starts_the_first_line_of_version_license_and_help_as_in_memcached() {
    let first_words = |server: Server, flag: &str| {
        let out = server.command().arg(flag).output().expect("runs");
        assert!(out.status.success(), "{server:?} {flag}");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let first = text.lines().next().unwrap_or_default().to_owned();
        first.split(' ').take(2).collect::<Vec<_>>().join(" ")
    };
    for flag in ["-V", "-i", "-h"] {
        assert_eq!(
            first_words(Server::Tern, flag),
            "memcached 1.6.18",
            "{flag}"
        );
        if have("memcached") {
            assert_eq!(
                first_words(Server::Memcached, flag),
                first_words(Server::Tern, flag),
                "{flag}"
            );
        }
    }
}

#[test]
fn sasl_and_ascii_authentication_pick_the_protocol_as_memcached_does() {
    let dir = tern_testkit::files::temp_dir("auth-flags");
    let users = dir.join("users");
    std::fs::write(&users, "alice:wonderland\n").unwrap();
    // memcached's -S reads Cyrus SASL's configuration; a PLAIN-only one is enough to start.
    std::fs::write(dir.join("memcached.conf"), "mech_list: plain\n").unwrap();
    let users = users.to_str().unwrap();
    for (args, words) in [
        (
            &["-S", "-B", "ascii"][..],
            "ERROR: You cannot allow the ASCII protocol while using SASL.",
        ),
        (
            &["-Y", users, "-B", "binary"],
            "ERROR: You cannot allow the BINARY protocol while using ascii authentication tokens.",
        ),
        (
            &["-S", "-U", "11311"],
            "ERROR: Cannot enable UDP while using binary SASL authentication.",
        ),
        (
            &["-Y", users, "-U", "11311"],
            "Cannot use UDP with ascii authentication enabled (-U 0 to disable)",
        ),
    ] {
        for server in servers() {
            // Not `command`: it turns UDP off.
            let out = server
                .command()
                .args(["-l", "127.0.0.1", "-p", "0"])
                .args(args)
                .env("SASL_CONF_PATH", &dir)
                .output()
                .expect("runs");
            let stderr = String::from_utf8_lossy(&out.stderr);
            // memcached's EX_USAGE, and its words alone.
            assert_eq!(out.status.code(), Some(64), "{server:?} {args:?}: {stderr}");
            assert_eq!(stderr.trim_end(), words, "{server:?} {args:?}");
        }
    }
    // Both: -Y makes the protocol ASCII, with authentication (SASL set up but unused).
    for server in servers() {
        let mut cmd = command(server, &["-p", "-1", "-S", "-Y", users]);
        cmd.env("SASL_CONF_PATH", &dir);
        let (_child, ports) = start_with_port_file(cmd, &format!("auth-{server:?}"));
        let mut conn = TcpStream::connect(("127.0.0.1", ports[0].1)).unwrap();
        assert_eq!(
            ask(&mut conn, b"version\r\n", b"\r\n"),
            "CLIENT_ERROR unauthenticated\r\n",
            "{server:?}"
        );
        assert_eq!(
            ask(&mut conn, b"set u 0 0 16\r\nalice wonderland\r\n", b"\r\n"),
            "STORED\r\n",
            "{server:?}"
        );
        let settings = stats_reply(&mut conn, "settings");
        for line in ["binding_protocol ascii", "auth_enabled_sasl yes"] {
            assert!(settings.contains(line), "{server:?}: {line} in {settings}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
