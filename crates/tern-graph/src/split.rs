//! Held-out edges for evaluating and training recommenders: a seeded share of the follows of users who
//! follow enough accounts leaves the graph, and what a recommender finds is checked against them.

use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::csr::{Graph, NodeId};

/// A graph with some follows taken out.
#[derive(Debug, Clone)]
pub struct HeldOut {
    /// The graph without the held-out follows (same accounts, same dense indices).
    pub train: Graph,
    /// By user (dense index): the accounts whose follow was held out, sorted.
    pub held: Vec<Vec<NodeId>>,
}

impl HeldOut {
    /// Users with at least one held-out follow.
    pub fn users(&self) -> impl Iterator<Item = NodeId> + '_ {
        (0..self.held.len() as NodeId).filter(|&v| !self.held[v as usize].is_empty())
    }
}

/// Takes `share` of the follows (rounded, at least one) of every user with at least `min_follows`, chosen
/// with `seed`. In an undirected graph both directions of a held-out edge leave it, or the way back would
/// give the answer away.
pub fn hold_out(graph: &Graph, share: f64, min_follows: usize, seed: u64) -> HeldOut {
    let n = graph.nodes();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut held: Vec<Vec<NodeId>> = vec![Vec::new(); n];
    let mut removed: Vec<(NodeId, NodeId)> = Vec::new();
    for v in 0..n as NodeId {
        let follows: Vec<NodeId> = graph
            .out_neighbours(v)
            .iter()
            .copied()
            .filter(|&w| w != v)
            .collect();
        if follows.len() < min_follows.max(1) {
            continue;
        }
        let take = ((follows.len() as f64 * share).round() as usize).clamp(1, follows.len());
        let mut chosen = follows;
        chosen.shuffle(&mut rng);
        chosen.truncate(take);
        for &w in &chosen {
            removed.push((v, w));
            if !graph.is_directed() {
                removed.push((w, v));
            }
        }
        chosen.sort_unstable();
        held[v as usize] = chosen;
    }
    removed.sort_unstable();
    removed.dedup();
    let kept: Vec<(NodeId, NodeId)> = (0..n as NodeId)
        .flat_map(|v| graph.out_neighbours(v).iter().map(move |&w| (v, w)))
        .filter(|arc| removed.binary_search(arc).is_err())
        .collect();
    // Both directions of an undirected edge are arcs already: build from the arcs as given.
    let train = graph.with_arcs(&kept);
    HeldOut { train, held }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_out_follows_leave_the_graph_and_only_them() {
        let mut edges = Vec::new();
        for v in 0..30u32 {
            for d in 1..=10u32 {
                edges.push((v, (v + d) % 40));
            }
        }
        let g = Graph::from_edges(40, &edges, true);
        let split = hold_out(&g, 0.1, 5, 7);
        assert_eq!(split.users().count(), 30);
        for v in 0..40u32 {
            let held = &split.held[v as usize];
            assert_eq!(held.len(), if v < 30 { 1 } else { 0 });
            for &w in held {
                assert!(g.has_arc(v, w) && !split.train.has_arc(v, w));
            }
        }
        assert_eq!(split.train.arcs(), g.arcs() - 30);
        assert_eq!(hold_out(&g, 0.1, 5, 7).held, split.held, "seeded");
    }

    #[test]
    fn undirected_edges_leave_in_both_directions() {
        let edges: Vec<(u32, u32)> = (1..=8).map(|w| (0, w)).collect();
        let g = Graph::from_edges(9, &edges, false);
        let split = hold_out(&g, 0.25, 5, 1);
        assert_eq!(split.held[0].len(), 2);
        for &w in &split.held[0] {
            assert!(!split.train.has_arc(0, w) && !split.train.has_arc(w, 0));
        }
        assert!(!split.train.is_directed());
        assert_eq!(split.train.arcs(), g.arcs() - 4);
    }
}
