//! Traffic-shaped pacing: the budget spread over the flight in proportion to a forecast of traffic per hour
//! of the day (UTC), so more is spent when more users are there. Gated like [`super::Even`]: bid while spend
//! plus what is in flight stays under the plan a little ahead.

use super::pacing::{Goal, Input, Pacing};
use crate::money::Micros;

const HOUR_MS: u64 = 3_600_000;
const DAY_MS: u64 = 24 * HOUR_MS;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shaped {
    /// Relative traffic per UTC hour of the day (any scale; all zero means even).
    pub curve: [u32; 24],
    pub lookahead_ms: u64,
}

impl Shaped {
    /// The integral of the curve over `[0, t_ms)`, in weight × milliseconds.
    fn cumulative(&self, t_ms: u64) -> u128 {
        let weight = |h: usize| u128::from(self.curve[h].max(u32::from(self.curve == [0; 24])));
        let day: u128 = (0..24).map(weight).sum::<u128>() * u128::from(HOUR_MS);
        let rem = t_ms % DAY_MS;
        let partial: u128 = (0..24)
            .map(|h| {
                let into_hour = rem.saturating_sub(h as u64 * HOUR_MS).min(HOUR_MS);
                weight(h) * u128::from(into_hour)
            })
            .sum();
        u128::from(t_ms / DAY_MS) * day + partial
    }
}

impl Pacing for Shaped {
    fn plan<C>(&self, goal: &Goal<C>, now_ms: u64) -> Micros<C> {
        let flight = goal.flight;
        if now_ms >= flight.end_ms {
            return goal.budget;
        }
        let start = self.cumulative(flight.start_ms);
        let done = self
            .cumulative(now_ms.max(flight.start_ms))
            .saturating_sub(start);
        let total = self.cumulative(flight.end_ms).saturating_sub(start);
        if total == 0 {
            return goal.budget;
        }
        // Both fit in 64 bits once shifted by the same amount (the ratio keeps 64 bits of precision), so the
        // product with the budget cannot overflow.
        let shift = (128 - total.leading_zeros()).saturating_sub(64);
        goal.budget
            .scale((done >> shift) as u64, (total >> shift) as u64)
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
