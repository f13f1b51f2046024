//! The IDL's types and how each is read and written.

use tern_thrift::{
    read_i64_list, read_list, read_struct, FieldType, ProtocolRead, ProtocolWrite, ThriftError,
    WriteField,
};

/// The service's methods, by their IDL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    OutNeighbours,
    InNeighbours,
    FriendsOfFriends,
    PersonalizedPagerank,
    CoFollow,
    PopularInRegion,
    Info,
}

impl Method {
    pub const ALL: [Method; 7] = [
        Method::OutNeighbours,
        Method::InNeighbours,
        Method::FriendsOfFriends,
        Method::PersonalizedPagerank,
        Method::CoFollow,
        Method::PopularInRegion,
        Method::Info,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Method::OutNeighbours => "out_neighbours",
            Method::InNeighbours => "in_neighbours",
            Method::FriendsOfFriends => "friends_of_friends",
            Method::PersonalizedPagerank => "personalized_pagerank",
            Method::CoFollow => "co_follow",
            Method::PopularInRegion => "popular_in_region",
            Method::Info => "info",
        }
    }

    pub fn from_name(name: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.name() == name)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub account: i64,
    pub score: f64,
    pub common: i32,
    pub adamic_adar: f64,
    pub in_region: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CandidatesRequest {
    pub viewer: i64,
    pub profile: Option<i64>,
    pub limit: i32,
    pub deadline_ms: Option<i32>,
    pub seed: Option<i64>,
}

impl CandidatesRequest {
    /// The IDL's default `limit`.
    pub const DEFAULT_LIMIT: i32 = 100;

    pub fn for_viewer(viewer: i64) -> Self {
        CandidatesRequest {
            viewer,
            profile: None,
            limit: Self::DEFAULT_LIMIT,
            deadline_ms: None,
            seed: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct CandidatesResponse {
    pub candidates: Vec<Candidate>,
    pub steps: i64,
    pub cut_short: bool,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct GraphInfo {
    pub accounts: i64,
    pub follows: i64,
    pub directed: bool,
    pub shard: i32,
    pub shards: i32,
    pub regions: i32,
}

/// The IDL's declared exceptions.
#[derive(Debug, Clone, PartialEq)]
pub enum GraphError {
    BadRequest(String),
    WrongShard {
        message: String,
        shard: i32,
        shards: i32,
    },
    Overloaded(String),
}

/// The exception as the IDL names it, with its message: `Overloaded: queue full`.
impl std::fmt::Display for GraphError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GraphError::BadRequest(m) => write!(f, "BadRequest: {m}"),
            GraphError::WrongShard {
                message,
                shard,
                shards,
            } => write!(f, "WrongShard (this is shard {shard}/{shards}): {message}"),
            GraphError::Overloaded(m) => write!(f, "Overloaded: {m}"),
        }
    }
}

/// One call's arguments.
#[derive(Debug, Clone, PartialEq)]
pub enum GraphCall {
    /// `out_neighbours` or `in_neighbours`.
    Neighbours {
        method: Method,
        account: i64,
        limit: i32,
    },
    /// One of the candidate sources.
    Candidates {
        method: Method,
        request: CandidatesRequest,
    },
    Info,
}

impl GraphCall {
    pub fn method(&self) -> Method {
        match self {
            GraphCall::Neighbours { method, .. } | GraphCall::Candidates { method, .. } => *method,
            GraphCall::Info => Method::Info,
        }
    }
}

/// One call's result.
#[derive(Debug, Clone, PartialEq)]
pub enum GraphReply {
    Neighbours(Vec<i64>),
    Candidates(CandidatesResponse),
    Info(GraphInfo),
    Error(GraphError),
}

/// A required field that was not sent.
fn missing(what: &'static str) -> ThriftError {
    ThriftError::MissingField(what)
}

impl CandidatesRequest {
    pub(crate) fn write(&self, w: &mut impl ProtocolWrite, out: &mut Vec<u8>) {
        w.write_struct_begin(out);
        w.field_i64(out, 1, self.viewer);
        if let Some(profile) = self.profile {
            w.field_i64(out, 2, profile);
        }
        w.field_i32(out, 3, self.limit);
        if let Some(ms) = self.deadline_ms {
            w.field_i32(out, 4, ms);
        }
        if let Some(seed) = self.seed {
            w.field_i64(out, 5, seed);
        }
        w.write_field_stop(out);
        w.write_struct_end(out);
    }

    pub(crate) fn read<'a>(
        r: &mut impl ProtocolRead<'a>,
    ) -> Result<CandidatesRequest, ThriftError> {
        let mut req = CandidatesRequest::for_viewer(0);
        let mut viewer = false;
        read_struct(r, |r, ty, id| {
            Ok(match (id, ty) {
                (1, FieldType::I64) => {
                    req.viewer = r.read_i64()?;
                    viewer = true;
                    true
                }
                (2, FieldType::I64) => {
                    req.profile = Some(r.read_i64()?);
                    true
                }
                (3, FieldType::I32) => {
                    req.limit = r.read_i32()?;
                    true
                }
                (4, FieldType::I32) => {
                    req.deadline_ms = Some(r.read_i32()?);
                    true
                }
                (5, FieldType::I64) => {
                    req.seed = Some(r.read_i64()?);
                    true
                }
                _ => false,
            })
        })?;
        if !viewer {
            return Err(missing("CandidatesRequest.viewer"));
        }
        Ok(req)
    }
}

impl CandidatesResponse {
    /// The candidates go as columns (the IDL says why); a column whose values are all the default (the
    /// walks' `common`, anything's but popularity's `in_region`) goes empty.
    pub(crate) fn write(&self, w: &mut impl ProtocolWrite, out: &mut Vec<u8>) {
        let candidates = &self.candidates;
        // About what the columns take in the compact protocol, so the buffer grows once.
        out.reserve(24 * candidates.len());
        w.write_struct_begin(out);
        w.field_i64(out, 2, self.steps);
        w.field_bool(out, 3, self.cut_short);
        write_column(w, out, 4, FieldType::I64, candidates, |w, out, c| {
            w.write_i64(out, c.account)
        });
        write_column(w, out, 5, FieldType::Double, candidates, |w, out, c| {
            w.write_double(out, c.score)
        });
        let two_hop = candidates
            .iter()
            .any(|c| c.common != 0 || c.adamic_adar != 0.0);
        let two_hop: &[Candidate] = if two_hop { candidates } else { &[] };
        write_column(w, out, 6, FieldType::I32, two_hop, |w, out, c| {
            w.write_i32(out, c.common)
        });
        write_column(w, out, 7, FieldType::Double, two_hop, |w, out, c| {
            w.write_double(out, c.adamic_adar)
        });
        let in_region: &[Candidate] = if candidates.iter().any(|c| c.in_region) {
            candidates
        } else {
            &[]
        };
        write_column(w, out, 8, FieldType::Bool, in_region, |w, out, c| {
            w.write_bool(out, c.in_region)
        });
        w.write_field_stop(out);
        w.write_struct_end(out);
    }

    pub(crate) fn read<'a>(
        r: &mut impl ProtocolRead<'a>,
    ) -> Result<CandidatesResponse, ThriftError> {
        let mut resp = CandidatesResponse::default();
        let (mut accounts, mut scores, mut common, mut adamic_adar, mut in_region) =
            (None, Vec::new(), Vec::new(), Vec::new(), Vec::new());
        read_struct(r, |r, ty, id| {
            Ok(match (id, ty) {
                (2, FieldType::I64) => {
                    resp.steps = r.read_i64()?;
                    true
                }
                (3, FieldType::Bool) => {
                    resp.cut_short = r.read_bool()?;
                    true
                }
                (4, FieldType::List) => {
                    accounts = Some(read_i64_list(r)?);
                    true
                }
                (5, FieldType::List) => {
                    scores = read_list(r, FieldType::Double, "list<double> scores", |r| {
                        r.read_double()
                    })?;
                    true
                }
                (6, FieldType::List) => {
                    common = read_list(r, FieldType::I32, "list<i32> common", |r| r.read_i32())?;
                    true
                }
                (7, FieldType::List) => {
                    adamic_adar =
                        read_list(r, FieldType::Double, "list<double> adamic_adar", |r| {
                            r.read_double()
                        })?;
                    true
                }
                (8, FieldType::List) => {
                    in_region = read_list(r, FieldType::Bool, "list<bool> in_region", |r| {
                        r.read_bool()
                    })?;
                    true
                }
                _ => false,
            })
        })?;
        let accounts = accounts.ok_or(missing("CandidatesResponse.accounts"))?;
        let n = accounts.len();
        // A column is as long as `accounts`, or empty where all its values are the default.
        let fits = |len: usize| len == 0 || len == n;
        let lengths = [
            scores.len(),
            common.len(),
            adamic_adar.len(),
            in_region.len(),
        ];
        if !lengths.into_iter().all(fits) {
            return Err(ThriftError::UnexpectedType(
                "candidate columns as long as accounts, or empty",
            ));
        }
        resp.candidates = accounts
            .into_iter()
            .enumerate()
            .map(|(i, account)| Candidate {
                account,
                score: scores.get(i).copied().unwrap_or_default(),
                common: common.get(i).copied().unwrap_or_default(),
                adamic_adar: adamic_adar.get(i).copied().unwrap_or_default(),
                in_region: in_region.get(i).copied().unwrap_or_default(),
            })
            .collect();
        Ok(resp)
    }
}

/// Writes field `id` as a list of `element`s, one per candidate, each with `write`.
fn write_column<W: ProtocolWrite>(
    w: &mut W,
    out: &mut Vec<u8>,
    id: i16,
    element: FieldType,
    candidates: &[Candidate],
    write: impl Fn(&mut W, &mut Vec<u8>, &Candidate),
) {
    w.write_field_begin(out, FieldType::List, id);
    w.write_list_begin(out, element, candidates.len());
    for c in candidates {
        write(w, out, c);
    }
}

impl GraphInfo {
    pub(crate) fn write(&self, w: &mut impl ProtocolWrite, out: &mut Vec<u8>) {
        w.write_struct_begin(out);
        w.field_i64(out, 1, self.accounts);
        w.field_i64(out, 2, self.follows);
        w.field_bool(out, 3, self.directed);
        w.field_i32(out, 4, self.shard);
        w.field_i32(out, 5, self.shards);
        w.field_i32(out, 6, self.regions);
        w.write_field_stop(out);
        w.write_struct_end(out);
    }

    pub(crate) fn read<'a>(r: &mut impl ProtocolRead<'a>) -> Result<GraphInfo, ThriftError> {
        let mut info = GraphInfo::default();
        read_struct(r, |r, ty, id| {
            Ok(match (id, ty) {
                (1, FieldType::I64) => {
                    info.accounts = r.read_i64()?;
                    true
                }
                (2, FieldType::I64) => {
                    info.follows = r.read_i64()?;
                    true
                }
                (3, FieldType::Bool) => {
                    info.directed = r.read_bool()?;
                    true
                }
                (4, FieldType::I32) => {
                    info.shard = r.read_i32()?;
                    true
                }
                (5, FieldType::I32) => {
                    info.shards = r.read_i32()?;
                    true
                }
                (6, FieldType::I32) => {
                    info.regions = r.read_i32()?;
                    true
                }
                _ => false,
            })
        })?;
        Ok(info)
    }
}

impl GraphError {
    /// The field of the result struct that carries this exception (`throws (1: ..., 2: ..., 3: ...)`).
    pub(crate) fn field_id(&self) -> i16 {
        match self {
            GraphError::BadRequest(_) => 1,
            GraphError::WrongShard { .. } => 2,
            GraphError::Overloaded(_) => 3,
        }
    }

    pub(crate) fn write(&self, w: &mut impl ProtocolWrite, out: &mut Vec<u8>) {
        w.write_struct_begin(out);
        match self {
            GraphError::BadRequest(message) | GraphError::Overloaded(message) => {
                w.field_string(out, 1, message);
            }
            GraphError::WrongShard {
                message,
                shard,
                shards,
            } => {
                w.field_string(out, 1, message);
                w.field_i32(out, 2, *shard);
                w.field_i32(out, 3, *shards);
            }
        }
        w.write_field_stop(out);
        w.write_struct_end(out);
    }

    /// Reads the exception carried in result field `id`.
    pub(crate) fn read<'a>(
        r: &mut impl ProtocolRead<'a>,
        id: i16,
    ) -> Result<GraphError, ThriftError> {
        let (mut message, mut shard, mut shards) = (String::new(), 0, 0);
        read_struct(r, |r, ty, field| {
            Ok(match (field, ty) {
                (1, FieldType::String) => {
                    message = r.read_string()?.to_owned();
                    true
                }
                (2, FieldType::I32) => {
                    shard = r.read_i32()?;
                    true
                }
                (3, FieldType::I32) => {
                    shards = r.read_i32()?;
                    true
                }
                _ => false,
            })
        })?;
        Ok(match id {
            1 => GraphError::BadRequest(message),
            2 => GraphError::WrongShard {
                message,
                shard,
                shards,
            },
            _ => GraphError::Overloaded(message),
        })
    }
}
