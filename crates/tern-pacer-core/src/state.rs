//! A node's shared pacing state: the configuration snapshot every loop decides on, the coordinator that
//! deals budgets out to the loops, and the board the loops publish their figures to. Sources of truth
//! (the campaigns file, PostgreSQL, the cluster's leases) change it; the service's loops read it.

use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use crate::board::Board;
use crate::coordinator::{Coordinator, CoordinatorConfig};
use crate::money::Micros;
use crate::proto::CampaignId;
use crate::snapshot::{Snapshot, SnapshotCell};

/// The shared state of a pacer in currency `C`.
pub struct PacerState<C> {
    snapshots: SnapshotCell<C>,
    coordinator: Mutex<Coordinator<C>>,
    board: Board,
}

impl<C> PacerState<C> {
    /// A state deciding on `snapshot`, with the coordinator holding each campaign's configured budget.
    pub fn new(config: CoordinatorConfig, snapshot: Snapshot<C>) -> Self {
        let mut coordinator = Coordinator::new(config);
        for c in snapshot.campaigns() {
            coordinator.set_base_budget(c.id, c.budget);
        }
        PacerState {
            snapshots: SnapshotCell::new(snapshot),
            coordinator: Mutex::new(coordinator),
            board: Board::default(),
        }
    }

    /// Installs a new configuration: budgets first (a campaign that disappeared gets budget zero, so its
    /// grants come back at the next syncs), then the snapshot, atomically.
    pub fn install(&self, snapshot: Snapshot<C>) {
        let mut coordinator = self.coordinator.lock();
        let old = self.snapshots.load();
        for c in old.campaigns() {
            if snapshot.campaign(c.id).is_none() {
                coordinator.set_base_budget(c.id, Micros::ZERO);
            }
        }
        for c in snapshot.campaigns() {
            coordinator.set_base_budget(c.id, c.budget);
        }
        self.snapshots.store(snapshot);
    }

    /// The configuration batches are decided on now.
    pub fn snapshot(&self) -> Arc<Snapshot<C>> {
        self.snapshots.load()
    }

    /// The current snapshot for one batch, without touching the shared reference count (the hot path's
    /// way to read it, see [`SnapshotCell::current`]).
    pub fn current(&self) -> arc_swap::Guard<Arc<Snapshot<C>>> {
        self.snapshots.current()
    }

    /// A budget change from the source of truth.
    pub fn apply_delta(&self, campaign: CampaignId, delta_micros: i64) {
        self.coordinator.lock().apply_delta(campaign, delta_micros);
    }

    /// What the loops last published, for the admin view.
    pub fn board(&self) -> &Board {
        &self.board
    }

    /// The coordinator: loops sync with it, sources and views read it.
    pub fn coordinator(&self) -> MutexGuard<'_, Coordinator<C>> {
        self.coordinator.lock()
    }
}
