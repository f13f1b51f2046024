//! Even pacing: the budget spread evenly over the flight. A request is bid on while what the campaign has
//! spent and holds in flight is below the plan a little ahead (`lookahead_ms`), so spend follows the plan's
//! line from just under it and never runs ahead by more than one lookahead's worth.

use super::pacing::{Goal, Input, Pacing};
use crate::money::Micros;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Even {
    /// How far ahead of now the plan may be spent.
    pub lookahead_ms: u64,
}

impl Default for Even {
    fn default() -> Self {
        Even {
            lookahead_ms: 60_000,
        }
    }
}

impl Pacing for Even {
    fn plan<C>(&self, goal: &Goal<C>, now_ms: u64) -> Micros<C> {
        goal.linear_plan(now_ms)
    }
    fn participate<C>(&self, input: &Input<'_, C>) -> bool {
        let allowed = self.plan(&input.goal, input.now_ms.saturating_add(self.lookahead_ms));
        input.fits(allowed)
    }
}
