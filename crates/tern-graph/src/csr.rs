//! Compressed sparse rows in both directions.

use std::collections::HashMap;

/// A dense node index, `0..graph.nodes()`.
pub type NodeId = u32;

/// A follow graph in compressed sparse rows: the out-neighbours of node `v` are
/// `out_targets[out_offsets[v]..out_offsets[v + 1]]`, sorted and without duplicates; likewise for in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Graph {
    directed: bool,
    out_offsets: Vec<u64>,
    out_targets: Vec<NodeId>,
    in_offsets: Vec<u64>,
    in_sources: Vec<NodeId>,
    /// The users' own ids, by dense index; `None` when they are the indices themselves.
    ids: Option<Vec<u64>>,
    index: HashMap<u64, NodeId>,
}

/// Rows of `n` nodes from `(row, column)` pairs: sorted, without duplicates.
fn rows(
    n: usize,
    pairs: impl Iterator<Item = (NodeId, NodeId)> + Clone,
) -> (Vec<u64>, Vec<NodeId>) {
    let mut offsets = vec![0u64; n + 1];
    for (row, _) in pairs.clone() {
        offsets[row as usize + 1] += 1;
    }
    for i in 0..n {
        offsets[i + 1] += offsets[i];
    }
    let mut next = offsets.clone();
    let mut columns = vec![0; offsets[n] as usize];
    for (row, column) in pairs {
        columns[next[row as usize] as usize] = column;
        next[row as usize] += 1;
    }
    // Sort and dedupe each row, compacting as we go.
    let mut write = 0usize;
    let mut compacted = vec![0u64; n + 1];
    for v in 0..n {
        let (start, end) = (offsets[v] as usize, offsets[v + 1] as usize);
        let row = &mut columns[start..end];
        row.sort_unstable();
        let mut last = None;
        for i in start..end {
            let c = columns[i];
            if last != Some(c) {
                columns[write] = c;
                write += 1;
                last = Some(c);
            }
        }
        compacted[v + 1] = write as u64;
    }
    columns.truncate(write);
    (compacted, columns)
}

impl Graph {
    /// A graph of `nodes` dense nodes and `edges` between them (self-loops kept, repeated edges once).
    /// Undirected: each edge is stored in both directions.
    ///
    /// # Panics
    /// If an edge names a node `>= nodes` (the loaders check this first and return an error).
    pub fn from_edges(nodes: usize, edges: &[(NodeId, NodeId)], directed: bool) -> Graph {
        assert!(
            edges
                .iter()
                .all(|&(a, b)| (a as usize) < nodes && (b as usize) < nodes),
            "an edge names a node outside 0..{nodes}"
        );
        let both = |reverse: bool| {
            edges.iter().flat_map(move |&(a, b)| {
                let forward = if reverse { (b, a) } else { (a, b) };
                let back = (!directed && a != b).then_some((forward.1, forward.0));
                std::iter::once(forward).chain(back)
            })
        };
        let (out_offsets, out_targets) = rows(nodes, both(false));
        let (in_offsets, in_sources) = rows(nodes, both(true));
        Graph {
            directed,
            out_offsets,
            out_targets,
            in_offsets,
            in_sources,
            ids: None,
            index: HashMap::new(),
        }
    }

    /// A graph with the same nodes (and ids) and directedness as this one, holding exactly `arcs` (both
    /// directions of an undirected edge are two arcs).
    pub(crate) fn with_arcs(&self, arcs: &[(NodeId, NodeId)]) -> Graph {
        let mut g = Graph::from_edges(self.nodes(), arcs, true);
        g.directed = self.directed;
        g.ids.clone_from(&self.ids);
        g.index.clone_from(&self.index);
        g
    }

    /// The same graph whose node `v` is the user `ids[v]`.
    pub(crate) fn with_ids(mut self, ids: Vec<u64>) -> Graph {
        self.index = ids
            .iter()
            .enumerate()
            .map(|(i, &id)| (id, i as NodeId))
            .collect();
        self.ids = Some(ids);
        self
    }

    pub fn nodes(&self) -> usize {
        self.out_offsets.len() - 1
    }

    /// Stored (directed) edges: an undirected edge counts twice, a self-loop once.
    pub fn arcs(&self) -> usize {
        self.out_targets.len()
    }

    pub fn is_directed(&self) -> bool {
        self.directed
    }

    pub fn out_neighbours(&self, v: NodeId) -> &[NodeId] {
        let v = v as usize;
        &self.out_targets[self.out_offsets[v] as usize..self.out_offsets[v + 1] as usize]
    }

    pub fn in_neighbours(&self, v: NodeId) -> &[NodeId] {
        let v = v as usize;
        &self.in_sources[self.in_offsets[v] as usize..self.in_offsets[v + 1] as usize]
    }

    /// Whether `a` follows `b`.
    pub fn has_arc(&self, a: NodeId, b: NodeId) -> bool {
        self.out_neighbours(a).binary_search(&b).is_ok()
    }

    /// The user's own id of node `v`.
    pub fn id(&self, v: NodeId) -> u64 {
        self.ids
            .as_ref()
            .map_or(u64::from(v), |ids| ids[v as usize])
    }

    /// The node of the user `id`, if the graph has it.
    pub fn node(&self, id: u64) -> Option<NodeId> {
        match &self.ids {
            Some(_) => self.index.get(&id).copied(),
            None => NodeId::try_from(id)
                .ok()
                .filter(|&v| (v as usize) < self.nodes()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn both_directions_sorted_and_deduplicated() {
        let g = Graph::from_edges(4, &[(0, 2), (0, 1), (0, 2), (3, 0), (1, 1)], true);
        assert_eq!(g.out_neighbours(0), [1, 2]);
        assert_eq!(g.in_neighbours(0), [3]);
        assert_eq!(g.in_neighbours(2), [0]);
        assert_eq!(g.out_neighbours(1), [1]);
        assert_eq!(g.arcs(), 4);
        assert!(g.has_arc(3, 0) && !g.has_arc(0, 3));
    }

    #[test]
    fn undirected_edges_go_both_ways() {
        let g = Graph::from_edges(3, &[(0, 1), (2, 2)], false);
        assert_eq!(g.out_neighbours(1), [0]);
        assert_eq!(g.in_neighbours(1), [0]);
        assert_eq!(g.out_neighbours(2), [2]);
        assert_eq!(g.arcs(), 3);
    }

    proptest! {
        /// Every edge given is stored once in each direction's rows, and nothing else is.
        #[test]
        fn rows_hold_exactly_the_edges(edges in proptest::collection::vec((0u32..20, 0u32..20), 0..200)) {
            let g = Graph::from_edges(20, &edges, true);
            let mut want: Vec<(u32, u32)> = edges.clone();
            want.sort_unstable();
            want.dedup();
            let mut out = Vec::new();
            let mut inn = Vec::new();
            for v in 0..20 {
                out.extend(g.out_neighbours(v).iter().map(|&w| (v, w)));
                inn.extend(g.in_neighbours(v).iter().map(|&u| (u, v)));
            }
            inn.sort_unstable();
            prop_assert_eq!(&out, &want);
            prop_assert_eq!(&inn, &want);
        }
    }
}
