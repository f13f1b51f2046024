//! memcached's restartable cache (`-e FILE`), on tern cache and on memcached 1.6.18 (real processes, the same
//! steps): items stored, the index grown past its start size, a graceful stop (SIGUSR1), and a start with the
//! same file brings back every item with its flags and value, the index's size, and not the items that
//! expired or were deleted; a stop that is not graceful (SIGTERM) saves nothing; metadata that does not fit
//! the settings is a clean start, and one without its tag line stops the start, with memcached's words.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tern_testkit::{have, start_with_port_file, stats_reply, ChildGuard};

mod common;
use common::CacheServer as Server;

/// memcached or tern cache with `args`, on 127.0.0.1 without UDP.
fn command(server: Server, args: &[&str]) -> Command {
    let mut cmd = server.command();
    cmd.args(["-l", "127.0.0.1", "-U", "0"]).args(args);
    cmd
}

/// `server` started on a free port with the memory file `file` and `-m 64`: it and its port.
fn start(server: Server, file: &Path, more: &[&str]) -> (ChildGuard, u16) {
    let file = file.to_str().unwrap();
    let mut args = vec!["-p", "-1", "-m", "64", "-e", file];
    args.extend_from_slice(more);
    // The port file's name: one per memory file, since the tests run at once.
    let name = file.replace('/', "-");
    let (child, ports) = start_with_port_file(command(server, &args), &name);
    (child, ports[0].1)
}

/// A directory for the memory files, on a RAM disk where there is one (memcached maps `-m` of it).
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let base = Path::new("/dev/shm");
        let base = if base.is_dir() {
            base.to_owned()
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("tern-restart-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Sends `commands` and reads until the reply ends with `end`.
fn exchange(port: u16, commands: &[u8], end: &[u8]) -> String {
    let mut conn = tern_testkit::connect(([127, 0, 0, 1], port).into());
    conn.write_all(commands).unwrap();
    read_until(&mut conn, end)
}

fn read_until(conn: &mut TcpStream, end: &[u8]) -> String {
    let mut reply = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    while !reply.ends_with(end) {
        let n = conn.read(&mut buf).unwrap();
        assert!(n > 0, "closed after {} bytes", reply.len());
        reply.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&reply).into_owned()
}

fn stat(port: u16, name: &str) -> u64 {
    let mut conn = tern_testkit::connect(([127, 0, 0, 1], port).into());
    stats_reply(&mut conn, "")
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!("STAT {name} "))?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no {name} in stats"))
}

/// tern cache, and memcached where it is installed.
fn servers() -> Vec<Server> {
    let mut servers = vec![Server::Tern];
    if have("memcached") {
        servers.push(Server::Memcached);
    }
    servers
}

/// Sends the signal and waits for the process to exit.
fn stop(mut child: ChildGuard, signal: libc::c_int) {
    // SAFETY: a signal to a child process this test started and has not reaped.
    unsafe { libc::kill(child.pid() as libc::pid_t, signal) };
    await_exit(&mut child);
}

/// Waits (up to 30 s) for the process to exit.
fn await_exit(child: &mut ChildGuard) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "still running");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The keys stored before the stop, with their flags and values: small ones, one of 300 KB of every byte
/// value, and a counter (incremented before the stop).
fn items() -> Vec<(String, u32, Vec<u8>)> {
    let mut items: Vec<(String, u32, Vec<u8>)> = (0..50)
        .map(|i| (format!("small:{i}"), i, format!("value {i}").into_bytes()))
        .collect();
    items.push((
        "large".into(),
        7,
        (0..300_000).map(|i| (i % 251) as u8).collect(),
    ));
    items.push(("counter".into(), 0, b"41".to_vec()));
    items
}

/// What the restarted server answers for every key of [`items`], the expired and deleted ones included.
fn answers(port: u16) -> String {
    let mut keys: Vec<String> = items().into_iter().map(|(key, ..)| key).collect();
    keys.extend(["short-lived".into(), "long-lived".into(), "deleted".into()]);
    exchange(
        port,
        format!("get {}\r\n", keys.join(" ")).as_bytes(),
        b"END\r\n",
    )
}

/// The steps, on one server: what it answered after the restart, and its `hash_power_level` before the stop
/// and after the restart.
fn stop_and_restart(server: Server, file: &Path) -> (String, u32, u32) {
    let (child, port) = start(server, file, &[]);
    let mut commands = Vec::new();
    for (key, flags, value) in items() {
        write!(commands, "set {key} {flags} 0 {}\r\n", value.len()).unwrap();
        commands.extend_from_slice(&value);
        commands.extend_from_slice(b"\r\n");
    }
    commands.extend_from_slice(b"set short-lived 0 2 1\r\nx\r\nset long-lived 3 600 4\r\nlong\r\n");
    commands.extend_from_slice(b"set deleted 0 0 1\r\nx\r\ndelete deleted\r\nincr counter 1\r\n");
    // Enough keys to grow the index past its 2^16 start, then deleted: the size is kept all the same.
    for i in 0..(1 << 17) {
        write!(commands, "set z{i} 0 0 0 noreply\r\n\r\n").unwrap();
    }
    commands.extend_from_slice(b"mn\r\n");
    let reply = exchange(port, &commands, b"MN\r\n");
    assert!(!reply.contains("ERROR"), "{server:?}: {reply}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while stat(port, "hash_power_level") < 17 {
        // memcached grows its table in the background.
        assert!(
            Instant::now() < deadline,
            "{server:?}: the index did not grow"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let grown = stat(port, "hash_power_level") as u32;
    let mut deletes = Vec::new();
    for i in 0..(1 << 17) {
        write!(deletes, "delete z{i} noreply\r\n").unwrap();
    }
    deletes.extend_from_slice(b"mn\r\n");
    exchange(port, &deletes, b"MN\r\n");
    stop(child, libc::SIGUSR1);
    assert!(
        meta(file).exists(),
        "{server:?}: no metadata after a graceful stop"
    );
    // The short-lived item expires while the server is stopped.
    std::thread::sleep(Duration::from_millis(2500));
    let (child, port) = start(server, file, &[]);
    assert!(
        !meta(file).exists(),
        "{server:?}: the metadata is removed once read"
    );
    let restored = (answers(port), grown, stat(port, "hash_power_level") as u32);
    // A stop that is not graceful saves nothing: the next start is clean.
    stop(child, libc::SIGTERM);
    let (_child, port) = start(server, file, &[]);
    assert_eq!(stat(port, "curr_items"), 0, "{server:?}");
    restored
}

fn meta(file: &Path) -> PathBuf {
    PathBuf::from(format!("{}.meta", file.display()))
}

#[test]
fn a_graceful_stop_and_a_start_with_the_same_file_keep_the_items_as_memcached_does() {
    let scratch = Scratch::new("items");
    let tern = stop_and_restart(Server::Tern, &scratch.0.join("tern"));
    let mut expected = String::new();
    for (key, flags, value) in items() {
        let value = if key == "counter" {
            b"42".to_vec()
        } else {
            value
        };
        expected.push_str(&format!("VALUE {key} {flags} {}\r\n", value.len()));
        expected.push_str(&String::from_utf8_lossy(&value));
        expected.push_str("\r\n");
    }
    expected.push_str("VALUE long-lived 3 4\r\nlong\r\nEND\r\n");
    assert!(
        tern.0 == expected,
        "tern's answer after the restart differs"
    );
    assert_eq!(
        (tern.1, tern.2),
        (17, 17),
        "hash_power_level before and after"
    );
    if !have("memcached") {
        return;
    }
    let memcached = stop_and_restart(Server::Memcached, &scratch.0.join("memcached"));
    assert!(memcached.0 == tern.0, "memcached answers otherwise");
    assert_eq!((memcached.1, memcached.2), (tern.1, tern.2));
}

/// Starts the server and waits for its exit or its port file: the running server and its port (`None` if it
/// exited), and what it wrote on standard error so far (memcached and tern say what they restore before
/// they listen).
fn try_start(server: Server, file: &Path, more: &[&str]) -> (Option<(ChildGuard, u16)>, String) {
    let name = file.to_str().unwrap().replace('/', "-");
    let port_file =
        std::env::temp_dir().join(format!("tern-restart-port-{name}-{}", std::process::id()));
    let stderr_file =
        std::env::temp_dir().join(format!("tern-restart-err-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&port_file);
    let mut args = vec!["-p", "-1", "-m", "64", "-e", file.to_str().unwrap()];
    args.extend_from_slice(more);
    let mut child = ChildGuard(
        command(server, &args)
            .env("MEMCACHED_PORT_FILENAME", &port_file)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr_file).unwrap())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let port = loop {
        if let Ok(ports) = std::fs::read_to_string(&port_file) {
            let tcp = ports.lines().next().and_then(|l| l.rsplit_once(": "));
            break tcp.map(|(_, port)| port.parse::<u16>().unwrap());
        }
        if child.0.try_wait().unwrap().is_some() {
            break None;
        }
        assert!(
            Instant::now() < deadline,
            "{server:?} neither started nor exited"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = std::fs::remove_file(&port_file);
    let stderr = std::fs::read_to_string(&stderr_file).unwrap();
    let _ = std::fs::remove_file(&stderr_file);
    (port.map(|port| (child, port)), stderr)
}

#[test]
fn metadata_that_does_not_fit_is_a_clean_start_and_a_broken_one_stops_the_start() {
    let scratch = Scratch::new("meta");
    for server in servers() {
        let file = scratch.0.join(format!("{server:?}"));
        // Saved under -m 64, started under -m 128: memcached's line, and a clean start.
        let (child, port) = start(server, &file, &[]);
        exchange(port, b"set kept 0 0 1\r\nx\r\n", b"STORED\r\n");
        stop(child, libc::SIGUSR1);
        let (started, stderr) = try_start(server, &file, &["-m", "128"]);
        let (_running, port) = started.unwrap_or_else(|| panic!("{server:?}: {stderr}"));
        assert_eq!(stat(port, "curr_items"), 0, "{server:?}");
        assert!(
            stderr.contains("[restart] restart incompatible due to setting for [maxbytes] [old value: 67108864]"),
            "{server:?}: {stderr}"
        );
        assert!(
            stderr.contains("[restart] failed to validate metadata, starting with a clean cache"),
            "{server:?}: {stderr}"
        );
        // Metadata without its tag line (empty, or a key first): the server does not start, and says why.
        for (text, words) in [
            ("", "[restart] Failed to read a tag from metadata file"),
            ("Kmaxbytes 67108864\n", "[restart] corrupt metadata file"),
        ] {
            std::fs::write(meta(&file), text).unwrap();
            let (started, stderr) = try_start(server, &file, &[]);
            assert!(started.is_none(), "{server:?} started on {text:?}");
            assert!(stderr.contains(words), "{server:?}: {stderr}");
        }
        // No metadata: a clean start, said.
        std::fs::remove_file(meta(&file)).unwrap();
        let (started, stderr) = try_start(server, &file, &[]);
        assert!(started.is_some(), "{server:?}: {stderr}");
        assert!(
            stderr.contains("[restart] no metadata save file, starting with a clean cache"),
            "{server:?}: {stderr}"
        );
    }
}

/// tern's items file checked against its metadata: a byte changed, or the file cut short, and the start is
/// clean (nothing from the file is kept) and says why.
#[test]
fn a_damaged_items_file_is_a_clean_start() {
    let scratch = Scratch::new("damaged");
    let file = scratch.0.join("tern");
    type Damage = fn(&mut Vec<u8>);
    let damages: [(&str, Damage); 2] = [
        ("checksum", |bytes| {
            let last = bytes.len() - 3;
            bytes[last] ^= 1;
        }),
        ("bytes where its metadata says", |bytes| {
            bytes.truncate(bytes.len() - 10)
        }),
    ];
    for (words, damage) in damages {
        let (child, port) = start(Server::Tern, &file, &[]);
        exchange(
            port,
            b"set one 0 0 3\r\nabc\r\nset two 0 0 3\r\ndef\r\n",
            b"STORED\r\nSTORED\r\n",
        );
        stop(child, libc::SIGUSR1);
        let mut bytes = std::fs::read(&file).unwrap();
        damage(&mut bytes);
        std::fs::write(&file, bytes).unwrap();
        let (started, stderr) = try_start(Server::Tern, &file, &[]);
        let (_running, port) = started.unwrap_or_else(|| panic!("{stderr}"));
        assert!(
            stderr.contains(words) && stderr.contains("starting with a clean cache"),
            "{words}: {stderr}"
        );
        assert_eq!(
            stat(port, "curr_items"),
            0,
            "nothing of a damaged file is kept"
        );
        assert!(!file.exists(), "the damaged file is removed");
    }
}

/// `shutdown graceful` (with `-A`) is a graceful stop as SIGUSR1 is: the items are kept; a plain `shutdown` is
/// not, as in memcached.
#[test]
fn shutdown_graceful_keeps_the_items_and_shutdown_does_not() {
    let scratch = Scratch::new("shutdown");
    for server in servers() {
        let file = scratch.0.join(format!("{server:?}"));
        for (command, kept) in [("shutdown graceful", 1), ("shutdown", 0)] {
            let (mut child, port) = start(server, &file, &["-A"]);
            let mut conn = tern_testkit::connect(([127, 0, 0, 1], port).into());
            conn.write_all(b"set kept 0 0 1\r\nx\r\n").unwrap();
            read_until(&mut conn, b"STORED\r\n");
            conn.write_all(format!("{command}\r\n").as_bytes()).unwrap();
            await_exit(&mut child);
            // memcached keeps a cache only when restarted after the second it stopped in.
            std::thread::sleep(Duration::from_millis(1100));
            let (_child, port) = start(server, &file, &["-A"]);
            assert_eq!(stat(port, "curr_items"), kept, "{server:?} after {command}");
        }
    }
}
