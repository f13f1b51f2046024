//! Reads arbitrary bytes as a graph-tool file and as an edge list (both directed and not): either a graph
//! whose every stored arc names nodes inside it, with both directions of the rows agreeing, or an error;
//! never a panic, and memory bounded by the input (a header claiming billions of vertices must not allocate
//! for them).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_graph::{load_edge_list, load_gt, Graph, NodeId};

fn check(g: &Graph) {
    let mut out_arcs = 0;
    let mut in_arcs = 0;
    for v in 0..g.nodes() as NodeId {
        for &w in g.out_neighbours(v) {
            assert!((w as usize) < g.nodes());
            assert!(g.in_neighbours(w).binary_search(&v).is_ok());
        }
        out_arcs += g.out_neighbours(v).len();
        in_arcs += g.in_neighbours(v).len();
        assert_eq!(g.node(g.id(v)), Some(v));
    }
    assert_eq!(out_arcs, g.arcs());
    assert_eq!(in_arcs, g.arcs());
}

fuzz_target!(|data: &[u8]| {
    if let Ok(g) = load_gt(data) {
        check(&g);
    }
    for directed in [true, false] {
        if let Ok(g) = load_edge_list(data, directed) {
            check(&g);
        }
    }
});
