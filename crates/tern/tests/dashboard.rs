//! The live dashboard in a real browser: `tern run` with an admin endpoint, `tern load` on the cache, the
//! pacer and the recommender, and headless Chromium (Debian's, driven by Selenium:
//! tests/dashboard/check_dashboard.py) watching `/dashboard` meanwhile. The page must load without a console
//! error, show a panel per service, the cache's memory and each campaign's spend, and its numbers must move
//! while the load runs (the graph's too, through the recommender) and never go negative, though the cache's
//! counters are reset (`stats reset`) while it watches.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use tern_testkit::files::{png_size_and_colours, temp_dir};
use tern_testkit::{free_port, have, wait_for_port, ChildGuard};

fn tern(args: &[&str]) -> ChildGuard {
    ChildGuard(
        Command::new(env!("CARGO_BIN_EXE_tern"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("tern starts"),
    )
}

fn selenium_installed() -> bool {
    let selenium = || {
        let found = Command::new("python3")
            .args(["-c", "import selenium"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            found || std::env::var_os("CI").is_none(),
            "python3 cannot import selenium in CI (scripts/install-test-deps.sh installs it)"
        );
        found
    };
    have("/usr/bin/chromium") && have("/usr/bin/chromedriver") && selenium()
}

#[test]
fn the_dashboard_shows_every_service_and_its_numbers_move_under_load() {
    if !selenium_installed() {
        return;
    }
    let ports: Vec<u16> = (0..6).map(|_| free_port()).collect();
    let port = |i: usize| ports[i].to_string();
    let at = |i: usize| SocketAddr::from(([127, 0, 0, 1], ports[i]));
    let data_dir = temp_dir("dashboard-run");
    let admin = at(5).to_string();
    let run = tern(&[
        "run",
        "--cache-port",
        &port(0),
        "--pacer-port",
        &port(1),
        "--graph-port",
        &port(2),
        "--recommend-port",
        &port(3),
        "--ping-port",
        &port(4),
        "--admin",
        &admin,
        "--data-dir",
        data_dir.to_str().unwrap(),
    ]);
    for (i, port) in ports.iter().enumerate() {
        assert!(wait_for_port(at(i), Duration::from_secs(60)), "port {port}");
    }
    // Load on the cache (sets then gets) and on the pacer (bids on tern run's campaigns, half of them billed),
    // for longer than the browser watches.
    let cache = at(0).to_string();
    let pacer = at(1).to_string();
    let _cache_load = tern(&[
        "load",
        "-s",
        &cache,
        "--preload",
        "--rate",
        "2000",
        "-d",
        "40",
        "-q",
    ]);
    // And on the recommender, whose calls fan out to tern graph: both panels move too.
    let recommend = at(3).to_string();
    let _recommend_load = tern(&[
        "load",
        "--protocol",
        "recommend",
        "-s",
        &recommend,
        "--rate",
        "50",
        "-d",
        "40",
        "-q",
    ]);
    let _pacer_load = tern(&[
        "load",
        "--protocol",
        "pacer",
        "-s",
        &pacer,
        "--rate",
        "500",
        "--notices",
        "0.5",
        "-d",
        "40",
        "-q",
    ]);
    let screenshot =
        std::env::temp_dir().join(format!("tern-dashboard-{}.png", std::process::id()));
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/dashboard/check_dashboard.py"
    );
    let mut check = Command::new("timeout");
    check.args([
        "120",
        "python3",
        script,
        &format!("http://{admin}/dashboard"),
    ]);
    for id in [
        "service-cache",
        "service-pacer",
        "service-graph",
        "service-recommend",
        "connections-cache",
        "cache-items",
        "cache-hit-ratio",
        "pacer-campaigns",
        "spent-1",
        "process-rps",
    ] {
        check.args(["--expect", id]);
    }
    for id in [
        "rps-cache",
        "rps-pacer",
        "rps-recommend",
        "rps-graph",
        "p50-cache",
        "process-rps",
        "spent-1",
    ] {
        check.args(["--moving", id]);
    }
    check.args([
        "--seconds",
        "12",
        "--screenshot",
        screenshot.to_str().unwrap(),
    ]);
    // memcached's `stats reset` zeroes the counters now and then while the page watches: its rates must
    // read the reset as Prometheus does, never as a negative rate.
    let watching = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let resets = {
        let (watching, cache) = (watching.clone(), at(0));
        std::thread::spawn(move || {
            let mut conn = tern_testkit::connect(cache);
            while watching.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(2500));
                conn.write_all(b"stats reset\r\n").unwrap();
                let mut reply = [0u8; 7];
                conn.read_exact(&mut reply).unwrap();
                assert_eq!(&reply, b"RESET\r\n");
            }
        })
    };
    let out = check.output().expect("python3 runs");
    watching.store(false, std::sync::atomic::Ordering::Relaxed);
    resets.join().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the dashboard check failed ({}):\n{}{stdout}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let ((width, height), colours) = png_size_and_colours(&screenshot);
    assert!(
        width >= 1000 && height >= 700 && colours > 8,
        "{width}x{height}, {colours} colours"
    );
    let _ = std::fs::remove_file(&screenshot);
    drop(run);
    let _ = std::fs::remove_dir_all(&data_dir);
}
