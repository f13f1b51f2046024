//! Adaptive throttle, after LinkedIn's budget pacing (Agarwal et al., KDD '14): each campaign bids on a
//! sampled share of its requests, the participation rate, and the plan spreads the budget in proportion to
//! a forecast of traffic (`curve`), so a rate that is right at one hour is right all day. Every interval the
//! rate is multiplied by the ratio of what the plan wanted spent over the interval, plus a share of the lag
//! behind plan (the catch-up), to what was spent; the factor is held within `[1/(1+step), 1+step]`, the rate
//! within `[min_rate, 1]`. It starts low (slow start) and plans to finish a little before the flight ends,
//! so late traffic dips do not leave budget unspent.
//!
//! Why the ratio and the catch-up rather than a step by the sign of the lag (the first version): the lag is
//! the integral of the rate's error, so a rate moved by its sign alone swings around the plan like an
//! undamped spring, 3-4% of the budget at 8x supply. The ratio reacts to the spend over the last interval
//! (the lag's slope), which damps it; the catch-up term closes what lag remains over `catch_up_ms`.

use super::pacing::{curve_plan, participate_at_rate, Control, Goal, Input, Pacing};
use crate::money::Micros;

/// A rate of one (every request), in millionths.
const ONE_IN_PPM: i128 = 1_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttle {
    /// The rate at the start of the flight, in millionths.
    pub initial_rate_ppm: u32,
    /// The most the rate moves per interval, in millionths of itself (up by `1 + step`, down by `1 / (1 + step)`).
    pub step_ppm: u32,
    pub interval_ms: u64,
    /// The lag behind plan is made up over this long (each interval asks for `lag × interval / catch_up`).
    pub catch_up_ms: u64,
    /// The lowest rate, in millionths (at least 1): a rate near zero would take hours to climb back.
    pub min_rate_ppm: u32,
    /// The plan ends this share of the flight early, in millionths.
    pub finish_early_ppm: u32,
    /// The traffic forecast the plan follows: relative traffic per UTC hour (any scale; all zero is flat).
    pub curve: [u32; 24],
    /// Seed of the sampling hash.
    pub seed: u64,
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle {
            initial_rate_ppm: 100_000,
            step_ppm: 100_000,
            interval_ms: 60_000,
            catch_up_ms: 1_800_000,
            min_rate_ppm: 10_000,
            finish_early_ppm: 50_000,
            curve: [0; 24],
            seed: 0,
        }
    }
}

impl Throttle {
    fn bounded(&self, rate: i128) -> u32 {
        let min = i128::from(self.min_rate_ppm.clamp(1, 1_000_000));
        rate.clamp(min, ONE_IN_PPM) as u32
    }
}

impl Pacing for Throttle {
    fn plan<C>(&self, goal: &Goal<C>, now_ms: u64) -> Micros<C> {
        let flight = goal.flight;
        let early = (u128::from(flight.duration_ms())
            * u128::from(self.finish_early_ppm.min(1_000_000))
            / 1_000_000) as u64;
        curve_plan(
            &self.curve,
            goal.budget,
            flight.start_ms,
            flight.end_ms - early,
            now_ms,
        )
    }
    fn participate<C>(&self, input: &Input<'_, C>) -> bool {
        participate_at_rate(input, self.bounded(self.initial_rate_ppm.into()), self.seed)
    }
    fn tick<C>(&self, goal: &Goal<C>, control: Control, spent: Micros<C>, now_ms: u64) -> Control {
        if control.last_tick_ms == 0 {
            return Control {
                rate_ppm: self.bounded(self.initial_rate_ppm.into()),
                spent_micros: spent.micros(),
                last_tick_ms: now_ms.max(1),
                ..control
            };
        }
        let elapsed = now_ms.saturating_sub(control.last_tick_ms);
        if elapsed < self.interval_ms {
            return control;
        }
        let plan_now = self.plan(goal, now_ms).micros();
        let planned = plan_now.saturating_sub(self.plan(goal, control.last_tick_ms).micros());
        let got = i128::from(spent.micros().saturating_sub(control.spent_micros));
        let lag = i128::from(plan_now) - i128::from(spent.micros());
        // Never more than the whole lag in one interval, however late the tick.
        let catch_up = self.catch_up_ms.max(1);
        let want = i128::from(planned)
            + lag.saturating_mul(elapsed.min(catch_up).into()) / i128::from(catch_up);
        let rate = i128::from(control.rate_ppm);
        let up = rate * (ONE_IN_PPM + i128::from(self.step_ppm)) / ONE_IN_PPM;
        let down = rate * ONE_IN_PPM / (ONE_IN_PPM + i128::from(self.step_ppm));
        let rate = match (got, want) {
            (0, 0) => rate,
            (0, w) if w > 0 => up,
            (0, _) => down,
            (g, w) => (rate.saturating_mul(w) / g).clamp(down, up),
        };
        Control {
            rate_ppm: self.bounded(rate),
            spent_micros: spent.micros(),
            last_tick_ms: now_ms,
            ..control
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::money::Usd;
    use crate::proto::CampaignId;
    use crate::strategy::Flight;

    const MINUTE_MS: u64 = 60_000;
    const START_MS: u64 = 1_000 * MINUTE_MS;

    /// A day of 1,440 minutes planned at one unit a minute, where the campaign spends `supply` units a minute
    /// times its rate: returns the rates after each tick and the lag at the end, in units.
    fn run(throttle: &Throttle, supply: f64, minutes: u64) -> (Vec<f64>, f64) {
        let goal = Goal::<Usd> {
            id: CampaignId(1),
            budget: Micros::from_units(1_440),
            flight: Flight {
                start_ms: START_MS,
                end_ms: START_MS + 1_440 * MINUTE_MS,
            },
        };
        let mut control = throttle.tick(&goal, Control::default(), Micros::ZERO, START_MS);
        let (mut spent, mut rates) = (0.0, Vec::new());
        for minute in 1..=minutes {
            spent += supply * f64::from(control.rate_ppm) / 1e6;
            let now = START_MS + minute * MINUTE_MS;
            let micros = Micros::from_micros((spent * 1e6) as u64);
            control = throttle.tick(&goal, control, micros, now);
            rates.push(f64::from(control.rate_ppm) / 1e6);
        }
        let lag = throttle
            .plan(&goal, START_MS + minutes * MINUTE_MS)
            .micros() as f64
            / 1e6
            - spent;
        (rates, lag)
    }

    fn flat() -> Throttle {
        Throttle {
            finish_early_ppm: 0,
            ..Throttle::default()
        }
    }

    #[test]
    fn the_rate_settles_on_budget_over_supply_without_swinging() {
        // Twice the supply the plan needs: the rate that holds the plan is 0.5. From the slow start it climbs
        // past 0.5 to make up the lag it built, then comes down to 0.5 without going under or back up.
        let (rates, lag) = run(&flat(), 2.0, 240);
        let peak = (0..rates.len())
            .max_by(|&a, &b| rates[a].total_cmp(&rates[b]))
            .unwrap();
        assert!(peak < 30, "peak at minute {peak}: {rates:?}");
        assert!(
            rates[peak..]
                .windows(2)
                .all(|w| w[1] <= w[0] && w[1] >= 0.5),
            "{rates:?}"
        );
        assert!((rates[120] - 0.5).abs() < 0.01, "{rates:?}");
        assert!(lag.abs() < 1.0, "lag {lag} units");
    }

    #[test]
    fn the_rate_stays_within_its_bounds() {
        // Less supply than the plan needs: the rate climbs to 1 and stays there.
        let (rates, _) = run(&flat(), 0.5, 120);
        assert_eq!(rates.last(), Some(&1.0));
        assert!(rates.iter().all(|r| *r <= 1.0));
        // Far ahead of plan (a hundred times the supply it needs): the rate falls to the floor, not below it.
        let (rates, _) = run(&flat(), 100.0, 120);
        assert_eq!(rates.last(), Some(&0.01));
        assert!(rates.iter().all(|r| *r >= 0.01));
    }
}
