//! `tern pacer` as a service on the tern runtime: the gateway protocol decoded in the I/O loop, every batch
//! decided inline on one configuration snapshot by the loop's own pacer (ledger slices, controllers), and
//! notices applied where the reservation lives. The only shared state is the snapshot (read through
//! arc-swap, no lock) and the coordinator (a mutex taken once per `sync_interval_ms` per loop, and for
//! notices that arrived on a loop that does not hold their reservation).
//!
//! A loop syncs when a frame arrives and `sync_interval_ms` has passed, so a loop without traffic keeps
//! its slices (at most a slice target per campaign) until its next frame.

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::{Mutex, MutexGuard};
use tern_runtime::{Cx, Decode, LoopInfo, Outcome, Rejection, Service};

use crate::coordinator::{Coordinator, CoordinatorConfig};
use crate::ledger::LedgerConfig;
use crate::money::Currency;
use crate::pacer::LoopPacer;
use crate::proto::{
    decode_frame, encode_acks, CampaignId, Decision, DecisionsWriter, Frame, Limits, NoticeStatus,
    Status,
};
use crate::snapshot::{Snapshot, SnapshotCell};

/// The service's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacerConfig {
    pub limits: Limits,
    pub ledger: LedgerConfig,
    pub coordinator: CoordinatorConfig,
    /// How often a busy loop syncs its slices and ticks its controllers.
    pub sync_interval_ms: u64,
}

impl Default for PacerConfig {
    fn default() -> Self {
        PacerConfig {
            limits: Limits::default(),
            ledger: LedgerConfig::default(),
            coordinator: CoordinatorConfig::default(),
            sync_interval_ms: 10,
        }
    }
}

/// The pacer service, in currency `C`.
pub struct PacerService<C> {
    config: PacerConfig,
    snapshots: SnapshotCell<C>,
    coordinator: Mutex<Coordinator<C>>,
}

/// A loop's own state.
pub struct LoopState<C> {
    id: usize,
    pacer: RefCell<LoopPacer<C>>,
    last_sync_ms: Cell<u64>,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl<C: Currency> PacerService<C> {
    pub fn new(config: PacerConfig, snapshot: Snapshot<C>) -> Self {
        let mut coordinator = Coordinator::new(config.coordinator);
        for c in snapshot.campaigns() {
            coordinator.set_base_budget(c.id, c.budget);
        }
        PacerService {
            config,
            snapshots: SnapshotCell::new(snapshot),
            coordinator: Mutex::new(coordinator),
        }
    }

    /// Installs a new configuration: budgets first (a campaign that disappeared gets budget zero, so its
    /// grants come back at the next syncs), then the snapshot, atomically.
    pub fn install(&self, snapshot: Snapshot<C>) {
        let mut coordinator = self.coordinator.lock();
        let old = self.snapshots.load();
        for c in old.campaigns() {
            if snapshot.campaign(c.id).is_none() {
                coordinator.set_base_budget(c.id, crate::money::Micros::ZERO);
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

    /// A budget change from the source of truth.
    pub fn apply_delta(&self, campaign: CampaignId, delta_micros: i64) {
        self.coordinator.lock().apply_delta(campaign, delta_micros);
    }

    /// The coordinator, for admin views and tests.
    pub fn coordinator(&self) -> MutexGuard<'_, Coordinator<C>> {
        self.coordinator.lock()
    }
}

impl<C: Currency> Service for PacerService<C> {
    type Request<'a> = Frame<'a, C>;
    type Loop = LoopState<C>;

    fn init_loop(self: &Arc<Self>, info: &LoopInfo) -> LoopState<C> {
        let mut pacer = LoopPacer::new(self.config.ledger);
        let mut coordinator = self.coordinator.lock();
        coordinator.set_loops(info.loops);
        coordinator.sync(info.id, &mut pacer.ledger);
        LoopState {
            id: info.id,
            pacer: RefCell::new(pacer),
            last_sync_ms: Cell::new(unix_ms()),
        }
    }

    fn decode<'a>(&self, input: &'a [u8]) -> Decode<Frame<'a, C>> {
        decode_frame(input, &self.config.limits)
    }

    fn handle(&self, cx: &mut Cx<'_, Self>, request: Frame<'_, C>, out: &mut Vec<u8>) -> Outcome {
        let now_ms = unix_ms();
        let state: &LoopState<C> = cx.loop_state;
        // Handlers run one at a time on their loop and never hold this across an await: no double borrow.
        let mut pacer = state.pacer.borrow_mut();
        let snapshot = self.snapshots.current();
        if now_ms
            >= state
                .last_sync_ms
                .get()
                .saturating_add(self.config.sync_interval_ms)
        {
            self.coordinator.lock().sync(state.id, &mut pacer.ledger);
            pacer.tick(&snapshot, now_ms);
            state.last_sync_ms.set(now_ms);
        }
        match request {
            Frame::Bids(batch) => pacer.decide_batch(&snapshot, &batch, now_ms, out),
            Frame::Notices(batch) => pacer.apply_notices(&batch, now_ms, out, |notice| {
                self.coordinator.lock().forward(state.id, now_ms, notice)
            }),
        }
        Outcome::Reply
    }

    fn reject(&self, request: &Frame<'_, C>, _why: Rejection, out: &mut Vec<u8>) {
        match request {
            Frame::Bids(batch) => {
                let mut w = DecisionsWriter::begin(out, batch.batch_id);
                for _ in 0..batch.len() {
                    w.push::<C>(Decision::NoBid(Status::Overloaded));
                }
                w.finish();
            }
            Frame::Notices(batch) => encode_acks(out, &vec![NoticeStatus::Refused; batch.len()]),
        }
    }
}
