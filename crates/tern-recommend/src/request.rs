//! One request's steps, whoever makes its calls: which sources to ask and by when ([`Plan`]), what their
//! answers make ([`Plan::gather`]: the candidate pool, each source's report), and the ranking's input once
//! the features are in ([`Gathered::ranking`]). The service runs them with non-blocking calls on its I/O
//! loop; `tern bench recommend`'s blocking baseline (`blocking.rs`) runs the same steps with blocking calls,
//! so the two differ only in how they wait.

use std::time::Instant;

use tern_cache_client::KeyResult;
use tern_graph_proto::{GraphCall, GraphError, GraphReply, Method};
use tern_metrics::{Counter, CounterFamily, Histogram, HistogramConfig, HistogramFamily};
use tern_model::Model;
use tern_recommend_proto::{
    RecommendError, RecommendRequest, Recommendation, Recommendations, SourceReport, SourceStatus,
};

use crate::blend::{blend, BlendCpu, BlendRequest};
use crate::config::RecommendConfig;
use crate::fanout::{source_call, Called};
use crate::features::{call_sources, AccountFeatures, FeatureKeys, Pool, Viewer, SOURCES};

static SOURCE_NS: HistogramFamily = HistogramFamily::new(
    "tern_recommend_source_ns",
    "Time of each source call, to its answer or its budget's end",
    "source",
    &[
        "friends_of_friends",
        "personalized_pagerank",
        "co_follow",
        "popular_in_region",
    ],
    HistogramConfig::LATENCY_NS,
);

static SOURCE_OUTCOMES: CounterFamily = CounterFamily::new(
    "tern_recommend_source_calls_total",
    "Source calls by outcome",
    "outcome",
    &["ok", "timeout", "error"],
);

static CANDIDATES: Histogram = Histogram::with_config(
    "tern_recommend_candidates",
    "Candidates ranked per request (the sources' proposals after merging)",
    HistogramConfig::new(1, 100_000, 3),
);

static PARTIAL: Counter = Counter::new(
    "tern_recommend_partial_total",
    "Answers marked partial: a source or the features missed the deadline or failed, or some features were \
     not in the cache",
);

static FEATURES_MISSING: Counter = Counter::new(
    "tern_recommend_features_missing_total",
    "Accounts whose features the cache did not have (a miss or an unreadable value): every account's are \
     written by `prepare`, so these were lost (a node restarted empty, evictions) and need `prepare` again",
);

static RANKING_CPU_NS: HistogramFamily = HistogramFamily::new(
    "tern_recommend_ranking_cpu_ns",
    "CPU time of each part of ranking on the CPU pool: building the feature rows, scoring them with the \
     model, the blend (exclusions, quotas, top N)",
    "part",
    &["rows", "scoring", "blend"],
    HistogramConfig::LATENCY_NS,
);

static DEGRADED: Counter = Counter::new(
    "tern_recommend_degraded_total",
    "Answers made without some of their sources, skipped to shed load (their status SHED)",
);

fn source_index(source: Method) -> usize {
    SOURCES.iter().position(|&s| s == source).unwrap_or(3)
}

/// What a request asks of the graph, and by when.
pub struct Plan {
    pub viewer: i64,
    profile: Option<i64>,
    /// Sources and features must be in by then (the ranking's reserve before the deadline).
    pub gather_until: Instant,
    /// Source calls end by then.
    pub source_until: Instant,
    /// The sources asked, each with the account it is about.
    sources: Vec<(Method, Option<i64>)>,
}

impl Plan {
    /// The plan of `request`, read at `received`, due at `deadline`, skipping the sources in `shed`.
    pub fn new(
        config: &RecommendConfig,
        request: &RecommendRequest,
        shed: &[Method],
        received: Instant,
        deadline: Instant,
    ) -> Plan {
        let gather_until = deadline
            .checked_sub(config.ranking_reserve)
            .unwrap_or(deadline)
            .max(received);
        let viewer = request.viewer;
        Plan {
            viewer,
            profile: request.profile,
            gather_until,
            source_until: gather_until.min(Instant::now() + config.source_budget),
            sources: call_sources(viewer, request.profile)
                .into_iter()
                .filter(|(s, _)| !shed.contains(s))
                .collect(),
        }
    }

    /// The graph calls, all made at once: the sources, then whom the viewer follows and is followed by.
    pub fn calls(&self, config: &RecommendConfig) -> Vec<GraphCall> {
        let viewer = self.viewer;
        let mut calls: Vec<GraphCall> = self
            .sources
            .iter()
            .map(|&(s, about)| source_call(s, viewer, about, config.sizes.of(s), self.source_until))
            .collect();
        for method in [Method::OutNeighbours, Method::InNeighbours] {
            calls.push(GraphCall::Neighbours {
                method,
                account: viewer,
                limit: 0,
            });
        }
        calls
    }

    /// What the calls' `answers` (in the order of [`Plan::calls`]) make.
    pub fn gather(
        &self,
        config: &RecommendConfig,
        mut answers: Vec<Called>,
    ) -> Result<Gathered, RecommendError> {
        // A viewer the graph does not know is the caller's mistake, whichever source said so.
        if let Some(message) = answers.iter().find_map(|a| match &a.result {
            Ok(Ok(GraphReply::Error(GraphError::BadRequest(m)))) => Some(m.clone()),
            _ => None,
        }) {
            return Err(RecommendError::BadRequest(message));
        }
        let followers = answers.pop().and_then(Called::neighbours);
        let following = answers.pop().and_then(Called::neighbours);
        let mut partial = followers.is_none() || following.is_none();
        let mut pool = Pool::default();
        let mut popular = Vec::new();
        let mut reports: Vec<SourceReport> = Vec::with_capacity(SOURCES.len());
        for (answer, &(source, _)) in answers.into_iter().zip(&self.sources) {
            SOURCE_NS.record_duration(source_index(source), answer.latency);
            let (report, candidates) = answer.report(source);
            SOURCE_OUTCOMES.incr(match report.status {
                SourceStatus::Ok => 0,
                SourceStatus::Timeout => 1,
                _ => 2,
            });
            partial |= report.status != SourceStatus::Ok;
            match candidates {
                Some(candidates) if source == Method::PopularInRegion => popular = candidates,
                Some(candidates) => pool.add(source, &candidates),
                None => {}
            }
            reports.push(report);
        }
        if let (Some(followers), Some(following)) = (&followers, &following) {
            pool.add_followers(followers, following);
        }
        pool.add_popular(&popular, &config.sizes);
        let asked = call_sources(self.viewer, self.profile);
        for &source in &SOURCES {
            if !self.sources.iter().any(|&(s, _)| s == source) {
                // Not asked: because this call does not use it, or to shed load (then the answer lacks it).
                let status = if asked.iter().any(|&(s, _)| s == source) {
                    partial = true;
                    SourceStatus::Shed
                } else {
                    SourceStatus::Skipped
                };
                reports.push(SourceReport {
                    source: source.name().to_owned(),
                    status,
                    latency_us: 0,
                    candidates: 0,
                });
            }
        }
        if reports.iter().any(|r| r.status == SourceStatus::Shed) {
            DEGRADED.incr();
        }
        CANDIDATES.record(pool.len() as u64);
        Ok(Gathered {
            viewer: self.viewer,
            pool,
            reports,
            partial,
            following,
            followers,
        })
    }
}

/// The candidates and what is known of the viewer, before the features.
pub struct Gathered {
    viewer: i64,
    pool: Pool,
    reports: Vec<SourceReport>,
    partial: bool,
    following: Option<Vec<i64>>,
    followers: Option<Vec<i64>>,
}

impl Gathered {
    /// The viewer's and the candidates' feature keys, the viewer's first.
    pub fn feature_keys(&self) -> FeatureKeys {
        FeatureKeys::new(std::iter::once(self.viewer).chain(self.pool.accounts.iter().copied()))
    }

    /// The ranking's input, once the features of [`Gathered::feature_keys`] are `fetched`.
    pub fn ranking(
        self,
        fetched: Vec<KeyResult>,
        request: RecommendRequest,
        config: &RecommendConfig,
    ) -> Ranking {
        let (mut failed, mut missing) = (false, 0);
        let mut features: Vec<Option<AccountFeatures>> = fetched
            .into_iter()
            .map(|r| match r {
                Err(_) => {
                    failed = true;
                    None
                }
                Ok(item) => {
                    let features = item.and_then(|item| AccountFeatures::decode(&item.value));
                    missing += usize::from(features.is_none());
                    features
                }
            })
            .collect();
        // Every account's features were written by `prepare`: a miss is a loss (a cache node restarted
        // empty), and the answer was ranked without them, as after a failed fetch.
        FEATURES_MISSING.add(missing as u64);
        let partial = self.partial || failed || missing > 0;
        let viewer_features = features.remove(0);
        Ranking {
            request: BlendRequest {
                viewer: self.viewer,
                profile: request.profile,
                exclude: request.exclude,
                n: request.n as usize,
                max_source_share: config.max_source_share,
            },
            pool: self.pool,
            features,
            viewer: Viewer {
                features: viewer_features,
                following: self.following,
                followers: self.followers,
            },
            reports: self.reports,
            partial,
        }
    }
}

/// Everything the ranking needs, and what the answer will say besides its items.
pub struct Ranking {
    request: BlendRequest,
    pool: Pool,
    features: Vec<Option<AccountFeatures>>,
    viewer: Viewer,
    reports: Vec<SourceReport>,
    partial: bool,
}

/// A ranking's items, and the rest of its answer.
pub struct Ranked {
    items: Vec<Recommendation>,
    reports: Vec<SourceReport>,
    partial: bool,
}

impl Ranking {
    /// Scores and blends the candidates (CPU work: on a worker, or wherever the caller chose).
    pub fn run(self, model: &Model) -> Ranked {
        let (items, cpu) = blend(
            model,
            &self.request,
            &self.pool,
            &self.features,
            &self.viewer,
        );
        record_cpu(&cpu);
        Ranked {
            items,
            reports: self.reports,
            partial: self.partial,
        }
    }
}

fn record_cpu(cpu: &BlendCpu) {
    RANKING_CPU_NS.record_duration(0, cpu.rows);
    RANKING_CPU_NS.record_duration(1, cpu.scoring);
    RANKING_CPU_NS.record_duration(2, cpu.blend);
}

impl Ranked {
    pub fn answer(self, model_version: String) -> Recommendations {
        if self.partial {
            PARTIAL.incr();
        }
        Recommendations {
            items: self.items,
            partial: self.partial,
            sources: self.reports,
            model_version,
        }
    }
}
