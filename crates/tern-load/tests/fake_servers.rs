//! Behaviour against misbehaving servers: a stall shows in open-loop latency (and is hidden by
//! closed loop, which is why open loop is the default for latency), and wrong values are caught.

mod common;

use std::time::Duration;

use common::{quick_config, Behaviour, FakeServer};
use tern_load::{run_load, Arrival, Config, Mix, Mode, Op, Outcome};

const STALL: Duration = Duration::from_millis(200);

fn stall_run(mode: Mode) -> tern_load::Report {
    // The stall starts 0.6 s after the first request: inside the measured window (0.2..1.7 s).
    let after = Duration::from_millis(600);
    let server = FakeServer::start(Behaviour::StallOnce {
        after,
        stall: STALL,
    });
    let config = Config {
        mode,
        connections: 10,
        duration_s: Some(1.5),
        warmup_s: 0.2,
        mix: Mix(vec![(Op::Get, 1)]),
        ..quick_config(server.addr)
    };
    run_load(&config).unwrap()
}

#[test]
fn open_loop_latency_shows_a_server_stall() {
    let report = stall_run(Mode::Open {
        rate: 2000.0,
        arrival: Arrival::Fixed,
    });
    assert_eq!(report.errors, 0, "{}", report.table());
    assert_eq!(report.outcome(Outcome::Miss), report.keys);
    // ~400 of ~3000 requests were scheduled during the stall and waited for it.
    assert!(report.latency_us.p99 > 100_000.0, "{}", report.table());
    assert!(report.latency_us.p999 > 150_000.0, "{}", report.table());
    // Sent late, they were answered quickly: the send-time view hides the stall.
    assert!(
        report.service_latency_us.p90 < report.latency_us.p99 / 10.0,
        "{}",
        report.table()
    );
}

#[test]
fn closed_loop_latency_hides_a_server_stall() {
    let report = stall_run(Mode::Closed);
    assert_eq!(report.errors, 0, "{}", report.table());
    // Only the 10 requests in flight saw the stall; the client simply stopped sending.
    assert!(report.latency_us.max > 150_000.0, "{}", report.table());
    assert!(report.latency_us.p999 < 50_000.0, "{}", report.table());
}

#[test]
fn wrong_values_are_counted_as_errors() {
    let server = FakeServer::start(Behaviour::WrongValues);
    let config = Config {
        mix: Mix(vec![(Op::Get, 1)]),
        multiget: 3,
        duration_s: Some(0.5),
        ..quick_config(server.addr)
    };
    let report = run_load(&config).unwrap();
    assert!(report.keys > 0);
    assert_eq!(
        report.outcome(Outcome::WrongValue),
        report.keys,
        "{}",
        report.table()
    );
    assert_eq!(report.outcome(Outcome::Hit), 0);
    assert_eq!(report.errors, report.keys);
}

#[test]
fn a_hung_server_times_out_and_the_run_still_ends() {
    let server = FakeServer::start(Behaviour::StallOnce {
        after: Duration::from_millis(100),
        stall: Duration::from_secs(30),
    });
    let config = Config {
        mix: Mix(vec![(Op::Get, 1)]),
        duration_s: Some(1.0),
        warmup_s: 0.0,
        timeout_s: 0.3,
        ..quick_config(server.addr)
    };
    let started = std::time::Instant::now();
    let report = run_load(&config).unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(report.outcome(Outcome::Timeout) > 0, "{}", report.table());
    assert!(
        report.outcome(Outcome::Miss) > 0,
        "answered before the hang"
    );
}
