//! Turning operations into request bytes and replies into outcomes, per wire protocol.
//!
//! Decoding is stateless: it parses a request's whole reply from the front of the buffer or
//! answers `Incomplete` and is re-run when more bytes arrive, so no partial state has to be kept
//! per connection and nothing is counted twice.

mod http;
mod ids;
mod pacer;
mod recommend;
mod reply;

use rand::rngs::SmallRng;
use tern_memcache_proto::client::{
    self as mc, parse_reply, EncodeError, Limits, MetaStatus, Parse, Reply, ReplyError,
    StorageCommand,
};

pub(crate) use self::reply::{Decoded, Fault};
use crate::config::{Config, Op, Protocol};
use crate::stats::{Counted, Outcome, Tally};
use crate::workload::{KeyChooser, KeyKind, KeySpace, OpChooser, COUNTER_START};

/// What one request on the wire is, as far as the codec must remember to decode its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Request {
    Memcache(Op),
    /// A pacer BIDS frame; its ids are the batch id, then the candidate campaigns in order.
    Bids,
    /// A pacer NOTICES frame sent after a DECISIONS reply; its ids are the notices' auctions.
    Notices,
    Http,
    /// A tern recommend call; its ids are the sequence id, the viewer and, for Chaining, the profile.
    Recommend,
}

impl Request {
    /// A follow-up is sent because of a reply, not by the schedule: it is not a request of the
    /// run (no latency sample, not counted against the pipeline), only its outcomes count.
    pub fn is_follow_up(self) -> bool {
        self == Request::Notices
    }
}

/// Encoder and decoder for one protocol, with what it draws requests from and its reusable
/// scratch buffers. One per worker thread.
pub(crate) struct Codec {
    keys: KeyChooser,
    wire: Wire,
}

enum Wire {
    Memcache(MemcacheCodec),
    Pacer(pacer::PacerCodec),
    Http(http::HttpCodec),
    Recommend(recommend::RecommendCodec),
}

impl Codec {
    /// The codec of worker `thread`.
    pub fn new(config: &Config, thread: usize) -> anyhow::Result<Self> {
        let wire = match config.protocol {
            Protocol::MemcacheText | Protocol::MemcacheMeta => {
                Wire::Memcache(MemcacheCodec::new(config))
            }
            Protocol::Pacer => Wire::Pacer(pacer::PacerCodec::new(config, thread)),
            Protocol::Http => Wire::Http(http::HttpCodec::new(config, thread)),
            Protocol::Recommend => Wire::Recommend(recommend::RecommendCodec::new(config)),
        };
        Ok(Codec {
            keys: KeyChooser::new(config, thread)?,
            wire,
        })
    }

    /// A codec whose sets initialise counter keys instead of data keys.
    pub fn writing_counters(mut self) -> Self {
        if let Wire::Memcache(m) = &mut self.wire {
            m.sets_counters = true;
        }
        self
    }

    /// Draws the next request, its ids into `ids` (cleared first).
    pub fn next_request(&mut self, rng: &mut SmallRng, ids: &mut Vec<u64>) -> Request {
        ids.clear();
        match &mut self.wire {
            Wire::Memcache(m) => {
                let op = m.ops.next(rng);
                let width = if op == Op::Get { m.multiget } else { 1 };
                ids.extend((0..width).map(|_| self.keys.next(rng)));
                Request::Memcache(op)
            }
            Wire::Pacer(p) => {
                p.draw(rng, &mut self.keys, ids);
                Request::Bids
            }
            Wire::Http(_) => Request::Http,
            Wire::Recommend(r) => {
                r.draw(rng, &mut self.keys, ids);
                Request::Recommend
            }
        }
    }

    /// Appends `request` on `ids` to `out`.
    pub fn encode(
        &mut self,
        out: &mut Vec<u8>,
        request: Request,
        ids: &[u64],
    ) -> Result<(), EncodeError> {
        match (&mut self.wire, request) {
            (Wire::Memcache(m), Request::Memcache(op)) => m.encode(out, op, ids),
            (Wire::Pacer(p), Request::Bids) => {
                p.encode_bids(out, ids);
                Ok(())
            }
            (Wire::Http(h), Request::Http) => {
                h.encode(out);
                Ok(())
            }
            (Wire::Recommend(r), Request::Recommend) => {
                r.encode(out, ids);
                Ok(())
            }
            _ => unreachable!("{request:?} is drawn by another protocol's codec"),
        }
    }

    /// Decodes the reply to `request` on the `n` ids given by `id_at`, from the front of
    /// `input`.
    pub fn decode(
        &mut self,
        input: &[u8],
        request: Request,
        n: usize,
        id_at: impl Fn(usize) -> u64,
    ) -> Result<Decoded, Fault> {
        match (&mut self.wire, request) {
            (Wire::Memcache(m), Request::Memcache(op)) => Ok(m.decode(input, op, n, id_at)?),
            (Wire::Pacer(p), Request::Bids) => p.decode_decisions(input, id_at),
            (Wire::Pacer(p), Request::Notices) => p.decode_acks(input, n),
            (Wire::Http(h), Request::Http) => h.decode(input),
            (Wire::Recommend(r), Request::Recommend) => r.decode(input, id_at, n),
            _ => unreachable!("{request:?} is drawn by another protocol's codec"),
        }
    }

    /// A request the last decoded reply calls for (the pacer's billing notices), appended to
    /// `out` with its ids in `ids`.
    pub fn follow_up(&mut self, out: &mut Vec<u8>, ids: &mut Vec<u64>) -> Option<Request> {
        match &mut self.wire {
            Wire::Pacer(p) => p.encode_notices(out, ids).then_some(Request::Notices),
            Wire::Memcache(_) | Wire::Http(_) | Wire::Recommend(_) => None,
        }
    }

    /// How a completed `request` on `ids` ids counts.
    pub fn counted(&self, request: Request, ids: usize) -> Counted {
        match (&self.wire, request) {
            (Wire::Pacer(p), Request::Bids) => Counted {
                units: p.batch() as u32,
                samples: 1,
            },
            (_, Request::Http | Request::Recommend) => Counted {
                units: 1,
                samples: 1,
            },
            _ => Counted {
                units: ids as u32,
                samples: ids as u32,
            },
        }
    }
}

/// The memcached text and meta protocols.
struct MemcacheCodec {
    text: bool,
    ops: OpChooser,
    multiget: usize,
    keyspace: KeySpace,
    limits: Limits,
    /// Sets write counter keys with their start value (the preload pass for incr/decr).
    sets_counters: bool,
    key: Vec<u8>,
    keys: Vec<u8>,
    key_ends: Vec<usize>,
    value: Vec<u8>,
}

impl MemcacheCodec {
    fn new(config: &Config) -> Self {
        MemcacheCodec {
            text: config.protocol == Protocol::MemcacheText,
            ops: OpChooser::new(config),
            multiget: config.multiget,
            keyspace: KeySpace::new(config),
            limits: Limits {
                max_value: config.max_value,
                ..Limits::default()
            },
            sets_counters: false,
            key: Vec::with_capacity(256),
            keys: Vec::with_capacity(256),
            key_ends: Vec::new(),
            value: Vec::with_capacity(config.value_size.max),
        }
    }

    fn key_kind(&self, op: Op) -> KeyKind {
        match op {
            Op::Incr | Op::Decr => KeyKind::Counter,
            Op::Set if self.sets_counters => KeyKind::Counter,
            Op::Get | Op::Set | Op::Delete => KeyKind::Data,
        }
    }

    /// Appends the request for `op` on `ids` (several ids only for gets) to `out`.
    fn encode(&mut self, out: &mut Vec<u8>, op: Op, ids: &[u64]) -> Result<(), EncodeError> {
        let kind = self.key_kind(op);
        self.key.clear();
        self.keyspace.write_key(&mut self.key, ids[0], kind);
        let key = &self.key[..];
        let text = self.text;
        match op {
            Op::Get if text => {
                self.keys.clear();
                self.key_ends.clear();
                for &id in ids {
                    self.keyspace.write_key(&mut self.keys, id, kind);
                    self.key_ends.push(self.keys.len());
                }
                let mut start = 0;
                let keys = self.key_ends.iter().map(|&end| {
                    let key = &self.keys[start..end];
                    start = end;
                    key
                });
                mc::encode_get(out, keys, false)
            }
            Op::Get => {
                for &id in ids {
                    self.key.clear();
                    self.keyspace.write_key(&mut self.key, id, kind);
                    mc::encode_meta_get(out, &self.key, b"v")?;
                }
                Ok(())
            }
            Op::Set => {
                self.value.clear();
                match kind {
                    KeyKind::Counter => self.value.extend_from_slice(COUNTER_START),
                    KeyKind::Data => self.keyspace.write_value(&mut self.value, ids[0]),
                }
                if text {
                    mc::encode_storage(out, StorageCommand::Set, key, 0, 0, &self.value, false)
                } else {
                    mc::encode_meta_set(out, key, &self.value, b"")
                }
            }
            Op::Delete if text => mc::encode_delete(out, key, false),
            Op::Delete => mc::encode_meta_delete(out, key, b""),
            Op::Incr | Op::Decr if text => {
                mc::encode_arithmetic(out, key, 1, op == Op::Decr, false)
            }
            Op::Incr => mc::encode_meta_arithmetic(out, key, b""),
            Op::Decr => mc::encode_meta_arithmetic(out, key, b"MD"),
        }
    }

    /// Decodes the reply to `op` on the `n` ids given by `id_at`, from the front of `input`.
    fn decode(
        &mut self,
        input: &[u8],
        op: Op,
        n: usize,
        id_at: impl Fn(usize) -> u64,
    ) -> Result<Decoded, ReplyError> {
        let text = self.text;
        if op == Op::Get && !self.get_reply_complete(input, n, text)? {
            // Checked first so that a large reply arriving in pieces is validated only once.
            return Ok(Decoded::Incomplete);
        }
        match op {
            Op::Get if text => self.decode_text_get(input, n, id_at),
            Op::Get => self.decode_meta_get(input, n, id_at),
            _ => Ok(match parse_reply(input, &self.limits)? {
                Parse::Incomplete => Decoded::Incomplete,
                Parse::Complete { reply, consumed } => {
                    let mut tally = Tally::default();
                    tally.add(classify(op, &reply));
                    Decoded::Done { consumed, tally }
                }
            }),
        }
    }

    /// Whether `input` holds the whole reply to a get of `n` keys (headers only, no validation).
    fn get_reply_complete(&self, input: &[u8], n: usize, text: bool) -> Result<bool, ReplyError> {
        let mut pos = 0;
        let mut replies = 0;
        loop {
            let Parse::Complete { reply, consumed } = parse_reply(&input[pos..], &self.limits)?
            else {
                return Ok(false);
            };
            pos += consumed;
            replies += 1;
            let last = if text {
                !matches!(reply, Reply::Value { .. })
            } else {
                replies == n
            };
            if last {
                return Ok(true);
            }
        }
    }

    /// `VALUE` blocks come in request order with misses left out, then `END`.
    fn decode_text_get(
        &mut self,
        input: &[u8],
        n: usize,
        id_at: impl Fn(usize) -> u64,
    ) -> Result<Decoded, ReplyError> {
        let mut tally = Tally::default();
        let mut pos = 0;
        let mut next = 0;
        loop {
            let Parse::Complete { reply, consumed } = parse_reply(&input[pos..], &self.limits)?
            else {
                return Ok(Decoded::Incomplete);
            };
            pos += consumed;
            match reply {
                Reply::Value { key, data, .. } => {
                    let found = (next..n).find(|&i| {
                        self.key.clear();
                        self.keyspace
                            .write_key(&mut self.key, id_at(i), KeyKind::Data);
                        self.key == key
                    });
                    match found {
                        Some(i) => {
                            tally.add(if self.keyspace.is_value_of(id_at(i), data) {
                                Outcome::Hit
                            } else {
                                Outcome::WrongValue
                            });
                            next = i + 1;
                        }
                        None => tally.add(Outcome::WrongKey),
                    }
                }
                Reply::End => {
                    let answered = tally.get(Outcome::Hit) + tally.get(Outcome::WrongValue);
                    for _ in answered as usize..n {
                        tally.add(Outcome::Miss);
                    }
                    return Ok(Decoded::Done {
                        consumed: pos,
                        tally,
                    });
                }
                other => {
                    tally.add(classify(Op::Get, &other));
                    return Ok(Decoded::Done {
                        consumed: pos,
                        tally,
                    });
                }
            }
        }
    }

    /// One reply per `mg`, in order.
    fn decode_meta_get(
        &mut self,
        input: &[u8],
        n: usize,
        id_at: impl Fn(usize) -> u64,
    ) -> Result<Decoded, ReplyError> {
        let mut tally = Tally::default();
        let mut pos = 0;
        for i in 0..n {
            let Parse::Complete { reply, consumed } = parse_reply(&input[pos..], &self.limits)?
            else {
                return Ok(Decoded::Incomplete);
            };
            pos += consumed;
            tally.add(match reply {
                Reply::Meta {
                    status: MetaStatus::Value,
                    data: Some(data),
                    ..
                } => {
                    if self.keyspace.is_value_of(id_at(i), data) {
                        Outcome::Hit
                    } else {
                        Outcome::WrongValue
                    }
                }
                Reply::Meta {
                    status: MetaStatus::Miss,
                    ..
                } => Outcome::Miss,
                other => classify(Op::Get, &other),
            });
        }
        Ok(Decoded::Done {
            consumed: pos,
            tally,
        })
    }
}

/// The outcome of a single-reply operation.
fn classify(op: Op, reply: &Reply<'_>) -> Outcome {
    use MetaStatus as M;
    match (op, reply) {
        (_, Reply::Error) => Outcome::Error,
        (_, Reply::ClientError(_)) => Outcome::ClientError,
        (_, Reply::ServerError(_)) => Outcome::ServerError,
        (
            Op::Set,
            Reply::Stored
            | Reply::Meta {
                status: M::Stored, ..
            },
        ) => Outcome::Stored,
        (
            Op::Set,
            Reply::NotStored
            | Reply::Meta {
                status: M::NotStored,
                ..
            },
        ) => Outcome::NotStored,
        (
            Op::Delete,
            Reply::Deleted
            | Reply::Meta {
                status: M::Stored, ..
            },
        ) => Outcome::Deleted,
        (
            Op::Delete | Op::Incr | Op::Decr,
            Reply::NotFound
            | Reply::Meta {
                status: M::NotFound,
                ..
            },
        ) => Outcome::NotFound,
        (
            Op::Incr | Op::Decr,
            Reply::Number(_)
            | Reply::Meta {
                status: M::Stored, ..
            },
        ) => Outcome::Incremented,
        _ => Outcome::UnexpectedReply,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SizeRange;

    fn codec(protocol: Protocol) -> MemcacheCodec {
        MemcacheCodec::new(&Config {
            protocol,
            key_size: SizeRange::fixed(4),
            key_count: 100,
            value_size: SizeRange::fixed(3),
            ..Config::default()
        })
    }

    fn value_of(codec: &MemcacheCodec, id: u64) -> Vec<u8> {
        let mut v = Vec::new();
        codec.keyspace.write_value(&mut v, id);
        v
    }

    fn done(decoded: Decoded) -> (usize, Tally) {
        match decoded {
            Decoded::Done { consumed, tally } => (consumed, tally),
            Decoded::Incomplete => panic!("incomplete"),
        }
    }

    #[test]
    fn text_multiget_counts_hits_misses_and_wrong_values() {
        let mut c = codec(Protocol::MemcacheText);
        let mut out = Vec::new();
        c.encode(&mut out, Op::Get, &[1, 2, 3]).unwrap();
        assert_eq!(out, b"get k001 k002 k003\r\n");
        let v1 = value_of(&c, 1);
        let mut reply =
            format!("VALUE k001 0 3\r\n{}\r\n", String::from_utf8_lossy(&v1)).into_bytes();
        reply.extend_from_slice(b"VALUE k003 0 3\r\nXXX\r\nEND\r\n");
        for cut in 0..reply.len() {
            assert_eq!(
                c.decode(&reply[..cut], Op::Get, 3, |i| i as u64 + 1)
                    .unwrap(),
                Decoded::Incomplete
            );
        }
        let (consumed, tally) = done(c.decode(&reply, Op::Get, 3, |i| i as u64 + 1).unwrap());
        assert_eq!(consumed, reply.len());
        assert_eq!(
            (
                tally.get(Outcome::Hit),
                tally.get(Outcome::Miss),
                tally.get(Outcome::WrongValue)
            ),
            (1, 1, 1)
        );
        let (_, tally) = done(
            c.decode(b"VALUE k009 0 3\r\nabc\r\nEND\r\n", Op::Get, 1, |_| 1)
                .unwrap(),
        );
        assert_eq!(
            (tally.get(Outcome::WrongKey), tally.get(Outcome::Miss)),
            (1, 1)
        );
    }

    #[test]
    fn meta_commands_round_trip() {
        let mut c = codec(Protocol::MemcacheMeta);
        let mut out = Vec::new();
        c.encode(&mut out, Op::Set, &[5]).unwrap();
        c.encode(&mut out, Op::Get, &[5, 6]).unwrap();
        c.encode(&mut out, Op::Decr, &[5]).unwrap();
        let v5 = String::from_utf8(value_of(&c, 5)).unwrap();
        assert_eq!(
            out,
            format!("ms k005 3\r\n{v5}\r\nmg k005 v\r\nmg k006 v\r\nma n005 MD\r\n").into_bytes()
        );
        let reply = format!("VA 3\r\n{v5}\r\nEN\r\n");
        let (_, tally) = done(
            c.decode(reply.as_bytes(), Op::Get, 2, |i| 5 + i as u64)
                .unwrap(),
        );
        assert_eq!((tally.get(Outcome::Hit), tally.get(Outcome::Miss)), (1, 1));
        let (_, tally) = done(c.decode(b"NF\r\n", Op::Incr, 1, |_| 5).unwrap());
        assert_eq!(tally.get(Outcome::NotFound), 1);
    }

    #[test]
    fn single_replies_are_classified_by_operation() {
        let mut c = codec(Protocol::MemcacheText);
        let cases: [(Op, &[u8], Outcome); 7] = [
            (Op::Set, b"STORED\r\n", Outcome::Stored),
            (Op::Set, b"DELETED\r\n", Outcome::UnexpectedReply),
            (Op::Delete, b"NOT_FOUND\r\n", Outcome::NotFound),
            (Op::Incr, b"17\r\n", Outcome::Incremented),
            (Op::Get, b"SERVER_ERROR busy\r\n", Outcome::ServerError),
            (Op::Set, b"CLIENT_ERROR bad\r\n", Outcome::ClientError),
            (Op::Delete, b"ERROR\r\n", Outcome::Error),
        ];
        for (op, reply, want) in cases {
            let (consumed, tally) = done(c.decode(reply, op, 1, |_| 1).unwrap());
            assert_eq!(
                (consumed, tally.get(want)),
                (reply.len(), 1),
                "{op:?} {reply:?}"
            );
        }
        assert!(c.decode(b"GARBAGE\r\n", Op::Set, 1, |_| 1).is_err());
    }
}
