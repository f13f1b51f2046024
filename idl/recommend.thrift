// tern recommend: Suggested Users and Chaining (seed 000), a fan-out service over tern graph's candidate
// sources and tern cache's features, ranked by a gradient-boosted model trained offline.
// Served framed, binary or compact protocol, on one port (HTTP/JSON on the same port: docs/recommend.md).

namespace py tern_recommend

enum SourceStatus {
  OK = 1,
  // The source did not answer by its budget under the request's deadline.
  TIMEOUT = 2,
  // The source failed (connection refused or lost, an exception, an undecodable reply).
  ERROR = 3,
  // The source was not asked (not used by this call).
  SKIPPED = 4,
  // The source was not asked, to shed load: the service was overloaded and skipped its costliest
  // sources (the answer is partial).
  SHED = 5,
}

struct Recommendation {
  1: i64 account,
  // The model's score (higher is better).
  2: double score,
  // The source that proposed the account first ("friends_of_friends", "personalized_pagerank",
  // "co_follow", "popular_in_region").
  3: string source,
}

struct SourceReport {
  1: string source,
  2: SourceStatus status,
  // Time from the call to its answer (or to the budget's end).
  3: i32 latency_us,
  // Candidates it gave.
  4: i32 candidates,
}

struct SuggestedUsersRequest {
  1: i64 viewer,
  // Accounts wanted (at most the server's --max-results).
  2: i32 n = 20,
  // Time the caller waits, from when the request is read (the server's default when absent).
  3: optional i32 deadline_ms,
  // Accounts never to suggest (besides the viewer and whom the viewer follows).
  4: optional list<i64> exclude,
}

struct ChainingRequest {
  1: i64 viewer,
  // The profile being viewed: suggestions are accounts like it.
  2: i64 profile,
  3: i32 n = 20,
  4: optional i32 deadline_ms,
  5: optional list<i64> exclude,
}

struct Recommendations {
  1: list<Recommendation> items,
  // True exactly when some source or feature fetch missed its deadline or failed, a source was skipped to
  // shed load, or some account's features were not in the cache.
  2: bool partial,
  3: list<SourceReport> sources,
  // The model that ranked the items (a hash of its file).
  4: string model_version,
}

exception BadRequest {
  1: string message,
}

exception Overloaded {
  1: string message,
}

service Recommend {
  Recommendations suggested_users(1: SuggestedUsersRequest request)
    throws (1: BadRequest bad, 2: Overloaded overloaded),
  Recommendations chaining(1: ChainingRequest request)
    throws (1: BadRequest bad, 2: Overloaded overloaded),
}
