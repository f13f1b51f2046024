//! tern load against a real `tern pacer serve` (the binary, on its own process): every reply validates,
//! every decision is counted once, and billing notices are applied. It lives here, beside the binary,
//! because the load generator depends on protocol crates only, never on a service.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;

use tern_bench::process::{free_port, spawn_listening};
use tern_load::{run_load, Config, IdRange, Mode, Outcome, PacerWorkload, Protocol};

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
    let addr: SocketAddr = ([127, 0, 0, 1], free_port().unwrap()).into();
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
