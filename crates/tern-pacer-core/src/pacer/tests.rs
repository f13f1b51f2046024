use tern_wire::Decode;

use super::*;
use crate::ads::Ads;
use crate::coordinator::{Coordinator, CoordinatorConfig};
use crate::money::{Micros, Usd};
use crate::proto::{
    decode_frame, decode_reply, encode_bids, encode_notices, Candidate, Device, Frame, Geo, ImpKey,
    Limits, NoticeKind, Reply, RequestHeader,
};
use crate::snapshot::{Campaign, Flight, Targeting};
use crate::strategy::{Even, Strategy};

fn campaign(id: u32, max_cpm_units: u64, strategy: Strategy) -> Campaign<Usd> {
    Campaign {
        id: CampaignId(id),
        budget: Micros::from_units(10),
        flight: Flight {
            start_ms: 1_000,
            end_ms: 1_000_000,
        },
        max_cpm: Cpm::from_units(max_cpm_units),
        targeting: Targeting {
            geos: vec![Geo(*b"FR")],
            ..Targeting::default()
        },
        strategy,
        ads: Ads::default(),
    }
}

fn header(auction_id: u64, floor_units: u64) -> RequestHeader<Usd> {
    RequestHeader {
        key: ImpKey {
            auction_id,
            imp_id: 0,
        },
        floor: Cpm::from_units(floor_units),
        deadline_ms: 900_000,
        hour: 3,
        device: Device::Phone,
        geo: Geo(*b"FR"),
        site_id: 1,
    }
}

fn candidates(list: &[(u32, u64)]) -> Vec<Candidate<Usd>> {
    list.iter()
        .map(|&(id, units)| Candidate {
            campaign: CampaignId(id),
            max_bid: Cpm::from_units(units),
        })
        .collect()
}

struct Setup {
    snapshot: Snapshot<Usd>,
    pacer: LoopPacer<Usd>,
}

fn setup(campaigns: Vec<Campaign<Usd>>) -> Setup {
    let snapshot = Snapshot::new(1, campaigns);
    let mut coordinator = Coordinator::new(CoordinatorConfig {
        loops: 1,
        slice_ppm: 1_000_000,
        min_slice_micros: 0,
        ..CoordinatorConfig::default()
    });
    for c in snapshot.campaigns() {
        coordinator.set_base_budget(c.id, c.budget);
    }
    let mut pacer = LoopPacer::new(LedgerConfig::default());
    coordinator.sync(0, &mut pacer.ledger);
    Setup { snapshot, pacer }
}

/// Encodes requests into a BIDS frame, runs it through the pacer's batch path and decodes the reply.
fn round_trip(
    s: &mut Setup,
    requests: &[(RequestHeader<Usd>, Vec<Candidate<Usd>>)],
    now_ms: u64,
) -> Vec<Decision<Usd>> {
    let mut frame = Vec::new();
    encode_bids(
        &mut frame,
        42,
        requests.iter().map(|(h, c)| (h, c.as_slice())),
    );
    let Decode::Frame {
        request: Frame::Bids(batch),
        ..
    } = decode_frame::<Usd>(&frame, &Limits::default())
    else {
        panic!("bad frame");
    };
    let mut out = Vec::new();
    s.pacer.decide_batch(&s.snapshot, &batch, now_ms, &mut out);
    match decode_reply::<Usd>(&out, &Limits::default()) {
        Decode::Frame {
            request:
                Reply::Decisions {
                    batch_id: 42,
                    decisions,
                },
            consumed,
        } if consumed == out.len() => decisions,
        other => panic!("bad reply {other:?}"),
    }
}

#[test]
fn highest_eligible_price_wins_and_reasons_say_how_far_others_got() {
    let mut s = setup(vec![
        campaign(1, 5, Strategy::HardCap),
        campaign(2, 3, Strategy::HardCap),
        campaign(3, 9, Strategy::HardCap),
    ]);
    let decisions = round_trip(
        &mut s,
        &[
            // Campaign 3 caps at 9 but the gateway allows 4; campaign 1 bids min(8, 5) = 5.
            (header(1, 1), candidates(&[(2, 8), (1, 8), (3, 4)])),
            // Only campaign 2, below the floor.
            (header(2, 4), candidates(&[(2, 8)])),
            // Unknown campaign and a below-floor one: the floor is the furthest reason.
            (header(3, 4), candidates(&[(99, 8), (2, 8)])),
            (header(4, 1), candidates(&[(99, 8)])),
            (header(5, 1), vec![]),
            // The same impression again.
            (header(1, 1), candidates(&[(1, 8)])),
            // Tie at 3: the lower id wins.
            (header(6, 1), candidates(&[(2, 3), (1, 3)])),
        ],
        2_000,
    );
    assert_eq!(
        decisions,
        vec![
            Decision::Bid {
                campaign: CampaignId(1),
                price: Cpm::from_units(5)
            },
            Decision::NoBid(Status::BelowFloor),
            Decision::NoBid(Status::BelowFloor),
            Decision::NoBid(Status::UnknownCampaign),
            Decision::NoBid(Status::NoCandidates),
            Decision::NoBid(Status::DuplicateImpression),
            Decision::Bid {
                campaign: CampaignId(1),
                price: Cpm::from_units(3)
            },
        ]
    );
    let slice = s.pacer.ledger.slice(CampaignId(1)).unwrap();
    assert_eq!(slice.reserved.micros(), 5_000 + 3_000);
}

#[test]
fn flight_targeting_and_deadline_are_enforced() {
    let mut s = setup(vec![campaign(1, 5, Strategy::HardCap)]);
    let mut us = header(2, 1);
    us.geo = Geo(*b"US");
    let decisions = round_trip(
        &mut s,
        &[
            (header(1, 1), candidates(&[(1, 5)])),
            (us, candidates(&[(1, 5)])),
        ],
        500,
    );
    assert_eq!(
        decisions,
        vec![
            Decision::NoBid(Status::FlightInactive),
            Decision::NoBid(Status::FlightInactive)
        ]
    );
    let decisions = round_trip(&mut s, &[(us, candidates(&[(1, 5)]))], 2_000);
    assert_eq!(decisions, vec![Decision::NoBid(Status::NotTargeted)]);
    let decisions = round_trip(&mut s, &[(header(3, 1), candidates(&[(1, 5)]))], 900_000);
    assert_eq!(decisions, vec![Decision::NoBid(Status::Expired)]);
}

#[test]
fn budget_runs_out_and_notices_free_it() {
    // 10 USD budget, bids of 2,500 USD CPM = 2.5 USD each: four fit.
    let mut s = setup(vec![campaign(1, 2_500, Strategy::HardCap)]);
    let requests: Vec<_> = (0..5)
        .map(|i| (header(i, 0), candidates(&[(1, 2_500)])))
        .collect();
    let decisions = round_trip(&mut s, &requests, 2_000);
    assert_eq!(
        decisions
            .iter()
            .filter(|d| matches!(d, Decision::Bid { .. }))
            .count(),
        4
    );
    assert_eq!(decisions[4], Decision::NoBid(Status::BudgetExhausted));
    // One loss and one billing at 1,000 CPM (1 USD): 2.5 + 1.5 come back, 1 is spent.
    let notices: [Notice<Usd>; 4] = [
        Notice {
            kind: NoticeKind::Loss,
            key: header(0, 0).key,
            campaign: CampaignId(1),
            price: Cpm::ZERO,
        },
        Notice {
            kind: NoticeKind::Billing,
            key: header(1, 0).key,
            campaign: CampaignId(1),
            price: Cpm::from_units(1_000),
        },
        Notice {
            kind: NoticeKind::Billing,
            key: header(1, 0).key,
            campaign: CampaignId(1),
            price: Cpm::from_units(1_000),
        },
        Notice {
            kind: NoticeKind::Billing,
            key: header(77, 0).key,
            campaign: CampaignId(1),
            price: Cpm::from_units(1_000),
        },
    ];
    let mut frame = Vec::new();
    encode_notices(&mut frame, &notices);
    let Decode::Frame {
        request: Frame::Notices(batch),
        ..
    } = decode_frame::<Usd>(&frame, &Limits::default())
    else {
        panic!("bad frame");
    };
    let mut out = Vec::new();
    s.pacer
        .apply_notices(&batch, 3_000, &mut out, |_| NoticeStatus::Unknown);
    let Decode::Frame {
        request: Reply::Acks(acks),
        ..
    } = decode_reply::<Usd>(&out, &Limits::default())
    else {
        panic!("bad acks");
    };
    assert_eq!(
        acks,
        vec![
            NoticeStatus::Applied,
            NoticeStatus::Applied,
            NoticeStatus::Duplicate,
            NoticeStatus::Unknown
        ]
    );
    let slice = s.pacer.ledger.slice(CampaignId(1)).unwrap();
    assert_eq!(
        (slice.spent, slice.available()),
        (Micros::from_units(1), Micros::from_units(4))
    );
}

#[test]
fn malformed_requests_are_answered_in_place() {
    let mut s = setup(vec![campaign(1, 5, Strategy::HardCap)]);
    let mut bad = header(2, 1);
    bad.hour = 24;
    let decisions = round_trip(
        &mut s,
        &[
            (header(1, 1), candidates(&[(1, 5)])),
            (bad, candidates(&[(1, 5)])),
            (header(3, 1), candidates(&[(1, 5)])),
        ],
        2_000,
    );
    assert!(matches!(decisions[0], Decision::Bid { .. }));
    assert_eq!(decisions[1], Decision::NoBid(Status::MalformedHour));
    assert!(matches!(decisions[2], Decision::Bid { .. }));
}

#[test]
fn even_pacing_holds_back_spend_ahead_of_plan() {
    let mut s = setup(vec![campaign(
        1,
        1_000,
        Strategy::Even(Even { lookahead_ms: 0 }),
    )]);
    // At 10% of the flight, the plan is ~1 USD: one 1,000 CPM (1 USD) impression does not fit yet...
    let t = 1_000 + 99_800;
    let decisions = round_trip(&mut s, &[(header(1, 0), candidates(&[(1, 1_000)]))], t);
    assert_eq!(decisions, vec![Decision::NoBid(Status::Paced)]);
    // ...a bit later it does, and the next one is held back again.
    let decisions = round_trip(
        &mut s,
        &[
            (header(2, 0), candidates(&[(1, 1_000)])),
            (header(3, 0), candidates(&[(1, 1_000)])),
        ],
        t + 200,
    );
    assert_eq!(
        decisions,
        vec![
            Decision::Bid {
                campaign: CampaignId(1),
                price: Cpm::from_units(1_000)
            },
            Decision::NoBid(Status::Paced)
        ]
    );
}

mod properties {
    use proptest::prelude::*;

    use super::*;
    use crate::proto::Candidates;
    use crate::strategy::Strategy;
    use proptest::strategy::Strategy as _;

    fn any_campaign() -> impl proptest::strategy::Strategy<Value = Campaign<Usd>> {
        (
            0u32..6,
            0u64..50,
            0u64..3_000,
            1u64..3_000,
            1u64..5_000_000,
            any::<u32>(),
            0usize..3,
        )
            .prop_map(|(id, budget_units, start, len, max_cpm, hours, strategy)| {
                Campaign {
                    id: CampaignId(id),
                    budget: Micros::from_units(budget_units),
                    flight: Flight {
                        start_ms: start,
                        end_ms: start + len,
                    },
                    max_cpm: Cpm::from_micros(max_cpm),
                    targeting: Targeting {
                        hours,
                        ..Targeting::default()
                    },
                    strategy: [
                        Strategy::HardCap,
                        Strategy::Even(Even { lookahead_ms: 100 }),
                        Strategy::HardCap,
                    ][strategy]
                        .clone(),
                    ads: Ads::default(),
                }
            })
    }

    proptest! {
        /// Whatever the configuration and the requests, a bid names a candidate that is configured, in
        /// flight and targeted, at a price within the gateway's and the campaign's caps and at or above the
        /// floor, and every loop slice stays within its grant.
        #[test]
        fn bids_respect_caps_floors_flights_and_budgets(
            campaigns in proptest::collection::vec(any_campaign(), 0..5),
            requests in proptest::collection::vec(
                (0u64..30, 0u64..4_000_000, 0u8..24, 0u64..4_000, proptest::collection::vec((0u32..7, 0u64..6_000_000), 0..5)),
                1..60,
            ),
        ) {
            let mut s = setup(campaigns);
            let mut bytes = Vec::new();
            for (auction_id, floor, hour, now_ms, cands) in requests {
                let header = RequestHeader::<Usd> {
                    key: ImpKey { auction_id, imp_id: 0 },
                    floor: Cpm::from_micros(floor),
                    deadline_ms: 4_000,
                    hour,
                    device: Device::Phone,
                    geo: Geo(*b"FR"),
                    site_id: 1,
                };
                let cands: Vec<Candidate<Usd>> = cands
                    .into_iter()
                    .map(|(id, max)| Candidate { campaign: CampaignId(id), max_bid: Cpm::from_micros(max) })
                    .collect();
                crate::proto::candidates_to_bytes(&cands, &mut bytes);
                let request = BidRequest { header, candidates: Candidates::from_bytes(&bytes) };
                let decision = s.pacer.decide(&s.snapshot, &request, now_ms);
                if let Decision::Bid { campaign, price } = decision {
                    let c = s.snapshot.campaign(campaign).expect("a configured campaign");
                    let offered = cands.iter().filter(|x| x.campaign == campaign).map(|x| x.max_bid).max();
                    prop_assert!(offered.is_some_and(|m| price <= m));
                    prop_assert!(price <= c.max_cpm && price >= header.floor && !price.is_zero());
                    prop_assert!(c.flight.contains(now_ms) && c.targeting.matches(&header));
                }
                for (_, slice) in s.pacer.ledger.slices() {
                    prop_assert!(slice.reserved.saturating_add(slice.spent) <= slice.granted);
                }
            }
        }
    }
}
