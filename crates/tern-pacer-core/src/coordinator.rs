//! The coordinator: owner of each campaign's whole budget, which it deals out to the loops' ledgers in slices.
//! A loop syncs with it now and then (a timer, or when a slice runs low), never per bid: the sync tops the
//! loop's slices up to a target, takes back what a budget cut or an oversized slice leaves unneeded, covers
//! debt from late bills out of the unallocated budget, and tells the loop what the other loops have spent.
//!
//! A notice that reaches a loop which does not hold its reservation (the gateway reconnected and landed on
//! another loop) is forwarded here; each loop tries the forwarded notices at its next sync, and the one that
//! holds the reservation applies it. A notice no loop knows is dropped once every loop has tried it.
//!
//! Budgets are a configured base plus the sum of signed deltas, so deltas commute: applying the same deltas
//! in any order gives the same budget. A cut takes effect on each loop at its next sync; until then a loop
//! may still spend what it was already granted, which is why cuts below what is granted cannot be instant.
//!
//! Where budgets come from is the [`BudgetSource`]: the configuration (one node), or the budget this node
//! holds under lease when several nodes share budgets ([`crate::cluster`]).

use std::collections::VecDeque;

use crate::ledger::{FastMap, Ledger};
use crate::money::Micros;
use crate::proto::{CampaignId, Notice, NoticeStatus};

/// How big the slices are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoordinatorConfig {
    /// Number of loops (ledgers) sharing the budgets.
    pub loops: usize,
    /// The available budget a sync tops a slice up to, in millionths of the campaign's budget. Larger slices
    /// need fewer syncs; smaller ones strand less budget on idle loops near the end.
    pub slice_ppm: u64,
    /// The smallest slice target, in micro-units, so tiny budgets still bid.
    pub min_slice_micros: u64,
    /// Most forwarded notices waiting for their loop; past it the oldest are dropped (and counted).
    pub max_forwarded: usize,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        CoordinatorConfig {
            loops: 1,
            slice_ppm: 2_000,
            min_slice_micros: 10_000,
            max_forwarded: 100_000,
        }
    }
}

/// A notice waiting for the loop that holds its reservation.
struct Forwarded<C> {
    notice: Notice<C>,
    at_ms: u64,
    /// Which loops have tried it.
    tried: Vec<bool>,
}

/// What happened to forwarded notices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ForwardStats {
    pub forwarded: u64,
    /// Applied (or found duplicate) by the loop holding the reservation.
    pub resolved: u64,
    /// Tried by every loop and known by none.
    pub unknown: u64,
    /// Dropped because `max_forwarded` notices were waiting.
    pub overflowed: u64,
}

/// Where the budgets the coordinator deals out come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BudgetSource {
    /// The configuration: each campaign's base budget plus its deltas (one node).
    #[default]
    Configured,
    /// Leases from the cluster ([`crate::cluster`]): the node deals out what it holds under lease, and never
    /// more than the configured budget.
    Leased,
}

struct Pool<C> {
    base: Micros<C>,
    /// Sum of the budget deltas applied, in micro-units.
    delta: i128,
    /// With [`BudgetSource::Leased`], what this node holds under lease (spent, reserved or not).
    leased: Option<Micros<C>>,
    /// Sum over loops of their slices' `granted`.
    granted: Micros<C>,
    spent_by_loop: Vec<Micros<C>>,
}

impl<C> Pool<C> {
    /// The campaign's configured budget: base plus deltas.
    fn configured(&self) -> Micros<C> {
        let total = i128::from(self.base.micros()) + self.delta;
        Micros::from_micros(total.clamp(0, i128::from(u64::MAX)) as u64)
    }
    /// What this node may deal out.
    fn budget(&self) -> Micros<C> {
        let configured = self.configured();
        self.leased
            .map_or(configured, |leased| leased.min(configured))
    }
    fn unallocated(&self) -> Micros<C> {
        self.budget().saturating_sub(self.granted)
    }
}

/// The budget owner. One per node; loops reach it off the hot path (behind a mutex, or from their sync tick).
pub struct Coordinator<C> {
    config: CoordinatorConfig,
    pools: FastMap<CampaignId, Pool<C>>,
    forwarded: VecDeque<Forwarded<C>>,
    forward_stats: ForwardStats,
    source: BudgetSource,
    /// The budget source has stopped answering ([`Coordinator::set_source_down`]).
    source_down: bool,
}

impl<C> Coordinator<C> {
    pub fn new(config: CoordinatorConfig) -> Self {
        Coordinator {
            config: CoordinatorConfig {
                loops: config.loops.max(1),
                ..config
            },
            pools: FastMap::default(),
            forwarded: VecDeque::new(),
            forward_stats: ForwardStats::default(),
            source: BudgetSource::Configured,
            source_down: false,
        }
    }

    /// Switches where budgets come from; with [`BudgetSource::Leased`] every campaign starts holding nothing
    /// until [`Coordinator::set_leased`].
    pub fn set_budget_source(&mut self, source: BudgetSource) {
        self.source = source;
        let leased = (source == BudgetSource::Leased).then_some(Micros::ZERO);
        for pool in self.pools.values_mut() {
            pool.leased = leased;
        }
    }

    /// What the node holds under lease for a campaign (spent, reserved or not); ignored unless the source
    /// is [`BudgetSource::Leased`].
    /// Whether the budget source answers (the cluster's lease thread says so when it fences the node and
    /// when it renews again); the loops learn it at their next sync, so their no-bids name the cause.
    pub fn set_source_down(&mut self, down: bool) {
        self.source_down = down;
    }

    pub fn set_leased(&mut self, campaign: CampaignId, leased: Micros<C>) {
        let pool = self.pool(campaign);
        if pool.leased.is_some() {
            pool.leased = Some(leased);
        }
    }

    /// The campaign's configured budget (base plus deltas), whatever the source.
    pub fn configured_budget(&self, campaign: CampaignId) -> Micros<C> {
        self.pools
            .get(&campaign)
            .map_or(Micros::ZERO, Pool::configured)
    }

    /// Sets the number of loops (the runtime tells it when the loops start); it only grows.
    pub fn set_loops(&mut self, loops: usize) {
        if loops > self.config.loops {
            self.config.loops = loops;
            for pool in self.pools.values_mut() {
                pool.spent_by_loop.resize(loops, Micros::ZERO);
            }
            for f in &mut self.forwarded {
                f.tried.resize(loops, false);
            }
        }
    }

    /// Takes a notice that loop `from_loop` does not know, for the other loops to try at their next sync.
    pub fn forward(&mut self, from_loop: usize, at_ms: u64, notice: Notice<C>) -> NoticeStatus {
        if self.config.loops == 1 {
            self.forward_stats.unknown += 1;
            return NoticeStatus::Unknown;
        }
        if self.forwarded.len() >= self.config.max_forwarded {
            self.forwarded.pop_front();
            self.forward_stats.overflowed += 1;
        }
        let mut tried = vec![false; self.config.loops];
        tried[from_loop.min(self.config.loops - 1)] = true;
        self.forwarded.push_back(Forwarded {
            notice,
            at_ms,
            tried,
        });
        self.forward_stats.forwarded += 1;
        NoticeStatus::Forwarded
    }

    pub fn forward_stats(&self) -> ForwardStats {
        self.forward_stats
    }

    pub fn config(&self) -> &CoordinatorConfig {
        &self.config
    }

    fn pool(&mut self, campaign: CampaignId) -> &mut Pool<C> {
        let loops = self.config.loops;
        let leased = (self.source == BudgetSource::Leased).then_some(Micros::ZERO);
        self.pools.entry(campaign).or_insert_with(|| Pool {
            base: Micros::ZERO,
            delta: 0,
            leased,
            granted: Micros::ZERO,
            spent_by_loop: vec![Micros::ZERO; loops],
        })
    }

    /// Sets a campaign's configured budget (from a new configuration snapshot); deltas stay applied on top.
    pub fn set_base_budget(&mut self, campaign: CampaignId, budget: Micros<C>) {
        self.pool(campaign).base = budget;
    }

    /// Adds a signed change to a campaign's budget (a top-up or a cut from the source of truth).
    pub fn apply_delta(&mut self, campaign: CampaignId, delta_micros: i64) {
        self.pool(campaign).delta += i128::from(delta_micros);
    }

    /// Counts `amount` of a campaign's budget as granted to a loop that restored it from the crash journal
    /// (its settled spend and reservations, see [`Ledger::restore`]); call it before any loop syncs, so no
    /// loop is handed that budget again.
    pub fn restore_granted(&mut self, campaign: CampaignId, amount: Micros<C>) {
        let pool = self.pool(campaign);
        pool.granted = pool.granted.saturating_add(amount);
    }

    pub fn budget(&self, campaign: CampaignId) -> Micros<C> {
        self.pools.get(&campaign).map_or(Micros::ZERO, Pool::budget)
    }

    /// Budget not granted to any loop.
    pub fn unallocated(&self, campaign: CampaignId) -> Micros<C> {
        self.pools
            .get(&campaign)
            .map_or(Micros::ZERO, Pool::unallocated)
    }

    /// Sum of what the loops hold as granted.
    pub fn granted(&self, campaign: CampaignId) -> Micros<C> {
        self.pools
            .get(&campaign)
            .map_or(Micros::ZERO, |p| p.granted)
    }

    /// The campaign's spend as of each loop's last sync.
    pub fn spent(&self, campaign: CampaignId) -> Micros<C> {
        self.pools
            .get(&campaign)
            .map_or(Micros::ZERO, |p| p.spent_by_loop.iter().copied().sum())
    }

    pub fn campaigns(&self) -> impl Iterator<Item = CampaignId> + '_ {
        self.pools.keys().copied()
    }

    /// Rebalances loop `loop_id`'s slices against the budgets. `loop_id` must be below `config.loops`; an
    /// out-of-range id is treated as the last loop's.
    pub fn sync(&mut self, loop_id: usize, ledger: &mut Ledger<C>) {
        ledger.budget_source_down = self.source_down;
        let loop_id = loop_id.min(self.config.loops - 1);
        let config = self.config;
        let stats = &mut self.forward_stats;
        self.forwarded.retain_mut(|f| {
            if !f.tried[loop_id] {
                f.tried[loop_id] = true;
                if ledger.notice(f.at_ms, &f.notice) != NoticeStatus::Unknown {
                    stats.resolved += 1;
                    return false;
                }
            }
            let everyone_tried = f.tried.iter().all(|t| *t);
            stats.unknown += u64::from(everyone_tried);
            !everyone_tried
        });
        // Campaigns the ledger knows but the coordinator does not have budget zero: their grants come back.
        let unknown: Vec<CampaignId> = ledger
            .slices()
            .map(|(id, _)| id)
            .filter(|id| !self.pools.contains_key(id))
            .collect();
        for id in unknown {
            self.pool(id);
        }
        for (&campaign, pool) in self.pools.iter_mut() {
            let slice = ledger.slice_mut(campaign);
            pool.spent_by_loop[loop_id] = slice.spent;
            let budget = pool.budget();
            if pool.granted > budget {
                let back = slice.available().min(pool.granted.saturating_sub(budget));
                slice.granted = slice.granted.saturating_sub(back);
                pool.granted = pool.granted.saturating_sub(back);
            }
            let cover = slice.debt().min(pool.unallocated());
            slice.granted = slice.granted.saturating_add(cover);
            pool.granted = pool.granted.saturating_add(cover);
            // Slices are sized on the campaign's whole budget, even when this node holds a lease on part of it.
            let target = pool
                .configured()
                .scale(config.slice_ppm, 1_000_000)
                .max(Micros::from_micros(config.min_slice_micros))
                .max(std::mem::take(&mut slice.shortfall));
            let available = slice.available();
            if available < target {
                let top_up = target.saturating_sub(available).min(pool.unallocated());
                slice.granted = slice.granted.saturating_add(top_up);
                pool.granted = pool.granted.saturating_add(top_up);
            } else if available > target.saturating_add(target) {
                // A slice far above target (the budget or the slice size shrank) strands budget here.
                let back = available.saturating_sub(target);
                slice.granted = slice.granted.saturating_sub(back);
                pool.granted = pool.granted.saturating_sub(back);
            }
            let total: Micros<C> = pool.spent_by_loop.iter().copied().sum();
            slice.others_spent = total.saturating_sub(slice.spent);
        }
    }
}
