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
mod pacing;
mod pi;
mod shaped;
mod throttle;

pub use even::Even;
pub use hard_cap::HardCap;
pub use pacing::{Control, Flight, Goal, Input, Pacing};
pub use pi::Pi;
pub use shaped::Shaped;
pub use throttle::Throttle;

use crate::money::Micros;

/// A campaign's choice of strategy, with its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Strategy {
    HardCap,
    Even(Even),
    Shaped(Shaped),
    Throttle(Throttle),
    Pi(Pi),
}

impl Strategy {
    /// Its `kind`, as a campaigns file names it (`hard-cap`, `even`, `shaped`, `throttle`, `pi`).
    pub fn name(&self) -> &'static str {
        match self {
            Strategy::HardCap => "hard-cap",
            Strategy::Even(_) => "even",
            Strategy::Shaped(_) => "shaped",
            Strategy::Throttle(_) => "throttle",
            Strategy::Pi(_) => "pi",
        }
    }
}

/// The strategy's `kind`, as a campaigns file names it; its parameters are not part of it.
impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Pacing for Strategy {
    fn plan<C>(&self, goal: &Goal<C>, now_ms: u64) -> Micros<C> {
        match self {
            Strategy::HardCap => HardCap.plan(goal, now_ms),
            Strategy::Even(s) => s.plan(goal, now_ms),
            Strategy::Shaped(s) => s.plan(goal, now_ms),
            Strategy::Throttle(s) => s.plan(goal, now_ms),
            Strategy::Pi(s) => s.plan(goal, now_ms),
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
    fn tick<C>(&self, goal: &Goal<C>, control: Control, spent: Micros<C>, now_ms: u64) -> Control {
        match self {
            Strategy::HardCap => HardCap.tick(goal, control, spent, now_ms),
            Strategy::Even(s) => s.tick(goal, control, spent, now_ms),
            Strategy::Shaped(s) => s.tick(goal, control, spent, now_ms),
            Strategy::Throttle(s) => s.tick(goal, control, spent, now_ms),
            Strategy::Pi(s) => s.tick(goal, control, spent, now_ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::pacing::{linear_plan, sample_ppm};
    use super::*;
    use crate::ledger::Slice;
    use crate::money::{Cpm, Usd};
    use crate::proto::{CampaignId, ImpKey, RequestHeader};

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
                (any::<u32>(), any::<u32>(), any::<u64>(), any::<u64>()),
                (any::<u32>(), any::<u32>(), any::<[u32; 24]>(), any::<u64>())
            )
                .prop_map(
                    |(
                        (initial_rate_ppm, step_ppm, interval_ms, catch_up_ms),
                        (min_rate_ppm, finish_early_ppm, curve, seed),
                    )| {
                        Strategy::Throttle(Throttle {
                            initial_rate_ppm,
                            step_ppm,
                            interval_ms,
                            catch_up_ms,
                            min_rate_ppm,
                            finish_early_ppm,
                            curve,
                            seed,
                        })
                    }
                ),
            (
                (any::<u32>(), any::<i64>(), any::<i64>(), any::<u64>()),
                (any::<i64>(), any::<[u32; 24]>(), any::<u64>())
            )
                .prop_map(
                    |(
                        (bias_ppm, kp_milli, ki_milli, interval_ms),
                        (integral_limit_ppm, curve, seed),
                    )| {
                        Strategy::Pi(Pi {
                            bias_ppm,
                            kp_milli,
                            ki_milli,
                            interval_ms,
                            integral_limit_ppm,
                            curve,
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
            spent_at_tick: u64,
            last_tick_ms: u64,
            spent: u64,
        ) {
            use crate::proto::{Device, Geo};
            let goal = Goal::<Usd> {
                id: CampaignId(1),
                budget: Micros::from_micros(budget),
                flight: Flight { start_ms, end_ms },
            };
            let mut times = times;
            times.sort_unstable();
            let mut previous = Micros::ZERO;
            let control = Control {
                rate_ppm: control_rate,
                integral,
                spent_micros: spent_at_tick,
                last_tick_ms,
            };
            for &now_ms in &times {
                let plan = strategy.plan(&goal, now_ms);
                proptest::prop_assert!(plan <= goal.budget);
                proptest::prop_assert!(plan >= previous, "plan went down at {}", now_ms);
                previous = plan;
                let ticked = strategy.tick(&goal, control, Micros::from_micros(spent), now_ms);
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
                    goal,
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
