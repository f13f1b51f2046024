//! `tern pacer serve --journal-dir` survives `kill -9`: a real server process (this test binary run again
//! as a child, serving exactly as `tern pacer serve` does) is driven over the gateway protocol on
//! 127.0.0.1, killed with SIGKILL in the middle of a run, and restarted on the same journal directory with
//! a different number of I/O loops, twice. The test keeps its own model of every acknowledged bid and notice
//! and checks the restarted server against it: billing notices for bids made before a crash are accepted
//! and counted once, duplicates change nothing, and the budget a last run can still reserve is exactly the
//! budget less the spend and the reservations the model holds.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use tern_pacer::money::{Cpm, Usd};
use tern_pacer::proto::{
    decode_reply, encode_bids, encode_notices, CampaignId, Candidate, Decision, Device, Geo,
    ImpKey, Limits, Notice, NoticeKind, NoticeStatus, Reply, RequestHeader, Status, HEADER_LEN,
};
use tern_pacer::{PacerArgs, PacerCommand};
use tern_runtime::Decode;

/// Set in a child: the `tern pacer` arguments it serves with, one per line.
const CHILD_ENV: &str = "TERN_PACER_CRASH_CHILD";
const CAMPAIGN: CampaignId = CampaignId(1);
/// 1 USD: enough for every run's bids, and some 200 more for the last run to find.
const BUDGET_MICROS: u64 = 1_000_000;
/// Every bid is at 2 USD CPM: 2,000 micro-dollars per impression.
const BID_CPM_MICROS: u64 = 2_000_000;
const PER_IMP: u64 = BID_CPM_MICROS / 1000;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    pacer: PacerArgs,
}

/// The server, when this binary runs as the child. In the parent's own run it has nothing to do.
#[test]
fn serve_child() {
    let Ok(args) = std::env::var(CHILD_ENV) else {
        return;
    };
    let cli = Cli::try_parse_from(std::iter::once("pacer").chain(args.lines())).unwrap();
    let PacerCommand::Serve(serve) = &cli.pacer.command else {
        panic!("the child only serves")
    };
    let serving = tern_pacer::start_serving(serve).unwrap();
    println!("LISTENING {}", serving.server.local_addr().unwrap());
    std::io::stdout().flush().unwrap();
    // The parent kills it long before; should the parent die first, it does not linger.
    std::thread::sleep(Duration::from_secs(60));
}

/// A server process, killed (SIGKILL) and reaped when dropped.
struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Server {
    fn start(dir: &Path, io_threads: usize) -> Server {
        let args = [
            "serve".to_string(),
            "--config".into(),
            dir.join("campaigns.toml").display().to_string(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--io-threads".into(),
            io_threads.to_string(),
            "--reservation-ttl-ms".into(),
            "600000".into(),
            "--journal-dir".into(),
            dir.join("journal").display().to_string(),
            "--journal-segment-mib".into(),
            "1".into(),
        ];
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "serve_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, args.join("\n"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            // Reads on to the end so the child never blocks on a full pipe.
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // The test harness's "test serve_child ... " may come first on the line.
                if let Some((_, addr)) = line.split_once("LISTENING ") {
                    let _ = tx.send(addr.trim().parse::<SocketAddr>().unwrap());
                }
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(addr) => addr,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the server did not start: {e}");
            }
        };
        Server { child, addr }
    }

    fn connect(&self) -> Gateway {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.set_nodelay(true).unwrap();
        Gateway { s, batch: 0 }
    }

    /// `kill -9`.
    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn key(auction_id: u64) -> ImpKey {
    ImpKey {
        auction_id,
        imp_id: 0,
    }
}

/// A gateway connection.
struct Gateway {
    s: TcpStream,
    batch: u64,
}

impl Gateway {
    fn reply(&mut self) -> std::io::Result<Reply<Usd>> {
        let mut header = [0u8; HEADER_LEN];
        self.s.read_exact(&mut header)?;
        let body_len = u32::from_le_bytes(header[4..8].try_into().unwrap()) as usize;
        let mut frame = header.to_vec();
        frame.resize(HEADER_LEN + body_len, 0);
        self.s.read_exact(&mut frame[HEADER_LEN..])?;
        match decode_reply::<Usd>(&frame, &Limits::default()) {
            Decode::Frame { request, .. } => Ok(request),
            other => panic!("bad reply: {other:?}"),
        }
    }

    /// One bid request for `auction_id`; the decision, or an error once the server is gone.
    fn try_bid(&mut self, auction_id: u64) -> std::io::Result<Decision<Usd>> {
        let header = RequestHeader::<Usd> {
            key: key(auction_id),
            floor: Cpm::ZERO,
            deadline_ms: now_ms() + 10_000,
            hour: 12,
            device: Device::Desktop,
            geo: Geo(*b"NL"),
            site_id: 1,
        };
        let candidates = [Candidate {
            campaign: CAMPAIGN,
            max_bid: Cpm::from_micros(BID_CPM_MICROS),
        }];
        let mut frame = Vec::new();
        self.batch += 1;
        encode_bids(
            &mut frame,
            self.batch,
            [(&header, &candidates[..])].into_iter(),
        );
        self.s.write_all(&frame)?;
        match self.reply()? {
            Reply::Decisions { decisions, .. } => Ok(decisions[0]),
            other => panic!("not decisions: {other:?}"),
        }
    }

    /// A bid that must be accepted: a refusal for want of budget is retried after the loop's next sync.
    fn bid(&mut self, auction_id: u64) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match self.try_bid(auction_id).unwrap() {
                Decision::Bid { campaign, price } => {
                    assert_eq!((campaign, price.micros()), (CAMPAIGN, BID_CPM_MICROS));
                    return;
                }
                Decision::NoBid(Status::BudgetExhausted) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(15));
                }
                other => panic!("auction {auction_id}: {other:?}"),
            }
        }
    }

    fn notices(
        &mut self,
        kind: NoticeKind,
        auctions: &[u64],
        cpm_micros: u64,
    ) -> Vec<NoticeStatus> {
        let notices: Vec<Notice<Usd>> = auctions
            .iter()
            .map(|&a| Notice {
                kind,
                key: key(a),
                campaign: CAMPAIGN,
                price: Cpm::from_micros(cpm_micros),
            })
            .collect();
        let mut frame = Vec::new();
        encode_notices(&mut frame, &notices);
        self.s.write_all(&frame).unwrap();
        match self.reply().unwrap() {
            Reply::Acks(statuses) => statuses,
            other => panic!("not acks: {other:?}"),
        }
    }
}

/// The test's view of the ledger: every acknowledged bid and what the notices did to it.
#[derive(Default)]
struct Model {
    /// Auction → held amount while reserved.
    reserved: HashMap<u64, u64>,
    /// Auctions settled, and the total.
    billed: HashMap<u64, u64>,
    released: Vec<u64>,
    /// Notices acknowledged as forwarded to another loop.
    forwarded: usize,
}

impl Model {
    fn bid(&mut self, auction: u64) {
        assert!(self.reserved.insert(auction, PER_IMP).is_none());
    }
    fn spent(&self) -> u64 {
        self.billed.values().sum()
    }
    fn held(&self) -> u64 {
        self.reserved.values().sum()
    }
    /// Applies a notice the server acknowledged with `status`, checking the status is the one the ledger
    /// owes (a notice forwarded to another loop is resolved there, or by the journal after a crash).
    fn notice(&mut self, kind: NoticeKind, auction: u64, cpm_micros: u64, status: NoticeStatus) {
        let price = cpm_micros.div_ceil(1000);
        let expected = match kind {
            _ if self.billed.contains_key(&auction) => NoticeStatus::Duplicate,
            NoticeKind::Billing if self.released.contains(&auction) => {
                self.billed.insert(auction, price.min(PER_IMP));
                NoticeStatus::LateBilled
            }
            NoticeKind::Billing => {
                self.reserved.remove(&auction).expect("a bid to bill");
                self.billed.insert(auction, price.min(PER_IMP));
                NoticeStatus::Applied
            }
            NoticeKind::Loss => {
                self.reserved.remove(&auction).expect("a bid to release");
                self.released.push(auction);
                NoticeStatus::Applied
            }
            NoticeKind::Win => {
                *self.reserved.get_mut(&auction).expect("a bid to win") = price.min(PER_IMP);
                NoticeStatus::Applied
            }
        };
        self.forwarded += usize::from(status == NoticeStatus::Forwarded);
        assert!(
            status == expected || status == NoticeStatus::Forwarded,
            "{kind:?} for auction {auction}: {status:?}, expected {expected:?}"
        );
    }
    fn send(&mut self, g: &mut Gateway, kind: NoticeKind, auctions: &[u64], cpm_micros: u64) {
        let statuses = g.notices(kind, auctions, cpm_micros);
        for (&auction, status) in auctions.iter().zip(statuses) {
            self.notice(kind, auction, cpm_micros, status);
        }
    }
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn nothing_acknowledged_is_lost_or_counted_twice_across_kill_9() {
    let dir =
        TempDir(std::env::temp_dir().join(format!("tern-pacer-crash-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0).unwrap();
    std::fs::write(
        dir.0.join("campaigns.toml"),
        format!(
            "currency = \"USD\"\n[[campaign]]\nid = 1\nbudget = \"{}.{:06}\"\nmax_cpm = \"5\"\n\
             start_ms = 0\nend_ms = 99999999999999\nstrategy = {{ kind = \"hard-cap\" }}\n",
            BUDGET_MICROS / 1_000_000,
            BUDGET_MICROS % 1_000_000
        ),
    )
    .unwrap();
    let mut model = Model::default();
    let (billing, loss, win) = (NoticeKind::Billing, NoticeKind::Loss, NoticeKind::Win);

    // Run 1, two loops: bids on two connections, notices on the connection that carried their bids.
    let server = Server::start(&dir.0, 2);
    let (mut a, mut b) = (server.connect(), server.connect());
    for auction in 1..=100 {
        a.bid(auction);
        model.bid(auction);
    }
    for auction in 1001..=1100 {
        b.bid(auction);
        model.bid(auction);
    }
    model.send(&mut a, billing, &(1..=40).collect::<Vec<_>>(), 1_500_000);
    model.send(
        &mut b,
        billing,
        &(1001..=1030).collect::<Vec<_>>(),
        BID_CPM_MICROS,
    );
    model.send(&mut a, loss, &(41..=50).collect::<Vec<_>>(), 0);
    model.send(&mut a, win, &(51..=60).collect::<Vec<_>>(), 1_000_000);
    model.send(&mut a, billing, &(1..=5).collect::<Vec<_>>(), 1_500_000);
    // A third gateway connection keeps bidding while the process is killed: each bid it saw acknowledged
    // is in the model; the one in flight at the kill may or may not have been reserved.
    let acked_so_far = Arc::new(AtomicUsize::new(0));
    let busy = {
        let mut c = server.connect();
        let acked_so_far = Arc::clone(&acked_so_far);
        std::thread::spawn(move || {
            let mut acked = Vec::new();
            // At most 60 bids, so the budget is not all gone if the kill comes late.
            for auction in 20_001..20_061 {
                loop {
                    match c.try_bid(auction) {
                        Ok(Decision::Bid { .. }) => break,
                        // Its loop's slice ran out: the next sync tops it up.
                        Ok(Decision::NoBid(Status::BudgetExhausted)) => {
                            std::thread::sleep(Duration::from_millis(5))
                        }
                        Ok(other) => panic!("auction {auction}: {other:?}"),
                        Err(_) => return (acked, Some(auction)),
                    }
                }
                acked.push(auction);
                acked_so_far.store(acked.len(), Ordering::Release);
            }
            (acked, None)
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while acked_so_far.load(Ordering::Acquire) < 20 && !busy.is_finished() {
        assert!(Instant::now() < deadline, "the busy connection is stuck");
        std::thread::yield_now();
    }
    server.kill();
    let (acked, in_flight) = busy.join().unwrap();
    assert!(!acked.is_empty(), "the busy connection bid before the kill");
    for &auction in &acked {
        model.bid(auction);
    }
    drop((a, b));

    // Run 2, three loops: notices about run 1's bids, on whichever loop this connection landed on.
    let server = Server::start(&dir.0, 3);
    let mut a = server.connect();
    model.send(
        &mut a,
        billing,
        &(61..=70).collect::<Vec<_>>(),
        BID_CPM_MICROS,
    );
    model.send(&mut a, billing, &(51..=55).collect::<Vec<_>>(), 1_000_000);
    model.send(&mut a, billing, &(1..=10).collect::<Vec<_>>(), 1_500_000);
    model.send(
        &mut a,
        billing,
        &(1001..=1005).collect::<Vec<_>>(),
        BID_CPM_MICROS,
    );
    model.send(
        &mut a,
        billing,
        &(41..=45).collect::<Vec<_>>(),
        BID_CPM_MICROS,
    );
    model.send(&mut a, loss, &(1031..=1040).collect::<Vec<_>>(), 0);
    model.send(&mut a, billing, &acked[..5], BID_CPM_MICROS);
    for auction in 5001..=5020 {
        a.bid(auction);
        model.bid(auction);
    }
    model.send(
        &mut a,
        billing,
        &(5001..=5010).collect::<Vec<_>>(),
        BID_CPM_MICROS,
    );
    // Recovery spread run 1's reservations over the three loops: most of these notices went to a loop
    // that did not hold them, and were forwarded (and journaled) before the kill.
    assert!(model.forwarded > 0);
    server.kill();

    // Run 3, one loop: every answer is final, and the budget left is exactly what the model says.
    let server = Server::start(&dir.0, 1);
    let mut a = server.connect();
    let statuses = a.notices(billing, &(61..=70).collect::<Vec<_>>(), BID_CPM_MICROS);
    assert!(
        statuses.iter().all(|s| *s == NoticeStatus::Duplicate),
        "{statuses:?}"
    );
    let statuses = a.notices(loss, &(1031..=1035).collect::<Vec<_>>(), 0);
    assert!(
        statuses.iter().all(|s| *s == NoticeStatus::Duplicate),
        "{statuses:?}"
    );
    model.send(
        &mut a,
        billing,
        &(71..=75).collect::<Vec<_>>(),
        BID_CPM_MICROS,
    );
    model.send(&mut a, billing, &(1..=40).collect::<Vec<_>>(), 1_500_000);
    model.send(
        &mut a,
        billing,
        &(5001..=5012).collect::<Vec<_>>(),
        BID_CPM_MICROS,
    );
    // Run 2's forwarded notices were applied by recovery if no loop did: nothing here is forwarded.
    let left = BUDGET_MICROS - model.spent() - model.held();
    // Bid until the budget is gone: the refusals end only when nothing is left unallocated.
    let mut granted = 0u64;
    let mut refusals = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut auction = 40_000;
    while refusals < 4 {
        assert!(Instant::now() < deadline, "still bidding after {granted}");
        auction += 1;
        match a.try_bid(auction).unwrap() {
            Decision::Bid { .. } => {
                granted += 1;
                refusals = 0;
            }
            Decision::NoBid(Status::BudgetExhausted) => {
                refusals += 1;
                std::thread::sleep(Duration::from_millis(15));
            }
            other => panic!("{other:?}"),
        }
    }
    // The bid in flight at the kill may have been reserved (its record was written before the reply).
    let expected = left / PER_IMP;
    let tolerance = u64::from(in_flight.is_some());
    assert!(
        granted <= expected && granted + tolerance >= expected,
        "granted {granted}, expected {expected} (-{tolerance}): spent {} held {}",
        model.spent(),
        model.held()
    );
    // reserved + spent <= budget, with what the last run added.
    assert!(model.spent() + model.held() + granted * PER_IMP <= BUDGET_MICROS);
    server.kill();
}
