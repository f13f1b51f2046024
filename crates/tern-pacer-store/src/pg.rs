//! PostgreSQL as the pacer's source of truth: a watcher thread reads the `pacer_campaigns` table, builds a
//! complete [`Snapshot`] with the campaigns file's own validation ([`tern_pacer_core::campaigns::parse`], one row at a
//! time so an error names its campaign), and installs it atomically with [`PacerService::install`]. It
//! reloads on a `NOTIFY tern_pacer` (sent by the schema's triggers, so changes apply within a round trip)
//! and every poll interval regardless (a missed notification, or a trigger disabled, costs at most one
//! interval). A bad row refuses the whole new snapshot: the pacer keeps deciding on the last good one, logs
//! the error and counts it (`tern_pacer_source_errors_total`, and [`WatchStats`]).
//!
//! Budgets are the row's `budget_micros` (the base, installed with the snapshot) plus the sum of the
//! campaign's rows in `pacer_budget_deltas` (top-ups and cuts). The watcher applies to the coordinator the
//! difference between each campaign's current sum and the sum it applied before, so the budget in force is
//! always `base + Σ deltas` whatever order the delta rows were committed or seen in, a row seen twice is not
//! counted twice, and deleting a delta row undoes it.
//!
//! The schema ([`SCHEMA`]; `name` is for people, the pacer does not read it):
//!
//! ```sql
//! CREATE TABLE pacer_campaigns (
//!     id             bigint PRIMARY KEY,        -- 0 ..= 4294967295
//!     name           text NOT NULL DEFAULT '',
//!     currency       char(3) NOT NULL,          -- must be the pacer's (--currency)
//!     budget_micros  bigint NOT NULL,           -- the whole flight's budget, micro-units
//!     max_cpm_micros bigint NOT NULL,           -- the highest bid, micro-units per thousand
//!     flight_start   timestamptz NOT NULL,
//!     flight_end     timestamptz NOT NULL,      -- excluded
//!     strategy       jsonb NOT NULL DEFAULT '{"kind": "hard-cap"}',  -- as `strategy` in the file
//!     targeting      jsonb NOT NULL DEFAULT '{}',                    -- as `targeting` in the file
//!     seat           text,                                           -- as `seat` in the file
//!     deals          jsonb NOT NULL DEFAULT '[]',                    -- as `deals` in the file
//!     creatives      jsonb NOT NULL DEFAULT '[]',  -- as the file's `[[campaign.creative]]` list
//!     version        bigint NOT NULL DEFAULT 1, -- bumped by a trigger on every update
//!     updated_at     timestamptz NOT NULL DEFAULT now()
//! );
//! CREATE TABLE pacer_budget_deltas (
//!     id           bigserial PRIMARY KEY,
//!     campaign_id  bigint NOT NULL,
//!     delta_micros bigint NOT NULL,             -- signed: a top-up or a cut
//!     reason       text NOT NULL DEFAULT '',
//!     created_at   timestamptz NOT NULL DEFAULT now()
//! );
//! -- plus triggers: one bumping version/updated_at, and one per table running pg_notify('tern_pacer', ...).
//! -- seat, deals and creatives came later: SCHEMA adds them to an older table (ADD COLUMN IF NOT EXISTS).
//! ```

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, IsolationLevel, NoTls};
use tern_metrics::Counter;

use tern_pacer_core::campaigns::{self, ConfigError};
use tern_runtime::background::Background;

use crate::watch::WatchStats;
use tern_pacer_core::money::Currency;
use tern_pacer_core::proto::CampaignId;
use tern_pacer_core::snapshot::Snapshot;
use tern_pacer_core::state::PacerState;

/// The notification channel the schema's triggers signal.
pub const CHANNEL: &str = "tern_pacer";

/// The tables and triggers the pacer reads (idempotent: safe to run on an existing database).
pub const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS pacer_campaigns (
    id             bigint PRIMARY KEY,
    name           text NOT NULL DEFAULT '',
    currency       char(3) NOT NULL,
    budget_micros  bigint NOT NULL,
    max_cpm_micros bigint NOT NULL,
    flight_start   timestamptz NOT NULL,
    flight_end     timestamptz NOT NULL,
    strategy       jsonb NOT NULL DEFAULT '{"kind": "hard-cap"}',
    targeting      jsonb NOT NULL DEFAULT '{}',
    version        bigint NOT NULL DEFAULT 1,
    updated_at     timestamptz NOT NULL DEFAULT now()
);
-- Added with creatives, seats and deals (OpenRTB 2.6 bidding); ADD COLUMN IF NOT EXISTS migrates a database
-- made before them and does nothing the second time.
ALTER TABLE pacer_campaigns ADD COLUMN IF NOT EXISTS seat text;
ALTER TABLE pacer_campaigns ADD COLUMN IF NOT EXISTS deals jsonb NOT NULL DEFAULT '[]';
ALTER TABLE pacer_campaigns ADD COLUMN IF NOT EXISTS creatives jsonb NOT NULL DEFAULT '[]';
CREATE TABLE IF NOT EXISTS pacer_budget_deltas (
    id           bigserial PRIMARY KEY,
    campaign_id  bigint NOT NULL,
    delta_micros bigint NOT NULL,
    reason       text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE OR REPLACE FUNCTION pacer_campaigns_touch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.version := OLD.version + 1;
    NEW.updated_at := now();
    RETURN NEW;
END $$;
CREATE OR REPLACE TRIGGER pacer_campaigns_touch BEFORE UPDATE ON pacer_campaigns
    FOR EACH ROW EXECUTE FUNCTION pacer_campaigns_touch();
CREATE OR REPLACE FUNCTION pacer_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('tern_pacer', TG_TABLE_NAME);
    RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER pacer_campaigns_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE
    ON pacer_campaigns FOR EACH STATEMENT EXECUTE FUNCTION pacer_notify();
CREATE OR REPLACE TRIGGER pacer_budget_deltas_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE
    ON pacer_budget_deltas FOR EACH STATEMENT EXECUTE FUNCTION pacer_notify();
"#;

const CAMPAIGNS: &str = "SELECT id, currency, budget_micros, max_cpm_micros, \
     (extract(epoch FROM flight_start) * 1000)::bigint, (extract(epoch FROM flight_end) * 1000)::bigint, \
     strategy::text, targeting::text, seat, deals::text, creatives::text FROM pacer_campaigns ORDER BY id";
const DELTAS: &str = "SELECT campaign_id, sum(delta_micros)::bigint FROM pacer_budget_deltas \
     GROUP BY campaign_id ORDER BY campaign_id";

/// Snapshots installed from any source of truth.
pub static SOURCE_RELOADS: Counter = Counter::new(
    "tern_pacer_source_reloads_total",
    "New configuration snapshots installed from the source of truth",
);
/// Reloads refused (a bad row, a lost connection); the last good snapshot stays in force.
pub static SOURCE_ERRORS: Counter = Counter::new(
    "tern_pacer_source_errors_total",
    "Source-of-truth reloads refused or failed; the last good snapshot stays in force",
);

/// What one read of the tables produced. The deltas stand on their own: a bad campaign row refuses the
/// snapshot, not a budget cut.
pub struct Read<C> {
    pub snapshot: Result<Snapshot<C>, ConfigError>,
    /// Each campaign's sum of budget deltas, in micro-units.
    pub deltas: BTreeMap<CampaignId, i64>,
}

/// A connection to the source database, listening on [`CHANNEL`], and the deltas already applied.
pub struct PgSource {
    url: String,
    client: Option<Client>,
    applied: BTreeMap<CampaignId, i64>,
    /// Since when the database has been out of reach, while it is: an outage is one warning, and one
    /// line when it ends.
    down_since: Option<Instant>,
    /// The refused reload last logged, until a reload succeeds: a bad row met at every poll is logged once.
    refusal_logged: Option<ConfigError>,
}

fn error(what: impl std::fmt::Display) -> ConfigError {
    ConfigError(what.to_string())
}

/// `micros` as the decimal units the campaigns file uses, refusing negatives with a clear message.
fn units(id: i64, field: &str, micros: i64) -> Result<String, ConfigError> {
    if micros < 0 {
        return Err(error(format!("campaign {id}: {field} is negative")));
    }
    Ok(format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000))
}

fn campaign_id(id: i64) -> Result<CampaignId, ConfigError> {
    u32::try_from(id)
        .map(CampaignId)
        .map_err(|_| error(format!("campaign id {id} is not 0..=4294967295")))
}

impl PgSource {
    /// Connects to `url` (a libpq-style URL or key=value string; a 5 s connect timeout unless it sets
    /// one) and listens for changes.
    pub fn connect(url: &str) -> Result<PgSource, ConfigError> {
        let mut source = PgSource {
            url: url.to_owned(),
            client: None,
            applied: BTreeMap::new(),
            down_since: None,
            refusal_logged: None,
        };
        source.client()?;
        Ok(source)
    }

    fn client(&mut self) -> Result<&mut Client, ConfigError> {
        if self.client.as_ref().is_none_or(|c| c.is_closed()) {
            let mut config = postgres::Config::from_str(&self.url).map_err(error)?;
            if config.get_connect_timeout().is_none() {
                config.connect_timeout(Duration::from_secs(5));
            }
            let connected = config.connect(NoTls).and_then(|mut client| {
                client.batch_execute(&format!("LISTEN {CHANNEL}"))?;
                Ok(client)
            });
            match connected {
                Ok(client) => self.client = Some(client),
                Err(e) => {
                    let e = error(e);
                    self.unreachable(&e);
                    return Err(e);
                }
            }
            if let Some(since) = self.down_since.take() {
                tracing::info!(
                    "PostgreSQL at {} is reachable again after {:.1} s: reloading the pacer configuration",
                    self.server(),
                    since.elapsed().as_secs_f64()
                );
            }
        }
        Ok(self.client.as_mut().expect("connected above"))
    }

    /// The server, as a person would write it: `host:port` (or the socket directory), without the URL's
    /// user and password.
    pub fn server(&self) -> String {
        let Ok(config) = postgres::Config::from_str(&self.url) else {
            return "(an unreadable URL)".to_owned();
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        match config.get_hosts().first() {
            Some(postgres::config::Host::Tcp(host)) if host.contains(':') => {
                format!("[{host}]:{port}")
            }
            Some(postgres::config::Host::Tcp(host)) => format!("{host}:{port}"),
            Some(postgres::config::Host::Unix(dir)) => format!("{}:{port}", dir.display()),
            None => format!("localhost:{port}"),
        }
    }

    /// Whether the database is out of reach, as the last attempt found.
    pub fn is_down(&self) -> bool {
        self.down_since.is_some()
    }

    /// The connection failed or was lost with `e`: the first time in an outage, a warning says so.
    fn unreachable(&mut self, e: &ConfigError) {
        self.client = None;
        if self.down_since.is_some() {
            return;
        }
        self.down_since = Some(Instant::now());
        tracing::warn!(
            "PostgreSQL at {} is unreachable: {}; the pacer keeps deciding on the configuration and budgets \
             it has (changes made meanwhile apply once it is back) and keeps reconnecting; check that \
             PostgreSQL runs there and accepts the pacer's connections",
            self.server(),
            e.0
        );
    }

    /// Reads both tables in one consistent (repeatable-read) transaction and validates every campaign.
    pub fn read<C: Currency>(&mut self, version: u64) -> Result<Read<C>, ConfigError> {
        let client = self.client()?;
        let result = read(client, version);
        if let Err(e) = &result {
            if client.is_closed() {
                self.unreachable(e);
            }
        }
        result
    }

    /// Applies to `service` what changed in the delta sums since the last call, so the budget in force is
    /// `base + Σ deltas` whatever order rows arrived in, and runs `install` (a new snapshot's base
    /// budgets) in between: cuts first, then the snapshot, then top-ups, so no moment of the change allows
    /// more than the old configuration or the new one does.
    pub fn apply_deltas<C: Currency>(
        &mut self,
        service: &PacerState<C>,
        deltas: &BTreeMap<CampaignId, i64>,
        install: impl FnOnce(),
    ) {
        let changes: Vec<(CampaignId, i128)> = self
            .applied
            .keys()
            .chain(deltas.keys())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .map(|&campaign| {
                let now = deltas.get(&campaign).copied().unwrap_or(0);
                let before = self.applied.get(&campaign).copied().unwrap_or(0);
                (campaign, i128::from(now) - i128::from(before))
            })
            .collect();
        let apply = |campaign: CampaignId, mut change: i128| {
            // Two i64 sums can differ by more than an i64 holds: such a change goes in as several steps.
            while change != 0 {
                let step = change.clamp(i128::from(i64::MIN), i128::from(i64::MAX));
                service.apply_delta(campaign, step as i64);
                change -= step;
            }
        };
        for &(campaign, change) in &changes {
            if change < 0 {
                apply(campaign, change);
            }
        }
        install();
        for &(campaign, change) in &changes {
            if change > 0 {
                apply(campaign, change);
            }
        }
        self.applied = deltas.clone();
    }

    /// Waits up to `timeout` for a change notification; true if one came (pending ones are drained) or the
    /// connection is new (changes made while it was down were not notified).
    fn wait(&mut self, timeout: Duration) -> Result<bool, ConfigError> {
        let reconnected = self.client.as_ref().is_none_or(|c| c.is_closed());
        let client = self.client()?;
        if reconnected {
            return Ok(true);
        }
        let came = wait_notified(client, timeout);
        came.map_err(|e| {
            let e = error(e);
            self.unreachable(&e);
            e
        })
    }
}

/// Waits up to `timeout` for a notification and drains any others pending; true if one came.
fn wait_notified(client: &mut Client, timeout: Duration) -> Result<bool, postgres::Error> {
    let mut notifications = client.notifications();
    let came = notifications.timeout_iter(timeout).next()?.is_some();
    if came {
        while notifications.iter().next()?.is_some() {}
    }
    Ok(came)
}

fn read<C: Currency>(client: &mut Client, version: u64) -> Result<Read<C>, ConfigError> {
    let mut tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .map_err(error)?;
    let rows = tx.query(CAMPAIGNS, &[]).map_err(error)?;
    let delta_rows = tx.query(DELTAS, &[]).map_err(error)?;
    tx.commit().map_err(error)?;
    let mut deltas = BTreeMap::new();
    for row in delta_rows {
        let id: i64 = row.try_get(0).map_err(error)?;
        let sum: i64 = row.try_get(1).map_err(error)?;
        deltas.insert(campaign_id(id)?, sum);
    }
    Ok(Read {
        snapshot: snapshot(&rows, version),
        deltas,
    })
}

fn snapshot<C: Currency>(rows: &[postgres::Row], version: u64) -> Result<Snapshot<C>, ConfigError> {
    let code = String::from_utf8_lossy(&C::CODE).into_owned();
    let mut campaigns = Vec::with_capacity(rows.len());
    for row in rows {
        let get_i64 = |i: usize| -> Result<i64, ConfigError> {
            row.try_get::<_, Option<i64>>(i)
                .map_err(error)?
                .ok_or_else(|| error(format!("column {i} of a campaign is null")))
        };
        let id: i64 = get_i64(0)?;
        campaign_id(id)?;
        let currency: String = row.try_get(1).map_err(error)?;
        if currency != code {
            return Err(error(format!(
                "campaign {id}: currency {currency:?} is not the pacer's {code}"
            )));
        }
        let millis = |i: usize, what: &str| -> Result<u64, ConfigError> {
            u64::try_from(get_i64(i)?)
                .map_err(|_| error(format!("campaign {id}: {what} is before 1970")))
        };
        let json = |i: usize, what: &str| -> Result<serde_json::Value, ConfigError> {
            let text: String = row.try_get(i).map_err(error)?;
            serde_json::from_str(&text).map_err(|e| error(format!("campaign {id}: {what}: {e}")))
        };
        // One row as a one-campaign file, so that the file's parser validates it and names it on error.
        let doc = serde_json::json!({
            "currency": code,
            "campaign": [{
                "id": id,
                "budget": units(id, "budget_micros", get_i64(2)?)?,
                "max_cpm": units(id, "max_cpm_micros", get_i64(3)?)?,
                "start_ms": millis(4, "flight_start")?,
                "end_ms": millis(5, "flight_end")?,
                "strategy": json(6, "strategy")?,
                "targeting": json(7, "targeting")?,
                "seat": row.try_get::<_, Option<String>>(8).map_err(error)?,
                "deals": json(9, "deals")?,
                "creative": json(10, "creatives")?,
            }],
        });
        let one = campaigns::parse::<C>(&doc.to_string(), true, version).map_err(|e| {
            if e.0.starts_with("campaign ") {
                e
            } else {
                error(format!("campaign {id}: {}", e.0))
            }
        })?;
        campaigns.extend(one.campaigns().into_iter().cloned());
    }
    Ok(Snapshot::new(version, campaigns))
}

/// The thread that keeps a service on the database's configuration, until dropped.
pub struct PgWatcher {
    stats: Arc<WatchStats>,
    _thread: Background,
}

/// How long the watcher blocks at a time, so that dropping it is prompt whatever the poll interval.
const WAIT_SLICE: Duration = Duration::from_millis(100);

impl PgWatcher {
    /// Watches `source` for `service`: a reload on every notification and at least every `poll`. After a
    /// lost connection it counts the error, retries every `poll` (kept within 0.1-1 s), and reloads once
    /// reconnected.
    pub fn start<C: Currency>(
        mut source: PgSource,
        service: Arc<PacerState<C>>,
        poll: Duration,
    ) -> std::io::Result<PgWatcher> {
        let stats = Arc::new(WatchStats::default());
        SOURCE_RELOADS.register();
        SOURCE_ERRORS.register();
        // Building snapshots from the table: at low priority, not at the loops' expense.
        let thread = Background::spawn("pacer-postgres", true, {
            let stats = Arc::clone(&stats);
            move |stop| {
                let mut next_poll = Instant::now() + poll;
                while !Background::stopping(stop) {
                    let now = Instant::now();
                    let wait = WAIT_SLICE.min(next_poll.saturating_duration_since(now));
                    let due = match source.wait(wait) {
                        Ok(notified) => notified || Instant::now() >= next_poll,
                        Err(e) => {
                            // The next wait reconnects, and a new connection reloads.
                            fail(&mut source, &stats, e);
                            std::thread::park_timeout(
                                poll.clamp(WAIT_SLICE, Duration::from_secs(1)),
                            );
                            false
                        }
                    };
                    if due && !Background::stopping(stop) {
                        next_poll = Instant::now() + poll;
                        reload(&mut source, &service, &stats);
                    }
                }
            }
        })?;
        Ok(PgWatcher {
            stats,
            _thread: thread,
        })
    }

    pub fn stats(&self) -> &WatchStats {
        &self.stats
    }
}

/// Counts a refused reload; logs it unless it is the same refusal as the last one logged since a reload
/// succeeded (a bad row is met at every poll until it is fixed), or the database is out of reach (that
/// was logged once, when it went).
fn fail(source: &mut PgSource, stats: &WatchStats, e: ConfigError) {
    if !source.is_down() && source.refusal_logged.as_ref() != Some(&e) {
        tracing::warn!(
            "keeping the previous pacer configuration: the one in PostgreSQL at {} is refused: {}",
            source.server(),
            e.0
        );
        source.refusal_logged = Some(e.clone());
    }
    *stats.last_error.lock() = Some(e);
    stats.errors.fetch_add(1, Ordering::Release);
    SOURCE_ERRORS.incr();
}

/// One reload. The snapshot is installed only when it differs from the one in force (an idle poll costs a
/// read and no swap); the deltas apply even when a bad row refused the snapshot.
fn reload<C: Currency>(source: &mut PgSource, service: &PacerState<C>, stats: &WatchStats) {
    let current = service.snapshot();
    match source.read::<C>(current.version + 1) {
        Ok(read) => {
            let snapshot = match read.snapshot {
                Ok(snapshot) => {
                    source.refusal_logged = None;
                    Some(snapshot).filter(|s| s.campaigns() != current.campaigns())
                }
                Err(e) => {
                    fail(source, stats, e);
                    None
                }
            };
            source.apply_deltas(service, &read.deltas, || {
                if let Some(snapshot) = snapshot {
                    service.install(snapshot);
                    stats.reloads.fetch_add(1, Ordering::Release);
                    SOURCE_RELOADS.incr();
                }
            });
        }
        Err(e) => fail(source, stats, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tern_pacer_core::ads::Ads;
    use tern_pacer_core::coordinator::CoordinatorConfig;
    use tern_pacer_core::money::{Cpm, Micros, Usd};
    use tern_pacer_core::snapshot::{Campaign, Flight, Targeting};
    use tern_pacer_core::strategy::Strategy;

    fn campaign(id: u32, budget_units: u64) -> Campaign<Usd> {
        Campaign {
            id: CampaignId(id),
            budget: Micros::from_units(budget_units),
            flight: Flight {
                start_ms: 0,
                end_ms: 10,
            },
            max_cpm: Cpm::from_units(1),
            targeting: Targeting::default(),
            strategy: Strategy::HardCap,
            ads: Ads::default(),
        }
    }

    fn source() -> PgSource {
        PgSource {
            url: String::new(),
            client: None,
            applied: BTreeMap::new(),
            down_since: None,
            refusal_logged: None,
        }
    }

    /// A server out of reach is named as `host:port`, never with the URL's password, and is down until a
    /// connection works.
    #[test]
    fn an_unreachable_server_is_named_without_its_password() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut source = PgSource {
            url: format!("postgres://pacer:secret@127.0.0.1:{port}/db?connect_timeout=2"),
            ..source()
        };
        assert_eq!(source.server(), format!("127.0.0.1:{port}"));
        assert!(!source.is_down());
        let e = source.client().err().expect("nothing listens there");
        assert!(source.is_down(), "{e}");
        assert!(source.wait(Duration::from_millis(1)).is_err());
        assert!(source.is_down());
    }

    #[test]
    fn amounts_are_written_as_the_files_decimal_units() {
        assert_eq!(units(1, "budget_micros", 0).unwrap(), "0.000000");
        assert_eq!(units(1, "budget_micros", 12_500_001).unwrap(), "12.500001");
        assert_eq!(
            units(1, "budget_micros", i64::MAX).unwrap(),
            "9223372036854.775807"
        );
        let e = units(4, "max_cpm_micros", -1).unwrap_err();
        assert_eq!(e.0, "campaign 4: max_cpm_micros is negative");
        assert!(campaign_id(-1).is_err());
        assert!(campaign_id(1 << 32).is_err());
        assert_eq!(campaign_id(7).unwrap(), CampaignId(7));
    }

    #[test]
    fn cuts_go_in_before_the_snapshot_and_top_ups_after() {
        let service = PacerState::<Usd>::new(
            CoordinatorConfig::default(),
            Snapshot::new(1, [campaign(1, 10), campaign(2, 10)]),
        );
        let mut pg = source();
        let budgets = |service: &PacerState<Usd>| {
            let c = service.coordinator();
            (
                c.budget(CampaignId(1)).micros(),
                c.budget(CampaignId(2)).micros(),
            )
        };
        let deltas = BTreeMap::from([(CampaignId(1), -4_000_000), (CampaignId(2), 3_000_000)]);
        pg.apply_deltas(&service, &deltas, || {
            // Campaign 1's cut is in, campaign 2's top-up is not yet.
            assert_eq!(budgets(&service), (6_000_000, 10_000_000));
            service.install(Snapshot::new(2, [campaign(1, 20), campaign(2, 20)]));
        });
        assert_eq!(budgets(&service), (16_000_000, 23_000_000));
    }

    #[test]
    fn a_swing_wider_than_an_i64_applies_whole() {
        let service = PacerState::<Usd>::new(
            CoordinatorConfig::default(),
            Snapshot::new(1, [campaign(1, 10)]),
        );
        let mut pg = source();
        pg.apply_deltas(
            &service,
            &BTreeMap::from([(CampaignId(1), i64::MIN)]),
            || {},
        );
        assert_eq!(service.coordinator().budget(CampaignId(1)), Micros::ZERO);
        pg.apply_deltas(
            &service,
            &BTreeMap::from([(CampaignId(1), i64::MAX)]),
            || {},
        );
        assert_eq!(
            service.coordinator().budget(CampaignId(1)).micros(),
            10_000_000 + i64::MAX as u64
        );
    }

    proptest! {
        /// Whatever order delta rows are committed and seen in, and however often the same sums are read,
        /// the budget in force is the base plus the sum of the rows seen.
        #[test]
        fn budgets_are_base_plus_the_deltas_seen_in_any_order(
            rows in prop::collection::vec((1u32..4, -5_000_000i64..5_000_000), 0..20),
            order in any::<prop::sample::Index>(),
            rereads in prop::collection::vec(any::<bool>(), 20),
        ) {
            let service = PacerState::<Usd>::new(
                CoordinatorConfig::default(),
                Snapshot::new(1, [campaign(1, 100), campaign(2, 100), campaign(3, 100)]),
            );
            let mut rows = rows;
            let len = rows.len();
            if len > 0 {
                rows.rotate_left(order.index(len));
            }
            let mut pg = source();
            for seen in 0..=len {
                let mut sums = BTreeMap::new();
                for &(id, delta) in &rows[..seen] {
                    *sums.entry(CampaignId(id)).or_insert(0i64) += delta;
                }
                sums.retain(|_, sum| *sum != 0);
                let reads = if rereads[seen % rereads.len()] { 2 } else { 1 };
                for _ in 0..reads {
                    pg.apply_deltas(&service, &sums, || {});
                }
                for id in 1..4 {
                    let want = 100_000_000 + sums.get(&CampaignId(id)).copied().unwrap_or(0);
                    let want = u64::try_from(want).unwrap_or(0);
                    prop_assert_eq!(service.coordinator().budget(CampaignId(id)).micros(), want);
                }
            }
        }
    }
}
