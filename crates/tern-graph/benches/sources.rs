//! What one call of each candidate source costs, with `tern graph`'s default limits (two-hop samples of 200
//! by 200, walks of 3,000 steps) over 64 viewers drawn from the accounts that follow at least five. The graph
//! is the file named by `TERN_BENCH_GRAPH` (a `.gt`, `.gt.gz` or edge list: pgp-strong-2009 is the one the
//! service's benchmark serves), else a generated graph of a million follows.

use std::hint::black_box;
use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tern_graph::{
    co_follow, friends_of_friends, load_path, personalized_pagerank, Graph, NodeId, Scratch,
    Synthetic, TwoHopLimits, WalkLimits,
};

const VIEWERS: usize = 64;

fn graph() -> Graph {
    match std::env::var_os("TERN_BENCH_GRAPH") {
        Some(path) => load_path(Path::new(&path), true).expect("TERN_BENCH_GRAPH names a graph"),
        None => Synthetic::with_edges(1_000_000, 1).generate(),
    }
}

/// Every `step`-th account that follows at least five, up to [`VIEWERS`].
fn viewers(graph: &Graph) -> Vec<NodeId> {
    let active: Vec<NodeId> = (0..graph.nodes() as NodeId)
        .filter(|&v| graph.out_neighbours(v).len() >= 5)
        .collect();
    let step = (active.len() / VIEWERS).max(1);
    active.into_iter().step_by(step).take(VIEWERS).collect()
}

fn sources(c: &mut Criterion) {
    let graph = graph();
    let viewers = viewers(&graph);
    let two_hop = TwoHopLimits {
        first_hop: 200,
        second_hop: 200,
        limit: 150,
    };
    let walk = WalkLimits {
        steps: 3_000,
        restart: 0.3,
        limit: 120,
    };
    let mut scratch = Scratch::new();
    let mut group = c.benchmark_group("sources");
    group.throughput(Throughput::Elements(viewers.len() as u64));
    group.bench_function("friends_of_friends", |b| {
        b.iter(|| {
            for &v in &viewers {
                black_box(friends_of_friends(&graph, v, two_hop, 7, &mut scratch));
            }
        })
    });
    group.bench_function("co_follow", |b| {
        b.iter(|| {
            for &v in &viewers {
                // The viewer's first followee as the profile being viewed.
                let profile = graph.out_neighbours(v)[0];
                black_box(co_follow(&graph, v, profile, two_hop, 7, &mut scratch));
            }
        })
    });
    group.bench_function("personalized_pagerank", |b| {
        b.iter(|| {
            for &v in &viewers {
                black_box(personalized_pagerank(
                    &graph,
                    v,
                    walk,
                    None,
                    7,
                    &mut scratch,
                ));
            }
        })
    });
    group.finish();
}

criterion_group!(benches, sources);
criterion_main!(benches);
