//! `tern pacer simulate` as the `tern` binary will run it: flags parsed by clap, a report, a chart.

use clap::Parser;
use tern_pacer::PacerArgs;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    pacer: PacerArgs,
}

#[test]
fn simulate_writes_a_chart() {
    let chart = std::env::temp_dir().join(format!("tern-pacer-cli-{}.svg", std::process::id()));
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
        chart.to_str().unwrap(),
    ])
    .unwrap();
    tern_pacer::run(&cli.pacer).unwrap();
    let svg = std::fs::read_to_string(&chart).unwrap();
    std::fs::remove_file(&chart).unwrap();
    assert!(svg.contains("hard-cap"));
}

#[test]
fn bad_flags_are_refused() {
    let cli = Cli::try_parse_from(["pacer", "simulate", "--loops", "0"]).unwrap();
    let err = tern_pacer::run(&cli.pacer).unwrap_err();
    assert!(err.to_string().contains("--loops"), "{err}");
    assert!(Cli::try_parse_from(["pacer", "simulate", "--hours", "many"]).is_err());
}

#[test]
fn serve_decides_over_tcp_and_reloads_its_campaigns_file() {
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};
    use tern_pacer::money::{Cpm, Usd};
    use tern_pacer::proto::{
        decode_reply, encode_bids, CampaignId, Candidate, Decision, Device, Geo, ImpKey, Limits,
        Reply, RequestHeader, Status,
    };
    use tern_runtime::Decode;

    let dir = std::env::temp_dir().join(format!("tern-pacer-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("campaigns.toml");
    let file = |id: u32| {
        format!(
            "currency = \"USD\"\n[[campaign]]\nid = {id}\nbudget = \"100\"\nmax_cpm = \"2\"\nstart_ms = 0\n\
             end_ms = 99999999999999\nstrategy = {{ kind = \"hard-cap\" }}\n"
        )
    };
    std::fs::write(&path, file(1)).unwrap();
    let cli = Cli::try_parse_from([
        "pacer",
        "serve",
        "--config",
        path.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--io-threads",
        "1",
        "--reload-ms",
        "10",
    ])
    .unwrap();
    let tern_pacer::PacerCommand::Serve(args) = &cli.pacer.command else {
        panic!("serve")
    };
    let serving = tern_pacer::start_serving(args).unwrap();
    let mut s = std::net::TcpStream::connect(serving.server.local_addr().unwrap()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut ask = |auction_id: u64| {
        let header = RequestHeader::<Usd> {
            key: ImpKey {
                auction_id,
                imp_id: 0,
            },
            floor: Cpm::ZERO,
            deadline_ms: u64::MAX,
            hour: 1,
            device: Device::Tv,
            geo: Geo::UNKNOWN,
            site_id: 0,
        };
        let candidates = [Candidate {
            campaign: CampaignId(1),
            max_bid: Cpm::from_units(1),
        }];
        let mut frame = Vec::new();
        encode_bids(
            &mut frame,
            auction_id,
            [(&header, &candidates[..])].into_iter(),
        );
        s.write_all(&frame).unwrap();
        let mut reply = vec![0u8; 8 + 10 + 13];
        s.read_exact(&mut reply).unwrap();
        match decode_reply::<Usd>(&reply, &Limits::default()) {
            Decode::Frame {
                request: Reply::Decisions { decisions, .. },
                ..
            } => decisions[0],
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(
        ask(1),
        Decision::Bid {
            campaign: CampaignId(1),
            price: Cpm::from_units(1)
        }
    );
    // Campaign 1 is renamed 2 in the file: once reloaded, 1 is unknown.
    std::fs::write(&path, file(2)).unwrap();
    let start = Instant::now();
    while serving
        .watcher
        .stats()
        .reloads
        .load(std::sync::atomic::Ordering::Acquire)
        == 0
    {
        assert!(start.elapsed() < Duration::from_secs(5), "no reload");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(ask(2), Decision::NoBid(Status::UnknownCampaign));
    serving.server.shutdown();
    serving.server.join();
    std::fs::remove_dir_all(&dir).unwrap();
}
