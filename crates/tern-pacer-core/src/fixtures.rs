//! Small configurations for the pacer's own tests, benches and fuzz targets (the pacer itself does not use
//! them): one campaign over an open flight, the three campaigns of the OpenRTB tests, and a loop pacer
//! funded by a coordinator, as a node's first sync leaves it.

use crate::ads::{Ads, Creative, Format, DEFAULT_CATTAX};
use crate::coordinator::{Coordinator, CoordinatorConfig};
use crate::ledger::LedgerConfig;
use crate::money::{Cpm, Currency, Micros};
use crate::pacer::LoopPacer;
use crate::proto::{CampaignId, Geo};
use crate::snapshot::{Campaign, Flight, Snapshot, Targeting};
use crate::strategy::Strategy;

/// Campaign `id` with `budget_units` to spend, bidding up to `max_cpm`, on any request (no targeting), from
/// time 0 to `u64::MAX / 2` (open, and far enough from overflow for any arithmetic on times).
pub fn campaign<C: Currency>(
    id: u32,
    budget_units: u64,
    max_cpm: Cpm<C>,
    strategy: Strategy,
) -> Campaign<C> {
    Campaign {
        id: CampaignId(id),
        budget: Micros::from_units(budget_units),
        flight: Flight {
            start_ms: 0,
            end_ms: u64::MAX / 2,
        },
        max_cpm,
        targeting: Targeting::default(),
        strategy,
        ads: Ads::default(),
    }
}

/// One banner creative of 300x250 and 728x90 for campaign `id`, advertising `advertiser{id}.example` in
/// category IAB3: enough for an OpenRTB banner impression of either size to take its bids.
pub fn banner_ads(id: u32) -> Ads {
    Ads {
        creatives: vec![Creative {
            id: format!("banner-{id}"),
            format: Format::Banner,
            sizes: vec![(300, 250), (728, 90)],
            adomain: vec![format!("advertiser{id}.example")],
            cat: vec!["IAB3".into()],
            cattax: DEFAULT_CATTAX,
            attr: Vec::new(),
            bundle: None,
            adm: format!(
                "<a href=\"https://advertiser{id}.example/\"><img src=\"banner.png\"></a>"
            ),
        }],
        seat: None,
        deals: Vec::new(),
    }
}

/// Campaigns 1, 2 and 3 with `budget_units` each: campaign `id` bids up to `id` units CPM, and campaign 3
/// wants the US only; `strategy(id)` paces each; each has [`banner_ads`].
pub fn three_campaigns<C: Currency>(
    budget_units: u64,
    strategy: impl Fn(u32) -> Strategy,
) -> Snapshot<C> {
    Snapshot::new(
        1,
        (1..=3).map(|id| Campaign {
            targeting: Targeting {
                geos: if id == 3 {
                    vec![Geo(*b"US")]
                } else {
                    Vec::new()
                },
                ..Targeting::default()
            },
            ads: banner_ads(id),
            ..campaign(
                id,
                budget_units,
                Cpm::from_units(u64::from(id)),
                strategy(id),
            )
        }),
    )
}

/// Hard cap for campaign 1, even pacing for the others.
pub fn hard_cap_then_even(id: u32) -> Strategy {
    if id == 1 {
        Strategy::HardCap
    } else {
        Strategy::Even(Default::default())
    }
}

/// A coordinator holding every campaign of `snapshot` at its budget.
pub fn coordinator<C: Currency>(snapshot: &Snapshot<C>) -> Coordinator<C> {
    let mut coordinator = Coordinator::new(CoordinatorConfig::default());
    for c in snapshot.campaigns() {
        coordinator.set_base_budget(c.id, c.budget);
    }
    coordinator
}

/// [`coordinator`], and loop 0's pacer after its first sync (its slices granted).
pub fn funded<C: Currency>(snapshot: &Snapshot<C>) -> (Coordinator<C>, LoopPacer<C>) {
    let mut coordinator = coordinator(snapshot);
    let mut pacer = LoopPacer::new(LedgerConfig::default());
    coordinator.sync(0, &mut pacer.ledger);
    (coordinator, pacer)
}

/// A campaigns file (TOML) with two campaigns of different strategies and targeting (the first with a seat,
/// a deal and two creatives), for the parser's and the watcher's tests.
pub const CAMPAIGNS_TOML: &str = r#"
currency = "USD"

[[campaign]]
id = 1
budget = "500.25"
max_cpm = "4"
start_ms = 1000
end_ms = 2000
strategy = { kind = "even", lookahead_ms = 5 }
targeting = { hours = [18, 19], devices = ["phone", "tv"], geos = ["US", "FR"], sites = [9, 7] }
seat = "seat-7"
deals = ["deal-a"]

[[campaign.creative]]
id = "rectangle"
format = "banner"
sizes = [[300, 250], [320, 50]]
adomain = ["Shoes.example"]
cat = ["IAB18-3"]
attr = [3]
bundle = "com.example.shoes"
adm = "<a href='https://shoes.example/'><img src='rectangle.png'></a>"

[[campaign.creative]]
id = "spot"
format = "video"
adomain = ["shoes.example"]
cattax = 2
adm = "<VAST version='4.2'><Ad id='spot'/></VAST>"

[[campaign]]
id = 2
budget = "10"
max_cpm = "0.5"
start_ms = 0
end_ms = 10
strategy = { kind = "throttle", step_ppm = 5000 }
"#;
