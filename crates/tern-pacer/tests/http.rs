//! The OpenRTB 2.6 / HTTP/1.1 front of a real `tern pacer serve` (started in-process by `start_serving`, with
//! its admin endpoint), over real sockets on 127.0.0.1: bids, notices settling spend in the admin JSON,
//! pipelining, errors that keep or close the connection, the gateway protocol on the same port, and `curl`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use serde_json::{json, Value};
use tern_pacer::money::{Cpm, Usd};
use tern_pacer::proto::{
    decode_reply, encode_bids, CampaignId, Candidate, Decision, Device, Geo, ImpKey, Limits, Reply,
    RequestHeader, HEADER_LEN,
};
use tern_pacer::{PacerArgs, Serving};
use tern_runtime::Decode;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    pacer: PacerArgs,
}

/// Campaign 1 wants the US at up to 2.5 USD CPM; campaign 2 wants German phones at up to 1 USD CPM, on
/// site 77 only.
const CAMPAIGNS: &str = r#"currency = "USD"

[[campaign]]
id = 1
budget = "100"
max_cpm = "2.5"
start_ms = 0
end_ms = 99999999999999
strategy = { kind = "hard-cap" }
targeting = { geos = ["US"] }

[[campaign]]
id = 2
budget = "50"
max_cpm = "1"
start_ms = 0
end_ms = 99999999999999
strategy = { kind = "throttle", initial_rate_ppm = 1000000 }
targeting = { geos = ["DE"], devices = ["phone"], sites = [77] }
"#;

struct Pacer {
    serving: Serving,
    config: PathBuf,
}

impl Pacer {
    fn start(io_threads: usize) -> Pacer {
        Pacer::start_with(io_threads, &[])
    }

    /// A pacer with more `serve` flags.
    fn start_with(io_threads: usize, flags: &[&str]) -> Pacer {
        let config = std::env::temp_dir().join(format!(
            "tern-pacer-http-{}-{}.toml",
            std::process::id(),
            std::thread::current()
                .name()
                .unwrap_or("t")
                .replace("::", "-")
        ));
        std::fs::write(&config, CAMPAIGNS).unwrap();
        let threads = io_threads.to_string();
        let cli = Cli::try_parse_from(
            [
                "pacer",
                "serve",
                "--config",
                config.to_str().unwrap(),
                "--listen",
                "127.0.0.1:0",
                "--io-threads",
                &threads,
                "--admin",
                "0",
            ]
            .iter()
            .chain(flags),
        )
        .unwrap();
        let tern_pacer::PacerCommand::Serve(args) = &cli.pacer.command else {
            panic!("serve")
        };
        let pacer = Pacer {
            serving: tern_pacer::start_serving(args).unwrap(),
            config,
        };
        // A loop publishes its figures to the admin view when it syncs, every 10 ms while it has requests:
        // a request more than that after the loop's previous one publishes with its own effect. One request
        // first (answered only once its loop is up), then a wait, so the tests' first request is such.
        assert_eq!(exchange(&mut pacer.connect(), &get("/nowhere")).status, 404);
        settle();
        pacer
    }

    fn addr(&self) -> SocketAddr {
        self.serving.server.local_addr().unwrap()
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.set_nodelay(true).unwrap();
        s
    }

    /// `GET path` on the admin endpoint, as JSON.
    fn admin(&self, path: &str) -> Value {
        let addr = self.serving.admin.as_ref().unwrap().local_addr();
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut bytes = Vec::new();
        s.read_to_end(&mut bytes).unwrap();
        let mut reader = Reader { buf: bytes };
        let response = reader.parse().expect("a whole admin response");
        assert_eq!(response.status, 200, "{path}");
        serde_json::from_slice(&response.body).unwrap()
    }

    /// Campaign `id` in `/campaigns`, checking on the way that the figures add up.
    fn campaign(&self, id: u32) -> Value {
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
}

impl Drop for Pacer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.config);
    }
}

#[derive(Debug)]
struct HttpResponse {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl HttpResponse {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }
}

/// Reads HTTP/1.1 responses off a connection, one after another.
#[derive(Default)]
struct Reader {
    buf: Vec<u8>,
}

impl Reader {
    /// The response at the front of the buffer, if it is all there.
    fn parse(&mut self) -> Option<HttpResponse> {
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

    fn next(&mut self, s: &mut TcpStream) -> HttpResponse {
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

/// Waits out the pacer's sync interval (see `Pacer::start`).
fn settle() {
    std::thread::sleep(Duration::from_millis(20));
}

/// Whether the peer closed the connection (after everything already read).
fn closed(s: &mut TcpStream) -> bool {
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).is_ok() && rest.is_empty()
}

fn post_auction(body: &str) -> String {
    format!(
        "POST /openrtb2/auction HTTP/1.1\r\nHost: pacer.test\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

fn get(target: &str) -> String {
    format!("GET {target} HTTP/1.1\r\nHost: pacer.test\r\n\r\n")
}

fn exchange(s: &mut TcpStream, request: &str) -> HttpResponse {
    s.write_all(request.as_bytes()).unwrap();
    Reader::default().next(s)
}

fn bid_request(id: &str, country: &str, floor: f64) -> String {
    json!({
        "id": id,
        "at": 2,
        "cur": ["USD"],
        "tmax": 120,
        "imp": [{"id": "1", "bidfloor": floor, "bidfloorcur": "USD"}],
        "site": {"id": "77"},
        "device": {"devicetype": 4, "geo": {"country": country, "utcoffset": 60}},
    })
    .to_string()
}

/// The notice URL's target (path and query), with the exchange's price macro filled in.
fn notice_target(url: &str, price: &str) -> String {
    let target = url
        .strip_prefix("http://pacer.test")
        .unwrap_or_else(|| panic!("{url} points elsewhere"));
    target.replace("${AUCTION_PRICE}", price)
}

#[test]
fn a_bid_then_win_and_billing_settle_spend_once() {
    let pacer = Pacer::start(1);
    let mut s = pacer.connect();
    let response = exchange(
        &mut s,
        &post_auction(&bid_request("auction-a/1", "USA", 1.2)),
    );
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-type"), Some("application/json"));
    let body = response.json();
    assert_eq!(body["id"], "auction-a/1");
    assert_eq!(body["cur"], "USD");
    let bid = &body["seatbid"][0]["bid"][0];
    assert_eq!(bid["impid"], "1");
    assert_eq!(bid["cid"], "1");
    assert_eq!(bid["crid"], "1");
    // Second price: the campaign's maximum, written exactly.
    assert_eq!(bid["price"].to_string(), "2.5");
    let nurl = bid["nurl"].as_str().unwrap();
    let burl = bid["burl"].as_str().unwrap();
    let lurl = bid["lurl"].as_str().unwrap();
    let query = "?auction=auction-a%2F1&imp=1&campaign=1";
    assert_eq!(
        nurl,
        format!("http://pacer.test/win{query}&price=${{AUCTION_PRICE}}")
    );
    assert_eq!(
        burl,
        format!("http://pacer.test/billing{query}&price=${{AUCTION_PRICE}}")
    );
    assert_eq!(lurl, format!("http://pacer.test/loss{query}"));

    // 2.5 CPM reserved: 2500 micros for the one impression.
    let reserved = pacer.campaign(1);
    assert_eq!(reserved["reserved_micros"], 2500);
    assert_eq!(reserved["spent_micros"], 0);

    // The exchange fills in the clearing price (second price, below the bid).
    let win = exchange(&mut s, &get(&notice_target(nurl, "1.7")));
    assert_eq!(
        (win.status, win.json()),
        (200, json!({"status": "Applied"}))
    );
    // A fresh connection, as an exchange's notice would come; one loop holds the reservation.
    let mut other = pacer.connect();
    let billing = exchange(&mut other, &get(&notice_target(burl, "1.7")));
    assert_eq!(billing.json(), json!({"status": "Applied"}));
    // Publication to the admin view happens with a sync (every 10 ms on a busy loop).
    settle();
    let again = exchange(&mut other, &get(&notice_target(burl, "1.7")));
    assert_eq!(again.json(), json!({"status": "Duplicate"}));
    let late_loss = exchange(&mut other, &get(&notice_target(lurl, "")));
    assert_eq!(late_loss.json(), json!({"status": "Duplicate"}));

    let settled = pacer.campaign(1);
    assert_eq!(settled["spent_micros"], 1700, "{settled}");
    assert_eq!(settled["reserved_micros"], 0);
    assert_eq!(settled["budget_micros"], 100_000_000);
    assert_eq!(settled["configured"], true);
    assert!(settled["plan_micros"].as_u64().is_some());
    assert_eq!(
        settled["rate_ppm"],
        Value::Null,
        "hard cap has no controller"
    );
    let throttled = pacer.campaign(2);
    assert!(throttled["rate_ppm"].as_u64().is_some(), "{throttled}");
    assert_eq!(pacer.admin("/campaigns")["currency"], "USD");

    // The same auction again is a duplicate impression: no second reservation.
    let retry = exchange(
        &mut s,
        &post_auction(&bid_request("auction-a/1", "USA", 1.2)),
    );
    assert_eq!(retry.status, 204);
    assert_eq!(retry.header("x-tern-no-bid"), Some("DuplicateImpression"));
}

#[test]
fn a_loss_releases_the_reservation() {
    let pacer = Pacer::start(1);
    let mut s = pacer.connect();
    let body = exchange(&mut s, &post_auction(&bid_request("lost", "USA", 0.5))).json();
    let lurl = body["seatbid"][0]["bid"][0]["lurl"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(pacer.campaign(1)["reserved_micros"], 2500);
    settle();
    let loss = exchange(&mut s, &get(&notice_target(&lurl, "")));
    assert_eq!(loss.json(), json!({"status": "Applied"}));
    let after = pacer.campaign(1);
    assert_eq!(after["reserved_micros"], 0, "{after}");
    assert_eq!(after["spent_micros"], 0);
}

#[test]
fn no_matching_campaign_or_floor_is_204_with_the_reason() {
    let pacer = Pacer::start(1);
    let mut s = pacer.connect();
    let france = exchange(&mut s, &post_auction(&bid_request("fr", "FRA", 0.1)));
    assert_eq!(france.status, 204);
    assert!(france.body.is_empty());
    assert_eq!(france.header("x-tern-no-bid"), Some("NoCandidates"));
    let floor = exchange(&mut s, &post_auction(&bid_request("high", "USA", 3.0)));
    assert_eq!(floor.header("x-tern-no-bid"), Some("BelowFloor"));
    // German phones on site 77: campaign 2, at its own maximum.
    let germany = exchange(&mut s, &post_auction(&bid_request("de", "DEU", 0.1)));
    assert_eq!(germany.status, 200);
    let bid = &germany.json()["seatbid"][0]["bid"][0];
    assert_eq!(
        (bid["cid"].as_str(), bid["price"].to_string()),
        (Some("2"), "1".into())
    );
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let pacer = Pacer::start(1);
    let mut s = pacer.connect();
    let mut burst = String::new();
    burst += &post_auction(&bid_request("p1", "USA", 0.1));
    burst += &get("/nowhere");
    burst += &post_auction(&bid_request("p2", "FRA", 0.1));
    burst += &get("/billing?auction=never&imp=1&campaign=1&price=1");
    burst += "PUT /openrtb2/auction HTTP/1.1\r\nContent-Length: 0\r\n\r\n";
    s.write_all(burst.as_bytes()).unwrap();
    let mut reader = Reader::default();
    let statuses: Vec<u16> = (0..5).map(|_| reader.next(&mut s).status).collect();
    assert_eq!(statuses, [200, 404, 204, 200, 405]);
    // The connection is still open and in step.
    let after = exchange(&mut s, &post_auction(&bid_request("p3", "USA", 0.1)));
    assert_eq!(after.json()["id"], "p3");
}

#[test]
fn bad_requests_get_400_and_the_connection_goes_on() {
    let pacer = Pacer::start(1);
    let mut s = pacer.connect();
    for (body, reason) in [
        ("{not json", "not a BidRequest"),
        (r#"{"imp": []}"#, "missing field `id`"),
        (
            r#"{"id": "x", "imp": [{"id": "1", "bidfloor": -1}]}"#,
            "non-negative",
        ),
        (r#"{"id": "x", "at": 3, "imp": []}"#, "at=3"),
        (r#"{"id": "x", "cur": ["EUR"], "imp": []}"#, "EUR"),
        (
            r#"{"id": "x", "imp": [{"id": "1", "bidfloor": 1, "bidfloorcur": "GBP"}]}"#,
            "GBP",
        ),
    ] {
        let response = exchange(&mut s, &post_auction(body));
        assert_eq!(response.status, 400, "{body}");
        let text = String::from_utf8(response.body).unwrap();
        assert!(text.contains(reason), "{body}: {text}");
    }
    for target in [
        "/win?auction=a&imp=1&campaign=1",
        "/win?auction=a&imp=1&campaign=x&price=1",
        "/billing?auction=a&imp=1&campaign=1&price=${AUCTION_PRICE}",
    ] {
        assert_eq!(exchange(&mut s, &get(target)).status, 400, "{target}");
    }
    let ok = exchange(&mut s, &post_auction(&bid_request("after", "USA", 0.1)));
    assert_eq!(ok.status, 200);
}

#[test]
fn framing_errors_get_their_status_and_close() {
    let pacer = Pacer::start(1);
    let huge = format!(
        "GET /win HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(10_000)
    );
    let chunked = "POST /openrtb2/auction HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        .to_string();
    let too_long_body =
        "POST /openrtb2/auction HTTP/1.1\r\nContent-Length: 100000\r\n\r\n".to_string();
    for (request, status) in [(huge, 431), (chunked, 411), (too_long_body, 413)] {
        let mut s = pacer.connect();
        let response = exchange(&mut s, &request);
        assert_eq!(response.status, status);
        assert_eq!(response.header("connection"), Some("close"));
        assert!(closed(&mut s), "{status} closes the connection");
    }
    // HTTP/1.0 closes after its reply unless it asks to keep the connection.
    let mut s = pacer.connect();
    let response = exchange(&mut s, "GET /nowhere HTTP/1.0\r\n\r\n");
    assert_eq!(response.status, 404);
    assert!(closed(&mut s));
    let mut s = pacer.connect();
    let response = exchange(
        &mut s,
        "GET /nowhere HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    );
    assert_eq!(response.header("connection"), Some("keep-alive"));
    assert_eq!(exchange(&mut s, &get("/nowhere")).status, 404);
    // `Connection: close` on HTTP/1.1.
    let mut s = pacer.connect();
    let response = exchange(&mut s, "GET /nowhere HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert_eq!(response.status, 404);
    assert!(closed(&mut s));
}

#[test]
fn gateway_frames_and_http_share_the_port_and_the_ledger() {
    let pacer = Pacer::start(2);
    let header = RequestHeader::<Usd> {
        key: ImpKey {
            auction_id: 7,
            imp_id: 0,
        },
        floor: Cpm::ZERO,
        deadline_ms: u64::MAX,
        hour: 1,
        device: Device::Desktop,
        geo: Geo(*b"US"),
        site_id: 0,
    };
    let candidates = [Candidate {
        campaign: CampaignId(1),
        max_bid: Cpm::from_units(2),
    }];
    let mut frame = Vec::new();
    encode_bids(&mut frame, 9, [(&header, &candidates[..])].into_iter());
    let mut gateway = pacer.connect();
    let mut http = pacer.connect();
    for _ in 0..2 {
        gateway.write_all(&frame[..3]).unwrap();
        let response = exchange(&mut http, &post_auction(&bid_request("mixed", "USA", 0.1)));
        gateway.write_all(&frame[3..]).unwrap();
        let mut reply = vec![0u8; HEADER_LEN];
        gateway.read_exact(&mut reply).unwrap();
        let len = u32::from_le_bytes(reply[4..8].try_into().unwrap()) as usize;
        reply.resize(HEADER_LEN + len, 0);
        gateway.read_exact(&mut reply[HEADER_LEN..]).unwrap();
        let Decode::Frame {
            request: Reply::Decisions { decisions, .. },
            ..
        } = decode_reply::<Usd>(&reply, &Limits::default())
        else {
            panic!("decisions")
        };
        // The second time round both are duplicates of what is in flight.
        if response.status == 200 {
            assert_eq!(
                decisions,
                [Decision::Bid {
                    campaign: CampaignId(1),
                    price: Cpm::from_units(2),
                }]
            );
        } else {
            assert_eq!(
                response.header("x-tern-no-bid"),
                Some("DuplicateImpression")
            );
        }
        // 2 USD CPM from the gateway and 2.5 USD CPM over HTTP, reserved on the loops that got them.
        settle();
    }
    // Each loop publishes at its next request after a sync interval: one more request on each connection.
    exchange(&mut http, &get("/nowhere"));
    gateway.write_all(&frame).unwrap();
    let mut reply = [0u8; HEADER_LEN + 8 + 2 + 13];
    gateway.read_exact(&mut reply).unwrap();
    assert_eq!(pacer.campaign(1)["reserved_micros"], 2000 + 2500);
}

#[test]
fn curl_gets_a_bid_and_fires_the_notices() {
    let Ok(version) = std::process::Command::new("curl").arg("--version").output() else {
        eprintln!("curl is not installed: skipped");
        return;
    };
    assert!(version.status.success());
    let pacer = Pacer::start(1);
    let base = format!("http://{}", pacer.addr());
    let curl = |args: &[&str]| -> String {
        let out = std::process::Command::new("curl")
            .args(["-sS", "--max-time", "5"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let body = curl(&[
        "-H",
        "Content-Type: application/json",
        "--data-binary",
        &bid_request("curl-1", "USA", 0.25),
        &format!("{base}/openrtb2/auction"),
    ]);
    let response: Value = serde_json::from_str(&body).unwrap();
    let bid = &response["seatbid"][0]["bid"][0];
    let burl = bid["burl"].as_str().unwrap();
    assert!(burl.starts_with(&format!("{base}/billing?")), "{burl}");
    let billed = curl(&[&burl.replace("${AUCTION_PRICE}", "0.9")]);
    assert_eq!(billed, r#"{"status":"Applied"}"#);
    // The no-bid answer, status only.
    let code = curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--data-binary",
        &bid_request("curl-2", "FRA", 0.25),
        &format!("{base}/openrtb2/auction"),
    ]);
    assert_eq!(code, "204");
    settle();
    curl(&[&format!("{base}/nowhere")]);
    assert_eq!(pacer.campaign(1)["spent_micros"], 900);
}

#[test]
fn http_limits_are_set_by_flags() {
    let pacer = Pacer::start_with(
        1,
        &[
            "--http-max-body-bytes",
            "300",
            "--http-max-head-bytes",
            "200",
            "--http-max-headers",
            "3",
            "--openrtb-max-imps",
            "2",
        ],
    );
    let mut s = pacer.connect();
    let small = bid_request("small", "USA", 0.1);
    assert!(small.len() <= 300);
    assert_eq!(exchange(&mut s, &post_auction(&small)).status, 200);
    let imps = json!({"id": "imps", "imp": [{"id": "1"}, {"id": "2"}, {"id": "3"}]}).to_string();
    let response = exchange(&mut s, &post_auction(&imps));
    assert_eq!(response.status, 400);
    assert!(String::from_utf8(response.body)
        .unwrap()
        .contains("over the limit of 2"));
    let big = json!({"id": "big", "imp": [], "pad": "x".repeat(300)}).to_string();
    assert_eq!(exchange(&mut s, &post_auction(&big)).status, 413);
    let mut s = pacer.connect();
    let many = "GET /nowhere HTTP/1.1\r\na: 1\r\nb: 2\r\nc: 3\r\nd: 4\r\n\r\n";
    assert_eq!(exchange(&mut s, many).status, 431);
    let mut s = pacer.connect();
    let long = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(200));
    assert_eq!(exchange(&mut s, &long).status, 431);
}
