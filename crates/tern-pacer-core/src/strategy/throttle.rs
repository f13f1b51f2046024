//! Adaptive throttle, after LinkedIn's budget pacing (Agarwal et al., KDD '14): each campaign bids on a
//! sampled share of its requests, the participation rate. Every interval the rate goes up by a factor when
//! spend is behind plan and down when ahead. It starts low (slow start) and plans to finish a little before
//! the flight ends, so late traffic dips do not leave budget unspent.

use super::pacing::{lag_ppm, linear_plan, participate_at_rate, Control, Goal, Input, Pacing};
use crate::money::Micros;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttle {
    /// The rate at the start of the flight, in millionths.
    pub initial_rate_ppm: u32,
    /// How much the rate moves per interval, in millionths of itself.
    pub step_ppm: u32,
    pub interval_ms: u64,
    /// The plan ends this share of the flight early, in millionths.
    pub finish_early_ppm: u32,
    /// Seed of the sampling hash.
    pub seed: u64,
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle {
            initial_rate_ppm: 100_000,
            step_ppm: 100_000,
            interval_ms: 60_000,
            finish_early_ppm: 50_000,
            seed: 0,
        }
    }
}

impl Pacing for Throttle {
    fn plan<C>(&self, goal: &Goal<C>, now_ms: u64) -> Micros<C> {
        let flight = goal.flight;
        let early = (u128::from(flight.duration_ms())
            * u128::from(self.finish_early_ppm.min(1_000_000))
            / 1_000_000) as u64;
        linear_plan(goal.budget, flight.start_ms, flight.end_ms - early, now_ms)
    }
    fn participate<C>(&self, input: &Input<'_, C>) -> bool {
        participate_at_rate(input, self.initial_rate_ppm, self.seed)
    }
    fn tick<C>(&self, goal: &Goal<C>, control: Control, spent: Micros<C>, now_ms: u64) -> Control {
        if control.last_tick_ms == 0 {
            return Control {
                rate_ppm: self.initial_rate_ppm,
                last_tick_ms: now_ms.max(1),
                ..control
            };
        }
        if now_ms < control.last_tick_ms.saturating_add(self.interval_ms) {
            return control;
        }
        let behind = lag_ppm(self.plan(goal, now_ms), spent, goal.budget) > 0;
        let rate = u64::from(control.rate_ppm);
        let step = (rate * u64::from(self.step_ppm) / 1_000_000).max(1_000);
        let rate = if behind {
            (rate + step).min(1_000_000)
        } else {
            rate.saturating_sub(step)
        };
        Control {
            rate_ppm: rate as u32,
            last_tick_ms: now_ms,
            ..control
        }
    }
}
