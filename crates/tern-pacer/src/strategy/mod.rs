//! Pacing strategies: pure, deterministic functions of (campaign configuration, request, campaign state,
//! time). The same input always gives the same answer; where a strategy samples (throttles), the randomness
//! is a hash of the impression, the campaign and the strategy's seed.
//!
//! A strategy answers three questions: how much the campaign should have spent by a time ([`Pacing::plan`]),
//! whether to bid on this request now ([`Pacing::participate`]), and, for feedback controllers, how its
//! control state moves when time passes ([`Pacing::tick`], called by the loop every control interval; the
//! state is a plain value, so ticking is a pure function too). The ledger, not the strategy, guarantees the
//! budget: a strategy only spreads spend over time.
//!
//! Adding a strategy: a file here with its parameters and a [`Pacing`] implementation, a variant in
//! [`Strategy`], and a golden replay in `tests/golden.rs`.

mod even;
mod hard_cap;
mod pi;
mod shaped;
mod throttle;

pub use even::Even;
pub use hard_cap::HardCap;
pub use pi::Pi;
pub use shaped::Shaped;
pub use throttle::Throttle;

use crate::ledger::Slice;
use crate::money::{Cpm, Micros};
use crate::proto::{CampaignId, ImpKey, RequestHeader};
use crate::snapshot::Campaign;

/// A campaign's choice of strategy, with its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Strategy {
    HardCap,
    Even(Even),
    Shaped(Shaped),
    Throttle(Throttle),
    Pi(Pi),
}

/// A feedback controller's state for one campaign on one loop.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Control {
    /// Share of requests to bid on, in millionths.
    pub rate_ppm: u32,
    /// The PI controller's accumulated error.
    pub integral: i64,
    /// When the state last moved; 0 before the first tick.
    pub last_tick_ms: u64,
}

/// Everything a strategy may look at to decide one request.
pub struct Input<'a, C> {
    pub campaign: &'a Campaign<C>,
    pub request: &'a RequestHeader<C>,
    /// The price this campaign would bid.
    pub price: Cpm<C>,
    /// This loop's slice: its reservations, and the campaign's spend as this loop knows it.
    pub slice: &'a Slice<C>,
    pub control: Control,
    pub now_ms: u64,
}

impl<C> Input<'_, C> {
    /// The campaign's spend plus this loop's bids in flight: what pacing weighs against the plan.
    pub fn committed(&self) -> Micros<C> {
        self.slice
            .campaign_spent()
            .saturating_add(self.slice.reserved)
    }
}

/// What every strategy implements.
pub trait Pacing {
    /// Cumulative spend planned by `now_ms`: zero before the flight, the budget at its end.
    fn plan<C>(&self, campaign: &Campaign<C>, now_ms: u64) -> Micros<C>;
    /// Whether to bid on this request now.
    fn participate<C>(&self, input: &Input<'_, C>) -> bool;
    /// The control state after time passed to `now_ms` with `spent` spent; stateless strategies keep it.
    fn tick<C>(
        &self,
        _campaign: &Campaign<C>,
        control: Control,
        _spent: Micros<C>,
        _now_ms: u64,
    ) -> Control {
        control
    }
}

impl Pacing for Strategy {
    fn plan<C>(&self, campaign: &Campaign<C>, now_ms: u64) -> Micros<C> {
        match self {
            Strategy::HardCap => HardCap.plan(campaign, now_ms),
            Strategy::Even(s) => s.plan(campaign, now_ms),
            Strategy::Shaped(s) => s.plan(campaign, now_ms),
            Strategy::Throttle(s) => s.plan(campaign, now_ms),
            Strategy::Pi(s) => s.plan(campaign, now_ms),
        }
    }
    fn participate<C>(&self, input: &Input<'_, C>) -> bool {
        match self {
            Strategy::HardCap => HardCap.participate(input),
            Strategy::Even(s) => s.participate(input),
            Strategy::Shaped(s) => s.participate(input),
            Strategy::Throttle(s) => s.participate(input),
            Strategy::Pi(s) => s.participate(input),
        }
    }
    fn tick<C>(
        &self,
        campaign: &Campaign<C>,
        control: Control,
        spent: Micros<C>,
        now_ms: u64,
    ) -> Control {
        match self {
            Strategy::HardCap => HardCap.tick(campaign, control, spent, now_ms),
            Strategy::Even(s) => s.tick(campaign, control, spent, now_ms),
            Strategy::Shaped(s) => s.tick(campaign, control, spent, now_ms),
            Strategy::Throttle(s) => s.tick(campaign, control, spent, now_ms),
            Strategy::Pi(s) => s.tick(campaign, control, spent, now_ms),
        }
    }
}

/// The budget spread evenly over `[start_ms, end_ms)`, as planned by `now_ms`.
pub(crate) fn linear_plan<C>(
    budget: Micros<C>,
    start_ms: u64,
    end_ms: u64,
    now_ms: u64,
) -> Micros<C> {
    let duration = end_ms.saturating_sub(start_ms);
    if now_ms >= end_ms {
        return budget;
    }
    budget.scale(now_ms.saturating_sub(start_ms), duration)
}

/// A uniform draw in `0..1_000_000` from the impression, the campaign and a seed (splitmix64's finaliser:
/// a well-mixed 64-bit hash in a few instructions, no state).
pub(crate) fn sample_ppm(key: ImpKey, campaign: CampaignId, seed: u64) -> u32 {
    let mut z = key.auction_id
        ^ u64::from(key.imp_id).rotate_left(32)
        ^ u64::from(campaign.0).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ seed.wrapping_mul(0xd1b5_4a32_d192_ed03);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z % 1_000_000) as u32
}

/// Participation for the rate-controlled strategies: sample the request at the controller's current rate,
/// or at `initial_ppm` before the controller's first tick.
pub(crate) fn participate_at_rate<C>(input: &Input<'_, C>, initial_ppm: u32, seed: u64) -> bool {
    let rate = if input.control.last_tick_ms == 0 {
        initial_ppm
    } else {
        input.control.rate_ppm
    };
    sample_ppm(input.request.key, input.campaign.id, seed) < rate
}

/// The fraction of the budget `spent` is behind `plan` by (negative when ahead), in millionths.
pub(crate) fn lag_ppm<C>(plan: Micros<C>, spent: Micros<C>, budget: Micros<C>) -> i64 {
    if budget.is_zero() {
        return 0;
    }
    let lag = i128::from(plan.micros()) - i128::from(spent.micros());
    (lag * 1_000_000 / i128::from(budget.micros())).clamp(-1_000_000, 1_000_000) as i64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::money::Usd;

    #[test]
    fn samples_are_spread_and_deterministic() {
        let n = 100_000u64;
        let below_half = (0..n)
            .filter(|i| {
                sample_ppm(
                    ImpKey {
                        auction_id: *i,
                        imp_id: 0,
                    },
                    CampaignId(1),
                    7,
                ) < 500_000
            })
            .count() as u64;
        assert!((below_half as i64 - 50_000).abs() < 1_000, "{below_half}");
        let key = ImpKey {
            auction_id: 5,
            imp_id: 6,
        };
        assert_eq!(
            sample_ppm(key, CampaignId(1), 7),
            sample_ppm(key, CampaignId(1), 7)
        );
        assert_ne!(
            sample_ppm(key, CampaignId(1), 7),
            sample_ppm(key, CampaignId(2), 7)
        );
    }

    fn any_strategy() -> impl proptest::strategy::Strategy<Value = Strategy> {
        use proptest::prelude::{any, prop_oneof, Just};
        use proptest::strategy::Strategy as _;
        prop_oneof![
            Just(Strategy::HardCap),
            any::<u64>().prop_map(|lookahead_ms| Strategy::Even(Even { lookahead_ms })),
            (any::<[u32; 24]>(), any::<u64>()).prop_map(|(curve, lookahead_ms)| Strategy::Shaped(
                Shaped {
                    curve,
                    lookahead_ms
                }
            )),
            (
                any::<u32>(),
                any::<u32>(),
                any::<u64>(),
                any::<u32>(),
                any::<u64>()
            )
                .prop_map(
                    |(initial_rate_ppm, step_ppm, interval_ms, finish_early_ppm, seed)| {
                        Strategy::Throttle(Throttle {
                            initial_rate_ppm,
                            step_ppm,
                            interval_ms,
                            finish_early_ppm,
                            seed,
                        })
                    }
                ),
            (
                any::<u32>(),
                any::<i64>(),
                any::<i64>(),
                any::<u64>(),
                any::<i64>(),
                any::<u64>()
            )
                .prop_map(
                    |(bias_ppm, kp_milli, ki_milli, interval_ms, integral_limit_ppm, seed)| {
                        Strategy::Pi(Pi {
                            bias_ppm,
                            kp_milli,
                            ki_milli,
                            interval_ms,
                            integral_limit_ppm,
                            seed,
                        })
                    }
                ),
        ]
    }

    proptest::proptest! {
        /// Whatever the parameters and times (even a flight that ends before it starts), strategies answer
        /// without panicking, plans stay within the budget and never go down as time passes.
        #[test]
        fn strategies_are_total_and_plans_monotone(
            strategy in any_strategy(),
            budget: u64,
            start_ms: u64,
            end_ms: u64,
            times in proptest::collection::vec(proptest::prelude::any::<u64>(), 1..8),
            control_rate: u32,
            integral: i64,
            last_tick_ms: u64,
            spent: u64,
        ) {
            use crate::proto::{Device, Geo};
            use crate::snapshot::{Flight, Targeting};
            let campaign = Campaign::<Usd> {
                id: CampaignId(1),
                budget: Micros::from_micros(budget),
                flight: Flight { start_ms, end_ms },
                max_cpm: Cpm::from_micros(1),
                targeting: Targeting::default(),
                strategy: strategy.clone(),
            };
            let mut times = times;
            times.sort_unstable();
            let mut previous = Micros::ZERO;
            let control = Control { rate_ppm: control_rate, integral, last_tick_ms };
            for &now_ms in &times {
                let plan = strategy.plan(&campaign, now_ms);
                proptest::prop_assert!(plan <= campaign.budget);
                proptest::prop_assert!(plan >= previous, "plan went down at {}", now_ms);
                previous = plan;
                let ticked = strategy.tick(&campaign, control, Micros::from_micros(spent), now_ms);
                proptest::prop_assert!(ticked.rate_ppm <= 1_000_000 || ticked == control);
                let request = RequestHeader {
                    key: ImpKey { auction_id: now_ms, imp_id: 0 },
                    floor: Cpm::ZERO,
                    deadline_ms: u64::MAX,
                    hour: 0,
                    device: Device::Unknown,
                    geo: Geo::UNKNOWN,
                    site_id: 0,
                };
                let slice = Slice::default();
                let _ = strategy.participate(&Input {
                    campaign: &campaign,
                    request: &request,
                    price: Cpm::from_micros(1),
                    slice: &slice,
                    control: ticked,
                    now_ms,
                });
            }
        }
    }

    #[test]
    fn linear_plan_runs_from_zero_to_budget() {
        let budget = Micros::<Usd>::from_units(100);
        assert_eq!(linear_plan(budget, 1000, 2000, 0), Micros::ZERO);
        assert_eq!(
            linear_plan(budget, 1000, 2000, 1500),
            Micros::from_units(50)
        );
        assert_eq!(linear_plan(budget, 1000, 2000, 2000), budget);
        assert_eq!(linear_plan(budget, 1000, 1000, 1000), budget);
    }
}
