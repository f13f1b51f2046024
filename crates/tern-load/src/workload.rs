//! Keys, values and the choice of the next operation.
//!
//! Every key id has one deterministic key string and one deterministic value (length and
//! bytes derived from a hash of the id), so any value a get returns can be checked against
//! what a set of that key must have written, without remembering anything per key.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp, Zipf};

use crate::config::{Config, KeyDistribution, Op, SizeRange};

/// Value of a counter key written by preload.
pub(crate) const COUNTER_START: &[u8] = b"0";

/// SplitMix64 finaliser: a cheap, well-mixed hash of a key id.
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

const VALUE_ALPHABET: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Which namespace a key belongs to: data keys hold generated values, counter keys numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyKind {
    Data,
    Counter,
}

/// Maps key ids to key strings and values.
#[derive(Debug, Clone)]
pub(crate) struct KeySpace {
    key_size: SizeRange,
    value_size: SizeRange,
}

fn size_for(range: SizeRange, hash: u64) -> usize {
    range.min + (hash % (range.max - range.min + 1) as u64) as usize
}

impl KeySpace {
    pub fn new(config: &Config) -> Self {
        KeySpace {
            key_size: config.key_size,
            value_size: config.value_size,
        }
    }

    /// Appends the key of `id`: a namespace letter and the zero-padded id.
    pub fn write_key(&self, out: &mut Vec<u8>, id: u64, kind: KeyKind) {
        let len = size_for(self.key_size, mix64(id ^ 0x6b65_7973));
        out.push(match kind {
            KeyKind::Data => b'k',
            KeyKind::Counter => b'n',
        });
        let mut digits = [0u8; 20];
        let mut n = id;
        let mut used = 0;
        loop {
            digits[19 - used] = b'0' + (n % 10) as u8;
            used += 1;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        // Config validation guarantees room for the digits; pad up to the requested length.
        for _ in used..len.saturating_sub(1) {
            out.push(b'0');
        }
        out.extend_from_slice(&digits[20 - used..]);
    }

    fn value_shape(&self, id: u64) -> (usize, u64) {
        let hash = mix64(id);
        (size_for(self.value_size, hash >> 16), hash)
    }

    /// Appends the value that a set of `id` stores.
    pub fn write_value(&self, out: &mut Vec<u8>, id: u64) {
        let (len, hash) = self.value_shape(id);
        let block = value_block(hash);
        out.extend(block.iter().cycle().take(len));
    }

    /// Whether `data` is exactly the value a set of `id` stores.
    pub fn is_value_of(&self, id: u64, data: &[u8]) -> bool {
        let (len, hash) = self.value_shape(id);
        let block = value_block(hash);
        data.len() == len
            && data
                .chunks(block.len())
                .all(|chunk| chunk == &block[..chunk.len()])
    }
}

/// A value is this 64-byte block, repeated: checking it is a series of memcmp calls.
fn value_block(hash: u64) -> [u8; 64] {
    std::array::from_fn(|j| VALUE_ALPHABET[((hash >> ((j % 10) * 6)) as usize + j) & 63])
}

/// Draws key ids.
pub(crate) enum KeyChooser {
    Uniform {
        count: u64,
    },
    Zipf {
        zipf: Zipf<f64>,
    },
    /// Thread `t` of `T` walks ids `t, t + T, ...`, wrapping at the key count.
    Sequential {
        next: u64,
        step: u64,
        count: u64,
    },
}

impl KeyChooser {
    pub fn new(config: &Config, thread: usize) -> anyhow::Result<Self> {
        let count = config.draw_count();
        Ok(match config.key_distribution {
            KeyDistribution::Uniform => KeyChooser::Uniform { count },
            KeyDistribution::Zipf { s } => KeyChooser::Zipf {
                zipf: Zipf::new(count as f64, s)
                    .map_err(|e| anyhow::anyhow!("zipf({count}, {s}): {e}"))?,
            },
            KeyDistribution::Sequential => KeyChooser::Sequential {
                next: thread as u64 % count,
                step: config.threads as u64,
                count,
            },
        })
    }

    pub fn next(&mut self, rng: &mut SmallRng) -> u64 {
        match self {
            KeyChooser::Uniform { count } => rng.random_range(0..*count),
            // Zipf samples ranks 1..=n.
            KeyChooser::Zipf { zipf } => zipf.sample(rng) as u64 - 1,
            KeyChooser::Sequential { next, step, count } => {
                let id = *next;
                *next = (*next + *step) % *count;
                id
            }
        }
    }
}

/// Draws operations by weight.
pub(crate) struct OpChooser {
    cumulative: Vec<(u32, Op)>,
    total: u32,
}

impl OpChooser {
    pub fn new(config: &Config) -> Self {
        let mut total = 0;
        let cumulative = Op::ALL
            .into_iter()
            .filter_map(|op| {
                let w = config.mix.weight(op);
                (w > 0).then(|| {
                    total += w;
                    (total, op)
                })
            })
            .collect();
        OpChooser { cumulative, total }
    }

    pub fn next(&self, rng: &mut SmallRng) -> Op {
        if self.cumulative.len() == 1 {
            return self.cumulative[0].1;
        }
        let x = rng.random_range(0..self.total);
        self.cumulative
            .iter()
            .find(|(upto, _)| x < *upto)
            .map_or(Op::Get, |&(_, op)| op)
    }
}

/// Gaps between intended send times of one connection in open-loop mode.
pub(crate) enum Pacer {
    Fixed { gap_ns: f64 },
    Poisson { gaps: Exp<f64> },
}

impl Pacer {
    /// `rate` is this connection's share, in requests per second.
    pub fn new(rate: f64, poisson: bool) -> anyhow::Result<Self> {
        let mean_gap_ns = 1e9 / rate;
        Ok(if poisson {
            Pacer::Poisson {
                gaps: Exp::new(1.0 / mean_gap_ns)
                    .map_err(|e| anyhow::anyhow!("rate {rate}: {e}"))?,
            }
        } else {
            Pacer::Fixed {
                gap_ns: mean_gap_ns,
            }
        })
    }

    pub fn next_gap_ns(&self, rng: &mut SmallRng) -> f64 {
        match self {
            Pacer::Fixed { gap_ns } => *gap_ns,
            Pacer::Poisson { gaps } => gaps.sample(rng),
        }
    }
}

/// The random source of one worker thread, derived from the run's seed.
pub(crate) fn thread_rng(seed: u64, thread: usize) -> SmallRng {
    SmallRng::seed_from_u64(mix64(seed ^ mix64(thread as u64)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space(key: &str, value: &str) -> KeySpace {
        KeySpace {
            key_size: key.parse().unwrap(),
            value_size: value.parse().unwrap(),
        }
    }

    #[test]
    fn keys_have_the_requested_size_and_are_distinct() {
        let ks = space("16", "100");
        let mut a = Vec::new();
        ks.write_key(&mut a, 42, KeyKind::Data);
        assert_eq!(a, b"k000000000000042");
        let mut b = Vec::new();
        ks.write_key(&mut b, 42, KeyKind::Counter);
        assert_eq!(b, b"n000000000000042");
        let ranged = space("8-12", "1");
        for id in 0..1000 {
            let mut k = Vec::new();
            ranged.write_key(&mut k, id, KeyKind::Data);
            assert!((8..=12).contains(&k.len()), "{k:?}");
            let digits = std::str::from_utf8(&k[1..]).unwrap();
            assert_eq!(digits.parse::<u64>().unwrap(), id);
        }
    }

    #[test]
    fn values_check_against_their_key_only() {
        let ks = space("16", "10-300");
        let mut v = Vec::new();
        ks.write_value(&mut v, 7);
        assert!((10..=300).contains(&v.len()));
        assert!(ks.is_value_of(7, &v));
        assert!(!ks.is_value_of(8, &v));
        let mut flipped = v.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert!(!ks.is_value_of(7, &flipped));
        assert!(!ks.is_value_of(7, &v[..v.len() - 1]));
    }

    #[test]
    fn the_seed_fixes_the_sequence_of_operations_and_keys() {
        let config = Config {
            mix: "get=5,set=3,delete=1,incr=1".parse().unwrap(),
            ..Config::default()
        };
        let draw = |seed: u64, thread: usize| {
            let mut rng = thread_rng(seed, thread);
            let mut keys = KeyChooser::new(&config, thread).unwrap();
            let ops = OpChooser::new(&config);
            (0..1000)
                .map(|_| (ops.next(&mut rng), keys.next(&mut rng)))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7, 0), draw(7, 0));
        assert_ne!(draw(7, 0), draw(8, 0));
        assert_ne!(draw(7, 0), draw(7, 1), "threads draw different streams");
        let sets = draw(7, 0).iter().filter(|(op, _)| *op == Op::Set).count();
        assert!(
            (200..400).contains(&sets),
            "{sets} sets of 1000 at weight 3/10"
        );
    }

    #[test]
    fn choosers_follow_their_distribution() {
        let mut rng = thread_rng(1, 0);
        let config = Config {
            key_count: 10,
            threads: 2,
            ..Config::default()
        };
        let mut seq = KeyChooser::new(
            &Config {
                key_distribution: KeyDistribution::Sequential,
                ..config.clone()
            },
            1,
        )
        .unwrap();
        let ids: Vec<u64> = (0..6).map(|_| seq.next(&mut rng)).collect();
        assert_eq!(ids, [1, 3, 5, 7, 9, 1]);
        let mut zipf = KeyChooser::new(
            &Config {
                key_distribution: KeyDistribution::Zipf { s: 1.2 },
                key_count: 1000,
                ..config
            },
            0,
        )
        .unwrap();
        let mut hot = 0;
        for _ in 0..10_000 {
            let id = zipf.next(&mut rng);
            assert!(id < 1000);
            hot += u32::from(id == 0);
        }
        // Rank 1 of Zipf(1000, 1.2) has probability ~0.2: far above uniform's 0.001.
        assert!(hot > 1000, "hot key drawn {hot} times");
    }
}
