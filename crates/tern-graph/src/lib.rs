//! The follow graph the recommender's candidate sources walk, and the sources themselves. A directed graph in
//! compressed sparse rows, both directions (out-neighbours: whom a user follows; in-neighbours: who follows
//! them), with the users' own ids beside the dense indices. Loaded from graph-tool's binary format (`.gt`,
//! `.gt.gz`; topology only: the property maps after the adjacency, such as pgp-strong-2009's PGP user ids,
//! are never read), from an edge list (two integer ids per line, `#` comments), or generated (a seeded
//! power-law graph with communities). An undirected graph is stored with both directions of every edge. The
//! sources (friends of friends, co-follow, personalized PageRank walks, popular accounts of a region) are
//! pure computations over it with per-call limits; `tern graph` serves them over the network. No I/O beyond
//! reading the file it is given; no threads.

mod csr;
mod load;
mod regions;
mod scratch;
mod shard;
mod sources;
mod split;
mod synthetic;

pub use csr::{Graph, NodeId};
pub use load::{load_edge_list, load_gt, load_path, LoadError};
pub use regions::{Popular, Regions};
pub use scratch::Scratch;
pub use shard::{shard_of, splitmix64, Shard};
pub use sources::{
    co_follow, friends_of_friends, personalized_pagerank, TwoHop, TwoHopLimits, Visited,
    WalkLimits, Walked,
};
pub use split::{hold_out, HeldOut};
pub use synthetic::Synthetic;
