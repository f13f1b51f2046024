// tern graph: the recommender's candidate sources over a follow graph held in memory.
// Served framed, binary or compact protocol (both on one port). Accounts are the graph's own ids.
//
// Sharding: `tern graph --shard K/N` answers for the accounts whose id hashes to shard K (tern_graph::shard_of);
// a call about another account gets WrongShard. Every shard holds the whole topology (as WTF, GraphJet and
// Pixie keep the whole graph on each machine: two-hop walks need random access to it) and serves a share of
// the viewers; several processes can serve the same shard as replicas.

namespace py tern_graph

// One candidate as the Rust and Python code hold it; on the wire a response carries candidates as columns
// (see CandidatesResponse), so this struct is not sent.
struct Candidate {
  1: i64 account,
  // The source's own score: common neighbours (friends_of_friends, co_follow), the share of walk steps that
  // landed on the account (personalized_pagerank), its followers (popular_in_region).
  2: double score,
  // Two-hop sources: paths through distinct middle accounts, and their Adamic-Adar weight.
  3: i32 common,
  4: double adamic_adar,
  // popular_in_region: the account is in the viewer's region (else it is popular overall).
  5: bool in_region,
}

struct CandidatesRequest {
  // The account the candidates are for; calls are routed to its shard.
  1: i64 viewer,
  // co_follow: the profile being viewed (Chaining).
  2: optional i64 profile,
  // Candidates wanted (at most the server's --max-candidates).
  3: i32 limit = 100,
  // Time the caller still waits, from when the call is read; walks stop at it and answer what they have.
  4: optional i32 deadline_ms,
  // Seeds the sampling of long neighbour lists and the walks (the same seed, the same answer).
  5: optional i64 seed,
}

// The candidates, best first, as columns: entry i of every list is candidate i (the fields of Candidate).
// Columns rather than a list<Candidate>: a struct costs a header per field on the wire and a branch per field
// to read, and a call answers hundreds of candidates (reading them was the recommender's largest cost after
// ranking). A column whose values are all the default (0, 0.0, false) may be sent empty: the walks send no
// `common`, only popular_in_region sends `in_region`. Any other length is refused.
struct CandidatesResponse {
  // 1: retired (a list<Candidate>).
  // personalized_pagerank: steps walked, and whether the deadline stopped the walks early.
  2: i64 steps,
  3: bool cut_short,
  4: list<i64> accounts,
  5: list<double> scores,
  6: list<i32> common,
  7: list<double> adamic_adar,
  8: list<bool> in_region,
}

struct GraphInfo {
  1: i64 accounts,
  2: i64 follows,
  3: bool directed,
  4: i32 shard,
  5: i32 shards,
  6: i32 regions,
}

exception BadRequest {
  1: string message,
}

exception WrongShard {
  1: string message,
  2: i32 shard,
  3: i32 shards,
}

exception Overloaded {
  1: string message,
}

service Graph {
  // Whom `account` follows / who follows it, at most `limit`, in id order.
  list<i64> out_neighbours(1: i64 account, 2: i32 limit)
    throws (1: BadRequest bad, 2: WrongShard wrong, 3: Overloaded overloaded),
  list<i64> in_neighbours(1: i64 account, 2: i32 limit)
    throws (1: BadRequest bad, 2: WrongShard wrong, 3: Overloaded overloaded),
  // Accounts followed by those the viewer follows, by common neighbours.
  CandidatesResponse friends_of_friends(1: CandidatesRequest request)
    throws (1: BadRequest bad, 2: WrongShard wrong, 3: Overloaded overloaded),
  // Random walks with restart from the viewer along follows, by visits.
  CandidatesResponse personalized_pagerank(1: CandidatesRequest request)
    throws (1: BadRequest bad, 2: WrongShard wrong, 3: Overloaded overloaded),
  // Chaining: accounts followed by the profile's followers, by how many of them follow each.
  CandidatesResponse co_follow(1: CandidatesRequest request)
    throws (1: BadRequest bad, 2: WrongShard wrong, 3: Overloaded overloaded),
  // The most followed accounts of the viewer's region (a community of the graph), then overall.
  CandidatesResponse popular_in_region(1: CandidatesRequest request)
    throws (1: BadRequest bad, 2: WrongShard wrong, 3: Overloaded overloaded),
  GraphInfo info(),
}
