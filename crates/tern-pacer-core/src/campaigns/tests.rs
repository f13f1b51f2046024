use super::*;
use crate::ads::{Ads, Creative, Format, DEFAULT_CATTAX};
use crate::fixtures::CAMPAIGNS_TOML as GOOD;
use crate::money::{Eur, Usd};

#[test]
fn parses_a_full_toml_file() {
    let snapshot = parse::<Usd>(GOOD, false, 3).unwrap();
    assert_eq!(snapshot.version, 3);
    let c = snapshot.campaign(CampaignId(1)).unwrap();
    assert_eq!(c.budget.micros(), 500_250_000);
    assert_eq!(c.max_cpm, Cpm::from_units(4));
    assert_eq!(
        c.flight,
        Flight {
            start_ms: 1000,
            end_ms: 2000
        }
    );
    assert_eq!(c.strategy, Strategy::Even(Even { lookahead_ms: 5 }));
    assert_eq!(c.targeting.hours, (1 << 18) | (1 << 19));
    assert_eq!(
        c.targeting.devices,
        (1 << Device::Phone as u8) | (1 << Device::Tv as u8)
    );
    assert_eq!(c.targeting.geos, vec![Geo(*b"US"), Geo(*b"FR")]);
    assert_eq!(c.targeting.sites, vec![7, 9]);
    assert_eq!(c.ads.seat.as_deref(), Some("seat-7"));
    assert_eq!(c.ads.deals, vec!["deal-a".to_string()]);
    assert_eq!(
        c.ads.creatives,
        vec![
            Creative {
                id: "rectangle".into(),
                format: Format::Banner,
                sizes: vec![(300, 250), (320, 50)],
                adomain: vec!["shoes.example".into()],
                cat: vec!["IAB18-3".into()],
                cattax: DEFAULT_CATTAX,
                attr: vec![3],
                bundle: Some("com.example.shoes".into()),
                adm: "<a href='https://shoes.example/'><img src='rectangle.png'></a>".into(),
            },
            Creative {
                id: "spot".into(),
                format: Format::Video,
                sizes: Vec::new(),
                adomain: vec!["shoes.example".into()],
                cat: Vec::new(),
                cattax: 2,
                attr: Vec::new(),
                bundle: None,
                adm: "<VAST version='4.2'><Ad id='spot'/></VAST>".into(),
            },
        ]
    );
    let c = snapshot.campaign(CampaignId(2)).unwrap();
    assert_eq!(c.targeting, Targeting::default());
    assert_eq!(c.ads, Ads::default());
    assert_eq!(
        c.strategy,
        Strategy::Throttle(Throttle {
            step_ppm: 5000,
            ..Throttle::default()
        })
    );
}

#[test]
fn parses_json_too() {
    let json = r#"{"currency": "EUR", "campaign": [{"id": 4, "budget": "1", "max_cpm": "2", "start_ms": 0,
        "end_ms": 5, "strategy": {"kind": "shaped", "curve": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,9]}}]}"#;
    let snapshot = parse::<Eur>(json, true, 1).unwrap();
    assert!(
        matches!(snapshot.campaign(CampaignId(4)).unwrap().strategy, Strategy::Shaped(s) if s.curve[23] == 9)
    );
}

#[test]
fn bad_files_are_refused_with_the_reason() {
    let cases = [
        (GOOD.replace("\"USD\"", "\"EUR\""), "currency"),
        (GOOD.replace("id = 2", "id = 1"), "appears twice"),
        (GOOD.replace("[18, 19]", "[24]"), "hour 24"),
        (GOOD.replace("\"tv\"", "\"fridge\""), "fridge"),
        (GOOD.replace("\"FR\"", "\"fr\""), "geo"),
        (GOOD.replace("\"500.25\"", "\"500.2500001\""), "budget"),
        (GOOD.replace("\"0.5\"", "\"-1\""), "max_cpm"),
        (GOOD.replace("end_ms = 10", "end_ms = 0"), "end_ms"),
        (
            GOOD.replace("kind = \"throttle\"", "kind = \"magic\""),
            "magic",
        ),
        (GOOD.replace("step_ppm", "stepppm"), "stepppm"),
        (
            GOOD.replace("max_cpm = \"4\"", "max_cpm = \"4\"\ncolour = 1"),
            "colour",
        ),
        ("currency = ".to_string(), "invalid"),
        (
            GOOD.replace("format = \"banner\"", "format = \"popup\""),
            "popup",
        ),
        (
            GOOD.replace("sizes = [[300, 250], [320, 50]]", ""),
            "needs its sizes",
        ),
        (GOOD.replace("[[300, 250],", "[[0, 250],"), "0x250 is empty"),
        (
            GOOD.replace("[\"Shoes.example\"]", "[]"),
            "adomain is empty",
        ),
        (
            GOOD.replace("\"Shoes.example\"", "\"https://shoes.example/\""),
            "not a domain",
        ),
        (GOOD.replace("attr = [3]", "attr = [18]"), "attr 18"),
        (
            GOOD.replace("id = \"spot\"", "id = \"rectangle\""),
            "appears twice",
        ),
        (
            GOOD.replace("[\"deal-a\"]", "[\"deal-a\", \"deal-a\"]"),
            "listed twice",
        ),
        (
            GOOD.replace("seat = \"seat-7\"", "seat = \"\""),
            "seat is empty",
        ),
        (GOOD.replace("cattax = 2", "cattax = 2\nsize = 1"), "size"),
        (
            GOOD.replace("<VAST version='4.2'>", "<div>"),
            "must be VAST",
        ),
        (
            GOOD.replace(
                "adm = \"<a href='https://shoes.example/'><img src='rectangle.png'></a>\"",
                "adm = \" \"",
            ),
            "adm (the ad markup) is empty",
        ),
    ];
    for (text, needle) in cases {
        let err = parse::<Usd>(&text, false, 1).unwrap_err();
        assert!(err.to_string().contains(needle), "{needle}: {err}");
    }
}

#[test]
fn throttle_and_pi_take_a_traffic_forecast() {
    let curve = (1..=24)
        .map(|h| h.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let text = GOOD.replace(
        "kind = \"throttle\", step_ppm = 5000",
        &format!(
            "kind = \"throttle\", curve = [{curve}], catch_up_ms = 600000, min_rate_ppm = 5000"
        ),
    );
    let snapshot = parse::<Usd>(&text, false, 1).unwrap();
    let want: [u32; 24] = std::array::from_fn(|h| h as u32 + 1);
    assert_eq!(
        snapshot.campaign(CampaignId(2)).unwrap().strategy,
        Strategy::Throttle(Throttle {
            curve: want,
            catch_up_ms: 600_000,
            min_rate_ppm: 5000,
            ..Throttle::default()
        })
    );
    let text = GOOD.replace(
        "kind = \"throttle\", step_ppm = 5000",
        &format!("kind = \"pi\", curve = [{curve}]"),
    );
    let snapshot = parse::<Usd>(&text, false, 1).unwrap();
    assert_eq!(
        snapshot.campaign(CampaignId(2)).unwrap().strategy,
        Strategy::Pi(Pi {
            curve: want,
            ..Pi::default()
        })
    );
    let short = GOOD.replace("step_ppm = 5000", "curve = [1, 2, 3]");
    let err = parse::<Usd>(&short, false, 1).unwrap_err();
    assert!(err.to_string().contains("length"), "{err}");
}

#[test]
fn a_strategy_displays_as_the_kind_a_campaigns_file_gives() {
    let curve = "[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]";
    for kind in ["hard-cap", "even", "shaped", "throttle", "pi"] {
        let extra = if kind == "shaped" {
            format!(", curve = {curve}")
        } else {
            String::new()
        };
        let text = format!(
            "currency = \"USD\"\n[[campaign]]\nid = 1\nbudget = \"1\"\nmax_cpm = \"1\"\nstart_ms = 0\n\
             end_ms = 5\nstrategy = {{ kind = \"{kind}\"{extra} }}\n"
        );
        let snapshot = parse::<Usd>(&text, false, 1).unwrap_or_else(|e| panic!("{kind}: {e}"));
        let strategy = &snapshot.campaign(CampaignId(1)).unwrap().strategy;
        assert_eq!(strategy.to_string(), kind);
    }
}

#[test]
fn every_strategy_refuses_a_field_it_does_not_have() {
    for kind in ["hard-cap", "even", "throttle", "pi"] {
        let text = format!(
            "currency = \"USD\"\n[[campaign]]\nid = 1\nbudget = \"1\"\nmax_cpm = \"1\"\nstart_ms = 0\n\
             end_ms = 5\nstrategy = {{ kind = \"{kind}\", lookahed_ms = 5 }}\n"
        );
        let err = parse::<Usd>(&text, false, 1).unwrap_err();
        assert!(
            err.to_string().contains("unknown field `lookahed_ms`"),
            "{kind}: {err}"
        );
    }
}
