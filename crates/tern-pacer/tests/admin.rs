//! The admin endpoint of a real `tern pacer serve` (started in-process by `start_serving` with `--admin 0`),
//! over real sockets on 127.0.0.1: `/campaigns/{id}` for a campaign a reload added after start, and the
//! crash journal's statistics on `/metrics` (Prometheus text, per thread on request) and `/stats`, across a
//! restart on the same journal; decisions counted by outcome.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{
    bid_request, campaign_entry, candidates, exchange, get, notice_url, now_ms, one_campaign,
    post_auction, request, wait_for, Gateway, Pacer, TempDir,
};
use serde_json::Value;
use tern_pacer::proto::{Decision, Device, Status};

#[test]
fn a_campaign_added_by_a_reload_is_served_by_id() {
    let pacer = Pacer::start(&one_campaign(1, "100", "2"), 1, &["--reload-ms", "10"]);
    let one = pacer.campaign(1);
    assert_eq!(one["budget_micros"], 100_000_000);
    // Its creative, seat and deals, as the file has them.
    assert_eq!(
        one["creatives"],
        serde_json::json!([{"id": "banner-1", "format": "banner", "sizes": [[300, 250]],
            "adomain": ["advertiser1.example"], "cat": [], "cattax": 1, "attr": [], "bundle": null}])
    );
    assert_eq!(
        (&one["seat"], &one["deals"]),
        (&Value::Null, &serde_json::json!([]))
    );
    assert_eq!(pacer.admin_get("/campaigns/2").status, 404);
    // Campaign 2 joins the file.
    std::fs::write(
        pacer.dir.campaigns(),
        format!(
            "{}\n{}",
            one_campaign(1, "100", "2"),
            campaign_entry(2, "50", "1")
        ),
    )
    .unwrap();
    let reloads = &pacer.serving().watcher.stats().reloads;
    wait_for("the reload", Duration::from_secs(5), || {
        reloads.load(Ordering::Acquire) >= 1
    });
    // `campaign` also checks that `/campaigns/2` is what `/campaigns` says of it.
    let added = pacer.campaign(2);
    assert_eq!(added["configured"], true);
    assert_eq!(added["budget_micros"], 50_000_000);
    assert_eq!(added["max_cpm_micros"], 1_000_000);
    // Not campaign ids the pacer knows: 404.
    for path in [
        "/campaigns/3",
        "/campaigns/4294967296",
        "/campaigns/x",
        "/campaigns/02",
        "/campaigns/+2",
        "/campaigns/2/loops",
        "/campaigns/",
    ] {
        assert_eq!(pacer.admin_get(path).status, 404, "{path}");
    }
    // Removed from the file, it is still known while its grants come back, as in `/campaigns`.
    std::fs::write(pacer.dir.campaigns(), one_campaign(1, "100", "2")).unwrap();
    wait_for("the second reload", Duration::from_secs(5), || {
        reloads.load(Ordering::Acquire) >= 2
    });
    let removed = pacer.campaign(2);
    assert_eq!(removed["configured"], false);
    assert_eq!(removed["budget_micros"], 0);
}

/// The value of `series` (a name, with its labels if any) in Prometheus text.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (name == series).then(|| value.parse().unwrap())
        })
}

/// The sum of `name`'s per-thread series (`name{thread="..."}`) in Prometheus text.
fn per_thread_sum(text: &str, name: &str) -> f64 {
    let prefix = format!("{name}{{thread=");
    text.lines()
        .filter(|line| line.starts_with(&prefix))
        .map(|line| line.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap())
        .sum()
}

#[test]
fn the_journal_statistics_are_on_metrics_and_stats() {
    const AUCTIONS: u64 = 6;
    let dir = TempDir::with_campaigns("journal-stats", &one_campaign(1, "100", "2.5"));
    let journal = dir.arg("journal");
    let flags = ["--journal-dir", journal.as_str(), "--journal-sync-ms", "10"];
    let pacer = Pacer::start_in(dir, 2, &flags);
    // Each auction reserves (a record) and is billed (another), on connections spread over both loops.
    for auction in 0..AUCTIONS {
        let mut s = pacer.connect();
        let response = exchange(
            &mut s,
            &post_auction(&bid_request(&format!("a{auction}"), "USA", 0.1)),
        );
        assert_eq!(response.status, 200);
        let billing = notice_url("billing", &format!("a{auction}"), "1", 1, Some("1"));
        assert_eq!(exchange(&mut s, &get(&billing)).json()["status"], "Applied");
    }
    let journal_stats = |pacer: &Pacer| pacer.admin("/stats")["service"]["journal"].clone();
    wait_for("an msync", Duration::from_secs(5), || {
        journal_stats(&pacer)["synced_bytes"].as_u64().unwrap() > 0
    });

    let metrics = String::from_utf8(pacer.admin_get("/metrics?per_thread=1").body).unwrap();
    let records = sample(&metrics, "tern_pacer_journal_records_total").unwrap();
    let bytes = sample(&metrics, "tern_pacer_journal_bytes_total").unwrap();
    assert!(records >= (2 * AUCTIONS) as f64, "{records}");
    assert!(
        bytes >= records * 8.0,
        "{bytes}: a record has an 8-byte header"
    );
    // Counted per loop, merged on read: the loops' series add up to the total.
    assert_eq!(
        per_thread_sum(&metrics, "tern_pacer_journal_records_total"),
        records
    );
    assert!(sample(
        &metrics,
        "tern_pacer_journal_records_total{thread=\"io-0\"}"
    )
    .is_some());
    assert!(sample(&metrics, "tern_pacer_journal_msyncs_total").unwrap() >= 1.0);
    assert!(sample(&metrics, "tern_pacer_journal_segments_total").unwrap() >= 2.0);
    assert_eq!(
        sample(&metrics, "tern_pacer_journal_errors_total"),
        Some(0.0)
    );
    assert_eq!(sample(&metrics, "tern_pacer_journal_generation"), Some(1.0));
    assert_eq!(
        sample(&metrics, "tern_pacer_journal_recovered_records_total"),
        Some(0.0)
    );

    let stats = pacer.admin("/stats");
    let counter = |stats: &Value, name: &str| stats["metrics"][name]["total"].as_u64().unwrap();
    assert!(counter(&stats, "tern_pacer_journal_records_total") >= records as u64);
    let journal_json = &stats["service"]["journal"];
    assert_eq!(journal_json["dir"], journal.as_str());
    assert_eq!(journal_json["generation"], 1);
    assert_eq!(journal_json["errors"], 0);
    assert!(journal_json["records"].as_u64().unwrap() >= records as u64);
    assert!(journal_json["msyncs"].as_u64().unwrap() >= 1);
    assert_eq!(journal_json["recovery"]["files"], 0);

    // Restarted on the same journal: recovery replays what the first run wrote.
    let dir = pacer.stop();
    let pacer = Pacer::start_in(dir, 1, &flags);
    let stats = pacer.admin("/stats");
    let recovery = &stats["service"]["journal"]["recovery"];
    assert_eq!(stats["service"]["journal"]["generation"], 2);
    assert_eq!(recovery["generation"], 1);
    assert!(recovery["files"].as_u64().unwrap() >= 3, "{recovery}");
    assert!(
        recovery["records"].as_u64().unwrap() >= 2 * AUCTIONS,
        "{recovery}"
    );
    assert_eq!(
        recovery["imps"], AUCTIONS,
        "every billed impression is remembered"
    );
    assert_eq!(recovery["torn"], 0);
    let metrics = String::from_utf8(pacer.admin_get("/metrics").body).unwrap();
    assert_eq!(
        sample(&metrics, "tern_pacer_journal_recovered_records_total"),
        recovery["records"].as_f64()
    );
    assert_eq!(
        sample(&metrics, "tern_pacer_journal_recovered_imps_total"),
        Some(AUCTIONS as f64)
    );
    assert_eq!(sample(&metrics, "tern_pacer_journal_generation"), Some(2.0));
    // The spend recovered is the spend billed: 1 USD CPM, a milli-dollar an impression.
    assert_eq!(pacer.campaign(1)["spent_micros"], AUCTIONS * 1000);
}

#[test]
fn decisions_are_counted_by_outcome_on_metrics() {
    let pacer = Pacer::start(&one_campaign(1, "100", "2"), 1, &[]);
    let mut gateway = Gateway::connect(pacer.addr());
    let count = |outcome: &str| {
        let sample = format!("tern_pacer_decisions_total{{outcome=\"{outcome}\"}} ");
        let metrics = String::from_utf8_lossy(&pacer.admin_get("/metrics").body).into_owned();
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&sample)?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let unknown_before = count("UnknownCampaign");
    // Campaign 7 is in no configuration: three requests naming only it.
    for auction in 0..3 {
        let decision = gateway.bid(
            request(9_000 + auction, b"US", Device::Phone),
            candidates(7, 1_000_000),
        );
        assert_eq!(decision, Decision::NoBid(Status::UnknownCampaign));
    }
    // Counted per loop and added to the metric after each request (no other test here names campaign 7).
    assert_eq!(count("UnknownCampaign") - unknown_before, 3);
    let bids_before = count("Bid");
    wait_for("a bid", Duration::from_secs(5), || {
        matches!(
            gateway.bid(
                request(now_ms(), b"US", Device::Phone),
                candidates(1, 2_000_000)
            ),
            Decision::Bid { .. }
        )
    });
    assert!(count("Bid") > bids_before);
}
