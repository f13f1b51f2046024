//! Which node holds a key: the ketama consistent-hashing continuum exactly as twemproxy (nutcracker) builds
//! it, with its key hash functions, so a tern client and a twemproxy pool configured with the same servers,
//! weights, `hash` and `hash_tag` send every key to the same node.
//!
//! twemproxy's details that decide placement, reproduced here on purpose:
//! - a node's name on the continuum is its configured name, else `host` when the port is 11211 (libmemcached's
//!   convention) and `host:port` otherwise;
//! - each node gets `floor(weight / total * 40 * nodes + 1e-10) * 4` points (float arithmetic as in C), 4 per
//!   MD5 of `"<name>-<i>"`;
//! - key hashes read the key as C `char`s, which are signed on x86: a byte >= 0x80 enters the FNV and
//!   one-at-a-time hashes sign-extended;
//! - a key is hashed whole unless a hash tag (two bytes, e.g. `{}`) encloses a non-empty part of it.

use std::net::SocketAddr;

use md5::{Digest, Md5};

/// The port libmemcached and twemproxy leave out of a node's name.
const DEFAULT_PORT: u16 = 11211;
/// Points per node at equal weights (twemproxy's `KETAMA_POINTS_PER_SERVER`).
const POINTS_PER_NODE: f32 = 160.0;
/// Points taken from one MD5 digest.
const POINTS_PER_HASH: u32 = 4;

/// A key hash, named as in twemproxy's `hash:` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyHash {
    Md5,
    OneAtATime,
    Fnv1_64,
    Fnv1a64,
    Fnv1_32,
    Fnv1a32,
}

const FNV_64_INIT: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_64_PRIME: u64 = 0x0000_0100_0000_01b3;
const FNV_32_INIT: u32 = 2_166_136_261;
const FNV_32_PRIME: u32 = 16_777_619;

/// A key byte as twemproxy sees it: a signed `char` widened to 32 bits.
fn c_char(b: u8) -> u32 {
    b as i8 as i32 as u32
}

fn md5_word(digest: &[u8; 16], word: usize) -> u32 {
    u32::from_le_bytes(digest[word * 4..word * 4 + 4].try_into().expect("4 bytes"))
}

fn md5(bytes: &[u8]) -> [u8; 16] {
    Md5::digest(bytes).into()
}

impl KeyHash {
    /// The hash for twemproxy's setting name (`md5`, `one_at_a_time`, `fnv1_64`, `fnv1a_64`, `fnv1_32`,
    /// `fnv1a_32`).
    pub fn from_name(name: &str) -> Option<KeyHash> {
        Some(match name {
            "md5" => KeyHash::Md5,
            "one_at_a_time" => KeyHash::OneAtATime,
            "fnv1_64" => KeyHash::Fnv1_64,
            "fnv1a_64" => KeyHash::Fnv1a64,
            "fnv1_32" => KeyHash::Fnv1_32,
            "fnv1a_32" => KeyHash::Fnv1a32,
            _ => return None,
        })
    }

    pub fn hash(self, key: &[u8]) -> u32 {
        match self {
            KeyHash::Md5 => md5_word(&md5(key), 0),
            KeyHash::OneAtATime => {
                let mut h: u32 = 0;
                for &b in key {
                    h = h.wrapping_add(c_char(b));
                    h = h.wrapping_add(h << 10);
                    h ^= h >> 6;
                }
                h = h.wrapping_add(h << 3);
                h ^= h >> 11;
                h.wrapping_add(h << 15)
            }
            // twemproxy's 64-bit FNV-1 keeps 64 bits and truncates the result...
            KeyHash::Fnv1_64 => {
                let mut h = FNV_64_INIT;
                for &b in key {
                    h = h.wrapping_mul(FNV_64_PRIME);
                    h ^= b as i8 as i64 as u64;
                }
                h as u32
            }
            // ...while its FNV-1a "64" runs in 32 bits on the truncated 64-bit constants.
            KeyHash::Fnv1a64 => key.iter().fold(FNV_64_INIT as u32, |h, &b| {
                (h ^ c_char(b)).wrapping_mul(FNV_64_PRIME as u32)
            }),
            KeyHash::Fnv1_32 => key.iter().fold(FNV_32_INIT, |h, &b| {
                h.wrapping_mul(FNV_32_PRIME) ^ c_char(b)
            }),
            KeyHash::Fnv1a32 => key.iter().fold(FNV_32_INIT, |h, &b| {
                (h ^ c_char(b)).wrapping_mul(FNV_32_PRIME)
            }),
        }
    }
}

/// A node of the pool as the continuum knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// The string hashed onto the continuum.
    pub name: String,
    /// Relative share of the keys (twemproxy's `host:port:weight`); at least 1.
    pub weight: u32,
}

impl Node {
    /// A node named as twemproxy names a server listed without a name.
    pub fn from_addr(addr: SocketAddr, weight: u32) -> Node {
        let name = if addr.port() == DEFAULT_PORT {
            addr.ip().to_string()
        } else {
            addr.to_string()
        };
        Node { name, weight }
    }
}

/// The ketama continuum over a list of nodes.
#[derive(Debug, Clone)]
pub struct Ring {
    /// (point, node index), sorted by point.
    points: Vec<(u32, usize)>,
    hash: KeyHash,
    hash_tag: Option<[u8; 2]>,
    single_node: bool,
}

impl Ring {
    /// Builds the continuum. Panics if `nodes` is empty or a weight is 0 (twemproxy refuses both too).
    pub fn new(nodes: &[Node], hash: KeyHash) -> Ring {
        assert!(!nodes.is_empty(), "a ring needs at least one node");
        assert!(
            nodes.iter().all(|n| n.weight > 0),
            "node weights must be at least 1"
        );
        let total: u32 = nodes.iter().map(|n| n.weight).sum();
        let count = nodes.len() as f32;
        let mut points = Vec::new();
        for (index, node) in nodes.iter().enumerate() {
            // The same float steps as twemproxy's C, including the double-precision nudge before floorf.
            let pct = node.weight as f32 / total as f32;
            let share = (pct * POINTS_PER_NODE / 4.0 * count) as f64 + 0.000_000_000_1;
            let node_points = (share as f32).floor() as u32 * POINTS_PER_HASH;
            for i in 0..node_points / POINTS_PER_HASH {
                let digest = md5(format!("{}-{i}", node.name).as_bytes());
                for word in 0..POINTS_PER_HASH as usize {
                    points.push((md5_word(&digest, word), index));
                }
            }
        }
        points.sort_by_key(|&(point, _)| point);
        Ring {
            points,
            hash,
            hash_tag: None,
            single_node: nodes.len() == 1,
        }
    }

    /// Hashes only the part of a key between the two tag bytes, when there is one (twemproxy's `hash_tag`).
    pub fn with_hash_tag(mut self, tag: [u8; 2]) -> Ring {
        self.hash_tag = Some(tag);
        self
    }

    /// The part of `key` that is hashed.
    fn hashed_part<'k>(&self, key: &'k [u8]) -> &'k [u8] {
        let Some([open, close]) = self.hash_tag else {
            return key;
        };
        let Some(start) = key.iter().position(|&b| b == open) else {
            return key;
        };
        match key[start + 1..].iter().position(|&b| b == close) {
            Some(len) if len > 0 => &key[start + 1..start + 1 + len],
            _ => key,
        }
    }

    /// Index (into the `nodes` given to [`Ring::new`]) of the node that holds `key`.
    pub fn node_for(&self, key: &[u8]) -> usize {
        // One node holds every key: a multi-get of hundreds of keys need not hash one of them.
        if self.single_node {
            return 0;
        }
        let h = self.hash.hash(self.hashed_part(key));
        let i = self.points.partition_point(|&(point, _)| point < h);
        self.points.get(i).unwrap_or(&self.points[0]).1
    }

    /// Points on the continuum (for tests and diagnostics).
    pub fn len(&self) -> usize {
        self.points.len()
    }

    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_32_matches_the_reference_vectors() {
        // From the FNV reference test suite (ASCII only, where the signed-char widening changes nothing).
        assert_eq!(KeyHash::Fnv1a32.hash(b""), 0x811c_9dc5);
        assert_eq!(KeyHash::Fnv1a32.hash(b"a"), 0xe40c_292c);
        assert_eq!(KeyHash::Fnv1a32.hash(b"foobar"), 0xbf9c_f968);
        assert_eq!(KeyHash::Fnv1_32.hash(b"a"), 0x050c_5d7e);
        assert_eq!(KeyHash::Fnv1_32.hash(b"foobar"), 0x31f0_b262);
        assert_eq!(
            KeyHash::Fnv1_64.hash(b"foobar"),
            0x340d_8765_a4dd_a9c2_u64 as u32
        );
    }

    #[test]
    fn high_bytes_enter_the_hash_sign_extended_like_c_chars() {
        let widened = (FNV_32_INIT ^ 0xffff_ffc3).wrapping_mul(FNV_32_PRIME);
        assert_eq!(KeyHash::Fnv1a32.hash(&[0xc3]), widened);
    }

    #[test]
    fn md5_key_hash_is_the_digest_first_word_little_endian() {
        // md5("") = d41d8cd98f00b204e9800998ecf8427e
        assert_eq!(KeyHash::Md5.hash(b""), 0xd98c_1dd4);
    }

    #[test]
    fn nodes_are_named_like_twemproxy() {
        assert_eq!(
            Node::from_addr("10.0.0.1:11211".parse().unwrap(), 1).name,
            "10.0.0.1"
        );
        assert_eq!(
            Node::from_addr("10.0.0.1:11311".parse().unwrap(), 1).name,
            "10.0.0.1:11311"
        );
    }

    #[test]
    fn points_follow_weights() {
        let nodes = [
            Node {
                name: "a".into(),
                weight: 1,
            },
            Node {
                name: "b".into(),
                weight: 3,
            },
        ];
        let ring = Ring::new(&nodes, KeyHash::Fnv1a64);
        // 1/4 * 40 * 2 = 20 hashes of 4 points; 3/4 * 40 * 2 = 60.
        assert_eq!(ring.len(), 80 + 240);
        let to_b = (0..10_000)
            .filter(|i| ring.node_for(format!("key:{i}").as_bytes()) == 1)
            .count();
        assert!((6_500..8_500).contains(&to_b), "{to_b} of 10000 keys on b");
    }

    #[test]
    fn removing_a_node_moves_only_its_keys() {
        let nodes: Vec<Node> = (0..4)
            .map(|i| Node::from_addr(format!("127.0.0.1:{}", 20000 + i).parse().unwrap(), 1))
            .collect();
        let all = Ring::new(&nodes, KeyHash::Md5);
        let three = Ring::new(&nodes[..3], KeyHash::Md5);
        for i in 0..5_000 {
            let key = format!("k{i}");
            let before = all.node_for(key.as_bytes());
            if before != 3 {
                assert_eq!(three.node_for(key.as_bytes()), before, "{key} moved");
            }
        }
    }

    #[test]
    fn hash_tag_hashes_the_enclosed_part_only() {
        let nodes: Vec<Node> = ["a", "b", "c"]
            .iter()
            .map(|n| Node {
                name: n.to_string(),
                weight: 1,
            })
            .collect();
        let ring = Ring::new(&nodes, KeyHash::Fnv1a64).with_hash_tag(*b"{}");
        assert_eq!(ring.hashed_part(b"user:{42}:name"), b"42");
        assert_eq!(ring.hashed_part(b"user:{}:name"), b"user:{}:name");
        assert_eq!(ring.hashed_part(b"user:{42"), b"user:{42");
        for i in 0..100 {
            let a = format!("{{u{i}}}:profile");
            let b = format!("{{u{i}}}:friends");
            assert_eq!(ring.node_for(a.as_bytes()), ring.node_for(b.as_bytes()));
        }
    }
}
