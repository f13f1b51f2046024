//! Hard cap: bid on everything the campaign targets, as fast as the budget allows. Its plan is the even
//! one, for reporting only.

use super::pacing::{Goal, Input, Pacing};
use crate::money::Micros;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HardCap;

impl Pacing for HardCap {
    fn plan<C>(&self, goal: &Goal<C>, now_ms: u64) -> Micros<C> {
        goal.linear_plan(now_ms)
    }
    fn participate<C>(&self, _input: &Input<'_, C>) -> bool {
        true
    }
}
