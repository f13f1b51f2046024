//! `tern recommend prepare`: the offline step that computes every account's features from the graph and
//! writes them to the tern cache nodes, placed by ketama as the service will look for them.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures::future::join_all;
use tern_cache_client::{CacheClient, KeyHash};
use tern_graph::{Graph, NodeId, Regions};
use tern_runtime::PoolConfig;

use crate::features::AccountFeatures;

/// Sets in flight at once (pipelined over the pool's connections).
const BATCH: usize = 2000;

/// Every account's features.
pub fn account_features<'a>(
    graph: &'a Graph,
    regions: &'a Regions,
) -> impl Iterator<Item = (i64, AccountFeatures)> + 'a {
    (0..graph.nodes() as NodeId).map(|v| {
        (
            graph.id(v) as i64,
            AccountFeatures {
                followers: graph.in_neighbours(v).len() as u32,
                following: graph.out_neighbours(v).len() as u32,
                region: regions.region(v),
                region_size: regions.region_size(v) as u32,
            },
        )
    })
}

/// Writes the features of every account of `graph` to `nodes`; returns how many were stored.
pub fn write_features(
    graph: &Graph,
    regions: &Regions,
    nodes: &[SocketAddr],
    hash: KeyHash,
) -> anyhow::Result<usize> {
    anyhow::ensure!(!nodes.is_empty(), "no cache node to write the features to");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async {
        let weighted: Vec<(SocketAddr, u32)> = nodes.iter().map(|&a| (a, 1)).collect();
        let client = CacheClient::new(&weighted, hash, PoolConfig::default());
        let all: Vec<(String, String)> = account_features(graph, regions)
            .map(|(account, f)| (AccountFeatures::key(account), f.encode()))
            .collect();
        let mut stored = 0;
        for batch in all.chunks(BATCH) {
            let deadline = Instant::now() + Duration::from_secs(10);
            let sets = batch
                .iter()
                .map(|(key, value)| client.set(key.as_bytes(), value.as_bytes(), 0, 0, deadline));
            for (result, (key, _)) in join_all(sets).await.into_iter().zip(batch) {
                match result {
                    Ok(true) => stored += 1,
                    Ok(false) => anyhow::bail!("the cache did not store {key}"),
                    Err(e) => anyhow::bail!("storing {key}: {e}"),
                }
            }
        }
        Ok(stored)
    })
}
