//! Traffic-shaped pacing: the budget spread over the flight in proportion to a forecast of traffic per hour
//! of the day (UTC), so more is spent when more users are there. Gated like [`super::Even`]: bid while spend
//! plus what is in flight stays under the plan a little ahead.

use super::pacing::{Goal, Input, Pacing};
use crate::money::Micros;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shaped {
    /// Relative traffic per UTC hour of the day (any scale; all zero means even).
    pub curve: [u32; 24],
    pub lookahead_ms: u64,
}

impl Pacing for Shaped {
    fn plan<C>(&self, goal: &Goal<C>, now_ms: u64) -> Micros<C> {
        goal.curve_plan(&self.curve, now_ms)
    }
    fn participate<C>(&self, input: &Input<'_, C>) -> bool {
        let allowed = self.plan(&input.goal, input.now_ms.saturating_add(self.lookahead_ms));
        input.fits(allowed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::money::Usd;
    use crate::proto::CampaignId;
    use crate::strategy::Flight;

    const HOUR_MS: u64 = 3_600_000;
    const DAY_MS: u64 = 24 * HOUR_MS;

    #[test]
    fn plan_follows_the_curve() {
        let mut curve = [1; 24];
        curve[12] = 23; // Half of the day's weight is in hour 12.
        let shaped = Shaped {
            curve,
            lookahead_ms: 0,
        };
        let goal = Goal::<Usd> {
            id: CampaignId(1),
            budget: Micros::from_units(92),
            flight: Flight {
                start_ms: 2 * DAY_MS,
                end_ms: 3 * DAY_MS,
            },
        };
        let at = |h: u64| shaped.plan(&goal, 2 * DAY_MS + h * HOUR_MS).micros();
        assert_eq!(at(0), 0);
        assert_eq!(at(12), 12 * 2_000_000);
        assert_eq!(at(13), 12 * 2_000_000 + 46_000_000);
        assert_eq!(at(24), 92_000_000);
        let flat = Shaped {
            curve: [0; 24],
            lookahead_ms: 0,
        };
        assert_eq!(
            flat.plan(&goal, 2 * DAY_MS + 6 * HOUR_MS).micros(),
            23_000_000
        );
    }
}
