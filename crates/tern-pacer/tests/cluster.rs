//! Pacer nodes sharing a campaign's budget through budget leases in a real Redis server (started on a free
//! port, without persistence, and killed at the end of each test). Three nodes, two in this process and
//! one in a child process that is SIGKILLed mid-run with bids in flight: its lease expires and is clawed
//! back, the survivors spend the rest of the budget, and the spend adds up: what the nodes acknowledged
//! equals what Redis counted, and the spend the dead node's bids still cause is within the stated bound
//! (the clawed-back amount, at most one lease slice). Also: the lease script on its own, a node fencing
//! itself when Redis is gone, a clean shutdown reporting the last spend and releasing, and a node restarted
//! from its crash journal not reporting restored spend twice.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use clap::Parser;
use common::{
    candidates, notice, one_campaign, request, serve, stop, wait_for, ChildServer, Cli, Gateway,
    TempDir,
};
use tern_pacer::cluster::{keys, LEASE_SCRIPT};
use tern_pacer::proto::{CampaignId, Decision, Device, NoticeKind, NoticeStatus, Status};
use tern_testkit::Redis;

const CAMPAIGN: CampaignId = CampaignId(1);
const BUDGET_UNITS: u64 = 60;
const SLICE_MICROS: u64 = 5_000_000;
const LEASE_MS: u64 = 500;
const PREFIX: &str = "tern:pacer";

/// A directory with the campaigns file: campaign 1, `BUDGET_UNITS` USD, up to 1,000 USD CPM.
fn campaigns_dir(name: &str) -> TempDir {
    TempDir::with_campaigns(
        name,
        &one_campaign(CAMPAIGN.0, &BUDGET_UNITS.to_string(), "1000"),
    )
}

/// A Redis server on a free port, without persistence, and its URL; `None` (after saying why) if it is not
/// installed.
fn start_redis() -> Option<(Redis, String)> {
    let redis = Redis::start()?;
    let url = redis.url();
    Some((redis, url))
}

fn redis_connection(url: &str) -> redis::Connection {
    redis::Client::open(url).unwrap().get_connection().unwrap()
}

/// The `serve` flags of node `node` on `redis`, listening on a free port.
fn node_flags(dir: &TempDir, redis: &str, node: &str) -> Vec<String> {
    [
        "--config",
        &dir.arg("campaigns.toml"),
        "--redis",
        redis,
        "--node-id",
        node,
        "--lease-ms",
        &LEASE_MS.to_string(),
        "--lease-slice-micros",
        &SLICE_MICROS.to_string(),
        "--listen",
        "127.0.0.1:0",
        "--io-threads",
        "1",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// Not a test on its own: what runs in the child processes of the tests below (a node to SIGKILL).
#[test]
fn serve_child() {
    common::serve_child();
}

/// The exchange's side of one node: bids for fresh impressions, billing notices for the won ones.
struct Exchange {
    gateway: Gateway,
    /// Auction ids are unique across nodes: the node index is in the top bits.
    next_auction: u64,
    /// Spend this node acknowledged (billing notices answered `Applied`), in whole units.
    acked: u64,
    /// Won, not billed yet.
    in_flight: Vec<u64>,
}

impl Exchange {
    fn connect(addr: SocketAddr, index: u64) -> Exchange {
        Exchange {
            gateway: Gateway::connect(addr),
            next_auction: index << 40,
            acked: 0,
            in_flight: Vec::new(),
        }
    }

    /// One bid request worth 1 USD per impression; true if the node bid (the impression is then in flight).
    fn bid(&mut self) -> bool {
        let auction_id = self.next_auction;
        self.next_auction += 1;
        let header = request(auction_id, b"US", Device::Phone);
        match self
            .gateway
            .bid(header, candidates(CAMPAIGN.0, 1_000_000_000))
        {
            Decision::Bid { .. } => {
                self.in_flight.push(auction_id);
                true
            }
            Decision::NoBid(Status::BudgetExhausted | Status::BudgetUnavailable) => false,
            other => panic!("unexpected decision {other:?}"),
        }
    }

    /// Bills every impression in flight at its full price (1 USD), each notice sent twice: the duplicate
    /// must change nothing.
    fn bill_all(&mut self) {
        if self.in_flight.is_empty() {
            return;
        }
        let notices: Vec<_> = self
            .in_flight
            .drain(..)
            .flat_map(|auction_id| {
                let billing = notice(NoticeKind::Billing, auction_id, CAMPAIGN.0, 1_000_000_000);
                [billing, billing]
            })
            .collect();
        for pair in self.gateway.notices(&notices).chunks(2) {
            assert_eq!(pair, [NoticeStatus::Applied, NoticeStatus::Duplicate]);
            self.acked += 1;
        }
    }
}

fn redis_field(redis: &mut redis::Connection, key: &str, field: &str) -> i64 {
    redis::cmd("HGET")
        .arg(key)
        .arg(field)
        .query::<Option<i64>>(redis)
        .unwrap()
        .unwrap_or(0)
}

#[test]
fn three_nodes_share_a_budget_and_a_killed_nodes_lease_is_clawed_back() {
    let Some((_redis_server, redis_url)) = start_redis() else {
        return;
    };
    let mut redis = redis_connection(&redis_url);
    let dir = campaigns_dir("cluster");
    let a = serve(&node_flags(&dir, &redis_url, "a"));
    let b = serve(&node_flags(&dir, &redis_url, "b"));
    let victim = ChildServer::start(&node_flags(&dir, &redis_url, "c"));
    let mut survivors = [
        Exchange::connect(a.server.local_addr().unwrap(), 1),
        Exchange::connect(b.server.local_addr().unwrap(), 2),
    ];
    let mut c = Exchange::connect(victim.addr, 3);
    let (pool, leases) = keys(PREFIX, CAMPAIGN);

    // All three bid and are billed until the victim has settled 4 USD.
    let round = |survivors: &mut [Exchange; 2]| {
        for g in survivors.iter_mut() {
            g.bid();
            g.bill_all();
        }
        std::thread::sleep(Duration::from_millis(4));
    };
    while c.acked < 4 {
        round(&mut survivors);
        c.bid();
        c.bill_all();
    }
    // Then the victim keeps winning bids that are never billed before it dies: reservations in flight.
    while c.in_flight.len() < 2 {
        round(&mut survivors);
        c.bid();
    }
    // Its settled spend reaches Redis within a tick (spend settled since then would be lost with it; the
    // journal is what keeps that, and it is within the bound too).
    wait_for(
        "the victim to report its spend",
        Duration::from_secs(5),
        || redis_field(&mut redis, &leases, "c:spent") == c.acked as i64 * 1_000_000,
    );
    let victim_held = redis_field(&mut redis, &leases, "c:held");
    assert!(
        victim_held as u64 <= SLICE_MICROS,
        "a lease holds at most one slice"
    );
    assert!(victim_held >= c.in_flight.len() as i64 * 1_000_000);
    victim.kill();
    let killed = Instant::now();
    // The exchange bills what the dead node bid: real spend that no node can count.
    let unseen_late_bills = c.in_flight.len() as u64;

    // The survivors go on until the whole budget is spent: that takes the victim's clawed-back lease.
    wait_for(
        "the survivors to spend the budget",
        Duration::from_secs(30),
        || {
            round(&mut survivors);
            redis_field(&mut redis, &pool, "spent") == BUDGET_UNITS as i64 * 1_000_000
        },
    );
    assert!(
        killed.elapsed() > Duration::from_millis(LEASE_MS),
        "spent only after the lease expired"
    );
    // Nothing is left for either survivor, then a clean shutdown reports the last spend and releases.
    std::thread::sleep(Duration::from_millis(20));
    for g in survivors.iter_mut() {
        assert!(!g.bid(), "no budget left");
    }
    for serving in [a, b] {
        stop(serving);
    }

    let field = |redis: &mut redis::Connection, f: &str| redis_field(redis, &pool, f);
    let acked: u64 = survivors.iter().map(|g| g.acked).sum::<u64>() + c.acked;
    let spent = field(&mut redis, "spent") as u64;
    let clawed = field(&mut redis, "clawed") as u64;
    let expired = field(&mut redis, "leases_expired") as u64;
    assert_eq!(
        spent,
        acked * 1_000_000,
        "Redis counted exactly the acknowledged spend"
    );
    for (node, g) in ["a", "b"].iter().zip(&survivors) {
        assert_eq!(
            redis_field(&mut redis, &leases, &format!("{node}:spent")),
            g.acked as i64 * 1_000_000
        );
    }
    assert_eq!(
        field(&mut redis, "leased"),
        0,
        "every lease released or clawed back"
    );
    assert!(expired >= 1, "the killed node's lease expired");
    assert!(
        clawed >= unseen_late_bills * 1_000_000,
        "its reservations came back with it"
    );
    // The bound: total spend <= budget + what expired leases held, which is at most a slice per lease.
    let total_spend = spent + unseen_late_bills * 1_000_000;
    assert!(total_spend <= BUDGET_UNITS * 1_000_000 + clawed);
    assert!(clawed <= expired * SLICE_MICROS);
    assert!(
        total_spend > BUDGET_UNITS * 1_000_000,
        "the late bills did overspend"
    );
    drop(dir);
}

/// Runs the lease script for one campaign as node `node` (incarnation `inc`) with
/// `(budget, total spent, ask, generation)`, and returns `(generation, held, lost)`.
fn lease(
    redis: &mut redis::Connection,
    (node, inc): (&str, &str),
    ttl_ms: u64,
    mode: &str,
    (budget, total, ask, generation): (i64, i64, i64, i64),
) -> (i64, i64, i64) {
    let (pool, leases) = keys("script-test", CampaignId(7));
    let out: Vec<i64> = redis::Script::new(LEASE_SCRIPT)
        .key(pool)
        .key(leases)
        .arg(node)
        .arg(ttl_ms)
        .arg(mode)
        .arg(inc)
        .arg(budget)
        .arg(total)
        .arg(ask)
        .arg(generation)
        .invoke(redis)
        .unwrap();
    (out[0], out[1], out[2])
}

#[test]
fn the_lease_script_takes_reports_claws_back_and_releases() {
    let Some((_redis_server, redis_url)) = start_redis() else {
        return;
    };
    let mut redis = redis_connection(&redis_url);
    let (pool, _) = keys("script-test", CampaignId(7));
    let field = |redis: &mut redis::Connection, f: &str| redis_field(redis, &pool, f);
    let (x, y) = (("x", "1"), ("y", "1"));
    // Budget 10: x takes 6, y asks 6 and gets the 4 left.
    let (gx, held, lost) = lease(&mut redis, x, 60_000, "sync", (10, 0, 6, 0));
    assert!(gx > 0);
    assert_eq!((held, lost), (6, 0));
    let (gy, held, _) = lease(&mut redis, y, 60_000, "sync", (10, 0, 6, 0));
    assert_ne!(gy, gx);
    assert_eq!(held, 4);
    // x has spent 2; the same total sent again (a retry after a lost answer) counts nothing more.
    assert_eq!(
        lease(&mut redis, x, 60_000, "sync", (10, 2, 0, gx)),
        (gx, 4, 0)
    );
    assert_eq!(lease(&mut redis, x, 30, "sync", (10, 2, 0, gx)), (gx, 4, 0));
    assert_eq!(
        (field(&mut redis, "spent"), field(&mut redis, "leased")),
        (2, 8)
    );
    // x renewed for only 30 ms: y's next call claws x's 4 back, and y can take them.
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(
        lease(&mut redis, y, 60_000, "sync", (10, 0, 10, gy)),
        (gy, 8, 0)
    );
    assert_eq!(field(&mut redis, "clawed"), 4);
    assert_eq!(field(&mut redis, "leases_expired"), 1);
    // x comes back having spent 1 more under its expired lease: counted, and x learns its lease was lost;
    // the pool is empty (3 spent and 8 leased to y already exceed the budget), so its new lease holds 0.
    let (gx2, held, lost) = lease(&mut redis, x, 60_000, "sync", (10, 3, 3, gx));
    assert_ne!(gx2, gx);
    assert_eq!((held, lost), (0, 1));
    assert_eq!(field(&mut redis, "spent"), 3);
    // x restarted without a journal (a new incarnation): its total counts from zero again.
    assert_eq!(
        lease(&mut redis, ("x", "2"), 60_000, "sync", (10, 1, 0, gx2)),
        (gx2, 0, 0)
    );
    assert_eq!(field(&mut redis, "spent"), 4);
    // y spends all it holds and releases; x releases: nothing is leased, and the overspend (2) is within
    // what was clawed back (4).
    assert_eq!(
        lease(&mut redis, y, 60_000, "release", (10, 8, 0, gy)),
        (0, 0, 0)
    );
    assert_eq!(
        lease(&mut redis, ("x", "2"), 60_000, "release", (10, 1, 0, gx2)),
        (0, 0, 0)
    );
    let spent = field(&mut redis, "spent");
    assert_eq!(spent, 12);
    assert_eq!(field(&mut redis, "leased"), 0);
    assert!(spent <= 10 + field(&mut redis, "clawed"));
}

#[test]
fn a_node_that_cannot_renew_its_lease_stops_spending() {
    let Some((redis_server, redis_url)) = start_redis() else {
        return;
    };
    let dir = campaigns_dir("fence");
    let node = serve(&node_flags(&dir, &redis_url, "solo"));
    let mut g = Exchange::connect(node.server.local_addr().unwrap(), 1);
    wait_for("a first bid", Duration::from_secs(5), || g.bid());
    drop(redis_server);
    let stats = node.cluster.as_ref().unwrap().stats();
    wait_for("the node to fence itself", Duration::from_secs(5), || {
        stats.fenced.load(std::sync::atomic::Ordering::Acquire) >= 1
    });
    assert!(stats.errors.load(std::sync::atomic::Ordering::Acquire) >= 1);
    // It held most of a 5 USD slice, but deals out nothing more once its loop syncs, and says why: the
    // budget source, not the campaign's budget.
    std::thread::sleep(Duration::from_millis(20));
    for _ in 0..5 {
        let header = request(g.next_auction, b"US", Device::Phone);
        g.next_auction += 1;
        assert_eq!(
            g.gateway.bid(header, candidates(CAMPAIGN.0, 1_000_000_000)),
            Decision::NoBid(Status::BudgetUnavailable),
            "a fenced node bids no more"
        );
        std::thread::sleep(Duration::from_millis(15));
    }
    stop(node);
}

#[test]
fn a_node_restarted_from_its_journal_reports_no_spend_twice() {
    let Some((_redis_server, redis_url)) = start_redis() else {
        return;
    };
    let mut redis = redis_connection(&redis_url);
    let dir = campaigns_dir("resume");
    let mut flags = node_flags(&dir, &redis_url, "j");
    flags.extend([
        "--journal-dir".to_owned(),
        dir.arg("journal"),
        "--journal-segment-mib".to_owned(),
        "1".to_owned(),
    ]);
    let (pool, leases) = keys(PREFIX, CAMPAIGN);
    let mut settled = 0;
    for life in 0..2 {
        let node = ChildServer::start(&flags);
        let mut g = Exchange::connect(node.addr, 1 + life);
        // Three 1 USD impressions won and billed in each life of the node.
        while g.acked < 3 {
            g.bid();
            g.bill_all();
            std::thread::sleep(Duration::from_millis(12));
        }
        settled += g.acked;
        // A frame after the loop's sync interval brings the last bill to the coordinator, then to Redis.
        std::thread::sleep(Duration::from_millis(15));
        g.bid();
        wait_for(
            "the node to report its spend",
            Duration::from_secs(5),
            || redis_field(&mut redis, &pool, "spent") >= settled as i64 * 1_000_000,
        );
        node.kill();
    }
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        redis_field(&mut redis, &pool, "spent"),
        settled as i64 * 1_000_000
    );
    assert_eq!(
        redis_field(&mut redis, &leases, "j:spent"),
        settled as i64 * 1_000_000
    );
}

#[test]
fn a_clean_shutdown_reports_the_last_spend_and_releases_the_lease() {
    let Some((_redis_server, redis_url)) = start_redis() else {
        return;
    };
    let mut redis = redis_connection(&redis_url);
    let dir = campaigns_dir("release");
    let node = serve(&node_flags(&dir, &redis_url, "r"));
    let mut g = Exchange::connect(node.server.local_addr().unwrap(), 1);
    wait_for("two bids", Duration::from_secs(5), || {
        g.bid();
        g.in_flight.len() == 2
    });
    // Billed in the last frame the node gets: its loop has not synced this spend when it stops.
    g.bill_all();
    stop(node);
    let (pool, leases) = keys(PREFIX, CAMPAIGN);
    assert_eq!(redis_field(&mut redis, &pool, "spent"), 2_000_000);
    assert_eq!(redis_field(&mut redis, &leases, "r:spent"), 2_000_000);
    assert_eq!(redis_field(&mut redis, &pool, "leased"), 0);
    assert_eq!(
        redis_field(&mut redis, &leases, "r:gen"),
        0,
        "the lease is gone"
    );
}

#[test]
fn cluster_and_source_flags_are_checked() {
    let parse = |args: &[&str]| Cli::try_parse_from([&["pacer", "serve"], args].concat());
    assert!(parse(&["--config", "c.toml", "--redis", "redis://127.0.0.1:1/0"]).is_err());
    assert!(parse(&[
        "--config",
        "c.toml",
        "--redis",
        "redis://x",
        "--node-id",
        "a"
    ])
    .is_ok());
    assert!(parse(&["--config", "c.toml", "--postgres", "postgres://x"]).is_err());
    assert!(parse(&["--postgres", "postgres://x"]).is_ok());
    assert!(parse(&[]).is_err(), "a source of campaigns is required");
    assert!(parse(&["--config", "c.toml", "--lease-ms", "2"]).is_err());
    assert!(parse(&["--config", "c.toml", "--lease-slice-micros", "0"]).is_err());
}
