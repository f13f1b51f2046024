//! tern cache's TLS (`-Z` and memcached's `-o ssl_*` options) against memcached 1.6.18's, both real processes
//! started with the same flags and certificates (made by `openssl` for the test), driven by the same Python
//! client (pymemcache over `ssl`, tests/tls_client.py), whose answers must be equal: commands, large values and
//! multi-gets through TLS records, `stats settings`' ssl lines, who gets in (TLS versions, client
//! certificates, plain text on a TLS port), `notls:` listeners, `refresh_certs`, session resumption.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use tern_testkit::tls::{make_certificates, TlsFiles};
use tern_testkit::{have, start_with_port_file, ChildGuard};

mod common;
use common::{CacheServer as Server, TERN};

fn client_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tls_client.py")
}

fn peers_installed() -> bool {
    let pymemcache = Command::new("python3")
        .args(["-c", "import pymemcache"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !pymemcache {
        assert!(
            std::env::var_os("CI").is_none(),
            "pymemcache is missing in CI"
        );
        eprintln!("SKIPPED: pymemcache is not installed");
    }
    pymemcache && have("memcached") && have("openssl")
}

const BOTH: [Server; 2] = [Server::Memcached, Server::Tern];

/// Starts `server` with `flags` (plus `-p -1`, port from its port file); returns it with its TCP ports.
fn start(server: Server, flags: &[String], name: &str) -> (ChildGuard, Vec<u16>) {
    let mut cmd = server.command();
    cmd.args(["-p", "-1", "-t", "2"]).args(flags);
    let (child, ports) = start_with_port_file(cmd, &format!("{name}-{server:?}"));
    let tcp = ports
        .iter()
        .filter(|(kind, _)| kind.starts_with("TCP"))
        .map(|(_, port)| *port)
        .collect();
    (child, tcp)
}

/// `-Z` with the server certificate, and `more` options.
fn tls_flags(files: &TlsFiles, more: &str) -> Vec<String> {
    let mut options = format!(
        "ssl_chain_cert={},ssl_key={}",
        files.server_cert.display(),
        files.server_key.display()
    );
    if !more.is_empty() {
        options = format!("{options},{more}");
    }
    ["-l", "127.0.0.1", "-Z", "-o", &options]
        .map(str::to_owned)
        .to_vec()
}

/// Runs one mode of the Python client against `port`; its JSON answer.
fn client(mode: &str, port: u16, files: &TlsFiles, extra: &[&Path]) -> Value {
    client_on("127.0.0.1", mode, port, files, extra)
}

/// [`client`] for a listener on another loopback address.
fn client_on(host: &str, mode: &str, port: u16, files: &TlsFiles, extra: &[&Path]) -> Value {
    let out = Command::new("python3")
        .arg(client_script())
        .args([mode, &port.to_string()])
        .arg(&files.dir)
        .args(extra)
        .env("TERN_TLS_HOST", host)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "tls_client.py {mode}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

fn certificates(name: &str) -> TlsFiles {
    make_certificates(&std::env::temp_dir().join(format!("tern-tls-{}-{name}", std::process::id())))
}

#[test]
fn commands_over_tls_answer_as_memcached_answers() {
    if !peers_installed() {
        return;
    }
    let files = certificates("commands");
    let answers: Vec<Value> = BOTH
        .iter()
        .map(|&server| {
            let (_child, ports) = start(server, &tls_flags(&files, ""), "commands");
            client("commands", ports[0], &files, &[])
        })
        .collect();
    assert_eq!(
        answers[1], answers[0],
        "tern cache (left) vs memcached (right)"
    );
    let tern = &answers[1];
    for check in ["get_many", "big", "bigs", "cas_ok"] {
        assert_eq!(tern[check], true, "{check}: {tern}");
    }
    assert_eq!(tern["settings"]["ssl_enabled"], "yes", "{tern}");
    assert_eq!(
        tern["stats"],
        serde_json::json!(["ssl_handshake_errors", "time_since_server_cert_refresh"])
    );
}

#[test]
fn who_gets_in_is_who_memcached_lets_in() {
    if !peers_installed() {
        return;
    }
    let files = certificates("doors");
    let ca = format!("ssl_ca_cert={}", files.ca_cert.display());
    let cases = [
        ("default", String::new()),
        (
            "client certificate required",
            format!("ssl_verify_mode=2,{ca}"),
        ),
        (
            "client certificate optional",
            format!("ssl_verify_mode=1,{ca}"),
        ),
        // No CA: a certificate is asked for and none verifies; memcached starts so (OpenSSL's empty trust
        // store), serving clients without one under mode 1 and nobody under mode 2.
        (
            "client certificate optional, no CA",
            "ssl_verify_mode=1".to_owned(),
        ),
        (
            "client certificate required, no CA",
            "ssl_verify_mode=2".to_owned(),
        ),
        ("TLS 1.3 only", "ssl_min_version=3".to_owned()),
    ];
    for (case, options) in cases {
        let answers: Vec<Value> = BOTH
            .iter()
            .map(|&server| {
                let (_child, ports) = start(server, &tls_flags(&files, &options), "doors");
                client("doors", ports[0], &files, &[])
            })
            .collect();
        assert_eq!(
            answers[1], answers[0],
            "{case}: tern cache (left) vs memcached (right)"
        );
        eprintln!("{case}: {}", answers[1]);
    }
}

#[test]
fn notls_listeners_serve_plain_text_beside_tls_ones() {
    if !peers_installed() {
        return;
    }
    let files = certificates("notls");
    for server in BOTH {
        let mut flags = tls_flags(&files, "");
        // Two loopback addresses, so each listener is told apart by its address.
        flags[1] = "notls:127.0.0.2,127.0.0.1".into();
        let (_child, ports) = start(server, &flags, "notls");
        assert_eq!(ports.len(), 2, "{server:?}: {ports:?}");
        let set = client("set_shared", ports[1], &files, &[]);
        assert_eq!(set["set"], "STORED", "{server:?}");
        let plain = client_on("127.0.0.2", "plain", ports[0], &files, &[]);
        assert_eq!(
            plain["plain_get"], "VALUE shared 0 3\r\nabc\r\nEND\r\n",
            "{server:?}"
        );
    }
    // memcached refuses notls: without -Z; so does tern.
    let out = Command::new(TERN)
        .args(["cache", "-l", "notls:127.0.0.1", "-p", "-1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("'notls' option is valid only when SSL is enabled"));
}

#[test]
fn refresh_certs_swaps_the_certificate_for_new_connections_only() {
    if !peers_installed() {
        return;
    }
    let files = certificates("refresh");
    let answers: Vec<Value> = BOTH
        .iter()
        .map(|&server| {
            // Files of this server's own, overwritten by the client.
            let cert = files.dir.join(format!("live_{server:?}_crt.pem"));
            let key = files.dir.join(format!("live_{server:?}_key.pem"));
            std::fs::copy(&files.server_cert, &cert).unwrap();
            std::fs::copy(&files.server_key, &key).unwrap();
            let flags = [
                "-l".to_owned(),
                "127.0.0.1".into(),
                "-Z".into(),
                "-o".into(),
                format!(
                    "ssl_chain_cert={},ssl_key={}",
                    cert.display(),
                    key.display()
                ),
            ];
            let (_child, ports) = start(server, &flags, "refresh");
            client(
                "refresh",
                ports[0],
                &files,
                &[&cert, &key, &files.rotated_cert, &files.rotated_key],
            )
        })
        .collect();
    assert_eq!(
        answers[1], answers[0],
        "tern cache (left) vs memcached (right)"
    );
    let tern = &answers[1];
    assert_eq!(
        (
            &tern["first"],
            &tern["refresh"],
            &tern["second"],
            &tern["first_after"],
            &tern["third"]
        ),
        (
            &"First".into(),
            &"OK".into(),
            &"Rotated".into(),
            &"First".into(),
            &"Rotated".into()
        ),
        "{tern}"
    );
    assert_eq!(
        tern["broken_refresh"],
        "Error loading the certificate chain"
    );
    // Without -Z, memcached's answer.
    let (_child, ports) = start(Server::Tern, &["-l".into(), "127.0.0.1".into()], "no-tls");
    let mut conn = tern_testkit::connect(([127, 0, 0, 1], ports[0]).into());
    use std::io::{Read, Write};
    conn.write_all(b"refresh_certs\r\n").unwrap();
    let mut reply = [0u8; 64];
    let n = conn.read(&mut reply).unwrap();
    assert_eq!(&reply[..n], b"Error TLS not enabled\r\n");
}

#[test]
fn session_cache_resumes_sessions_as_memcached_does() {
    if !peers_installed() {
        return;
    }
    let files = certificates("resume");
    // OpenSSL resumes by tickets whether or not memcached's server-side cache is on; tern too. With the cache
    // on, rustls also stores the session it issued a ticket for (OpenSSL stores none then), so tern's
    // `ssl_new_sessions` counts it where memcached's stays 0 (docs/cache-compat.md).
    for (options, new_sessions) in [("", Value::Null), ("ssl_session_cache", "1".into())] {
        let answers: Vec<Value> = BOTH
            .iter()
            .map(|&server| {
                let (_child, ports) = start(server, &tls_flags(&files, options), "resume");
                client("resume", ports[0], &files, &[])
            })
            .collect();
        assert_eq!(
            (&answers[1]["reused"], &answers[0]["reused"]),
            (&Value::Bool(true), &Value::Bool(true)),
            "{options:?}: tern cache (left) vs memcached (right)"
        );
        assert_eq!(answers[1]["new_sessions"], new_sessions, "{options:?}");
    }
}

#[test]
fn unusable_tls_settings_stop_the_server_with_memcacheds_exit_code() {
    let dir = std::env::temp_dir().join(format!("tern-tls-{}-unusable", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let garbage = dir.join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let cases = [
        (
            format!("ssl_chain_cert={}", garbage.display()),
            "Error loading the certificate chain",
        ),
        (
            "ssl_chain_cert=/nonexistent/cert.pem".into(),
            "Error loading the certificate chain",
        ),
        (
            "ssl_kernel_tls".into(),
            "Kernel TLS offload is not available",
        ),
    ];
    let mut cases: Vec<(String, String)> = cases
        .into_iter()
        .map(|(options, message)| (options, message.to_owned()))
        .collect();
    if have("openssl") {
        // A key that is not the certificate's: memcached's OpenSSL refuses it as it loads it.
        let files = certificates("unusable");
        cases.push((
            format!(
                "ssl_chain_cert={},ssl_key={}",
                files.server_cert.display(),
                files.rotated_key.display()
            ),
            format!(
                "Error loading the key: {} : key values mismatch",
                files.rotated_key.display()
            ),
        ));
    }
    for (options, message) in cases {
        let out = Command::new(TERN)
            .args(["cache", "-p", "-1", "-Z", "-o", &options])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64), "{options}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(message.as_str()), "{options}: {stderr}");
    }
    let out = Command::new(TERN)
        .args(["cache", "-p", "-1", "-Z", "-o", "ssl_verify_mode=4"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Invalid ssl_verify_mode"));
}

/// `tern load --tls` drives both servers over TLS: sets and multi-gets, pipelined, every reply checked by the
/// load generator; the certificate verified against the test CA. tern cache gets values up to 64 KiB (many
/// records per request and reply). memcached gets values under 1 KiB: with larger ones pipelined, 1.6.18
/// stalls (it reads a value's bytes exactly, and never asks OpenSSL for what it decrypted beyond them, so the
/// next request waits for more bytes from the client: 4 of 12 preloads stalled here, tern 0 of 12;
/// docs/cache-compat.md).
#[test]
fn tern_load_drives_both_servers_over_tls() {
    if !peers_installed() {
        return;
    }
    let files = certificates("load");
    for (server, values) in [(Server::Memcached, "10-1000"), (Server::Tern, "10-65536")] {
        let (_child, ports) = start(server, &tls_flags(&files, ""), "load");
        let output = Command::new(TERN)
            .args(["load", "-s", &format!("127.0.0.1:{}", ports[0])])
            .arg("--tls")
            .arg("--tls-ca")
            .arg(&files.ca_cert)
            .args([
                "--preload",
                // 500 keys of at most 64 KiB fit the default 64 MB: every get hits.
                "--keys",
                "500",
                "--value-size",
                values,
                "--multiget",
                "8",
                "--pipeline",
                "4",
                "--connections",
                "4",
                "--requests",
                "4000",
                "--warmup",
                "0",
                "--quiet",
                "--json",
                "-",
            ])
            .output()
            .expect("tern load runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{server:?}: {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let report: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(report["errors"], 0, "{server:?}: {}", report["outcomes"]);
        assert_eq!(
            report["requests"], 4000,
            "{server:?}: {}",
            report["outcomes"]
        );
        let hits = report["outcomes"]["hit"].as_u64().unwrap_or(0);
        assert!(hits > 20_000, "{server:?}: {}", report["outcomes"]);
        assert_eq!(report["outcomes"]["miss"], 0, "{server:?}");
    }
    // A certificate that does not chain to the CA given is refused.
    let other = certificates("load-other");
    let (_child, ports) = start(Server::Tern, &tls_flags(&files, ""), "load-refused");
    let output = Command::new(TERN)
        .args(["load", "-s", &format!("127.0.0.1:{}", ports[0])])
        .arg("--tls")
        .arg("--tls-ca")
        .arg(&other.ca_cert)
        .args(["--requests", "10", "--warmup", "0", "--quiet"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("certificate"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// An X.509 v1 certificate (no extensions, as `openssl x509 -req` makes by default): OpenSSL, and so
/// memcached, serves it; so does tern (rustls's own key check would refuse it). Checked with `openssl
/// s_client` verifying the chain against the test CA.
#[test]
fn a_version_1_certificate_is_served_as_memcached_serves_it() {
    if !peers_installed() {
        return;
    }
    let files = certificates("v1");
    let options = format!(
        "ssl_chain_cert={},ssl_key={}",
        files.server_v1_cert.display(),
        files.server_v1_key.display()
    );
    for server in BOTH {
        let (_child, ports) = start(server, &tls_flags(&files, &options), "v1");
        // Bounded in time; `-no_ign_eof`: the end of the input ends it (`-quiet` alone ignores it).
        let mut s_client = Command::new("timeout")
            .args(["10", "openssl", "s_client", "-connect"])
            .arg(format!("127.0.0.1:{}", ports[0]))
            .arg("-CAfile")
            .arg(&files.ca_cert)
            .args(["-verify_return_error", "-quiet", "-no_ign_eof"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("openssl runs");
        use std::io::Write;
        let mut stdin = s_client.stdin.take().unwrap();
        stdin.write_all(b"version\r\n").unwrap();
        // The reply comes before the input closes, which ends s_client.
        std::thread::sleep(std::time::Duration::from_millis(500));
        drop(stdin);
        let out = s_client.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.starts_with("VERSION "),
            "{server:?}: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
