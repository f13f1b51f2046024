//! Per-thread working memory for the candidate sources, and seeded sampling of long neighbour lists.

use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

use crate::csr::NodeId;

/// Dense counters over every node, reused across calls: a walk or a two-hop count touches a few thousand
/// nodes of a graph of millions, so the counters are cleared through the list of touched nodes, not by
/// sweeping the array (a hash map would cost a hash and a probe per increment on the hottest loop).
#[derive(Debug, Default)]
pub struct Scratch {
    tallies: Vec<Tally>,
    touched: Vec<NodeId>,
    /// Nodes marked known (the viewer and whom it follows), to clear with the rest.
    known: Vec<NodeId>,
    /// Where the walks went, step by step, before their visits are counted.
    visits: Vec<NodeId>,
}

/// One node's counters, side by side so an increment costs one cache line, not two.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    weight: f64,
    count: u32,
    /// The viewer or an account it follows: never a candidate. A mark read beside the counters, where a
    /// binary search of the viewer's follows per touched node showed in profiles.
    known: bool,
}

impl Scratch {
    pub fn new() -> Self {
        Scratch::default()
    }

    /// Prepares for a graph of `nodes` nodes: everything zero, nothing touched or known.
    pub(crate) fn reset(&mut self, nodes: usize) {
        for &v in self.touched.iter().chain(&self.known) {
            self.tallies[v as usize] = Tally::default();
        }
        self.touched.clear();
        self.known.clear();
        if self.tallies.len() != nodes {
            self.tallies = vec![Tally::default(); nodes];
        }
    }

    /// Marks `nodes` as known to the viewer (see [`Scratch::is_known`]).
    pub(crate) fn mark_known(&mut self, nodes: impl IntoIterator<Item = NodeId>) {
        for v in nodes {
            self.tallies[v as usize].known = true;
            self.known.push(v);
        }
    }

    /// Every touched node that is not known, made into a candidate by `candidate(node, count, weight)`.
    /// Sized for all that was touched: growing it step by step copied tens of thousands of entries.
    pub(crate) fn found<T>(&self, candidate: impl Fn(NodeId, u32, f64) -> T) -> Vec<T> {
        let mut found = Vec::with_capacity(self.touched.len());
        for &v in &self.touched {
            let tally = self.tallies[v as usize];
            if !tally.known {
                found.push(candidate(v, tally.count, tally.weight));
            }
        }
        found
    }

    /// Adds one count and `weight` to `v`.
    #[inline]
    pub(crate) fn add(&mut self, v: NodeId, weight: f64) {
        let tally = &mut self.tallies[v as usize];
        if tally.count == 0 {
            self.touched.push(v);
        }
        tally.count += 1;
        tally.weight += weight;
    }

    /// Counts one visit of each node in `visits` (weights untouched). Branch-free: whether a node is new
    /// depends on a load, and a mispredicted branch per first visit cost more than the counting.
    pub(crate) fn count_visits(&mut self, visits: &[NodeId]) {
        let mut touched = self.touched.len();
        self.touched.resize(touched + visits.len(), 0);
        for &v in visits {
            let tally = &mut self.tallies[v as usize];
            self.touched[touched] = v;
            touched += usize::from(tally.count == 0);
            tally.count += 1;
        }
        self.touched.truncate(touched);
    }

    /// The walks' step buffer, empty, keeping its capacity from call to call.
    pub(crate) fn take_visits(&mut self) -> Vec<NodeId> {
        let mut visits = std::mem::take(&mut self.visits);
        visits.clear();
        visits
    }

    pub(crate) fn return_visits(&mut self, visits: Vec<NodeId>) {
        self.visits = visits;
    }
}

/// A seeded generator for one request: the same request gets the same sample and the same walks.
pub(crate) fn request_rng(seed: u64, node: NodeId) -> SmallRng {
    SmallRng::seed_from_u64(seed ^ (u64::from(node) << 32 | u64::from(node)))
}

/// A uniform draw from `0..n` (`n > 0`) by Lemire's multiply-and-reject ("Fast random integer generation in
/// an interval", 2019), inline: `random_range` is a call that divides on every draw, and the walks draw once
/// a step.
#[inline]
pub(crate) fn uniform_below(rng: &mut SmallRng, n: u32) -> u32 {
    let mut product = u64::from(rng.next_u32()) * u64::from(n);
    if (product as u32) < n {
        // Reject the few draws that would make some results likelier than others.
        let threshold = n.wrapping_neg() % n;
        while (product as u32) < threshold {
            product = u64::from(rng.next_u32()) * u64::from(n);
        }
    }
    (product >> 32) as u32
}

/// At most `cap` entries of `list`: all of them when it is short enough, else a uniform sample without
/// repetition (a partial Fisher-Yates shuffle of the positions, so the list itself is untouched). The cap is
/// what keeps a celebrity's millions of followers from costing a request millions of steps.
pub(crate) fn sample<'a>(
    list: &'a [NodeId],
    cap: usize,
    rng: &mut SmallRng,
    positions: &'a mut Vec<u32>,
) -> Sampled<'a> {
    if list.len() <= cap {
        return Sampled::All(list.iter());
    }
    positions.clear();
    positions.extend(0..list.len() as u32);
    for i in 0..cap {
        let j = rng.random_range(i..list.len());
        positions.swap(i, j);
    }
    positions.truncate(cap);
    Sampled::Some {
        list,
        positions: positions.iter(),
    }
}

/// The entries [`sample`] chose.
pub(crate) enum Sampled<'a> {
    All(std::slice::Iter<'a, NodeId>),
    Some {
        list: &'a [NodeId],
        positions: std::slice::Iter<'a, u32>,
    },
}

impl Iterator for Sampled<'_> {
    type Item = NodeId;
    fn next(&mut self) -> Option<NodeId> {
        match self {
            Sampled::All(it) => it.next().copied(),
            Sampled::Some { list, positions } => positions.next().map(|&p| list[p as usize]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_lists_are_taken_whole_and_long_ones_sampled_without_repeats() {
        let mut rng = request_rng(7, 1);
        let mut positions = Vec::new();
        let short = [3, 1, 2];
        let got: Vec<_> = sample(&short, 5, &mut rng, &mut positions).collect();
        assert_eq!(got, short);
        let long: Vec<NodeId> = (100..1100).collect();
        let mut got: Vec<_> = sample(&long, 50, &mut rng, &mut positions).collect();
        assert_eq!(got.len(), 50);
        got.sort_unstable();
        got.dedup();
        assert_eq!(got.len(), 50, "no entry twice");
        assert!(got.iter().all(|v| long.contains(v)));
    }

    #[test]
    fn the_same_seed_samples_the_same_entries() {
        let long: Vec<NodeId> = (0..500).collect();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let first: Vec<_> = sample(&long, 20, &mut request_rng(9, 4), &mut a).collect();
        let second: Vec<_> = sample(&long, 20, &mut request_rng(9, 4), &mut b).collect();
        assert_eq!(first, second);
    }

    #[test]
    fn uniform_draws_cover_the_range_evenly() {
        let mut rng = request_rng(3, 0);
        for n in [1u32, 2, 3, 7, 1000, u32::MAX] {
            assert!((0..200).all(|_| uniform_below(&mut rng, n) < n));
        }
        let mut seen = [0u32; 6];
        for _ in 0..60_000 {
            seen[uniform_below(&mut rng, 6) as usize] += 1;
        }
        assert!(
            seen.iter().all(|&c| (9_400..10_600).contains(&c)),
            "{seen:?}"
        );
    }

    #[test]
    fn visits_count_once_per_step_and_touch_each_node_once() {
        let mut s = Scratch::new();
        s.reset(10);
        s.add(2, 0.5);
        s.count_visits(&[4, 2, 4, 9, 4]);
        let found = s.found(|v, count, weight| (v, count, weight));
        assert_eq!(
            found,
            [(2, 2, 0.5), (4, 3, 0.0), (9, 1, 0.0)],
            "each touched once, in order"
        );
    }

    #[test]
    fn counters_clear_between_uses() {
        let mut s = Scratch::new();
        s.reset(10);
        s.add(3, 0.5);
        s.add(3, 0.25);
        assert_eq!(
            s.found(|v, count, weight| (v, count, weight)),
            [(3, 2, 0.75)]
        );
        s.add(4, 1.0);
        s.mark_known([4]);
        assert_eq!(s.found(|v, count, _| (v, count)), [(3, 2)], "4 is known");
        s.reset(10);
        assert!(s.found(|v, _, _| v).is_empty());
        s.add(4, 1.0);
        assert_eq!(s.found(|v, _, _| v), [4], "no longer known");
    }
}
