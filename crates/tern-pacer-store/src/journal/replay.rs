//! Folding records into ledger state: the same code rebuilds the state at startup and compacts a loop's
//! closed segments into a checkpoint while serving.
//!
//! The fold does not depend on the order of records about one impression: a record for a later state
//! supersedes an earlier one and an earlier one arriving later is ignored, so the streams of several loops
//! (and of a previous run's checkpoint) can be read one after another. Spend is counted when an impression
//! first becomes billed, so a settlement read twice is counted once.

use tern_pacer_core::ledger::FastMap;
use tern_pacer_core::proto::{CampaignId, ImpKey, NoticeKind};

use tern_pacer_core::record::{ForwardedNotice, ImpRecord, ImpState, Record, Spend};

/// State rebuilt from records.
#[derive(Default)]
pub struct Replay {
    spend: FastMap<CampaignId, Spend>,
    imps: FastMap<ImpKey, ImpRecord>,
    /// Forwarded notices not applied yet: they apply once every stream has been read.
    forwarded: Vec<ForwardedNotice>,
}

impl Replay {
    pub fn apply(&mut self, record: Record) {
        match record {
            Record::Spent {
                campaign,
                spent,
                disputed,
            } => {
                let total = self.spend.entry(campaign).or_default();
                total.spent = total.spent.saturating_add(spent);
                total.disputed = total.disputed.saturating_add(disputed);
            }
            Record::Imp(imp) => self.apply_imp(imp),
            Record::Forwarded(notice) => self.forwarded.push(notice),
        }
    }

    fn apply_imp(&mut self, imp: ImpRecord) {
        if let Some(known) = self.imps.get(&imp.key) {
            if known.state.rank() >= imp.state.rank() {
                return;
            }
        }
        if let ImpState::Billed { settled, disputed } = imp.state {
            let total = self.spend.entry(imp.campaign).or_default();
            total.spent = total.spent.saturating_add(settled);
            total.disputed = total.disputed.saturating_add(disputed);
        }
        self.imps.insert(imp.key, imp);
    }

    /// Applies the forwarded notices whose reservation is known, as the holding loop's ledger would have;
    /// the others stay pending (their reservation may be in a stream not read yet) unless `final_pass`.
    /// A notice that came after the reservation was forgotten (`forget_after_ms`) is dropped, as the
    /// holding loop would have dropped it.
    pub fn resolve_forwarded(&mut self, final_pass: bool, forget_after_ms: u64) {
        let forwarded = std::mem::take(&mut self.forwarded);
        for notice in forwarded {
            let Some(&imp) = self.imps.get(&notice.key) else {
                if !final_pass {
                    self.forwarded.push(notice);
                }
                continue;
            };
            if imp.campaign != notice.campaign
                || notice.at_ms >= imp.reserved_at_ms.saturating_add(forget_after_ms)
            {
                continue;
            }
            let state = match (imp.state, notice.kind) {
                (ImpState::Reserved, NoticeKind::Win) => ImpState::Won {
                    held: notice.price.min(imp.max),
                },
                (ImpState::Reserved | ImpState::Won { .. }, NoticeKind::Loss) => ImpState::Released,
                (
                    ImpState::Reserved | ImpState::Won { .. } | ImpState::Released,
                    NoticeKind::Billing,
                ) => ImpState::Billed {
                    settled: notice.price.min(imp.max),
                    disputed: notice.price.saturating_sub(imp.max),
                },
                _ => continue,
            };
            self.apply_imp(ImpRecord { state, ..imp });
        }
    }

    /// Drops what a ledger would have forgotten by `now_ms` (its spend stays counted).
    pub fn forget(&mut self, now_ms: u64, forget_after_ms: u64) {
        self.imps
            .retain(|_, imp| imp.reserved_at_ms.saturating_add(forget_after_ms) > now_ms);
        self.forwarded
            .retain(|n| n.at_ms.saturating_add(forget_after_ms) > now_ms);
    }

    pub fn spend(&self) -> impl Iterator<Item = (CampaignId, Spend)> + '_ {
        self.spend.iter().map(|(c, s)| (*c, *s))
    }

    pub fn imps(&self) -> impl Iterator<Item = &ImpRecord> {
        self.imps.values()
    }

    pub fn imp(&self, key: ImpKey) -> Option<&ImpRecord> {
        self.imps.get(&key)
    }

    pub fn spend_of(&self, campaign: CampaignId) -> Spend {
        self.spend.get(&campaign).copied().unwrap_or_default()
    }

    pub fn pending_forwarded(&self) -> usize {
        self.forwarded.len()
    }

    /// The state as checkpoint records: the spend totals, then every impression with its settlement zeroed
    /// (the totals hold it), then the pending forwarded notices. Folding them gives this state back.
    pub fn checkpoint_records(&self) -> impl Iterator<Item = Record> + '_ {
        let spend = self.spend.iter().map(|(&campaign, s)| Record::Spent {
            campaign,
            spent: s.spent,
            disputed: s.disputed,
        });
        let imps = self.imps.values().map(|imp| {
            Record::Imp(match imp.state {
                ImpState::Billed { .. } => ImpRecord {
                    state: ImpState::Billed {
                        settled: 0,
                        disputed: 0,
                    },
                    ..*imp
                },
                _ => *imp,
            })
        });
        spend
            .chain(imps)
            .chain(self.forwarded.iter().copied().map(Record::Forwarded))
    }
}
