//! A Rust client for tern cache (and any memcached): keys are placed on nodes by the ketama continuum exactly
//! as twemproxy places them ([`ring`]), so a service using this client and one going through a twemproxy pool
//! with the same servers agree on where every key lives; calls run from a tern I/O loop over the runtime's
//! pipelined outbound connections with a deadline each, and multi-gets fan out one `get` per node and keep
//! partial results ([`client`]).

pub mod client;
pub mod ring;

pub use client::{
    results_by_key, CacheClient, ClientError, Item, KeyResult, Request, Response, StorageCommand,
    TextCodec,
};
pub use ring::{KeyHash, Node, Ring};
