//! The per-campaign admin view, served as JSON on the runtime's admin server (`GET /campaigns`, and
//! `GET /campaigns/{id}` for the campaigns of the configuration the server started with: the admin server
//! routes exact paths).
//!
//! The loops' ledgers are thread-local, so the view never reads them: each loop *publishes* its figures
//! (per campaign: granted, reserved, spent, exposure, disputed, its controller's rate) to a [`Board`]
//! whenever it syncs with the coordinator, while it still holds the coordinator's lock, and again after
//! handling the request that synced. A reader takes the coordinator's lock, then the board's, so what it sees
//! is consistent where it matters: grants only change during a sync, so the loops' published grants add
//! up to the coordinator's `granted` exactly, and `budget = granted + unallocated`. Spent and reserved are as
//! of each loop's last publication (at most a sync interval old on a busy loop; a loop without traffic
//! publishes at its next request, as it syncs).
//!
//! Money is in integer micro-units (`*_micros`), so totals can be checked to the micro. `plan_micros` is
//! what the campaign's strategy planned to have spent by now (the configured budget spread over the
//! flight, as the strategy shapes it); `rate_ppm` is the participation rate of a throttle or PI campaign
//! (per loop, and their mean), `null` for strategies without a controller.

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::coordinator::Coordinator;
use crate::money::Currency;
use crate::pacer::LoopPacer;
use crate::proto::CampaignId;
use crate::service::PacerService;
use crate::snapshot::Snapshot;
use crate::strategy::{Pacing, Strategy};

/// One campaign's slice on one loop, as last published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SliceFigures {
    pub campaign: CampaignId,
    pub granted_micros: u64,
    pub reserved_micros: u64,
    pub spent_micros: u64,
    pub exposure_micros: u64,
    pub disputed_micros: u64,
    pub rate_ppm: u32,
}

impl SliceFigures {
    /// Nothing granted, reserved or spent: a campaign absent from a loop's ledger.
    fn empty(campaign: CampaignId) -> Self {
        SliceFigures {
            campaign,
            granted_micros: 0,
            reserved_micros: 0,
            spent_micros: 0,
            exposure_micros: 0,
            disputed_micros: 0,
            rate_ppm: 0,
        }
    }
}

/// What one loop last published.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoopFigures {
    /// When (Unix milliseconds); 0 for a loop that has not published yet.
    pub published_ms: u64,
    /// In the ledger's order (sorted by the reader, off the loops' path).
    pub campaigns: Vec<SliceFigures>,
}

/// The loops' published figures.
#[derive(Debug, Default)]
pub struct Board {
    loops: Mutex<Vec<LoopFigures>>,
}

impl Board {
    /// Replaces loop `loop_id`'s figures with its pacer's current state.
    pub fn publish<C: Currency>(&self, loop_id: usize, pacer: &LoopPacer<C>, now_ms: u64) {
        let mut loops = self.loops.lock();
        if loops.len() <= loop_id {
            loops.resize_with(loop_id + 1, LoopFigures::default);
        }
        let figures = &mut loops[loop_id];
        figures.published_ms = now_ms;
        figures.campaigns.clear();
        figures
            .campaigns
            .extend(pacer.ledger.slices().map(|(campaign, slice)| SliceFigures {
                campaign,
                granted_micros: slice.granted.micros(),
                reserved_micros: slice.reserved.micros(),
                spent_micros: slice.spent.micros(),
                exposure_micros: slice.exposure.micros(),
                disputed_micros: slice.disputed.micros(),
                rate_ppm: pacer.control(campaign).rate_ppm,
            }));
    }

    /// A copy of every loop's figures.
    pub fn loops(&self) -> Vec<LoopFigures> {
        self.loops.lock().clone()
    }
}

fn has_controller(strategy: &Strategy) -> bool {
    matches!(strategy, Strategy::Throttle(_) | Strategy::Pi(_))
}

/// What the coordinator knows of one campaign, copied out so its lock is held only that long.
struct Pool {
    id: CampaignId,
    budget_micros: u64,
    granted_micros: u64,
    unallocated_micros: u64,
}

impl Pool {
    fn of<C>(coordinator: &Coordinator<C>, id: CampaignId) -> Pool {
        Pool {
            id,
            budget_micros: coordinator.budget(id).micros(),
            granted_micros: coordinator.granted(id).micros(),
            unallocated_micros: coordinator.unallocated(id).micros(),
        }
    }
}

fn campaign_json<C: Currency>(
    pool: &Pool,
    snapshot: &Snapshot<C>,
    loops: &[LoopFigures],
    now_ms: u64,
) -> Value {
    let id = pool.id;
    let configured = snapshot.campaign(id);
    let controlled = configured.is_some_and(|c| has_controller(&c.strategy));
    let mut total = SliceFigures::empty(id);
    let mut rates = Vec::new();
    let per_loop: Vec<Value> = loops
        .iter()
        .enumerate()
        .map(|(loop_id, figures)| {
            let f = figures
                .campaigns
                .binary_search_by_key(&id, |f| f.campaign)
                .map_or_else(|_| SliceFigures::empty(id), |i| figures.campaigns[i]);
            total.granted_micros += f.granted_micros;
            total.reserved_micros += f.reserved_micros;
            total.spent_micros += f.spent_micros;
            total.exposure_micros += f.exposure_micros;
            total.disputed_micros += f.disputed_micros;
            let rate = controlled.then_some(f.rate_ppm);
            rates.extend(rate.map(u64::from));
            json!({
                "loop": loop_id,
                "published_ms": figures.published_ms,
                "granted_micros": f.granted_micros,
                "reserved_micros": f.reserved_micros,
                "spent_micros": f.spent_micros,
                "exposure_micros": f.exposure_micros,
                "disputed_micros": f.disputed_micros,
                "rate_ppm": rate,
            })
        })
        .collect();
    let mean_rate = (!rates.is_empty()).then(|| rates.iter().sum::<u64>() / rates.len() as u64);
    json!({
        "id": id.0,
        "configured": configured.is_some(),
        "strategy": configured.map(|c| format!("{:?}", c.strategy)),
        "flight": configured.map(|c| json!({"start_ms": c.flight.start_ms, "end_ms": c.flight.end_ms})),
        "max_cpm_micros": configured.map(|c| c.max_cpm.micros()),
        "budget_micros": pool.budget_micros,
        "granted_micros": pool.granted_micros,
        "unallocated_micros": pool.unallocated_micros,
        "plan_micros": configured.map(|c| c.strategy.plan(c, now_ms).micros()),
        "spent_micros": total.spent_micros,
        "reserved_micros": total.reserved_micros,
        "available_micros": total.granted_micros.saturating_sub(total.reserved_micros + total.spent_micros),
        "exposure_micros": total.exposure_micros,
        "disputed_micros": total.disputed_micros,
        "rate_ppm": mean_rate,
        "loops": per_loop,
    })
}

/// Every campaign the configuration or the coordinator knows (a removed campaign stays while its grants
/// come back), or only campaign `only`: `null` if it is unknown.
pub fn campaigns<C: Currency>(service: &PacerService<C>, only: Option<CampaignId>) -> Value {
    let now_ms = crate::service::unix_ms();
    let snapshot = service.snapshot();
    // Both read under the coordinator's lock (the loops' sync order: coordinator, then board), which is
    // released before any JSON is built: the loops wait for it to sync.
    let (pools, mut loops) = {
        let coordinator = service.coordinator();
        let mut ids: Vec<CampaignId> = snapshot
            .campaigns()
            .iter()
            .map(|c| c.id)
            .chain(coordinator.campaigns())
            .filter(|id| only.is_none_or(|only| only == *id))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let pools: Vec<Pool> = ids
            .into_iter()
            .map(|id| Pool::of(&coordinator, id))
            .collect();
        (pools, service.board().loops())
    };
    for figures in &mut loops {
        figures.campaigns.sort_unstable_by_key(|f| f.campaign);
    }
    if only.is_some() {
        return pools.first().map_or(Value::Null, |pool| {
            campaign_json(pool, &snapshot, &loops, now_ms)
        });
    }
    let list: Vec<Value> = pools
        .iter()
        .map(|pool| campaign_json(pool, &snapshot, &loops, now_ms))
        .collect();
    let sum = |key: &str| -> u64 { list.iter().filter_map(|c| c[key].as_u64()).sum() };
    json!({
        "currency": String::from_utf8_lossy(&C::CODE),
        "now_ms": now_ms,
        "snapshot_version": snapshot.version,
        "loops": loops.len(),
        "totals": {
            "budget_micros": sum("budget_micros"),
            "granted_micros": sum("granted_micros"),
            "unallocated_micros": sum("unallocated_micros"),
            "spent_micros": sum("spent_micros"),
            "reserved_micros": sum("reserved_micros"),
            "plan_micros": sum("plan_micros"),
        },
        "campaigns": list,
    })
}

/// Adds `/campaigns` and `/campaigns/{id}` (for the campaigns configured now) to an admin server.
pub fn routes<C: Currency>(
    service: &Arc<PacerService<C>>,
    mut builder: tern_metrics::AdminServerBuilder,
) -> tern_metrics::AdminServerBuilder {
    let all = Arc::clone(service);
    builder = builder.json_route("/campaigns", Arc::new(move || campaigns(&all, None)));
    for campaign in service.snapshot().campaigns() {
        let (one, id) = (Arc::clone(service), campaign.id);
        builder = builder.json_route(
            format!("/campaigns/{}", id.0),
            Arc::new(move || campaigns(&one, Some(id))),
        );
    }
    builder
}
