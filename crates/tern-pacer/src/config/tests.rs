use std::sync::atomic::Ordering;
use std::time::Instant;

use super::*;
use crate::money::{Eur, Usd};
use crate::service::PacerConfig;

const GOOD: &str = r#"
currency = "USD"

[[campaign]]
id = 1
budget = "500.25"
max_cpm = "4"
start_ms = 1000
end_ms = 2000
strategy = { kind = "even", lookahead_ms = 5 }
targeting = { hours = [18, 19], devices = ["phone", "tv"], geos = ["US", "FR"], sites = [9, 7] }

[[campaign]]
id = 2
budget = "10"
max_cpm = "0.5"
start_ms = 0
end_ms = 10
strategy = { kind = "throttle", step_ppm = 5000 }
"#;

#[test]
fn parses_a_full_toml_file() {
    let snapshot = parse::<Usd>(GOOD, false, 3).unwrap();
    assert_eq!(snapshot.version, 3);
    let c = snapshot.campaign(CampaignId(1)).unwrap();
    assert_eq!(c.budget.micros(), 500_250_000);
    assert_eq!(c.max_cpm, Cpm::from_units(4));
    assert_eq!(
        c.flight,
        Flight {
            start_ms: 1000,
            end_ms: 2000
        }
    );
    assert_eq!(c.strategy, Strategy::Even(Even { lookahead_ms: 5 }));
    assert_eq!(c.targeting.hours, (1 << 18) | (1 << 19));
    assert_eq!(
        c.targeting.devices,
        (1 << Device::Phone as u8) | (1 << Device::Tv as u8)
    );
    assert_eq!(c.targeting.geos, vec![Geo(*b"US"), Geo(*b"FR")]);
    assert_eq!(c.targeting.sites, vec![7, 9]);
    let c = snapshot.campaign(CampaignId(2)).unwrap();
    assert_eq!(c.targeting, Targeting::default());
    assert_eq!(
        c.strategy,
        Strategy::Throttle(Throttle {
            step_ppm: 5000,
            ..Throttle::default()
        })
    );
}

#[test]
fn parses_json_too() {
    let json = r#"{"currency": "EUR", "campaign": [{"id": 4, "budget": "1", "max_cpm": "2", "start_ms": 0,
        "end_ms": 5, "strategy": {"kind": "shaped", "curve": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,9]}}]}"#;
    let snapshot = parse::<Eur>(json, true, 1).unwrap();
    assert!(
        matches!(snapshot.campaign(CampaignId(4)).unwrap().strategy, Strategy::Shaped(s) if s.curve[23] == 9)
    );
}

#[test]
fn bad_files_are_refused_with_the_reason() {
    let cases = [
        (GOOD.replace("\"USD\"", "\"EUR\""), "currency"),
        (GOOD.replace("id = 2", "id = 1"), "appears twice"),
        (GOOD.replace("[18, 19]", "[24]"), "hour 24"),
        (GOOD.replace("\"tv\"", "\"fridge\""), "fridge"),
        (GOOD.replace("\"FR\"", "\"fr\""), "geo"),
        (GOOD.replace("\"500.25\"", "\"500.2500001\""), "budget"),
        (GOOD.replace("\"0.5\"", "\"-1\""), "max_cpm"),
        (GOOD.replace("end_ms = 10", "end_ms = 0"), "end_ms"),
        (
            GOOD.replace("kind = \"throttle\"", "kind = \"magic\""),
            "magic",
        ),
        (GOOD.replace("step_ppm", "stepppm"), "stepppm"),
        (
            GOOD.replace("max_cpm = \"4\"", "max_cpm = \"4\"\ncolour = 1"),
            "colour",
        ),
        ("currency = ".to_string(), "invalid"),
    ];
    for (text, needle) in cases {
        let err = parse::<Usd>(&text, false, 1).unwrap_err();
        assert!(err.to_string().contains(needle), "{needle}: {err}");
    }
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn watcher_reloads_good_files_and_keeps_the_last_good_one() {
    let dir = std::env::temp_dir().join(format!("tern-pacer-watch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("campaigns.toml");
    std::fs::write(&path, GOOD).unwrap();
    let service = Arc::new(PacerService::<Usd>::new(
        PacerConfig::default(),
        load(&path, 1).unwrap(),
    ));
    let watcher = Watcher::start(
        path.clone(),
        Arc::clone(&service),
        Duration::from_millis(10),
    )
    .unwrap();
    // A budget change.
    std::fs::write(&path, GOOD.replace("\"500.25\"", "\"600\"")).unwrap();
    wait_for("the reload", || {
        watcher.stats().reloads.load(Ordering::Acquire) == 1
    });
    let snapshot = service.snapshot();
    assert_eq!(snapshot.version, 2);
    assert_eq!(
        snapshot.campaign(CampaignId(1)).unwrap().budget,
        Micros::from_units(600)
    );
    assert_eq!(
        service.coordinator().budget(CampaignId(1)),
        Micros::from_units(600)
    );
    // A broken edit: reported, and the running configuration stays.
    std::fs::write(&path, "currency = \"USD\"\n[[campaign]]\nid = 1\n").unwrap();
    wait_for("the error", || {
        watcher.stats().errors.load(Ordering::Acquire) == 1
    });
    assert!(watcher
        .stats()
        .last_error
        .lock()
        .as_ref()
        .unwrap()
        .to_string()
        .contains("missing field"));
    assert_eq!(service.snapshot().version, 2);
    // Campaign 1 removed: its budget goes to zero in the coordinator.
    std::fs::write(
        &path,
        GOOD.split("[[campaign]]\nid = 2")
            .next()
            .unwrap()
            .replace("id = 1", "id = 3"),
    )
    .unwrap();
    wait_for("the second reload", || {
        watcher.stats().reloads.load(Ordering::Acquire) == 2
    });
    assert!(service.snapshot().campaign(CampaignId(1)).is_none());
    assert_eq!(service.coordinator().budget(CampaignId(1)), Micros::ZERO);
    drop(watcher);
    std::fs::remove_dir_all(&dir).unwrap();
}
