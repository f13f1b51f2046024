use std::sync::atomic::Ordering;
use std::time::Instant;

use tern_pacer_core::coordinator::CoordinatorConfig;
use tern_pacer_core::fixtures::CAMPAIGNS_TOML as GOOD;
use tern_pacer_core::money::{Micros, Usd};
use tern_pacer_core::proto::CampaignId;

use super::*;

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
    let service = Arc::new(PacerState::<Usd>::new(
        CoordinatorConfig::default(),
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

#[test]
fn an_unknown_key_is_refused_naming_the_key_and_the_file() {
    let dir = std::env::temp_dir().join(format!("tern-pacer-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A typo at each level of the file: the top, a campaign, its strategy, its targeting, a creative.
    let typos = [
        (
            "currency = \"USD\"",
            "currency = \"USD\"\ncurrencies = 1",
            "currencies",
        ),
        (
            "budget = \"500.25\"",
            "budget = \"500.25\"\nbudgte = \"1\"",
            "budgte",
        ),
        ("lookahead_ms = 5", "look_ahead_ms = 5", "look_ahead_ms"),
        ("sites = [9, 7]", "site = [9, 7]", "site"),
        ("cattax = 2", "cattax = 2\ncategory = 2", "category"),
    ];
    for (json, name) in [(false, "campaigns.toml"), (true, "campaigns.json")] {
        let path = dir.join(name);
        for (from, to, key) in typos {
            assert!(GOOD.contains(from), "{from}");
            let toml_text = GOOD.replace(from, to);
            let text = if json {
                let value: toml::Value = toml::from_str(&toml_text).unwrap();
                serde_json::to_string(&value).unwrap()
            } else {
                toml_text
            };
            std::fs::write(&path, text).unwrap();
            let Err(err) = load::<Usd>(&path, 1) else {
                panic!("{key}: an unknown key is refused");
            };
            let message = err.to_string();
            assert!(
                message.contains(&format!("unknown field `{key}`"))
                    && message.contains(&path.display().to_string()),
                "{message}"
            );
        }
        // And the file without the typo loads.
        let text = if json {
            serde_json::to_string(&toml::from_str::<toml::Value>(GOOD).unwrap()).unwrap()
        } else {
            GOOD.to_owned()
        };
        std::fs::write(&path, text).unwrap();
        load::<Usd>(&path, 1).unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
