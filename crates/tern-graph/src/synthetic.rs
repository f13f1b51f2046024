//! A seeded synthetic follow graph with the shape of real ones: power-law out- and in-degrees, communities,
//! and follow-backs, generated fast enough to serve tens of millions of edges a few seconds after start.
//!
//! Each edge picks its follower by a mild Zipf law over all accounts (some follow many), and its followee
//! either inside the follower's community (with probability `locality`), by a Zipf law over the community,
//! or anywhere, by a Zipf law over all accounts (a few are followed by very many). A share `follow_back` of
//! edges is answered by the reverse edge. Ranks map to accounts through seeded permutations, so the busiest
//! accounts are spread over the id space and over the communities.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};

use crate::csr::{Graph, NodeId};

/// The generator's parameters.
#[derive(Debug, Clone)]
pub struct Synthetic {
    pub nodes: usize,
    /// Follows (follow-backs included), all distinct.
    pub edges: usize,
    pub communities: usize,
    /// Share of edges whose followee is in the follower's community.
    pub locality: f64,
    /// Share of edges followed back.
    pub follow_back: f64,
    /// Zipf exponent of the in-degree law (about 1 for social graphs: a few accounts are followed by very many).
    pub fame_exponent: f64,
    /// Zipf exponent of the out-degree law (milder: how many accounts one follows is less skewed).
    pub activity_exponent: f64,
    pub seed: u64,
}

impl Synthetic {
    /// `edges` edges over `edges / 20` accounts (a mean of 20 follows each) in communities of about 1,000.
    pub fn with_edges(edges: usize, seed: u64) -> Synthetic {
        let nodes = (edges / 20).max(2);
        Synthetic {
            nodes,
            edges,
            communities: (nodes / 1000).max(1),
            locality: 0.7,
            follow_back: 0.2,
            fame_exponent: 1.0,
            activity_exponent: 0.6,
            seed,
        }
    }

    /// The graph (directed, ids are the node indices).
    ///
    /// # Panics
    /// If `nodes` is under 2 or over `u32::MAX`, `communities` is 0 or over `nodes`, or `edges` is over
    /// half the follows `nodes` accounts can have (drawing distinct pairs near saturation never ends).
    pub fn generate(&self) -> Graph {
        assert!(
            self.nodes >= 2 && self.nodes <= u32::MAX as usize,
            "2..=2^32-1 nodes"
        );
        assert!(
            self.communities >= 1 && self.communities <= self.nodes,
            "1..=nodes communities"
        );
        assert!(
            (self.edges as u128) * 2 <= (self.nodes as u128) * (self.nodes as u128 - 1),
            "at most half of all possible follows"
        );
        let mut rng = rand::rngs::SmallRng::seed_from_u64(self.seed);
        let shuffled = |rng: &mut rand::rngs::SmallRng| {
            let mut p: Vec<NodeId> = (0..self.nodes as NodeId).collect();
            p.shuffle(rng);
            p
        };
        let by_activity = shuffled(&mut rng);
        let by_fame = shuffled(&mut rng);
        let community_size = self.nodes.div_ceil(self.communities);
        let zipf = |n: usize, exponent: f64| {
            Zipf::new(n as f64, exponent).expect("n >= 1 and exponent >= 0")
        };
        let activity = zipf(self.nodes, self.activity_exponent);
        let fame = zipf(self.nodes, self.fame_exponent);
        let local_fame = zipf(community_size, self.fame_exponent);
        // Zipf yields ranks 1..=n as floats.
        let rank = |z: &Zipf<f64>, rng: &mut rand::rngs::SmallRng| z.sample(rng) as usize - 1;
        // Edges as `follower << 32 | followee`, sorted and distinct: one u64 compares faster than a pair.
        let mut edges: Vec<u64> = Vec::new();
        let pair =
            |follower: NodeId, followee: NodeId| u64::from(follower) << 32 | u64::from(followee);
        // The heavy heads pick the same pairs again: draw, drop repeats, and draw the shortfall until the
        // graph has exactly the edges asked for. Each round sorts only its own draws and merges them in
        // (sorting everything again each round was most of the generator's time at 10M edges).
        while edges.len() < self.edges {
            let mut fresh: Vec<u64> = Vec::with_capacity(self.edges - edges.len());
            while edges.len() + fresh.len() < self.edges {
                let follower = by_activity[rank(&activity, &mut rng)];
                let followee = if rng.random_bool(self.locality) {
                    let start = follower as usize / community_size * community_size;
                    let len = community_size.min(self.nodes - start);
                    // Fame inside a community: a permutation per community would cost memory; a fixed
                    // stride over the community's ids spreads the ranks as well.
                    let r = rank(&local_fame, &mut rng) % len;
                    (start + (r * 7919 + self.seed as usize) % len) as NodeId
                } else {
                    by_fame[rank(&fame, &mut rng)]
                };
                if follower == followee {
                    continue;
                }
                fresh.push(pair(follower, followee));
                if edges.len() + fresh.len() < self.edges && rng.random_bool(self.follow_back) {
                    fresh.push(pair(followee, follower));
                }
            }
            fresh.sort_unstable();
            fresh.dedup();
            edges = merge_distinct(&edges, &fresh);
        }
        let edges: Vec<(NodeId, NodeId)> = edges
            .into_iter()
            .map(|e| ((e >> 32) as NodeId, e as NodeId))
            .collect();
        Graph::from_edges(self.nodes, &edges, true)
    }
}

/// The sorted union of two sorted lists of distinct values, each value once.
fn merge_distinct(a: &[u64], b: &[u64]) -> Vec<u64> {
    let mut merged = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => {
                merged.push(a[i]);
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                merged.push(b[j]);
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                merged.push(a[i]);
                i += 1;
                j += 1;
            }
        }
    }
    merged.extend_from_slice(&a[i..]);
    merged.extend_from_slice(&b[j..]);
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn degrees_follow_a_power_law_and_communities_hold_most_edges() {
        let spec = Synthetic::with_edges(200_000, 3);
        let g = spec.generate();
        assert_eq!(g.arcs(), 200_000);
        let mut in_degrees: Vec<usize> = (0..g.nodes() as NodeId)
            .map(|v| g.in_neighbours(v).len())
            .collect();
        in_degrees.sort_unstable_by(|a, b| b.cmp(a));
        let mean = g.arcs() / g.nodes();
        assert!(
            in_degrees[0] > 50 * mean,
            "a heavy head: max {} mean {mean}",
            in_degrees[0]
        );
        let median = in_degrees[in_degrees.len() / 2];
        assert!(median < mean, "a long tail: median {median} mean {mean}");
        let size = g.nodes().div_ceil(spec.communities);
        let local = (0..g.nodes() as NodeId)
            .flat_map(|v| g.out_neighbours(v).iter().map(move |&w| (v, w)))
            .filter(|&(v, w)| v as usize / size == w as usize / size)
            .count();
        assert!(
            local * 2 > g.arcs(),
            "{local} of {} arcs inside a community",
            g.arcs()
        );
    }

    #[test]
    fn the_same_seed_makes_the_same_graph() {
        let a = Synthetic::with_edges(20_000, 9).generate();
        assert_eq!(a, Synthetic::with_edges(20_000, 9).generate());
        assert_ne!(a, Synthetic::with_edges(20_000, 10).generate());
    }

    proptest::proptest! {
        #[test]
        fn merging_keeps_each_value_of_either_list_once_in_order(
            a in proptest::collection::btree_set(0u64..100, 0..40),
            b in proptest::collection::btree_set(0u64..100, 0..40),
        ) {
            let a: Vec<u64> = a.into_iter().collect();
            let b: Vec<u64> = b.into_iter().collect();
            let mut want: Vec<u64> = a.iter().chain(&b).copied().collect();
            want.sort_unstable();
            want.dedup();
            proptest::prop_assert_eq!(merge_distinct(&a, &b), want);
        }
    }
}
