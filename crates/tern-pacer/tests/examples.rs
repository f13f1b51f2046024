//! The examples at the top of the repository (`examples/`), tried as a new user would try them: a real
//! `tern pacer serve` (in-process) on `examples/campaigns.toml`, every `examples/openrtb/*.json` posted as it
//! is, each answer the one `examples/README.md` promises, and each bid checked as an exchange checks the bids
//! it receives: it names an impression of the request and meets that impression's floor (or its deal's), a
//! private auction gets only deal bids within the deal's seats and advertisers, the creative is named and has
//! an advertiser domain, no block of the request (`bcat`, `badv`, `bapp`, `battr`, `wseat`/`bseat`) is
//! broken, a banner bid has the size of one the slot takes, the currency is one the exchange accepts, and the
//! win, billing and loss notice URLs are there. Then the README's notice and retry steps.

mod common;

use std::collections::HashSet;

use common::{exchange, get, post_auction, settle, Pacer};
use serde_json::Value;
use tern_http::encode_query_value;
use tern_pacer::openrtb::{decimal_to_micros, notice_check};

const CAMPAIGNS: &str = include_str!("../../../examples/campaigns.toml");
const README: &str = include_str!("../../../examples/README.md");
const REQUESTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/openrtb");

/// A bid an example gets.
struct Expected {
    imp: &'static str,
    campaign: &'static str,
    crid: &'static str,
    price: &'static str,
    /// The banner size, for a banner.
    size: Option<(u64, u64)>,
    deal: Option<&'static str>,
    seat: Option<&'static str>,
}

/// What an example is answered: its bids (`200`), or the no-bid reason (`204`).
enum Answer {
    Bids(&'static [Expected]),
    NoBid(&'static str),
}

/// Every example and its answer, as examples/README.md gives them.
const EXAMPLES: &[(&str, Answer)] = &[
    (
        "app-banner-formats.json",
        Answer::Bids(&[
            // The first size the slot lists that a creative has; the shoe shop outbids the travel app.
            Expected {
                imp: "bottom-banner",
                campaign: "1",
                crid: "shoes-mobile",
                price: "2",
                size: Some((320, 50)),
                deal: None,
                seat: Some("seat-tern"),
            },
            // Only the travel app has a 320x480 (and it targets phones).
            Expected {
                imp: "level-end-interstitial",
                campaign: "3",
                crid: "travel-app-install",
                price: "1.8",
                size: Some((320, 480)),
                deal: None,
                seat: None,
            },
        ]),
    ),
    (
        "banner-site.json",
        Answer::Bids(&[Expected {
            imp: "1",
            campaign: "1",
            crid: "shoes-rectangle",
            price: "2",
            size: Some((300, 250)),
            deal: None,
            seat: Some("seat-tern"),
        }]),
    ),
    // The shoe shop's category (IAB18-3, under IAB18) and the bakery's (IAB8-9) are blocked; the others
    // have no 300x250 banner or bid only through a deal.
    ("blocked-categories.json", Answer::NoBid("BlockedCategory")),
    (
        "native.json",
        Answer::Bids(&[Expected {
            imp: "feed-3",
            campaign: "5",
            crid: "news-native",
            price: "1.5",
            size: None,
            deal: None,
            seat: None,
        }]),
    ),
    (
        "pmp-deal.json",
        Answer::Bids(&[Expected {
            imp: "1",
            campaign: "6",
            crid: "watches-rectangle",
            price: "4.5",
            size: Some((300, 250)),
            deal: Some("tern-example-deal-1"),
            seat: Some("seat-tern"),
        }]),
    ),
    // The shoe shop's domain is blocked: the bakery, cheaper, bids instead.
    (
        "restricted-advertiser.json",
        Answer::Bids(&[Expected {
            imp: "1",
            campaign: "2",
            crid: "bakery-rectangle",
            price: "1",
            size: Some((300, 250)),
            deal: None,
            seat: Some("seat-tern"),
        }]),
    ),
    (
        "video.json",
        Answer::Bids(&[Expected {
            imp: "preroll",
            campaign: "4",
            crid: "cars-preroll-15s",
            price: "6",
            size: None,
            deal: None,
            seat: Some("seat-tern"),
        }]),
    ),
];

/// The example files, by name, in name order.
fn example_files() -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(REQUESTS)
        .unwrap_or_else(|e| panic!("{REQUESTS}: {e}"))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .map(|path| {
            let name = path.file_name().unwrap().to_str().unwrap().to_owned();
            (name, std::fs::read_to_string(&path).unwrap())
        })
        .collect();
    files.sort();
    files
}

fn strings(value: &Value) -> Vec<&str> {
    value.as_array().map_or(Vec::new(), |a| {
        a.iter().map(|v| v.as_str().unwrap()).collect()
    })
}

fn numbers(value: &Value) -> Vec<u64> {
    value.as_array().map_or(Vec::new(), |a| {
        a.iter().map(|v| v.as_u64().unwrap()).collect()
    })
}

/// A JSON number (a price or a floor) in micro-units, exactly; an absent floor is zero.
fn micros(value: &Value) -> u64 {
    if value.is_null() {
        return 0;
    }
    assert!(value.is_number(), "{value} is not a number");
    decimal_to_micros(&value.to_string()).unwrap()
}

/// Whether `domain` is `blocked` or one of its subdomains.
fn domain_within(domain: &str, blocked: &str) -> bool {
    let (domain, blocked) = (domain.to_ascii_lowercase(), blocked.to_ascii_lowercase());
    domain == blocked || domain.ends_with(&format!(".{blocked}"))
}

/// Checks `response` to `request` as an exchange checks the bids it receives (see the module doc), and
/// returns the bids with their seats.
fn exchange_would_accept<'r>(
    request: &Value,
    response: &'r Value,
) -> Vec<(&'r Value, Option<&'r str>)> {
    let what = &request["id"];
    assert_eq!(
        response["id"], request["id"],
        "the response answers the request"
    );
    let cur = response["cur"].as_str().expect("cur");
    let accepted = strings(&request["cur"]);
    assert!(
        accepted.is_empty() || accepted.contains(&cur),
        "{what}: cur {cur} not in {accepted:?}"
    );
    assert_eq!(cur, "USD", "{what}: the campaigns' currency");
    let (wseat, bseat) = (strings(&request["wseat"]), strings(&request["bseat"]));
    let (bcat, badv, bapp) = (
        strings(&request["bcat"]),
        strings(&request["badv"]),
        strings(&request["bapp"]),
    );
    let imps = request["imp"].as_array().unwrap();
    let mut bids = Vec::new();
    let (mut bid_ids, mut imps_bid) = (HashSet::new(), HashSet::new());
    for seatbid in response["seatbid"].as_array().expect("seatbid") {
        let seat = seatbid["seat"].as_str();
        assert!(
            wseat.is_empty() || seat.is_some_and(|s| wseat.contains(&s)),
            "{what}: seat {seat:?} not in wseat"
        );
        assert!(
            !seat.is_some_and(|s| bseat.contains(&s)),
            "{what}: seat {seat:?} in bseat"
        );
        let seat_bids = seatbid["bid"].as_array().expect("bid");
        assert!(!seat_bids.is_empty(), "{what}: an empty seatbid");
        for bid in seat_bids {
            let id = bid["id"].as_str().expect("bid id");
            assert!(bid_ids.insert(id), "{what}: bid id {id} twice");
            let impid = bid["impid"].as_str().expect("impid");
            let imp = imps
                .iter()
                .find(|imp| imp["id"] == impid)
                .unwrap_or_else(|| panic!("{what}: impid {impid} is no impression of the request"));
            assert!(imps_bid.insert(impid), "{what}: two bids on imp {impid}");
            let price = micros(&bid["price"]);
            // The markup is there, of the kind the impression asked for.
            let adm = bid["adm"].as_str().unwrap_or_default();
            let kind = match bid["mtype"].as_u64() {
                Some(1) => "banner",
                Some(2) => "video",
                Some(4) => "native",
                other => panic!("{what}: mtype {other:?}"),
            };
            assert!(!imp[kind].is_null(), "{what}: a {kind} bid on imp {impid}");
            assert!(!adm.trim().is_empty(), "{what}: no adm");
            assert!(kind != "video" || adm.contains("<VAST"), "{what}: {adm}");
            let deals = imp["pmp"]["deals"].as_array().cloned().unwrap_or_default();
            match bid["dealid"].as_str() {
                Some(dealid) => {
                    let deal = deals.iter().find(|d| d["id"] == dealid).unwrap_or_else(|| {
                        panic!("{what}: deal {dealid} is not offered on imp {impid}")
                    });
                    assert!(
                        price >= micros(&deal["bidfloor"]),
                        "{what}: under deal {dealid}'s floor"
                    );
                    let deal_seats = strings(&deal["wseat"]);
                    assert!(
                        deal_seats.is_empty() || seat.is_some_and(|s| deal_seats.contains(&s)),
                        "{what}: seat {seat:?} not allowed on deal {dealid}"
                    );
                    let allowed = strings(&deal["wadomain"]);
                    assert!(
                        allowed.is_empty()
                            || strings(&bid["adomain"]).iter().all(|d| allowed.contains(d)),
                        "{what}: advertiser not allowed on deal {dealid}"
                    );
                }
                None => {
                    assert_ne!(
                        imp["pmp"]["private_auction"], 1,
                        "{what}: an open bid in a private auction"
                    );
                    assert!(
                        price >= micros(&imp["bidfloor"]),
                        "{what}: under imp {impid}'s floor"
                    );
                }
            }
            assert!(
                bid["crid"].as_str().is_some_and(|c| !c.is_empty()),
                "{what}: no crid"
            );
            let adomain = strings(&bid["adomain"]);
            assert!(!adomain.is_empty(), "{what}: no adomain");
            for domain in &adomain {
                assert!(
                    !badv.iter().any(|b| domain_within(domain, b)),
                    "{what}: {domain} is in badv"
                );
            }
            // The request's taxonomy is the bid's (both default to 1, IAB Content Taxonomy 1.0).
            assert_eq!(
                request["cattax"].as_u64().unwrap_or(1),
                bid["cattax"].as_u64().unwrap_or(1)
            );
            for cat in strings(&bid["cat"]) {
                assert!(
                    !bcat
                        .iter()
                        .any(|b| cat == *b || cat.starts_with(&format!("{b}-"))),
                    "{what}: category {cat} is in bcat"
                );
            }
            assert!(
                !bid["bundle"].as_str().is_some_and(|b| bapp.contains(&b)),
                "{what}: bundle in bapp"
            );
            // Each example's impressions offer one kind of slot: a banner bid has one of its sizes.
            let kind = ["banner", "video", "native"]
                .into_iter()
                .find(|k| imp.get(*k).is_some())
                .expect("a banner, video or native impression");
            let battr = numbers(&imp[kind]["battr"]);
            assert!(
                !numbers(&bid["attr"]).iter().any(|a| battr.contains(a)),
                "{what}: attribute in battr"
            );
            let size = (bid["w"].as_u64(), bid["h"].as_u64());
            if kind == "banner" {
                let banner = &imp["banner"];
                let mut sizes: Vec<(Option<u64>, Option<u64>)> =
                    banner["format"].as_array().map_or(Vec::new(), |f| {
                        f.iter()
                            .map(|f| (f["w"].as_u64(), f["h"].as_u64()))
                            .collect()
                    });
                sizes.push((banner["w"].as_u64(), banner["h"].as_u64()));
                assert!(
                    sizes.contains(&size) && size.0.is_some(),
                    "{what}: {size:?} not in {sizes:?}"
                );
            } else {
                assert_eq!(size, (None, None), "{what}: a size on a {kind} bid");
            }
            let cid = bid["cid"].as_str().expect("cid");
            let query = format!(
                "auction={}&imp={}&campaign={cid}&chk={}",
                encode_query_value(what.as_str().unwrap()),
                encode_query_value(impid),
                notice_check(
                    what.as_str().unwrap(),
                    impid,
                    cid.parse().expect("a campaign id")
                ),
            );
            for (url, path, priced) in [
                ("nurl", "win", true),
                ("burl", "billing", true),
                ("lurl", "loss", false),
            ] {
                let expected = format!("http://pacer.test/{path}?{query}");
                let expected = if priced {
                    expected + "&price=${AUCTION_PRICE}"
                } else {
                    expected
                };
                assert_eq!(bid[url].as_str(), Some(expected.as_str()), "{what}: {url}");
            }
            bids.push((bid, seat));
        }
    }
    bids
}

#[test]
fn every_example_gets_its_answer_and_each_bid_is_one_an_exchange_accepts() {
    let files = example_files();
    let names: Vec<&str> = files.iter().map(|(name, _)| name.as_str()).collect();
    let expected: Vec<&str> = EXAMPLES.iter().map(|(name, _)| *name).collect();
    assert_eq!(
        names, expected,
        "every example in {REQUESTS} has its answer here, and no other"
    );
    let pacer = Pacer::start(CAMPAIGNS, 1, &[]);
    let mut s = pacer.connect();
    for ((name, body), (_, answer)) in files.iter().zip(EXAMPLES) {
        let request: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{name}: {e}"));
        let response = exchange(&mut s, &post_auction(body));
        match answer {
            Answer::NoBid(reason) => {
                assert_eq!(
                    (response.status, response.header("x-tern-no-bid")),
                    (204, Some(*reason)),
                    "{name}: {}",
                    String::from_utf8_lossy(&response.body)
                );
                assert!(response.body.is_empty(), "{name}");
            }
            Answer::Bids(expected) => {
                assert_eq!(
                    response.status,
                    200,
                    "{name}: {:?} {}",
                    response.header("x-tern-no-bid"),
                    String::from_utf8_lossy(&response.body)
                );
                assert_eq!(response.header("content-type"), Some("application/json"));
                let json = response.json();
                let bids = exchange_would_accept(&request, &json);
                assert_eq!(bids.len(), expected.len(), "{name}: {json}");
                for want in *expected {
                    let (bid, seat) = bids
                        .iter()
                        .find(|(bid, _)| bid["impid"] == want.imp)
                        .unwrap_or_else(|| panic!("{name}: no bid on imp {}: {json}", want.imp));
                    let size = bid["w"].as_u64().zip(bid["h"].as_u64());
                    assert_eq!(
                        (
                            bid["cid"].as_str(),
                            bid["crid"].as_str(),
                            bid["price"].to_string(),
                            size,
                            bid["dealid"].as_str(),
                            *seat
                        ),
                        (
                            Some(want.campaign),
                            Some(want.crid),
                            want.price.to_owned(),
                            want.size,
                            want.deal,
                            want.seat
                        ),
                        "{name}: imp {}",
                        want.imp
                    );
                }
            }
        }
    }
}

/// What the README says a notice URL is answered.
#[derive(Debug)]
enum NoticeAnswer {
    /// `-> {"status":"Applied"}`: `200` with this JSON.
    Json(Value),
    /// `-> 400: reason...`: `400` with a body starting with the reason.
    Refused(String),
}

/// The notice URLs the README's "Notices" steps `curl` (their targets, on the pacer's port), each with the
/// answer its comment promises.
fn readme_notices() -> Vec<(String, NoticeAnswer)> {
    let mut notices = Vec::new();
    let mut comment = "";
    for line in README.lines() {
        if let Some(text) = line.strip_prefix("# ") {
            if text.contains(" -> ") {
                comment = text;
            }
            continue;
        }
        let Some((_, url)) = line.split_once("\"http://127.0.0.1:7400") else {
            continue;
        };
        let target = url.split('"').next().unwrap();
        if !["/win?", "/billing?", "/loss?"]
            .iter()
            .any(|p| target.starts_with(p))
        {
            continue;
        }
        let (_, promised) = comment
            .split_once(" -> ")
            .unwrap_or_else(|| panic!("no answer given for {target}"));
        let answer = match promised.strip_prefix("400: ") {
            Some(reason) => NoticeAnswer::Refused(reason.to_owned()),
            None => {
                let json = &promised[..promised.find('}').expect("a JSON answer") + 1];
                NoticeAnswer::Json(serde_json::from_str(json).unwrap())
            }
        };
        notices.push((target.to_owned(), answer));
        comment = "";
    }
    notices
}

#[test]
fn the_readme_steps_a_billing_notice_counts_spend_and_a_repeated_request_is_no_new_impression() {
    let pacer = Pacer::start(CAMPAIGNS, 1, &[]);
    let mut s = pacer.connect();
    let bid_on = |s: &mut std::net::TcpStream, file: &str| -> Value {
        let (_, body) = example_files()
            .into_iter()
            .find(|(name, _)| name == file)
            .unwrap();
        let response = exchange(s, &post_auction(&body));
        assert_eq!(response.status, 200, "{file}");
        response.json()["seatbid"][0]["bid"][0].clone()
    };
    let body = example_files()
        .into_iter()
        .find(|(name, _)| name == "banner-site.json")
        .unwrap()
        .1;
    let bid = bid_on(&mut s, "banner-site.json");
    let video = bid_on(&mut s, "video.json");
    let target = |url: &Value, price: &str| {
        url.as_str()
            .unwrap()
            .strip_prefix("http://pacer.test")
            .unwrap()
            .replace("${AUCTION_PRICE}", price)
    };
    // The README's notices are the bids' own URLs (the exchange fills in the clearing price: second price,
    // under the bid of 2), then the billing URL with a typo in the auction id.
    let notices = readme_notices();
    let targets: Vec<&str> = notices.iter().map(|(t, _)| t.as_str()).collect();
    let billing = target(&bid["burl"], "1.25");
    let typo = billing.replace("auction=ex-banner-site-0001", "auction=ex-banner-site-0002");
    assert_eq!(
        targets,
        [billing.as_str(), &target(&video["lurl"], ""), &typo],
        "examples/README.md's notice URLs"
    );
    for (target, answer) in &notices {
        let notice = exchange(&mut s, &get(target));
        let text = String::from_utf8_lossy(&notice.body).into_owned();
        match answer {
            NoticeAnswer::Json(json) => {
                assert_eq!((notice.status, &notice.json()), (200, json), "{target}")
            }
            NoticeAnswer::Refused(reason) => {
                assert_eq!(notice.status, 400, "{target}: {text}");
                assert!(text.starts_with(reason.as_str()), "{target}: {text}");
            }
        }
    }
    // The same auction and impression again (an exchange's retry): the ledger knows it, no second bid.
    // Coming a sync interval later, it also has the loop publish the billed spend to the admin view.
    settle();
    let again = exchange(&mut s, &post_auction(&body));
    assert_eq!(
        (again.status, again.header("x-tern-no-bid")),
        (204, Some("DuplicateImpression"))
    );
    // A CPM of 1.25 is 0.00125 per impression: 1,250 micros, and nothing is still reserved.
    let campaign = pacer.campaign(1);
    assert_eq!(
        (&campaign["spent_micros"], &campaign["reserved_micros"]),
        (&Value::from(1250), &Value::from(0)),
        "{campaign}"
    );
}
