//! The candidate sources: friends of friends, co-follow (Chaining) and personalized PageRank. Each takes the
//! graph, a start node, its limits and a seed, and returns scored candidates, best first. They are pure
//! computations over the graph; the service decides which to run and with what deadline.

use std::time::Instant;

use rand::Rng;

use crate::csr::{Graph, NodeId};
use crate::scratch::{request_rng, sample, uniform_below, Scratch};

/// Limits of a two-hop count.
#[derive(Debug, Clone, Copy)]
pub struct TwoHopLimits {
    /// Neighbours of the start node taken (a uniform seeded sample past it).
    pub first_hop: usize,
    /// Neighbours of each of those taken.
    pub second_hop: usize,
    /// Candidates returned.
    pub limit: usize,
}

/// A candidate reached in two hops, with how it was reached.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TwoHop {
    pub node: NodeId,
    /// Paths from the start node through distinct middle nodes (common neighbours).
    pub common: u32,
    /// Adamic-Adar: the sum over those middle nodes of 1 / ln(degree), so a path through an account that
    /// follows few weighs more than one through an account that follows everyone.
    pub adamic_adar: f64,
}

/// Which way each hop goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hop {
    Out,
    In,
}

fn neighbours(graph: &Graph, v: NodeId, hop: Hop) -> &[NodeId] {
    match hop {
        Hop::Out => graph.out_neighbours(v),
        Hop::In => graph.in_neighbours(v),
    }
}

/// Friends of friends: accounts followed by the accounts `viewer` follows, by common neighbours (ties by
/// Adamic-Adar, then node). Excludes the viewer and whom the viewer already follows. Returns the best `limit`
/// by common neighbours and, among the rest, the best `limit` by Adamic-Adar, so both orders can be cut from
/// one answer.
pub fn friends_of_friends(
    graph: &Graph,
    viewer: NodeId,
    limits: TwoHopLimits,
    seed: u64,
    scratch: &mut Scratch,
) -> Vec<TwoHop> {
    two_hop(
        graph,
        viewer,
        viewer,
        [Hop::Out, Hop::Out],
        limits,
        seed,
        scratch,
    )
}

/// Co-follow, Chaining's source: accounts followed by the followers of `profile`, by how many of them follow
/// each (ties as in [`friends_of_friends`]). Excludes the profile, the viewer and whom the viewer follows.
pub fn co_follow(
    graph: &Graph,
    viewer: NodeId,
    profile: NodeId,
    limits: TwoHopLimits,
    seed: u64,
    scratch: &mut Scratch,
) -> Vec<TwoHop> {
    let mut found = two_hop(
        graph,
        viewer,
        profile,
        [Hop::In, Hop::Out],
        limits,
        seed,
        scratch,
    );
    found.retain(|c| c.node != profile);
    found
}

fn two_hop(
    graph: &Graph,
    viewer: NodeId,
    start: NodeId,
    hops: [Hop; 2],
    limits: TwoHopLimits,
    seed: u64,
    scratch: &mut Scratch,
) -> Vec<TwoHop> {
    scratch.reset(graph.nodes());
    mark_known(graph, viewer, scratch);
    let mut rng = request_rng(seed, start);
    let (mut first_positions, mut second_positions) = (Vec::new(), Vec::new());
    let first = neighbours(graph, start, hops[0]);
    for middle in sample(first, limits.first_hop, &mut rng, &mut first_positions) {
        let next = neighbours(graph, middle, hops[1]);
        // The middle node's degree counts both directions: its whole activity, as Adamic-Adar's degree.
        let degree = graph.out_neighbours(middle).len() + graph.in_neighbours(middle).len();
        let weight = 1.0 / (degree.max(2) as f64).ln();
        for candidate in sample(next, limits.second_hop, &mut rng, &mut second_positions) {
            scratch.add(candidate, weight);
        }
    }
    let mut found = scratch.found(|c, count, weight| TwoHop {
        node: c,
        common: count,
        adamic_adar: weight,
    });
    best_of_both(&mut found, limits.limit);
    found
}

/// Marks the viewer and whom it follows, the accounts no source proposes to it.
fn mark_known(graph: &Graph, viewer: NodeId, scratch: &mut Scratch) {
    let follows = graph.out_neighbours(viewer).iter().copied();
    scratch.mark_known(std::iter::once(viewer).chain(follows));
}

/// Keeps the best `limit` by common neighbours, then adds the best `limit` of the rest by Adamic-Adar; the
/// result is ordered by common neighbours.
fn best_of_both(found: &mut Vec<TwoHop>, limit: usize) {
    let by_common = |a: &TwoHop, b: &TwoHop| {
        b.common
            .cmp(&a.common)
            .then(b.adamic_adar.total_cmp(&a.adamic_adar))
            .then(a.node.cmp(&b.node))
    };
    let by_adamic_adar = |a: &TwoHop, b: &TwoHop| {
        b.adamic_adar
            .total_cmp(&a.adamic_adar)
            .then(a.node.cmp(&b.node))
    };
    // Selecting, not sorting, all that was found: a two-hop walk touches tens of thousands of accounts and
    // keeps a few hundred. Both orders are total, so what is kept is what sorting would keep.
    if found.len() > limit {
        found.select_nth_unstable_by(limit, by_common);
        let rest = &mut found[limit..];
        if rest.len() > limit {
            rest.select_nth_unstable_by(limit, by_adamic_adar);
        }
        found.truncate(2 * limit);
    }
    found.sort_unstable_by(by_common);
}

/// Limits of a personalized PageRank walk.
#[derive(Debug, Clone, Copy)]
pub struct WalkLimits {
    /// Total steps over all walks.
    pub steps: usize,
    /// Probability of jumping back to the viewer after each step (the walk's mean length is its inverse).
    pub restart: f64,
    pub limit: usize,
}

/// A candidate reached by the walks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Visited {
    pub node: NodeId,
    /// Share of all steps that landed on the node: the personalized PageRank estimate.
    pub score: f64,
}

/// What the walks found and how far they got.
#[derive(Debug, Clone, PartialEq)]
pub struct Walked {
    pub candidates: Vec<Visited>,
    pub steps: usize,
    /// The deadline stopped the walks before their step budget.
    pub cut_short: bool,
}

/// How many steps run between looks at the clock: reading it costs about as much as a few dozen steps.
const STEPS_PER_CLOCK_CHECK: usize = 1024;

/// Walks taken side by side, a step of each in turn. A step waits on two loads from memory (where the walk
/// is, then the follow it takes) and the next step needs their result, so one walk at a time leaves the CPU
/// idle; the steps of independent walks overlap those waits, as long as no branch waits on a load (a
/// mispredicted one throws the other walks' work away): the restart is drawn before the loads, the move is
/// a select, and the visits are counted after the walks.
const WALKERS: usize = 4;

/// Personalized PageRank by random walks with restart from `viewer` along follows (as Twitter's WTF and
/// Pinterest's Pixie estimate it): visit counts over `limits.steps` steps, stopping at `deadline` with what
/// it has. A walk at an account that follows nobody restarts. Excludes the viewer and whom it follows.
pub fn personalized_pagerank(
    graph: &Graph,
    viewer: NodeId,
    limits: WalkLimits,
    deadline: Option<Instant>,
    seed: u64,
    scratch: &mut Scratch,
) -> Walked {
    scratch.reset(graph.nodes());
    mark_known(graph, viewer, scratch);
    let mut rng = request_rng(seed, viewer);
    let mut steps = 0;
    let mut cut_short = false;
    let mut visits = scratch.take_visits();
    if !graph.out_neighbours(viewer).is_empty() {
        let mut walkers = [viewer; WALKERS];
        while steps < limits.steps {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                cut_short = true;
                break;
            }
            let round = STEPS_PER_CLOCK_CHECK.min(limits.steps - steps);
            for i in 0..round {
                let at = &mut walkers[i % WALKERS];
                let restart = rng.random_bool(limits.restart) && *at != viewer;
                let next = graph.out_neighbours(*at);
                let follow = match next.len() {
                    0 => viewer,
                    n => next[uniform_below(&mut rng, n as u32) as usize],
                };
                *at = if restart { viewer } else { follow };
                visits.push(*at);
            }
            steps += round;
        }
    }
    // The viewer's own visits (the restarts) are counted too; it is known, so never a candidate.
    scratch.count_visits(&visits);
    scratch.return_visits(visits);
    let total = steps.max(1) as f64;
    let mut candidates = scratch.found(|c, count, _| Visited {
        node: c,
        score: f64::from(count) / total,
    });
    // Selecting the best before sorting them: the walks touch thousands of accounts and a call keeps about
    // a hundred. The order is total, so the result is what sorting everything would give.
    let best_first =
        |a: &Visited, b: &Visited| b.score.total_cmp(&a.score).then(a.node.cmp(&b.node));
    if candidates.len() > limits.limit {
        candidates.select_nth_unstable_by(limits.limit, best_first);
        candidates.truncate(limits.limit);
    }
    candidates.sort_unstable_by(best_first);
    Walked {
        candidates,
        steps,
        cut_short,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(limit: usize) -> TwoHopLimits {
        TwoHopLimits {
            first_hop: 100,
            second_hop: 100,
            limit,
        }
    }

    /// 0 follows 1, 2, 3; they follow 4 (all three), 5 (two), 1 (one: 2 -> 1, already followed).
    fn small() -> Graph {
        Graph::from_edges(
            7,
            &[
                (0, 1),
                (0, 2),
                (0, 3),
                (1, 4),
                (2, 4),
                (3, 4),
                (1, 5),
                (2, 5),
                (2, 1),
                (6, 5),
                (6, 4),
            ],
            true,
        )
    }

    #[test]
    fn friends_of_friends_counts_common_neighbours_and_skips_known_accounts() {
        let g = small();
        let found = friends_of_friends(&g, 0, limits(10), 1, &mut Scratch::new());
        let got: Vec<_> = found.iter().map(|c| (c.node, c.common)).collect();
        assert_eq!(got, [(4, 3), (5, 2)]);
        assert!(found[0].adamic_adar > found[1].adamic_adar);
    }

    #[test]
    fn co_follow_finds_what_the_profiles_followers_follow() {
        let g = small();
        // Followers of 5 are 1, 2 and 6; they follow 4 (three of them), 1 (one) and 5 itself.
        let found = co_follow(&g, 3, 5, limits(10), 1, &mut Scratch::new());
        let got: Vec<_> = found.iter().map(|c| (c.node, c.common)).collect();
        assert_eq!(
            got,
            [(1, 1)],
            "4 is followed by the viewer 3, 5 is the profile"
        );
        let found = co_follow(&g, 6, 5, limits(10), 1, &mut Scratch::new());
        let got: Vec<_> = found.iter().map(|c| (c.node, c.common)).collect();
        assert_eq!(got, [(1, 1)]);
    }

    #[test]
    fn the_limit_keeps_the_best_by_each_measure() {
        // 0 follows 1, 3 (both high degree, both following 10..20) and 2 (low degree, following 30): 10..20
        // have two common neighbours, 30 one, but through a path that weighs more.
        let mut edges = vec![(0, 1), (0, 3), (0, 2), (2, 30)];
        edges.extend((10..20).flat_map(|c| [(1, c), (3, c)]));
        edges.extend((40..60).flat_map(|f| [(f, 1), (f, 3)]));
        let g = Graph::from_edges(60, &edges, true);
        let found = friends_of_friends(&g, 0, limits(3), 1, &mut Scratch::new());
        assert_eq!(found.len(), 6);
        let best_aa = found
            .iter()
            .max_by(|a, b| a.adamic_adar.total_cmp(&b.adamic_adar))
            .unwrap();
        assert_eq!(best_aa.node, 30, "the low-degree path's candidate is kept");
    }

    #[test]
    fn walks_visit_the_neighbourhood_in_proportion_and_are_seeded() {
        let g = small();
        let walk = |seed| {
            personalized_pagerank(
                &g,
                0,
                WalkLimits {
                    steps: 20_000,
                    restart: 0.3,
                    limit: 10,
                },
                None,
                seed,
                &mut Scratch::new(),
            )
        };
        let walked = walk(5);
        assert_eq!(walked.steps, 20_000);
        assert!(!walked.cut_short);
        assert_eq!(walked.candidates[0].node, 4, "{:?}", walked.candidates);
        assert!(walked
            .candidates
            .iter()
            .all(|c| ![0, 1, 2, 3].contains(&c.node)));
        assert_eq!(walk(5), walked);
    }

    #[test]
    fn a_walk_stops_at_its_deadline_with_what_it_has() {
        let g = small();
        let walked = personalized_pagerank(
            &g,
            0,
            WalkLimits {
                steps: usize::MAX,
                restart: 0.3,
                limit: 10,
            },
            Some(Instant::now() + std::time::Duration::from_millis(20)),
            1,
            &mut Scratch::new(),
        );
        assert!(walked.cut_short);
        assert!(walked.steps > 0 && !walked.candidates.is_empty());
    }

    #[test]
    fn a_viewer_who_follows_nobody_gets_no_walk() {
        let g = small();
        let walked = personalized_pagerank(
            &g,
            4,
            WalkLimits {
                steps: 1000,
                restart: 0.3,
                limit: 10,
            },
            None,
            1,
            &mut Scratch::new(),
        );
        assert_eq!((walked.steps, walked.candidates.len()), (0, 0));
    }

    proptest::proptest! {
        /// Selecting keeps exactly what sorting everything found kept, in the same order (distinct accounts,
        /// as found are, with few distinct counts and weights, so ties are common).
        #[test]
        fn best_of_both_keeps_what_sorting_kept(
            found in proptest::collection::vec((0u32..4, 0u8..4), 0..80),
            limit in 0usize..30,
        ) {
            let mut found: Vec<TwoHop> = found
                .into_iter()
                .enumerate()
                .map(|(node, (common, weight))| TwoHop {
                    // 761 is prime to 1000: distinct for distinct indexes, in scrambled order.
                    node: (node as u32 * 761) % 1000,
                    common,
                    adamic_adar: f64::from(weight) / 3.0,
                })
                .collect();
            let mut sorted = found.clone();
            let by_common = |a: &TwoHop, b: &TwoHop| {
                b.common
                    .cmp(&a.common)
                    .then(b.adamic_adar.total_cmp(&a.adamic_adar))
                    .then(a.node.cmp(&b.node))
            };
            sorted.sort_by(by_common);
            if sorted.len() > limit {
                sorted[limit..].sort_by(|a, b| {
                    b.adamic_adar
                        .total_cmp(&a.adamic_adar)
                        .then(a.node.cmp(&b.node))
                });
                sorted.truncate(2 * limit);
                sorted.sort_by(by_common);
            }
            best_of_both(&mut found, limit);
            proptest::prop_assert_eq!(found, sorted);
        }
    }
}
