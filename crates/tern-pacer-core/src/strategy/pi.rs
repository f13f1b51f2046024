//! A PI controller on spend: the error is how far cumulative spend lags the even plan (in millionths of the
//! budget); every interval the participation rate is set to `bias + kp * error + ki * sum(errors)`, clamped
//! to `[0, 1]`, with the integral clamped too so a long stall does not wind it up.

use super::pacing::{curve_plan, lag_ppm, participate_at_rate, Control, Goal, Input, Pacing};
use crate::money::Micros;

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
            integral_limit_ppm: 200_000,
            curve: [0; 24],
            seed: 0,
        }
    }
}

impl Pacing for Pi {
    fn plan<C>(&self, goal: &Goal<C>, now_ms: u64) -> Micros<C> {
        let flight = goal.flight;
        curve_plan(
            &self.curve,
            goal.budget,
            flight.start_ms,
            flight.end_ms,
            now_ms,
        )
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
        let integral = control.integral.saturating_add(error).clamp(-limit, limit);
        let rate = i64::from(self.bias_ppm)
            + self.kp_milli.saturating_mul(error) / 1000
            + self.ki_milli.saturating_mul(integral) / 1000;
        Control {
            rate_ppm: rate.clamp(0, 1_000_000) as u32,
            integral,
            last_tick_ms: now_ms.max(1),
            ..control
        }
    }
}
