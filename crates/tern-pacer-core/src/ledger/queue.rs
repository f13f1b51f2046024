//! A first-in first-out queue stored in fixed-size blocks, with its items reachable by position.
//!
//! The ledger keeps every tracked impression in one, millions of them on a busy loop. A `VecDeque` grows
//! by doubling and copying everything it holds, which at that size stalls the loop for milliseconds exactly
//! when traffic peaks; std and the usual crates have no queue that grows without copying, so this one grows
//! by whole blocks and recycles the blocks it empties.

use std::collections::VecDeque;

/// Items per block: 4096 of the ledger's 56-byte impressions is 224 KiB, small next to the milliseconds a
/// doubling copy of millions of them takes.
const BLOCK: usize = 4096;

pub(crate) struct BlockQueue<T> {
    /// Full or partly filled blocks, oldest first; the first is read from `head`, the last written to.
    blocks: VecDeque<Vec<T>>,
    /// Index in the first block of the oldest item.
    head: usize,
    len: usize,
    /// One emptied block kept for the next one needed, so a steady queue allocates nothing.
    spare: Option<Vec<T>>,
}

impl<T: Copy> BlockQueue<T> {
    pub(crate) fn new() -> Self {
        BlockQueue {
            blocks: VecDeque::new(),
            head: 0,
            len: 0,
            spare: None,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn front(&self) -> Option<&T> {
        self.blocks.front().and_then(|block| block.get(self.head))
    }

    /// The item `position` places behind the front (every block but the last is full).
    pub(crate) fn get_mut(&mut self, position: usize) -> Option<&mut T> {
        if position >= self.len {
            return None;
        }
        let at = self.head + position;
        self.blocks
            .get_mut(at / BLOCK)
            .and_then(|block| block.get_mut(at % BLOCK))
    }

    pub(crate) fn push_back(&mut self, item: T) {
        if self.blocks.back().is_none_or(|block| block.len() == BLOCK) {
            let block = self
                .spare
                .take()
                .unwrap_or_else(|| Vec::with_capacity(BLOCK));
            self.blocks.push_back(block);
        }
        self.blocks
            .back_mut()
            .expect("a block was just ensured")
            .push(item);
        self.len += 1;
    }

    pub(crate) fn pop_front(&mut self) -> Option<T> {
        let block = self.blocks.front()?;
        let item = *block.get(self.head)?;
        self.head += 1;
        self.len -= 1;
        // A block is done once read to its end, and the last block also once the queue is empty (so a
        // queue that empties and refills does not leave a half-used block at its front).
        if self.head == block.len() && (block.len() == BLOCK || self.len == 0) {
            let mut done = self.blocks.pop_front().expect("the front block exists");
            done.clear();
            self.spare = Some(done);
            self.head = 0;
        }
        Some(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any interleaving of pushes and pops behaves as a `VecDeque` does.
        #[test]
        fn behaves_like_a_vecdeque(ops in prop::collection::vec((any::<bool>(), 1usize..3 * BLOCK), 1..12)) {
            let mut queue = BlockQueue::new();
            let mut model = VecDeque::new();
            let mut next = 0u64;
            for (push, count) in ops {
                for _ in 0..count {
                    if push {
                        queue.push_back(next);
                        model.push_back(next);
                        next += 1;
                    } else {
                        prop_assert_eq!(queue.pop_front(), model.pop_front());
                    }
                    prop_assert_eq!(queue.len(), model.len());
                    prop_assert_eq!(queue.front(), model.front());
                    let last = model.len().checked_sub(1);
                    prop_assert_eq!(last.and_then(|i| queue.get_mut(i).copied()), model.back().copied());
                    let middle = model.len() / 2;
                    prop_assert_eq!(queue.get_mut(middle).copied(), model.get(middle).copied());
                }
            }
            prop_assert!(queue.blocks.len() <= model.len().div_ceil(BLOCK) + 1);
        }
    }
}
