use super::*;
use proptest::prelude::*;
use tern_pacer_core::proto::{CampaignId, ImpKey, NoticeKind};
use tern_pacer_core::record::RECORD_HEADER;

fn key(auction_id: u64) -> ImpKey {
    ImpKey {
        auction_id,
        imp_id: 0,
    }
}

fn imp(auction_id: u64, campaign: u32, max: u64, state: ImpState) -> Record {
    Record::Imp(ImpRecord {
        key: key(auction_id),
        campaign: CampaignId(campaign),
        max,
        reserved_at_ms: 1_000,
        expires_ms: 2_000,
        state,
    })
}

fn any_state() -> impl Strategy<Value = ImpState> {
    prop_oneof![
        Just(ImpState::Reserved),
        any::<u64>().prop_map(|held| ImpState::Won { held }),
        Just(ImpState::Released),
        (any::<u64>(), any::<u64>())
            .prop_map(|(settled, disputed)| ImpState::Billed { settled, disputed }),
    ]
}

fn any_record() -> impl Strategy<Value = Record> {
    let key =
        (any::<u64>(), any::<u32>()).prop_map(|(auction_id, imp_id)| ImpKey { auction_id, imp_id });
    prop_oneof![
        (
            key.clone(),
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any_state()
        )
            .prop_map(|(key, c, max, reserved_at_ms, expires_ms, state)| {
                Record::Imp(ImpRecord {
                    key,
                    campaign: CampaignId(c),
                    max,
                    reserved_at_ms,
                    expires_ms,
                    state,
                })
            }),
        (
            prop_oneof![
                Just(NoticeKind::Win),
                Just(NoticeKind::Billing),
                Just(NoticeKind::Loss)
            ],
            key,
            any::<u32>(),
            any::<u64>(),
            any::<u64>()
        )
            .prop_map(|(kind, key, c, price, at_ms)| {
                Record::Forwarded(ForwardedNotice {
                    kind,
                    key,
                    campaign: CampaignId(c),
                    price,
                    at_ms,
                })
            }),
        (any::<u32>(), any::<u64>(), any::<u64>()).prop_map(|(c, spent, disputed)| {
            Record::Spent {
                campaign: CampaignId(c),
                spent,
                disputed,
            }
        }),
    ]
}

fn encode_all(records: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in records {
        encode_to_vec(r, &mut out);
    }
    out
}

proptest! {
    #[test]
    fn records_round_trip(records in proptest::collection::vec(any_record(), 0..20), slack in 0usize..100) {
        let mut bytes = encode_all(&records);
        // A segment's unwritten tail is zeros.
        bytes.resize(bytes.len() + slack, 0);
        prop_assert_eq!(decode_all(&bytes), (records, false));
    }

    #[test]
    fn a_cut_record_is_never_read(records in proptest::collection::vec(any_record(), 1..10), cut in 1usize..MAX_RECORD) {
        let bytes = encode_all(&records);
        let last_start = encode_all(&records[..records.len() - 1]).len();
        let cut_at = (bytes.len() - cut.min(bytes.len() - last_start - 1)).max(last_start + 1);
        // The kill stopped the copy at `cut_at`: the rest of the mapping is still zeros.
        let mut torn = bytes[..cut_at].to_vec();
        torn.resize(bytes.len() + MAX_RECORD, 0);
        let (read, _) = decode_all(&torn);
        // Unless all that was cut off was zeros (the record is then whole), the cut record is not read.
        let whole = torn[..bytes.len()] == bytes[..];
        let expected = if whole { records.len() } else { records.len() - 1 };
        prop_assert_eq!(&read[..], &records[..expected]);
    }

    #[test]
    fn a_flipped_bit_stops_reading_at_its_record(records in proptest::collection::vec(any_record(), 1..10), at in any::<prop::sample::Index>(), bit in 0u8..8) {
        let mut bytes = encode_all(&records);
        let i = at.index(bytes.len());
        bytes[i] ^= 1 << bit;
        let (read, torn) = decode_all(&bytes);
        // Every record read is one that was written, in order, and the damaged one is not among them.
        prop_assert!(read.len() < records.len());
        prop_assert_eq!(&read[..], &records[..read.len()]);
        prop_assert!(torn);
    }

    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let (records, _) = decode_all(&bytes);
        prop_assert!(records.len() <= bytes.len() / RECORD_HEADER_MIN);
    }

    /// Reading the records about one impression in any order gives the same state and the same spend.
    #[test]
    fn replay_does_not_depend_on_order(order in Just(vec![0usize, 1, 2, 3]).prop_shuffle()) {
        let records = [
            imp(7, 1, 900, ImpState::Reserved),
            imp(7, 1, 900, ImpState::Won { held: 800 }),
            imp(7, 1, 900, ImpState::Billed { settled: 700, disputed: 0 }),
            // A billing read twice (a stream replayed with the one it repeats) counts once.
            imp(7, 1, 900, ImpState::Billed { settled: 700, disputed: 0 }),
        ];
        let mut replay = Replay::default();
        for i in order {
            replay.apply(records[i]);
        }
        prop_assert_eq!(replay.spend_of(CampaignId(1)), Spend { spent: 700, disputed: 0 });
        prop_assert_eq!(replay.imp(key(7)).unwrap().state, ImpState::Billed { settled: 700, disputed: 0 });
    }
}

/// The smallest record: the shortest payload (a spend total) and its header.
const RECORD_HEADER_MIN: usize = 8 + 21;

#[test]
fn a_zero_header_after_a_written_payload_is_the_end() {
    // The writer fills the payload before the header: a kill between the two leaves a zero header.
    let mut bytes = encode_all(&[imp(1, 1, 10, ImpState::Reserved)]);
    let one = bytes.len();
    encode_to_vec(&imp(2, 1, 10, ImpState::Reserved), &mut bytes);
    bytes[one..one + 8].fill(0);
    assert_eq!(
        decode_all(&bytes),
        (vec![imp(1, 1, 10, ImpState::Reserved)], false)
    );
    bytes.truncate(one + 8);
    assert_eq!(
        decode_all(&bytes),
        (vec![imp(1, 1, 10, ImpState::Reserved)], false)
    );
}

#[test]
fn a_bad_checksum_is_invalid() {
    let mut bytes = encode_all(&[imp(1, 1, 10, ImpState::Released)]);
    bytes[4] ^= 0xff;
    assert_eq!(decode(&bytes), Decoded::Invalid);
}

#[test]
fn file_names_parse() {
    assert_eq!(
        parse_name("g0000000003-base.ckpt"),
        Some(FileName::Base { generation: 3 })
    );
    assert_eq!(
        parse_name("g0000000003-l0002-s0000000009.seg"),
        Some(FileName::Segment {
            generation: 3,
            loop_id: 2,
            seq: 9
        })
    );
    assert_eq!(
        parse_name("g0000000003-l0002-c0000000009.ckpt"),
        Some(FileName::LoopCheckpoint {
            generation: 3,
            loop_id: 2,
            seq: 9
        })
    );
    for other in [
        "campaigns.toml",
        "g1-base.tmp",
        "gx-l1-s1.seg",
        "g1-l1-s1-x.seg",
        "g1-l1-q1.seg",
    ] {
        assert_eq!(parse_name(other), None, "{other}");
    }
}

#[test]
fn forwarded_notices_apply_to_the_reservation_they_name() {
    let mut replay = Replay::default();
    let forwarded = |kind, auction_id, campaign, price| {
        Record::Forwarded(ForwardedNotice {
            kind,
            key: key(auction_id),
            campaign: CampaignId(campaign),
            price,
            at_ms: 1_500,
        })
    };
    // Read before the reservations they name: they wait for the end of the fold.
    replay.apply(forwarded(NoticeKind::Billing, 1, 1, 1_200));
    replay.apply(forwarded(NoticeKind::Loss, 2, 1, 0));
    replay.apply(forwarded(NoticeKind::Billing, 3, 9, 100));
    replay.apply(forwarded(NoticeKind::Billing, 4, 1, 100));
    for auction in 1..=3 {
        replay.apply(imp(auction, 1, 1_000, ImpState::Reserved));
    }
    replay.resolve_forwarded(false, 600_000);
    assert_eq!(
        replay.imp(key(1)).unwrap().state,
        ImpState::Billed {
            settled: 1_000,
            disputed: 200
        }
    );
    assert_eq!(replay.imp(key(2)).unwrap().state, ImpState::Released);
    // The wrong campaign changes nothing; an unknown impression waits for another stream...
    assert_eq!(replay.imp(key(3)).unwrap().state, ImpState::Reserved);
    assert_eq!(replay.pending_forwarded(), 1);
    // ...until the last pass, which drops it.
    replay.resolve_forwarded(true, 600_000);
    assert_eq!(replay.pending_forwarded(), 0);
    assert_eq!(
        replay.spend_of(CampaignId(1)),
        Spend {
            spent: 1_000,
            disputed: 200
        }
    );
}

#[test]
fn a_notice_after_its_reservation_was_forgotten_is_dropped() {
    let mut replay = Replay::default();
    replay.apply(imp(1, 1, 1_000, ImpState::Reserved));
    replay.apply(Record::Forwarded(ForwardedNotice {
        kind: NoticeKind::Billing,
        key: key(1),
        campaign: CampaignId(1),
        price: 500,
        // Reserved at 1,000 and forgotten 400 ms later by the ledger that got this notice.
        at_ms: 1_400,
    }));
    replay.resolve_forwarded(true, 400);
    assert_eq!(replay.imp(key(1)).unwrap().state, ImpState::Reserved);
    assert_eq!(replay.spend_of(CampaignId(1)).spent, 0);
}

#[test]
fn a_checkpoint_folds_back_to_the_same_state() {
    let mut replay = Replay::default();
    replay.apply(imp(1, 1, 1_000, ImpState::Reserved));
    replay.apply(imp(
        2,
        1,
        1_000,
        ImpState::Billed {
            settled: 600,
            disputed: 0,
        },
    ));
    replay.apply(imp(3, 2, 1_000, ImpState::Released));
    let mut again = Replay::default();
    for r in replay.checkpoint_records() {
        again.apply(r);
    }
    // And a segment that repeats a billing the checkpoint holds does not count it again.
    again.apply(imp(
        2,
        1,
        1_000,
        ImpState::Billed {
            settled: 600,
            disputed: 0,
        },
    ));
    assert_eq!(again.spend_of(CampaignId(1)).spent, 600);
    let states = |r: &Replay| {
        let mut s: Vec<_> = r.imps().map(|i| (i.key, i.state.rank())).collect();
        s.sort();
        s
    };
    assert_eq!(states(&replay), states(&again));
}

#[test]
fn forgetting_keeps_the_spend() {
    let mut replay = Replay::default();
    replay.apply(imp(
        1,
        1,
        1_000,
        ImpState::Billed {
            settled: 600,
            disputed: 0,
        },
    ));
    replay.forget(1_000 + 500, 500);
    assert_eq!(replay.imps().count(), 0);
    assert_eq!(replay.spend_of(CampaignId(1)).spent, 600);
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir =
            std::env::temp_dir().join(format!("tern-pacer-journal-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        TempDir(dir)
    }
    fn config(&self) -> JournalConfig {
        JournalConfig {
            sync_interval: Duration::from_millis(5),
            ..JournalConfig::new(self.0.clone())
        }
    }
    fn files(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn write(journal: &mut LoopJournal, record: Record) {
    journal.ensure_room().unwrap();
    journal.write(&record);
}

#[test]
fn recovery_reads_every_loop_and_starts_a_new_generation() {
    let dir = TempDir::new("recover");
    let (journal, recovered) = Journal::open(dir.config(), 1_000).unwrap();
    assert_eq!(recovered.stats.files, 0);
    assert_eq!(journal.generation(), 1);
    let mut a = journal.open_loop(0);
    let mut b = journal.open_loop(1);
    write(&mut a, imp(1, 1, 1_000, ImpState::Reserved));
    write(&mut b, imp(2, 1, 1_000, ImpState::Reserved));
    write(
        &mut a,
        imp(
            1,
            1,
            1_000,
            ImpState::Billed {
                settled: 400,
                disputed: 0,
            },
        ),
    );
    // Loop 0 tells of a billing for loop 1's reservation that it forwarded.
    write(
        &mut a,
        Record::Forwarded(ForwardedNotice {
            kind: NoticeKind::Billing,
            key: key(2),
            campaign: CampaignId(1),
            price: 300,
            at_ms: 1_100,
        }),
    );
    write(&mut b, imp(3, 2, 1_000, ImpState::Reserved));
    // Closing changes nothing on disk (the real kill is tests/crash.rs): the pages are in the page cache.
    drop((a, b, journal));

    let (journal, recovered) = Journal::open(dir.config(), 1_500).unwrap();
    assert_eq!(journal.generation(), 2);
    let r = &recovered.replay;
    assert_eq!(r.spend_of(CampaignId(1)).spent, 700);
    assert_eq!(r.imp(key(3)).unwrap().state, ImpState::Reserved);
    assert_eq!(recovered.stats.imps, 3);
    assert_eq!(recovered.stats.torn, 0);
    // Only the new generation's base checkpoint is left (plus the loops' segments once they open).
    assert_eq!(dir.files(), ["g0000000002-base.ckpt", "lock"]);
    drop(journal);

    // A third start reads the checkpoint alone and finds the same state.
    let (_journal, again) = Journal::open(dir.config(), 1_600).unwrap();
    assert_eq!(again.replay.spend_of(CampaignId(1)).spent, 700);
    assert_eq!(again.stats.imps, 3);
}

#[test]
fn a_torn_tail_is_ignored_and_reported() {
    let dir = TempDir::new("torn");
    let (journal, _) = Journal::open(dir.config(), 1_000).unwrap();
    let mut a = journal.open_loop(0);
    write(&mut a, imp(1, 1, 1_000, ImpState::Reserved));
    write(&mut a, imp(2, 1, 1_000, ImpState::Reserved));
    drop(a);
    drop(journal);
    // Damage the second record's payload, as a kill in the middle of the copy would.
    let segment = dir.0.join("g0000000001-l0000-s0000000001.seg");
    let mut bytes = fs::read(&segment).unwrap();
    let second = MAGIC.len() + encode_all(&[imp(1, 1, 1_000, ImpState::Reserved)]).len();
    bytes[second + RECORD_HEADER + 3] ^= 0x55;
    fs::write(&segment, &bytes).unwrap();
    let (_journal, recovered) = Journal::open(dir.config(), 1_000).unwrap();
    assert_eq!(recovered.stats.torn, 1);
    assert!(recovered.replay.imp(key(1)).is_some());
    assert!(recovered.replay.imp(key(2)).is_none());
}

#[test]
fn a_segment_created_but_never_written_is_empty() {
    let dir = TempDir::new("unwritten");
    drop(Journal::open(dir.config(), 1_000).unwrap());
    fs::write(dir.0.join("g0000000001-l0000-s0000000001.seg"), [0u8; 4096]).unwrap();
    fs::write(dir.0.join("g0000000001-l0001-s0000000001.seg"), []).unwrap();
    let (_journal, recovered) = Journal::open(dir.config(), 1_000).unwrap();
    assert_eq!((recovered.stats.files, recovered.stats.records), (3, 0));
}

#[test]
fn one_directory_serves_one_journal_at_a_time() {
    let dir = TempDir::new("lock");
    let first = Journal::open(dir.config(), 1_000).unwrap();
    let err = Journal::open(dir.config(), 1_000).err().unwrap();
    assert!(err.to_string().contains("in use"), "{err}");
    drop(first);
    Journal::open(dir.config(), 1_000).unwrap();
}

#[test]
fn files_of_a_generation_that_never_started_are_removed() {
    let dir = TempDir::new("stray");
    drop(Journal::open(dir.config(), 1_000).unwrap());
    // A segment of generation 2, whose base checkpoint does not exist: the next start is generation 2.
    let stray = dir.0.join("g0000000002-l0000-s0000000001.seg");
    fs::write(&stray, MAGIC).unwrap();
    let (journal, _) = Journal::open(dir.config(), 1_000).unwrap();
    assert_eq!(journal.generation(), 2);
    assert!(!stray.exists());
    // Its loops can make their segments.
    let mut a = journal.open_loop(0);
    write(&mut a, imp(1, 1, 10, ImpState::Reserved));
    assert!(stray.exists());
}

#[test]
fn a_file_that_is_not_a_journal_is_an_error() {
    let dir = TempDir::new("foreign");
    drop(Journal::open(dir.config(), 1_000).unwrap());
    fs::write(dir.0.join("g0000000001-l0000-s0000000001.seg"), b"hello").unwrap();
    let err = Journal::open(dir.config(), 1_000).err().unwrap();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
}

#[test]
fn segments_rotate_and_are_compacted_into_a_checkpoint() {
    let dir = TempDir::new("compact");
    let config = JournalConfig {
        segment_bytes: 64 << 10,
        compact_after_segments: 2,
        // The records' times are long past: compaction, which forgets as of the wall clock, keeps them.
        forget_after_ms: u64::MAX,
        ..dir.config()
    };
    let (journal, _) = Journal::open(config.clone(), 1_000).unwrap();
    let mut a = journal.open_loop(0);
    // About six segments' worth; every impression billed once, each at 10.
    let n = 6 * (64 << 10) / 49 / 2;
    for auction in 0..n {
        write(&mut a, imp(auction, 1, 1_000, ImpState::Reserved));
        write(
            &mut a,
            imp(
                auction,
                1,
                1_000,
                ImpState::Billed {
                    settled: 10,
                    disputed: 0,
                },
            ),
        );
    }
    // The lock, the base checkpoint, the loop's checkpoint, its active segment and perhaps a spare one, once
    // the background compaction has caught up with the writes (on a loaded machine it may take more than one
    // round: segments that closed during the first are compacted by the next).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while journal.stats().compactions.load(Ordering::Relaxed) < 1 || dir.files().len() > 5 {
        assert!(
            std::time::Instant::now() < deadline,
            "not compacted: {:?} {:?}",
            journal.stats(),
            dir.files()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(journal.stats().segments.load(Ordering::Relaxed) >= 6);
    let names = dir.files();
    assert!(names.iter().any(|n| n.contains("-l0000-c")), "{names:?}");
    drop((a, journal));
    let (_journal, recovered) = Journal::open(config, 1_000).unwrap();
    assert_eq!(recovered.replay.spend_of(CampaignId(1)).spent, 10 * n);
    assert_eq!(recovered.stats.imps as u64, n);
}

mod ledgers {
    use super::*;
    use tern_pacer_core::coordinator::{Coordinator, CoordinatorConfig};
    use tern_pacer_core::ledger::{Ledger, LedgerConfig, ReserveError};
    use tern_pacer_core::money::{Cpm, Micros, Usd};
    use tern_pacer_core::proto::{Notice, NoticeStatus};

    const NOW: u64 = 10_000_000;
    const TTL: u64 = 60_000;

    fn ledger() -> Ledger<Usd> {
        Ledger::new(LedgerConfig {
            reservation_ttl_ms: TTL,
            ..LedgerConfig::default()
        })
    }

    fn notice(kind: NoticeKind, auction_id: u64, cpm_units: u64) -> Notice<Usd> {
        Notice {
            kind,
            key: key(auction_id),
            campaign: CampaignId(1),
            price: Cpm::from_units(cpm_units),
        }
    }

    fn open(dir: &TempDir, now_ms: u64) -> Durable {
        Durable::open(dir.config(), now_ms).unwrap()
    }

    /// A ledger journaled on one loop, restored onto two: each holds its share, loop 0 the spend, the
    /// coordinator counts it all as granted, and TTLs run on from where they were.
    #[test]
    fn a_restored_ledger_holds_what_the_journal_says() {
        let dir = TempDir::new("restore");
        let durable = open(&dir, NOW);
        let mut before = ledger();
        durable.attach(&mut before, 0, 1, NOW);
        before.slice_mut(CampaignId(1)).granted = Micros::from_units(1_000);
        for auction in 1..=40 {
            // 2 USD CPM: 2,000 micros per impression; the last ten are reserved later than the others.
            let at = if auction > 30 { NOW + TTL / 2 } else { NOW };
            before
                .reserve(at, key(auction), CampaignId(1), Cpm::from_units(2))
                .unwrap();
        }
        let at = NOW + TTL / 2;
        for auction in 1..=10 {
            assert_eq!(
                before.notice(at, &notice(NoticeKind::Billing, auction, 1)),
                NoticeStatus::Applied
            );
        }
        for auction in 11..=15 {
            assert_eq!(
                before.notice(at, &notice(NoticeKind::Loss, auction, 0)),
                NoticeStatus::Applied
            );
        }
        for auction in 16..=20 {
            assert_eq!(
                before.notice(at, &notice(NoticeKind::Win, auction, 1)),
                NoticeStatus::Applied
            );
        }
        let slice = before.slice(CampaignId(1)).unwrap();
        let (spent, reserved) = (slice.spent, slice.reserved);
        assert_eq!(spent.micros(), 10 * 1_000);
        assert_eq!(reserved.micros(), 5 * 1_000 + 20 * 2_000);
        drop(durable);

        // Restarted after the first thirty reservations' TTL, before the last ten's.
        let later = NOW + TTL + 1;
        let durable = open(&dir, later);
        let mut coordinator = Coordinator::<Usd>::new(CoordinatorConfig {
            loops: 2,
            ..CoordinatorConfig::default()
        });
        coordinator.set_base_budget(CampaignId(1), Micros::from_units(1_000));
        durable.restore_granted(&mut coordinator);
        assert_eq!(
            coordinator.granted(CampaignId(1)),
            spent.saturating_add(reserved)
        );
        let mut loops = [ledger(), ledger()];
        for (id, l) in loops.iter_mut().enumerate() {
            durable.attach(l, id, 2, later);
        }
        let slices: Vec<_> = loops
            .iter()
            .map(|l| l.slice(CampaignId(1)).unwrap())
            .collect();
        assert_eq!(slices[0].spent, spent);
        assert_eq!(slices[1].spent, Micros::ZERO);
        // Only the ten late reservations are still held; granted stays what was held at the restart.
        let held: u64 = slices.iter().map(|s| s.reserved.micros()).sum();
        assert_eq!(held, 10 * 2_000);
        let granted: Micros<Usd> = slices.iter().map(|s| s.granted).sum();
        assert_eq!(granted, coordinator.granted(CampaignId(1)));
        // Every impression is on the loop `owner` names: its billing applies there, once.
        let owner_of = |auction| owner(key(auction), 2);
        let l = &mut loops[owner_of(35)];
        assert_eq!(
            l.notice(later, &notice(NoticeKind::Billing, 35, 2)),
            NoticeStatus::Applied
        );
        assert_eq!(
            l.notice(later, &notice(NoticeKind::Billing, 35, 2)),
            NoticeStatus::Duplicate
        );
        let l = &mut loops[owner_of(5)];
        assert_eq!(
            l.notice(later, &notice(NoticeKind::Billing, 5, 1)),
            NoticeStatus::Duplicate
        );
        // A reservation that timed out while the node was down is released: its bill comes late.
        let l = &mut loops[owner_of(25)];
        assert_eq!(
            l.notice(later, &notice(NoticeKind::Billing, 25, 2)),
            NoticeStatus::LateBilled
        );
        let l = &mut loops[owner_of(12)];
        assert_eq!(
            l.notice(later, &notice(NoticeKind::Loss, 12, 0)),
            NoticeStatus::Duplicate
        );
        assert_eq!(
            loops[owner_of(36) ^ 1].notice(later, &notice(NoticeKind::Billing, 36, 2)),
            NoticeStatus::Unknown
        );
    }

    /// With no segment to write to, a loop refuses bids and notices and changes nothing.
    #[test]
    fn a_ledger_that_cannot_journal_refuses() {
        let dir = TempDir::new("refuse");
        let durable = Durable::open(
            JournalConfig {
                segment_bytes: 64 << 10,
                ..dir.config()
            },
            NOW,
        )
        .unwrap();
        let mut l = ledger();
        durable.attach(&mut l, 0, 1, NOW);
        l.slice_mut(CampaignId(1)).granted = Micros::from_units(1_000_000);
        // The directory goes away: no new segment can be made, by the journal's thread or the loop.
        // (The journal's thread may be making a spare segment in it meanwhile: try again.)
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while let Err(e) = fs::remove_dir_all(&dir.0) {
            assert!(std::time::Instant::now() < deadline, "{e}");
        }
        let mut auction = 0;
        let refused = loop {
            auction += 1;
            assert!(auction < 10_000, "never refused");
            match l.reserve(NOW, key(auction), CampaignId(1), Cpm::from_units(1)) {
                Ok(()) => {}
                Err(e) => break e,
            }
        };
        assert_eq!(refused, ReserveError::JournalUnavailable);
        let slice = l.slice(CampaignId(1)).unwrap();
        assert_eq!(slice.reserved.micros(), (auction - 1) * 1_000);
        assert_eq!(
            l.notice(NOW, &notice(NoticeKind::Billing, 1, 1)),
            NoticeStatus::Refused
        );
        assert_eq!(l.slice(CampaignId(1)).unwrap().spent, Micros::ZERO);
        assert!(durable.journal().stats().errors.load(Ordering::Relaxed) >= 1);
    }
}

#[test]
fn recovery_stats_read_as_a_sentence() {
    let stats = RecoveryStats {
        generation: 3,
        files: 2,
        records: 120,
        torn: 1,
        imps: 1,
    };
    assert_eq!(
        stats.to_string(),
        "generation 3: 2 files, 120 records (1 file cut short by a torn or damaged record), \
         1 impression restored"
    );
    let clean = RecoveryStats {
        torn: 0,
        files: 1,
        records: 1,
        ..stats
    };
    assert_eq!(
        clean.to_string(),
        "generation 3: 1 file, 1 record, 1 impression restored"
    );
}

/// Waits up to 5 s for `done`, failing with `what`.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A journal whose directory goes away fails at every try, by its thread and by the loop; each kind of
/// failure is one warning however often it repeats, and its end one line once the directory is back.
#[test]
fn a_run_of_failures_is_one_warning_and_its_end_one_line() {
    let dir = TempDir::new("trouble");
    let (journal, _) = Journal::open(
        JournalConfig {
            segment_bytes: 64 << 10,
            ..dir.config()
        },
        1_000,
    )
    .unwrap();
    let stats = journal.stats();
    let mut a = journal.open_loop(0);
    wait_until("a spare segment is prepared", || {
        journal.shared.loops.lock()[0].spare.is_some()
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while let Err(e) = fs::remove_dir_all(&dir.0) {
        assert!(std::time::Instant::now() < deadline, "{e}");
    }
    // The spare takes the loop to its second segment; the third cannot be made.
    let mut auction = 0;
    loop {
        auction += 1;
        assert!(auction < 10_000, "the loop never needed a new segment");
        if a.ensure_room().is_err() {
            break;
        }
        a.write(&imp(auction, 1, 1_000, ImpState::Reserved));
    }
    for _ in 0..20 {
        assert!(a.ensure_room().is_err());
    }
    // The journal's thread fails to prepare the third segment at every tick meanwhile (a tick every 5 ms;
    // waited for, not slept on: a busy machine runs the thread when it can).
    wait_until("the thread's failures, twice", || {
        stats.errors.load(Ordering::Relaxed) >= 21 + 2
    });
    assert_eq!(
        stats.troubles.load(Ordering::Relaxed),
        2,
        "one warning for the thread's failures, one for the loop's"
    );
    assert_eq!(stats.recoveries.load(Ordering::Relaxed), 0);
    fs::create_dir_all(&dir.0).unwrap();
    wait_until("the loop makes room again", || a.ensure_room().is_ok());
    wait_until("both kinds of failure end", || {
        stats.recoveries.load(Ordering::Relaxed) == 2
    });
    a.write(&imp(auction, 1, 1_000, ImpState::Reserved));
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(stats.troubles.load(Ordering::Relaxed), 2);
    assert_eq!(stats.recoveries.load(Ordering::Relaxed), 2);
}
