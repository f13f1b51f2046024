//! tern load against a real `tern pacer serve` (the binary, on its own process): every reply validates,
//! every decision is counted once, and billing notices are applied; and `tern load --protocol pacer` with
//! its defaults bids on the campaigns `tern run` serves, with its output redirected to files as a script
//! would. It lives here, beside the binary, because the load generator depends on protocol crates only,
//! never on a service.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tern_bench::process::{free_port, spawn_listening};
use tern_load::{
    run_load, Config, IdRange, Mode, Outcome, PacerWorkload, Protocol, DEFAULT_CAMPAIGNS,
};
use tern_testkit::ChildGuard;

/// `tern run`'s campaigns (the binary embeds this file) and the repository's example campaigns.
const RUN_CAMPAIGNS: &str = include_str!("../src/default-campaigns.toml");
const EXAMPLE_CAMPAIGNS: &str = include_str!("../../../examples/campaigns.toml");

fn campaign_ids(toml: &str) -> BTreeSet<u32> {
    let snapshot = tern_pacer::campaigns::parse::<tern_pacer::money::Usd>(toml, false, 1)
        .expect("a valid campaigns file");
    snapshot.campaigns().iter().map(|c| c.id.0).collect()
}

/// A directory of the test's own, removed when the test ends (also when it fails).
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("tern-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `tern pacer serve` (the binary) on `campaigns`, one I/O loop.
fn serve_pacer(campaigns: &Path) -> (ChildGuard, SocketAddr) {
    let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let server = spawn_listening(
        Command::new(env!("CARGO_BIN_EXE_tern")).args([
            "pacer",
            "serve",
            "--config",
            campaigns.to_str().unwrap(),
            "--listen",
            &addr.to_string(),
            "--io-threads",
            "1",
        ]),
        addr,
    )
    .unwrap();
    (server, addr)
}

#[test]
fn the_default_campaign_range_is_what_tern_run_serves() {
    let range: BTreeSet<u32> = (DEFAULT_CAMPAIGNS.first..=DEFAULT_CAMPAIGNS.last).collect();
    assert_eq!(
        campaign_ids(RUN_CAMPAIGNS),
        range,
        "crates/tern/src/default-campaigns.toml"
    );
    let examples = campaign_ids(EXAMPLE_CAMPAIGNS);
    assert!(
        range.is_subset(&examples),
        "examples/campaigns.toml has {examples:?}, not all of {DEFAULT_CAMPAIGNS}"
    );
}

/// `tern run`, then `tern load --protocol pacer -s ADDR -d N`: the load generator's defaults ask for the
/// campaigns served, so it gets bids, and none of its candidates is unknown. Its output goes to files:
/// each progress report is one line of its own, without carriage returns or colours, and the table names
/// the protocol and transport as the flags do.
#[test]
fn tern_load_with_its_defaults_bids_on_the_campaigns_tern_run_serves() {
    let dir = Dir::new("load-pacer-defaults");
    let campaigns = dir.path("campaigns.toml");
    std::fs::write(&campaigns, RUN_CAMPAIGNS).unwrap();
    let (server, addr) = serve_pacer(&campaigns);
    let (stdout, stderr, json) = (
        dir.path("stdout"),
        dir.path("stderr"),
        dir.path("report.json"),
    );
    let mut load = ChildGuard(
        Command::new(env!("CARGO_BIN_EXE_tern"))
            .args(["load", "--protocol", "pacer", "-s", &addr.to_string()])
            .args(["-d", "2", "--warmup", "1", "-c", "4", "--json"])
            .arg(&json)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap(),
    );
    let end = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = load.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < end,
            "tern load did not finish a 3 s run in 60 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(server);
    let (out, err) = (
        std::fs::read_to_string(&stdout).unwrap(),
        std::fs::read_to_string(&stderr).unwrap(),
    );
    assert!(status.success(), "{status}\n{out}\n{err}");

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let outcome = |name: &str| report["outcomes"][name].as_u64().unwrap_or(0);
    let decisions = report["keys"].as_u64().unwrap();
    assert!(decisions > 1000, "{out}");
    assert_eq!(outcome("no_bid_unknown_campaign"), 0, "{out}");
    assert!(outcome("bid") > 0, "{out}");
    assert_eq!(report["errors"], 0, "{out}");
    assert_eq!(
        report["config"]["pacer"]["campaigns"],
        serde_json::json!({"first": DEFAULT_CAMPAIGNS.first, "last": DEFAULT_CAMPAIGNS.last})
    );

    // The table names what was run as the flags do (not `Pacer/Tcp`).
    let first = out.lines().next().unwrap_or_default();
    assert!(first.starts_with(&format!("pacer/tcp {addr} |")), "{out}");
    assert!(out.contains("| closed loop"), "{out}");
    // Redirected: one complete line per second, nothing redrawn, no escape codes.
    assert!(
        !err.contains(['\r', '\x1b']) && !out.contains(['\r', '\x1b']),
        "{err:?}"
    );
    let progress: Vec<&str> = err.lines().filter(|l| l.starts_with('[')).collect();
    assert!(progress.len() >= 2, "a line a second over 3 s:\n{err}");
    for line in &progress {
        let phase = line
            .split_once("] ")
            .map(|(_, rest)| rest.split_whitespace().next());
        assert!(
            matches!(phase, Some(Some("warm-up" | "measuring")))
                && line.contains("batches/s")
                && line.ends_with(" done"),
            "{line:?} is not a progress line of its own:\n{err}"
        );
    }
    assert!(err.ends_with('\n') || err.is_empty(), "{err:?}");
}

fn campaigns_file(dir: &std::path::Path) -> PathBuf {
    let mut text = String::from("currency = \"USD\"\n");
    for id in 1..=20 {
        text.push_str(&format!(
            "[[campaign]]\nid = {id}\nbudget = \"1000000\"\nmax_cpm = \"10\"\nstart_ms = 0\n\
             end_ms = 99999999999999\nstrategy = {{ kind = \"hard-cap\" }}\n"
        ));
    }
    let path = dir.join("campaigns.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn every_reply_of_a_real_pacer_validates() {
    let dir = std::env::temp_dir().join(format!("tern-load-pacer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let campaigns = campaigns_file(&dir);
    let (server, addr) = serve_pacer(&campaigns);
    let report = run_load(&Config {
        server: addr,
        protocol: Protocol::Pacer,
        connections: 4,
        pipeline: 2,
        mode: Mode::Closed,
        duration_s: Some(1.0),
        warmup_s: 0.2,
        timeout_s: 1.0,
        server_pid: Some(server.pid()),
        pacer: PacerWorkload {
            campaigns: IdRange { first: 1, last: 20 },
            notices: 0.5,
            ..PacerWorkload::default()
        },
        ..Config::default()
    })
    .unwrap();
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();

    let table = report.table();
    assert_eq!(report.errors, 0, "{table}");
    assert!(report.requests > 100, "{table}");
    assert_eq!(report.keys, 10 * report.requests, "{table}");
    // Every decision is counted once, by kind.
    let decisions: u64 = report
        .outcomes
        .iter()
        .filter(|(name, _)| name.as_str() == "bid" || name.starts_with("no_bid"))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(decisions, report.keys, "{table}");
    // Budgets are ample and every maximum bid clears every floor: most requests bid.
    let bids = report.outcome(Outcome::Bid);
    assert!(bids * 10 > report.keys * 9, "{table}");
    // About half the bids got a billing notice, on the connection that carried the bid.
    let applied = report.outcome(Outcome::AckApplied);
    assert!(applied > bids / 3 && applied < bids * 2 / 3, "{table}");
    assert!(
        table.contains("batches") && table.contains("decisions"),
        "{table}"
    );
    assert!(report.keys_per_server_cpu_s.unwrap() > 0.0);
}
