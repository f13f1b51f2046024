//! One I/O loop's ledger: for each campaign, the slice of budget the coordinator granted this loop, what is
//! reserved by bids in flight, and what is spent. Only its loop touches it, so deciding a bid reads and writes
//! no shared counter.
//!
//! A bid reserves its maximum price for one impression. A win notice shrinks the reservation to the clearing
//! price; a billing notice settles it at the billed price (never above the reservation's maximum: a second-price
//! exchange cannot clear above the bid, and anything billed above it is recorded as disputed, not spent) and
//! releases the rest; a loss notice, or no notice before `reservation_ttl_ms`, releases it. Every notice is
//! idempotent: each impression's state only moves forward (reserved → released → billed, or reserved →
//! billed), so a duplicate, or a notice implied by one already applied, changes nothing. The state is kept
//! for `forget_after_ms`, the window in which late notices are still recognised.
//!
//! With a crash journal ([`crate::journal`]) each reservation and applied notice is recorded before the
//! handler that made it returns, so before anything about it is acknowledged; an operation the journal
//! cannot record is refused.
//!
//! # Overspend
//! Per slice, `reserved + spent <= granted` holds after every operation but one: a billing notice for an
//! impression whose reservation was already released (a timeout, or a loss notice contradicted later). That
//! money is really spent, so it is counted, and it can take the campaign over budget. The worst case is
//! therefore the *exposure*: the sum of the maximum prices of released reservations that can still be billed
//! (those inside `forget_after_ms`). [`Ledger::exposure`] reports it; with `reservation_ttl_ms` longer than
//! the exchange's billing delay it stays zero in practice. The coordinator then covers such debt from the
//! campaign's unallocated budget when there is any, so only debt beyond the whole budget is overspend.

mod index;
mod queue;

use std::collections::HashMap;

use index::{ImpIndex, TICKET_MASK};
use queue::BlockQueue;

use crate::money::{Cpm, Micros};
use crate::proto::{CampaignId, ImpKey, Notice, NoticeKind, NoticeStatus};
use crate::record::{ForwardedNotice, ImpRecord, ImpState, Record, Spend};

/// A deterministic, fast hasher: the keys are ids chosen by the gateway, and deciding happens on every
/// request, so SipHash's cost buys nothing; a fixed seed keeps simulation runs identical.
pub type FastMap<K, V> = HashMap<K, V, foldhash::fast::FixedState>;

/// The most impressions a ledger can track (its index names arena slots with 31 bits).
pub const MAX_TRACKED_LIMIT: usize = TICKET_MASK as usize;

/// Time limits and bounds of a ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerConfig {
    /// A reservation with no billing or loss notice after this long is released.
    pub reservation_ttl_ms: u64,
    /// How long an impression's state is kept to recognise late and duplicate notices (at least the TTL).
    pub forget_after_ms: u64,
    /// Most impressions tracked at once (reservations plus remembered ones); a bid over it is refused.
    /// At most [`MAX_TRACKED_LIMIT`].
    pub max_tracked: usize,
}

impl Default for LedgerConfig {
    fn default() -> Self {
        LedgerConfig {
            reservation_ttl_ms: 120_000,
            forget_after_ms: 600_000,
            max_tracked: 8_000_000,
        }
    }
}

/// One loop's share of one campaign's budget.
pub struct Slice<C> {
    /// Budget the coordinator has granted this loop (net of what it took back).
    pub granted: Micros<C>,
    /// Held by bids in flight.
    pub reserved: Micros<C>,
    /// Settled by billing notices on this loop.
    pub spent: Micros<C>,
    /// Released reservations that may still be billed late: the bound on this slice's overspend.
    pub exposure: Micros<C>,
    /// Billed above the reservation's maximum (an exchange error to dispute); not counted as spend.
    pub disputed: Micros<C>,
    /// What the other loops had spent at the last coordinator sync, for strategies that pace on the total.
    pub others_spent: Micros<C>,
    /// The largest price refused since the last sync for want of available budget: the next sync tops the
    /// slice up to at least this, so a slice target below one impression's price cannot starve a campaign.
    pub shortfall: Micros<C>,
}

impl<C> Default for Slice<C> {
    fn default() -> Self {
        Slice {
            granted: Micros::ZERO,
            reserved: Micros::ZERO,
            spent: Micros::ZERO,
            exposure: Micros::ZERO,
            disputed: Micros::ZERO,
            others_spent: Micros::ZERO,
            shortfall: Micros::ZERO,
        }
    }
}

impl<C> Slice<C> {
    /// Granted budget neither reserved nor spent.
    pub fn available(&self) -> Micros<C> {
        self.granted
            .saturating_sub(self.reserved.saturating_add(self.spent))
    }
    /// How far late bills took this slice beyond its grant.
    pub fn debt(&self) -> Micros<C> {
        self.reserved
            .saturating_add(self.spent)
            .saturating_sub(self.granted)
    }
    /// The campaign's spend as this loop knows it: its own, current, plus the others' as of the last sync.
    pub fn campaign_spent(&self) -> Micros<C> {
        self.spent.saturating_add(self.others_spent)
    }
}

/// Why a reservation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReserveError {
    /// The slice's available budget is below the price.
    BudgetExhausted,
    /// This impression is already tracked (a retried request).
    Duplicate,
    /// The ledger tracks `max_tracked` impressions.
    TooManyTracked,
    /// The journal cannot take the reservation's record (no segment could be created).
    JournalUnavailable,
}

enum State<C> {
    /// In flight, holding `held` (the maximum price, or the win price once a win notice came).
    Reserved {
        held: Micros<C>,
        won: bool,
    },
    /// Released by a loss notice or the TTL; a late bill is still counted.
    Released,
    Billed,
}

// Hand-written: `Micros<C>` is `Copy` for any marker `C`, a derive would demand `C: Copy`.
impl<C> Clone for State<C> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<C> Copy for State<C> {}

struct Entry<C> {
    campaign: CampaignId,
    /// The most this impression may cost: what was reserved.
    max: Micros<C>,
    /// When it was reserved: the journal's records carry it, so replay can tell when it expires and is
    /// forgotten.
    reserved_at_ms: u64,
    state: State<C>,
}

impl<C> Clone for Entry<C> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<C> Copy for Entry<C> {}

impl<C> Entry<C> {
    /// This impression's journal record; `billed` is the settlement when the state is billed.
    fn record(&self, key: ImpKey, ttl_ms: u64, billed: Spend) -> Record {
        Record::Imp(ImpRecord {
            key,
            campaign: self.campaign,
            max: self.max.micros(),
            reserved_at_ms: self.reserved_at_ms,
            expires_ms: self.reserved_at_ms.saturating_add(ttl_ms),
            state: match self.state {
                State::Reserved { won: false, .. } => ImpState::Reserved,
                State::Reserved { held, won: true } => ImpState::Won {
                    held: held.micros(),
                },
                State::Released => ImpState::Released,
                State::Billed => ImpState::Billed {
                    settled: billed.spent,
                    disputed: billed.disputed,
                },
            },
        })
    }
}

/// Counters of what happened, for metrics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LedgerStats {
    pub reserved: u64,
    pub billed: u64,
    pub late_billed: u64,
    pub lost: u64,
    pub timed_out: u64,
    pub duplicates: u64,
    pub unknown: u64,
}

/// Where a ledger records each change before it is acknowledged: the crash journal implements it
/// ([`crate::journal::LoopJournal`]), so the ledger depends on the records alone and the journal, which also
/// replays records into ledgers, sits above it.
pub trait RecordSink: Send {
    /// Makes room for the next record; an error refuses the operation that needs it.
    fn ensure_room(&mut self) -> std::io::Result<()>;
    /// Appends `record` (room was made by `ensure_room`).
    fn write(&mut self, record: &Record);
}

/// One loop's ledger.
pub struct Ledger<C> {
    config: LedgerConfig,
    slices: FastMap<CampaignId, Slice<C>>,
    /// Tracked impressions in the order they were reserved, which is also the order in which their TTLs
    /// pass and they are forgotten (`now_ms` never goes back, and the TTL and retention are fixed).
    imps: BlockQueue<(ImpKey, Entry<C>)>,
    /// Sequence number of the front of `imps` (one per reservation ever made).
    first_seq: u64,
    /// Sequence number of the first impression whose TTL has not been handled yet.
    unexpired_seq: u64,
    /// Key to sequence number (modulo 2^31) in `imps`.
    index: ImpIndex<foldhash::fast::FixedState>,
    /// The latest time seen: time never goes backwards inside the ledger.
    now_ms: u64,
    stats: LedgerStats,
    /// Where every change is recorded before it is acknowledged, when the node keeps a crash journal.
    journal: Option<Box<dyn RecordSink>>,
    /// The node's budget source has stopped answering (set at each sync with the coordinator): an empty
    /// slice then says nothing about the campaign's budget.
    pub budget_source_down: bool,
}

impl<C> Ledger<C> {
    pub fn new(config: LedgerConfig) -> Self {
        let config = LedgerConfig {
            forget_after_ms: config.forget_after_ms.max(config.reservation_ttl_ms),
            max_tracked: config.max_tracked.min(MAX_TRACKED_LIMIT),
            ..config
        };
        Ledger {
            config,
            slices: FastMap::default(),
            imps: BlockQueue::new(),
            first_seq: 0,
            unexpired_seq: 0,
            index: ImpIndex::new(foldhash::fast::FixedState::default()),
            now_ms: 0,
            stats: LedgerStats::default(),
            journal: None,
            budget_source_down: false,
        }
    }

    /// Records every reservation and notice applied from now on in `journal` (see [`crate::journal`]).
    pub fn set_journal(&mut self, journal: impl RecordSink + 'static) {
        self.journal = Some(Box::new(journal));
    }

    pub fn config(&self) -> &LedgerConfig {
        &self.config
    }

    pub fn stats(&self) -> LedgerStats {
        self.stats
    }

    pub fn slice(&self, campaign: CampaignId) -> Option<&Slice<C>> {
        self.slices.get(&campaign)
    }

    pub fn slice_mut(&mut self, campaign: CampaignId) -> &mut Slice<C> {
        self.slices.entry(campaign).or_default()
    }

    pub fn slices(&self) -> impl Iterator<Item = (CampaignId, &Slice<C>)> {
        self.slices.iter().map(|(id, s)| (*id, s))
    }

    /// Impressions tracked (in flight or remembered).
    pub fn tracked(&self) -> usize {
        debug_assert_eq!(self.index.len(), self.imps.len());
        self.imps.len()
    }

    /// Where `key` sits in `imps`, if it is tracked.
    fn position(&self, key: ImpKey) -> Option<usize> {
        let ticket = self.index.get(key)?;
        Some((ticket.wrapping_sub(self.first_seq) & TICKET_MASK) as usize)
    }

    /// The sum over campaigns of released reservations that can still be billed: the worst-case overspend.
    pub fn exposure(&self) -> Micros<C> {
        self.slices.values().map(|s| s.exposure).sum()
    }

    /// Moves the clock to `now_ms`: releases reservations past their TTL and forgets old impressions.
    pub fn advance(&mut self, now_ms: u64) {
        self.now_ms = self.now_ms.max(now_ms);
        let ttl = self.config.reservation_ttl_ms;
        while let Some((_, entry)) = self
            .imps
            .get_mut((self.unexpired_seq - self.first_seq) as usize)
        {
            if entry.reserved_at_ms.saturating_add(ttl) > self.now_ms {
                break;
            }
            if let State::Reserved { held, .. } = entry.state {
                let slice = self.slices.entry(entry.campaign).or_default();
                slice.reserved = slice.reserved.saturating_sub(held);
                slice.exposure = slice.exposure.saturating_add(entry.max);
                entry.state = State::Released;
                self.stats.timed_out += 1;
            }
            self.unexpired_seq += 1;
        }
        while let Some(&(key, entry)) = self.imps.front() {
            if entry
                .reserved_at_ms
                .saturating_add(self.config.forget_after_ms)
                > self.now_ms
            {
                break;
            }
            self.imps.pop_front();
            self.first_seq += 1;
            self.index.remove(key);
            // `forget_after_ms >= reservation_ttl_ms`, so nothing forgotten is still reserved.
            if matches!(entry.state, State::Released) {
                let slice = self.slices.entry(entry.campaign).or_default();
                slice.exposure = slice.exposure.saturating_sub(entry.max);
            }
        }
        self.unexpired_seq = self.unexpired_seq.max(self.first_seq);
    }

    /// Starts tracking `key`, reserved at `entry.reserved_at_ms` (no earlier than any tracked one).
    fn track(&mut self, key: ImpKey, entry: Entry<C>) {
        let seq = self.first_seq + self.imps.len() as u64;
        self.index.insert(key, seq & TICKET_MASK);
        self.imps.push_back((key, entry));
    }

    /// Reserves `price` (one impression at that CPM) from `campaign`'s slice for `key`.
    pub fn reserve(
        &mut self,
        now_ms: u64,
        key: ImpKey,
        campaign: CampaignId,
        price: Cpm<C>,
    ) -> Result<(), ReserveError> {
        self.advance(now_ms);
        let amount = price.per_impression();
        if self.position(key).is_some() {
            return Err(ReserveError::Duplicate);
        }
        if self.imps.len() >= self.config.max_tracked {
            return Err(ReserveError::TooManyTracked);
        }
        let slice = self.slices.entry(campaign).or_default();
        if slice.available() < amount {
            return Err(ReserveError::BudgetExhausted);
        }
        let entry = Entry {
            campaign,
            max: amount,
            reserved_at_ms: self.now_ms,
            state: State::Reserved {
                held: amount,
                won: false,
            },
        };
        if let Some(journal) = &mut self.journal {
            // Recorded before anything changes: the reply carrying the bid leaves after this handler.
            journal
                .ensure_room()
                .map_err(|_| ReserveError::JournalUnavailable)?;
            journal.write(&entry.record(key, self.config.reservation_ttl_ms, Spend::default()));
        }
        slice.reserved = slice.reserved.saturating_add(amount);
        self.track(key, entry);
        self.stats.reserved += 1;
        Ok(())
    }

    /// Applies a win, billing or loss notice.
    pub fn notice(&mut self, now_ms: u64, notice: &Notice<C>) -> NoticeStatus {
        self.advance(now_ms);
        if let Some(journal) = &mut self.journal {
            // Room for the record this notice may need, before it changes anything; refused, the gateway
            // sends it again.
            if journal.ensure_room().is_err() {
                return NoticeStatus::Refused;
            }
        }
        let Some(position) = self.position(notice.key) else {
            self.stats.unknown += 1;
            if let Some(journal) = &mut self.journal {
                // Its caller may hand it to the coordinator for the loop holding the reservation: recorded
                // so a crash before that loop applies it does not lose it (replay applies it as that loop
                // would, and drops it if no loop holds the reservation).
                journal.write(&Record::Forwarded(ForwardedNotice {
                    kind: notice.kind,
                    key: notice.key,
                    campaign: notice.campaign,
                    price: notice.price.per_impression().micros(),
                    at_ms: self.now_ms,
                }));
            }
            return NoticeStatus::Unknown;
        };
        let (_, entry) = self
            .imps
            .get_mut(position)
            .expect("the index points into the tracked impressions");
        if entry.campaign != notice.campaign {
            return NoticeStatus::CampaignMismatch;
        }
        let slice = self.slices.entry(entry.campaign).or_default();
        let price = notice.price.per_impression();
        let mut billed = Spend::default();
        let (state, status) = match (entry.state, notice.kind) {
            (State::Reserved { held, won: false }, NoticeKind::Win) => {
                let won = price.min(entry.max);
                slice.reserved = slice.reserved.saturating_sub(held.saturating_sub(won));
                (
                    State::Reserved {
                        held: won,
                        won: true,
                    },
                    NoticeStatus::Applied,
                )
            }
            (State::Reserved { held, .. }, NoticeKind::Billing) => {
                slice.reserved = slice.reserved.saturating_sub(held);
                billed = settle(slice, price, entry.max);
                self.stats.billed += 1;
                (State::Billed, NoticeStatus::Applied)
            }
            (State::Reserved { held, .. }, NoticeKind::Loss) => {
                slice.reserved = slice.reserved.saturating_sub(held);
                slice.exposure = slice.exposure.saturating_add(entry.max);
                self.stats.lost += 1;
                (State::Released, NoticeStatus::Applied)
            }
            (State::Released, NoticeKind::Billing) => {
                slice.exposure = slice.exposure.saturating_sub(entry.max);
                billed = settle(slice, price, entry.max);
                self.stats.late_billed += 1;
                (State::Billed, NoticeStatus::LateBilled)
            }
            (state, _) => {
                self.stats.duplicates += 1;
                (state, NoticeStatus::Duplicate)
            }
        };
        entry.state = state;
        if let (Some(journal), NoticeStatus::Applied | NoticeStatus::LateBilled) =
            (&mut self.journal, status)
        {
            journal.write(&entry.record(notice.key, self.config.reservation_ttl_ms, billed));
        }
        status
    }

    /// Starts this new, empty ledger from recovered state: `spend` is the settled spend it takes over,
    /// `imps` the impressions it holds from now on. Each slice is granted exactly what it holds (reserved
    /// plus spent), which the coordinator must count as granted ([`crate::coordinator::Coordinator::restore_granted`]).
    /// Reservations past their TTL by `now_ms` are then released, and impressions past `forget_after_ms`
    /// forgotten, as if the ledger had never stopped (both timed from `reserved_at_ms` with this ledger's
    /// configuration; a record's `expires_ms` is what the ledger that wrote it would have done). An
    /// impression listed twice is taken once.
    pub fn restore<'a>(
        &mut self,
        spend: impl IntoIterator<Item = (CampaignId, Spend)>,
        imps: impl IntoIterator<Item = &'a ImpRecord>,
        now_ms: u64,
    ) {
        for (campaign, s) in spend {
            let slice = self.slices.entry(campaign).or_default();
            slice.spent = slice.spent.saturating_add(Micros::from_micros(s.spent));
            slice.disputed = slice
                .disputed
                .saturating_add(Micros::from_micros(s.disputed));
        }
        // Tracked in reservation order, like the ones this ledger makes itself.
        let mut imps: Vec<&ImpRecord> = imps.into_iter().collect();
        imps.sort_unstable_by_key(|imp| (imp.reserved_at_ms, imp.key.auction_id, imp.key.imp_id));
        for imp in imps {
            if self.position(imp.key).is_some() {
                continue;
            }
            let slice = self.slices.entry(imp.campaign).or_default();
            let max = Micros::from_micros(imp.max);
            let state = match imp.state {
                ImpState::Reserved => State::Reserved {
                    held: max,
                    won: false,
                },
                ImpState::Won { held } => State::Reserved {
                    held: Micros::from_micros(held),
                    won: true,
                },
                ImpState::Released => State::Released,
                ImpState::Billed { .. } => State::Billed,
            };
            match state {
                State::Reserved { held, .. } => {
                    slice.reserved = slice.reserved.saturating_add(held);
                }
                State::Released => slice.exposure = slice.exposure.saturating_add(max),
                State::Billed => {}
            }
            self.now_ms = self.now_ms.max(imp.reserved_at_ms);
            self.track(
                imp.key,
                Entry {
                    campaign: imp.campaign,
                    max,
                    reserved_at_ms: imp.reserved_at_ms,
                    state,
                },
            );
        }
        for slice in self.slices.values_mut() {
            slice.granted = slice.reserved.saturating_add(slice.spent);
        }
        self.advance(now_ms);
    }
}

fn settle<C>(slice: &mut Slice<C>, billed: Micros<C>, max: Micros<C>) -> Spend {
    let spent = billed.min(max);
    let disputed = billed.saturating_sub(max);
    slice.spent = slice.spent.saturating_add(spent);
    slice.disputed = slice.disputed.saturating_add(disputed);
    Spend {
        spent: spent.micros(),
        disputed: disputed.micros(),
    }
}

#[cfg(test)]
mod tests;
