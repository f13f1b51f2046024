//! The memcached protocol, pure: bytes in, frames out. [`decode`] reads one request of memcached 1.6.18's
//! text and meta protocols out of a read buffer exactly as memcached (`-B ascii`) would, borrowing keys and
//! values from the buffer, and says how many bytes it used (including data blocks memcached swallows) or
//! that the connection must close; [`binary`] does the same for memcached's binary protocol (`-B binary`)
//! and writes its response packets; [`ascii_auth`] reads a connection that must authenticate first (`-Y`) and [`sasl`] the
//! binary protocol's SASL messages, Cyrus's configuration and its user database (`-S`);
//! [`reply`] writes memcached's exact text reply bytes into an output `Vec<u8>`; [`udp`] frames both for
//! memcached's UDP transport; [`client`] is the client side (request encoding and incremental reply
//! parsing). Where memcached's documentation and its code disagree, this
//! crate follows the code (number parsing through C's `strtol`, base64, tokenizing, error texts), as
//! checked against the real binary in `tests/against_memcached.rs`. No I/O happens here.

pub mod ascii_auth;
mod base64;
pub mod binary;
pub mod client;
mod decode;
mod error;
pub mod number;
pub mod reply;
pub mod request;
pub mod sasl;
mod tokens;
pub mod udp;

pub use decode::{decode, Decoded, Limits};
pub use request::{
    CrawlerClasses, GetKind, LruCrawler, MetaFlags, MetaKey, MetaSetMode, Request, ShutdownMode,
    StoreKind, KEY_MAX_LENGTH,
};
pub use tokens::Words;
