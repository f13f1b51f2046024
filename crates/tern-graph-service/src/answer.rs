//! What `tern graph` answers to each call, from the graph it holds: the checks (known account, right shard,
//! limits) and the sources' results in the IDL's types. No I/O: the service calls these on an I/O loop
//! (neighbours, popularity, info) or on a CPU worker (the two-hop counts and the walks).

use std::cell::RefCell;
use std::time::{Duration, Instant};

use tern_graph::{
    co_follow, friends_of_friends, personalized_pagerank, Graph, NodeId, Regions, Scratch, Shard,
    TwoHop, TwoHopLimits, WalkLimits,
};
use tern_graph_proto::{
    Candidate, CandidatesRequest, CandidatesResponse, GraphError, GraphInfo, GraphReply, Method,
};

/// The service's limits and the sources' parameters (each a flag of `tern graph`).
#[derive(Debug, Clone)]
pub struct GraphLimits {
    /// Most candidates (and neighbours) one call returns.
    pub max_candidates: usize,
    /// Two-hop sources: neighbours of the start account taken (a seeded sample past it).
    pub first_hop: usize,
    /// Two-hop sources: neighbours of each of those taken.
    pub second_hop: usize,
    /// Personalized PageRank: steps per call.
    pub walk_steps: usize,
    /// Personalized PageRank: probability of restarting at the viewer after each step.
    pub walk_restart: f64,
    /// A call's deadline when it names none.
    pub default_deadline: Duration,
    /// Largest frame read; a bigger one is answered with a protocol error and the connection closed.
    pub max_frame_bytes: usize,
}

impl Default for GraphLimits {
    fn default() -> Self {
        GraphLimits {
            max_candidates: 1000,
            first_hop: 200,
            second_hop: 200,
            walk_steps: 3_000,
            walk_restart: 0.3,
            default_deadline: Duration::from_millis(50),
            max_frame_bytes: 1 << 20,
        }
    }
}

/// The graph a process serves, with its regions and where it sits among the shards.
pub struct GraphData {
    pub graph: Graph,
    pub regions: Regions,
    pub shard: Shard,
    pub limits: GraphLimits,
}

thread_local! {
    /// Each thread's counters for the two-hop sources and the walks (as big as the graph, made once).
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::new());
}

impl GraphData {
    /// The node of `account`, if this shard answers for it.
    fn node(&self, account: i64) -> Result<NodeId, GraphError> {
        let id = u64::try_from(account)
            .map_err(|_| GraphError::BadRequest(format!("account {account} is negative")))?;
        if !self.shard.serves(id) {
            let owner = tern_graph::shard_of(id, self.shard.count);
            return Err(GraphError::WrongShard {
                message: format!(
                    "account {account} is served by shard {owner}/{}, this is {}",
                    self.shard.count, self.shard
                ),
                shard: owner as i32,
                shards: self.shard.count as i32,
            });
        }
        self.graph
            .node(id)
            .ok_or_else(|| GraphError::BadRequest(format!("unknown account {account}")))
    }

    /// A node named as a call's second account (the profile of co-follow): any shard's.
    fn any_node(&self, account: i64) -> Result<NodeId, GraphError> {
        u64::try_from(account)
            .ok()
            .and_then(|id| self.graph.node(id))
            .ok_or_else(|| GraphError::BadRequest(format!("unknown account {account}")))
    }

    fn limit(&self, wanted: i32) -> Result<usize, GraphError> {
        match usize::try_from(wanted) {
            Ok(n) if n <= self.limits.max_candidates => Ok(n),
            _ => Err(GraphError::BadRequest(format!(
                "limit {wanted} is not between 0 and {}",
                self.limits.max_candidates
            ))),
        }
    }

    pub fn info(&self) -> GraphReply {
        GraphReply::Info(GraphInfo {
            accounts: self.graph.nodes() as i64,
            follows: self.graph.arcs() as i64,
            directed: self.graph.is_directed(),
            shard: self.shard.index as i32,
            shards: self.shard.count as i32,
            regions: self.regions.count() as i32,
        })
    }

    /// `out_neighbours` / `in_neighbours`: a limit of 0 means the server's most.
    pub fn neighbours(&self, method: Method, account: i64, limit: i32) -> GraphReply {
        let answer = || -> Result<Vec<i64>, GraphError> {
            let v = self.node(account)?;
            let limit = match self.limit(limit)? {
                0 => self.limits.max_candidates,
                n => n,
            };
            let list = match method {
                Method::InNeighbours => self.graph.in_neighbours(v),
                _ => self.graph.out_neighbours(v),
            };
            Ok(list
                .iter()
                .take(limit)
                .map(|&w| self.graph.id(w) as i64)
                .collect())
        };
        answer().map_or_else(GraphReply::Error, GraphReply::Neighbours)
    }

    /// Checks a candidates call before it is queued for a worker, so bad calls cost the worker nothing.
    pub fn check(&self, method: Method, request: &CandidatesRequest) -> Result<(), GraphError> {
        self.node(request.viewer)?;
        self.limit(request.limit)?;
        if method == Method::CoFollow {
            let profile = request.profile.ok_or_else(|| {
                GraphError::BadRequest("co_follow needs the profile being viewed".into())
            })?;
            self.any_node(profile)?;
        }
        Ok(())
    }

    /// Runs a candidate source. `deadline` stops the walks early (the two-hop counts are bounded by their
    /// caps instead).
    pub fn candidates(
        &self,
        method: Method,
        request: &CandidatesRequest,
        deadline: Option<Instant>,
    ) -> GraphReply {
        let answer = || -> Result<CandidatesResponse, GraphError> {
            self.check(method, request)?;
            let viewer = self.node(request.viewer)?;
            let limit = self.limit(request.limit)?;
            let seed = request.seed.unwrap_or(0) as u64;
            let two_hop = TwoHopLimits {
                first_hop: self.limits.first_hop,
                second_hop: self.limits.second_hop,
                limit,
            };
            Ok(match method {
                Method::FriendsOfFriends => SCRATCH.with_borrow_mut(|scratch| {
                    self.two_hop_response(friends_of_friends(
                        &self.graph,
                        viewer,
                        two_hop,
                        seed,
                        scratch,
                    ))
                }),
                Method::CoFollow => {
                    let profile = self.any_node(request.profile.unwrap_or_default())?;
                    SCRATCH.with_borrow_mut(|scratch| {
                        self.two_hop_response(co_follow(
                            &self.graph,
                            viewer,
                            profile,
                            two_hop,
                            seed,
                            scratch,
                        ))
                    })
                }
                Method::PersonalizedPagerank => {
                    let walked = SCRATCH.with_borrow_mut(|scratch| {
                        personalized_pagerank(
                            &self.graph,
                            viewer,
                            WalkLimits {
                                steps: self.limits.walk_steps,
                                restart: self.limits.walk_restart,
                                limit,
                            },
                            deadline,
                            seed,
                            scratch,
                        )
                    });
                    CandidatesResponse {
                        candidates: walked
                            .candidates
                            .iter()
                            .map(|c| self.candidate(c.node, c.score))
                            .collect(),
                        steps: walked.steps as i64,
                        cut_short: walked.cut_short,
                    }
                }
                _ => CandidatesResponse {
                    candidates: self
                        .regions
                        .popular_for(&self.graph, viewer, limit)
                        .iter()
                        .map(|p| Candidate {
                            in_region: p.in_region,
                            ..self.candidate(p.node, f64::from(p.followers))
                        })
                        .collect(),
                    ..CandidatesResponse::default()
                },
            })
        };
        answer().map_or_else(GraphReply::Error, GraphReply::Candidates)
    }

    fn candidate(&self, node: NodeId, score: f64) -> Candidate {
        Candidate {
            account: self.graph.id(node) as i64,
            score,
            common: 0,
            adamic_adar: 0.0,
            in_region: false,
        }
    }

    fn two_hop_response(&self, found: Vec<TwoHop>) -> CandidatesResponse {
        CandidatesResponse {
            candidates: found
                .iter()
                .map(|c| Candidate {
                    common: c.common as i32,
                    adamic_adar: c.adamic_adar,
                    ..self.candidate(c.node, f64::from(c.common))
                })
                .collect(),
            ..CandidatesResponse::default()
        }
    }
}
