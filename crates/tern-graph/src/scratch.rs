//! Per-thread working memory for the candidate sources, and seeded sampling of long neighbour lists.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::csr::NodeId;

/// Dense counters over every node, reused across calls: a walk or a two-hop count touches a few thousand
/// nodes of a graph of millions, so the counters are cleared through the list of touched nodes, not by
/// sweeping the array (a hash map would cost a hash and a probe per increment on the hottest loop).
#[derive(Debug, Default)]
pub struct Scratch {
    counts: Vec<u32>,
    weights: Vec<f64>,
    touched: Vec<NodeId>,
}

impl Scratch {
    pub fn new() -> Self {
        Scratch::default()
    }

    /// Prepares for a graph of `nodes` nodes: everything zero, nothing touched.
    pub(crate) fn reset(&mut self, nodes: usize) {
        for &v in &self.touched {
            self.counts[v as usize] = 0;
            self.weights[v as usize] = 0.0;
        }
        self.touched.clear();
        if self.counts.len() != nodes {
            self.counts = vec![0; nodes];
            self.weights = vec![0.0; nodes];
        }
    }

    /// Adds one count and `weight` to `v`.
    pub(crate) fn add(&mut self, v: NodeId, weight: f64) {
        let i = v as usize;
        if self.counts[i] == 0 {
            self.touched.push(v);
        }
        self.counts[i] += 1;
        self.weights[i] += weight;
    }

    pub(crate) fn touched(&self) -> &[NodeId] {
        &self.touched
    }

    pub(crate) fn count(&self, v: NodeId) -> u32 {
        self.counts[v as usize]
    }

    pub(crate) fn weight(&self, v: NodeId) -> f64 {
        self.weights[v as usize]
    }
}

/// A seeded generator for one request: the same request gets the same sample and the same walks.
pub(crate) fn request_rng(seed: u64, node: NodeId) -> SmallRng {
    SmallRng::seed_from_u64(seed ^ (u64::from(node) << 32 | u64::from(node)))
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
    fn counters_clear_between_uses() {
        let mut s = Scratch::new();
        s.reset(10);
        s.add(3, 0.5);
        s.add(3, 0.25);
        assert_eq!((s.count(3), s.weight(3)), (2, 0.75));
        s.reset(10);
        assert_eq!((s.count(3), s.weight(3), s.touched().len()), (0, 0.0, 0));
    }
}
