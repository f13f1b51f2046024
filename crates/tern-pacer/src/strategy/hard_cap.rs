//! Hard cap: bid on everything the campaign targets, as fast as the budget allows. Its plan is the even
//! one, for reporting only.

use super::{linear_plan, Input, Pacing};
use crate::money::Micros;
use crate::snapshot::Campaign;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HardCap;

impl Pacing for HardCap {
    fn plan<C>(&self, campaign: &Campaign<C>, now_ms: u64) -> Micros<C> {
        linear_plan(
            campaign.budget,
            campaign.flight.start_ms,
            campaign.flight.end_ms,
            now_ms,
        )
    }
    fn participate<C>(&self, _input: &Input<'_, C>) -> bool {
        true
    }
}
