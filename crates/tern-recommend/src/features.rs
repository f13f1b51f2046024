//! The features the model ranks by, computed the same way when serving and when training (`tern recommend
//! train-data` builds its rows with these functions). Two kinds: what the sources said about a candidate
//! (its evidence), and what tern cache holds about each account (its [`AccountFeatures`], written offline
//! by `tern recommend prepare`). A feature nobody could give (a source that did not propose the candidate,
//! a feature fetch that missed its deadline) is missing (NaN), which the model routes as it learned to.

use std::collections::HashMap;
use std::sync::LazyLock;

use tern_graph_proto::{Candidate, Method};

/// The model's features, in the order of its rows (the model file must name the same, in this order).
pub const FEATURE_NAMES: [&str; 15] = [
    "fof_common",
    "fof_adamic_adar",
    "fof_share",
    "ppr_score",
    "cofollow_common",
    "cofollow_adamic_adar",
    "popular_in_region",
    "sources",
    "candidate_followers",
    "candidate_following",
    "same_region",
    "candidate_region_size",
    "follows_viewer",
    "viewer_following",
    "viewer_followers",
];

/// The candidate sources, in the order their evidence is kept.
pub const SOURCES: [Method; 4] = [
    Method::FriendsOfFriends,
    Method::PersonalizedPagerank,
    Method::CoFollow,
    Method::PopularInRegion,
];

/// How many candidates each source is asked for, and how many a request ranks at least.
#[derive(Debug, Clone)]
pub struct SourceSizes {
    pub friends_of_friends: usize,
    pub personalized_pagerank: usize,
    pub co_follow: usize,
    /// Popular accounts every request ranks.
    pub popular_in_region: usize,
    /// Candidates every request ranks at least: popular accounts fill the pool up to it when the other
    /// sources found fewer (a viewer who follows few has few friends of friends).
    pub min_candidates: usize,
}

impl SourceSizes {
    /// What a request asks by default: up to about 600 candidates from the graph's neighbourhood of the
    /// viewer, fewer once the sources' overlaps are merged (the two-hop sources answer up to twice their
    /// limit: the best by common neighbours and the best by Adamic-Adar), and never fewer than 300 ranked.
    pub const DEFAULT: SourceSizes = SourceSizes {
        friends_of_friends: 150,
        personalized_pagerank: 120,
        co_follow: 80,
        popular_in_region: 30,
        min_candidates: 300,
    };

    /// What `source` is asked for: popularity, enough to fill the pool alone.
    pub(crate) fn of(&self, source: Method) -> usize {
        match source {
            Method::FriendsOfFriends => self.friends_of_friends,
            Method::PersonalizedPagerank => self.personalized_pagerank,
            Method::CoFollow => self.co_follow,
            _ => self.popular_in_region.max(self.min_candidates),
        }
    }
}

/// The sources each call asks, and the profile each is asked about: Chaining asks co-follow about the
/// profile being viewed and friends of friends for the viewer; Suggested Users asks friends of friends,
/// the walks and co-follow about the viewer itself ("accounts followed by my followers"). Both ask
/// popularity, which also fills the pool up to its minimum (see [`Pool::add_popular`]).
pub fn call_sources(viewer: i64, profile: Option<i64>) -> Vec<(Method, Option<i64>)> {
    match profile {
        Some(p) => vec![
            (Method::CoFollow, Some(p)),
            (Method::FriendsOfFriends, None),
            (Method::PopularInRegion, None),
        ],
        None => vec![
            (Method::FriendsOfFriends, None),
            (Method::PersonalizedPagerank, None),
            (Method::CoFollow, Some(viewer)),
            (Method::PopularInRegion, None),
        ],
    }
}

/// Most of the viewer's followers it does not follow back that join the candidates ("follows you").
pub const MAX_FOLLOWERS_PROPOSED: usize = 100;

impl Pool {
    /// Adds the viewer's followers it does not follow back, as candidates of their own: a follow back is
    /// the likeliest follow of all in a graph with reciprocity (a web of trust), and no walk along follows
    /// reaches them. `followers` and `following` are sorted.
    pub fn add_followers(&mut self, followers: &[i64], following: &[i64]) {
        let unanswered: Vec<Candidate> = followers
            .iter()
            .filter(|f| following.binary_search(f).is_err())
            .take(MAX_FOLLOWERS_PROPOSED)
            .map(|&account| Candidate {
                account,
                score: 1.0,
                common: 0,
                adamic_adar: 0.0,
                in_region: false,
            })
            .collect();
        self.add(Method::InNeighbours, &unanswered);
    }
}

/// What tern cache holds about one account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccountFeatures {
    pub followers: u32,
    pub following: u32,
    pub region: u32,
    pub region_size: u32,
}

impl AccountFeatures {
    /// The cache key of `account`'s features.
    pub fn key(account: i64) -> String {
        format!("{KEY_PREFIX}{account}")
    }

    /// The value stored: a version tag and the numbers as text, readable with any memcached client.
    pub fn encode(&self) -> String {
        format!(
            "v1 {} {} {} {}",
            self.followers, self.following, self.region, self.region_size
        )
    }

    /// `None` for a value this version did not write. Split and read as bytes, not as text (a `str` split
    /// and `parse` showed in profiles): a request decodes hundreds of these on the recommender's I/O thread.
    pub fn decode(value: &[u8]) -> Option<AccountFeatures> {
        let mut fields = value.strip_prefix(b"v1 ")?.split(|&b| b == b' ');
        let mut number = || decimal_u32(fields.next()?);
        let features = AccountFeatures {
            followers: number()?,
            following: number()?,
            region: number()?,
            region_size: number()?,
        };
        fields.next().is_none().then_some(features)
    }
}

/// Plain decimal digits (no sign, no spaces) that fit a `u32`.
fn decimal_u32(digits: &[u8]) -> Option<u32> {
    if digits.is_empty() || digits.len() > 10 {
        return None;
    }
    let mut n = 0u64;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u64::from(d - b'0');
    }
    u32::try_from(n).ok()
}

/// What every feature key starts with.
const KEY_PREFIX: &str = "tern:f:";

/// The feature keys of many accounts, written into one buffer: a request asks for hundreds, and a
/// `String` each (with `format!`'s machinery) showed in profiles of the recommender's I/O thread.
#[derive(Debug, Default)]
pub struct FeatureKeys {
    text: Vec<u8>,
    ends: Vec<usize>,
}

impl FeatureKeys {
    pub fn new(accounts: impl Iterator<Item = i64>) -> FeatureKeys {
        let count = accounts.size_hint().0;
        let mut keys = FeatureKeys {
            text: Vec::with_capacity(count * (KEY_PREFIX.len() + 8)),
            ends: Vec::with_capacity(count),
        };
        let mut digits = itoa::Buffer::new();
        for account in accounts {
            keys.text.extend_from_slice(KEY_PREFIX.as_bytes());
            keys.text
                .extend_from_slice(digits.format(account).as_bytes());
            keys.ends.push(keys.text.len());
        }
        keys
    }

    /// Each account's key, in the order given.
    pub fn keys(&self) -> Vec<&[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(&self.ends)
            .map(|(start, &end)| &self.text[start..end])
            .collect()
    }
}

/// What the sources said about one candidate.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    pub fof: Option<(i32, f64)>,
    pub ppr: Option<f64>,
    pub cofollow: Option<(i32, f64)>,
    pub popular_in_region: Option<bool>,
    /// The first source that proposed it (the one its answer names).
    pub first: Option<Method>,
    pub sources: u8,
}

/// The candidates of one request, deduplicated across sources, in the order they were first proposed.
#[derive(Debug, Default)]
pub struct Pool {
    pub accounts: Vec<i64>,
    pub evidence: Vec<Evidence>,
    /// foldhash, not SipHash: account ids are not chosen by an attacker who could aim at one bucket (they
    /// come from the graph service), and a request merges hundreds.
    index: HashMap<i64, usize, foldhash::fast::FixedState>,
}

impl Pool {
    /// Adds what `source` proposed.
    pub fn add(&mut self, source: Method, candidates: &[Candidate]) {
        self.index.reserve(candidates.len());
        for c in candidates {
            let i = *self.index.entry(c.account).or_insert_with(|| {
                self.accounts.push(c.account);
                self.evidence.push(Evidence::default());
                self.accounts.len() - 1
            });
            let e = &mut self.evidence[i];
            e.first.get_or_insert(source);
            e.sources += 1;
            match source {
                Method::FriendsOfFriends => e.fof = Some((c.common, c.adamic_adar)),
                Method::PersonalizedPagerank => e.ppr = Some(c.score),
                Method::CoFollow => e.cofollow = Some((c.common, c.adamic_adar)),
                Method::PopularInRegion => e.popular_in_region = Some(c.in_region),
                // Followers carry no score of their own: `follows_viewer` says it.
                _ => {}
            }
        }
    }

    /// Adds popular_in_region's answer, after every other source's: its first `sizes.popular_in_region`
    /// as any source's, the rest only while the pool is under `sizes.min_candidates` (a popular account
    /// another source proposed gets the evidence either way).
    pub fn add_popular(&mut self, candidates: &[Candidate], sizes: &SourceSizes) {
        let (always, filler) = candidates.split_at(sizes.popular_in_region.min(candidates.len()));
        self.add(Method::PopularInRegion, always);
        for c in filler {
            if self.len() < sizes.min_candidates || self.index.contains_key(&c.account) {
                self.add(Method::PopularInRegion, std::slice::from_ref(c));
            }
        }
    }

    pub fn len(&self) -> usize {
        self.accounts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.accounts.is_empty()
    }
}

/// What is known about the viewer.
#[derive(Debug, Clone, Default)]
pub struct Viewer {
    pub features: Option<AccountFeatures>,
    /// Whom the viewer follows (sorted), if the graph answered.
    pub following: Option<Vec<i64>>,
    /// Who follows the viewer (sorted), if the graph answered.
    pub followers: Option<Vec<i64>>,
}

/// ln(1 + n), from a table for the counts most accounts have: a row takes three (the viewer's two are
/// the same for every row), and `ln_1p` showed in profiles of ranking.
fn log_count(n: u32) -> f64 {
    static SMALL: LazyLock<Vec<f64>> =
        LazyLock::new(|| (0..4096u32).map(|n| f64::from(n).ln_1p()).collect());
    SMALL
        .get(n as usize)
        .copied()
        .unwrap_or_else(|| f64::from(n).ln_1p())
}

fn flag(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}

/// Appends one candidate's row of [`FEATURE_NAMES`] to `row`.
pub fn push_row(
    row: &mut Vec<f64>,
    evidence: &Evidence,
    candidate: Option<&AccountFeatures>,
    account: i64,
    viewer: &Viewer,
) {
    let missing = f64::NAN;
    let viewer_following = viewer
        .features
        .map(|f| f.following)
        .or(viewer.following.as_ref().map(|l| l.len() as u32));
    row.extend([
        evidence.fof.map_or(missing, |(c, _)| f64::from(c)),
        evidence.fof.map_or(missing, |(_, aa)| aa),
        match (evidence.fof, viewer_following) {
            (Some((c, _)), Some(n)) if n > 0 => f64::from(c) / f64::from(n),
            _ => missing,
        },
        evidence.ppr.unwrap_or(missing),
        evidence.cofollow.map_or(missing, |(c, _)| f64::from(c)),
        evidence.cofollow.map_or(missing, |(_, aa)| aa),
        evidence.popular_in_region.map_or(missing, flag),
        f64::from(evidence.sources),
        candidate.map_or(missing, |f| log_count(f.followers)),
        candidate.map_or(missing, |f| log_count(f.following)),
        match (candidate, viewer.features) {
            (Some(c), Some(v)) => flag(c.region == v.region),
            _ => missing,
        },
        candidate.map_or(missing, |f| log_count(f.region_size)),
        viewer
            .followers
            .as_ref()
            .map_or(missing, |l| flag(l.binary_search(&account).is_ok())),
        viewer_following.map_or(missing, log_count),
        viewer.features.map_or(missing, |f| log_count(f.followers)),
    ]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(account: i64, common: i32) -> Candidate {
        Candidate {
            account,
            score: f64::from(common),
            common,
            adamic_adar: 0.5,
            in_region: true,
        }
    }

    #[test]
    fn account_features_round_trip_and_refuse_other_text() {
        let f = AccountFeatures {
            followers: 10,
            following: 3,
            region: 7,
            region_size: 900,
        };
        assert_eq!(f.encode(), "v1 10 3 7 900");
        assert_eq!(AccountFeatures::decode(f.encode().as_bytes()), Some(f));
        for bad in [
            "v2 1 2 3 4",
            "v1 1 2 3",
            "v1 1 2 3 4 5",
            "v1 a 2 3 4",
            "",
            "v1 4294967296 2 3 4",
            "v1 1  2 3 4",
            "v1 1 2 3 4 ",
            "v1 +1 2 3 4",
            "v1 1 2 3 -4",
        ] {
            assert_eq!(AccountFeatures::decode(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn feature_keys_are_the_keys_one_by_one() {
        let accounts = [0, 7, -3, i64::MAX, 123_456];
        let keys = FeatureKeys::new(accounts.into_iter());
        let want: Vec<String> = accounts.into_iter().map(AccountFeatures::key).collect();
        let got: Vec<&[u8]> = keys.keys();
        assert_eq!(got, want.iter().map(|k| k.as_bytes()).collect::<Vec<_>>());
        assert!(FeatureKeys::new(std::iter::empty()).keys().is_empty());
    }

    #[test]
    fn counts_read_from_the_table_as_computed() {
        for n in [0, 1, 2, 4095, 4096, 70_000, u32::MAX] {
            assert_eq!(log_count(n), f64::from(n).ln_1p(), "{n}");
        }
    }

    #[test]
    fn popular_accounts_fill_the_pool_up_to_its_minimum() {
        let sizes = SourceSizes {
            popular_in_region: 2,
            min_candidates: 5,
            ..SourceSizes::DEFAULT
        };
        let popular: Vec<Candidate> = (100..110).map(|a| candidate(a, 0)).collect();
        // Few from the neighbourhood: popular ones fill up to five, one of them already proposed.
        let mut small = Pool::default();
        small.add(
            Method::FriendsOfFriends,
            &[candidate(1, 2), candidate(107, 1)],
        );
        small.add_popular(&popular, &sizes);
        assert_eq!(small.accounts, [1, 107, 100, 101, 102]);
        assert_eq!(
            small.evidence[1].popular_in_region,
            Some(true),
            "107 was proposed: evidence either way"
        );
        // Many: only the two every request ranks, and the evidence of those already proposed.
        let mut big = Pool::default();
        let many: Vec<Candidate> = (1..=6).chain([105]).map(|a| candidate(a, 1)).collect();
        big.add(Method::FriendsOfFriends, &many);
        big.add_popular(&popular, &sizes);
        assert_eq!(big.len(), 9);
        assert_eq!(&big.accounts[7..], [100, 101]);
        assert_eq!(big.evidence[6].popular_in_region, Some(true));
    }

    #[test]
    fn the_pool_merges_sources_and_rows_mark_what_is_missing() {
        let mut pool = Pool::default();
        pool.add(
            Method::FriendsOfFriends,
            &[candidate(5, 3), candidate(6, 1)],
        );
        pool.add(Method::CoFollow, &[candidate(6, 4)]);
        assert_eq!(pool.accounts, [5, 6]);
        assert_eq!(pool.evidence[1].sources, 2);
        assert_eq!(pool.evidence[1].first, Some(Method::FriendsOfFriends));
        let viewer = Viewer {
            features: None,
            following: Some(vec![1, 2, 3]),
            followers: Some(vec![6]),
        };
        let mut row = Vec::new();
        push_row(&mut row, &pool.evidence[1], None, 6, &viewer);
        assert_eq!(row.len(), FEATURE_NAMES.len());
        let at = |name: &str| row[FEATURE_NAMES.iter().position(|n| *n == name).unwrap()];
        assert_eq!(at("fof_common"), 1.0);
        assert_eq!(at("fof_share"), 1.0 / 3.0);
        assert_eq!(at("cofollow_common"), 4.0);
        assert_eq!(at("follows_viewer"), 1.0);
        assert_eq!(at("sources"), 2.0);
        assert!(
            at("ppr_score").is_nan()
                && at("candidate_followers").is_nan()
                && at("same_region").is_nan()
        );
    }
}
