//! Every subcommand logs the same way (`--log FILTER` before or after the subcommand, else `RUST_LOG`, else
//! info; `--log-format json` for one object per line): a campaigns file broken by an edit is reported with
//! its cause while the pacer keeps its last good configuration, as the operator needs to see.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tern_testkit::{free_port, ChildGuard};

const CAMPAIGNS: &str =
    "currency = \"USD\"\n\n[[campaign]]\nid = 1\nbudget = \"10\"\nmax_cpm = \"1\"\n\
    start_ms = 0\nend_ms = 99999999999999\nstrategy = { kind = \"hard-cap\" }\n";

/// Runs `tern <args>` with `campaigns` as its campaigns file, breaks the file, and answers what the process
/// wrote to standard error by the time it reported the broken file (or after 10 s).
fn stderr_after_a_broken_edit(args: &[&str], dir_name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("tern-logging-{dir_name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let campaigns = dir.join("campaigns.toml");
    std::fs::write(&campaigns, CAMPAIGNS).unwrap();
    let err_path = dir.join("stderr");
    let listen = format!("127.0.0.1:{}", free_port());
    let mut command = Command::new(env!("CARGO_BIN_EXE_tern"));
    command
        .args(args)
        .args([
            "pacer",
            "serve",
            "--listen",
            &listen,
            "--reload-ms",
            "50",
            "--config",
        ])
        .arg(&campaigns)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap());
    let child = ChildGuard(command.spawn().expect("tern pacer serve starts"));
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(&campaigns, format!("{CAMPAIGNS}budget_typo = \n")).unwrap();
    let started = Instant::now();
    let mut stderr = String::new();
    while started.elapsed() < Duration::from_secs(10) {
        stderr.clear();
        std::fs::File::open(&err_path)
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        if stderr.contains("keeping the previous pacer configuration") {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(child);
    let _ = std::fs::remove_dir_all(&dir);
    stderr
}

#[test]
fn a_broken_campaigns_file_is_a_warning_with_its_cause() {
    let stderr = stderr_after_a_broken_edit(&[], "text");
    let line = stderr
        .lines()
        .find(|l| l.contains("keeping the previous pacer configuration"))
        .unwrap_or_else(|| panic!("no warning in: {stderr}"));
    assert!(line.contains("WARN"), "{line}");
    assert!(
        stderr.contains("line 10"),
        "the cause, with its place: {stderr}"
    );
    // Redirected to a file: no colour codes.
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
    // Before that, at start, what it serves, where and with which limits.
    let start = stderr
        .lines()
        .find(|l| l.contains("tern pacer serving tcp 127.0.0.1:"))
        .unwrap_or_else(|| panic!("no start line in: {stderr}"));
    assert!(start.contains("INFO"), "{start}");
    for limit in [
        "I/O loops",
        "connections 10240",
        "requests in flight",
        "idle timeout off",
    ] {
        assert!(start.contains(limit), "{limit}: {start}");
    }
}

#[test]
fn json_logs_are_one_object_per_line_and_the_filter_is_honoured() {
    let stderr = stderr_after_a_broken_edit(&["--log", "warn", "--log-format", "json"], "json");
    let events: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    let warning = events
        .iter()
        .find(|e| {
            e["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("keeping the previous pacer configuration"))
        })
        .unwrap_or_else(|| panic!("no warning in: {stderr}"));
    assert_eq!(warning["level"], "WARN");
    // `--log warn`: nothing below a warning.
    assert!(
        events
            .iter()
            .all(|e| e["level"] == "WARN" || e["level"] == "ERROR"),
        "{stderr}"
    );
}

#[test]
fn a_bad_log_filter_is_refused_with_the_reason() {
    let out = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["ping", "--log", "=bogus="])
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("invalid log filter"), "{stderr}");
}

#[test]
fn a_service_that_cannot_start_says_why_in_its_log_and_exits_non_zero() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["ping", "--listen", &addr, "--log-format", "json"])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The reason is the log's last event, an error, as JSON like every other line.
    let last: serde_json::Value = serde_json::from_str(stderr.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {stderr}"));
    assert_eq!(last["level"], "ERROR", "{stderr}");
    let message = last["fields"]["message"].as_str().unwrap();
    assert!(
        message.contains(&addr) && message.contains("already served"),
        "{message}"
    );
}
