//! Issue 14's pacing goal on real simulated days (the example: one campaign per strategy, SimConfig::example)
//! over seeds 1-10 at four supplies of the 40.00 campaigns, from tight to ample: every pacing strategy stays
//! within 5% of the budget of its plan at the end of every slot, delivers at least 98% at 1.5x supply and
//! above, and no campaign overspends. `bench/pacing_sweep.py` runs the finer grid (1.2x-8x) through the CLI.
//! Each test prints its worst cases per strategy (`-- --nocapture`); the figures are in docs/pacer.md.

use std::collections::BTreeMap;

use tern_pacer_core::money::Micros;
use tern_pacer_core::strategy::Strategy;
use tern_pacer_sim::{peak_requests_for_supply, simulate, SimConfig, DIURNAL};

const MAX_GAP_PCT: f64 = 5.0;
const MIN_DELIVERY_PCT: f64 = 98.0;
const DELIVERY_FROM_SUPPLY: f64 = 1.5;

/// The worst seed's figures for one strategy at one supply.
#[derive(Default)]
struct Worst {
    gap_pct: f64,
    delivery_pct: f64,
    overspend: Micros<tern_pacer_core::money::Usd>,
}

/// Runs the example at `supply` for each seed, with `adjust` applied to the configuration, and keeps the worst
/// figures per strategy.
fn worst_over_seeds(
    supply: f64,
    seeds: std::ops::RangeInclusive<u64>,
    adjust: impl Fn(&mut SimConfig),
) -> BTreeMap<&'static str, Worst> {
    let mut worst: BTreeMap<&'static str, Worst> = BTreeMap::new();
    for seed in seeds {
        let mut cfg = SimConfig {
            peak_requests_per_slot: peak_requests_for_supply(supply),
            ..SimConfig::example(seed)
        };
        adjust(&mut cfg);
        for c in simulate(&cfg).campaigns {
            let w = worst.entry(c.strategy).or_insert(Worst {
                delivery_pct: f64::INFINITY,
                ..Worst::default()
            });
            w.gap_pct = w.gap_pct.max(c.max_gap_pct);
            w.delivery_pct = w.delivery_pct.min(c.delivery_pct);
            w.overspend = w.overspend.max(c.overspend);
        }
    }
    for (strategy, w) in &worst {
        println!(
            "{supply:>4}x {strategy:<9} worst gap {:5.2}%  delivery {:6.2}%  overspend {}",
            w.gap_pct,
            w.delivery_pct,
            w.overspend.micros()
        );
    }
    worst
}

/// The goal's misses among `worst`, named; hard cap does not pace (it spends as fast as it can, by design),
/// so only its overspend counts.
fn misses(supply: f64, worst: &BTreeMap<&'static str, Worst>) -> Vec<String> {
    let mut misses = Vec::new();
    for (strategy, w) in worst {
        let at = format!("{strategy} at {supply}x");
        if w.overspend != Micros::ZERO {
            misses.push(format!("{at}: overspent {} micros", w.overspend.micros()));
        }
        if *strategy == "hard-cap" {
            continue;
        }
        if w.gap_pct > MAX_GAP_PCT {
            misses.push(format!("{at}: {:.2}% from plan", w.gap_pct));
        }
        if supply >= DELIVERY_FROM_SUPPLY && w.delivery_pct < MIN_DELIVERY_PCT {
            misses.push(format!("{at}: delivered {:.2}%", w.delivery_pct));
        }
    }
    misses
}

/// Sets the traffic forecast of every strategy that plans on one.
fn set_forecast(cfg: &mut SimConfig, curve: [u32; 24]) {
    for c in &mut cfg.campaigns {
        match &mut c.strategy {
            Strategy::Shaped(s) => s.curve = curve,
            Strategy::Throttle(s) => s.curve = curve,
            Strategy::Pi(s) => s.curve = curve,
            Strategy::HardCap | Strategy::Even(_) => {}
        }
    }
}

#[test]
fn every_strategy_keeps_to_its_plan_from_tight_to_ample_supply() {
    let mut all = Vec::new();
    for supply in [1.2, 1.5, 2.8, 8.0] {
        all.extend(misses(supply, &worst_over_seeds(supply, 1..=10, |_| {})));
    }
    assert!(all.is_empty(), "{}", all.join("\n"));
}

#[test]
fn a_forecast_an_hour_late_still_keeps_within_the_goal() {
    // The simulated traffic peaks an hour before the campaigns expect it. At ample supply a controller
    // absorbs any forecast error, so only the tight supplies are run.
    let mut late = DIURNAL;
    late.rotate_right(1);
    let mut all = Vec::new();
    for supply in [1.2, 1.5] {
        let worst = worst_over_seeds(supply, 1..=10, |cfg| set_forecast(cfg, late));
        all.extend(misses(supply, &worst));
    }
    assert!(all.is_empty(), "{}", all.join("\n"));
}

#[test]
fn a_flat_plan_is_out_of_reach_when_diurnal_supply_is_tight() {
    // Why the plans follow a forecast: at 1.2x supply over the day, by 08:00 the traffic has offered 17% of
    // the budget and a flat plan wants 33%, so no strategy can keep to it (even's campaign is given the others'
    // budget and reach here, so its supply is as tight as theirs; the example gives it 3.6x and more).
    let worst = worst_over_seeds(1.2, 1..=3, |cfg| {
        set_forecast(cfg, [0; 24]);
        cfg.campaigns[0].budget = Micros::from_units(40);
        cfg.campaigns[0].reach_ppm = (0, 200_000);
    });
    for strategy in ["even", "shaped", "throttle", "pi"] {
        let gap = worst[strategy].gap_pct;
        assert!(
            gap > 10.0,
            "{strategy} kept within {gap:.2}% of a flat plan"
        );
    }
}
