//! tern cache with real clients and peers: libmemcached's conformance tool (`memccapable`), the pymemcache
//! library driving every command, libmemcached's command-line tools, and twemproxy (nutcracker) in front of
//! three nodes. Each test starts in-process servers on 127.0.0.1 port 0 and stops every process it starts;
//! a missing tool is reported and the test passes (scripts/install-test-deps.sh installs them all).

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{ask, have, stat, Cyrus, Memcached, Tern};
use tern_testkit::Nutcracker;

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn memccapable_passes_every_ascii_test() {
    memccapable_passes("-a");
}

#[test]
fn memccapable_passes_every_binary_test() {
    memccapable_passes("-b");
}

/// libmemcached's conformance tool in one protocol (`-a` text, `-b` binary) against tern cache.
fn memccapable_passes(protocol: &str) {
    if !have("memccapable") {
        return;
    }
    let tern = Tern::start(&[]);
    let output = Command::new("memccapable")
        .args(["-h", "127.0.0.1", "-p", &tern.port().to_string(), protocol])
        .output()
        .expect("memccapable runs");
    let report = text(&output);
    let failed: Vec<&str> = report.lines().filter(|l| l.contains("[FAIL]")).collect();
    let passed = report.lines().filter(|l| l.contains("[pass]")).count();
    assert!(
        output.status.success() && failed.is_empty(),
        "memccapable failed: {failed:?}\n{report}"
    );
    // A run that skipped the suite must not pass.
    assert!(passed >= 15, "only {passed} tests ran:\n{report}");
}

fn pymemcache_installed() -> bool {
    let ok = have("python3")
        && Command::new("python3")
            .args(["-c", "import pymemcache"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "pymemcache is missing in CI"
        );
        eprintln!("SKIPPED: pymemcache is not installed");
    }
    ok
}

fn run_pymemcache(port: u16) -> Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/pymemcache_all.py");
    Command::new("python3")
        .arg(script)
        .arg(port.to_string())
        .output()
        .expect("python3 runs")
}

#[test]
fn pymemcache_drives_every_command() {
    if !pymemcache_installed() {
        return;
    }
    // The script's expectations are memcached's own answers: check the script against memcached first.
    if have("memcached") {
        let memcached = Memcached::start(&[]);
        let output = run_pymemcache(memcached.addr.port());
        assert!(
            output.status.success(),
            "against memcached:\n{}",
            text(&output)
        );
    }
    let tern = Tern::start(&[]);
    let output = run_pymemcache(tern.port());
    assert!(output.status.success(), "against tern:\n{}", text(&output));
    assert!(text(&output).starts_with("ok "), "{}", text(&output));
}

fn tool(program: &str, port: u16, args: &[&str]) -> Output {
    Command::new(program)
        .arg(format!("--servers=127.0.0.1:{port}"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} runs: {e}"))
}

#[test]
fn libmemcached_tools_work() {
    let tools = [
        "memccp",
        "memccat",
        "memcrm",
        "memcflush",
        "memcstat",
        "memcdump",
        "memctouch",
    ];
    if !tools.iter().all(|t| have(t)) {
        return;
    }
    let tern = Tern::start(&[]);
    let port = tern.port();
    let dir = std::env::temp_dir().join(format!("tern-cache-memccp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("greeting.txt");
    std::fs::File::create(&file)
        .unwrap()
        .write_all(b"hello from memccp")
        .unwrap();
    let out = tool("memccp", port, &[file.to_str().unwrap()]);
    assert!(out.status.success(), "memccp: {}", text(&out));
    let out = tool("memccat", port, &["greeting.txt"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        "hello from memccp",
        "{}",
        text(&out)
    );
    let out = tool("memctouch", port, &["--expire=1000", "greeting.txt"]);
    assert!(out.status.success(), "memctouch: {}", text(&out));
    assert!(ask(tern.addr, "mg greeting.txt t\r\n").starts_with("HD t"));
    let out = tool("memcdump", port, &[]);
    assert!(
        text(&out).contains("greeting.txt"),
        "memcdump: {}",
        text(&out)
    );
    let out = tool("memcstat", port, &[]);
    assert!(
        text(&out).contains("curr_items: 1") && text(&out).contains("version: 1.6.18"),
        "memcstat: {}",
        text(&out)
    );
    let out = tool("memcrm", port, &["greeting.txt"]);
    assert!(out.status.success(), "memcrm: {}", text(&out));
    assert_eq!(ask(tern.addr, "get greeting.txt\r\n"), "END\r\n");
    ask(tern.addr, "set x 0 0 1\r\ny\r\n");
    let out = tool("memcflush", port, &[]);
    assert!(out.status.success(), "memcflush: {}", text(&out));
    assert_eq!(ask(tern.addr, "get x\r\n"), "END\r\n");
    let _ = std::fs::remove_dir_all(dir);
}

/// twemproxy over tern cache nodes on `ports`, as a production pool would run it.
fn nutcracker(ports: &[u16]) -> Nutcracker {
    let servers: String = ports
        .iter()
        .map(|p| format!("   - 127.0.0.1:{p}:1\n"))
        .collect();
    Nutcracker::start(&format!(
        "  hash: fnv1a_64\n  distribution: ketama\n  timeout: 2000\n  auto_eject_hosts: false\n  \
         server_retry_timeout: 500\n  server_failure_limit: 1\n  servers:\n{servers}"
    ))
}

#[test]
fn twemproxy_spreads_keys_and_survives_a_node() {
    if !have("nutcracker") {
        return;
    }
    let mut nodes: Vec<Tern> = (0..3).map(|_| Tern::start(&[])).collect();
    let proxy = nutcracker(&nodes.iter().map(Tern::port).collect::<Vec<_>>());
    let addr = proxy.addr;
    let mut conn = common::connect(addr);
    let mut send = |input: &str| -> String {
        conn.write_all(input.as_bytes()).unwrap();
        read_reply(&mut conn)
    };
    // Every command nutcracker proxies for memcached.
    assert_eq!(send("set k 5 0 2\r\nv1\r\n"), "STORED\r\n");
    assert_eq!(send("get k\r\n"), "VALUE k 5 2\r\nv1\r\nEND\r\n");
    assert_eq!(send("add k 0 0 1\r\nx\r\n"), "NOT_STORED\r\n");
    assert_eq!(send("replace k 0 0 2\r\nv2\r\n"), "STORED\r\n");
    assert_eq!(send("append k 0 0 1\r\na\r\n"), "STORED\r\n");
    assert_eq!(send("prepend k 0 0 1\r\np\r\n"), "STORED\r\n");
    let gets = send("gets k\r\n");
    let cas: u64 = gets.split_whitespace().nth(4).unwrap().parse().unwrap();
    assert_eq!(send(&format!("cas k 0 0 1 {cas}\r\nc\r\n")), "STORED\r\n");
    assert_eq!(send(&format!("cas k 0 0 1 {cas}\r\nd\r\n")), "EXISTS\r\n");
    assert_eq!(send("set n 0 0 2\r\n10\r\n"), "STORED\r\n");
    assert_eq!(send("incr n 5\r\n"), "15\r\n");
    assert_eq!(send("decr n 20\r\n"), "0\r\n");
    assert_eq!(send("touch k 100\r\n"), "TOUCHED\r\n");
    assert_eq!(send("delete n\r\n"), "DELETED\r\n");
    assert_eq!(send("delete n\r\n"), "NOT_FOUND\r\n");
    // Keys spread over the nodes (fnv1a_64 + ketama).
    let keys: Vec<String> = (0..1000)
        .map(|i| format!("user:{}:{i}", i * 7919))
        .collect();
    for key in &keys {
        assert_eq!(
            send(&format!("set {key} 0 0 {}\r\n{key}\r\n", key.len())),
            "STORED\r\n"
        );
    }
    let mut multiget = String::from("get");
    for key in &keys[..50] {
        multiget.push(' ');
        multiget.push_str(key);
    }
    multiget.push_str("\r\n");
    assert_eq!(send(&multiget).matches("VALUE ").count(), 50, "multiget");
    let per_node: Vec<u64> = nodes
        .iter()
        .map(|n| stat(n.addr, "", "curr_items").unwrap().parse().unwrap())
        .collect();
    assert!(
        per_node.iter().all(|&n| n > 0),
        "keys per node: {per_node:?}"
    );
    // Stop one node: only its share is lost; the others' keys still read through the proxy.
    let lost_share = per_node[2];
    nodes[2].stop();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut readable = 0;
    let mut errors = 0;
    for key in &keys {
        let reply = send(&format!("get {key}\r\n"));
        if reply.starts_with("VALUE") {
            readable += 1;
        } else if reply.starts_with("SERVER_ERROR") {
            errors += 1;
        }
        assert!(Instant::now() < deadline, "proxy too slow");
    }
    // Node 2 held `lost_share` items, some of them not from `keys` (`k`).
    assert!(
        readable as u64 + lost_share >= keys.len() as u64 && readable < keys.len(),
        "readable {readable} of {}, node 2 held {lost_share}, {errors} errors",
        keys.len()
    );
}

/// Reads one complete reply from the proxy (a line, or a get's values up to END).
fn read_reply(conn: &mut std::net::TcpStream) -> String {
    use std::io::Read;
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        let n = conn.read(&mut buf).expect("proxy reply");
        assert!(n > 0, "proxy closed: {:?}", String::from_utf8_lossy(&out));
        out.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&out);
        let complete = if text.starts_with("VALUE") {
            text.ends_with("END\r\n")
        } else {
            text.ends_with("\r\n")
        };
        if complete {
            return text.into_owned();
        }
    }
}

/// pylibmc (libmemcached's Python binding, Debian's `python3-pylibmc`) in binary mode with SASL, the
/// passwords in Cyrus's database (`saslpasswd2`'s), with each mechanism offered alone (libmemcached's Cyrus
/// client takes one the server lists, so CRAM-MD5, then PLAIN): the right password stores, reads, counts and
/// multi-gets; a wrong one is refused.
#[test]
fn pylibmc_speaks_binary_with_sasl() {
    let has_pylibmc = Command::new("/usr/bin/python3")
        .args(["-c", "import pylibmc"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_pylibmc || !have("saslpasswd2") {
        assert!(
            std::env::var_os("CI").is_none(),
            "pylibmc or saslpasswd2 is missing in CI"
        );
        eprintln!("SKIPPED: pylibmc or saslpasswd2 is not installed");
        return;
    }
    let script = r#"
import sys, pylibmc
server = ["127.0.0.1:" + sys.argv[1]]
c = pylibmc.Client(server, binary=True, username="alice", password="wonderland")
assert c.set("k", "v")
assert c.get("k") == "v", c.get("k")
c.set_multi({"a": 1, "b": "x"})
assert c.get_multi(["a", "b", "missing"]) == {"a": 1, "b": "x"}
assert c.incr("a", 4) == 5
assert c.add("k", "other") is False
assert c.delete("k")
assert c.get("k") is None
bad = pylibmc.Client(server, binary=True, username="alice", password="nope")
try:
    bad.set("k", "v")
    refused = False
except pylibmc.Error:
    refused = True
assert refused, "a wrong password must not store"
print("ok")
"#;
    for mechanism in ["cram-md5", "plain"] {
        let cyrus = Cyrus::new(
            &format!("pylibmc-{mechanism}"),
            mechanism,
            &[("alice", "wonderland")],
        );
        let tern = cyrus.tern();
        let output = Command::new("/usr/bin/python3")
            .args(["-c", script, &tern.port().to_string()])
            .output()
            .expect("python3 runs");
        assert!(
            output.status.success() && output.stdout.starts_with(b"ok"),
            "{mechanism}: {}",
            text(&output)
        );
    }
}
