//! Which shard serves a user: `--shard K/N` serves the users whose id hashes to K (of N, counted from 0).
//! The recommender routes each viewer's calls by the same function.

use std::fmt;
use std::str::FromStr;

/// One shard of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl Shard {
    /// The only shard of an unsharded service.
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    pub fn serves(&self, user: u64) -> bool {
        shard_of(user, self.count) == self.index
    }
}

/// The shard of `user` among `count` (scrambled first: consecutive ids spread evenly).
pub fn shard_of(user: u64, count: u32) -> u32 {
    (splitmix64(user) % u64::from(count.max(1))) as u32
}

/// SplitMix64's output function (Steele, Lea and Flood 2014): a bijection that scrambles a counter or an id.
pub fn splitmix64(n: u64) -> u64 {
    let mut x = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl FromStr for Shard {
    type Err = String;
    fn from_str(text: &str) -> Result<Shard, String> {
        let bad = || format!("{text:?}: a shard is K/N with 0 <= K < N, e.g. 0/2");
        let (k, n) = text.split_once('/').ok_or_else(bad)?;
        let (index, count): (u32, u32) = (
            k.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        if index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_parse_and_split_users_evenly() {
        let shards: Vec<Shard> = ["0/3", "1/3", "2/3"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let mut served = [0usize; 3];
        for user in 0..30_000u64 {
            let owners: Vec<usize> = (0..3).filter(|&i| shards[i].serves(user)).collect();
            assert_eq!(owners.len(), 1, "exactly one shard serves {user}");
            served[owners[0]] += 1;
        }
        assert!(
            served.iter().all(|&n| (9_000..11_000).contains(&n)),
            "{served:?}"
        );
        assert_eq!(shards[1].to_string(), "1/3");
        assert!(Shard::WHOLE.serves(12345));
    }

    #[test]
    fn bad_shards_are_refused_with_the_expected_form() {
        for bad in ["3/3", "1", "a/2", "1/0", "-1/2"] {
            let err = bad.parse::<Shard>().unwrap_err();
            assert!(err.contains("K/N"), "{bad}: {err}");
        }
    }
}
