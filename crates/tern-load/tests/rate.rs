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
    // Every whole second of the measured window completed close to the rate, too.
    for (second, &n) in report.timeline_per_s.iter().enumerate().skip(2).take(8) {
        let off = (n as f64 - rate).abs() / rate;
        assert!(
            off < 0.05,
            "second {second}: {n} replies\n{}",
            report.table()
        );
    }
}
