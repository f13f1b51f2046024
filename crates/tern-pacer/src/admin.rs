//! The per-campaign admin view, served as JSON on the runtime's admin server (`GET /campaigns`, and
//! `GET /campaigns/{id}` for any campaign the pacer knows when the request comes, including campaigns a
//! reload added after start), and the crash journal's figures under `service` in `/stats` (its counters
//! are also metrics, in `/metrics`: [`tern_pacer_store::journal`]).
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
//! (per loop, and their mean), `null` for strategies without a controller. `seat`, `deals` and `creatives`
//! are the campaign's OpenRTB doors and ads, as the campaigns file writes them.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde_json::{json, Value};
use tern_metrics::Counter;

use crate::service::PacerService;
use tern_pacer_core::ads::Creative;
use tern_pacer_core::board::{LoopFigures, SliceFigures};
use tern_pacer_core::coordinator::Coordinator;
use tern_pacer_core::money::Currency;
use tern_pacer_core::proto::CampaignId;
use tern_pacer_core::snapshot::Snapshot;
use tern_pacer_core::strategy::{Pacing, Strategy};
use tern_pacer_store::journal::{self, Durable};

/// A creative as the campaigns file writes it.
fn creative_json(creative: &Creative) -> Value {
    json!({
        "id": creative.id,
        "format": creative.format.name(),
        "sizes": creative.sizes.iter().map(|&(w, h)| [w, h]).collect::<Vec<_>>(),
        "adomain": creative.adomain,
        "cat": creative.cat,
        "cattax": creative.cattax,
        "attr": creative.attr,
        "bundle": creative.bundle,
    })
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
        "strategy": configured.map(|c| c.strategy.to_string()),
        "flight": configured.map(|c| json!({"start_ms": c.flight.start_ms, "end_ms": c.flight.end_ms})),
        "max_cpm_micros": configured.map(|c| c.max_cpm.micros()),
        "seat": configured.and_then(|c| c.ads.seat.as_deref()),
        "deals": configured.map(|c| &c.ads.deals),
        "creatives": configured.map(|c| c.ads.creatives.iter().map(creative_json).collect::<Vec<_>>()),
        "budget_micros": pool.budget_micros,
        "granted_micros": pool.granted_micros,
        "unallocated_micros": pool.unallocated_micros,
        "plan_micros": configured.map(|c| c.strategy.plan(&c.goal(), now_ms).micros()),
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
    let state = service.state();
    let snapshot = state.snapshot();
    // Both read under the coordinator's lock (the loops' sync order: coordinator, then board), which is
    // released before any JSON is built: the loops wait for it to sync.
    let (pools, mut loops) = {
        let coordinator = state.coordinator();
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
        (pools, state.board().loops())
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

/// A campaign id as written in a path: decimal digits, no sign and no leading zero.
fn parse_campaign_id(text: &str) -> Option<CampaignId> {
    let canonical =
        text.bytes().all(|b| b.is_ascii_digit()) && !(text.len() > 1 && text.starts_with('0'));
    canonical.then(|| text.parse().ok().map(CampaignId))?
}

/// The crash journal's figures: where it is, its generation, what recovery read when it opened, and its
/// counters (`records` and `bytes`, written by the loops, are the process's metrics; the others this
/// journal's). `null` without a journal.
pub fn journal_stats(durable: Option<&Durable>) -> Value {
    let Some(durable) = durable else {
        return Value::Null;
    };
    let journal = durable.journal();
    let config = journal.config();
    let stats = journal.stats();
    let recovery = durable.recovery();
    let load = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
    let metrics = tern_metrics::snapshot();
    let metric = |counter: &Counter| metrics.counter(counter.name()).unwrap_or(0);
    json!({
        "dir": config.dir.display().to_string(),
        "generation": journal.generation(),
        "segment_bytes": config.segment_bytes,
        "sync_interval_ms": config.sync_interval.as_millis() as u64,
        "records": metric(&journal::RECORDS),
        "bytes": metric(&journal::BYTES),
        "segments": load(&stats.segments),
        "inline_rotations": load(&stats.inline_rotations),
        "msyncs": load(&stats.msyncs),
        "synced_bytes": load(&stats.synced_bytes),
        "compactions": load(&stats.compactions),
        "errors": load(&stats.errors),
        "recovery": {
            "generation": recovery.generation,
            "files": recovery.files,
            "records": recovery.records,
            "torn": recovery.torn,
            "imps": recovery.imps,
        },
    })
}

/// Adds `/campaigns`, `/campaigns/{id}` (whatever campaigns the pacer knows at the time of the request: an
/// id it does not know, or that is not an id, is a 404) and the service's part of `/stats` (`{"journal":
/// ...}`, [`journal_stats`]) to an admin server.
pub fn routes<C: Currency>(
    service: &Arc<PacerService<C>>,
    builder: tern_metrics::AdminServerBuilder,
) -> tern_metrics::AdminServerBuilder {
    let (all, one, stats) = (
        Arc::clone(service),
        Arc::clone(service),
        Arc::clone(service),
    );
    builder
        .json_route(
            "/campaigns",
            "every campaign's budget, plan, spend, reservations and controller rate, per loop and in total",
            Arc::new(move || campaigns(&all, None)),
        )
        .json_prefix_route(
            "/campaigns/",
            "one campaign by id, as /campaigns lists it",
            Arc::new(move |rest| {
                let campaign = campaigns(&one, Some(parse_campaign_id(rest)?));
                (!campaign.is_null()).then_some(campaign)
            }),
        )
        .stats_extra(Arc::new(
            move || json!({ "journal": journal_stats(stats.journal()) }),
        ))
}

/// Each campaign's budget, plan and spend as gauges (`tern_pacer_campaign_*_micros{campaign}`), read from the
/// view `/campaigns` gives when the admin endpoint gathers, for as long as the guard lives: a dashboard
/// draws spend against plan from them, and an alert can fire when one pulls away from the other.
pub fn spend_gauges<C: Currency>(service: &Arc<PacerService<C>>) -> tern_metrics::CollectorGuard {
    let service = Arc::downgrade(service);
    tern_metrics::register_collector(move |_| {
        let Some(service) = service.upgrade() else {
            return Vec::new();
        };
        let view = campaigns(&service, None);
        let list = view["campaigns"].as_array().cloned().unwrap_or_default();
        let family = |name: &'static str, help: &'static str, key: &str| {
            tern_metrics::MetricSnapshot::labelled(
                name,
                help,
                "campaign",
                list.iter().filter_map(|c| {
                    let value = i64::try_from(c[key].as_u64()?).unwrap_or(i64::MAX);
                    Some((c["id"].to_string(), value))
                }),
            )
        };
        vec![
            family(
                "tern_pacer_campaign_budget_micros",
                "The campaign's budget (configured, or leased from the cluster), in micro-units of the currency",
                "budget_micros",
            ),
            family(
                "tern_pacer_campaign_plan_micros",
                "What the campaign's strategy planned to have spent by now",
                "plan_micros",
            ),
            family(
                "tern_pacer_campaign_spent_micros",
                "What the campaign has spent (billed), as of each loop's last publication",
                "spent_micros",
            ),
            family(
                "tern_pacer_campaign_reserved_micros",
                "Bids won or in flight whose price is not settled yet",
                "reserved_micros",
            ),
        ]
    })
}
