//! PostgreSQL as the pacer's source of truth, against a real PostgreSQL 15 server started in a temporary
//! directory (as the `postgres` user when the test runs as root): campaigns inserted in SQL are bid on over
//! the gateway protocol; budget and targeting changes made in SQL take effect through NOTIFY and through
//! polling; a bad row is refused and the last good snapshot kept. Skipped, saying so, only when the
//! PostgreSQL binaries are missing (under `CI=true` that fails instead).

mod common;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{candidates, request, serve, stop, Gateway};
use postgres::{Client, NoTls};
use tern_pacer::money::{Cpm, Usd};
use tern_pacer::proto::{CampaignId, Decision, Device, Status};
use tern_pacer::Serving;
use tern_testkit::Postgres;

/// A connection to the test's server.
fn client(pg: &Postgres) -> Client {
    Client::connect(&pg.url(), NoTls).unwrap()
}

fn serve_postgres(url: &str, poll_ms: u64) -> Serving {
    serve(&[
        "--postgres",
        url,
        "--pg-poll-ms",
        &poll_ms.to_string(),
        "--listen",
        "127.0.0.1:0",
        "--io-threads",
        "1",
    ])
}

/// Asks one bid at a time, each for a fresh impression.
struct Bidder {
    gateway: Gateway,
    next_auction: u64,
}

impl Bidder {
    fn connect(addr: SocketAddr) -> Bidder {
        Bidder {
            gateway: Gateway::connect(addr),
            next_auction: 0,
        }
    }

    /// One request from `geo` with campaign 1 as the only candidate, bidding up to 1 USD per impression.
    fn ask(&mut self, geo: &[u8; 2]) -> Decision<Usd> {
        self.next_auction += 1;
        let header = request(self.next_auction, geo, Device::Desktop);
        self.gateway.bid(header, candidates(1, 1_000_000_000))
    }

    /// Asks until the answer is `want` (a change in the database reached the pacer), for up to 10 s.
    fn until(&mut self, geo: &[u8; 2], want: Decision<Usd>) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let got = self.ask(geo);
            if got == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "still {got:?}, waiting for {want:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Spends budget until refused; how many 1 USD bids went through.
    fn drain(&mut self, geo: &[u8; 2]) -> u64 {
        common::drain(5, || self.ask(geo))
    }
}

const BID: Decision<Usd> = Decision::Bid {
    campaign: CampaignId(1),
    price: Cpm::from_units(1_000),
};

fn insert_campaign(db: &mut Client, id: i64, budget_micros: i64, strategy: &str, targeting: &str) {
    db.execute(
        "INSERT INTO pacer_campaigns (id, name, currency, budget_micros, max_cpm_micros, flight_start, \
         flight_end, strategy, targeting) VALUES ($1, 'test', 'USD', $2, 1000000000, \
         now() - interval '1 day', now() + interval '1 day', $3::text::jsonb, $4::text::jsonb)",
        &[&id, &budget_micros, &strategy, &targeting],
    )
    .unwrap();
}

fn wait_for(what: &str, done: impl FnMut() -> bool) {
    common::wait_for(what, Duration::from_secs(10), done);
}

#[test]
fn campaigns_budgets_and_targeting_follow_the_database() {
    let Some(pg) = Postgres::start("source") else {
        return;
    };
    let mut db = client(&pg);
    db.batch_execute(tern_pacer::pg::SCHEMA).unwrap();
    // Campaign 1: 3 USD, 1 USD per impression, only in NL.
    insert_campaign(
        &mut db,
        1,
        3_000_000,
        r#"{"kind": "hard-cap"}"#,
        r#"{"geos": ["NL"]}"#,
    );
    db.execute(
        "INSERT INTO pacer_budget_deltas (campaign_id, delta_micros) VALUES (1, 1000000)",
        &[],
    )
    .unwrap();

    // `notified` re-reads only on NOTIFY (its poll is ten minutes); `polled` only by polling once the
    // triggers are disabled below.
    let notified = serve_postgres(&pg.url(), 600_000);
    let polled = serve_postgres(&pg.url(), 100);
    let mut a = Bidder::connect(notified.server.local_addr().unwrap());
    let mut b = Bidder::connect(polled.server.local_addr().unwrap());

    // Base 3 USD plus a 1 USD delta present at start: four bids on each node (they do not share budget).
    assert_eq!(a.ask(b"DE"), Decision::NoBid(Status::NotTargeted));
    assert_eq!(a.drain(b"NL"), 4);
    assert_eq!(b.drain(b"NL"), 4);

    // NOTIFY path: a top-up delta and a retargeting, committed in SQL, reach the ten-minute poller.
    db.execute(
        "INSERT INTO pacer_budget_deltas (campaign_id, delta_micros) VALUES (1, 2000000)",
        &[],
    )
    .unwrap();
    a.until(b"NL", BID);
    assert_eq!(a.drain(b"NL"), 1, "two top-up bids in all");
    db.execute(
        "UPDATE pacer_campaigns SET targeting = '{\"geos\": [\"DE\"]}', budget_micros = 10000000 \
         WHERE id = 1",
        &[],
    )
    .unwrap();
    a.until(b"DE", BID);
    assert_eq!(a.ask(b"NL"), Decision::NoBid(Status::NotTargeted));
    // Budget 10 + deltas 3 = 13 USD, 7 spent with the bid above: six more.
    assert_eq!(a.drain(b"DE"), 6);
    let version: i64 = db
        .query_one("SELECT version FROM pacer_campaigns WHERE id = 1", &[])
        .unwrap()
        .get(0);
    assert_eq!(version, 2, "the update trigger bumps the row's version");

    // Poll path: with the NOTIFY triggers off, only the 100 ms poller sees changes. `polled` has 13 USD
    // and, after one bid on DE, 5 spent; one transaction retargets to GB and cuts 8 USD.
    db.batch_execute(
        "ALTER TABLE pacer_campaigns DISABLE TRIGGER pacer_campaigns_notify; \
         ALTER TABLE pacer_budget_deltas DISABLE TRIGGER pacer_budget_deltas_notify;",
    )
    .unwrap();
    let notified_reloads = notified.watcher.stats().reloads.load(Ordering::Acquire);
    b.until(b"DE", BID);
    db.batch_execute(
        "BEGIN; \
         INSERT INTO pacer_budget_deltas (campaign_id, delta_micros) VALUES (1, -8000000); \
         UPDATE pacer_campaigns SET targeting = '{\"geos\": [\"GB\"]}' WHERE id = 1; \
         COMMIT;",
    )
    .unwrap();
    // Cuts apply before the snapshot that came with them: once GB is targeted, 5 USD is the budget and
    // all of it is spent.
    b.until(b"GB", Decision::NoBid(Status::BudgetExhausted));
    assert_eq!(b.ask(b"DE"), Decision::NoBid(Status::NotTargeted));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(b.ask(b"GB"), Decision::NoBid(Status::BudgetExhausted));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        notified.watcher.stats().reloads.load(Ordering::Acquire),
        notified_reloads,
        "the NOTIFY-only node saw no notification"
    );
    assert_eq!(a.ask(b"GB"), Decision::NoBid(Status::NotTargeted));

    // A bad row: both nodes refuse the new snapshot, count and report the error, and keep deciding on the
    // last good one; budget deltas still apply.
    db.batch_execute(
        "ALTER TABLE pacer_campaigns ENABLE TRIGGER pacer_campaigns_notify; \
         ALTER TABLE pacer_budget_deltas ENABLE TRIGGER pacer_budget_deltas_notify;",
    )
    .unwrap();
    let errors = |s: &Serving| s.watcher.stats().errors.load(Ordering::Acquire);
    assert_eq!((errors(&notified), errors(&polled)), (0, 0));
    insert_campaign(&mut db, 2, 1_000_000, r#"{"kind": "spend-it-all"}"#, "{}");
    wait_for("both nodes to refuse the bad row", || {
        errors(&notified) >= 1 && errors(&polled) >= 1
    });
    let last = notified.watcher.stats().last_error.lock().clone().unwrap();
    assert!(last.0.contains("campaign 2"), "{last}");
    assert!(last.0.contains("spend-it-all"), "{last}");
    // `notified` stays on DE targeting (it never installed GB), out of budget (5 USD, 13 spent).
    assert_eq!(a.ask(b"GB"), Decision::NoBid(Status::NotTargeted));
    assert_eq!(a.ask(b"DE"), Decision::NoBid(Status::BudgetExhausted));
    // A 10 USD top-up while the bad row is there: 15 USD, so `notified` bids twice more, still on DE.
    db.execute(
        "INSERT INTO pacer_budget_deltas (campaign_id, delta_micros) VALUES (1, 10000000)",
        &[],
    )
    .unwrap();
    a.until(b"DE", BID);
    assert_eq!(a.drain(b"DE"), 1);
    b.until(b"GB", BID);
    assert_eq!(
        notified.watcher.stats().reloads.load(Ordering::Acquire),
        notified_reloads
    );

    // Fixed in SQL: the next snapshot goes in.
    db.execute(
        "UPDATE pacer_campaigns SET strategy = '{\"kind\": \"even\"}' WHERE id = 2",
        &[],
    )
    .unwrap();
    a.until(b"GB", Decision::NoBid(Status::BudgetExhausted));
    assert_eq!(a.ask(b"DE"), Decision::NoBid(Status::NotTargeted));
    assert!(notified.watcher.stats().reloads.load(Ordering::Acquire) > notified_reloads);

    // A lost connection: the watchers' sessions are terminated, and a change is made while `notified` is
    // not listening. It counts the error, reconnects within a second and re-reads.
    let before = errors(&notified);
    db.query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'",
        &[],
    )
    .unwrap();
    db.execute(
        "UPDATE pacer_campaigns SET targeting = '{\"geos\": [\"IT\"]}' WHERE id = 1",
        &[],
    )
    .unwrap();
    a.until(b"IT", Decision::NoBid(Status::BudgetExhausted));
    wait_for("the lost connection to be counted", || {
        errors(&notified) > before
    });

    for serving in [notified, polled] {
        stop(serving);
    }
}

/// `pacer_campaigns` as the pacer's schema made it before creatives, seats and deals.
const TABLE_BEFORE_ADS: &str = r#"
CREATE TABLE pacer_campaigns (
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
"#;

#[test]
fn an_older_table_is_migrated_and_its_creatives_seats_and_deals_bid_over_openrtb() {
    let Some(pg) = Postgres::start("ads") else {
        return;
    };
    let mut db = client(&pg);
    db.batch_execute(TABLE_BEFORE_ADS).unwrap();
    insert_campaign(&mut db, 1, 1_000_000_000, r#"{"kind": "hard-cap"}"#, "{}");
    // The schema adds the new columns to the old table, and running it again changes nothing.
    db.batch_execute(tern_pacer::pg::SCHEMA).unwrap();
    db.batch_execute(tern_pacer::pg::SCHEMA).unwrap();
    let columns: i64 = db
        .query_one(
            "SELECT count(*) FROM information_schema.columns WHERE table_name = 'pacer_campaigns' \
             AND column_name IN ('seat', 'deals', 'creatives')",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(columns, 3);
    let creatives = r#"[{"id": "cr-9", "format": "banner", "sizes": [[300, 250]], "adomain": ["shoes.example"],
                         "cat": ["IAB18-3"], "adm": "<a href='https://shoes.example/'><img src='a.png'></a>"}]"#;
    db.execute(
        "UPDATE pacer_campaigns SET seat = 'seat-9', deals = '[\"deal-1\"]', creatives = $1::text::jsonb \
         WHERE id = 1",
        &[&creatives],
    )
    .unwrap();
    let serving = serve_postgres(&pg.url(), 100);
    let mut s = common::connect(serving.server.local_addr().unwrap());
    let mut auctions = 0;
    let mut request = |deal: &str| {
        auctions += 1;
        serde_json::json!({
            "id": format!("auction-{auctions}"),
            "imp": [{"id": "1", "banner": {"w": 300, "h": 250},
                     "pmp": {"private_auction": 1, "deals": [{"id": deal, "bidfloor": 0.5}]}}],
        })
        .to_string()
    };
    // The loop's first budget grant comes with its first sync with the coordinator.
    let mut response = common::exchange(&mut s, &common::post_auction(&request("deal-1")));
    let started = Instant::now();
    while response.header("x-tern-no-bid") == Some("BudgetExhausted")
        && started.elapsed() < Duration::from_secs(5)
    {
        std::thread::sleep(Duration::from_millis(20));
        response = common::exchange(&mut s, &common::post_auction(&request("deal-1")));
    }
    assert_eq!(
        response.status,
        200,
        "{:?}",
        response.header("x-tern-no-bid")
    );
    let body = response.json();
    let bid = &body["seatbid"][0]["bid"][0];
    assert_eq!(body["seatbid"][0]["seat"], "seat-9");
    assert_eq!(
        (
            bid["crid"].as_str(),
            bid["dealid"].as_str(),
            &bid["adomain"]
        ),
        (
            Some("cr-9"),
            Some("deal-1"),
            &serde_json::json!(["shoes.example"])
        )
    );
    let other = common::exchange(&mut s, &common::post_auction(&request("deal-2")));
    assert_eq!(
        (other.status, other.header("x-tern-no-bid")),
        (204, Some("NoDeal"))
    );
    // A creative the file would refuse is refused from the database too, and the last good snapshot stays.
    let errors = |s: &Serving| s.watcher.stats().errors.load(Ordering::Acquire);
    let errors_before = errors(&serving);
    db.execute(
        "UPDATE pacer_campaigns SET creatives = '[{\"id\": \"x\", \"format\": \"banner\", \"sizes\": [[1, 1]], \
         \"adomain\": [], \"adm\": \"<div></div>\"}]' WHERE id = 1",
        &[],
    )
    .unwrap();
    wait_for("the bad row to be refused", || {
        errors(&serving) > errors_before
    });
    let again = common::exchange(&mut s, &common::post_auction(&request("deal-1")));
    assert_eq!(again.status, 200, "{:?}", again.header("x-tern-no-bid"));
    stop(serving);
}
