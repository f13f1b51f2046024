use proptest::prelude::*;

use super::*;
use crate::coordinator::{Coordinator, CoordinatorConfig};
use crate::money::Usd;

const CAMPAIGN: CampaignId = CampaignId(7);

fn key(i: u64) -> ImpKey {
    ImpKey {
        auction_id: i,
        imp_id: 1,
    }
}

fn notice(kind: NoticeKind, i: u64, campaign: CampaignId, cpm_micros: u64) -> Notice<Usd> {
    Notice {
        kind,
        key: key(i),
        campaign,
        price: Cpm::from_micros(cpm_micros),
    }
}

fn funded(budget_units: u64) -> (Coordinator<Usd>, Ledger<Usd>) {
    let mut coordinator = Coordinator::new(CoordinatorConfig {
        loops: 1,
        slice_ppm: 1_000_000,
        min_slice_micros: 0,
        ..CoordinatorConfig::default()
    });
    coordinator.set_base_budget(CAMPAIGN, Micros::from_units(budget_units));
    let mut ledger = Ledger::new(LedgerConfig {
        reservation_ttl_ms: 100,
        forget_after_ms: 1_000,
        max_tracked: 1_000,
    });
    coordinator.sync(0, &mut ledger);
    (coordinator, ledger)
}

#[test]
fn bid_reserves_billing_settles_at_clearing_price() {
    let (_, mut ledger) = funded(1);
    // 2 USD CPM = 2000 micros per impression.
    ledger
        .reserve(0, key(1), CAMPAIGN, Cpm::from_micros(2_000_000))
        .unwrap();
    let slice = ledger.slice(CAMPAIGN).unwrap();
    assert_eq!((slice.reserved.micros(), slice.spent.micros()), (2000, 0));
    let billing = notice(NoticeKind::Billing, 1, CAMPAIGN, 1_500_000);
    assert_eq!(ledger.notice(1, &billing), NoticeStatus::Applied);
    let slice = ledger.slice(CAMPAIGN).unwrap();
    assert_eq!((slice.reserved.micros(), slice.spent.micros()), (0, 1500));
    assert_eq!(slice.available().micros(), 1_000_000 - 1500);
    // Twice changes nothing; neither does a loss after the billing.
    assert_eq!(ledger.notice(2, &billing), NoticeStatus::Duplicate);
    assert_eq!(
        ledger.notice(2, &notice(NoticeKind::Loss, 1, CAMPAIGN, 0)),
        NoticeStatus::Duplicate
    );
    assert_eq!(ledger.slice(CAMPAIGN).unwrap().spent.micros(), 1500);
}

#[test]
fn win_shrinks_the_reservation_and_loss_or_timeout_release_it() {
    let (_, mut ledger) = funded(1);
    let price = Cpm::from_micros(3_000_000);
    ledger.reserve(0, key(1), CAMPAIGN, price).unwrap();
    ledger.reserve(0, key(2), CAMPAIGN, price).unwrap();
    ledger.reserve(50, key(3), CAMPAIGN, price).unwrap();
    assert_eq!(
        ledger.notice(1, &notice(NoticeKind::Win, 1, CAMPAIGN, 1_000_000)),
        NoticeStatus::Applied
    );
    assert_eq!(
        ledger.slice(CAMPAIGN).unwrap().reserved.micros(),
        1000 + 3000 + 3000
    );
    assert_eq!(
        ledger.notice(1, &notice(NoticeKind::Win, 1, CAMPAIGN, 500_000)),
        NoticeStatus::Duplicate
    );
    assert_eq!(
        ledger.notice(2, &notice(NoticeKind::Loss, 2, CAMPAIGN, 0)),
        NoticeStatus::Applied
    );
    assert_eq!(
        ledger.slice(CAMPAIGN).unwrap().reserved.micros(),
        1000 + 3000
    );
    // Key 1 (won, never billed) times out at 100; key 3 at 150.
    ledger.advance(100);
    assert_eq!(ledger.slice(CAMPAIGN).unwrap().reserved.micros(), 3000);
    ledger.advance(150);
    let slice = ledger.slice(CAMPAIGN).unwrap();
    assert_eq!(slice.reserved, Micros::ZERO);
    assert_eq!(
        slice.exposure.micros(),
        9000,
        "three released reservations can still be billed"
    );
    assert_eq!(ledger.stats().timed_out, 2);
}

#[test]
fn late_bill_after_timeout_is_counted_and_bounded_by_exposure() {
    let (mut coordinator, mut ledger) = funded(1);
    ledger
        .reserve(0, key(1), CAMPAIGN, Cpm::from_micros(4_000_000))
        .unwrap();
    ledger.advance(200);
    assert_eq!(ledger.exposure().micros(), 4000);
    let late = notice(NoticeKind::Billing, 1, CAMPAIGN, 3_000_000);
    assert_eq!(ledger.notice(300, &late), NoticeStatus::LateBilled);
    assert_eq!(ledger.notice(300, &late), NoticeStatus::Duplicate);
    let slice = ledger.slice(CAMPAIGN).unwrap();
    assert_eq!((slice.spent.micros(), slice.exposure.micros()), (3000, 0));
    // After the forget window the impression is unknown: a very late bill is not counted.
    ledger.advance(2_000);
    assert_eq!(ledger.notice(2_000, &late), NoticeStatus::Unknown);
    assert_eq!(ledger.tracked(), 0);
    coordinator.sync(0, &mut ledger);
    assert_eq!(coordinator.spent(CAMPAIGN).micros(), 3000);
}

#[test]
fn refusals_are_explicit() {
    let (_, mut ledger) = funded(1);
    let price = Cpm::from_micros(600_000_000); // 600 USD CPM = 0.6 USD per impression.
    ledger.reserve(0, key(1), CAMPAIGN, price).unwrap();
    assert_eq!(
        ledger.reserve(0, key(1), CAMPAIGN, Cpm::ZERO),
        Err(ReserveError::Duplicate)
    );
    assert_eq!(
        ledger.reserve(0, key(2), CAMPAIGN, price),
        Err(ReserveError::BudgetExhausted)
    );
    assert_eq!(
        ledger.reserve(0, key(3), CampaignId(99), Cpm::ZERO),
        Ok(()),
        "a free impression needs no budget"
    );
    assert_eq!(
        ledger.notice(0, &notice(NoticeKind::Billing, 1, CampaignId(99), 1)),
        NoticeStatus::CampaignMismatch
    );
    let mut tiny = Ledger::<Usd>::new(LedgerConfig {
        max_tracked: 1,
        ..LedgerConfig::default()
    });
    tiny.reserve(0, key(1), CAMPAIGN, Cpm::ZERO).unwrap();
    assert_eq!(
        tiny.reserve(0, key(2), CAMPAIGN, Cpm::ZERO),
        Err(ReserveError::TooManyTracked)
    );
}

#[test]
fn billing_above_the_bid_is_disputed_not_spent() {
    let (_, mut ledger) = funded(1);
    ledger
        .reserve(0, key(1), CAMPAIGN, Cpm::from_micros(1_000_000))
        .unwrap();
    ledger.notice(1, &notice(NoticeKind::Billing, 1, CAMPAIGN, 5_000_000));
    let slice = ledger.slice(CAMPAIGN).unwrap();
    assert_eq!(
        (slice.spent.micros(), slice.disputed.micros()),
        (1000, 4000)
    );
}

#[derive(Debug, Clone)]
enum Op {
    Reserve {
        loop_id: usize,
        imp: u64,
        campaign: u32,
        cpm: u64,
    },
    Notice {
        loop_id: usize,
        kind: u8,
        imp: u64,
        campaign: u32,
        cpm: u64,
    },
    Advance(u64),
    Sync(usize),
    SyncAll,
    Delta {
        campaign: u32,
        delta: i64,
    },
}

const LOOPS: usize = 3;

fn op(allow_cuts: bool) -> impl Strategy<Value = Op> {
    let delta = if allow_cuts {
        -200_000i64..400_000
    } else {
        0i64..400_000
    };
    prop_oneof![
        4 => (0..LOOPS, 0u64..40, 0u32..3, 0u64..20_000_000)
            .prop_map(|(loop_id, imp, campaign, cpm)| Op::Reserve { loop_id, imp, campaign, cpm }),
        4 => (0..LOOPS, 1u8..=3, 0u64..40, 0u32..3, 0u64..25_000_000)
            .prop_map(|(loop_id, kind, imp, campaign, cpm)| Op::Notice { loop_id, kind, imp, campaign, cpm }),
        1 => (0u64..80).prop_map(Op::Advance),
        2 => (0..LOOPS).prop_map(Op::Sync),
        1 => Just(Op::SyncAll),
        1 => (0u32..3, delta).prop_map(|(campaign, delta)| Op::Delta { campaign, delta }),
    ]
}

struct World {
    coordinator: Coordinator<Usd>,
    ledgers: Vec<Ledger<Usd>>,
    now: u64,
    /// Per (loop, campaign): spend counted by late bills, which may exceed the slice's grant.
    late: FastMap<(usize, u32), Micros<Usd>>,
    max_price: FastMap<(usize, u64), Micros<Usd>>,
}

impl World {
    fn new() -> World {
        let mut coordinator = Coordinator::new(CoordinatorConfig {
            loops: LOOPS,
            slice_ppm: 100_000,
            min_slice_micros: 1_000,
            ..CoordinatorConfig::default()
        });
        for c in 0..3 {
            coordinator.set_base_budget(CampaignId(c), Micros::from_micros(100_000));
        }
        let ledgers = (0..LOOPS)
            .map(|_| {
                Ledger::new(LedgerConfig {
                    reservation_ttl_ms: 50,
                    forget_after_ms: 200,
                    max_tracked: 1_000,
                })
            })
            .collect();
        World {
            coordinator,
            ledgers,
            now: 0,
            late: FastMap::default(),
            max_price: FastMap::default(),
        }
    }

    fn slices(&self, loop_id: usize) -> Vec<(CampaignId, [Micros<Usd>; 4])> {
        let mut v: Vec<_> = self.ledgers[loop_id]
            .slices()
            .map(|(id, s)| (id, [s.granted, s.reserved, s.spent, s.exposure]))
            .collect();
        v.sort_by_key(|s| s.0);
        v
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Reserve {
                loop_id,
                imp,
                campaign,
                cpm,
            } => {
                let price = Cpm::from_micros(cpm);
                if self.ledgers[loop_id]
                    .reserve(self.now, key(imp), CampaignId(campaign), price)
                    .is_ok()
                {
                    self.max_price
                        .insert((loop_id, imp), price.per_impression());
                }
            }
            Op::Notice {
                loop_id,
                kind,
                imp,
                campaign,
                cpm,
            } => {
                let kind =
                    [NoticeKind::Win, NoticeKind::Billing, NoticeKind::Loss][usize::from(kind - 1)];
                let n = notice(kind, imp, CampaignId(campaign), cpm);
                let status = self.ledgers[loop_id].notice(self.now, &n);
                if status == NoticeStatus::LateBilled {
                    let max = self.max_price[&(loop_id, imp)];
                    let charged = n.price.per_impression().min(max);
                    let late = self.late.entry((loop_id, campaign)).or_default();
                    *late = late.saturating_add(charged);
                }
                // Idempotence: the same notice again changes nothing.
                let before = self.slices(loop_id);
                let again = self.ledgers[loop_id].notice(self.now, &n);
                assert!(
                    matches!(
                        again,
                        NoticeStatus::Duplicate
                            | NoticeStatus::Unknown
                            | NoticeStatus::CampaignMismatch
                    ),
                    "replayed {n:?} gave {again:?}"
                );
                assert_eq!(
                    before,
                    self.slices(loop_id),
                    "a replayed notice changed the ledger"
                );
            }
            Op::Advance(ms) => {
                self.now += ms;
                for l in &mut self.ledgers {
                    l.advance(self.now);
                }
            }
            Op::Sync(loop_id) => self.coordinator.sync(loop_id, &mut self.ledgers[loop_id]),
            Op::SyncAll => {
                for (i, l) in self.ledgers.iter_mut().enumerate() {
                    self.coordinator.sync(i, l);
                }
            }
            Op::Delta { campaign, delta } => {
                self.coordinator.apply_delta(CampaignId(campaign), delta)
            }
        }
    }

    fn late(&self, campaign: u32) -> Micros<Usd> {
        (0..LOOPS)
            .filter_map(|l| self.late.get(&(l, campaign)).copied())
            .sum()
    }

    fn check(&self, op: &Op, no_cuts: bool) {
        for c in 0..3u32 {
            let id = CampaignId(c);
            let mut granted = Micros::ZERO;
            let mut in_use = Micros::ZERO;
            for (l, ledger) in self.ledgers.iter().enumerate() {
                let Some(s) = ledger.slice(id) else { continue };
                let late = self.late.get(&(l, c)).copied().unwrap_or_default();
                assert!(
                    s.reserved.saturating_add(s.spent) <= s.granted.saturating_add(late),
                    "loop {l} campaign {c}: reserved {:?} + spent {:?} > granted {:?} + late {late:?}",
                    s.reserved, s.spent, s.granted
                );
                granted = granted.saturating_add(s.granted);
                in_use = in_use.saturating_add(s.reserved).saturating_add(s.spent);
            }
            assert_eq!(
                granted,
                self.coordinator.granted(id),
                "the coordinator's books match the loops'"
            );
            let budget = self.coordinator.budget(id);
            if no_cuts {
                assert!(
                    in_use <= budget.saturating_add(self.late(c)),
                    "campaign {c}: reserved + spent {in_use:?} > budget {budget:?} + late bills"
                );
            } else if matches!(op, Op::SyncAll) {
                assert!(granted <= budget.max(in_use), "after a full sync, grants {granted:?} exceed both budget {budget:?} and use {in_use:?}");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Budgets only grow: reserved + spent never exceeds the budget, except by late bills.
    #[test]
    fn never_over_budget_without_cuts(ops in proptest::collection::vec(op(false), 1..300)) {
        let mut world = World::new();
        for op in &ops {
            world.apply(op);
            world.check(op, true);
        }
        // Everything in flight is eventually released: nothing leaks.
        world.apply(&Op::Advance(1_000));
        for l in &world.ledgers {
            prop_assert_eq!(l.tracked(), 0);
            for (_, s) in l.slices() {
                prop_assert_eq!(s.reserved, Micros::ZERO);
                prop_assert_eq!(s.exposure, Micros::ZERO);
            }
        }
    }

    /// With cuts too, every slice stays within its grant (plus late bills) and a full sync brings grants back
    /// within the budget or what is already in use.
    #[test]
    fn invariants_hold_under_cuts(ops in proptest::collection::vec(op(true), 1..300)) {
        let mut world = World::new();
        for op in &ops {
            world.apply(op);
            world.check(op, false);
        }
    }

    /// Budget deltas commute.
    #[test]
    fn delta_order_does_not_matter(deltas in proptest::collection::vec(-1_000_000i64..1_000_000, 0..20), seed in any::<u64>()) {
        let mut a = Coordinator::<Usd>::new(CoordinatorConfig::default());
        let mut b = Coordinator::<Usd>::new(CoordinatorConfig::default());
        a.set_base_budget(CAMPAIGN, Micros::from_units(1));
        b.set_base_budget(CAMPAIGN, Micros::from_units(1));
        let mut shuffled = deltas.clone();
        // A deterministic shuffle from the seed.
        let n = shuffled.len();
        for i in (1..n).rev() {
            let j = (seed.wrapping_mul(i as u64 + 1).rotate_left(17) % (i as u64 + 1)) as usize;
            shuffled.swap(i, j);
        }
        for d in &deltas { a.apply_delta(CAMPAIGN, *d); }
        for d in &shuffled { b.apply_delta(CAMPAIGN, *d); }
        prop_assert_eq!(a.budget(CAMPAIGN), b.budget(CAMPAIGN));
    }
}

#[test]
fn coordinator_shares_budget_across_loops_and_claws_back_on_cut() {
    let mut coordinator = Coordinator::<Usd>::new(CoordinatorConfig {
        loops: 2,
        slice_ppm: 250_000,
        min_slice_micros: 0,
        ..CoordinatorConfig::default()
    });
    coordinator.set_base_budget(CAMPAIGN, Micros::from_units(100));
    let mut ledgers = [
        Ledger::new(LedgerConfig::default()),
        Ledger::new(LedgerConfig::default()),
    ];
    for (i, l) in ledgers.iter_mut().enumerate() {
        coordinator.sync(i, l);
    }
    assert_eq!(
        ledgers[0].slice(CAMPAIGN).unwrap().granted,
        Micros::from_units(25)
    );
    assert_eq!(coordinator.unallocated(CAMPAIGN), Micros::from_units(50));
    // Loop 0 spends 10 (one impression at 10,000 USD CPM).
    ledgers[0]
        .reserve(0, key(1), CAMPAIGN, Cpm::from_units(10_000))
        .unwrap();
    ledgers[0].notice(0, &notice(NoticeKind::Billing, 1, CAMPAIGN, 10_000_000_000));
    coordinator.sync(0, &mut ledgers[0]);
    coordinator.sync(1, &mut ledgers[1]);
    assert_eq!(
        ledgers[1].slice(CAMPAIGN).unwrap().others_spent,
        Micros::from_units(10)
    );
    // Cut the budget to 20: loop 1 gives back all it holds, loop 0 keeps only what it spent.
    coordinator.apply_delta(CAMPAIGN, -80_000_000);
    coordinator.sync(1, &mut ledgers[1]);
    coordinator.sync(0, &mut ledgers[0]);
    coordinator.sync(1, &mut ledgers[1]);
    assert!(coordinator.granted(CAMPAIGN) <= Micros::from_units(20));
    let available: Micros<Usd> = ledgers
        .iter()
        .map(|l| l.slice(CAMPAIGN).unwrap().available())
        .sum();
    assert_eq!(available, Micros::from_units(10), "20 budget - 10 spent");
}

#[test]
fn notices_on_the_wrong_loop_are_forwarded_to_the_loop_holding_the_reservation() {
    let mut coordinator = Coordinator::<Usd>::new(CoordinatorConfig {
        loops: 3,
        slice_ppm: 100_000,
        ..CoordinatorConfig::default()
    });
    coordinator.set_base_budget(CAMPAIGN, Micros::from_units(10));
    let mut ledgers: Vec<Ledger<Usd>> = (0..3)
        .map(|_| Ledger::new(LedgerConfig::default()))
        .collect();
    for (i, l) in ledgers.iter_mut().enumerate() {
        coordinator.sync(i, l);
    }
    ledgers[2]
        .reserve(0, key(1), CAMPAIGN, Cpm::from_units(1_000))
        .unwrap();
    let billing = notice(NoticeKind::Billing, 1, CAMPAIGN, 500_000_000);
    let stray = notice(NoticeKind::Billing, 99, CAMPAIGN, 500_000_000);
    for n in [billing, stray] {
        assert_eq!(ledgers[0].notice(1, &n), NoticeStatus::Unknown);
        assert_eq!(coordinator.forward(0, 1, n), NoticeStatus::Forwarded);
    }
    coordinator.sync(1, &mut ledgers[1]);
    assert_eq!(coordinator.forward_stats().resolved, 0);
    coordinator.sync(2, &mut ledgers[2]);
    assert_eq!(ledgers[2].slice(CAMPAIGN).unwrap().spent.micros(), 500_000);
    assert_eq!(ledgers[2].slice(CAMPAIGN).unwrap().reserved, Micros::ZERO);
    let stats = coordinator.forward_stats();
    assert_eq!((stats.forwarded, stats.resolved, stats.unknown), (2, 1, 1));
    // With one loop there is nobody to forward to.
    let mut single = Coordinator::<Usd>::new(CoordinatorConfig::default());
    assert_eq!(single.forward(0, 1, stray), NoticeStatus::Unknown);
}
