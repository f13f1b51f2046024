//! Runs against a real memcached: every protocol and transport, reply validation on the happy
//! path, bounds, CPU accounting and the JSON report.

mod common;

use common::quick_config;
use tern_load::{run_load, Arrival, Config, Mix, Mode, Op, Outcome, Protocol, Report, Transport};

fn assert_clean(report: &Report) {
    assert_eq!(report.errors, 0, "{}", report.table());
    assert!(report.requests > 0, "{}", report.table());
}

#[test]
fn text_tcp_mixed_workload_hits_every_preloaded_key() {
    let server = common::memcached();
    let config = Config {
        preload: true,
        multiget: 4,
        pipeline: 4,
        mix: "get=8,set=1,incr=1".parse().unwrap(),
        server_pid: Some(server.pid()),
        ..quick_config(server.addr)
    };
    let report = run_load(&config).unwrap();
    assert_clean(&report);
    // Everything was preloaded and nothing deletes: every get key hits, with the right value.
    assert_eq!(report.outcome(Outcome::Miss), 0, "{}", report.table());
    assert!(report.outcome(Outcome::Hit) > 0);
    assert!(report.outcome(Outcome::Stored) > 0);
    assert!(report.outcome(Outcome::Incremented) > 0);
    assert_eq!(report.outcome(Outcome::NotFound), 0);
    assert!(report.keys > report.requests, "multi-get counts keys");
    assert!(report.server_cpu_s.is_some());
    assert!(report.client_cpu_s > 0.0);
    assert_eq!(report.latency_us.count, report.keys);
}

#[test]
fn meta_tcp_counts_misses_and_deletes() {
    let server = common::memcached();
    let config = Config {
        protocol: Protocol::MemcacheMeta,
        mix: Mix(vec![
            (Op::Get, 4),
            (Op::Set, 1),
            (Op::Delete, 1),
            (Op::Decr, 1),
        ]),
        multiget: 2,
        ..quick_config(server.addr)
    };
    let report = run_load(&config).unwrap();
    assert_clean(&report);
    // Nothing preloaded: early gets miss, counters are not found.
    assert!(report.outcome(Outcome::Miss) > 0);
    assert!(report.outcome(Outcome::Hit) > 0, "sets make later gets hit");
    assert!(report.outcome(Outcome::Deleted) + report.outcome(Outcome::NotFound) > 0);
}

#[test]
fn udp_text_and_meta_reassemble_replies() {
    let server = common::memcached();
    for protocol in [Protocol::MemcacheText, Protocol::MemcacheMeta] {
        let config = Config {
            transport: Transport::Udp,
            protocol,
            preload: true,
            // memcached splits replies larger than 1400 bytes into several datagrams.
            value_size: "3000-5000".parse().unwrap(),
            multiget: if protocol == Protocol::MemcacheText {
                3
            } else {
                1
            },
            key_count: 200,
            mode: Mode::Open {
                rate: 2000.0,
                arrival: Arrival::Poisson,
            },
            ..quick_config(server.udp.expect("memcached's UDP address"))
        };
        let report = run_load(&config).unwrap();
        assert_clean(&report);
        assert_eq!(report.outcome(Outcome::Miss), 0, "{}", report.table());
        assert!(report.outcome(Outcome::Hit) > 0);
    }
}

#[test]
fn request_count_bound_stops_the_run_exactly() {
    let server = common::memcached();
    let config = Config {
        duration_s: None,
        requests: Some(5000),
        warmup_s: 0.0,
        threads: 2,
        ..quick_config(server.addr)
    };
    let report = run_load(&config).unwrap();
    assert_clean(&report);
    assert_eq!(report.requests, 5000);
    assert!(report.measured_s > 0.0 && report.measured_s < 30.0);
}

#[test]
fn report_json_round_trips() {
    let server = common::memcached();
    let report = run_load(&quick_config(server.addr)).unwrap();
    assert_clean(&report);
    let json = serde_json::to_string_pretty(&report).unwrap();
    let back: Report = serde_json::from_str(&json).unwrap();
    assert_eq!(back, report);
    assert!(json.contains("\"p999\""));
}

#[test]
fn unknown_server_pid_is_rejected_before_the_run() {
    let server = common::memcached();
    let config = Config {
        server_pid: Some(u32::MAX),
        ..quick_config(server.addr)
    };
    let err = run_load(&config).unwrap_err();
    assert!(format!("{err:#}").contains("server-pid"), "{err:#}");
}

#[test]
fn connection_refused_is_a_clear_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let err = run_load(&quick_config(port)).unwrap_err();
    assert!(format!("{err:#}").contains("refused"), "{err:#}");
}

#[test]
fn a_server_that_dies_ends_even_a_count_bounded_run() {
    let server = common::memcached();
    let config = Config {
        duration_s: None,
        requests: Some(1 << 40),
        warmup_s: 0.0,
        timeout_s: 0.5,
        ..quick_config(server.addr)
    };
    let killer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        drop(server);
    });
    let report = run_load(&config).unwrap();
    killer.join().unwrap();
    assert!(report.requests > 0 && report.requests < 1 << 40);
    assert!(report.connection_error.is_some(), "{}", report.table());
}
