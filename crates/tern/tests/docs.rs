//! The docs cannot drift from the code: `scripts/check_docs.py` checks every `tern` command's subcommands and
//! flags against this binary's `--help`, every configuration key against the code's, and every repository
//! path; it passes on the repository's docs and fails on a doc with one drift of each kind. And every TOML
//! block of the docs parses with the parser the code uses (so its keys and values are ones tern takes), the
//! runtime's block in docs/architecture.md giving exactly the code's defaults.

use std::path::{Path, PathBuf};
use std::process::Command;

use tern_runtime::RuntimeConfig;

const TERN: &str = env!("CARGO_BIN_EXE_tern");

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs the checker on `files` (none: the repository's docs): whether it passed, and what it printed.
fn check_docs(files: &[&Path]) -> (bool, String) {
    let out = Command::new("python3")
        .arg(root().join("scripts/check_docs.py"))
        .arg("--tern")
        .arg(TERN)
        .args(files)
        .output()
        .expect("python3 runs scripts/check_docs.py");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "check_docs.py broke: {text}"
    );
    (out.status.success(), text)
}

#[test]
fn the_docs_name_only_flags_keys_and_paths_that_exist() {
    let (ok, text) = check_docs(&[]);
    assert!(ok, "the docs drifted from the code:\n{text}");
}

#[test]
fn the_checker_fails_on_each_kind_of_drift() {
    let dir = tern_testkit::files::temp_dir("check-docs");
    // What a correct doc may say, so that each failure below is the drift and nothing else.
    let good = "# A doc\n\n```sh\n./target/release/tern cache -p 11311 -t 2 -m 256 -vv -o idle_timeout=30\n\
                ./target/release/tern pacer serve --config examples/campaigns.toml --io-threads 1 &   # --admin ADDR:PORT\n\
                cargo run --release -p tern -- run --cache-port 11311 \\\n  --data-dir /tmp/x\n```\n\n\
                `tern ping --listen 127.0.0.1:7070 --idle-timeout 30s`, `idle_timeout`, `[executor] workers`, \
                `spread = \"acceptor\"`, crates/tern-runtime/src/config.rs, `src/fixtures.rs`, `io_loop/conn.rs`, \
                [the architecture](../docs/architecture.md) and docs/pacer.md, \"Admin JSON\".\n\n\
                ```toml\nlisten = \"127.0.0.1:7070\"\n# idle_timeout = \"5m\"\n[executor]\nworkers = 2\n```\n";
    let path = dir.join("good.md");
    std::fs::write(
        &path,
        good.replace("../docs/", &format!("{}/docs/", root().display())),
    )
    .unwrap();
    let (ok, text) = check_docs(&[&path]);
    assert!(ok, "a correct doc is refused:\n{text}");
    // Each drift, and what the checker must say about it.
    let drifts: &[(&str, &str, &str)] = &[
        ("-t 2 -m 256", "-t 2 -m 256 -Q", "has no flag -Q"),
        ("-vv", "-vq", "has no flag -vq"),
        ("--io-threads 1", "--io-thread 1", "has no flag --io-thread"),
        (
            "--data-dir",
            "--data-directory",
            "has no flag --data-directory",
        ),
        ("# --admin", "# --admn", "a comment names --admn"),
        (
            "--idle-timeout 30s",
            "--idle 30s",
            "`tern ping` has no flag --idle",
        ),
        (
            "pacer serve",
            "pacer serv",
            "`tern pacer serv`: no such subcommand",
        ),
        (
            "release/tern cache",
            "release/tern cash",
            "`tern cash`: no such subcommand",
        ),
        (
            "`idle_timeout`",
            "`idle_timeout_ms`",
            "`idle_timeout_ms` is not a configuration key",
        ),
        (
            "[executor] workers`",
            "[executor] worker`",
            "[executor] has no key `worker`",
        ),
        (
            "`spread = ",
            "`spreading = ",
            "`spreading` is not a configuration key",
        ),
        ("\nworkers = 2", "\nworker = 2", "TOML key `worker`"),
        (
            "# idle_timeout =",
            "# idle_timeouts =",
            "TOML key `idle_timeouts`",
        ),
        (
            "src/config.rs",
            "src/configuration.rs",
            "does not exist in the repository",
        ),
        ("`src/fixtures.rs`", "`src/fixture.rs`", "is in no crate"),
        (
            "`io_loop/conn.rs`",
            "`io_loop/connection.rs`",
            "no file of that name",
        ),
        (
            "architecture.md)",
            "architecture-notes.md)",
            "which does not exist",
        ),
        (
            "\"Admin JSON\"",
            "\"Admin XML\"",
            "has no section \"Admin XML\"",
        ),
    ];
    for (from, to, said) in drifts {
        assert!(good.contains(from), "{from}");
        let bad = good
            .replacen(from, to, 1)
            .replace("../docs/", &format!("{}/docs/", root().display()));
        let path = dir.join("drift.md");
        std::fs::write(&path, bad).unwrap();
        let (ok, text) = check_docs(&[&path]);
        assert!(!ok && text.contains(said), "{from} -> {to}: {text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The ```toml blocks of a Markdown text (or of a Rust file's `//!` crate doc).
fn toml_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let line = line.trim_start();
        let line = line
            .strip_prefix("//!")
            .map_or(line, |l| l.strip_prefix(' ').unwrap_or(l));
        match &mut current {
            None if line.starts_with("```toml") => current = Some(String::new()),
            Some(block) if line.starts_with("```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    blocks
}

/// A block with its commented-out keys (`# idle_timeout = "5m"`: off by default) put back.
fn uncommented(block: &str) -> String {
    block
        .lines()
        .map(|line| {
            let rest = line.strip_prefix('#').map(str::trim_start);
            match rest {
                Some(rest)
                    if rest.split_once('=').is_some_and(|(key, _)| {
                        let key = key.trim();
                        !key.is_empty() && key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
                    }) =>
                {
                    rest.to_owned()
                }
                _ => line.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn every_toml_block_of_the_docs_parses_with_the_code_parser() {
    let root = root();
    let mut files: Vec<PathBuf> = vec![root.join("README.md"), root.join("examples/README.md")];
    for dir in [
        "docs",
        "crates/tern-pacer-core/src",
        "crates/tern-runtime/src",
    ] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "md" || e == "rs") {
                files.push(path);
            }
        }
    }
    let (mut campaigns, mut runtime) = (0, 0);
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for block in toml_blocks(&text) {
            for version in [block.clone(), uncommented(&block)] {
                if version.contains("[[campaign]]") || version.contains("currency") {
                    tern_pacer::campaigns::parse::<tern_pacer::money::Usd>(&version, false, 1)
                        .unwrap_or_else(|e| panic!("{}: {e}\n{version}", file.display()));
                    campaigns += 1;
                } else {
                    RuntimeConfig::from_toml(&version)
                        .unwrap_or_else(|e| panic!("{}: {e}\n{version}", file.display()));
                    runtime += 1;
                }
            }
        }
    }
    assert!(
        campaigns >= 2 && runtime >= 2,
        "the campaigns format (crates/tern-pacer-core/src/campaigns.rs) and the runtime's \
         (docs/architecture.md) are documented by TOML blocks"
    );
}

#[test]
fn the_runtime_block_of_docs_architecture_gives_the_code_defaults() {
    let text = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    let block = toml_blocks(&text)
        .into_iter()
        .find(|b| b.contains("max_in_flight"))
        .expect("docs/architecture.md documents the runtime's keys in a TOML block");
    let documented = RuntimeConfig::from_toml(&block).unwrap();
    let defaults = RuntimeConfig {
        listen: documented.listen,
        ..RuntimeConfig::default()
    };
    assert_eq!(format!("{documented:?}"), format!("{defaults:?}"));
}
