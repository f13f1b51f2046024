//! The OpenRTB 2.6 / HTTP/1.1 front of a real `tern pacer serve` (started in-process by `start_serving`, with
//! its admin endpoint), over real sockets on 127.0.0.1: bids, notices settling spend in the admin JSON,
//! pipelining, errors that keep or close the connection, `Expect: 100-continue` (the interim `100`, or the
//! final status when the head is refused), the gateway protocol on the same port, `curl` (a missing
//! `curl` skips its tests, and fails them under `CI=true`), and the same front over HTTPS (`--tls-cert`).

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::{
    bid_request, bids_frame, candidates, closed, exchange, get, notice_url, peer_installed,
    post_auction, read_reply, request, settle, Pacer, Reader, TempDir,
};
use serde_json::{json, Value};
use tern_pacer::money::Cpm;
use tern_pacer::proto::{CampaignId, Decision, Device, Reply};

/// Campaign 1 wants the US at up to 2.5 USD CPM (seat `seat-us`, two banners of a shoe shop: 728x90, and
/// 300x250 with attribute 1); campaign 2 wants German phones at up to 1 USD CPM, on site 77 only (a bakery's
/// 300x250 banner); campaign 3 wants the US at up to 4 USD CPM through deal `deal-cars` only (a video).
const CAMPAIGNS: &str = r#"currency = "USD"

[[campaign]]
id = 1
budget = "100"
max_cpm = "2.5"
start_ms = 0
end_ms = 99999999999999
strategy = { kind = "hard-cap" }
targeting = { geos = ["US"] }
seat = "seat-us"

[[campaign.creative]]
id = "shoes-leaderboard"
format = "banner"
sizes = [[728, 90]]
adomain = ["shoes.example"]
adm = "<a href='https://shoes.example/'><img src='https://cdn.example/shoes-leaderboard.png'></a>"
cat = ["IAB18-3"]

[[campaign.creative]]
id = "shoes-rectangle"
format = "banner"
sizes = [[300, 250]]
adomain = ["shoes.example"]
adm = "<a href='https://shoes.example/'><img src='https://cdn.example/shoes-rectangle.png'></a>"
cat = ["IAB18-3"]
attr = [1]

[[campaign]]
id = 2
budget = "50"
max_cpm = "1"
start_ms = 0
end_ms = 99999999999999
strategy = { kind = "throttle", initial_rate_ppm = 1000000 }
targeting = { geos = ["DE"], devices = ["phone"], sites = [77] }

[[campaign.creative]]
id = "bakery"
format = "banner"
sizes = [[300, 250]]
adomain = ["bakery.example"]
adm = "<a href='https://bakery.example/'><img src='https://cdn.example/bakery.png'></a>"

[[campaign]]
id = 3
budget = "50"
max_cpm = "4"
start_ms = 0
end_ms = 99999999999999
strategy = { kind = "hard-cap" }
targeting = { geos = ["US"] }
deals = ["deal-cars"]

[[campaign.creative]]
id = "cars-video"
format = "video"
adomain = ["cars.example"]
adm = "<VAST version='4.2'><Ad id='cars-video'/></VAST>"
cat = ["IAB2"]
"#;

/// A pacer on `CAMPAIGNS` with `io_threads` loops and its admin endpoint.
fn pacer(io_threads: usize) -> Pacer {
    Pacer::start(CAMPAIGNS, io_threads, &[])
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
    let pacer = pacer(1);
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
    // The creative that fits the 300x250 slot, with what exchanges need to see of it.
    assert_eq!(body["seatbid"][0]["seat"], "seat-us");
    assert_eq!(bid["crid"], "shoes-rectangle");
    assert_eq!(bid["adomain"], json!(["shoes.example"]));
    assert_eq!(bid["cat"], json!(["IAB18-3"]));
    assert_eq!(bid["attr"], json!([1]));
    assert_eq!(
        (bid["w"].as_u64(), bid["h"].as_u64()),
        (Some(300), Some(250))
    );
    assert!(bid.get("dealid").is_none(), "open auction: {bid}");
    assert_eq!(bid["mtype"], 1);
    assert!(
        bid["adm"].as_str().unwrap().contains("shoes.example"),
        "{bid}"
    );
    // Second price: the campaign's maximum, written exactly.
    assert_eq!(bid["price"].to_string(), "2.5");
    let nurl = bid["nurl"].as_str().unwrap();
    let burl = bid["burl"].as_str().unwrap();
    let lurl = bid["lurl"].as_str().unwrap();
    // The ids, and the check value that catches a typo in them.
    let chk = tern_pacer::openrtb::notice_check("auction-a/1", "1", 1);
    let query = format!("?auction=auction-a%2F1&imp=1&campaign=1&chk={chk}");
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
    let pacer = pacer(1);
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
    let pacer = pacer(1);
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

/// A US request of one impression with these fields, for the restrictions' test.
fn restricted(id: &str, imp: Value, restrictions: Value) -> String {
    let mut request = json!({
        "id": id,
        "imp": [imp],
        "site": {"id": "77"},
        "device": {"devicetype": 2, "geo": {"country": "USA"}},
    });
    for (key, value) in restrictions.as_object().unwrap() {
        request[key] = value.clone();
    }
    post_auction(&request.to_string())
}

#[test]
fn bids_honour_the_exchanges_restrictions_and_a_204_names_the_one_that_stopped_them() {
    let pacer = pacer(1);
    let mut s = pacer.connect();
    let rectangle =
        json!({"id": "1", "bidfloor": 0.5, "banner": {"format": [{"w": 300, "h": 250}]}});
    let leaderboard = json!({"id": "1", "banner": {"w": 728, "h": 90}});
    let mut ask = |id: &str, imp: &Value, restrictions: Value| {
        let r = exchange(&mut s, &restricted(id, imp.clone(), restrictions));
        let reason = r.header("x-tern-no-bid").map(str::to_owned);
        let body = (r.status == 200).then(|| r.json());
        (r.status, reason, body)
    };
    for (restrictions, reason) in [
        (json!({"bcat": ["IAB18"]}), "BlockedCategory"),
        (json!({"badv": ["Shoes.Example"]}), "BlockedAdvertiser"),
        (json!({"wseat": ["seat-eu"]}), "SeatNotAllowed"),
        (json!({"bseat": ["seat-us"]}), "SeatNotAllowed"),
    ] {
        let (status, why, _) = ask("blocked", &rectangle, restrictions.clone());
        assert_eq!(
            (status, why.as_deref()),
            (204, Some(reason)),
            "{restrictions}"
        );
    }
    // The slot's own blocked attributes: the rectangle has attribute 1; the leaderboard has none.
    let no_flash = json!({"id": "1", "banner": {"w": 300, "h": 250, "battr": [1]}});
    let (status, why, _) = ask("battr", &no_flash, json!({}));
    assert_eq!((status, why.as_deref()), (204, Some("BlockedAttribute")));
    let (status, _, body) = ask("leaderboard", &leaderboard, json!({"bcat": ["IAB1"]}));
    assert_eq!(status, 200);
    let bid = &body.unwrap()["seatbid"][0]["bid"][0];
    assert_eq!(
        (bid["crid"].as_str(), bid["w"].as_u64()),
        (Some("shoes-leaderboard"), Some(728))
    );
    let skyscraper = json!({"id": "1", "banner": {"w": 160, "h": 600}});
    let (status, why, _) = ask("sky", &skyscraper, json!({}));
    assert_eq!((status, why.as_deref()), (204, Some("NoFittingCreative")));
    // A private auction: only campaign 3's deal may bid, at or above the deal's floor, with its video.
    let deal = |floor: f64| {
        json!({"id": "1", "video": {"mimes": ["video/mp4"]}, "banner": {"w": 300, "h": 250},
               "pmp": {"private_auction": 1, "deals": [{"id": "deal-cars", "bidfloor": floor}]}})
    };
    let (status, _, body) = ask("deal", &deal(3.5), json!({}));
    assert_eq!(status, 200);
    let bid = &body.unwrap()["seatbid"][0]["bid"][0];
    assert_eq!(
        (
            bid["cid"].as_str(),
            bid["crid"].as_str(),
            bid["dealid"].as_str()
        ),
        (Some("3"), Some("cars-video"), Some("deal-cars"))
    );
    assert_eq!(bid["price"].to_string(), "4");
    // A fixed-price deal (its own `at` 3): the bid is the deal's price, not the campaign's maximum.
    let mut fixed = deal(3.5);
    fixed["pmp"]["deals"][0]["at"] = json!(3);
    let (status, _, body) = ask("deal-fixed", &fixed, json!({}));
    assert_eq!(status, 200);
    let bid = &body.unwrap()["seatbid"][0]["bid"][0];
    assert_eq!(
        (bid["dealid"].as_str(), bid["price"].to_string()),
        (Some("deal-cars"), "3.5".into())
    );
    let (status, why, _) = ask("deal-high", &deal(4.5), json!({}));
    assert_eq!((status, why.as_deref()), (204, Some("BelowDealFloor")));
    let other_deal = json!({"id": "1", "banner": {"w": 300, "h": 250},
                            "pmp": {"private_auction": 1, "deals": [{"id": "deal-x", "bidfloor": 0.1}]}});
    let (status, why, _) = ask("no-deal", &other_deal, json!({}));
    assert_eq!((status, why.as_deref()), (204, Some("NoDeal")));
    // The reasons are counted (no other test of this process gives these three).
    let metrics = String::from_utf8_lossy(&pacer.admin_get("/metrics").body).into_owned();
    let counted = |reason: &str| {
        let sample = format!("tern_pacer_openrtb_unfit_total{{reason=\"{reason}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&sample)?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    assert_eq!(counted("SeatNotAllowed"), 2, "{metrics}");
    assert_eq!(counted("BlockedCategory"), 1);
    assert_eq!(counted("NoDeal"), 1);
}

/// The value of `tern_pacer_openrtb_notices_refused_total{reason}` on the pacer's `/metrics`.
fn refused(pacer: &Pacer, reason: &str) -> u64 {
    let metrics = String::from_utf8_lossy(&pacer.admin_get("/metrics").body).into_owned();
    let sample = format!("tern_pacer_openrtb_notices_refused_total{{reason=\"{reason}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&sample)?.parse::<u64>().ok())
        .unwrap_or(0)
}

#[test]
fn a_mistyped_notice_is_refused_with_its_reason_and_counted() {
    // Two loops: a notice no loop knows would be forwarded, so a typo would otherwise pass as `Forwarded`.
    let pacer = pacer(2);
    let mut s = pacer.connect();
    let body = exchange(&mut s, &post_auction(&bid_request("typo-1", "USA", 0.5))).json();
    let burl = notice_target(
        body["seatbid"][0]["bid"][0]["burl"].as_str().unwrap(),
        "1.2",
    );
    let text_of = |r: &common::HttpResponse| String::from_utf8_lossy(&r.body).into_owned();
    // One character off in the auction id, the impression id, the campaign id, the check value; and the
    // check left out. None is applied, each says what is wrong, and the connection stays open.
    let chk_at = burl.find("chk=").unwrap() + 4;
    let mut wrong_chk = burl.clone();
    let flipped = if &burl[chk_at..chk_at + 1] == "0" {
        "1"
    } else {
        "0"
    };
    wrong_chk.replace_range(chk_at..chk_at + 1, flipped);
    let typos = [
        burl.replace("auction=typo-1", "auction=typo-2"),
        burl.replace("imp=1", "imp=2"),
        burl.replace("campaign=1", "campaign=2"),
        wrong_chk,
    ];
    for typo in &typos {
        assert_ne!(typo, &burl);
        let response = exchange(&mut s, &get(typo));
        assert_eq!(
            (response.status, response.header("content-type")),
            (400, Some("text/plain; charset=utf-8")),
            "{typo}: {}",
            text_of(&response)
        );
        assert!(
            text_of(&response).starts_with(
                "billing notice refused: parameter chk does not match auction, imp and campaign"
            ),
            "{typo}: {}",
            text_of(&response)
        );
    }
    let (without_chk, _) = burl.split_once("&chk=").unwrap();
    let missing = exchange(&mut s, &get(&format!("{without_chk}&price=1.2")));
    assert_eq!(missing.status, 400, "{}", text_of(&missing));
    assert!(
        text_of(&missing).contains("parameter chk is missing"),
        "{}",
        text_of(&missing)
    );
    // Nothing was spent, the reservation still stands (a request after the sync interval publishes the
    // loop's figures: one campaign 1 does not bid on); the notice as issued is applied.
    settle();
    let france = exchange(&mut s, &post_auction(&bid_request("typo-fr", "FRA", 0.5)));
    assert_eq!(france.status, 204);
    let still = pacer.campaign(1);
    assert_eq!(
        (&still["spent_micros"], &still["reserved_micros"]),
        (&Value::from(0), &Value::from(2500)),
        "{still}"
    );
    settle();
    let applied = exchange(&mut s, &get(&burl));
    assert_eq!(
        (applied.status, applied.json()),
        (200, json!({"status": "Applied"}))
    );
    settle();
    assert_eq!(pacer.campaign(1)["spent_micros"], 1200);
    // A notice whose check matches but which no loop knows is answered as before: handed to the others.
    let unknown = exchange(
        &mut s,
        &get(&notice_url("billing", "typo-never-bid", "1", 1, Some("1"))),
    );
    assert_eq!(
        (unknown.status, unknown.json()),
        (200, json!({"status": "Forwarded"}))
    );
    // Counted by reason (no other test of this process sends a notice with a bad or missing check).
    assert_eq!(refused(&pacer, "check_mismatch"), typos.len() as u64);
    assert_eq!(refused(&pacer, "missing_check"), 1);
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let pacer = pacer(1);
    let mut s = pacer.connect();
    let mut burst = String::new();
    burst += &post_auction(&bid_request("p1", "USA", 0.1));
    burst += &get("/nowhere");
    burst += &post_auction(&bid_request("p2", "FRA", 0.1));
    burst += &get(&notice_url("billing", "never", "1", 1, Some("1")));
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
    let pacer = pacer(1);
    let mut s = pacer.connect();
    for (body, reason) in [
        ("{not json", "not a BidRequest"),
        (r#"{"imp": []}"#, "missing field `id`"),
        (
            r#"{"id": "x", "imp": [{"id": "1", "bidfloor": -1}]}"#,
            "non-negative",
        ),
        (r#"{"id": "x", "at": 3, "imp": []}"#, "at=3"),
        (
            r#"{"id": "x", "imp": [{"id": "1"}, {"id": "1"}]}"#,
            "appears twice",
        ),
    ] {
        let response = exchange(&mut s, &post_auction(body));
        assert_eq!(response.status, 400, "{body}");
        let text = String::from_utf8(response.body).unwrap();
        assert!(text.contains(reason), "{body}: {text}");
    }
    // Valid requests the pacer cannot take part in are no-bids, not errors; nulls are absent fields.
    let banner = r#""banner": {"w": 300, "h": 250}"#;
    for (body, reason) in [
        (
            format!(r#"{{"id": "x", "cur": ["EUR"], "imp": [{{"id": "1", {banner}}}]}}"#),
            "CurrencyNotAccepted",
        ),
        (
            format!(r#"{{"id": "x", "at": 501, "imp": [{{"id": "1", {banner}}}]}}"#),
            "UnsupportedAuctionType",
        ),
        (
            format!(
                r#"{{"id": "x", "imp": [{{"id": "1", "bidfloor": 1, "bidfloorcur": "GBP", {banner}}}]}}"#
            ),
            "FloorInOtherCurrency",
        ),
    ] {
        let response = exchange(&mut s, &post_auction(&body));
        assert_eq!(
            (response.status, response.header("x-tern-no-bid")),
            (204, Some(reason)),
            "{body}"
        );
    }
    // A deal whose floor is in another currency is left out: campaign 3 (4.00, that deal only) cannot bid
    // through it, so campaign 1 wins the open auction.
    let euro_deal = format!(
        r#"{{"id": "euro-deal", "imp": [{{"id": "1", {banner}, "pmp": {{"deals": [{{"id": "deal-cars",
            "bidfloor": 1, "bidfloorcur": "EUR"}}]}}}}], "device": {{"geo": {{"country": "USA"}}}}}}"#
    );
    let response = exchange(&mut s, &post_auction(&euro_deal));
    assert_eq!(response.status, 200);
    let bid = &response.json()["seatbid"][0]["bid"][0];
    assert_eq!((bid["cid"].as_str(), bid.get("dealid")), (Some("1"), None));
    let nulls = r#"{"id": "nulls", "bcat": null, "cur": null, "imp": [{"id": "1", "bidfloor": null,
        "banner": {"w": 300, "h": 250, "format": null, "battr": null}, "pmp": null}],
        "device": {"geo": {"country": "USA"}}}"#;
    assert_eq!(exchange(&mut s, &post_auction(nulls)).status, 200);
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
    let pacer = pacer(1);
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
    let pacer = pacer(2);
    let frame = bids_frame(
        9,
        &[(request(7, b"US", Device::Desktop), candidates(1, 2_000_000))],
    );
    let mut gateway = pacer.connect();
    let mut http = pacer.connect();
    for _ in 0..2 {
        gateway.write_all(&frame[..3]).unwrap();
        let response = exchange(&mut http, &post_auction(&bid_request("mixed", "USA", 0.1)));
        gateway.write_all(&frame[3..]).unwrap();
        let Ok(Reply::Decisions { decisions, .. }) = read_reply(&mut gateway) else {
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
    read_reply(&mut gateway).unwrap();
    assert_eq!(pacer.campaign(1)["reserved_micros"], 2000 + 2500);
}

#[test]
fn curl_gets_a_bid_and_fires_the_notices() {
    if !peer_installed("curl", "curl") {
        return;
    }
    let pacer = pacer(1);
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
fn https_front_bids_with_https_notices_and_reloads_its_certificate() {
    if !peer_installed("curl", "curl") || !peer_installed("openssl", "openssl") {
        return;
    }
    let certs = tern_testkit::tls::make_certificates(
        &std::env::temp_dir().join(format!("tern-pacer-tls-{}", std::process::id())),
    );
    // The files the pacer serves, overwritten below to rotate the certificate.
    let (cert, key) = (
        certs.dir.join("live_crt.pem"),
        certs.dir.join("live_key.pem"),
    );
    std::fs::copy(&certs.server_cert, &cert).unwrap();
    std::fs::copy(&certs.server_key, &key).unwrap();
    let pacer = Pacer::start(
        CAMPAIGNS,
        1,
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
            "--reload-ms",
            "50",
        ],
    );
    let base = format!("https://{}", pacer.addr());
    let ca = certs.ca_cert.to_str().unwrap().to_owned();
    let curl = |args: &[&str]| -> (bool, String) {
        let out = std::process::Command::new("curl")
            .args(["-sS", "--max-time", "5", "--cacert", &ca])
            .args(args)
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8(out.stdout).unwrap())
    };
    let (ok, body) = curl(&[
        "-H",
        "Content-Type: application/json",
        "--data-binary",
        &bid_request("tls-1", "USA", 0.25),
        &format!("{base}/openrtb2/auction"),
    ]);
    assert!(ok, "{body}");
    let response: Value = serde_json::from_str(&body).unwrap();
    let burl = response["seatbid"][0]["bid"][0]["burl"].as_str().unwrap();
    assert!(burl.starts_with(&format!("{base}/billing?")), "{burl}");
    let (ok, billed) = curl(&[&burl.replace("${AUCTION_PRICE}", "0.9")]);
    assert!(ok);
    assert_eq!(billed, r#"{"status":"Applied"}"#);
    // The loop publishes to the admin view at a request after its sync interval: one more request.
    settle();
    curl(&[&format!("{base}/nowhere")]);
    assert_eq!(pacer.campaign(1)["spent_micros"], 900);
    // Plain HTTP on the TLS port gets no HTTP answer.
    let (ok, _) = curl(&[&format!("http://{}/nowhere", pacer.addr())]);
    assert!(!ok, "plain HTTP was answered on the TLS port");

    // The certificate the server presents: its organizational unit.
    let unit = || {
        let out = std::process::Command::new("openssl")
            .args([
                "s_client",
                "-connect",
                &pacer.addr().to_string(),
                "-CAfile",
                &ca,
            ])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines()
            .find_map(|l| l.strip_prefix("subject="))
            .map(str::to_owned)
            .unwrap_or(text)
    };
    assert!(unit().contains("OU = First"), "{}", unit());
    std::fs::copy(&certs.rotated_cert, &cert).unwrap();
    std::fs::copy(&certs.rotated_key, &key).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !unit().contains("OU = Rotated") {
        assert!(Instant::now() < deadline, "not reloaded: {}", unit());
        std::thread::sleep(Duration::from_millis(50));
    }
    // A broken file is not taken: the rotated certificate stays.
    std::fs::write(&cert, "not a certificate\n").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(unit().contains("OU = Rotated"), "{}", unit());
    let (ok, _) = curl(&[&format!("{base}/nowhere")]);
    assert!(ok, "served after a broken reload");
    let _ = std::fs::remove_dir_all(&certs.dir);
}

/// A BidRequest for the US of about `size` bytes: the padding is in `ext`, which the pacer does not read.
fn padded_bid_request(id: &str, size: usize) -> String {
    let mut request: Value = serde_json::from_str(&bid_request(id, "USA", 0.1)).unwrap();
    let pad = size.saturating_sub(request.to_string().len() + 20);
    request["ext"] = json!({ "pad": "x".repeat(pad) });
    request.to_string()
}

/// The head of a POST of `length` bytes to the auction with `Expect: expect`.
fn expecting_head(minor: u8, expect: &str, length: usize) -> String {
    format!(
        "POST /openrtb2/auction HTTP/1.{minor}\r\nHost: pacer.test\r\nContent-Type: application/json\r\n\
         Expect: {expect}\r\nContent-Length: {length}\r\n\r\n"
    )
}

#[test]
fn expect_100_continue_gets_the_interim_response_before_the_body() {
    let pacer = pacer(1);
    let mut s = pacer.connect();
    let mut reader = Reader::default();
    // The head alone, behind another request on the same connection: that one is answered first, then
    // the `100`, and only then does the client send the body.
    let body = padded_bid_request("continue-1", 4096);
    let head = expecting_head(1, "100-continue", body.len());
    s.write_all(format!("{}{head}", get("/nowhere")).as_bytes())
        .unwrap();
    assert_eq!(reader.next(&mut s).status, 404);
    let interim = reader.next(&mut s);
    assert_eq!(interim.status, 100);
    assert!(interim.headers.is_empty() && interim.body.is_empty());
    // The body in two pieces: no second `100`.
    let (first, second) = body.split_at(1000);
    s.write_all(first.as_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    s.write_all(second.as_bytes()).unwrap();
    let response = reader.next(&mut s);
    assert_eq!(response.status, 200);
    assert_eq!(response.json()["id"], "continue-1");
    // With its body right behind the head the request needs no `100`: the answer comes at once.
    let body = bid_request("continue-2", "USA", 0.1);
    let request = expecting_head(1, "100-continue", body.len()) + &body;
    s.write_all(request.as_bytes()).unwrap();
    let response = reader.next(&mut s);
    assert_eq!(
        (response.status, response.json()["id"].clone()),
        (200, json!("continue-2"))
    );
    // Nothing else came: the next answer is the next request's.
    assert_eq!(exchange(&mut s, &get("/nowhere")).status, 404);
    assert!(reader.buf.is_empty());

    // HTTP/1.0 has no interim responses: nothing comes until the body does.
    let mut s = pacer.connect();
    let body = bid_request("continue-3", "USA", 0.1);
    s.write_all(expecting_head(0, "100-continue", body.len()).as_bytes())
        .unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut byte = [0u8; 1];
    let waited = s.read(&mut byte);
    assert!(waited.is_err(), "{waited:?}: nothing before the body");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(body.as_bytes()).unwrap();
    let response = Reader::default().next(&mut s);
    assert_eq!(
        (response.status, response.json()["id"].clone()),
        (200, json!("continue-3"))
    );

    // Refused on the head: the final status instead of a `100`, and the connection closes unread.
    for (head, status) in [
        (expecting_head(1, "100-continue", 100_000), 413),
        (expecting_head(1, "100-continue, x-other", 10), 417),
        (expecting_head(1, "x-other", 10), 417),
    ] {
        let mut s = pacer.connect();
        let response = exchange(&mut s, &head);
        assert_eq!(response.status, status, "{head}");
        assert_eq!(response.header("connection"), Some("close"));
        assert!(closed(&mut s), "{status} closes the connection");
    }
}

#[test]
fn curl_posts_large_bodies_without_waiting_for_a_100() {
    if !peer_installed("curl", "curl") {
        return;
    }
    // Bodies up to 2 MB here: curl 7.88 and later ask `Expect: 100-continue` for bodies over 1 MiB (older
    // versions over 1 KiB, which `-H 'Expect: 100-continue'` does here), then wait 1 s for the `100`
    // before sending the body.
    let large_limit = Pacer::start(CAMPAIGNS, 1, &["--http-max-body-bytes", "2000000"]);
    let url = format!("http://{}/openrtb2/auction", large_limit.addr());
    let dir = TempDir::new("curl");
    let curl = |file: &str, headers: &[&str]| {
        let mut command = std::process::Command::new("curl");
        command.args(["-sS", "-v", "--max-time", "5"]);
        for header in ["Content-Type: application/json"].iter().chain(headers) {
            command.args(["-H", header]);
        }
        command.args([
            "--data-binary",
            &format!("@{file}"),
            "-w",
            "\n%{http_code}",
            &url,
        ]);
        let started = Instant::now();
        let out = command.output().unwrap();
        let elapsed = started.elapsed();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        let stdout = String::from_utf8(out.stdout).unwrap();
        let (body, code) = stdout.rsplit_once('\n').unwrap();
        (code.to_owned(), body.to_owned(), stderr, elapsed)
    };
    for (name, size, headers) in [
        ("big", 1_100_000, &[][..]),
        ("small", 4096, &["Expect: 100-continue"][..]),
    ] {
        let file = dir.arg(&format!("{name}.json"));
        std::fs::write(&file, padded_bid_request(name, size)).unwrap();
        let (code, body, verbose, elapsed) = curl(&file, headers);
        assert!(verbose.contains("> Expect: 100-continue"), "{verbose}");
        assert!(verbose.contains("< HTTP/1.1 100 Continue"), "{verbose}");
        assert_eq!(code, "200", "{body}");
        let response: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(response["id"], name);
        assert_eq!(response["seatbid"][0]["bid"][0]["cid"], "1");
        assert!(elapsed < Duration::from_millis(800), "{name}: {elapsed:?}");
    }
    // Over the limit: the `413` comes at once, instead of a `100`, and curl sends nothing more.
    drop(large_limit);
    let small_limit = pacer(1);
    let url = format!("http://{}/openrtb2/auction", small_limit.addr());
    let file = dir.arg("big.json");
    let started = Instant::now();
    let out = std::process::Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "5",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .args(["--data-binary", &format!("@{file}"), &url])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "413");
    assert!(started.elapsed() < Duration::from_millis(800));
}

#[test]
fn http_limits_are_set_by_flags() {
    let pacer = Pacer::start(
        CAMPAIGNS,
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
