//! The memcached protocol, pure: bytes in, frames out.

pub mod client;
