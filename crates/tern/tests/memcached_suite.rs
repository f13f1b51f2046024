//! memcached 1.6.18's own test suite (its `t/*.t`, from Debian's source of memcached, checked against the
//! SHA-256 Debian lists) run against tern cache by `scripts/memcached_suite.sh`, for the files tern passes
//! and that take seconds: a change that breaks one of them (a flag memcached's harness passes to every
//! server, a stat a file reads, an answer it expects) fails here, and not only when someone runs the whole
//! suite by hand (docs/cache-compat.md has every file's result).

use std::path::Path;
use std::process::Command;

use tern_testkit::have;

const TERN: &str = env!("CARGO_BIN_EXE_tern");

/// The files, as the script names them: every file tern passes (docs/cache-compat.md) but `cas.t` and
/// `issue_14.t`, which race memcached's background threads and fail now and then on memcached too.
const FILES: &[&str] = &[
    "t/00-startup.t",
    "t/ascii-auth.t",
    "t/binary-get.t",
    "t/binary-sasl.t",
    "t/binary.t",
    "t/bogus-commands.t",
    "t/chunked-items.t",
    "t/conn-limits.t",
    "t/daemonize.t",
    "t/dash-M.t",
    "t/evictions.t",
    "t/flags.t",
    "t/flush-all.t",
    "t/getandtouch.t",
    "t/getset.t",
    "t/idle-timeout.t",
    "t/incrdecr.t",
    "t/issue_104.t",
    "t/issue_108.t",
    "t/issue_152.t",
    "t/issue_192.t",
    "t/issue_29.t",
    "t/issue_3.t",
    "t/issue_41.t",
    "t/issue_50.t",
    "t/issue_61.t",
    "t/issue_67.t",
    "t/issue_68.t",
    "t/issue_70.t",
    "t/item_size_max.t",
    "t/line-lengths.t",
    "t/lru-crawler.t",
    "t/malicious-commands.t",
    "t/maxconns.t",
    "t/metaget.t",
    "t/multiversioning.t",
    "t/noreply.t",
    "t/quit.t",
    "t/restart.t",
    "t/shutdown.t",
    "t/stats-conns.t",
    "t/stats-detail.t",
    "t/strtol-testing.t",
    "t/touch.t",
    "t/udp.t",
    "t/unixsocket.t",
    "t/watcher.t",
    "t/watcher_connid.t",
];

#[test]
fn the_suite_files_tern_passes_still_pass() {
    for tool in ["perl", "make", "cc", "curl", "xz", "saslpasswd2"] {
        if !have(tool) {
            return;
        }
    }
    let repository = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let run = Command::new("bash")
        .arg("scripts/memcached_suite.sh")
        .args(FILES)
        .env("TERN", TERN)
        .env("SERVERS", "tern")
        // binary-sasl.t runs only when asked (it writes a Cyrus user database with saslpasswd2).
        .env("RUN_SASL_TESTS", "1")
        .env("PER_FILE_SECONDS", "120")
        .current_dir(&repository)
        .output()
        .expect("bash runs");
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let failed: Vec<&str> = FILES
        .iter()
        .copied()
        .filter(|file| !out.lines().any(|l| l == format!("tern {file}: pass")))
        .collect();
    let logs: String = failed
        .iter()
        .map(|file| {
            let name = file.trim_start_matches("t/");
            let log = repository.join(format!("target/memcached-suite/tern/logs/{name}.log"));
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(30).collect();
            format!(
                "--- {file}:\n{}\n",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )
        })
        .collect();
    assert!(failed.is_empty(), "{out}\n{logs}");
}
