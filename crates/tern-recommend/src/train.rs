//! `tern recommend train-data`: the rows the model learns from, built by the serving code's own functions.
//! A seeded share of follows is held out of the graph; for a sample of users, the sources run on what
//! remains (in process, with the service's limits), each candidate gets the row of features the service
//! would compute, and its label says whether the user's held-out follows include it. Both calls are
//! covered: Suggested Users' sources for the user, and Chaining's for the user viewing one of the accounts
//! they follow.

use std::io::Write;
use std::path::Path;

use rand::seq::IndexedRandom;
use rand::SeedableRng;
use tern_graph::{hold_out, Graph, NodeId, Regions, Shard};
use tern_graph_proto::{CandidatesRequest, GraphReply, Method};
use tern_graph_service::{GraphData, GraphLimits};

use crate::features::SourceSizes;
use crate::features::{call_sources, push_row, AccountFeatures, Pool, Viewer, FEATURE_NAMES};
use crate::prepare::account_features;

/// How the rows are made.
#[derive(Debug, Clone)]
pub struct TrainingSpec {
    /// Share of each eligible user's follows held out.
    pub holdout: f64,
    /// Users need at least this many follows to have some held out.
    pub min_follows: usize,
    /// Users sampled (among those with held-out follows).
    pub users: usize,
    pub seed: u64,
    pub sizes: SourceSizes,
}

/// What was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrainingRows {
    pub rows: usize,
    pub positives: usize,
    pub users: usize,
}

/// The pool of one request and the viewer as the service would see them, from the graph in process.
pub fn local_pool(
    data: &GraphData,
    features: &[AccountFeatures],
    sizes: &SourceSizes,
    viewer: NodeId,
    profile: Option<NodeId>,
) -> (Pool, Viewer) {
    let graph = &data.graph;
    let viewer_id = graph.id(viewer) as i64;
    let mut pool = Pool::default();
    let mut popular = Vec::new();
    for (source, about) in call_sources(viewer_id, profile.map(|p| graph.id(p) as i64)) {
        let request = CandidatesRequest {
            viewer: viewer_id,
            profile: about,
            limit: sizes.of(source) as i32,
            deadline_ms: None,
            seed: Some(viewer_id),
        };
        match data.candidates(source, &request, None) {
            GraphReply::Candidates(r) if source == Method::PopularInRegion => {
                popular = r.candidates
            }
            GraphReply::Candidates(r) => pool.add(source, &r.candidates),
            _ => {}
        }
    }
    let ids = |list: &[NodeId]| {
        let mut ids: Vec<i64> = list.iter().map(|&w| graph.id(w) as i64).collect();
        ids.sort_unstable();
        ids
    };
    let seen = Viewer {
        features: Some(features[viewer as usize]),
        following: Some(ids(graph.out_neighbours(viewer))),
        followers: Some(ids(graph.in_neighbours(viewer))),
    };
    if let (Some(followers), Some(following)) = (&seen.followers, &seen.following) {
        pool.add_followers(followers, following);
    }
    pool.add_popular(&popular, sizes);
    (pool, seen)
}

/// Writes training rows for `graph` to `out` as CSV: `group` (the request), the features, `label`.
pub fn write_training_rows(
    graph: &Graph,
    spec: &TrainingSpec,
    regions_of: impl FnOnce(&Graph) -> Regions,
    out: &Path,
) -> anyhow::Result<TrainingRows> {
    let split = hold_out(graph, spec.holdout, spec.min_follows, spec.seed);
    let mut users: Vec<NodeId> = split.users().collect();
    let regions = regions_of(&split.train);
    let features: Vec<AccountFeatures> = account_features(&split.train, &regions)
        .map(|(_, f)| f)
        .collect();
    let data = GraphData {
        graph: split.train,
        regions,
        shard: Shard::WHOLE,
        limits: GraphLimits::default(),
    };
    let mut rng = rand::rngs::SmallRng::seed_from_u64(spec.seed ^ 0x7261_6e6b);
    users = users
        .choose_multiple(&mut rng, spec.users.min(users.len()))
        .copied()
        .collect();
    users.sort_unstable();
    let mut file = std::io::BufWriter::new(std::fs::File::create(out)?);
    writeln!(file, "group,{},label", FEATURE_NAMES.join(","))?;
    let mut written = TrainingRows {
        rows: 0,
        positives: 0,
        users: users.len(),
    };
    let mut row = Vec::with_capacity(FEATURE_NAMES.len());
    let mut group = 0usize;
    for &user in &users {
        let held = &split.held[user as usize];
        let profile = data.graph.out_neighbours(user).choose(&mut rng).copied();
        // Suggested Users always; Chaining when the user follows someone, viewing one of them.
        for profile in std::iter::once(None).chain(profile.map(Some)) {
            let (pool, viewer) = local_pool(&data, &features, &spec.sizes, user, profile);
            for (i, &account) in pool.accounts.iter().enumerate() {
                let node = data
                    .graph
                    .node(account as u64)
                    .expect("candidates are accounts");
                if viewer
                    .following
                    .as_ref()
                    .is_some_and(|f| f.binary_search(&account).is_ok())
                {
                    continue;
                }
                row.clear();
                push_row(
                    &mut row,
                    &pool.evidence[i],
                    Some(&features[node as usize]),
                    account,
                    &viewer,
                );
                let label = held.binary_search(&node).is_ok();
                write!(file, "{group}")?;
                for v in &row {
                    if v.is_nan() {
                        write!(file, ",")?;
                    } else {
                        write!(file, ",{v}")?;
                    }
                }
                writeln!(file, ",{}", u8::from(label))?;
                written.rows += 1;
                written.positives += usize::from(label);
            }
            group += 1;
        }
    }
    file.flush()?;
    Ok(written)
}
