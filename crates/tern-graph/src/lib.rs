//! The follow graph the recommender's candidate sources walk: a directed graph in compressed sparse rows,
//! both directions (out-neighbours: whom a user follows; in-neighbours: who follows them), with the users'
//! own ids beside the dense indices. Loaded from graph-tool's binary format (`.gt`, `.gt.gz`; topology only:
//! the property maps after the adjacency, such as pgp-strong-2009's PGP user ids, are never read) or from an
//! edge list (two integer ids per line, `#` comments). An undirected graph is stored with both directions of
//! every edge. No I/O beyond reading the file it is given; no threads.

mod csr;
mod load;

pub use csr::{Graph, NodeId};
pub use load::{load_edge_list, load_gt, load_path, LoadError};
