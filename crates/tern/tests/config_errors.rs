//! Every configuration file tern reads refuses a key it does not know, with a message that names the key and
//! the file, instead of ignoring it: the runtime's TOML (`tern ping --config`) and the pacer's campaigns file
//! (`tern pacer serve --config`, TOML or JSON), at start. (A campaigns file broken by a live edit is refused
//! by the watcher with the same message: tern-pacer-store's watch tests.)

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tern_testkit::ChildGuard;

const TERN: &str = env!("CARGO_BIN_EXE_tern");

/// Runs `tern <args>`, which must exit with an error within 30 s: its standard error.
fn refused(args: &[&str]) -> String {
    let mut child = ChildGuard(
        Command::new(TERN)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tern starts"),
    );
    let end = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < end,
            "tern {args:?} kept running on a bad configuration"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.0.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(
        !status.success(),
        "tern {args:?} accepted a bad configuration: {stderr}"
    );
    stderr
}

fn temp_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = tern_testkit::files::temp_dir("config-errors");
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn the_runtime_config_refuses_an_unknown_key_naming_it_and_the_file() {
    let port = tern_testkit::free_port().to_string();
    let listen = format!("listen = \"127.0.0.1:{port}\"\n");
    for (name, text, key) in [
        // A key of the top table, a unit suffix that is not the key's, a key of [executor].
        (
            "top.toml",
            format!("{listen}io_thread = 2\n"),
            "unknown field `io_thread`",
        ),
        (
            "suffix.toml",
            format!("{listen}idle_timeout_ms = 30000\n"),
            "unknown field `idle_timeout_ms`",
        ),
        (
            "executor.toml",
            format!("{listen}[executor]\nworker = 2\n"),
            "unknown field `worker`",
        ),
    ] {
        let path = temp_file(name, &text);
        let path = path.to_str().unwrap();
        let stderr = refused(&["ping", "--config", path]);
        assert!(
            stderr.contains(key) && stderr.contains(path),
            "{name}: {stderr}"
        );
    }
    // The same file with the right keys serves (so the refusals above are about the keys).
    let path = temp_file(
        "good.toml",
        &format!("{listen}io_threads = 1\nidle_timeout = \"30s\"\n[executor]\nworkers = 2\n"),
    );
    let mut child = ChildGuard(
        Command::new(TERN)
            .args(["ping", "--config", path.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    assert!(tern_testkit::wait_for_port(addr, Duration::from_secs(20)));
    assert!(child.0.try_wait().unwrap().is_none());
}

#[test]
fn the_campaigns_file_refuses_an_unknown_key_naming_it_and_the_file() {
    let good = include_str!("../../../examples/campaigns.toml");
    let listen = format!("127.0.0.1:{}", tern_testkit::free_port());
    for (from, to, key) in [
        (
            "currency = \"USD\"",
            "currency = \"USD\"\nbudget = 1",
            "budget",
        ),
        (
            "max_cpm = \"2.00\"",
            "max_cpm = \"2.00\"\nmax_bid = \"3\"",
            "max_bid",
        ),
        (
            "kind = \"hard-cap\"",
            "kind = \"even\", look_ahead_ms = 5",
            "look_ahead_ms",
        ),
        (
            "format = \"banner\"",
            "format = \"banner\"\nformats = [\"banner\"]",
            "formats",
        ),
    ] {
        assert!(good.contains(from), "examples/campaigns.toml has {from}");
        let path = temp_file("campaigns.toml", &good.replacen(from, to, 1));
        let path = path.to_str().unwrap();
        let stderr = refused(&[
            "pacer",
            "serve",
            "--config",
            path,
            "--listen",
            &listen,
            "--io-threads",
            "1",
        ]);
        assert!(
            stderr.contains(&format!("unknown field `{key}`")) && stderr.contains(path),
            "{key}: {stderr}"
        );
    }
    // JSON campaigns files are held to the same rule.
    let path = temp_file(
        "campaigns.json",
        r#"{"currency": "USD", "campaign": [], "campaigns": []}"#,
    );
    let path = path.to_str().unwrap();
    let stderr = refused(&["pacer", "serve", "--config", path, "--listen", &listen]);
    assert!(
        stderr.contains("unknown field `campaigns`") && stderr.contains(path),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(tern_testkit::files::temp_dir("config-errors"));
}
