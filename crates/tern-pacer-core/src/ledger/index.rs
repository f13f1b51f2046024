//! The ledger's index from impression key to the impression's place in its arena: an open-addressing
//! hash table with linear probing, whose work per operation is bounded.
//!
//! Written here because the general-purpose maps stall under this load. The ledger inserts an impression
//! for every bid and removes it minutes later, millions of times over. SwissTable maps leave a tombstone
//! for many removals and then rehash the whole table at once to clear them; std's map also grows all at
//! once. Measured with `benches/ledger_churn.rs` (thread CPU time of one batch of 10 reservations): std's
//! map stalled 27 ms at 400k tracked impressions and 205 ms at 2M; griddle, which spreads growth but not
//! the tombstone rehash, still 8 ms at 2M. Here:
//! - removal shifts the following entries of the probe run back (no tombstones, nothing to rehash);
//! - growth allocates the bigger table zeroed (the kernel maps the pages as they are first written) and
//!   moves a few old slots per insert, whole probe runs at a time, while lookups look in both tables;
//! - a slot is two words (the key and a 31-bit ticket naming the arena slot), so a table of millions of
//!   slots is cheap to allocate and its probes touch one cache line.

use std::hash::BuildHasher;

use crate::proto::ImpKey;

/// Grow once the table is this full (numerator over 10): linear probing stays short below it (a miss
/// probes 3.6 slots on average at 0.6, 6 at 0.7).
const MAX_LOAD_TENTHS: usize = 6;
/// Old slots moved per insert while growing: the old table (0.6 full) is drained after a quarter of its
/// size in inserts, long before the new one (twice as big) fills up.
const MIGRATE_PER_INSERT: usize = 4;
const FIRST_SLOTS: usize = 1024;

/// Ticket bits: an arena position modulo 2^31 (the ledger tracks fewer impressions than that).
pub(crate) const TICKET_BITS: u32 = 31;
pub(crate) const TICKET_MASK: u64 = (1 << TICKET_BITS) - 1;
const USED: u64 = 1 << 63;

/// Word 0: the auction id; word 1: `USED | imp_id << 31 | ticket`, or 0 when the slot is empty.
type Slot = [u64; 2];

fn slot_key(slot: &Slot) -> ImpKey {
    ImpKey {
        auction_id: slot[0],
        imp_id: ((slot[1] & !USED) >> TICKET_BITS) as u32,
    }
}

fn is_used(slot: &Slot) -> bool {
    slot[1] & USED != 0
}

struct Table {
    /// A power of two of slots; `vec![[0; 2]; n]` is allocated zeroed, so an unused page costs nothing.
    slots: Vec<Slot>,
    len: usize,
}

impl Table {
    fn new(slots: usize) -> Table {
        Table {
            slots: vec![[0; 2]; slots],
            len: 0,
        }
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    fn find(&self, hash: u64, key: ImpKey) -> Option<usize> {
        let mask = self.mask();
        let mut i = hash as usize & mask;
        loop {
            let slot = &self.slots[i];
            if !is_used(slot) {
                return None;
            }
            if slot_key(slot) == key {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    fn insert(&mut self, hash: u64, slot: Slot) {
        let mask = self.mask();
        let mut i = hash as usize & mask;
        while is_used(&self.slots[i]) {
            i = (i + 1) & mask;
        }
        self.slots[i] = slot;
        self.len += 1;
    }

    /// Empties slot `i`, moving back every later slot of its probe run that may move (one whose home is
    /// not between the hole and itself), so no lookup ever needs to step over a removed slot.
    fn remove_at(&mut self, i: usize, hasher: &impl BuildHasher) {
        let mask = self.mask();
        let mut hole = i;
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            if !is_used(&self.slots[j]) {
                break;
            }
            let home = hasher.hash_one(slot_key(&self.slots[j])) as usize & mask;
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.slots[hole] = self.slots[j];
                hole = j;
            }
        }
        self.slots[hole] = [0; 2];
        self.len -= 1;
    }
}

/// A table being drained into the current one.
struct Draining {
    table: Table,
    /// The next slot to move.
    cursor: usize,
    /// Slots not yet visited. Draining starts just after an empty slot, and nothing is ever inserted into
    /// a draining table, so the visit ends on that empty slot and never stops inside a probe run.
    unvisited: usize,
}

pub(crate) struct ImpIndex<S> {
    hasher: S,
    table: Table,
    draining: Option<Draining>,
}

impl<S: BuildHasher> ImpIndex<S> {
    pub(crate) fn new(hasher: S) -> Self {
        ImpIndex {
            hasher,
            table: Table::new(FIRST_SLOTS),
            draining: None,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.table.len + self.draining.as_ref().map_or(0, |d| d.table.len)
    }

    /// The ticket stored for `key`, if it is indexed.
    pub(crate) fn get(&self, key: ImpKey) -> Option<u64> {
        let hash = self.hasher.hash_one(key);
        let in_table = |table: &Table| {
            table
                .find(hash, key)
                .map(|i| table.slots[i][1] & TICKET_MASK)
        };
        in_table(&self.table).or_else(|| self.draining.as_ref().and_then(|d| in_table(&d.table)))
    }

    /// Indexes `key` (which must not be indexed yet) with `ticket` (below 2^31).
    pub(crate) fn insert(&mut self, key: ImpKey, ticket: u64) {
        debug_assert!(self.get(key).is_none(), "key indexed twice");
        debug_assert!(ticket <= TICKET_MASK);
        self.drain(MIGRATE_PER_INSERT);
        if (self.table.len + 1) * 10 > self.table.slots.len() * MAX_LOAD_TENTHS {
            // Only reached with a drain still running if inserts outpaced it, which the rates above rule
            // out; finishing it first keeps at most two tables.
            self.drain(usize::MAX);
            let bigger = Table::new(self.table.slots.len() * 2);
            let old = std::mem::replace(&mut self.table, bigger);
            let mask = old.mask();
            let after_empty = (0..old.slots.len())
                .find(|&i| !is_used(&old.slots[i]))
                .map_or(0, |i| (i + 1) & mask);
            self.draining = Some(Draining {
                unvisited: old.slots.len(),
                cursor: after_empty,
                table: old,
            });
        }
        let slot = [
            key.auction_id,
            USED | u64::from(key.imp_id) << TICKET_BITS | ticket,
        ];
        self.table.insert(self.hasher.hash_one(key), slot);
    }

    /// Removes `key`; returns its ticket if it was indexed.
    pub(crate) fn remove(&mut self, key: ImpKey) -> Option<u64> {
        let hash = self.hasher.hash_one(key);
        for table in [
            Some(&mut self.table),
            self.draining.as_mut().map(|d| &mut d.table),
        ]
        .into_iter()
        .flatten()
        {
            if let Some(i) = table.find(hash, key) {
                let ticket = table.slots[i][1] & TICKET_MASK;
                table.remove_at(i, &self.hasher);
                return Some(ticket);
            }
        }
        None
    }

    /// Moves at least `budget` slots of the draining table (finishing the probe run it is in).
    fn drain(&mut self, mut budget: usize) {
        let Some(draining) = &mut self.draining else {
            return;
        };
        let mask = draining.table.mask();
        while budget > 0 && draining.unvisited > 0 {
            // A whole probe run at a time: a lookup in the old table must never find a hole in the
            // middle of its run.
            loop {
                let slot = draining.table.slots[draining.cursor];
                draining.unvisited -= 1;
                budget = budget.saturating_sub(1);
                if !is_used(&slot) {
                    draining.cursor = (draining.cursor + 1) & mask;
                    break;
                }
                draining.table.slots[draining.cursor] = [0; 2];
                draining.table.len -= 1;
                self.table
                    .insert(self.hasher.hash_one(slot_key(&slot)), slot);
                draining.cursor = (draining.cursor + 1) & mask;
            }
        }
        if draining.unvisited == 0 {
            debug_assert_eq!(draining.table.len, 0);
            self.draining = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn key(n: u64) -> ImpKey {
        ImpKey {
            auction_id: n,
            imp_id: (n % 5) as u32,
        }
    }

    /// A hasher that sends every key to a few homes, so probe runs are long and wrap around the end.
    #[derive(Clone, Default)]
    struct Clustered;
    impl BuildHasher for Clustered {
        type Hasher = ClusteredHasher;
        fn build_hasher(&self) -> ClusteredHasher {
            ClusteredHasher(0)
        }
    }
    struct ClusteredHasher(u64);
    impl std::hash::Hasher for ClusteredHasher {
        fn finish(&self) -> u64 {
            // Homes near the end of any table, so runs wrap to slot 0.
            (self.0 % 3).wrapping_sub(2)
        }
        fn write(&mut self, bytes: &[u8]) {
            for b in bytes {
                self.0 = self.0.wrapping_mul(31).wrapping_add(u64::from(*b));
            }
        }
    }

    fn check_against_model<S: BuildHasher>(
        hasher: S,
        ops: &[(bool, u64)],
    ) -> Result<(), TestCaseError> {
        let mut index = ImpIndex::new(hasher);
        let mut model: HashMap<u64, u64> = HashMap::new();
        let mut next_ticket = 0u64;
        for &(insert, n) in ops {
            if insert && !model.contains_key(&n) {
                index.insert(key(n), next_ticket);
                model.insert(n, next_ticket);
                next_ticket = (next_ticket + 1) & TICKET_MASK;
            } else {
                prop_assert_eq!(index.remove(key(n)), model.remove(&n));
            }
            prop_assert_eq!(index.len(), model.len());
        }
        for n in 0..64 {
            prop_assert_eq!(index.get(key(n)), model.get(&n).copied());
        }
        for (&n, &ticket) in &model {
            prop_assert_eq!(index.get(key(n)), Some(ticket));
        }
        Ok(())
    }

    proptest! {
        /// Inserts and removals, enough to grow several times, agree with a std map.
        #[test]
        fn agrees_with_a_map(ops in prop::collection::vec((prop::bool::weighted(0.7), 0u64..4000), 1..6000)) {
            check_against_model(foldhash::fast::FixedState::default(), &ops)?;
        }

        /// The same with long probe runs that wrap around the table's end, while it grows.
        #[test]
        fn agrees_with_a_map_when_runs_wrap(ops in prop::collection::vec((prop::bool::weighted(0.8), 0u64..1500), 1..2500)) {
            check_against_model(Clustered, &ops)?;
        }
    }

    #[test]
    fn growth_is_spread_over_inserts() {
        let mut index = ImpIndex::new(foldhash::fast::FixedState::default());
        let mut most_moved_at_once = 0;
        for n in 0..200_000u64 {
            let before = index.table.len;
            index.insert(key(n), n & TICKET_MASK);
            // Slots that arrived in the current table with this insert, besides the key itself.
            most_moved_at_once = most_moved_at_once.max(index.table.len.saturating_sub(before + 1));
        }
        // A few slots plus at most one probe run (the longest in a 0.6-full table of this size is some
        // dozens of slots), where moving it all at once would be 100,000 slots.
        assert!(
            most_moved_at_once < 1000,
            "{most_moved_at_once} slots moved by one insert"
        );
        assert_eq!(index.len(), 200_000);
        assert!((0..200_000).all(|n| index.get(key(n)) == Some(n & TICKET_MASK)));
    }
}
