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

/// `cfg` (an example) as `tern pacer simulate --hours 2 --loops 2` runs it: two hours of traffic on two
/// loops, the flights ending with the traffic.
fn two_hours(cfg: SimConfig) -> SimConfig {
    let mut cfg = SimConfig {
        duration_ms: 2 * HOUR_MS,
        loops: 2,
        ..cfg
    };
    for c in &mut cfg.campaigns {
        c.flight_end_ms = cfg.duration_ms;
    }
    cfg
}

#[test]
fn a_run_without_placements_is_what_it_was_before_they_existed() {
    // Measured with the simulator before placements were added (`tern pacer simulate --seed 1 --hours 2
    // --loops 2 --json`): the default run's random streams and decisions must not have moved.
    let report = simulate(&two_hours(SimConfig::example(1)));
    let figures = (
        report.requests,
        report.bids,
        report.wins,
        report.notices,
        report.exchange_billed.micros(),
    );
    assert_eq!(figures, (16_828, 15_953, 15_550, 30_509, 24_181_629));
    let spent: Vec<u64> = report.campaigns.iter().map(|c| c.spent.micros()).collect();
    assert_eq!(
        spent,
        [7_194_508, 4_932_080, 4_448_853, 4_983_912, 2_622_276]
    );
    let supply: Vec<u64> = report.campaigns.iter().map(|c| c.supply.micros()).collect();
    assert_eq!(
        supply,
        [8_121_916, 5_194_242, 5_463_054, 5_351_961, 4_130_952]
    );
    assert!(report.campaigns.iter().all(|c| c.filtered.is_none()));
    assert!(!report.to_string().contains("filtered"), "{report}");
}

#[test]
fn ads_are_not_looked_at_without_placements() {
    let with_ads = SimConfig {
        placements: None,
        ..SimConfig::example_with_placements(4)
    };
    assert!(with_ads
        .campaigns
        .iter()
        .all(|c| !c.ads.creatives.is_empty()));
    assert_eq!(
        simulate(&two_hours(with_ads)),
        simulate(&two_hours(SimConfig::example(4)))
    );
}

/// Why a bid should not have been made on `placement`, checked here without `ads::fit`; `None`: it is
/// allowed.
fn bid_violation(
    placement: &Placement<'_, Usd>,
    campaign: &Campaign<Usd>,
    fit: &Fit<'_, '_, Usd>,
    price: Cpm<Usd>,
) -> Option<String> {
    let creative = fit.creative;
    let seat = campaign.ads.seat.as_deref();
    let listed =
        |list: &[String], item: Option<&str>| item.is_some_and(|i| list.iter().any(|l| l == i));
    let slot = match creative.format {
        Format::Banner => placement.banner,
        Format::Video => placement.video,
        Format::Native => placement.native,
    };
    let checks = [
        (
            campaign.ads.creatives.contains(creative),
            "a creative of another campaign",
        ),
        (slot.is_some(), "no slot of the creative's format"),
        (
            match (creative.format, fit.size) {
                (Format::Banner, Some(size)) => {
                    creative.sizes.contains(&size) && slot.is_some_and(|s| s.sizes.contains(&size))
                }
                (Format::Banner, None) => slot.is_some_and(|s| s.sizes.is_empty()),
                (_, size) => size.is_none(),
            },
            "a size the slot or the creative does not have",
        ),
        (
            !creative
                .attr
                .iter()
                .any(|a| slot.is_some_and(|s| s.battr.contains(a))),
            "a blocked attribute",
        ),
        (
            !creative.cat.iter().any(|c| {
                placement
                    .bcat
                    .iter()
                    .any(|b| c == b || c.starts_with(&format!("{b}-")))
            }),
            "a blocked category",
        ),
        (
            !creative.adomain.iter().any(|d| {
                placement
                    .badv
                    .iter()
                    .any(|b| d == b || d.ends_with(&format!(".{b}")))
            }),
            "a blocked advertiser",
        ),
        (
            placement.wseat.is_empty() || listed(placement.wseat, seat),
            "a seat not in wseat",
        ),
        (
            fit.deal.is_some() || !placement.private_auction,
            "an open bid in a private auction",
        ),
    ];
    if let Some((_, why)) = checks.iter().find(|(ok, _)| !ok) {
        return Some(why.to_string());
    }
    let door = match fit.deal {
        None if !campaign.ads.deals.is_empty() => {
            return Some("an open bid of a deal campaign".into())
        }
        None => placement.floor,
        Some(id) => {
            let Some(deal) = placement.deals.iter().find(|d| d.id == id) else {
                return Some(format!("deal {id} is not offered"));
            };
            if !campaign.ads.deals.iter().any(|d| d == id) {
                return Some(format!("deal {id} is not the campaign's"));
            }
            if !(deal.wseat.is_empty() || listed(deal.wseat, seat)) {
                return Some(format!("a seat not in deal {id}'s wseat"));
            }
            deal.floor
        }
    };
    if fit.floor != door {
        return Some(format!(
            "the fit's floor {:?} is not its door's {door:?}",
            fit.floor
        ));
    }
    (price < door).then(|| format!("{price:?} under its door's floor {door:?}"))
}

#[test]
fn with_placements_every_bid_fits_its_impression_and_the_report_says_what_was_filtered() {
    let cfg = SimConfig {
        peak_requests_per_slot: 300,
        ..SimConfig::example_with_placements(1)
    };
    let violations = std::sync::Mutex::new(Vec::new());
    let bids = std::sync::atomic::AtomicU64::new(0);
    let deal_bids = std::sync::atomic::AtomicU64::new(0);
    let report = simulate_with_bid_hook(&cfg, &|placement, campaign, fit, price| {
        bids.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if fit.deal.is_some() {
            deal_bids.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        if let Some(why) = bid_violation(placement, campaign, fit, price) {
            violations
                .lock()
                .unwrap()
                .push(format!("campaign {}: {why}", campaign.id.0));
        }
    });
    println!("{report}");
    let violations = violations.into_inner().unwrap();
    assert!(
        violations.is_empty(),
        "{:?}",
        &violations[..violations.len().min(5)]
    );
    // Every bid went through a fit, and some through the deal.
    assert_eq!(bids.into_inner(), report.bids, "{report}");
    assert!(deal_bids.into_inner() > 0, "{report}");

    // Each restriction of the mix filters the campaigns it was chosen to, and only those.
    let filtered = |id: u32, reason: Filtered| {
        report.campaigns[id as usize - 1]
            .filtered
            .expect("placements are on")
            .get(reason)
    };
    for (reason, campaigns) in [
        (Filtered::NoDeal, &[1, 2, 3, 4, 5][..]),
        (Filtered::SeatNotAllowed, &[4, 5]),
        (Filtered::BelowDealFloor, &[5]),
        (Filtered::NoFittingCreative, &[1, 2, 3, 4, 5]),
        (Filtered::BlockedAttribute, &[4]),
        (Filtered::BlockedCategory, &[3]),
        (Filtered::BlockedAdvertiser, &[2]),
        (Filtered::NoCreative, &[]),
        (Filtered::BlockedApp, &[]),
    ] {
        for id in 1..=5 {
            assert_eq!(
                filtered(id, reason) > 0,
                campaigns.contains(&id),
                "{} for campaign {id}: {report}",
                reason.name()
            );
        }
    }
    let total = report.filtered().unwrap();
    assert_eq!(
        total.total(),
        report
            .campaigns
            .iter()
            .map(|c| c.filtered.unwrap().total())
            .sum::<u64>()
    );
    let table = report.to_string();
    assert!(
        table.contains("filtered (why)") && table.contains("BlockedCategory"),
        "{table}"
    );
    assert!(
        !table.contains("BlockedApp"),
        "only reasons that occurred: {table}"
    );

    for c in &report.campaigns {
        assert_eq!(c.overspend, Micros::ZERO, "campaign {}: {report}", c.id);
    }
    let spent: Micros<Usd> = report.campaigns.iter().map(|c| c.spent).sum();
    assert_eq!(spent, report.exchange_billed, "{report}");

    // The same requests, market and open floors as without placements: a campaign bidding only in the open
    // auction sees a subset of its requests at the same clearing prices, so less supply.
    let without = simulate(&SimConfig {
        peak_requests_per_slot: 300,
        ..SimConfig::example(1)
    });
    assert_eq!(report.requests, without.requests);
    for (with, without) in report.campaigns.iter().zip(&without.campaigns).take(4) {
        assert!(
            with.supply < without.supply,
            "campaign {}: {:?} with placements, {:?} without",
            with.id,
            with.supply,
            without.supply
        );
    }
}

#[test]
fn with_placements_the_same_seed_gives_the_same_report_at_any_thread_count() {
    let short = |threads| SimConfig {
        duration_ms: 4 * HOUR_MS,
        threads,
        ..SimConfig::example_with_placements(7)
    };
    let one = simulate(&short(1));
    assert!(one.filtered().unwrap().total() > 0);
    assert_eq!(one, simulate(&short(3)));
    assert_eq!(one, simulate(&short(4)));
    assert_ne!(
        one.filtered(),
        simulate(&SimConfig {
            seed: 8,
            ..short(1)
        })
        .filtered()
    );
}
