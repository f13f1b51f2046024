//! A PI controller on spend: the error is how far cumulative spend lags the plan (in millionths of the
//! budget); every interval the participation rate is set to `bias + kp * error + ki * sum(errors)`, clamped
//! to `[0, 1]`. The plan spreads the budget in proportion to a forecast of traffic (`curve`), so the rate
//! that holds the plan is the same all day: about the budget over the supply.
//!
//! The integral is what finds that rate, so its bound lets `bias + ki * integral` reach both 0 and 1 (the
//! first version's bound stopped it at 0.6, and below 1.67x supply the proportional term had to hold the
//! rest with a standing lag: 1.2-1.4% of the budget at 1.2x, never delivered). It does not wind up: while
//! the rate is pinned at 0 or 1 by an error pushing it further, the error is not accumulated.

use super::pacing::{lag_ppm, participate_at_rate, Control, Goal, Input, Pacing};
use crate::money::Micros;

/// A rate of one (every request), in millionths.
const ONE_IN_PPM: i64 = 1_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pi {
    /// The rate with zero error, in millionths.
    pub bias_ppm: u32,
    /// Proportional gain, in thousandths (1000 = rate moves by the error).
    pub kp_milli: i64,
    /// Integral gain per interval, in thousandths.
    pub ki_milli: i64,
    pub interval_ms: u64,
    /// Bound on the accumulated error, in millionths of the budget.
    pub integral_limit_ppm: i64,
    /// The traffic forecast the plan follows: relative traffic per UTC hour (any scale; all zero is flat).
    pub curve: [u32; 24],
    pub seed: u64,
}

impl Default for Pi {
    fn default() -> Self {
        Pi {
            bias_ppm: 200_000,
            kp_milli: 20_000,
            ki_milli: 2_000,
            interval_ms: 60_000,
            // bias ± ki × 400,000 spans [-0.6, 1.0]: the integral alone can hold any rate.
            integral_limit_ppm: 400_000,
            curve: [0; 24],
            seed: 0,
        }
    }
}

impl Pi {
    fn rate(&self, error: i64, integral: i64) -> i64 {
        i64::from(self.bias_ppm)
            .saturating_add(self.kp_milli.saturating_mul(error) / 1000)
            .saturating_add(self.ki_milli.saturating_mul(integral) / 1000)
    }
}

impl Pacing for Pi {
    fn plan<C>(&self, goal: &Goal<C>, now_ms: u64) -> Micros<C> {
        goal.curve_plan(&self.curve, now_ms)
    }
    fn participate<C>(&self, input: &Input<'_, C>) -> bool {
        participate_at_rate(input, self.bias_ppm, self.seed)
    }
    fn tick<C>(&self, goal: &Goal<C>, control: Control, spent: Micros<C>, now_ms: u64) -> Control {
        if control.last_tick_ms != 0
            && now_ms < control.last_tick_ms.saturating_add(self.interval_ms)
        {
            return control;
        }
        let error = lag_ppm(self.plan(goal, now_ms), spent, goal.budget);
        let limit = self.integral_limit_ppm.max(0);
        let accumulated = control.integral.saturating_add(error).clamp(-limit, limit);
        let unclamped = self.rate(error, accumulated);
        let pinned = (unclamped > ONE_IN_PPM && error > 0) || (unclamped < 0 && error < 0);
        let integral = if pinned {
            control.integral.clamp(-limit, limit)
        } else {
            accumulated
        };
        Control {
            rate_ppm: self.rate(error, integral).clamp(0, ONE_IN_PPM) as u32,
            integral,
            last_tick_ms: now_ms.max(1),
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

    #[test]
    fn the_integral_does_not_wind_up_while_the_rate_is_pinned() {
        let pi = Pi::default();
        let goal = Goal::<Usd> {
            id: CampaignId(1),
            budget: Micros::from_units(100),
            flight: Flight {
                start_ms: 60_000,
                end_ms: 60_000 + 100 * 60_000,
            },
        };
        // Nothing spent while the plan runs on: after a few ticks the rate is pinned at 1 and the integral
        // stops where it was.
        let mut control = Control::default();
        let mut integrals = Vec::new();
        for minute in 1..=30 {
            control = pi.tick(&goal, control, Micros::ZERO, 60_000 + minute * 60_000);
            integrals.push(control.integral);
        }
        assert_eq!(control.rate_ppm, 1_000_000);
        assert_eq!(integrals[28], integrals[29], "{integrals:?}");
        assert!(integrals[29] < pi.integral_limit_ppm, "{integrals:?}");
    }
}
