//! tern recommend as it grows past one machine, on 127.0.0.1: the graph in 2 shards of 2 replicas
//! (`tern graph --shard K/N`), the features on 2 tern cache nodes placed by ketama, and 2 stateless
//! recommenders behind HAProxy in TCP mode. Its answers equal a single-process stack's for the same graph
//! and model; a dead replica costs nothing (its calls fail over), a dead cache node costs its features (the
//! answers say `partial`), and no request waits past its deadline either way.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tern_graph::{shard_of, NodeId, Synthetic};
use tern_testkit::{free_port, have, wait_for_port, ChildGuard};

mod common;
use common::{addr, cache, counter, graph, prepare, start, EDGES};

/// Every request's deadline: generous, so that a debug build on a slow 2-core machine never misses it
/// while the cluster is whole, and a request that waited on a dead process would show.
const DEADLINE_MS: u64 = 2000;
/// What a request may take past its deadline on the client's side (HAProxy's hop, the connection).
const MARGIN: Duration = Duration::from_millis(500);
const SHARDS: u32 = 2;
const REPLICAS: usize = 2;

fn await_port(port: u16, what: &str) {
    // Generous: five graph processes generate their graph at once on two cores.
    assert!(
        wait_for_port(addr(port), Duration::from_secs(60)),
        "{what} on port {port} did not start"
    );
}

/// A `tern recommend serve` on `port` with one `--graph-shard` per shard (its replicas comma-separated)
/// and every cache node; it and the reference run with the same flags.
fn recommender(port: u16, admin: u16, shards: &[String], caches: &[String]) -> ChildGuard {
    let listen = addr(port).to_string();
    let admin = addr(admin).to_string();
    let deadline = DEADLINE_MS.to_string();
    let mut args = vec![
        "recommend",
        "serve",
        "--listen",
        &listen,
        "--admin",
        &admin,
        "--io-threads",
        "1",
        "--cpu-workers",
        "1",
        "--deadline-ms",
        &deadline,
        "--source-budget-ms",
        "1500",
        // Requests come one at a time; a debug build's slow ranking must not read as overload and
        // skip sources, which would make the two stacks' answers differ for a reason not tested here.
        "--degrade-after-ms",
        "0",
        "--shed-after-ms",
        "0",
    ];
    for shard in shards {
        args.extend(["--graph-shard", shard.as_str()]);
    }
    for cache in caches {
        args.extend(["--cache", cache.as_str()]);
    }
    start(&args)
}

/// One cache, one unsharded graph, one recommender: the answers the cluster must give.
struct Reference {
    _cache: ChildGuard,
    _graph: ChildGuard,
    _recommend: ChildGuard,
    port: u16,
}

/// The cluster; each part stopped on drop, and any one of them earlier to see what the rest do.
struct Cluster {
    /// Declared first, so stopped first: no health check sees the recommenders go.
    _haproxy: ChildGuard,
    /// The cache nodes, in the order the recommenders were given them.
    caches: Vec<Option<ChildGuard>>,
    /// Per shard, its replicas.
    graphs: Vec<Vec<Option<ChildGuard>>>,
    _recommenders: Vec<ChildGuard>,
    admins: Vec<u16>,
    /// HAProxy's port: the cluster's one address.
    port: u16,
}

/// Starts both stacks, every process at once (the graphs take the longest to come up).
fn start_both(haproxy_program: &str) -> (Reference, Cluster) {
    let (ref_cache, ref_cache_addr) = cache();
    let (ref_graph, ref_graph_addr) = graph(&[]);
    let (caches, cache_addrs): (Vec<_>, Vec<_>) = (0..2).map(|_| cache()).unzip();
    let mut graphs = Vec::new();
    let mut shard_flags = Vec::new();
    for shard in 0..SHARDS {
        let spec = format!("{shard}/{SHARDS}");
        let (replicas, listens): (Vec<_>, Vec<_>) =
            (0..REPLICAS).map(|_| graph(&["--shard", &spec])).unzip();
        graphs.push(replicas.into_iter().map(Some).collect::<Vec<_>>());
        shard_flags.push(listens.join(","));
    }
    let port_of = |a: &str| a.parse::<SocketAddr>().unwrap().port();
    for cache in std::iter::once(&ref_cache_addr).chain(&cache_addrs) {
        await_port(port_of(cache), "tern cache");
    }
    prepare(std::slice::from_ref(&ref_cache_addr));
    prepare(&cache_addrs);
    let graph_listens = shard_flags.iter().flat_map(|s| s.split(','));
    for listen in std::iter::once(ref_graph_addr.as_str()).chain(graph_listens) {
        await_port(port_of(listen), "tern graph");
    }
    let ref_port = free_port();
    let ref_recommend = recommender(ref_port, free_port(), &[ref_graph_addr], &[ref_cache_addr]);
    let (ports, admins): (Vec<u16>, Vec<u16>) = (0..2).map(|_| (free_port(), free_port())).unzip();
    let recommenders: Vec<ChildGuard> = ports
        .iter()
        .zip(&admins)
        .map(|(&port, &admin)| recommender(port, admin, &shard_flags, &cache_addrs))
        .collect();
    for &port in std::iter::once(&ref_port).chain(&ports) {
        await_port(port, "tern recommend");
    }
    let (haproxy, port) = start_haproxy(haproxy_program, &ports);
    (
        Reference {
            _cache: ref_cache,
            _graph: ref_graph,
            _recommend: ref_recommend,
            port: ref_port,
        },
        Cluster {
            _haproxy: haproxy,
            caches: caches.into_iter().map(Some).collect(),
            graphs,
            _recommenders: recommenders,
            admins,
            port,
        },
    )
}

/// HAProxy in TCP mode, round robin over `backends`, in the foreground, from a config file of its own.
fn start_haproxy(program: &str, backends: &[u16]) -> (ChildGuard, u16) {
    let port = free_port();
    let mut config = vec![
        "listen recommend".to_owned(),
        format!("    bind 127.0.0.1:{port}"),
        "    mode tcp".to_owned(),
        "    balance roundrobin".to_owned(),
        "    timeout connect 2s".to_owned(),
        "    timeout client 30s".to_owned(),
        "    timeout server 30s".to_owned(),
    ];
    for (i, backend) in backends.iter().enumerate() {
        config.push(format!("    server recommend{i} 127.0.0.1:{backend} check"));
    }
    let dir = tern_testkit::files::temp_dir("recommend-cluster");
    let file = dir.join("haproxy.cfg");
    std::fs::write(&file, config.join("\n") + "\n").unwrap();
    let checked = Command::new(program)
        .arg("-c")
        .arg("-f")
        .arg(&file)
        .output()
        .expect("haproxy -c runs");
    assert!(
        checked.status.success(),
        "haproxy refuses {}: {}",
        file.display(),
        String::from_utf8_lossy(&checked.stderr)
    );
    // -db: stay in the foreground, so that the guard's kill stops it.
    let child = ChildGuard(
        Command::new(program)
            .arg("-db")
            .arg("-f")
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("haproxy starts"),
    );
    await_port(port, "haproxy");
    // Read once at start.
    let _ = std::fs::remove_dir_all(dir);
    (child, port)
}

/// Where Debian installs HAProxy: /usr/sbin, which a user's PATH may lack.
const HAPROXY_DEBIAN: &str = "/usr/sbin/haproxy";

/// HAProxy's program, if it is here and runs (`haproxy -v`).
fn haproxy_program() -> Option<&'static str> {
    let program = if std::path::Path::new(HAPROXY_DEBIAN).exists() {
        HAPROXY_DEBIAN
    } else if have("haproxy") {
        "haproxy"
    } else {
        return None;
    };
    let version = Command::new(program).arg("-v").output();
    assert!(
        version.is_ok_and(|v| v.status.success()),
        "{program} -v fails"
    );
    Some(program)
}

/// One HTTP/1.1 GET with `Connection: close` (so that each request is a new connection, which HAProxy
/// hands to the next recommender in turn): the status, the JSON body, and the wall time it took.
fn http_get(port: u16, target: &str) -> (u16, Value, Duration) {
    let started = Instant::now();
    let (status, body) = common::http_get(port, target);
    (status, body, started.elapsed())
}

/// A request of the test: Suggested Users, or Chaining on a profile.
fn target(viewer: NodeId, profile: Option<NodeId>) -> String {
    match profile {
        None => format!("/v1/suggested-users?viewer={viewer}&n=10"),
        Some(p) => format!("/v1/chaining?viewer={viewer}&profile={p}&n=10"),
    }
}

/// The requests of a phase: `count` viewers who follow someone, from `shards`, spread over the ids and
/// none of another phase's (a Chaining answer is kept a while, and a kept one would call nobody); every
/// other one also views a well-followed profile it does not follow.
fn requests(
    g: &tern_graph::Graph,
    skip: usize,
    count: usize,
    shards: &[u32],
) -> Vec<(NodeId, Option<NodeId>)> {
    let nodes = g.nodes() as NodeId;
    let profiles: Vec<NodeId> = (0..nodes)
        .filter(|&p| g.in_neighbours(p).len() > 20)
        .collect();
    let stride = 7;
    let viewers: Vec<NodeId> = (0..nodes)
        .step_by(stride)
        .skip(skip)
        .filter(|&v| !g.out_neighbours(v).is_empty())
        .filter(|&v| shards.contains(&shard_of(u64::from(v), SHARDS)))
        .take(count)
        .collect();
    assert_eq!(viewers.len(), count, "enough viewers in the graph");
    let mut out = Vec::new();
    for (i, &viewer) in viewers.iter().enumerate() {
        out.push((viewer, None));
        if i % 2 == 0 {
            // A different profile for each viewer, where one fits.
            let profile = profiles
                .iter()
                .cycle()
                .skip(i * 3)
                .take(profiles.len())
                .copied()
                .find(|&p| p != viewer && !g.has_arc(viewer, p))
                .expect("a profile");
            out.push((viewer, Some(profile)));
        }
    }
    out
}

/// Asserts that `got` is `want`: the same accounts in the same order with the same sources, scores within
/// 1e-9, each source's status and candidate count, `partial` and the model's version.
fn assert_same(target: &str, got: &Value, want: &Value) {
    let items = |v: &Value| v["items"].as_array().cloned().unwrap_or_default();
    let (got_items, want_items) = (items(got), items(want));
    assert!(!want_items.is_empty(), "{target}: reference {want}");
    assert_eq!(
        got_items.len(),
        want_items.len(),
        "{target}:\n cluster {got}\n reference {want}"
    );
    for (g, w) in got_items.iter().zip(&want_items) {
        assert_eq!(
            (&g["account"], &g["source"]),
            (&w["account"], &w["source"]),
            "{target}:\n cluster {got}\n reference {want}"
        );
        let (gs, ws) = (g["score"].as_f64().unwrap(), w["score"].as_f64().unwrap());
        assert!((gs - ws).abs() <= 1e-9, "{target}: score {gs} against {ws}");
    }
    let sources = |v: &Value| -> Vec<(Value, Value, Value)> {
        v["sources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["source"].clone(),
                    s["status"].clone(),
                    s["candidates"].clone(),
                )
            })
            .collect()
    };
    assert_eq!(sources(got), sources(want), "{target}");
    assert_eq!(got["partial"], false, "{target}: {got}");
    assert_eq!(want["partial"], false, "{target}: {want}");
    assert_eq!(got["model_version"], want["model_version"], "{target}");
}

/// Asks the cluster `requests`, each answered 200 and by its deadline; the answers.
fn ask_on_time(port: u16, requests: &[(NodeId, Option<NodeId>)]) -> Vec<(String, Value)> {
    requests
        .iter()
        .map(|&(viewer, profile)| {
            let target = target(viewer, profile);
            let (status, body, took) = http_get(port, &target);
            assert_eq!(status, 200, "{target}: {body}");
            assert!(
                took < Duration::from_millis(DEADLINE_MS) + MARGIN,
                "{target} took {took:?}"
            );
            (target, body)
        })
        .collect()
}

/// The reference's answers to `requests`.
fn reference_answers(port: u16, requests: &[(NodeId, Option<NodeId>)]) -> Vec<Value> {
    requests
        .iter()
        .map(|&(viewer, profile)| {
            let target = target(viewer, profile);
            let (status, body, _) = http_get(port, &target);
            assert_eq!(status, 200, "reference {target}: {body}");
            body
        })
        .collect()
}

/// A counter summed over the cluster's recommenders.
fn counter_sum(admins: &[u16], sample: &str) -> f64 {
    admins.iter().map(|&admin| counter(admin, sample)).sum()
}

#[test]
fn two_shards_two_caches_two_recommenders_behind_haproxy() {
    let Some(haproxy) = haproxy_program() else {
        return;
    };
    let began = Instant::now();
    let g = Synthetic::with_edges(EDGES.parse().unwrap(), 1).generate();
    let whole = requests(&g, 0, 40, &[0, 1]);
    // After a replica of shard 0 dies: viewers of shard 0, whose calls half go to it.
    let replica_down = requests(&g, 200, 30, &[0]);
    let cache_down = requests(&g, 400, 30, &[0, 1]);
    for shard in 0..SHARDS {
        assert!(whole
            .iter()
            .any(|&(v, _)| shard_of(u64::from(v), SHARDS) == shard));
    }
    let (reference, mut cluster) = start_both(haproxy);
    let started = began.elapsed();

    // The cluster answers as one process does.
    let want = reference_answers(reference.port, &whole);
    let want_replica_down = reference_answers(reference.port, &replica_down);
    for ((target, got), want) in ask_on_time(cluster.port, &whole).iter().zip(&want) {
        assert_same(target, got, want);
    }
    // HAProxy gave each recommender its turn (a connection per request, round robin).
    for &admin in &cluster.admins {
        let answered = counter(admin, "tern_requests_total");
        assert!(
            answered >= (whole.len() / 2 - 1) as f64,
            "a recommender answered {answered} of {}",
            whole.len()
        );
    }

    // A replica of shard 0 dies: its calls fail over to the other, and nothing is lost.
    let failover = "tern_recommend_graph_calls_total{kind=\"failover\"}";
    let failed_over = counter_sum(&cluster.admins, failover);
    cluster.graphs[0][0] = None;
    let answers = ask_on_time(cluster.port, &replica_down);
    for ((target, got), want) in answers.iter().zip(&want_replica_down) {
        assert_same(target, got, want);
    }
    assert!(
        counter_sum(&cluster.admins, failover) > failed_over,
        "no call was sent to the dead replica"
    );

    // A cache node dies: its features are lost, the answers still come, on time and ranked on what
    // remains, and say `partial`. Each request needs the features of at least 300 candidates (the
    // --min-candidates pool) spread by ketama over both nodes, so every answer lost some.
    cluster.caches[0] = None;
    let answers = ask_on_time(cluster.port, &cache_down);
    for (target, got) in &answers {
        assert_eq!(got["partial"], true, "{target}: {got}");
        assert!(
            !got["items"].as_array().unwrap().is_empty(),
            "{target}: {got}"
        );
        // The sources all answered: what the answer lacks is the features.
        assert!(
            got["sources"]
                .as_array()
                .unwrap()
                .iter()
                .all(|s| s["status"] == "ok" || s["status"] == "skipped"),
            "{target}: {got}"
        );
    }
    eprintln!(
        "started in {started:?}; {} requests to each stack and {} more to the cluster in {:?}",
        whole.len() + replica_down.len(),
        cache_down.len(),
        began.elapsed() - started
    );
    drop(cluster);
    drop(reference);
}
