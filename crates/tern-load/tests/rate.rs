//! The open-loop scheduler holds its rate over 10 s against a fast server (the only long test).

mod common;

use common::quick_config;
use tern_load::{run_load, Arrival, Config, Mode};

#[test]
fn open_loop_rate_is_within_one_percent_over_ten_seconds() {
    let server = common::memcached();
    let rate = 20_000.0;
    let config = Config {
        mode: Mode::Open {
            rate,
            arrival: Arrival::Fixed,
        },
        connections: 20,
        duration_s: Some(10.0),
        warmup_s: 0.5,
        preload: true,
        ..quick_config(server.addr)
    };
    let report = run_load(&config).unwrap();
    assert_eq!(report.errors, 0, "{}", report.table());
    assert_eq!(report.unsent, 0, "{}", report.table());
    let error = (report.requests_per_s - rate).abs() / rate;
    assert!(
        error < 0.01,
        "rate off by {:.2}%:\n{}",
        error * 100.0,
        report.table()
    );
    // The schedule does not drift: from the third second on (the first ones hold the warm-up), the replies
    // completed by the end of each whole second stay within 0.4 s worth of the rate of what the schedule
    // asked by then. A window per second or per two cannot be asked: this VM stalls a process for up to a few
    // hundred milliseconds at times (docs/benchmarks.md, bench/hiccup.py), and the open loop then sends the
    // late requests at once, so the seconds around a stall come up short and long (once 17,690 then the rest;
    // once seconds 6-7 at 37,524 of 40,000, the stall at the window's end, latency from schedule 265 ms at
    // worst, the run's total exact). A stall is a lag that comes back; drift is one that grows.
    let mut completed = 0u64;
    for (j, &n) in report.timeline_per_s.iter().skip(2).take(8).enumerate() {
        completed += n;
        let asked = rate * (j + 1) as f64;
        assert!(
            (completed as f64 - asked).abs() <= 0.4 * rate,
            "by the end of second {}: {completed} replies, {asked} asked\n{}",
            j + 2,
            report.table()
        );
    }
}
