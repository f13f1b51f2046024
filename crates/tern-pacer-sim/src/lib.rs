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

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::path::Path;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp, LogNormal, Poisson};

use tern_pacer_core::coordinator::{Coordinator, CoordinatorConfig};
use tern_pacer_core::ledger::LedgerConfig;
use tern_pacer_core::money::{Cpm, Micros, Usd};
use tern_pacer_core::pacer::LoopPacer;
use tern_pacer_core::proto::{
    BidRequest, CampaignId, Candidate, Decision, Device, Geo, ImpKey, Notice, NoticeKind,
    RequestHeader,
};
use tern_pacer_core::ads::Ads;
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
        }
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
        Ok(())
    }
}

fn strategy_name(s: &Strategy) -> &'static str {
    match s {
        Strategy::HardCap => "hard-cap",
        Strategy::Even(_) => "even",
        Strategy::Shaped(_) => "shaped",
        Strategy::Throttle(_) => "throttle",
        Strategy::Pi(_) => "pi",
    }
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
}

/// What every loop reads and nobody changes during a run: the settings, the random laws, the campaigns.
struct World<'a> {
    cfg: &'a SimConfig,
    market: LogNormal<f64>,
    floor: LogNormal<f64>,
    delay: Exp<f64>,
    snapshot: &'a Snapshot<Usd>,
    /// In `cfg.campaigns` order.
    campaigns: Vec<&'a Campaign<Usd>>,
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
        let mut candidates: Vec<Candidate<Usd>> = Vec::with_capacity(campaigns.len());
        let mut candidate_bytes = Vec::new();
        for (i, &now) in times.iter().enumerate() {
            self.deliver_until(now);
            let audience = rng.random_range(0..1_000_000u32);
            let market = Cpm::<Usd>::from_micros(world.market.sample(&mut rng) as u64);
            let floor = Cpm::<Usd>::from_micros(world.floor.sample(&mut rng) as u64);
            let clearing = market.max(floor);
            candidates.clear();
            for (k, c) in campaigns.iter().enumerate() {
                let sim = &cfg.campaigns[k];
                if (sim.reach_ppm.0..sim.reach_ppm.1).contains(&audience) {
                    candidates.push(Candidate {
                        campaign: c.id,
                        max_bid: c.max_cpm,
                    });
                    if c.flight.contains(now) && c.max_cpm >= clearing {
                        self.supply[k] += clearing.per_impression().micros();
                    }
                }
            }
            let header = RequestHeader {
                key: ImpKey {
                    auction_id: mix(&[cfg.seed, slot, self.id as u64, i as u64]),
                    imp_id: self.id as u32,
                },
                floor,
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
            ads: Ads::default(),
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
