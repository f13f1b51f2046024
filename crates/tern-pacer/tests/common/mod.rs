//! What the pacer's integration tests share: `tern pacer serve` started in this process (with its admin
//! endpoint) or in a child process that a test can SIGKILL, a gateway-protocol client, an HTTP/1.1 client
//! for the OpenRTB front and the admin endpoint, the peers' CI rule, and the guards that stop and remove
//! whatever a test started (servers, child processes, temporary directories), also when it fails.

// Each test binary uses part of it.
#![allow(dead_code, unused_imports)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use serde_json::Value;
use tern_pacer::money::{Cpm, Usd};
use tern_pacer::proto::{
    decode_reply, encode_bids, encode_notices, CampaignId, Candidate, Decision, Device, Geo,
    ImpKey, Limits, Notice, NoticeKind, NoticeStatus, Reply, RequestHeader, Status, HEADER_LEN,
};
use tern_pacer::{PacerArgs, PacerCommand, ServeArgs, Serving};
use tern_runtime::Decode;
pub use tern_testkit::{free_port, ChildGuard};

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

pub fn localhost(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Waits until something accepts connections on `addr`, for up to 20 s.
pub fn wait_listening(addr: SocketAddr, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "{what} did not listen on {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `done()`, checking every 10 ms, for up to `limit`.
pub fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A TCP connection to the pacer with a 5 s read timeout and no Nagle delay.
pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Whether `program` is installed (see [`tern_testkit::have`]); `package` is what installs it.
pub fn peer_installed(program: &str, package: &str) -> bool {
    let found = tern_testkit::have(program);
    if !found {
        eprintln!("(install {package}, see scripts/install-test-deps.sh)");
    }
    found
}

/// A fresh temporary directory, removed on drop (also when a test fails).
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// `tern-pacer-{name}-{pid}-{n}` in the system's temporary directory: unique per test process and call.
    pub fn new(name: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tern-pacer-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    /// A directory holding `campaigns.toml` with `text`.
    pub fn with_campaigns(name: &str, text: &str) -> TempDir {
        let dir = TempDir::new(name);
        std::fs::write(dir.campaigns(), text).unwrap();
        dir
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// `DIR/name`, as a string for a flag.
    pub fn arg(&self, name: &str) -> String {
        self.0.join(name).to_str().unwrap().to_owned()
    }

    pub fn campaigns(&self) -> PathBuf {
        self.0.join("campaigns.toml")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if !self.0.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A campaigns file in USD with one hard-cap campaign over an open flight, without targeting.
pub fn one_campaign(id: u32, budget: &str, max_cpm: &str) -> String {
    format!(
        "currency = \"USD\"\n\n{}",
        campaign_entry(id, budget, max_cpm)
    )
}

/// A `[[campaign]]` entry of a campaigns file, as in [`one_campaign`], with one 300x250 banner creative
/// (`banner-{id}`, advertising `advertiser{id}.example`).
pub fn campaign_entry(id: u32, budget: &str, max_cpm: &str) -> String {
    format!(
        "[[campaign]]\nid = {id}\nbudget = \"{budget}\"\nmax_cpm = \"{max_cpm}\"\nstart_ms = 0\n\
         end_ms = 99999999999999\nstrategy = {{ kind = \"hard-cap\" }}\n\n[[campaign.creative]]\n\
         id = \"banner-{id}\"\nformat = \"banner\"\nsizes = [[300, 250]]\n\
         adomain = [\"advertiser{id}.example\"]\n\
         adm = \"<a href='https://advertiser{id}.example/'><img src='banner.png'></a>\"\n"
    )
}

/// `tern pacer`'s flags, as the `tern` binary parses them.
#[derive(Parser)]
pub struct Cli {
    #[command(flatten)]
    pub pacer: PacerArgs,
}

/// `tern pacer serve FLAGS...`, parsed.
pub fn serve_args<S: AsRef<str>>(flags: &[S]) -> ServeArgs {
    let args = ["pacer", "serve"]
        .into_iter()
        .chain(flags.iter().map(AsRef::as_ref));
    let cli = Cli::try_parse_from(args).unwrap();
    let PacerCommand::Serve(args) = cli.pacer.command else {
        panic!("serve")
    };
    args
}

/// Starts `tern pacer serve FLAGS...` in this process.
pub fn serve<S: AsRef<str>>(flags: &[S]) -> Serving {
    tern_pacer::start_serving(&serve_args(flags)).unwrap()
}

/// Stops what `serve` started, as `tern pacer serve` does on SIGTERM: the server (its loops sync a last
/// time), then the source watcher, the budget leases and the admin endpoint. Once it returns the service is
/// dropped, and with it the crash journal and its directory lock.
pub fn stop(serving: Serving) {
    let Serving {
        server,
        tls_watcher,
        watcher,
        admin,
        cluster,
        spend_gauges: _,
    } = serving;
    server.shutdown();
    server.join();
    drop(tls_watcher);
    drop(watcher);
    drop(cluster);
    if let Some(admin) = admin {
        // Also called from `Drop` while a failed test unwinds: nothing here may panic.
        let _ = admin.shutdown();
    }
}

/// Set in a child process: its `serve` flags, one per line.
const CHILD_ENV: &str = "TERN_PACER_TEST_CHILD";

/// The body of each test binary's `serve_child` test, which is what runs in a child process: serves with
/// the flags the parent passed, prints `LISTENING <addr>`, and lives until killed (a minute at most, should
/// the parent die first). In the parent's own test run it returns at once.
pub fn serve_child() {
    let Ok(flags) = std::env::var(CHILD_ENV) else {
        return;
    };
    let flags: Vec<&str> = flags.lines().collect();
    let serving = serve(&flags);
    println!("LISTENING {}", serving.server.local_addr().unwrap());
    std::io::stdout().flush().unwrap();
    std::thread::sleep(Duration::from_secs(60));
}

/// `tern pacer serve` in a child process (this test binary again, running its `serve_child` test), SIGKILLed
/// and reaped when dropped.
pub struct ChildServer {
    child: ChildGuard,
    pub addr: SocketAddr,
}

impl ChildServer {
    pub fn start<S: AsRef<str>>(flags: &[S]) -> ChildServer {
        let flags: Vec<&str> = flags.iter().map(AsRef::as_ref).collect();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "serve_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, flags.join("\n"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the server process starts");
        let stdout = child.stdout.take().unwrap();
        let child = ChildGuard(child);
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
        let addr = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("the server process did not start: {e}"));
        ChildServer { child, addr }
    }

    /// `kill -9`, and waits for it to be gone.
    pub fn kill(self) {
        drop(self.child);
    }
}

/// A gateway request for `auction_id` (impression 0) with no floor, a deadline a minute away, at noon on
/// site 1.
pub fn request(auction_id: u64, geo: &[u8; 2], device: Device) -> RequestHeader<Usd> {
    RequestHeader {
        key: ImpKey {
            auction_id,
            imp_id: 0,
        },
        floor: Cpm::ZERO,
        deadline_ms: now_ms() + 60_000,
        hour: 12,
        device,
        geo: Geo(*geo),
        site_id: 1,
    }
}

/// Campaign `campaign` as the one candidate, bidding up to `cpm_micros`.
pub fn candidates(campaign: u32, cpm_micros: u64) -> Vec<Candidate<Usd>> {
    vec![Candidate {
        campaign: CampaignId(campaign),
        max_bid: Cpm::from_micros(cpm_micros),
    }]
}

/// A notice about impression 0 of `auction_id`.
pub fn notice(kind: NoticeKind, auction_id: u64, campaign: u32, cpm_micros: u64) -> Notice<Usd> {
    Notice {
        kind,
        key: ImpKey {
            auction_id,
            imp_id: 0,
        },
        campaign: CampaignId(campaign),
        price: Cpm::from_micros(cpm_micros),
    }
}

/// A BIDS frame.
pub fn bids_frame(
    batch_id: u64,
    requests: &[(RequestHeader<Usd>, Vec<Candidate<Usd>>)],
) -> Vec<u8> {
    let mut frame = Vec::new();
    encode_bids(
        &mut frame,
        batch_id,
        requests.iter().map(|(h, c)| (h, c.as_slice())),
    );
    frame
}

/// Reads one reply frame.
pub fn read_reply(s: &mut TcpStream) -> std::io::Result<Reply<Usd>> {
    let mut frame = vec![0u8; HEADER_LEN];
    s.read_exact(&mut frame)?;
    let body_len = u32::from_le_bytes(frame[4..8].try_into().unwrap()) as usize;
    frame.resize(HEADER_LEN + body_len, 0);
    s.read_exact(&mut frame[HEADER_LEN..])?;
    match decode_reply::<Usd>(&frame, &Limits::default()) {
        Decode::Frame { request, .. } => Ok(request),
        other => panic!("bad reply: {other:?}"),
    }
}

/// The exchange's side of the gateway protocol on one connection.
pub struct Gateway {
    pub stream: TcpStream,
    next_batch: u64,
}

impl Gateway {
    pub fn connect(addr: SocketAddr) -> Gateway {
        Gateway {
            stream: connect(addr),
            next_batch: 0,
        }
    }

    /// One BIDS frame; the decisions, or an error once the server is gone.
    pub fn try_bids(
        &mut self,
        requests: &[(RequestHeader<Usd>, Vec<Candidate<Usd>>)],
    ) -> std::io::Result<Vec<Decision<Usd>>> {
        self.next_batch += 1;
        self.stream
            .write_all(&bids_frame(self.next_batch, requests))?;
        match read_reply(&mut self.stream)? {
            Reply::Decisions { decisions, .. } => Ok(decisions),
            other => panic!("not decisions: {other:?}"),
        }
    }

    /// One request, one candidate: the decision, or an error once the server is gone.
    pub fn try_bid(
        &mut self,
        header: RequestHeader<Usd>,
        candidates: Vec<Candidate<Usd>>,
    ) -> std::io::Result<Decision<Usd>> {
        Ok(self.try_bids(&[(header, candidates)])?[0])
    }

    pub fn bid(
        &mut self,
        header: RequestHeader<Usd>,
        candidates: Vec<Candidate<Usd>>,
    ) -> Decision<Usd> {
        self.try_bid(header, candidates).unwrap()
    }

    /// One NOTICES frame; the acknowledgements.
    pub fn notices(&mut self, notices: &[Notice<Usd>]) -> Vec<NoticeStatus> {
        let mut frame = Vec::new();
        encode_notices(&mut frame, notices);
        self.stream.write_all(&frame).unwrap();
        match read_reply(&mut self.stream).unwrap() {
            Reply::Acks(statuses) => statuses,
            other => panic!("not acks: {other:?}"),
        }
    }
}

/// Bids with `ask` until the budget is gone: until `refusals` refusals for want of budget in a row, 15 ms
/// apart (a loop syncs its slice with the coordinator every 10 ms: refused a few syncs running, the whole
/// budget is spent, not just the slice). How many bids went through; fails after 20 s.
pub fn drain(refusals: u32, mut ask: impl FnMut() -> Decision<Usd>) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut bids, mut refused) = (0, 0);
    while refused < refusals {
        assert!(Instant::now() < deadline, "still bidding after {bids} bids");
        match ask() {
            Decision::Bid { .. } => {
                bids += 1;
                refused = 0;
            }
            Decision::NoBid(Status::BudgetExhausted) => {
                refused += 1;
                std::thread::sleep(Duration::from_millis(15));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    bids
}

/// An HTTP/1.1 response.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }
}

/// Reads HTTP/1.1 responses off a connection, one after another (an interim `100 Continue` is a response
/// of its own, without a body).
#[derive(Default)]
pub struct Reader {
    pub buf: Vec<u8>,
}

impl Reader {
    /// The response at the front of the buffer, if it is all there.
    pub fn parse(&mut self) -> Option<HttpResponse> {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut parsed = httparse::Response::new(&mut headers);
        let head = match parsed.parse(&self.buf).expect("a valid response") {
            httparse::Status::Complete(head) => head,
            httparse::Status::Partial => return None,
        };
        let status = parsed.code.unwrap();
        let headers: Vec<(String, String)> = parsed
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_owned(),
                    String::from_utf8(h.value.to_vec()).unwrap(),
                )
            })
            .collect();
        let length = headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            .map_or(0, |(_, v)| v.parse::<usize>().unwrap());
        if self.buf.len() < head + length {
            return None;
        }
        let body = self.buf[head..head + length].to_vec();
        self.buf.drain(..head + length);
        Some(HttpResponse {
            status,
            headers,
            body,
        })
    }

    pub fn next(&mut self, s: &mut TcpStream) -> HttpResponse {
        loop {
            if let Some(response) = self.parse() {
                return response;
            }
            let mut chunk = [0u8; 4096];
            let n = s.read(&mut chunk).expect("a response");
            assert!(n > 0, "connection closed before a whole response");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// Sends `request` and reads its response.
pub fn exchange(s: &mut TcpStream, request: &str) -> HttpResponse {
    s.write_all(request.as_bytes()).unwrap();
    Reader::default().next(s)
}

pub fn get(target: &str) -> String {
    format!("GET {target} HTTP/1.1\r\nHost: pacer.test\r\n\r\n")
}

/// The target of a notice URL as the pacer writes it (`path` is `win`, `billing` or `loss`), with the check
/// value of its ids and, for win and billing, the price the exchange fills in.
pub fn notice_url(
    path: &str,
    auction: &str,
    imp: &str,
    campaign: u32,
    price: Option<&str>,
) -> String {
    let chk = tern_pacer::openrtb::notice_check(auction, imp, campaign);
    let target = format!(
        "/{path}?auction={}&imp={}&campaign={campaign}&chk={chk}",
        tern_http::encode_query_value(auction),
        tern_http::encode_query_value(imp)
    );
    match price {
        Some(price) => format!("{target}&price={price}"),
        None => target,
    }
}

pub fn post_auction(body: &str) -> String {
    format!(
        "POST /openrtb2/auction HTTP/1.1\r\nHost: pacer.test\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// An OpenRTB BidRequest: one impression over `floor` USD, on site 77, from a phone in `country`
/// (alpha-3), second price.
pub fn bid_request(id: &str, country: &str, floor: f64) -> String {
    serde_json::json!({
        "id": id,
        "at": 2,
        "cur": ["USD"],
        "tmax": 120,
        "imp": [{"id": "1", "bidfloor": floor, "bidfloorcur": "USD", "banner": {"w": 300, "h": 250}}],
        "site": {"id": "77"},
        "device": {"devicetype": 4, "geo": {"country": country, "utcoffset": 60}},
    })
    .to_string()
}

/// Whether the peer closed the connection (after everything already read).
pub fn closed(s: &mut TcpStream) -> bool {
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).is_ok() && rest.is_empty()
}

/// `GET path` on an admin endpoint, on a connection of its own.
pub fn admin_get(addr: SocketAddr, path: &str) -> HttpResponse {
    let mut s = connect(addr);
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reader = Reader::default();
    s.read_to_end(&mut reader.buf).unwrap();
    reader.parse().expect("a whole admin response")
}

/// Waits out the pacer's sync interval (10 ms): a loop publishes its figures to the admin view when it
/// syncs, so a request after this publishes with its own effect.
pub fn settle() {
    std::thread::sleep(Duration::from_millis(20));
}

/// `tern pacer serve` in this process on a campaigns file of its own, with its admin endpoint; stopped,
/// and its directory removed, on drop.
pub struct Pacer {
    serving: Option<Serving>,
    pub dir: TempDir,
}

impl Pacer {
    /// Serves `campaigns` with `io_threads` loops and more `serve` flags.
    pub fn start(campaigns: &str, io_threads: usize, flags: &[&str]) -> Pacer {
        let dir = TempDir::with_campaigns("pacer", campaigns);
        Pacer::start_in(dir, io_threads, flags)
    }

    /// Serves the campaigns file in `dir` (and so can restart on a journal there).
    pub fn start_in(dir: TempDir, io_threads: usize, flags: &[&str]) -> Pacer {
        let config = dir.campaigns();
        let threads = io_threads.to_string();
        let mut all = vec![
            "--config",
            config.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--io-threads",
            &threads,
            "--admin",
            "0",
        ];
        all.extend_from_slice(flags);
        let pacer = Pacer {
            serving: Some(serve(&all)),
            dir,
        };
        // One request first (answered only once its loop is up), then a wait, so the tests' first request
        // comes after a sync interval and publishes with its own effect (see `settle`). Over TLS the test
        // makes its own first request.
        if !flags.contains(&"--tls-cert") {
            assert_eq!(exchange(&mut pacer.connect(), &get("/nowhere")).status, 404);
        }
        settle();
        pacer
    }

    pub fn serving(&self) -> &Serving {
        self.serving.as_ref().unwrap()
    }

    pub fn addr(&self) -> SocketAddr {
        self.serving().server.local_addr().unwrap()
    }

    pub fn connect(&self) -> TcpStream {
        connect(self.addr())
    }

    pub fn admin_addr(&self) -> SocketAddr {
        self.serving().admin.as_ref().unwrap().local_addr()
    }

    /// `GET path` on the admin endpoint.
    pub fn admin_get(&self, path: &str) -> HttpResponse {
        admin_get(self.admin_addr(), path)
    }

    /// `GET path` on the admin endpoint, as JSON (which it must be, with a 200).
    pub fn admin(&self, path: &str) -> Value {
        let response = self.admin_get(path);
        assert_eq!(response.status, 200, "{path}");
        response.json()
    }

    /// Campaign `id` in `/campaigns`, checking on the way that the figures add up and that
    /// `/campaigns/{id}` says the same.
    pub fn campaign(&self, id: u32) -> Value {
        let all = self.admin("/campaigns");
        let campaigns = all["campaigns"].as_array().unwrap();
        for c in campaigns {
            let n = |k: &str| c[k].as_u64().unwrap();
            assert_eq!(
                n("budget_micros"),
                n("granted_micros") + n("unallocated_micros"),
                "{c}"
            );
            let loops = c["loops"].as_array().unwrap();
            for key in ["granted_micros", "reserved_micros", "spent_micros"] {
                let per_loop: u64 = loops.iter().map(|l| l[key].as_u64().unwrap()).sum();
                assert_eq!(per_loop, n(key), "{key} of {c}");
            }
        }
        let total: u64 = campaigns
            .iter()
            .map(|c| c["spent_micros"].as_u64().unwrap())
            .sum();
        assert_eq!(all["totals"]["spent_micros"].as_u64().unwrap(), total);
        let one = campaigns
            .iter()
            .find(|c| c["id"] == id)
            .unwrap_or_else(|| panic!("campaign {id} in {all}"))
            .clone();
        assert_eq!(self.admin(&format!("/campaigns/{id}")), one);
        one
    }

    /// Stops the pacer and hands back its directory (with its journal, if it kept one).
    pub fn stop(mut self) -> TempDir {
        stop(self.serving.take().unwrap());
        std::mem::replace(&mut self.dir, TempDir(PathBuf::new()))
    }
}

impl Drop for Pacer {
    fn drop(&mut self) {
        if let Some(serving) = self.serving.take() {
            stop(serving);
        }
    }
}
