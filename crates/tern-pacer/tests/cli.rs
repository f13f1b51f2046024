//! `tern pacer simulate` as the `tern` binary will run it: flags parsed by clap, a report, a chart; and
//! `tern pacer serve` deciding over TCP and reloading its campaigns file.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::Parser;
use common::{candidates, one_campaign, request, serve, stop, wait_for, Cli, Gateway, TempDir};
use tern_pacer::money::Cpm;
use tern_pacer::proto::{CampaignId, Decision, Device, Status};

#[test]
fn simulate_writes_a_chart() {
    let dir = TempDir::new("cli");
    let chart = dir.arg("chart.svg");
    let cli = Cli::try_parse_from([
        "pacer",
        "simulate",
        "--seed",
        "3",
        "--hours",
        "2",
        "--loops",
        "2",
        "--threads",
        "2",
        "--chart",
        &chart,
    ])
    .unwrap();
    tern_pacer::run(&cli.pacer).unwrap();
    let svg = std::fs::read_to_string(&chart).unwrap();
    assert!(svg.contains("hard-cap"));
}

#[test]
fn simulate_json_has_every_slot_of_every_campaign() {
    let cli = Cli::try_parse_from(["pacer", "simulate", "--hours", "2", "--json"]).unwrap();
    let tern_pacer::PacerCommand::Simulate(args) = &cli.pacer.command else {
        panic!("parsed as {:?}", cli.pacer.command);
    };
    let report = tern_pacer::simulation(args).unwrap();
    let json = tern_pacer::simulation_json(args, &report);
    assert_eq!(json["hours"], 2);
    assert_eq!(json["slot_ms"], 60_000);
    let campaigns = json["campaigns"].as_array().unwrap();
    assert_eq!(campaigns.len(), report.campaigns.len());
    for (c, want) in campaigns.iter().zip(&report.campaigns) {
        assert_eq!(c["strategy"], want.strategy);
        let spent = c["spent_by_slot"].as_array().unwrap();
        let plan = c["plan_by_slot"].as_array().unwrap();
        // Two hours of one-minute slots, then the drain until every notice is in.
        assert!(spent.len() > 120 && spent.len() == plan.len());
        assert_eq!(spent.last().unwrap(), &c["spent_micros"]);
        // The report's max gap is the largest |spent - plan| at a slot's end, in % of the budget.
        let budget = c["budget_micros"].as_u64().unwrap() as f64;
        let gap = spent
            .iter()
            .zip(plan)
            .map(|(s, p)| s.as_u64().unwrap().abs_diff(p.as_u64().unwrap()))
            .max()
            .unwrap() as f64
            * 100.0
            / budget;
        assert!((gap - c["max_gap_pct"].as_f64().unwrap()).abs() < 1e-9);
    }
}

#[test]
fn simulate_json_with_placements_counts_what_was_filtered_and_why() {
    let json_of = |flags: &[&str]| {
        let mut argv = vec!["pacer", "simulate", "--hours", "2", "--json"];
        argv.extend_from_slice(flags);
        let cli = Cli::try_parse_from(&argv).unwrap();
        let tern_pacer::PacerCommand::Simulate(args) = &cli.pacer.command else {
            panic!("parsed as {:?}", cli.pacer.command);
        };
        tern_pacer::simulation_json(args, &tern_pacer::simulation(args).unwrap())
    };
    let plain = json_of(&[]);
    assert!(plain.get("placements").is_none() && plain.get("filtered").is_none());
    assert!(plain["campaigns"][0].get("filtered").is_none());

    let placed = json_of(&["--placements"]);
    assert_eq!(placed["placements"], true);
    assert_eq!(placed["requests"], plain["requests"], "the same traffic");
    let total = placed["filtered"].as_object().unwrap();
    for (reason, count) in total {
        let per_campaign: u64 = placed["campaigns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["filtered"][reason].as_u64().unwrap())
            .sum();
        assert_eq!(count.as_u64(), Some(per_campaign), "{reason}");
    }
    // Every reason is listed, zeros included; the mix blocks IAB18, which campaign 3 is in.
    assert!(total.contains_key("BlockedApp") && total.contains_key("BelowFloor"));
    assert!(placed["campaigns"][2]["filtered"]["BlockedCategory"].as_u64() > Some(0));
}

#[test]
fn bad_flags_are_refused() {
    let cli = Cli::try_parse_from(["pacer", "simulate", "--loops", "0"]).unwrap();
    let err = tern_pacer::run(&cli.pacer).unwrap_err();
    assert!(err.to_string().contains("--loops"), "{err}");
    assert!(Cli::try_parse_from(["pacer", "simulate", "--hours", "many"]).is_err());
    // --admin takes ADDR:PORT as every service does (a bare port: 127.0.0.1), and nothing else.
    let admin = |value: &str| {
        Cli::try_parse_from(["pacer", "serve", "--config", "c.toml", "--admin", value]).map(|cli| {
            match cli.pacer.command {
                tern_pacer::PacerCommand::Serve(args) => args.admin,
                other => panic!("parsed as {other:?}"),
            }
        })
    };
    assert_eq!(
        admin("0.0.0.0:9400").unwrap(),
        Some("0.0.0.0:9400".parse().unwrap())
    );
    assert_eq!(
        admin("9400").unwrap(),
        Some("127.0.0.1:9400".parse().unwrap())
    );
    let err = admin("localhost:x").unwrap_err().to_string();
    assert!(err.contains("is not ADDR:PORT"), "{err}");
    let dir = TempDir::with_campaigns("bad-flags", &one_campaign(1, "100", "2"));
    let campaigns = dir.arg("campaigns.toml");
    for (flags, named) in [
        (&["--max-tracked", "0"][..], "--max-tracked"),
        (&["--max-tracked", "2147483648"], "--max-tracked"),
        (
            &["--reservation-ttl-ms", "2000", "--forget-after-ms", "1000"],
            "--forget-after-ms",
        ),
    ] {
        let mut argv = vec![
            "pacer",
            "serve",
            "--config",
            &campaigns,
            "--listen",
            "127.0.0.1:0",
        ];
        argv.extend_from_slice(flags);
        let cli = Cli::try_parse_from(&argv).unwrap();
        let err = tern_pacer::run(&cli.pacer).unwrap_err();
        assert!(err.to_string().contains(named), "{flags:?}: {err}");
    }
}

#[test]
fn serve_decides_over_tcp_and_reloads_its_campaigns_file() {
    let dir = TempDir::with_campaigns("serve", &one_campaign(1, "100", "2"));
    let campaigns = dir.arg("campaigns.toml");
    let serving = serve(&[
        "--config",
        &campaigns,
        "--listen",
        "127.0.0.1:0",
        "--io-threads",
        "1",
        "--reload-ms",
        "10",
    ]);
    let mut g = Gateway::connect(serving.server.local_addr().unwrap());
    let mut ask = |auction_id: u64| {
        let header = request(auction_id, b"--", Device::Tv);
        g.bid(header, candidates(1, 1_000_000))
    };
    assert_eq!(
        ask(1),
        Decision::Bid {
            campaign: CampaignId(1),
            price: Cpm::from_units(1)
        }
    );
    // Campaign 1 is renamed 2 in the file: once reloaded, 1 is unknown.
    std::fs::write(&campaigns, one_campaign(2, "100", "2")).unwrap();
    let reloads = &serving.watcher.stats().reloads;
    wait_for("a reload", Duration::from_secs(5), || {
        reloads.load(Ordering::Acquire) > 0
    });
    assert_eq!(ask(2), Decision::NoBid(Status::UnknownCampaign));
    stop(serving);
}
