//! What every strategy builds on: the [`Pacing`] questions, what they are asked about (a campaign's
//! [`Goal`], the request's [`Input`], a controller's [`Control`] state) and the arithmetic the strategies
//! share (a linear plan, the lag behind it, sampling at a rate).

use crate::ledger::Slice;
use crate::money::{Cpm, Micros};
use crate::proto::{CampaignId, ImpKey, RequestHeader};

/// When a campaign may spend: `[start_ms, end_ms)`, Unix milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flight {
    pub start_ms: u64,
    pub end_ms: u64,
}

impl Flight {
    pub fn contains(&self, now_ms: u64) -> bool {
        (self.start_ms..self.end_ms).contains(&now_ms)
    }
    pub fn duration_ms(&self) -> u64 {
        self.end_ms.saturating_sub(self.start_ms)
    }
}

/// What pacing needs to know of a campaign: its budget and when it may spend it.
#[derive(Debug, PartialEq, Eq)]
pub struct Goal<C> {
    pub id: CampaignId,
    pub budget: Micros<C>,
    pub flight: Flight,
}

// Hand-written so that the currency marker `C` needs no bounds (as for the money types).
impl<C> Clone for Goal<C> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<C> Copy for Goal<C> {}

impl<C> Goal<C> {
    /// The budget spread evenly over the flight, as planned by `now_ms`.
    pub fn linear_plan(&self, now_ms: u64) -> Micros<C> {
        linear_plan(
            self.budget,
            self.flight.start_ms,
            self.flight.end_ms,
            now_ms,
        )
    }

    /// The budget spread over the flight in proportion to `curve` (see [`curve_plan`]), as planned by `now_ms`.
    pub(crate) fn curve_plan(&self, curve: &[u32; 24], now_ms: u64) -> Micros<C> {
        curve_plan(
            curve,
            self.budget,
            self.flight.start_ms,
            self.flight.end_ms,
            now_ms,
        )
    }
}

/// A feedback controller's state for one campaign on one loop.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Control {
    /// Share of requests to bid on, in millionths.
    pub rate_ppm: u32,
    /// The PI controller's accumulated error.
    pub integral: i64,
    /// The campaign's spend at the last tick, in micro-units: the throttle compares the spend over an interval
    /// with what the plan had for it.
    pub spent_micros: u64,
    /// When the state last moved; 0 before the first tick.
    pub last_tick_ms: u64,
}

/// Everything a strategy may look at to decide one request.
pub struct Input<'a, C> {
    /// The campaign's budget and flight.
    pub goal: Goal<C>,
    pub request: &'a RequestHeader<C>,
    /// The price this campaign would bid.
    pub price: Cpm<C>,
    /// This loop's slice: its reservations, and the campaign's spend as this loop knows it.
    pub slice: &'a Slice<C>,
    pub control: Control,
    pub now_ms: u64,
}

impl<C> Input<'_, C> {
    /// Whether this bid still fits under `allowed`, with the campaign's spend and this loop's bids in flight.
    pub fn fits(&self, allowed: Micros<C>) -> bool {
        self.committed().saturating_add(self.price.per_impression()) <= allowed
    }

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
    fn plan<C>(&self, goal: &Goal<C>, now_ms: u64) -> Micros<C>;
    /// Whether to bid on this request now.
    fn participate<C>(&self, input: &Input<'_, C>) -> bool;
    /// The control state after time passed to `now_ms` with `spent` spent; stateless strategies keep it.
    fn tick<C>(
        &self,
        _goal: &Goal<C>,
        control: Control,
        _spent: Micros<C>,
        _now_ms: u64,
    ) -> Control {
        control
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

const HOUR_MS: u64 = 3_600_000;
const DAY_MS: u64 = 24 * HOUR_MS;

/// The integral of a traffic curve (relative traffic per UTC hour; all zero means flat) over `[0, t_ms)`, in
/// weight × milliseconds.
fn curve_integral(curve: &[u32; 24], t_ms: u64) -> u128 {
    let flat = u32::from(*curve == [0; 24]);
    let weight = |h: usize| u128::from(curve[h].max(flat));
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

/// The budget spread over `[start_ms, end_ms)` in proportion to a forecast of traffic per UTC hour of the day
/// (`curve`, any scale; all zero is the linear plan), as planned by `now_ms`.
pub(crate) fn curve_plan<C>(
    curve: &[u32; 24],
    budget: Micros<C>,
    start_ms: u64,
    end_ms: u64,
    now_ms: u64,
) -> Micros<C> {
    if now_ms >= end_ms {
        return budget;
    }
    let start = curve_integral(curve, start_ms);
    let done = curve_integral(curve, now_ms.max(start_ms)).saturating_sub(start);
    let total = curve_integral(curve, end_ms).saturating_sub(start);
    if total == 0 {
        return budget;
    }
    // Both fit in 64 bits once shifted by the same amount (the ratio keeps 64 bits of precision), so the
    // product with the budget cannot overflow.
    let shift = (128 - total.leading_zeros()).saturating_sub(64);
    budget.scale((done >> shift) as u64, (total >> shift) as u64)
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
    sample_ppm(input.request.key, input.goal.id, seed) < rate
}

/// The fraction of the budget `spent` is behind `plan` by (negative when ahead), in millionths.
pub(crate) fn lag_ppm<C>(plan: Micros<C>, spent: Micros<C>, budget: Micros<C>) -> i64 {
    if budget.is_zero() {
        return 0;
    }
    let lag = i128::from(plan.micros()) - i128::from(spent.micros());
    (lag * 1_000_000 / i128::from(budget.micros())).clamp(-1_000_000, 1_000_000) as i64
}
