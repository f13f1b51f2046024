use super::*;
use tern_pacer_core::strategy::Even;

/// A smaller day than the example, to keep the test quick.
fn day(seed: u64) -> SimConfig {
    SimConfig {
        peak_requests_per_slot: 300,
        ..SimConfig::example(seed)
    }
}

#[test]
fn goals_hold_on_an_example_day() {
    let report = simulate(&day(1));
    println!("{report}");
    assert!(report.requests > 200_000, "{report}");
    assert!(report.notices > 0 && report.wins > 0);
    for c in &report.campaigns {
        assert_eq!(
            c.overspend,
            Micros::ZERO,
            "campaign {} overspent: {report}",
            c.id
        );
        let supply_ratio = c.supply.micros() as f64 / c.budget.micros() as f64;
        assert!(
            supply_ratio >= 1.5,
            "campaign {} has only {supply_ratio:.2}x supply: {report}",
            c.id
        );
        assert!(
            c.delivery_pct >= 98.0,
            "campaign {} delivered {:.2}%: {report}",
            c.id,
            c.delivery_pct
        );
    }
    let spent: Micros<Usd> = report.campaigns.iter().map(|c| c.spent).sum();
    assert_eq!(
        spent, report.exchange_billed,
        "every billed impression counted once"
    );
    let even = report
        .campaigns
        .iter()
        .find(|c| c.strategy == "even")
        .unwrap();
    assert!(
        even.max_gap_pct <= 5.0,
        "even pacing strayed {:.2}% from plan: {report}",
        even.max_gap_pct
    );
    let hard_cap = report
        .campaigns
        .iter()
        .find(|c| c.strategy == "hard-cap")
        .unwrap();
    assert!(
        hard_cap.max_gap_pct > 20.0,
        "hard cap should run ahead of the even plan: {report}"
    );
}

#[test]
fn same_seed_same_report_at_any_thread_count() {
    let short = |threads| SimConfig {
        duration_ms: 4 * HOUR_MS,
        threads,
        ..day(7)
    };
    let one = simulate(&short(1));
    let three = simulate(&short(3));
    let four = simulate(&short(4));
    assert_eq!(one, three);
    assert_eq!(one, four);
    let other_seed = simulate(&SimConfig {
        seed: 8,
        ..short(1)
    });
    assert_ne!(
        one.campaigns[0].spent_by_slot,
        other_seed.campaigns[0].spent_by_slot
    );
}

#[test]
fn scarce_supply_is_reported_not_overspent() {
    // Budget far above what the traffic can buy: delivery falls short, nothing goes over.
    let mut cfg = SimConfig {
        duration_ms: 2 * HOUR_MS,
        ..day(3)
    };
    cfg.campaigns.truncate(1);
    cfg.campaigns[0].budget = Micros::from_units(10_000);
    cfg.campaigns[0].strategy = Strategy::Even(Even::default());
    cfg.campaigns[0].flight_end_ms = 2 * HOUR_MS;
    let report = simulate(&cfg);
    let c = &report.campaigns[0];
    assert!(c.supply < c.budget && c.spent <= c.supply, "{report}");
    assert!(c.delivery_pct < 50.0);
}

#[test]
fn late_bills_past_the_timeout_are_still_counted() {
    // Notices may come after reservations time out: the late bills are counted (real money), so the ledgers
    // still agree with the exchange; this is the one way a campaign can go over budget.
    let mut cfg = SimConfig {
        duration_ms: HOUR_MS,
        ..day(5)
    };
    cfg.notices.mean_delay_ms = 30_000;
    cfg.notices.max_delay_ms = 200_000;
    cfg.ledger.reservation_ttl_ms = 20_000;
    let report = simulate(&cfg);
    assert!(report.late_billed > 0, "{report}");
    let spent: Micros<Usd> = report.campaigns.iter().map(|c| c.spent).sum();
    assert_eq!(spent, report.exchange_billed, "{report}");
}

#[test]
fn chart_is_written() {
    let report = simulate(&SimConfig {
        duration_ms: HOUR_MS,
        ..day(2)
    });
    let path = std::env::temp_dir().join(format!("tern-pacer-chart-{}.svg", std::process::id()));
    write_chart(&report, &path).unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("polyline") && svg.contains("(even)"),
        "{svg:.300}"
    );
}
