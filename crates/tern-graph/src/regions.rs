//! Regions: the graph's communities, found once when a graph is loaded (not per request) by label
//! propagation, and the most followed accounts of each, for the "popular in your area" source.
//!
//! The follow graphs tern serves carry no geography, so a region is a community of the follow graph: a group
//! of accounts that follow each other more than they follow the rest. Label propagation (Raghavan, Albert and
//! Kumara 2007) finds them in a few passes over the edges: every account starts in its own region and, in a
//! seeded random order, repeatedly joins the region most of its neighbours (both directions) are in, until
//! fewer than 0.1% of accounts move or `max_passes` is reached. It is deterministic for a graph and a seed,
//! so every process that loads the same graph (the graph shards, `tern recommend prepare`) finds the same
//! regions.

use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::csr::{Graph, NodeId};

/// Each account's region and each region's most followed accounts.
#[derive(Debug, Clone)]
pub struct Regions {
    region: Vec<u32>,
    /// Members by region.
    sizes: Vec<u32>,
    /// By region: its members by in-degree, most followed first, at most `popular_per_region`.
    popular: Vec<Vec<NodeId>>,
    /// The whole graph's most followed accounts (for accounts whose region has too few).
    popular_overall: Vec<NodeId>,
}

/// A candidate of the popularity source.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Popular {
    pub node: NodeId,
    /// Followers of the account.
    pub followers: u32,
    /// The account is in the viewer's region (else it came from the overall list).
    pub in_region: bool,
}

impl Regions {
    /// Finds the regions of `graph` (see the module's doc) and keeps the `popular_per_region` most followed
    /// accounts of each.
    pub fn find(graph: &Graph, seed: u64, max_passes: usize, popular_per_region: usize) -> Regions {
        let n = graph.nodes();
        let mut label: Vec<u32> = (0..n as u32).collect();
        let mut order: Vec<NodeId> = (0..n as NodeId).collect();
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        let mut around: Vec<u32> = Vec::new();
        for _ in 0..max_passes {
            order.shuffle(&mut rng);
            let mut moved = 0usize;
            for &v in &order {
                around.clear();
                around.extend(
                    graph
                        .out_neighbours(v)
                        .iter()
                        .chain(graph.in_neighbours(v))
                        .filter(|&&w| w != v)
                        .map(|&w| label[w as usize]),
                );
                if let Some(best) = most_common(&mut around) {
                    if best != label[v as usize] {
                        label[v as usize] = best;
                        moved += 1;
                    }
                }
            }
            if moved * 1000 < n {
                break;
            }
        }
        // Renumber the labels densely: 0..regions.
        let mut dense = vec![u32::MAX; n];
        let mut regions = 0u32;
        let region: Vec<u32> = label
            .iter()
            .map(|&l| {
                if dense[l as usize] == u32::MAX {
                    dense[l as usize] = regions;
                    regions += 1;
                }
                dense[l as usize]
            })
            .collect();
        let mut by_followers: Vec<NodeId> = (0..n as NodeId).collect();
        by_followers
            .sort_unstable_by_key(|&v| (std::cmp::Reverse(graph.in_neighbours(v).len()), v));
        let mut sizes = vec![0u32; regions as usize];
        for &r in &region {
            sizes[r as usize] += 1;
        }
        let mut popular = vec![Vec::new(); regions as usize];
        for &v in &by_followers {
            let list = &mut popular[region[v as usize] as usize];
            if list.len() < popular_per_region {
                list.push(v);
            }
        }
        by_followers.truncate(popular_per_region);
        Regions {
            region,
            sizes,
            popular,
            popular_overall: by_followers,
        }
    }

    pub fn region(&self, v: NodeId) -> u32 {
        self.region[v as usize]
    }

    pub fn count(&self) -> usize {
        self.popular.len()
    }

    /// Members of `v`'s region (including `v`).
    pub fn region_size(&self, v: NodeId) -> usize {
        self.sizes[self.region(v) as usize] as usize
    }

    /// The most followed accounts of `viewer`'s region that the viewer does not follow, then the most
    /// followed overall, up to `limit`.
    pub fn popular_for(&self, graph: &Graph, viewer: NodeId, limit: usize) -> Vec<Popular> {
        let home = self.region(viewer);
        let own = &self.popular[home as usize];
        let mut found: Vec<Popular> = Vec::with_capacity(limit);
        let fresh = |c: NodeId| c != viewer && !graph.has_arc(viewer, c);
        // The region's accounts taken, to skip them in the overall list (a set: a recommender may ask for
        // hundreds of these to fill its ranking).
        let mut taken = std::collections::HashSet::new();
        for (&c, in_region) in own
            .iter()
            .map(|c| (c, true))
            .chain(self.popular_overall.iter().map(|c| (c, false)))
        {
            if found.len() == limit {
                break;
            }
            let repeat = !in_region && self.region(c) == home && taken.contains(&c);
            if fresh(c) && !repeat {
                if in_region {
                    taken.insert(c);
                }
                found.push(Popular {
                    node: c,
                    followers: graph.in_neighbours(c).len() as u32,
                    in_region: in_region || self.region(c) == home,
                });
            }
        }
        found
    }
}

/// The most frequent value (the smallest among equals, so the result does not depend on the order).
fn most_common(values: &mut [u32]) -> Option<u32> {
    values.sort_unstable();
    let mut best: Option<(usize, u32)> = None;
    for run in values.chunk_by(|a, b| a == b) {
        if best.is_none_or(|(count, _)| run.len() > count) {
            best = Some((run.len(), run[0]));
        }
    }
    best.map(|(_, value)| value)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two cliques of five joined by one edge.
    fn two_cliques() -> Graph {
        let mut edges = Vec::new();
        for base in [0u32, 5] {
            for a in base..base + 5 {
                for b in base..base + 5 {
                    if a != b {
                        edges.push((a, b));
                    }
                }
            }
        }
        edges.push((4, 5));
        Graph::from_edges(10, &edges, true)
    }

    #[test]
    fn cliques_become_regions() {
        let g = two_cliques();
        let r = Regions::find(&g, 1, 20, 10);
        assert_eq!(r.count(), 2);
        assert!((0..5).all(|v| r.region(v) == r.region(0)));
        assert!((5..10).all(|v| r.region(v) == r.region(5)));
        assert_eq!(r.region_size(3), 5);
    }

    #[test]
    fn popular_accounts_of_the_region_come_first_then_the_rest() {
        // 0..5 follow each other; 6 and 7 follow each other, and 8 and 9 follow 6 (6 has the most followers
        // outside the clique).
        let mut edges: Vec<(u32, u32)> = Vec::new();
        for a in 0..5u32 {
            for b in 0..5u32 {
                if a != b {
                    edges.push((a, b));
                }
            }
        }
        edges.extend([(6, 7), (7, 6), (8, 6), (9, 6)]);
        let g = Graph::from_edges(10, &edges, true);
        let r = Regions::find(&g, 3, 20, 10);
        let found = r.popular_for(&g, 6, 3);
        assert!(
            found.iter().all(|p| p.node != 6 && p.node != 7),
            "{found:?}"
        );
        assert_eq!(found.len(), 3);
        let flags: Vec<bool> = found.iter().map(|p| p.in_region).collect();
        assert_eq!(
            flags,
            [true, true, false],
            "8 and 9 from 6's region, then the clique: {found:?}"
        );
        let from_clique = r.popular_for(&g, 0, 10);
        assert!(from_clique.iter().all(|p| !(0..5).contains(&p.node)));
        assert_eq!(
            from_clique[0].node, 6,
            "the most followed outside: {from_clique:?}"
        );
    }

    #[test]
    fn most_common_prefers_the_smallest_of_equals() {
        assert_eq!(most_common(&mut [3, 1, 3, 1, 2]), Some(1));
        assert_eq!(most_common(&mut [5, 5, 2]), Some(5));
        assert_eq!(most_common(&mut []), None);
    }
}
