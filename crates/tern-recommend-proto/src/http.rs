//! The HTTP/JSON front's requests and answers: `GET /v1/suggested-users?viewer=ID&n=N` and
//! `GET /v1/chaining?viewer=ID&profile=ID&n=N` (`deadline_ms` and `exclude=ID,ID,...` optional), answered
//! with the Thrift reply's fields as JSON; a bad request is a `400`, overload a `503`, each with
//! `{"error": "..."}`.

use serde_json::json;

use crate::messages::{Method, RecommendError, RecommendRequest, Recommendations};

pub const SUGGESTED_USERS_PATH: &str = "/v1/suggested-users";
pub const CHAINING_PATH: &str = "/v1/chaining";

/// Why an HTTP request names no recommendation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRefusal {
    pub status: u16,
    pub message: String,
}

fn refuse(status: u16, message: impl Into<String>) -> HttpRefusal {
    HttpRefusal {
        status,
        message: message.into(),
    }
}

/// The request an HTTP `method` and `path` name, with `param` giving a query parameter's decoded value
/// (`None` when absent, `Some(Err(()))` when not UTF-8).
pub fn request_from_http(
    method: &str,
    path: &str,
    param: impl Fn(&str) -> Option<Result<String, ()>>,
) -> Result<RecommendRequest, HttpRefusal> {
    let kind = match path {
        SUGGESTED_USERS_PATH => Method::SuggestedUsers,
        CHAINING_PATH => Method::Chaining,
        _ => {
            return Err(refuse(
                404,
                format!("no such path: {path} (try {SUGGESTED_USERS_PATH} or {CHAINING_PATH})"),
            ))
        }
    };
    if method != "GET" {
        return Err(refuse(405, format!("{path} takes GET, not {method}")));
    }
    let number = |name: &str| -> Result<Option<i64>, HttpRefusal> {
        match param(name) {
            None => Ok(None),
            Some(Ok(text)) => text
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| refuse(400, format!("{name}={text:?} is not an integer"))),
            Some(Err(())) => Err(refuse(400, format!("{name} is not UTF-8"))),
        }
    };
    let int32 = |name: &str| -> Result<Option<i32>, HttpRefusal> {
        number(name)?
            .map(|v| {
                i32::try_from(v).map_err(|_| refuse(400, format!("{name}={v} is out of range")))
            })
            .transpose()
    };
    let viewer = number("viewer")?.ok_or_else(|| refuse(400, "viewer is required"))?;
    let mut request = RecommendRequest::suggested_users(
        viewer,
        int32("n")?.unwrap_or(RecommendRequest::DEFAULT_N),
    );
    if kind == Method::Chaining {
        request.profile =
            Some(number("profile")?.ok_or_else(|| refuse(400, "profile is required"))?);
    }
    request.deadline_ms = int32("deadline_ms")?;
    if let Some(list) = param("exclude") {
        let list = list.map_err(|()| refuse(400, "exclude is not UTF-8"))?;
        request.exclude = list
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| {
                s.trim()
                    .parse()
                    .map_err(|_| refuse(400, format!("exclude: {s:?} is not an integer")))
            })
            .collect::<Result<_, _>>()?;
    }
    Ok(request)
}

/// The JSON answer and its status.
pub fn json_answer(reply: &Result<Recommendations, RecommendError>) -> (u16, Vec<u8>) {
    match reply {
        Ok(recs) => (
            200,
            serde_json::to_vec(recs).expect("plain data serializes"),
        ),
        Err(e) => {
            let status = match e {
                RecommendError::BadRequest(_) => 400,
                RecommendError::Overloaded(_) => 503,
            };
            (status, error_json(e.message()))
        }
    }
}

/// `{"error": message}`.
pub fn error_json(message: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({ "error": message })).expect("a string serializes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(
        method: &str,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<RecommendRequest, HttpRefusal> {
        let query: HashMap<String, String> = query
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        request_from_http(method, path, |name| query.get(name).cloned().map(Ok))
    }

    #[test]
    fn both_paths_read_their_parameters() {
        let req = parse("GET", SUGGESTED_USERS_PATH, &[("viewer", "42"), ("n", "5")]).unwrap();
        assert_eq!(req, RecommendRequest::suggested_users(42, 5));
        let req = parse(
            "GET",
            CHAINING_PATH,
            &[
                ("viewer", "1"),
                ("profile", "2"),
                ("deadline_ms", "30"),
                ("exclude", "7, 8,"),
            ],
        )
        .unwrap();
        assert_eq!(req.profile, Some(2));
        assert_eq!(req.n, RecommendRequest::DEFAULT_N);
        assert_eq!(req.deadline_ms, Some(30));
        assert_eq!(req.exclude, [7, 8]);
    }

    #[test]
    fn bad_requests_say_what_is_wrong() {
        let status = |r: Result<RecommendRequest, HttpRefusal>| r.unwrap_err().status;
        assert_eq!(status(parse("GET", "/nope", &[])), 404);
        assert_eq!(status(parse("POST", CHAINING_PATH, &[])), 405);
        let err = parse("GET", SUGGESTED_USERS_PATH, &[]).unwrap_err();
        assert_eq!(
            (err.status, err.message.as_str()),
            (400, "viewer is required")
        );
        let err = parse("GET", CHAINING_PATH, &[("viewer", "1")]).unwrap_err();
        assert_eq!(err.message, "profile is required");
        let err = parse("GET", SUGGESTED_USERS_PATH, &[("viewer", "x")]).unwrap_err();
        assert_eq!(err.message, "viewer=\"x\" is not an integer");
        let err = parse(
            "GET",
            SUGGESTED_USERS_PATH,
            &[("viewer", "1"), ("n", "99999999999")],
        )
        .unwrap_err();
        assert_eq!(err.message, "n=99999999999 is out of range");
    }

    #[test]
    fn answers_are_json_with_the_thrift_fields() {
        let (status, body) = json_answer(&Ok(Recommendations {
            items: vec![crate::Recommendation {
                account: 3,
                score: 0.5,
                source: "co_follow".into(),
            }],
            partial: true,
            sources: vec![crate::SourceReport {
                source: "co_follow".into(),
                status: crate::SourceStatus::Timeout,
                latency_us: 10,
                candidates: 0,
            }],
            model_version: "abc".into(),
        }));
        assert_eq!(status, 200);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["items"][0]["source"], "co_follow");
        assert_eq!(v["partial"], true);
        assert_eq!(v["sources"][0]["status"], "timeout");
        assert_eq!(v["model_version"], "abc");
        let (status, body) = json_answer(&Err(RecommendError::Overloaded("queue full".into())));
        assert_eq!((status, body), (503, br#"{"error":"queue full"}"#.to_vec()));
    }
}
