//! The simulator: a day (or any span) of synthetic traffic replayed through the pacer's own decision code,
//! ledger and coordinator, against a second-price exchange whose notices come late, twice or never.
//!
//! Traffic follows a diurnal curve (requests per slot drawn from a Poisson law around the curve); each
//! request carries an audience draw, and the gateway matches it to the campaigns whose reach covers the draw.
//! The best competing bid and the floor are lognormal; the pacer wins when its price covers both and pays the
//! larger (second price). The simulated loops are part of the model: each has its own pacer and its own
//! random stream, seeded from (seed, slot, loop), and they meet the coordinator only at slot boundaries, in
//! loop order. So the output depends on the seed and the number of loops, never on the number of threads
//! that run them.
//!
//! With [`SimConfig::placements`] set, each request also describes an OpenRTB impression (its slot, blocked
//! categories, advertisers and attributes, allowed seats, a deal) drawn from a [`PlacementLaw`] on a random
//! stream of its own, and a matched campaign becomes the pacer's candidate only if [`ads::fit`] lets it bid,
//! as in the OpenRTB front; the report counts, per campaign, what was filtered and why. Without it, the
//! campaigns' `ads` are not looked at and the run is what it was before placements existed.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::path::Path;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp, LogNormal, Poisson};

use tern_pacer_core::ads::{
    self, Ads, Creative, Deal, Filtered, Fit, Format, Placement, Size, Slot, DEFAULT_CATTAX,
};
use tern_pacer_core::coordinator::{Coordinator, CoordinatorConfig};
use tern_pacer_core::ledger::LedgerConfig;
use tern_pacer_core::money::{Cpm, Micros, Usd};
use tern_pacer_core::pacer::LoopPacer;
use tern_pacer_core::proto::{
    BidRequest, CampaignId, Candidate, Decision, Device, Geo, ImpKey, Notice, NoticeKind,
    RequestHeader,
};
use tern_pacer_core::snapshot::{Campaign, Flight, Snapshot, Targeting};
use tern_pacer_core::strategy::{Pacing, Strategy};

const HOUR_MS: u64 = 3_600_000;

/// A campaign in the simulation.
#[derive(Debug, Clone, PartialEq)]
pub struct SimCampaign {
    pub id: u32,
    pub budget: Micros<Usd>,
    /// Offsets from the simulation's start.
    pub flight_start_ms: u64,
    pub flight_end_ms: u64,
    pub max_cpm: Cpm<Usd>,
    /// The share of requests the gateway matches to this campaign: those whose audience draw (uniform in
    /// `0..1_000_000`) falls in `[from, to)`. Overlapping reaches make campaigns compete for requests.
    pub reach_ppm: (u32, u32),
    pub strategy: Strategy,
    /// Its creatives, seat and deals, checked against each request's placement when the run has
    /// [`SimConfig::placements`] (empty then: it may bid on nothing, as in the OpenRTB front). Without
    /// placements they are not looked at.
    pub ads: Ads,
}

/// Lognormal prices, in CPM micro-units: the median and the spread (sigma of the log).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PriceLaw {
    pub median_cpm_micros: u64,
    pub sigma: f64,
}

/// How the exchange's notices behave. Probabilities are in millionths.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NoticeLaw {
    /// A win is followed by a billing notice (else the impression was never rendered: nothing to pay).
    pub billing_ppm: u32,
    /// A win notice is sent.
    pub win_notice_ppm: u32,
    /// A loss notice is sent (else the reservation waits for its timeout).
    pub loss_notice_ppm: u32,
    /// A notice is delivered twice.
    pub duplicate_ppm: u32,
    /// Mean delay of a notice (exponential), capped at `max_delay_ms`.
    pub mean_delay_ms: u64,
    pub max_delay_ms: u64,
}

/// A list a share of requests carries: `items` on `ppm` millionths of them, nothing on the others.
#[derive(Debug, Clone, PartialEq)]
pub struct Sometimes<T> {
    pub ppm: u32,
    pub items: Vec<T>,
}

impl<T> Sometimes<T> {
    /// The list when a draw of `rng` says this request carries it, else nothing. Draws once either way.
    fn draw(&self, rng: &mut StdRng) -> &[T] {
        if chance(rng, self.ppm) {
            &self.items
        } else {
            &[]
        }
    }
}

/// The one slot an impression offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotKind {
    /// A banner of this size (`w`/`h`).
    Banner(Size),
    Video,
    Native,
}

/// A private-marketplace deal a share of impressions offer.
#[derive(Debug, Clone, PartialEq)]
pub struct DealLaw {
    pub id: String,
    /// Share of impressions offering it, in millionths.
    pub ppm: u32,
    /// Share of those sold in a private auction (`pmp.private_auction = 1`: deal bids only), in millionths.
    pub private_ppm: u32,
    /// Its floor, drawn for each impression offering it.
    pub floor: PriceLaw,
    /// Seats allowed on it (empty: any).
    pub wseat: Vec<String>,
}

/// How each request's OpenRTB placement is drawn. The open auction's floor is the request's floor
/// ([`SimConfig::floor`]); everything else is drawn here, independently for each request.
#[derive(Debug, Clone, PartialEq)]
pub struct PlacementLaw {
    /// The slot each impression offers, with its weight (relative; a zero total offers none).
    pub slots: Vec<(SlotKind, u32)>,
    /// Creative attributes (AdCOM) a share of banner slots block (`banner.battr`).
    pub banner_battr: Sometimes<u32>,
    /// Blocked content categories (`bcat`), in taxonomy 1 (IAB 1.0, the default `cattax`).
    pub bcat: Sometimes<String>,
    /// Blocked advertiser domains (`badv`).
    pub badv: Sometimes<String>,
    /// The only seats allowed to bid (`wseat`).
    pub wseat: Sometimes<String>,
    pub deal: Option<DealLaw>,
}

/// The deal [`PlacementLaw::example`] offers and [`SimConfig::example_with_placements`]'s hard-cap campaign
/// targets.
pub const EXAMPLE_DEAL: &str = "pmp-premium";

impl PlacementLaw {
    /// A mix of display and video traffic as a general exchange sends it; each restriction bites one or two
    /// of [`SimConfig::example_with_placements`]'s campaigns:
    /// - slots: 55% banner 300x250, 20% banner 728x90, 10% banner 320x50, 15% video;
    /// - 25% of banner slots block the attributes 3 (expandable, automatic) and 6 (in-banner video,
    ///   auto-play): campaign 4's rich-media rectangle is expandable;
    /// - 10% of requests block the categories IAB18 (Style & Fashion: campaign 3 is in IAB18-3), IAB25 and
    ///   IAB26 (non-standard and illegal content, in most block lists);
    /// - 5% block the advertiser `airline.example` (campaign 2's), as a publisher keeps a competitor off;
    /// - 10% admit only the seat `agency-a` (a publisher dealing with one buyer), which shuts out
    ///   `agency-b`'s campaigns 4 and 5;
    /// - 25% offer the deal [`EXAMPLE_DEAL`] to `agency-b`, 40% of those in a private auction (10% of all
    ///   impressions, where only deal bids count), its floor lognormal around 2.50 CPM (sigma 0.3: above the
    ///   campaigns' 4.00 on 5.9% of deals, the odds of a normal draw above ln(4 / 2.5) / 0.3).
    pub fn example() -> PlacementLaw {
        let strings = |items: &[&str]| items.iter().map(|s| s.to_string()).collect();
        PlacementLaw {
            slots: vec![
                (SlotKind::Banner((300, 250)), 550_000),
                (SlotKind::Banner((728, 90)), 200_000),
                (SlotKind::Banner((320, 50)), 100_000),
                (SlotKind::Video, 150_000),
            ],
            banner_battr: Sometimes {
                ppm: 250_000,
                items: vec![3, 6],
            },
            bcat: Sometimes {
                ppm: 100_000,
                items: strings(&["IAB18", "IAB25", "IAB26"]),
            },
            badv: Sometimes {
                ppm: 50_000,
                items: strings(&["airline.example"]),
            },
            wseat: Sometimes {
                ppm: 100_000,
                items: strings(&["agency-a"]),
            },
            deal: Some(DealLaw {
                id: EXAMPLE_DEAL.to_owned(),
                ppm: 250_000,
                private_ppm: 400_000,
                floor: PriceLaw {
                    median_cpm_micros: 2_500_000,
                    sigma: 0.3,
                },
                wseat: strings(&["agency-b"]),
            }),
        }
    }

    /// Draws one impression's placement, `deal_floor` being the law of [`DealLaw::floor`]: always the same
    /// number of draws from `rng`, so one request's outcome does not shift the next one's.
    fn draw(&self, rng: &mut StdRng, deal_floor: Option<&LogNormal<f64>>) -> PlacementDraw<'_> {
        let total: u64 = self.slots.iter().map(|(_, w)| u64::from(*w)).sum();
        let mut pick = if total == 0 {
            0
        } else {
            rng.random_range(0..total)
        };
        let slot = self
            .slots
            .iter()
            .map(|(kind, w)| (kind, u64::from(*w)))
            .find_map(|(kind, w)| {
                if pick < w {
                    Some(kind)
                } else {
                    pick -= w;
                    None
                }
            });
        let battr = self.banner_battr.draw(rng);
        let bcat = self.bcat.draw(rng);
        let badv = self.badv.draw(rng);
        let wseat = self.wseat.draw(rng);
        let deal = self
            .deal
            .as_ref()
            .zip(deal_floor)
            .and_then(|(law, deal_floor)| {
                let offered = chance(rng, law.ppm);
                let private = chance(rng, law.private_ppm);
                let floor = Cpm::from_micros(deal_floor.sample(rng) as u64);
                offered.then(|| {
                    let deal = Deal {
                        id: law.id.as_str(),
                        floor,
                        wseat: &law.wseat,
                        wadomain: &[],
                        fixed_price: false,
                    };
                    (deal, private)
                })
            });
        PlacementDraw {
            slot,
            battr,
            bcat,
            badv,
            wseat,
            deal,
        }
    }
}

/// One impression drawn from a [`PlacementLaw`], borrowing its lists; [`PlacementDraw::placement`] puts it
/// in the shape [`ads::fit`] reads.
struct PlacementDraw<'a> {
    slot: Option<&'a SlotKind>,
    battr: &'a [u32],
    bcat: &'a [String],
    badv: &'a [String],
    wseat: &'a [String],
    /// The deal, when offered, and whether the auction is private.
    deal: Option<(Deal<'a, Usd>, bool)>,
}

impl PlacementDraw<'_> {
    /// The placement as the OpenRTB front would build it from the request, with `floor` the open auction's.
    fn placement(&self, floor: Cpm<Usd>) -> Placement<'_, Usd> {
        let (mut banner, mut video, mut native) = (None, None, None);
        match self.slot {
            Some(SlotKind::Banner(size)) => {
                banner = Some(Slot {
                    sizes: std::slice::from_ref(size),
                    battr: self.battr,
                })
            }
            Some(SlotKind::Video) => video = Some(Slot::default()),
            Some(SlotKind::Native) => native = Some(Slot::default()),
            None => {}
        }
        Placement {
            banner,
            video,
            native,
            floor,
            bcat: self.bcat,
            cattax: DEFAULT_CATTAX,
            badv: self.badv,
            bapp: &[],
            wseat: self.wseat,
            bseat: &[],
            private_auction: self.deal.as_ref().is_some_and(|(_, private)| *private),
            deals: self
                .deal
                .as_ref()
                .map_or(&[], |(deal, _)| std::slice::from_ref(deal)),
        }
    }
}

/// How many impressions were kept from the pacer, per [`Filtered`] reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnfitCounts([u64; Filtered::ALL.len()]);

impl UnfitCounts {
    pub fn get(&self, reason: Filtered) -> u64 {
        self.0[reason as usize]
    }

    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// Every reason with its count, zeros included, in [`Filtered::ALL`]'s order.
    pub fn iter(&self) -> impl Iterator<Item = (Filtered, u64)> + '_ {
        Filtered::ALL
            .into_iter()
            .map(|reason| (reason, self.get(reason)))
    }

    fn add(&mut self, reason: Filtered) {
        self.0[reason as usize] += 1;
    }
}

impl std::ops::AddAssign<&UnfitCounts> for UnfitCounts {
    fn add_assign(&mut self, other: &UnfitCounts) {
        for (mine, theirs) in self.0.iter_mut().zip(other.0) {
            *mine += theirs;
        }
    }
}

/// Everything a run depends on.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    pub seed: u64,
    /// Unix milliseconds of the first slot (a UTC midnight gives a day that starts at hour 0).
    pub start_ms: u64,
    pub duration_ms: u64,
    /// Length of a slot: the unit of reporting, coordinator syncs and controller ticks.
    pub slot_ms: u64,
    /// Simulated I/O loops, each with its own ledger.
    pub loops: usize,
    /// Threads running the loops; does not change the output.
    pub threads: usize,
    /// Mean requests per slot (all loops) at the busiest hour of `diurnal`.
    pub peak_requests_per_slot: u32,
    /// Relative traffic per UTC hour.
    pub diurnal: [u32; 24],
    pub market: PriceLaw,
    pub floor: PriceLaw,
    pub notices: NoticeLaw,
    pub ledger: LedgerConfig,
    pub slice_ppm: u64,
    pub campaigns: Vec<SimCampaign>,
    /// Each request's OpenRTB placement, and the campaigns filtered by their `ads` against it; `None`:
    /// requests are matched by audience alone.
    pub placements: Option<PlacementLaw>,
}

/// A typical day of traffic: low at night, a plateau in the afternoon, the peak in the evening.
pub const DIURNAL: [u32; 24] = [
    40, 30, 22, 18, 16, 18, 26, 40, 55, 65, 72, 78, 82, 82, 80, 80, 82, 86, 92, 100, 100, 92, 75,
    55,
];

impl SimConfig {
    /// One day with five campaigns, one per strategy, on 4 loops. Each campaign's traffic could buy at least
    /// twice its budget over the day; the even one's could buy 1.5 times its even plan even in the night's
    /// trough (its plan ignores the diurnal curve, so that is what staying on it at all times takes).
    pub fn example(seed: u64) -> SimConfig {
        use tern_pacer_core::strategy::{Even, Pi, Shaped, Throttle};
        let day = 24 * HOUR_MS;
        let campaign = |id, units, reach_ppm, strategy| SimCampaign {
            id,
            budget: Micros::from_units(units),
            flight_start_ms: 0,
            flight_end_ms: day,
            max_cpm: Cpm::from_units(4),
            reach_ppm,
            strategy,
            ads: Ads::default(),
        };
        SimConfig {
            seed,
            start_ms: 1_700_006_400_000,
            duration_ms: day,
            slot_ms: 60_000,
            loops: 4,
            threads: 1,
            peak_requests_per_slot: 400,
            diurnal: DIURNAL,
            market: PriceLaw {
                median_cpm_micros: 1_500_000,
                sigma: 0.5,
            },
            floor: PriceLaw {
                median_cpm_micros: 500_000,
                sigma: 0.5,
            },
            notices: NoticeLaw {
                billing_ppm: 950_000,
                win_notice_ppm: 900_000,
                loss_notice_ppm: 700_000,
                duplicate_ppm: 50_000,
                mean_delay_ms: 2_000,
                max_delay_ms: 60_000,
            },
            ledger: LedgerConfig {
                reservation_ttl_ms: 90_000,
                forget_after_ms: 600_000,
                max_tracked: 1_000_000,
            },
            slice_ppm: 2_000,
            campaigns: vec![
                campaign(1, 20, (0, 300_000), Strategy::Even(Even::default())),
                campaign(
                    2,
                    40,
                    (300_000, 500_000),
                    Strategy::Shaped(Shaped {
                        curve: DIURNAL,
                        lookahead_ms: 60_000,
                    }),
                ),
                campaign(
                    3,
                    40,
                    (500_000, 700_000),
                    Strategy::Throttle(Throttle {
                        curve: DIURNAL,
                        ..Throttle::default()
                    }),
                ),
                campaign(
                    4,
                    40,
                    (700_000, 900_000),
                    Strategy::Pi(Pi {
                        curve: DIURNAL,
                        ..Pi::default()
                    }),
                ),
                campaign(5, 15, (850_000, 1_000_000), Strategy::HardCap),
            ],
            placements: None,
        }
    }

    /// [`SimConfig::example`] with OpenRTB placements drawn from [`PlacementLaw::example`], and creatives,
    /// seats and a deal for its campaigns (the slots and restrictions each one meets are in the law's
    /// description):
    /// 1. `even`: banners 300x250 and 728x90 of `grocer.example` (IAB8, Food & Drink), seat `agency-a`;
    /// 2. `shaped`: banners 300x250 and 320x50 and a video of `airline.example` (IAB20, Travel), `agency-a`;
    /// 3. `throttle`: banners of all three sizes of `fashion.example` (IAB18-3, Fashion), `agency-a`;
    /// 4. `pi`: an expandable (attribute 3) 300x250 banner and a video of `cars.example` (IAB2, Automotive),
    ///    seat `agency-b`;
    /// 5. `hard-cap`: a 300x250 banner and a video of `bank.example` (IAB13, Personal Finance), seat
    ///    `agency-b`, bidding only through the deal [`EXAMPLE_DEAL`].
    pub fn example_with_placements(seed: u64) -> SimConfig {
        let creative =
            |id: &str, format, sizes: &[Size], adomain: &str, cat: &str, attr: &[u32]| Creative {
                id: id.to_owned(),
                format,
                sizes: sizes.to_vec(),
                adomain: vec![adomain.to_owned()],
                cat: vec![cat.to_owned()],
                cattax: DEFAULT_CATTAX,
                attr: attr.to_vec(),
                bundle: None,
                // The simulator makes no BidResponse; the markup only has to be of the right kind.
                adm: match format {
                    Format::Video => format!("<VAST version=\"4.2\"><Ad id=\"{id}\"/></VAST>"),
                    Format::Native => "{\"native\":{\"assets\":[]}}".to_owned(),
                    Format::Banner => format!("<div id=\"{id}\"></div>"),
                },
            };
        let ads = |creatives, seat: &str, deals: &[&str]| Ads {
            creatives,
            seat: Some(seat.to_owned()),
            deals: deals.iter().map(|d| d.to_string()).collect(),
        };
        let (banner, video) = (Format::Banner, Format::Video);
        let mut cfg = SimConfig::example(seed);
        let all_ads = [
            ads(
                vec![creative(
                    "grocer-display",
                    banner,
                    &[(300, 250), (728, 90)],
                    "grocer.example",
                    "IAB8",
                    &[],
                )],
                "agency-a",
                &[],
            ),
            ads(
                vec![
                    creative(
                        "airline-display",
                        banner,
                        &[(300, 250), (320, 50)],
                        "airline.example",
                        "IAB20",
                        &[],
                    ),
                    creative("airline-video", video, &[], "airline.example", "IAB20", &[]),
                ],
                "agency-a",
                &[],
            ),
            ads(
                vec![creative(
                    "fashion-display",
                    banner,
                    &[(300, 250), (728, 90), (320, 50)],
                    "fashion.example",
                    "IAB18-3",
                    &[],
                )],
                "agency-a",
                &[],
            ),
            ads(
                vec![
                    creative(
                        "cars-expandable",
                        banner,
                        &[(300, 250)],
                        "cars.example",
                        "IAB2",
                        &[3],
                    ),
                    creative("cars-video", video, &[], "cars.example", "IAB2", &[]),
                ],
                "agency-b",
                &[],
            ),
            ads(
                vec![
                    creative(
                        "bank-display",
                        banner,
                        &[(300, 250)],
                        "bank.example",
                        "IAB13",
                        &[],
                    ),
                    creative("bank-video", video, &[], "bank.example", "IAB13", &[]),
                ],
                "agency-b",
                &[EXAMPLE_DEAL],
            ),
        ];
        for (campaign, ads) in cfg.campaigns.iter_mut().zip(all_ads) {
            campaign.ads = ads;
        }
        cfg.placements = Some(PlacementLaw::example());
        cfg
    }
}

/// The `peak_requests_per_slot` that gives [`SimConfig::example`]'s 40.00 campaigns (`shaped`, `throttle`,
/// `pi`) about `supply` times their budget: supply grows in proportion to traffic, and 200 gives 1.40-1.44x
/// over seeds 1-10 (the `supply` column of the report is the measure).
pub fn peak_requests_for_supply(supply: f64) -> u32 {
    (supply * 200.0 / 1.4).round() as u32
}

/// What happened to one campaign.
#[derive(Debug, Clone, PartialEq)]
pub struct CampaignReport {
    pub id: u32,
    pub strategy: &'static str,
    pub budget: Micros<Usd>,
    pub spent: Micros<Usd>,
    /// Spent beyond the budget.
    pub overspend: Micros<Usd>,
    /// What the campaign could have bought at its maximum bid from the requests matched to it while its
    /// flight ran (at the clearing prices it would have paid).
    pub supply: Micros<Usd>,
    /// With placements: the impressions matched to the campaign that it could not bid on, by reason (its
    /// supply counts none of them).
    pub filtered: Option<UnfitCounts>,
    pub delivery_pct: f64,
    /// The largest gap between cumulative spend and plan at a slot boundary, in % of the budget.
    pub max_gap_pct: f64,
    /// Root mean square of (spend − plan) per slot, in % of the mean planned spend per slot.
    pub slot_error_pct: f64,
    /// Cumulative spend and plan at the end of each slot.
    pub spent_by_slot: Vec<u64>,
    pub plan_by_slot: Vec<u64>,
}

/// What a run produced.
#[derive(Debug, Clone, PartialEq)]
pub struct SimReport {
    pub slot_ms: u64,
    pub requests: u64,
    pub bids: u64,
    pub wins: u64,
    pub notices: u64,
    pub late_billed: u64,
    /// What the exchange billed: the ledgers' total spend must equal it (nothing lost or counted twice).
    pub exchange_billed: Micros<Usd>,
    pub campaigns: Vec<CampaignReport>,
}

impl fmt::Display for SimReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "requests {}  bids {}  wins {}  notices {}  late bills {}  billed by the exchange {:.2}",
            self.requests,
            self.bids,
            self.wins,
            self.notices,
            self.late_billed,
            self.exchange_billed.micros() as f64 / 1e6
        )?;
        writeln!(
            f,
            "{:>4} {:<9} {:>12} {:>12} {:>9} {:>10} {:>7} {:>9} {:>10}",
            "id",
            "strategy",
            "budget",
            "spent",
            "delivery",
            "overspend",
            "supply",
            "max gap",
            "slot err"
        )?;
        for c in &self.campaigns {
            writeln!(
                f,
                "{:>4} {:<9} {:>12.2} {:>12.2} {:>8.2}% {:>10.2} {:>6.1}x {:>8.2}% {:>9.1}%",
                c.id,
                c.strategy,
                c.budget.micros() as f64 / 1e6,
                c.spent.micros() as f64 / 1e6,
                c.delivery_pct,
                c.overspend.micros() as f64 / 1e6,
                c.supply.micros() as f64 / c.budget.micros().max(1) as f64,
                c.max_gap_pct,
                c.slot_error_pct,
            )?;
        }
        let Some(total) = self.filtered() else {
            return Ok(());
        };
        // One column per reason that occurred, each as wide as its name.
        let reasons: Vec<Filtered> = total
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(reason, _)| reason)
            .collect();
        write!(f, "filtered (why)\n{:>4} {:<9}", "id", "strategy")?;
        for reason in &reasons {
            write!(f, " {}", reason.name())?;
        }
        writeln!(f, " {:>9}", "total")?;
        let row = |f: &mut fmt::Formatter<'_>, id: &str, strategy: &str, counts: &UnfitCounts| {
            write!(f, "{id:>4} {strategy:<9}")?;
            for reason in &reasons {
                write!(
                    f,
                    " {:>width$}",
                    counts.get(*reason),
                    width = reason.name().len()
                )?;
            }
            writeln!(f, " {:>9}", counts.total())
        };
        for c in &self.campaigns {
            if let Some(filtered) = &c.filtered {
                row(f, &c.id.to_string(), c.strategy, filtered)?;
            }
        }
        row(f, "all", "", &total)
    }
}

impl SimReport {
    /// With placements: the impressions kept from the pacer, by reason, over every campaign (an impression
    /// matched to two campaigns counts for each it was kept from).
    pub fn filtered(&self) -> Option<UnfitCounts> {
        self.campaigns
            .iter()
            .filter_map(|c| c.filtered.as_ref())
            .fold(None, |total, filtered| {
                let mut total = total.unwrap_or_default();
                total += filtered;
                Some(total)
            })
    }
}

fn strategy_name(s: &Strategy) -> &'static str {
    s.name()
}

/// A notice on its way to a loop, ordered by arrival time, then by the order it was sent.
struct InFlight {
    at_ms: u64,
    seq: u64,
    notice: Notice<Usd>,
}

impl PartialEq for InFlight {
    fn eq(&self, other: &Self) -> bool {
        (self.at_ms, self.seq) == (other.at_ms, other.seq)
    }
}
impl Eq for InFlight {}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for InFlight {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at_ms, self.seq).cmp(&(other.at_ms, other.seq))
    }
}

#[derive(Default, Clone, Copy)]
struct LoopCounters {
    requests: u64,
    bids: u64,
    wins: u64,
    notices: u64,
    /// What the exchange billed, in micros (each billed impression once, however often its notice came).
    billed: u64,
}

/// One simulated loop: its pacer, the notices heading to it, and its share of the counters.
struct SimLoop {
    id: usize,
    pacer: LoopPacer<Usd>,
    inbox: BinaryHeap<Reverse<InFlight>>,
    seq: u64,
    counters: LoopCounters,
    /// Per campaign (in snapshot order): supply seen, in micros.
    supply: Vec<u64>,
    /// Per campaign (in snapshot order): impressions kept from the pacer by its placement, by reason.
    filtered: Vec<UnfitCounts>,
}

/// The last word of the seed of a loop's placement stream, after (seed, slot, loop): "placemnt" in ASCII, far
/// from any request index, the last word of an auction id.
const PLACEMENT_STREAM: u64 = u64::from_be_bytes(*b"placemnt");

/// Called with each bid the simulator makes on a placement: the placement, the campaign, the creative and
/// door it bid with ([`ads::fit`]'s answer) and its price. The tests check every bid through it.
type BidHook<'h> =
    &'h (dyn Fn(&Placement<'_, Usd>, &Campaign<Usd>, &Fit<'_, '_, Usd>, Cpm<Usd>) + Sync);

/// What every loop reads and nobody changes during a run: the settings, the random laws, the campaigns.
struct World<'a> {
    cfg: &'a SimConfig,
    market: LogNormal<f64>,
    floor: LogNormal<f64>,
    delay: Exp<f64>,
    snapshot: &'a Snapshot<Usd>,
    /// In `cfg.campaigns` order.
    campaigns: Vec<&'a Campaign<Usd>>,
    placements: Option<&'a PlacementLaw>,
    /// The law of the placements' deal floor, when they offer a deal.
    deal_floor: Option<LogNormal<f64>>,
    on_bid: BidHook<'a>,
}

fn log_normal(law: PriceLaw) -> LogNormal<f64> {
    let median = (law.median_cpm_micros.max(1)) as f64;
    LogNormal::new(median.ln(), law.sigma.max(0.0))
        .unwrap_or_else(|_| LogNormal::new(median.ln(), 0.0).expect("sigma 0 is a valid lognormal"))
}

impl SimLoop {
    fn deliver_until(&mut self, until_ms: u64) {
        while self
            .inbox
            .peek()
            .is_some_and(|Reverse(n)| n.at_ms <= until_ms)
        {
            let Reverse(n) = self.inbox.pop().expect("peeked");
            self.pacer.notice(n.at_ms, &n.notice);
            self.counters.notices += 1;
        }
    }

    fn send(&mut self, rng: &mut StdRng, world: &World<'_>, now_ms: u64, notice: Notice<Usd>) {
        let cfg = world.cfg;
        let copies = if chance(rng, cfg.notices.duplicate_ppm) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let delay = (world.delay.sample(rng) as u64).min(cfg.notices.max_delay_ms);
            self.seq += 1;
            self.inbox.push(Reverse(InFlight {
                at_ms: now_ms + delay,
                seq: self.seq,
                notice,
            }));
        }
    }

    fn run_slot(&mut self, world: &World<'_>, slot: u64, mean_requests: f64, t0: u64) {
        let (cfg, campaigns) = (world.cfg, &world.campaigns);
        let t1 = t0 + cfg.slot_ms;
        let mut rng = StdRng::seed_from_u64(mix(&[cfg.seed, slot, self.id as u64]));
        let n = if mean_requests > 0.0 {
            Poisson::new(mean_requests).map_or(0, |p| p.sample(&mut rng) as u64)
        } else {
            0
        };
        let mut times: Vec<u64> = (0..n).map(|_| rng.random_range(t0..t1)).collect();
        times.sort_unstable();
        // Placements come from a stream of their own, so that turning them on leaves every other draw (and
        // a run without them) as it was.
        let mut placement_rng = world.placements.map(|_| {
            StdRng::seed_from_u64(mix(&[cfg.seed, slot, self.id as u64, PLACEMENT_STREAM]))
        });
        let mut candidates: Vec<Candidate<Usd>> = Vec::with_capacity(campaigns.len());
        let mut candidate_bytes = Vec::new();
        for (i, &now) in times.iter().enumerate() {
            self.deliver_until(now);
            let audience = rng.random_range(0..1_000_000u32);
            let market = Cpm::<Usd>::from_micros(world.market.sample(&mut rng) as u64);
            let floor = Cpm::<Usd>::from_micros(world.floor.sample(&mut rng) as u64);
            let drawn = world
                .placements
                .zip(placement_rng.as_mut())
                .map(|(law, rng)| law.draw(rng, world.deal_floor.as_ref()));
            let placement = drawn.as_ref().map(|d| d.placement(floor));
            candidates.clear();
            // With a placement, the campaigns that may bid and the door each bids through, and the pacer's
            // floor: the lowest of their doors' floors.
            let mut fits: Vec<(CampaignId, Fit<'_, '_, Usd>)> = Vec::new();
            let mut pacer_floor = None::<Cpm<Usd>>;
            for (k, c) in campaigns.iter().enumerate() {
                let sim = &cfg.campaigns[k];
                if !(sim.reach_ppm.0..sim.reach_ppm.1).contains(&audience) {
                    continue;
                }
                // As the OpenRTB front: each fit met its door's floor, and the pacer gets the lowest.
                let door_floor = match &placement {
                    None => floor,
                    Some(placement) => match ads::fit(&c.ads, c.max_cpm, placement) {
                        Err(reason) => {
                            self.filtered[k].add(reason);
                            continue;
                        }
                        Ok(fit) => {
                            pacer_floor = Some(pacer_floor.map_or(fit.floor, |f| f.min(fit.floor)));
                            fits.push((c.id, fit));
                            fit.floor
                        }
                    },
                };
                candidates.push(Candidate {
                    campaign: c.id,
                    max_bid: c.max_cpm,
                });
                let clearing = market.max(door_floor);
                if c.flight.contains(now) && c.max_cpm >= clearing {
                    self.supply[k] += clearing.per_impression().micros();
                }
            }
            let header = RequestHeader {
                key: ImpKey {
                    auction_id: mix(&[cfg.seed, slot, self.id as u64, i as u64]),
                    imp_id: self.id as u32,
                },
                floor: pacer_floor.unwrap_or(floor),
                deadline_ms: now + 100,
                hour: ((now / HOUR_MS) % 24) as u8,
                device: Device::ALL[rng.random_range(0..Device::ALL.len())],
                geo: Geo(*b"US"),
                site_id: rng.random_range(0..1000),
            };
            tern_pacer_core::proto::candidates_to_bytes(&candidates, &mut candidate_bytes);
            let request = BidRequest {
                header,
                candidates: tern_pacer_core::proto::Candidates::from_bytes(&candidate_bytes),
            };
            self.counters.requests += 1;
            let Decision::Bid { campaign, price } =
                self.pacer.decide(world.snapshot, &request, now)
            else {
                continue;
            };
            // The exchange clears the bid's door: the open auction at the larger of the best competing bid
            // and the open floor, a deal at the larger of that bid and the deal's floor.
            let fit = fits
                .iter()
                .find(|(id, _)| *id == campaign)
                .map(|(_, fit)| fit);
            let clearing = market.max(fit.map_or(floor, |fit| fit.floor));
            if let (Some(placement), Some(fit)) = (&placement, fit) {
                let bidder = world.snapshot.campaign(campaign).expect("a candidate");
                (world.on_bid)(placement, bidder, fit, price);
            }
            self.counters.bids += 1;
            let notice = |kind, price| Notice {
                kind,
                key: header.key,
                campaign,
                price,
            };
            if price >= clearing {
                self.counters.wins += 1;
                if chance(&mut rng, cfg.notices.win_notice_ppm) {
                    self.send(&mut rng, world, now, notice(NoticeKind::Win, clearing));
                }
                if chance(&mut rng, cfg.notices.billing_ppm) {
                    self.counters.billed += clearing.per_impression().micros();
                    self.send(&mut rng, world, now, notice(NoticeKind::Billing, clearing));
                }
            } else if chance(&mut rng, cfg.notices.loss_notice_ppm) {
                self.send(&mut rng, world, now, notice(NoticeKind::Loss, Cpm::ZERO));
            }
        }
        self.deliver_until(t1 - 1);
        self.pacer.ledger.advance(t1);
    }
}

fn chance(rng: &mut StdRng, ppm: u32) -> bool {
    rng.random_range(0..1_000_000) < ppm
}

/// A 64-bit mix of several words (splitmix64 steps): seeds and auction ids from (seed, slot, loop, ...).
fn mix(words: &[u64]) -> u64 {
    words.iter().fold(0x853c_49e6_748f_ea9b, |acc, w| {
        let mut z = (acc ^ w).wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

/// Runs the simulation. Requests arrive for `duration_ms`; then slots continue without traffic until every
/// notice has arrived and every reservation has timed out, so the final spend is settled.
pub fn simulate(cfg: &SimConfig) -> SimReport {
    simulate_with_bid_hook(cfg, &|_, _, _, _| {})
}

/// [`simulate`], calling `on_bid` with every bid made on a placement.
fn simulate_with_bid_hook(cfg: &SimConfig, on_bid: BidHook<'_>) -> SimReport {
    let loops = cfg.loops.max(1);
    let slot_ms = cfg.slot_ms.max(1);
    let snapshot = Snapshot::new(
        1,
        cfg.campaigns.iter().map(|c| Campaign {
            id: CampaignId(c.id),
            budget: c.budget,
            flight: Flight {
                start_ms: cfg.start_ms + c.flight_start_ms,
                end_ms: cfg.start_ms + c.flight_end_ms,
            },
            max_cpm: c.max_cpm,
            targeting: Targeting::default(),
            strategy: c.strategy.clone(),
            ads: c.ads.clone(),
        }),
    );
    let campaigns: Vec<&Campaign<Usd>> = cfg
        .campaigns
        .iter()
        .map(|c| snapshot.campaign(CampaignId(c.id)).expect("just built"))
        .collect();
    let mut coordinator = Coordinator::new(CoordinatorConfig {
        loops,
        slice_ppm: cfg.slice_ppm,
        min_slice_micros: 10_000,
        ..CoordinatorConfig::default()
    });
    for c in &campaigns {
        coordinator.set_base_budget(c.id, c.budget);
    }
    let world = World {
        cfg,
        market: log_normal(cfg.market),
        floor: log_normal(cfg.floor),
        delay: Exp::new(1.0 / cfg.notices.mean_delay_ms.max(1) as f64).expect("positive rate"),
        snapshot: &snapshot,
        campaigns,
        placements: cfg.placements.as_ref(),
        deal_floor: cfg
            .placements
            .as_ref()
            .and_then(|law| law.deal.as_ref())
            .map(|deal| log_normal(deal.floor)),
        on_bid,
    };
    let campaigns = &world.campaigns;
    let mut sim_loops: Vec<SimLoop> = (0..loops)
        .map(|id| SimLoop {
            id,
            pacer: LoopPacer::new(cfg.ledger),
            inbox: BinaryHeap::new(),
            seq: 0,
            counters: LoopCounters::default(),
            supply: vec![0; campaigns.len()],
            filtered: vec![UnfitCounts::default(); campaigns.len()],
        })
        .collect();
    for l in &mut sim_loops {
        l.pacer.tick(&snapshot, cfg.start_ms);
        coordinator.sync(l.id, &mut l.pacer.ledger);
    }
    let peak = cfg.diurnal.iter().copied().max().unwrap_or(0).max(1) as f64;
    let traffic_slots = cfg.duration_ms.div_ceil(slot_ms);
    let drain_ms = cfg.notices.max_delay_ms + cfg.ledger.reservation_ttl_ms + slot_ms;
    let slots = traffic_slots + drain_ms.div_ceil(slot_ms);
    let threads = cfg.threads.clamp(1, loops);
    let mut spent_by_slot = vec![Vec::with_capacity(slots as usize); campaigns.len()];
    let mut plan_by_slot = vec![Vec::with_capacity(slots as usize); campaigns.len()];
    for slot in 0..slots {
        let t0 = cfg.start_ms + slot * slot_ms;
        let mean = if slot < traffic_slots {
            let hour = ((t0 / HOUR_MS) % 24) as usize;
            f64::from(cfg.peak_requests_per_slot) * f64::from(cfg.diurnal[hour])
                / peak
                / loops as f64
        } else {
            0.0
        };
        let run = |l: &mut SimLoop| l.run_slot(&world, slot, mean, t0);
        if threads == 1 {
            sim_loops.iter_mut().for_each(run);
        } else {
            let chunk = loops.div_ceil(threads);
            std::thread::scope(|s| {
                for part in sim_loops.chunks_mut(chunk) {
                    s.spawn(|| part.iter_mut().for_each(run));
                }
            });
        }
        let t1 = t0 + slot_ms;
        // Every loop reports its spend before any controller moves, then syncs again to read the others'
        // fresh figures. The service's loops sync every 10 ms, so at a control tick each sees the others at
        // most that stale; one pass in loop order would show loop 0 the others a whole slot late and the last
        // loop none, a difference the loops' controllers would integrate and drift apart on.
        for l in &mut sim_loops {
            coordinator.sync(l.id, &mut l.pacer.ledger);
        }
        for l in &mut sim_loops {
            coordinator.sync(l.id, &mut l.pacer.ledger);
            l.pacer.tick(&snapshot, t1);
        }
        for (k, c) in campaigns.iter().enumerate() {
            let spent: u64 = sim_loops
                .iter()
                .filter_map(|l| l.pacer.ledger.slice(c.id))
                .map(|s| s.spent.micros())
                .sum();
            spent_by_slot[k].push(spent);
            plan_by_slot[k].push(c.strategy.plan(&c.goal(), t1).micros());
        }
    }
    let reports = campaigns
        .iter()
        .enumerate()
        .map(|(k, c)| {
            let spent = Micros::from_micros(*spent_by_slot[k].last().unwrap_or(&0));
            let budget = c.budget.micros().max(1) as f64;
            let gaps = spent_by_slot[k].iter().zip(&plan_by_slot[k]);
            let max_gap = gaps.map(|(s, p)| s.abs_diff(*p)).max().unwrap_or(0);
            let flight_slots = (c.flight.duration_ms().div_ceil(slot_ms)).max(1) as f64;
            let mut previous = (0u64, 0u64);
            let squares: f64 = spent_by_slot[k]
                .iter()
                .zip(&plan_by_slot[k])
                .map(|(&s, &p)| {
                    let err = (s - previous.0) as f64 - (p - previous.1) as f64;
                    previous = (s, p);
                    err * err
                })
                .sum();
            let mean_slot_plan = budget / flight_slots;
            CampaignReport {
                id: c.id.0,
                strategy: strategy_name(&c.strategy),
                budget: c.budget,
                spent,
                overspend: spent.saturating_sub(c.budget),
                supply: Micros::from_micros(sim_loops.iter().map(|l| l.supply[k]).sum()),
                filtered: cfg.placements.as_ref().map(|_| {
                    let mut filtered = UnfitCounts::default();
                    for l in &sim_loops {
                        filtered += &l.filtered[k];
                    }
                    filtered
                }),
                delivery_pct: spent.micros() as f64 * 100.0 / budget,
                max_gap_pct: max_gap as f64 * 100.0 / budget,
                slot_error_pct: (squares / flight_slots).sqrt() * 100.0 / mean_slot_plan,
                spent_by_slot: std::mem::take(&mut spent_by_slot[k]),
                plan_by_slot: std::mem::take(&mut plan_by_slot[k]),
            }
        })
        .collect();
    let total = |f: fn(&LoopCounters) -> u64| sim_loops.iter().map(|l| f(&l.counters)).sum();
    SimReport {
        slot_ms,
        requests: total(|c| c.requests),
        bids: total(|c| c.bids),
        wins: total(|c| c.wins),
        notices: total(|c| c.notices),
        late_billed: sim_loops
            .iter()
            .map(|l| l.pacer.ledger.stats().late_billed)
            .sum(),
        exchange_billed: Micros::from_micros(total(|c| c.billed)),
        campaigns: reports,
    }
}

/// Draws cumulative spend against plan for every campaign, in % of its budget: a PNG file when the path ends in
/// `.png` (any case), SVG otherwise.
pub fn write_chart(report: &SimReport, path: &Path) -> anyhow::Result<()> {
    use plotters::coord::Shift;
    use plotters::prelude::*;
    const SIZE: (u32, u32) = (1100, 650);
    fn draw<DB: DrawingBackend>(
        root: DrawingArea<DB, Shift>,
        report: &SimReport,
    ) -> anyhow::Result<()>
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE)?;
        let slots = report
            .campaigns
            .iter()
            .map(|c| c.spent_by_slot.len())
            .max()
            .unwrap_or(0);
        let hours = slots as f64 * report.slot_ms as f64 / HOUR_MS as f64;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "Cumulative spend (solid) vs plan (dashed), % of budget",
                ("sans-serif", 22),
            )
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..hours.max(1.0), 0f64..110f64)?;
        chart
            .configure_mesh()
            .x_desc("hours")
            .y_desc("% of budget")
            .draw()?;
        let hour_of = |i: usize| (i + 1) as f64 * report.slot_ms as f64 / HOUR_MS as f64;
        for (n, c) in report.campaigns.iter().enumerate() {
            let color = Palette99::pick(n).to_rgba();
            let budget = c.budget.micros().max(1) as f64;
            let pct = |v: u64| v as f64 * 100.0 / budget;
            chart
                .draw_series(LineSeries::new(
                    c.spent_by_slot
                        .iter()
                        .enumerate()
                        .map(|(i, v)| (hour_of(i), pct(*v))),
                    color.stroke_width(2),
                ))?
                .label(format!("{} ({})", c.id, c.strategy))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart.draw_series(DashedLineSeries::new(
                c.plan_by_slot
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (hour_of(i), pct(*v))),
                6,
                4,
                color.stroke_width(1),
            ))?;
        }
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .position(SeriesLabelPosition::LowerRight)
            .draw()?;
        root.present()?;
        Ok(())
    }
    tern_chart::register_fonts();
    let png = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("png"));
    let drawn = if png {
        draw(BitMapBackend::new(path, SIZE).into_drawing_area(), report)
    } else {
        draw(SVGBackend::new(path, SIZE).into_drawing_area(), report)
    };
    drawn.map_err(|e| anyhow::anyhow!("drawing {}: {e:#}", path.display()))
}

#[cfg(test)]
mod tests;
