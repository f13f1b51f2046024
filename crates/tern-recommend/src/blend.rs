//! Ranking and blending, on a CPU worker: the candidates the viewer should not see are dropped, the rest
//! are scored by the model, ordered, and cut to `n` with a quota per source so one source cannot fill the
//! whole answer while others have good candidates.

use std::time::Duration;

use tern_graph_proto::Method;
use tern_model::Model;
use tern_recommend_proto::Recommendation;

use crate::features::{push_row, AccountFeatures, Pool, Viewer, FEATURE_NAMES};

/// What one request asks of the blend.
#[derive(Debug, Clone)]
pub struct BlendRequest {
    pub viewer: i64,
    /// The profile being viewed (Chaining): never suggested.
    pub profile: Option<i64>,
    pub exclude: Vec<i64>,
    pub n: usize,
    /// Most of the answer one source may fill while others have candidates left, as a share of `n`.
    pub max_source_share: f64,
}

/// The CPU time of each part of one blend (the thread's own clock: time the worker was preempted is not
/// counted).
#[derive(Debug, Clone, Copy, Default)]
pub struct BlendCpu {
    pub rows: Duration,
    pub scoring: Duration,
    pub blend: Duration,
}

/// The calling thread's CPU time so far.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own; CLOCK_THREAD_CPUTIME_ID always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The ranked answer: accounts, scores, and the source each came from first; and what each part cost.
pub fn blend(
    model: &Model,
    request: &BlendRequest,
    pool: &Pool,
    features: &[Option<AccountFeatures>],
    viewer: &Viewer,
) -> (Vec<Recommendation>, BlendCpu) {
    let started = thread_cpu();
    // Sorted once: a request may name many accounts to exclude, and every candidate is checked.
    let mut exclude = request.exclude.clone();
    exclude.sort_unstable();
    let shown = |account: i64| {
        account != request.viewer
            && Some(account) != request.profile
            && exclude.binary_search(&account).is_err()
            && viewer
                .following
                .as_ref()
                .is_none_or(|f| f.binary_search(&account).is_err())
    };
    let kept: Vec<usize> = (0..pool.len())
        .filter(|&i| shown(pool.accounts[i]))
        .collect();
    let mut rows = Vec::with_capacity(kept.len() * FEATURE_NAMES.len());
    for &i in &kept {
        push_row(
            &mut rows,
            &pool.evidence[i],
            features.get(i).and_then(Option::as_ref),
            pool.accounts[i],
            viewer,
        );
    }
    let rows_done = thread_cpu();
    let mut scores = Vec::with_capacity(kept.len());
    model.score_batch(&rows, &mut scores);
    let scored = thread_cpu();
    let mut ranked: Vec<(usize, f64)> = kept.into_iter().zip(scores).collect();
    ranked.sort_unstable_by(|a, b| {
        b.1.total_cmp(&a.1)
            .then(pool.accounts[a.0].cmp(&pool.accounts[b.0]))
    });
    let quota = ((request.max_source_share * request.n as f64).ceil() as usize).max(1);
    let mut taken = [0usize; 5];
    let source_slot = |m: Method| match m {
        Method::FriendsOfFriends => 0,
        Method::PersonalizedPagerank => 1,
        Method::CoFollow => 2,
        Method::PopularInRegion => 3,
        _ => 4,
    };
    let mut chosen = Vec::with_capacity(request.n);
    let mut over_quota = Vec::new();
    for &(i, score) in &ranked {
        if chosen.len() == request.n {
            break;
        }
        let source = pool.evidence[i].first.unwrap_or(Method::PopularInRegion);
        let slot = source_slot(source);
        if taken[slot] < quota {
            taken[slot] += 1;
            chosen.push((i, score));
        } else {
            over_quota.push((i, score));
        }
    }
    // No other source had enough: the best of the rest fill the answer after all.
    let missing = request.n.saturating_sub(chosen.len());
    chosen.extend(over_quota.into_iter().take(missing));
    chosen.sort_unstable_by(|a, b| {
        b.1.total_cmp(&a.1)
            .then(pool.accounts[a.0].cmp(&pool.accounts[b.0]))
    });
    let items = chosen
        .into_iter()
        .map(|(i, score)| Recommendation {
            account: pool.accounts[i],
            score,
            source: pool.evidence[i]
                .first
                .unwrap_or(Method::PopularInRegion)
                .name()
                .to_owned(),
        })
        .collect();
    let cpu = BlendCpu {
        rows: rows_done - started,
        scoring: scored - rows_done,
        blend: thread_cpu() - scored,
    };
    (items, cpu)
}
