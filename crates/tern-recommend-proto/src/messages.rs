//! The IDL's types, how each is read and written in Thrift, and the JSON the HTTP front answers.

use serde::Serialize;
use tern_thrift::{
    read_i64_list, read_struct, FieldType, ProtocolRead, ProtocolWrite, ThriftError, WriteField,
};

/// The service's methods, by their IDL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    SuggestedUsers,
    Chaining,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::SuggestedUsers => "suggested_users",
            Method::Chaining => "chaining",
        }
    }

    pub fn from_name(name: &str) -> Option<Method> {
        [Method::SuggestedUsers, Method::Chaining]
            .into_iter()
            .find(|m| m.name() == name)
    }
}

/// A request of either method (`profile` is set exactly for Chaining).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RecommendRequest {
    pub viewer: i64,
    pub profile: Option<i64>,
    pub n: i32,
    pub deadline_ms: Option<i32>,
    pub exclude: Vec<i64>,
}

impl RecommendRequest {
    /// The IDL's default `n`.
    pub const DEFAULT_N: i32 = 20;

    pub fn suggested_users(viewer: i64, n: i32) -> Self {
        RecommendRequest {
            viewer,
            profile: None,
            n,
            deadline_ms: None,
            exclude: Vec::new(),
        }
    }

    pub fn chaining(viewer: i64, profile: i64, n: i32) -> Self {
        RecommendRequest {
            profile: Some(profile),
            ..RecommendRequest::suggested_users(viewer, n)
        }
    }

    pub fn method(&self) -> Method {
        if self.profile.is_some() {
            Method::Chaining
        } else {
            Method::SuggestedUsers
        }
    }

    /// The fields' ids in the method's request struct: Chaining has `profile` at 2 and the rest after it.
    fn ids(method: Method) -> [i16; 4] {
        match method {
            Method::SuggestedUsers => [2, 3, 4, 0],
            Method::Chaining => [3, 4, 5, 2],
        }
    }

    pub(crate) fn write(&self, w: &mut impl ProtocolWrite, out: &mut Vec<u8>) {
        let [n, deadline, exclude, profile] = Self::ids(self.method());
        w.write_struct_begin(out);
        w.field_i64(out, 1, self.viewer);
        if let Some(p) = self.profile {
            w.field_i64(out, profile, p);
        }
        w.field_i32(out, n, self.n);
        if let Some(ms) = self.deadline_ms {
            w.field_i32(out, deadline, ms);
        }
        if !self.exclude.is_empty() {
            w.field_i64_list(out, exclude, &self.exclude);
        }
        w.write_field_stop(out);
        w.write_struct_end(out);
    }

    pub(crate) fn read<'a>(
        r: &mut impl ProtocolRead<'a>,
        method: Method,
    ) -> Result<RecommendRequest, ThriftError> {
        let [n, deadline, exclude, profile] = Self::ids(method);
        let mut req = RecommendRequest::suggested_users(0, Self::DEFAULT_N);
        let mut viewer = false;
        read_struct(r, |r, ty, id| {
            Ok(match (id, ty) {
                (1, FieldType::I64) => {
                    req.viewer = r.read_i64()?;
                    viewer = true;
                    true
                }
                (id, FieldType::I64) if id == profile && method == Method::Chaining => {
                    req.profile = Some(r.read_i64()?);
                    true
                }
                (id, FieldType::I32) if id == n => {
                    req.n = r.read_i32()?;
                    true
                }
                (id, FieldType::I32) if id == deadline => {
                    req.deadline_ms = Some(r.read_i32()?);
                    true
                }
                (id, FieldType::List) if id == exclude => {
                    req.exclude = read_i64_list(r)?;
                    true
                }
                _ => false,
            })
        })?;
        if !viewer {
            return Err(ThriftError::MissingField("viewer"));
        }
        if method == Method::Chaining && req.profile.is_none() {
            return Err(ThriftError::MissingField("profile"));
        }
        Ok(req)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recommendation {
    pub account: i64,
    pub score: f64,
    pub source: String,
}

/// How a source did for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceStatus {
    Ok = 1,
    Timeout = 2,
    Error = 3,
    Skipped = 4,
    /// Not asked, to shed load: the service was overloaded and skipped its costliest sources.
    Shed = 5,
}

impl SourceStatus {
    fn from_i32(v: i32) -> Option<SourceStatus> {
        [
            SourceStatus::Ok,
            SourceStatus::Timeout,
            SourceStatus::Error,
            SourceStatus::Skipped,
            SourceStatus::Shed,
        ]
        .into_iter()
        .find(|s| *s as i32 == v)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SourceReport {
    pub source: String,
    pub status: SourceStatus,
    pub latency_us: i32,
    pub candidates: i32,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Recommendations {
    pub items: Vec<Recommendation>,
    pub partial: bool,
    pub sources: Vec<SourceReport>,
    pub model_version: String,
}

/// The IDL's declared exceptions.
#[derive(Debug, Clone, PartialEq)]
pub enum RecommendError {
    BadRequest(String),
    Overloaded(String),
}

/// The exception as the IDL names it, with its message: `Overloaded: queue full`.
impl std::fmt::Display for RecommendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecommendError::BadRequest(m) => write!(f, "BadRequest: {m}"),
            RecommendError::Overloaded(m) => write!(f, "Overloaded: {m}"),
        }
    }
}

impl RecommendError {
    pub fn message(&self) -> &str {
        match self {
            RecommendError::BadRequest(m) | RecommendError::Overloaded(m) => m,
        }
    }

    pub(crate) fn field_id(&self) -> i16 {
        match self {
            RecommendError::BadRequest(_) => 1,
            RecommendError::Overloaded(_) => 2,
        }
    }

    pub(crate) fn write(&self, w: &mut impl ProtocolWrite, out: &mut Vec<u8>) {
        w.write_struct_begin(out);
        w.field_string(out, 1, self.message());
        w.write_field_stop(out);
        w.write_struct_end(out);
    }

    pub(crate) fn read<'a>(
        r: &mut impl ProtocolRead<'a>,
        id: i16,
    ) -> Result<RecommendError, ThriftError> {
        let mut message = String::new();
        read_struct(r, |r, ty, field| {
            Ok(match (field, ty) {
                (1, FieldType::String) => {
                    message = r.read_string()?.to_owned();
                    true
                }
                _ => false,
            })
        })?;
        Ok(if id == 1 {
            RecommendError::BadRequest(message)
        } else {
            RecommendError::Overloaded(message)
        })
    }
}

impl Recommendations {
    pub(crate) fn write(&self, w: &mut impl ProtocolWrite, out: &mut Vec<u8>) {
        w.write_struct_begin(out);
        w.write_field_begin(out, FieldType::List, 1);
        w.write_list_begin(out, FieldType::Struct, self.items.len());
        for item in &self.items {
            w.write_struct_begin(out);
            w.field_i64(out, 1, item.account);
            w.field_double(out, 2, item.score);
            w.field_string(out, 3, &item.source);
            w.write_field_stop(out);
            w.write_struct_end(out);
        }
        w.field_bool(out, 2, self.partial);
        w.write_field_begin(out, FieldType::List, 3);
        w.write_list_begin(out, FieldType::Struct, self.sources.len());
        for s in &self.sources {
            w.write_struct_begin(out);
            w.field_string(out, 1, &s.source);
            w.field_i32(out, 2, s.status as i32);
            w.field_i32(out, 3, s.latency_us);
            w.field_i32(out, 4, s.candidates);
            w.write_field_stop(out);
            w.write_struct_end(out);
        }
        w.field_string(out, 4, &self.model_version);
        w.write_field_stop(out);
        w.write_struct_end(out);
    }

    pub(crate) fn read<'a>(r: &mut impl ProtocolRead<'a>) -> Result<Recommendations, ThriftError> {
        let mut recs = Recommendations::default();
        read_struct(r, |r, ty, id| {
            Ok(match (id, ty) {
                (1, FieldType::List) => {
                    let (_, len) = r.read_list_begin()?;
                    for _ in 0..len {
                        recs.items.push(read_recommendation(r)?);
                    }
                    true
                }
                (2, FieldType::Bool) => {
                    recs.partial = r.read_bool()?;
                    true
                }
                (3, FieldType::List) => {
                    let (_, len) = r.read_list_begin()?;
                    for _ in 0..len {
                        recs.sources.push(read_source_report(r)?);
                    }
                    true
                }
                (4, FieldType::String) => {
                    recs.model_version = r.read_string()?.to_owned();
                    true
                }
                _ => false,
            })
        })?;
        Ok(recs)
    }
}

fn read_recommendation<'a>(r: &mut impl ProtocolRead<'a>) -> Result<Recommendation, ThriftError> {
    let mut item = Recommendation {
        account: 0,
        score: 0.0,
        source: String::new(),
    };
    read_struct(r, |r, ty, id| {
        Ok(match (id, ty) {
            (1, FieldType::I64) => {
                item.account = r.read_i64()?;
                true
            }
            (2, FieldType::Double) => {
                item.score = r.read_double()?;
                true
            }
            (3, FieldType::String) => {
                item.source = r.read_string()?.to_owned();
                true
            }
            _ => false,
        })
    })?;
    Ok(item)
}

fn read_source_report<'a>(r: &mut impl ProtocolRead<'a>) -> Result<SourceReport, ThriftError> {
    let mut report = SourceReport {
        source: String::new(),
        status: SourceStatus::Skipped,
        latency_us: 0,
        candidates: 0,
    };
    read_struct(r, |r, ty, id| {
        Ok(match (id, ty) {
            (1, FieldType::String) => {
                report.source = r.read_string()?.to_owned();
                true
            }
            (2, FieldType::I32) => {
                let v = r.read_i32()?;
                report.status = SourceStatus::from_i32(v)
                    .ok_or(ThriftError::UnexpectedType("SourceStatus: 1 to 4"))?;
                true
            }
            (3, FieldType::I32) => {
                report.latency_us = r.read_i32()?;
                true
            }
            (4, FieldType::I32) => {
                report.candidates = r.read_i32()?;
                true
            }
            _ => false,
        })
    })?;
    Ok(report)
}
