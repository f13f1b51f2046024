//! [`CacheClient`]: memcached text-protocol calls to a pool of cache nodes from a tern I/O loop. Each key goes
//! to the node the [`Ring`] picks; each node is a per-loop [`Backend`] (pipelined connections, a deadline on
//! every call); a multi-get is split by node, sent as one `get` per node, and awaited with one deadline,
//! keeping whatever arrived (a slow or dead node costs only its own keys). A key a multi-get of the same
//! loop is already fetching is not asked again: the second asker waits for the first get (single-flight).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::SocketAddr;
use std::ops::Range;
use std::rc::Rc;
use std::time::Instant;

use bytes::Bytes;
use futures::future::{join_all, FutureExt, LocalBoxFuture, Shared};
pub use tern_memcache_proto::client::StorageCommand;
use tern_memcache_proto::client::{
    encode_arithmetic, encode_delete, encode_get, encode_storage, encode_touch, parse_reply,
    validate_key, EncodeError, Limits, Parse, Reply,
};
use tern_runtime::{Backend, BackendRole, CallError, ClientCodec, Decoded, PoolConfig};

use crate::ring::{KeyHash, Node, Ring};

/// One request to one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Get {
        keys: Vec<Vec<u8>>,
    },
    Store {
        command: StorageCommand,
        key: Vec<u8>,
        flags: u32,
        exptime: u32,
        value: Vec<u8>,
    },
    Delete {
        key: Vec<u8>,
    },
    Arithmetic {
        key: Vec<u8>,
        delta: u64,
        decrement: bool,
    },
    Touch {
        key: Vec<u8>,
        exptime: u32,
    },
}

/// A stored item returned by a get. Its key and value are slices of one copy of the node's answer, so a
/// multi-get of hundreds of keys allocates once, not twice per hit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub key: Bytes,
    pub flags: u32,
    pub value: Bytes,
}

/// One node's answer to one [`Request`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// The hits of a get, in request order (misses are absent).
    Items(Vec<Item>),
    Stored,
    NotStored,
    Exists,
    NotFound,
    Deleted,
    Touched,
    Number(u64),
    /// `ERROR`, `CLIENT_ERROR ...` or `SERVER_ERROR ...`, as the node sent it.
    Error(String),
}

/// The reply as memcached's text protocol words it (`STORED`, `NOT_FOUND`, `3 items`...).
impl std::fmt::Display for Response {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Response::Items(items) if items.len() == 1 => f.write_str("1 item"),
            Response::Items(items) => write!(f, "{} items", items.len()),
            Response::Stored => f.write_str("STORED"),
            Response::NotStored => f.write_str("NOT_STORED"),
            Response::Exists => f.write_str("EXISTS"),
            Response::NotFound => f.write_str("NOT_FOUND"),
            Response::Deleted => f.write_str("DELETED"),
            Response::Touched => f.write_str("TOUCHED"),
            Response::Number(n) => write!(f, "{n}"),
            Response::Error(line) => f.write_str(line),
        }
    }
}

/// Why a client call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    #[error("invalid key or value: {0}")]
    Encode(#[from] EncodeError),
    #[error(transparent)]
    Call(#[from] CallError),
    /// The node answered with an error line.
    #[error("node error: {0}")]
    Node(String),
    /// The node answered something this call does not expect.
    #[error("unexpected reply: {0}")]
    Unexpected(Response),
}

/// The text protocol as a [`ClientCodec`]. Replies decode without knowing their request: a get's answer is
/// the only one made of `VALUE` blocks and `END`.
#[derive(Debug, Clone, Default)]
pub struct TextCodec {
    pub limits: Limits,
}

impl ClientCodec for TextCodec {
    type Request = Request;
    type Response = Response;

    fn encode(&self, request: &Request, _id: i32, out: &mut Vec<u8>) {
        // Keys were validated by the caller (`CacheClient` checks before calling), so encoding cannot fail.
        let encoded = match request {
            Request::Get { keys } => encode_get(out, keys.iter().map(Vec::as_slice), false),
            Request::Store {
                command,
                key,
                flags,
                exptime,
                value,
            } => encode_storage(out, *command, key, *flags, *exptime, value, false),
            Request::Delete { key } => encode_delete(out, key, false),
            Request::Arithmetic {
                key,
                delta,
                decrement,
            } => encode_arithmetic(out, key, *delta, *decrement, false),
            Request::Touch { key, exptime } => encode_touch(out, key, *exptime, false),
        };
        debug_assert!(encoded.is_ok(), "request validated before encoding");
    }

    fn decode(&self, input: &[u8]) -> Result<Option<Decoded<Response>>, String> {
        // Where each hit's key and value lie in `input`, until the answer is whole: nothing is copied
        // before then (an answer that arrives in several reads is parsed again from its start each time).
        let mut hits: Vec<(Range<usize>, u32, Range<usize>)> = Vec::new();
        let at = |part: &[u8]| {
            let start = part.as_ptr() as usize - input.as_ptr() as usize;
            start..start + part.len()
        };
        let mut pos = 0;
        loop {
            let (reply, consumed) = match parse_reply(&input[pos..], &self.limits) {
                Ok(Parse::Complete { reply, consumed }) => (reply, consumed),
                Ok(Parse::Incomplete) => return Ok(None),
                Err(e) => return Err(e.to_string()),
            };
            pos += consumed;
            let response = match reply {
                Reply::Value {
                    key, flags, data, ..
                } => {
                    hits.push((at(key), flags, at(data)));
                    continue;
                }
                _ if !hits.is_empty() && reply != Reply::End => {
                    return Err(format!("{reply} inside a get answer"));
                }
                Reply::End => {
                    let answer = Bytes::copy_from_slice(&input[..pos]);
                    Response::Items(
                        hits.into_iter()
                            .map(|(key, flags, value)| Item {
                                key: answer.slice(key),
                                flags,
                                value: answer.slice(value),
                            })
                            .collect(),
                    )
                }
                Reply::Stored => Response::Stored,
                Reply::NotStored => Response::NotStored,
                Reply::Exists => Response::Exists,
                Reply::NotFound => Response::NotFound,
                Reply::Deleted => Response::Deleted,
                Reply::Touched => Response::Touched,
                Reply::Number(n) => Response::Number(n),
                Reply::Error => Response::Error("ERROR".into()),
                Reply::ClientError(m) => {
                    Response::Error(format!("CLIENT_ERROR {}", String::from_utf8_lossy(m)))
                }
                Reply::ServerError(m) => {
                    Response::Error(format!("SERVER_ERROR {}", String::from_utf8_lossy(m)))
                }
                other => return Err(format!("unexpected reply {other}")),
            };
            return Ok(Some(Decoded::in_order(response, pos)));
        }
    }
}

/// How a node is named when it is unreachable and back, unless [`CacheClient::with_role`] says otherwise.
pub const NODE_ROLE: BackendRole = BackendRole {
    what: "cache node",
    meanwhile:
        "calls for its keys fail until it is back; check that tern cache (or memcached) runs there",
};

/// A pool of cache nodes, for one I/O loop (it is `!Send`, like the [`Backend`]s it holds).
pub struct CacheClient {
    ring: Ring,
    nodes: Vec<Rc<Backend<TextCodec>>>,
    flights: Rc<Flights>,
}

/// One key's result in a multi-get.
pub type KeyResult = Result<Option<Item>, ClientError>;

/// A node's answer to one multi-get, one result per key asked, in the order asked; shared by every
/// multi-get waiting for it.
type FlightAnswer = Shared<LocalBoxFuture<'static, Rc<Vec<KeyResult>>>>;

/// The multi-gets a loop has in flight, by the hash of each key they ask.
#[derive(Default)]
struct Flights {
    by_key: RefCell<HashMap<u64, InFlight>>,
    next_id: Cell<u64>,
    hasher: foldhash::fast::FixedState,
    /// Keys that were asked while a get for them was out, and waited for it.
    coalesced: Cell<u64>,
}

/// A key being fetched: by which get, and where in its answer.
struct InFlight {
    flight: u64,
    deadline: Instant,
    answer: FlightAnswer,
    at: usize,
}

/// Past this many keys in flight, entries whose deadline has passed are swept (an answer nobody waited
/// for to the end leaves its keys behind).
const SWEEP_AT: usize = 1 << 16;

impl CacheClient {
    /// Nodes as `(address, weight)`, named as twemproxy names unnamed servers; keys hashed with `hash`.
    pub fn new(nodes: &[(SocketAddr, u32)], hash: KeyHash, pool: PoolConfig) -> CacheClient {
        let ring_nodes: Vec<Node> = nodes
            .iter()
            .map(|&(addr, weight)| Node::from_addr(addr, weight))
            .collect();
        CacheClient::with_ring(
            Ring::new(&ring_nodes, hash),
            nodes.iter().map(|&(addr, _)| addr),
            pool,
        )
    }

    /// A client over `addrs` placed by `ring` (built over the same nodes, in the same order).
    pub fn with_ring(
        ring: Ring,
        addrs: impl IntoIterator<Item = SocketAddr>,
        pool: PoolConfig,
    ) -> CacheClient {
        let nodes = addrs
            .into_iter()
            .map(|addr| Backend::with_role(addr, TextCodec::default(), pool.clone(), NODE_ROLE))
            .collect();
        CacheClient {
            ring,
            nodes,
            flights: Rc::default(),
        }
    }

    /// Names the nodes as `role` in the lines logged when one is unreachable and back (by default: a cache
    /// node whose keys read as misses meanwhile).
    pub fn with_role(self, role: BackendRole) -> CacheClient {
        for node in &self.nodes {
            node.set_role(role);
        }
        self
    }

    /// Keys a multi-get did not ask for because another multi-get of this loop was already fetching them.
    pub fn coalesced_keys(&self) -> u64 {
        self.flights.coalesced.get()
    }

    /// The index of the node that holds `key`.
    pub fn node_for(&self, key: &[u8]) -> usize {
        self.ring.node_for(key)
    }

    async fn call(
        &self,
        key: &[u8],
        request: Request,
        deadline: Instant,
    ) -> Result<Response, ClientError> {
        validate_key(key)?;
        match self.nodes[self.node_for(key)]
            .call(&request, deadline)
            .await?
        {
            Response::Error(e) => Err(ClientError::Node(e)),
            response => Ok(response),
        }
    }

    /// The item under `key`, if any.
    pub async fn get(&self, key: &[u8], deadline: Instant) -> Result<Option<Item>, ClientError> {
        let request = Request::Get {
            keys: vec![key.to_vec()],
        };
        match self.call(key, request, deadline).await? {
            Response::Items(mut items) => Ok(items.pop()),
            other => Err(ClientError::Unexpected(other)),
        }
    }

    /// `set`/`add`/`replace`/`append`/`prepend`: `Ok(true)` when stored, `Ok(false)` when the node did not
    /// store it (`NOT_STORED`, `EXISTS`, `NOT_FOUND`).
    pub async fn store(
        &self,
        command: StorageCommand,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: u32,
        deadline: Instant,
    ) -> Result<bool, ClientError> {
        let request = Request::Store {
            command,
            key: key.to_vec(),
            flags,
            exptime,
            value: value.to_vec(),
        };
        match self.call(key, request, deadline).await? {
            Response::Stored => Ok(true),
            Response::NotStored | Response::Exists | Response::NotFound => Ok(false),
            other => Err(ClientError::Unexpected(other)),
        }
    }

    pub async fn set(
        &self,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: u32,
        deadline: Instant,
    ) -> Result<bool, ClientError> {
        self.store(StorageCommand::Set, key, value, flags, exptime, deadline)
            .await
    }

    /// `Ok(true)` when the key existed.
    pub async fn delete(&self, key: &[u8], deadline: Instant) -> Result<bool, ClientError> {
        let request = Request::Delete { key: key.to_vec() };
        match self.call(key, request, deadline).await? {
            Response::Deleted => Ok(true),
            Response::NotFound => Ok(false),
            other => Err(ClientError::Unexpected(other)),
        }
    }

    /// `incr`/`decr`: the new value, or `None` when the key does not exist.
    pub async fn arithmetic(
        &self,
        key: &[u8],
        delta: u64,
        decrement: bool,
        deadline: Instant,
    ) -> Result<Option<u64>, ClientError> {
        let request = Request::Arithmetic {
            key: key.to_vec(),
            delta,
            decrement,
        };
        match self.call(key, request, deadline).await? {
            Response::Number(n) => Ok(Some(n)),
            Response::NotFound => Ok(None),
            other => Err(ClientError::Unexpected(other)),
        }
    }

    /// `Ok(true)` when the key existed and its expiry was updated.
    pub async fn touch(
        &self,
        key: &[u8],
        exptime: u32,
        deadline: Instant,
    ) -> Result<bool, ClientError> {
        let request = Request::Touch {
            key: key.to_vec(),
            exptime,
        };
        match self.call(key, request, deadline).await? {
            Response::Touched => Ok(true),
            Response::NotFound => Ok(false),
            other => Err(ClientError::Unexpected(other)),
        }
    }

    /// Gets many keys with one `get` per node, all sent at once and awaited until `deadline`. Answers one
    /// result per key, in the order given: `Ok(Some(item))` for a hit, `Ok(None)` for a miss, and the node's
    /// error for every key of a node that failed or missed the deadline (partial results, never
    /// all-or-nothing). A key another multi-get of this loop is fetching is not asked again: it takes that
    /// get's answer, which comes by that get's deadline (the requests of one service share a default
    /// deadline, so it is seldom much earlier than this one's).
    pub async fn get_many(&self, keys: &[&[u8]], deadline: Instant) -> Vec<KeyResult> {
        let mut results: Vec<KeyResult> = (0..keys.len()).map(|_| Ok(None)).collect();
        // Per node, the keys to ask it (index in `keys`, hash).
        let mut per_node: Vec<Vec<(usize, u64)>> = vec![Vec::new(); self.nodes.len()];
        // The gets this call waits for, each once, by flight id; and per key: its index, its get (an index
        // into `flights`) and its place in that get's answer.
        let mut flights: Vec<(u64, FlightAnswer)> = Vec::new();
        let mut waits: Vec<(usize, usize, usize)> = Vec::new();
        let now = Instant::now();
        {
            let by_key = self.flights.by_key.borrow();
            for (i, key) in keys.iter().enumerate() {
                if let Err(e) = validate_key(key) {
                    results[i] = Err(e.into());
                    continue;
                }
                let hash = self.flights.hasher.hash_one(key);
                match by_key.get(&hash).filter(|f| f.deadline > now) {
                    Some(f) => {
                        let slot = match flights.iter().position(|(id, _)| *id == f.flight) {
                            Some(slot) => slot,
                            None => {
                                flights.push((f.flight, f.answer.clone()));
                                flights.len() - 1
                            }
                        };
                        waits.push((i, slot, f.at));
                        self.flights.coalesced.set(self.flights.coalesced.get() + 1);
                    }
                    None => per_node[self.node_for(key)].push((i, hash)),
                }
            }
        }
        for (node, wanted) in per_node.into_iter().enumerate() {
            if wanted.is_empty() {
                continue;
            }
            let slot = flights.len();
            flights.push(self.fly(node, &wanted, keys, deadline));
            waits.extend(wanted.iter().enumerate().map(|(at, &(i, _))| (i, slot, at)));
        }
        let answers = join_all(flights.into_iter().map(|(_, answer)| answer)).await;
        for (i, slot, at) in waits {
            results[i] = match &answers[slot][at] {
                // A hash shared by two keys in flight at once is told apart here (a miss is always
                // an acceptable answer from a cache).
                Ok(Some(item)) if item.key != keys[i] => Ok(None),
                other => other.clone(),
            };
        }
        results
    }

    /// Sends one `get` of `wanted` (indexes into `keys`, with their hashes) to `node` and lists its keys as
    /// in flight until the answer comes; answers the flight's id and its answer.
    fn fly(
        &self,
        node: usize,
        wanted: &[(usize, u64)],
        keys: &[&[u8]],
        deadline: Instant,
    ) -> (u64, FlightAnswer) {
        let flights = Rc::clone(&self.flights);
        let id = flights.next_id.get();
        flights.next_id.set(id + 1);
        let hashes: Vec<u64> = wanted.iter().map(|&(_, hash)| hash).collect();
        let request = Request::Get {
            keys: wanted.iter().map(|&(i, _)| keys[i].to_vec()).collect(),
        };
        let backend = Rc::clone(&self.nodes[node]);
        let done = Rc::clone(&flights);
        let forget = hashes.clone();
        let answer = async move {
            let answer = backend.call(&request, deadline).await;
            let Request::Get { keys } = &request else {
                unreachable!("a flight is a get")
            };
            let results = results_by_key(keys, answer);
            let mut by_key = done.by_key.borrow_mut();
            for hash in forget {
                if by_key.get(&hash).is_some_and(|f| f.flight == id) {
                    by_key.remove(&hash);
                }
            }
            Rc::new(results)
        }
        .boxed_local()
        .shared();
        let mut by_key = flights.by_key.borrow_mut();
        if by_key.len() >= SWEEP_AT {
            let now = Instant::now();
            by_key.retain(|_, f| f.deadline > now);
        }
        for (at, hash) in hashes.into_iter().enumerate() {
            by_key.insert(
                hash,
                InFlight {
                    flight: id,
                    deadline,
                    answer: answer.clone(),
                    at,
                },
            );
        }
        (id, answer)
    }
}

/// A node's answer to a get of `keys` as one result per key, in the order asked.
pub fn results_by_key(keys: &[Vec<u8>], answer: Result<Response, CallError>) -> Vec<KeyResult> {
    match answer {
        Ok(Response::Items(items)) => {
            // Hits come back in request order, so one pass matches them to the keys asked.
            let mut items = items.into_iter().peekable();
            keys.iter()
                .map(|key| Ok(items.next_if(|item| item.key == key[..])))
                .collect()
        }
        Ok(Response::Error(e)) => vec![Err(ClientError::Node(e)); keys.len()],
        Ok(other) => vec![Err(ClientError::Unexpected(other)); keys.len()],
        Err(e) => vec![Err(e.into()); keys.len()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(input: &[u8]) -> Result<Option<(Response, usize)>, String> {
        TextCodec::default()
            .decode(input)
            .map(|d| d.map(|d| (d.reply, d.consumed)))
    }

    #[test]
    fn an_unexpected_reply_is_named_as_the_protocol_words_it() {
        let err = decode_all(b"VALUE a 1 2\r\nhi\r\nSTORED\r\n").unwrap_err();
        assert_eq!(err, "STORED inside a get answer");
        let err = decode_all(b"VERSION 1.6.21\r\n").unwrap_err();
        assert_eq!(err, "unexpected reply VERSION 1.6.21");
        assert_eq!(
            ClientError::Unexpected(Response::NotFound).to_string(),
            "unexpected reply: NOT_FOUND"
        );
        let one = Response::Items(vec![Item {
            key: Bytes::from_static(b"a"),
            flags: 0,
            value: Bytes::from_static(b"x"),
        }]);
        assert_eq!(one.to_string(), "1 item");
    }

    #[test]
    fn a_get_answer_is_one_response() {
        let input = b"VALUE a 1 2\r\nhi\r\nVALUE b 0 0\r\n\r\nEND\r\nSTORED\r\n";
        let (response, used) = decode_all(input).unwrap().unwrap();
        assert_eq!(
            response,
            Response::Items(vec![
                Item {
                    key: Bytes::from_static(b"a"),
                    flags: 1,
                    value: Bytes::from_static(b"hi")
                },
                Item {
                    key: Bytes::from_static(b"b"),
                    flags: 0,
                    value: Bytes::new()
                },
            ])
        );
        assert_eq!(&input[used..], b"STORED\r\n");
    }

    #[test]
    fn a_get_answer_cut_anywhere_is_incomplete() {
        let input = b"VALUE a 1 2\r\nhi\r\nVALUE b 0 0\r\n\r\nEND\r\n";
        for cut in 0..input.len() {
            assert_eq!(decode_all(&input[..cut]), Ok(None), "cut at {cut}");
        }
    }

    #[test]
    fn other_replies_map_one_to_one() {
        for (bytes, want) in [
            (&b"NOT_FOUND\r\n"[..], Response::NotFound),
            (b"DELETED\r\n", Response::Deleted),
            (b"42\r\n", Response::Number(42)),
            (b"END\r\n", Response::Items(Vec::new())),
            (
                b"SERVER_ERROR out of memory\r\n",
                Response::Error("SERVER_ERROR out of memory".into()),
            ),
        ] {
            assert_eq!(
                decode_all(bytes),
                Ok(Some((want, bytes.len()))),
                "{bytes:?}"
            );
        }
    }

    #[test]
    fn a_stray_line_inside_a_get_answer_is_a_protocol_error() {
        assert!(decode_all(b"VALUE a 0 1\r\nx\r\nSTORED\r\n").is_err());
    }
}
