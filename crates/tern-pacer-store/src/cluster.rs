//! Budget leases for N pacer nodes sharing each campaign's budget through Redis. Every node reads the same
//! configuration (file or PostgreSQL); Redis holds, per campaign, the budget, what all nodes reported as
//! spent, and one lease per node: the budget the node took and has not reported spent yet (`held`), with an
//! expiry. A node's coordinator deals out to its loops only what the node holds
//! ([`BudgetSource::Leased`]), so the loops still decide on thread-local slices and the hot path never
//! waits on Redis.
//!
//! A thread per node runs one Lua script ([`LEASE_SCRIPT`], atomic in Redis) every tick (a quarter of the
//! lease, at most 50 ms) for all campaigns at once. For each campaign it:
//! 1. claws back every expired lease: its `held` returns to the pool (and is added to `clawed`);
//! 2. records the node's newly settled spend (`spent += report`, `held -= report`), sent as its running
//!    total so that a sync retried after a lost answer counts nothing twice;
//! 3. takes `min(ask, budget - spent - leased)` from the pool (or gives back a surplus), and renews the
//!    lease's expiry to Redis' clock + the lease time.
//!
//! The node asks to keep `held` near `lease_slice_micros` (it asks when below half), so a lease never holds
//! more than one slice after a tick. On a clean shutdown the same script reports the last spend and
//! releases the lease. A node that cannot renew for three quarters of the lease stops dealing out budget
//! (its lease counts as only what it has spent) until Redis answers again, so it does not spend a lease
//! Redis may already have clawed back. Node ids must be unique: a node restarted under the same id adopts
//! its old lease; with a crash journal ([`ClusterConfig::resume`]) its spend total goes on from the
//! journal's, so the spend it restores is not counted twice, and without one it starts a new incarnation
//! whose total counts from zero.
//!
//! # Overspend across nodes
//! A clawed-back lease's `held` was the node's unspent budget as Redis knew it: partly free (no harm in
//! re-leasing it), partly reserved by bids in flight, and partly settled but not yet reported (at most a
//! tick's worth). The last two can still turn into spend that the pool no longer covers: bids the exchange
//! bills after the node died, and spend the dead node settled but never reported. So the cluster's
//! worst-case overspend is `Σ clawed` (Redis keeps it per campaign), which is at most
//! `lease_slice_micros` per expired lease, plus each live node's exposure to late bills of timed-out
//! reservations (as on one node, see [`tern_pacer_core::ledger`]). Spend settled on a node that is SIGKILLed before
//! its next tick is missing from Redis' `spent` (it is within the bound; the crash journal keeps it).
//!
//! Keys, for campaign `c` under the prefix `p` (default `tern:pacer`): the hash `p:c` (`budget`, `spent`,
//! `leased` = Σ held, `clawed`, `leases_expired`, `generation`) and the hash `p:c:leases` (per node `n`:
//! `n:held`, `n:exp` in Redis-clock milliseconds, `n:gen`, `n:spent` its reported total, and `n:inc`,
//! `n:seen`: its incarnation and the running total it last sent). Amounts are
//! integer micro-units; Lua's numbers are exact to 2^53 micros (9 billion units of a currency).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tern_metrics::Counter;

use tern_pacer_core::coordinator::BudgetSource;
use tern_pacer_core::money::{Currency, Micros};
use tern_pacer_core::proto::CampaignId;
use tern_pacer_core::state::PacerState;
use tern_runtime::background::Background;

/// The lease script: `KEYS` are each campaign's two hashes; `ARGV` is the node id, the lease time in ms,
/// `sync` or `release`, the node's incarnation, then per campaign its configured budget, the node's total
/// settled spend in this incarnation, the amount to ask (negative: give back) and the lease generation the
/// node holds (0: none). It returns per campaign the lease's generation (0 after a release), what the node
/// now holds, and 1 if the node's lease had expired and been clawed back.
pub const LEASE_SCRIPT: &str = r#"
local node, ttl, release, inc = ARGV[1], tonumber(ARGV[2]), ARGV[3] == 'release', ARGV[4]
-- Numbers go to Redis as integer text: Lua would write -0 or 1e+14, which HINCRBY refuses.
local function int(x) return string.format('%d', x) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i = 1, #KEYS / 2 do
  local ck, lk = KEYS[2 * i - 1], KEYS[2 * i]
  local a = 4 + (i - 1) * 4
  local budget, total = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local ask, gen = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local fields = redis.call('HGETALL', lk)
  for j = 1, #fields, 2 do
    local f = fields[j]
    if string.sub(f, -4) == ':exp' and tonumber(fields[j + 1]) <= now then
      local n = string.sub(f, 1, -5)
      local held = tonumber(redis.call('HGET', lk, n .. ':held') or '0')
      redis.call('HINCRBY', ck, 'leased', int(-held))
      redis.call('HINCRBY', ck, 'clawed', int(held))
      redis.call('HINCRBY', ck, 'leases_expired', 1)
      redis.call('HDEL', lk, n .. ':held', n .. ':exp', n .. ':gen')
    end
  end
  redis.call('HSET', ck, 'budget', int(budget))
  -- Spend comes as the node's running total, so a sync retried after a lost answer counts nothing twice;
  -- a new incarnation of the node (a restart without a crash journal) counts from zero again.
  if redis.call('HGET', lk, node .. ':inc') ~= inc then
    redis.call('HSET', lk, node .. ':inc', inc, node .. ':seen', 0)
  end
  local report = math.max(0, total - tonumber(redis.call('HGET', lk, node .. ':seen')))
  if report > 0 then
    redis.call('HINCRBY', ck, 'spent', int(report))
    redis.call('HINCRBY', lk, node .. ':spent', int(report))
    redis.call('HSET', lk, node .. ':seen', int(total))
  end
  local current = tonumber(redis.call('HGET', lk, node .. ':gen') or '0')
  local held, lost = 0, 0
  if current ~= 0 then
    held = tonumber(redis.call('HGET', lk, node .. ':held') or '0')
    local settled = math.min(report, held)
    held = held - settled
    redis.call('HINCRBY', ck, 'leased', int(-settled))
  end
  if gen ~= 0 and gen ~= current then lost = 1 end
  if release then
    redis.call('HINCRBY', ck, 'leased', int(-held))
    redis.call('HDEL', lk, node .. ':held', node .. ':exp', node .. ':gen')
    held, current = 0, 0
  else
    local spent = tonumber(redis.call('HGET', ck, 'spent') or '0')
    local leased = tonumber(redis.call('HGET', ck, 'leased') or '0')
    if ask > 0 then
      local take = math.max(0, math.min(ask, budget - spent - leased))
      held = held + take
      redis.call('HINCRBY', ck, 'leased', int(take))
    elseif ask < 0 then
      local give = math.min(-ask, held)
      held = held - give
      redis.call('HINCRBY', ck, 'leased', int(-give))
    end
    if current == 0 then current = redis.call('HINCRBY', ck, 'generation', 1) end
    redis.call('HSET', lk, node .. ':held', int(held), node .. ':exp', int(now + ttl),
      node .. ':gen', int(current))
  end
  out[#out + 1] = current
  out[#out + 1] = held
  out[#out + 1] = lost
end
return out
"#;

/// Lease syncs with Redis that succeeded.
pub static LEASE_SYNCS: Counter = Counter::new(
    "tern_pacer_lease_syncs_total",
    "Budget lease syncs with Redis that succeeded",
);
/// Lease syncs that failed (Redis unreachable or erroring).
pub static LEASE_ERRORS: Counter = Counter::new(
    "tern_pacer_lease_errors_total",
    "Budget lease syncs with Redis that failed",
);
/// Leases this node found expired and clawed back when it next reached Redis.
pub static LEASES_LOST: Counter = Counter::new(
    "tern_pacer_leases_lost_total",
    "Campaign leases this node found clawed back",
);

/// How a node takes part in the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// `redis://host:port/db`.
    pub redis_url: String,
    /// This node's name, unique in the cluster.
    pub node_id: String,
    /// A lease not renewed for this long is clawed back.
    pub lease_ms: u64,
    /// The budget a node tries to hold per campaign, in micro-units (at most this much is clawed back when
    /// its lease expires).
    pub lease_slice_micros: u64,
    /// Prefix of the Redis keys.
    pub key_prefix: String,
    /// The node restores its settled spend from a crash journal: its running spend total goes on across
    /// restarts (one incarnation), so what it reported before is not reported again.
    pub resume: bool,
}

impl ClusterConfig {
    /// How often the node syncs: often enough to renew several times per lease and to top up promptly.
    pub fn tick(&self) -> Duration {
        Duration::from_millis((self.lease_ms / 4).clamp(1, 50))
    }
}

/// A campaign's two hashes: its pool and its leases.
pub fn keys(prefix: &str, campaign: CampaignId) -> (String, String) {
    (
        format!("{prefix}:{}", campaign.0),
        format!("{prefix}:{}:leases", campaign.0),
    )
}

/// What the node's lease thread has done.
#[derive(Debug, Default)]
pub struct ClusterStats {
    pub syncs: AtomicU64,
    pub errors: AtomicU64,
    pub leases_lost: AtomicU64,
    /// Times the node stopped dealing out budget for want of a renewal.
    pub fenced: AtomicU64,
    pub last_error: Mutex<Option<String>>,
}

/// The node's view of one campaign's lease.
#[derive(Debug, Clone, Copy, Default)]
struct Lease {
    generation: i64,
    /// The node's settled spend that Redis has counted (the running total last sent and answered).
    reported: u64,
    /// Budget held under the lease after the last sync, unspent as Redis knows it.
    held: u64,
}

/// One node's side of the leases.
struct Leases<C> {
    config: ClusterConfig,
    service: Arc<PacerState<C>>,
    script: redis::Script,
    client: redis::Client,
    connection: Option<redis::Connection>,
    leases: BTreeMap<CampaignId, Lease>,
    /// When the last successful sync was sent.
    renewed: Instant,
    fenced: bool,
    /// Since when syncs have been failing, while they are: an outage is one warning and one line when it
    /// ends, whatever the tick.
    failing_since: Option<Instant>,
    stats: Arc<ClusterStats>,
    /// Names this process's spend totals in Redis: fixed with a crash journal (the totals go on), random
    /// otherwise (a restart counts from zero).
    incarnation: String,
}

/// Campaigns per script call, so that one call never holds Redis for long.
const BATCH: usize = 500;

/// What one sync sends for a campaign.
struct Plan {
    campaign: CampaignId,
    configured: u64,
    /// The node's settled spend (as of its loops' last syncs).
    spent: u64,
    ask: i64,
    generation: i64,
}

impl<C: Currency> Leases<C> {
    /// The open connection, or a new one; Redis calls time out well inside a lease.
    fn connection(&mut self) -> redis::RedisResult<redis::Connection> {
        if let Some(connection) = self.connection.take() {
            return Ok(connection);
        }
        let timeout = Duration::from_millis(self.config.lease_ms.clamp(100, 1000));
        let connection = self.client.get_connection_with_timeout(timeout)?;
        connection.set_read_timeout(Some(timeout))?;
        connection.set_write_timeout(Some(timeout))?;
        Ok(connection)
    }

    /// One run of the lease script (per batch of campaigns) for every campaign the coordinator knows.
    fn sync(&mut self, release: bool) -> redis::RedisResult<()> {
        let sent = Instant::now();
        let plans = self.plan();
        let mut connection = self.connection()?;
        for batch in plans.chunks(BATCH) {
            let mut invocation = self.script.prepare_invoke();
            invocation
                .arg(&self.config.node_id)
                .arg(self.config.lease_ms)
                .arg(if release { "release" } else { "sync" })
                .arg(&self.incarnation);
            for plan in batch {
                let (pool, leases) = keys(&self.config.key_prefix, plan.campaign);
                invocation
                    .key(pool)
                    .key(leases)
                    .arg(plan.configured)
                    .arg(plan.spent)
                    .arg(plan.ask)
                    .arg(plan.generation);
            }
            // On an error the connection is dropped (the next tick reconnects) and the spend is sent again
            // then, as a total: whatever Redis already counted is not counted twice.
            let reply: Vec<i64> = invocation.invoke(&mut connection)?;
            if reply.len() != batch.len() * 3 {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::TypeError,
                    "the lease script answered the wrong number of values",
                )));
            }
            let mut coordinator = self.service.coordinator();
            for (plan, answer) in batch.iter().zip(reply.chunks_exact(3)) {
                let lease = self.leases.entry(plan.campaign).or_default();
                if answer[2] == 1 {
                    LEASES_LOST.incr();
                    self.stats.leases_lost.fetch_add(1, Ordering::Release);
                    tracing::warn!(
                        "campaign {}: this node's budget lease expired and was clawed back",
                        plan.campaign.0
                    );
                }
                lease.generation = answer[0];
                lease.reported = plan.spent;
                lease.held = u64::try_from(answer[1]).unwrap_or(0);
                coordinator.set_leased(
                    plan.campaign,
                    Micros::from_micros(lease.reported.saturating_add(lease.held)),
                );
            }
        }
        self.connection = Some(connection);
        self.renewed = sent;
        let was_fenced = std::mem::take(&mut self.fenced);
        if was_fenced {
            self.service.coordinator().set_source_down(false);
        }
        if let Some(since) = self.failing_since.take() {
            tracing::info!(
                "Redis at {} answers again after {:.1} s: budget leases renewed{}",
                self.redis_addr(),
                since.elapsed().as_secs_f64(),
                if was_fenced { ", bidding resumes" } else { "" }
            );
        }
        Ok(())
    }

    /// Where Redis is, as a person would write it (`host:port`, without the URL's password).
    fn redis_addr(&self) -> String {
        self.client.get_connection_info().addr.to_string()
    }

    /// Records a failed sync: the first of an outage is logged with its cause and what it means.
    fn failed(&mut self, e: &redis::RedisError) {
        if self.failing_since.is_some() {
            return;
        }
        self.failing_since = Some(Instant::now());
        let addr = self.redis_addr();
        let what = if e.is_io_error()
            || e.is_timeout()
            || e.is_connection_refusal()
            || e.is_connection_dropped()
        {
            "is unreachable"
        } else {
            "refused the budget lease sync"
        };
        tracing::warn!(
            "Redis at {addr} {what}: {e}; this node bids on the budget it holds for {} ms more at most, \
             then answers BudgetUnavailable until Redis answers again (the sync is retried every {} ms); \
             check that Redis runs at {addr} and is reachable from here",
            self.config.lease_ms * 3 / 4,
            self.config.tick().as_millis()
        );
    }

    /// What to send for each campaign: keep about a slice held (ask when below half, give back what no
    /// loop holds when above twice), and give back everything free once a campaign has no budget.
    fn plan(&self) -> Vec<Plan> {
        let slice = self.config.lease_slice_micros;
        let coordinator = self.service.coordinator();
        coordinator
            .campaigns()
            .map(|campaign| {
                let lease = self.leases.get(&campaign).copied().unwrap_or_default();
                let spent = coordinator.spent(campaign).micros();
                // What the lease still holds once this spend is in: reserved or free on this node.
                let held = lease
                    .held
                    .saturating_sub(spent.saturating_sub(lease.reported));
                let configured = coordinator.configured_budget(campaign).micros();
                let unallocated = coordinator.unallocated(campaign).micros();
                let ask = if configured == 0 {
                    -i128::from(unallocated.min(held))
                } else if held < slice / 2 {
                    i128::from(slice - held)
                } else if held > slice.saturating_mul(2) {
                    -i128::from(unallocated.min(held - slice))
                } else {
                    0
                };
                Plan {
                    campaign,
                    configured,
                    spent,
                    ask: ask.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64,
                    generation: lease.generation,
                }
            })
            .collect()
    }

    /// After three quarters of a lease without a renewal, the node deals out nothing more: its leases
    /// count as what it has reported spent, so loops hand back their free grants at their next sync.
    fn fence(&mut self) -> bool {
        if self.fenced
            || self.renewed.elapsed() < Duration::from_millis(self.config.lease_ms * 3 / 4)
        {
            return false;
        }
        let mut coordinator = self.service.coordinator();
        for (&campaign, lease) in &self.leases {
            coordinator.set_leased(campaign, Micros::from_micros(lease.reported));
        }
        coordinator.set_source_down(true);
        self.fenced = true;
        true
    }
}

/// A node's lease thread: syncs every tick, and on drop reports the last spend and releases its leases.
pub struct ClusterNode {
    stats: Arc<ClusterStats>,
    _thread: Background,
}

impl ClusterNode {
    /// Switches `service` to leased budgets, takes the first leases (so the loops start with budget), and
    /// starts the lease thread. Call it before the server starts.
    pub fn start<C: Currency>(
        config: ClusterConfig,
        service: Arc<PacerState<C>>,
    ) -> anyhow::Result<ClusterNode> {
        anyhow::ensure!(config.lease_ms >= 4, "--lease-ms must be at least 4");
        anyhow::ensure!(!config.node_id.is_empty(), "--node-id must not be empty");
        for counter in [&LEASE_SYNCS, &LEASE_ERRORS, &LEASES_LOST] {
            counter.register();
        }
        service
            .coordinator()
            .set_budget_source(BudgetSource::Leased);
        let stats = Arc::new(ClusterStats::default());
        let config_resume = config.resume;
        let mut leases = Leases {
            client: redis::Client::open(config.redis_url.as_str())?,
            script: redis::Script::new(LEASE_SCRIPT),
            config,
            service,
            connection: None,
            leases: BTreeMap::new(),
            renewed: Instant::now(),
            fenced: false,
            failing_since: None,
            stats: Arc::clone(&stats),
            incarnation: if config_resume {
                "journal".to_owned()
            } else {
                format!("{:016x}", rand::random::<u64>())
            },
        };
        leases.sync(false)?;
        // Normal priority: a lease renewal that waits behind saturated loops could let the lease lapse.
        let thread = Background::spawn("pacer-leases", false, move |stop| run(leases, stop))?;
        Ok(ClusterNode {
            stats,
            _thread: thread,
        })
    }

    pub fn stats(&self) -> &ClusterStats {
        &self.stats
    }
}

fn run<C: Currency>(mut leases: Leases<C>, stop: &AtomicBool) {
    let tick = leases.config.tick();
    let stats = Arc::clone(&leases.stats);
    let record = |leases: &mut Leases<C>, release: bool| match leases.sync(release) {
        Ok(()) => {
            stats.syncs.fetch_add(1, Ordering::Release);
            LEASE_SYNCS.incr();
        }
        Err(e) => {
            leases.failed(&e);
            *stats.last_error.lock() = Some(e.to_string());
            stats.errors.fetch_add(1, Ordering::Release);
            LEASE_ERRORS.incr();
        }
    };
    while !stop.load(Ordering::Acquire) {
        std::thread::park_timeout(tick);
        if stop.load(Ordering::Acquire) {
            break;
        }
        record(&mut leases, false);
        if leases.fence() {
            stats.fenced.fetch_add(1, Ordering::Release);
            tracing::warn!(
                "no budget lease renewal from Redis at {} for 3/4 of a lease: dealing out no more budget; \
                 bids answer BudgetUnavailable until Redis answers again",
                leases.redis_addr()
            );
        }
    }
    record(&mut leases, true);
}

#[cfg(test)]
mod tests {
    use tern_pacer_core::coordinator::{BudgetSource, Coordinator, CoordinatorConfig};
    use tern_pacer_core::ledger::{Ledger, LedgerConfig};
    use tern_pacer_core::money::{Micros, Usd};
    use tern_pacer_core::proto::CampaignId;

    const CAMPAIGN: CampaignId = CampaignId(3);

    #[test]
    fn a_leased_coordinator_deals_out_only_what_the_node_holds() {
        let mut coordinator = Coordinator::<Usd>::new(CoordinatorConfig {
            slice_ppm: 1_000_000,
            ..CoordinatorConfig::default()
        });
        coordinator.set_base_budget(CAMPAIGN, Micros::from_units(100));
        coordinator.set_budget_source(BudgetSource::Leased);
        let mut ledger = Ledger::new(LedgerConfig::default());
        coordinator.sync(0, &mut ledger);
        assert_eq!(ledger.slice(CAMPAIGN).unwrap().granted, Micros::ZERO);
        coordinator.set_leased(CAMPAIGN, Micros::from_units(7));
        coordinator.sync(0, &mut ledger);
        assert_eq!(
            ledger.slice(CAMPAIGN).unwrap().granted,
            Micros::from_units(7)
        );
        // Never more than the configured budget, whatever the lease says.
        coordinator.set_leased(CAMPAIGN, Micros::from_units(500));
        coordinator.sync(0, &mut ledger);
        assert_eq!(
            ledger.slice(CAMPAIGN).unwrap().granted,
            Micros::from_units(100)
        );
        // A lost lease takes the free grant back at the next sync.
        coordinator.set_leased(CAMPAIGN, Micros::ZERO);
        coordinator.sync(0, &mut ledger);
        assert_eq!(ledger.slice(CAMPAIGN).unwrap().granted, Micros::ZERO);
        assert_eq!(
            coordinator.configured_budget(CAMPAIGN),
            Micros::from_units(100)
        );
        // Back to the configuration: the lease no longer limits anything.
        coordinator.set_budget_source(BudgetSource::Configured);
        coordinator.sync(0, &mut ledger);
        assert_eq!(
            ledger.slice(CAMPAIGN).unwrap().granted,
            Micros::from_units(100)
        );
    }
}
