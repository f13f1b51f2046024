//! `tern recommend eval`: how well the service recommends, measured on the running services. A seeded 10%
//! of the follows of users with at least 5 leaves the graph; everything is built from the rest (the graph
//! service loads it, the features are computed from it, the model is trained on it with its own inner
//! split); then, for a sample of the users, the running recommender is asked for its top 50 Suggested
//! Users, and each source alone is asked the graph service directly; recall@10/20/50 and NDCG@20 against
//! the held-out follows say which finds them.
//!
//! The processes are this binary's own subcommands (`tern cache`, `tern graph`, `tern recommend serve`),
//! started on free loopback ports and stopped at the end.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rand::seq::IndexedRandom;
use rand::SeedableRng;
use tern_graph::{hold_out, Graph, NodeId};
use tern_graph_proto::{CandidatesRequest, GraphCall, GraphReply, Method};
use tern_recommend_proto::RecommendRequest;
use tern_thrift::ProtocolKind;

/// The cut-offs reported.
const CUTOFFS: [usize; 3] = [10, 20, 50];

/// What `eval` does.
#[derive(Debug, Clone)]
pub struct EvalSpec {
    pub holdout: f64,
    pub min_follows: usize,
    pub users: usize,
    pub seed: u64,
    /// Serve this model instead of training one on the reduced graph.
    pub model: Option<PathBuf>,
    /// Users whose rows train the model.
    pub train_users: usize,
    /// Where the reduced graph, the training rows and the model go.
    pub work_dir: PathBuf,
}

/// The accumulated quality of one ranking.
#[derive(Debug, Clone, Default)]
pub struct Quality {
    recall: [f64; 3],
    ndcg20: f64,
    users: usize,
    /// The blend only: candidates its sources gave, over all users.
    candidates: usize,
}

impl Quality {
    fn add(&mut self, ranked: &[i64], relevant: &[i64]) {
        for (slot, &k) in CUTOFFS.iter().enumerate() {
            let hits = ranked
                .iter()
                .take(k)
                .filter(|a| relevant.contains(a))
                .count();
            self.recall[slot] += hits as f64 / relevant.len() as f64;
        }
        let dcg: f64 = ranked
            .iter()
            .take(20)
            .enumerate()
            .filter(|(_, a)| relevant.contains(a))
            .map(|(i, _)| 1.0 / ((i + 2) as f64).log2())
            .sum();
        let ideal: f64 = (0..relevant.len().min(20))
            .map(|i| 1.0 / ((i + 2) as f64).log2())
            .sum();
        self.ndcg20 += dcg / ideal;
        self.users += 1;
    }

    /// Candidates the sources gave per request (the blend's row; 0 for a source alone).
    pub fn candidates_per_request(&self) -> f64 {
        self.candidates as f64 / self.users.max(1) as f64
    }

    /// recall@10, recall@20, recall@50, NDCG@20, averaged over users.
    pub fn means(&self) -> [f64; 4] {
        let n = self.users.max(1) as f64;
        [
            self.recall[0] / n,
            self.recall[1] / n,
            self.recall[2] / n,
            self.ndcg20 / n,
        ]
    }
}

/// The rankings compared: each source alone, then the blend.
pub const RANKINGS: [&str; 6] = [
    "friends of friends (common neighbours)",
    "Adamic-Adar",
    "personalized PageRank",
    "co-follow",
    "popular in region",
    "tern recommend (ranked blend)",
];

/// The processes of one evaluation, stopped on drop.
struct Processes(Vec<Child>);

impl Drop for Processes {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn free_addr() -> anyhow::Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

fn wait_for(addr: SocketAddr, within: Duration, what: &str) -> anyhow::Result<()> {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if TcpStream::connect(addr).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    anyhow::bail!(
        "{what} did not listen on {addr} within {:.1} s",
        within.as_secs_f64()
    )
}

fn tern(args: &[&str]) -> anyhow::Result<Child> {
    Ok(Command::new(std::env::current_exe()?)
        .args(args)
        .stdout(Stdio::null())
        .spawn()?)
}

/// A blocking framed-Thrift connection for the evaluation's calls.
struct Connection(TcpStream);

impl Connection {
    fn open(addr: SocketAddr) -> anyhow::Result<Connection> {
        let s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        s.set_nodelay(true)?;
        Ok(Connection(s))
    }

    /// Sends one framed message and reads the payload of the framed answer.
    fn exchange(&mut self, message: &[u8]) -> anyhow::Result<Vec<u8>> {
        self.0.write_all(message)?;
        let mut len = [0u8; 4];
        self.0.read_exact(&mut len)?;
        let mut payload = vec![0u8; u32::from_be_bytes(len) as usize];
        self.0.read_exact(&mut payload)?;
        Ok(payload)
    }

    fn candidates(
        &mut self,
        method: Method,
        viewer: i64,
        profile: Option<i64>,
        limit: i32,
    ) -> anyhow::Result<Vec<tern_graph_proto::Candidate>> {
        let call = GraphCall::Candidates {
            method,
            request: CandidatesRequest {
                viewer,
                profile,
                limit,
                deadline_ms: Some(10_000),
                seed: Some(viewer),
            },
        };
        let mut out = Vec::new();
        tern_graph_proto::write_call(&mut out, ProtocolKind::Compact, 0, &call);
        match tern_graph_proto::read_reply(&self.exchange(&out)?)?.1 {
            GraphReply::Candidates(r) => Ok(r.candidates),
            GraphReply::Error(e) => anyhow::bail!("{} for {viewer}: {e}", method.name()),
            _ => anyhow::bail!("{} for {viewer}: the answer of another call", method.name()),
        }
    }

    /// The top `n`, and how many candidates the sources gave (before duplicates were merged).
    fn suggested_users(&mut self, viewer: i64, n: i32) -> anyhow::Result<(Vec<i64>, usize)> {
        let mut request = RecommendRequest::suggested_users(viewer, n);
        request.deadline_ms = Some(10_000);
        let mut out = Vec::new();
        tern_recommend_proto::write_call(&mut out, ProtocolKind::Compact, 0, &request);
        match tern_recommend_proto::read_reply(&self.exchange(&out)?)?.1 {
            Ok(recs) => {
                anyhow::ensure!(
                    !recs.partial,
                    "a partial answer for {viewer}: {} accounts",
                    recs.items.len()
                );
                let candidates = recs
                    .sources
                    .iter()
                    .map(|s| s.candidates.max(0) as usize)
                    .sum();
                Ok((recs.items.iter().map(|i| i.account).collect(), candidates))
            }
            Err(e) => anyhow::bail!("suggested_users for {viewer}: {e}"),
        }
    }
}

/// Writes `graph` as an edge list with its own ids (both directions of undirected edges, read back with
/// `--undirected` they are one edge again).
fn write_edge_list(graph: &Graph, path: &Path) -> anyhow::Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(
        out,
        "# tern recommend eval: the graph without its held-out follows"
    )?;
    for v in 0..graph.nodes() as NodeId {
        for &w in graph.out_neighbours(v) {
            if graph.is_directed() || v <= w {
                writeln!(out, "{} {}", graph.id(v), graph.id(w))?;
            }
        }
    }
    out.flush()?;
    Ok(())
}

/// Runs the evaluation on `graph`; returns each ranking's quality, in [`RANKINGS`] order.
pub fn evaluate(
    graph: &Graph,
    spec: &EvalSpec,
    region_args: &[String],
) -> anyhow::Result<Vec<Quality>> {
    std::fs::create_dir_all(&spec.work_dir)?;
    let split = hold_out(graph, spec.holdout, spec.min_follows, spec.seed);
    let reduced = spec.work_dir.join("reduced.edges");
    write_edge_list(&split.train, &reduced)?;
    let reduced_arg = reduced.to_string_lossy().into_owned();
    let mut graph_args: Vec<String> = vec!["--graph".into(), reduced_arg];
    if !graph.is_directed() {
        graph_args.push("--undirected".into());
    }
    graph_args.extend(region_args.iter().cloned());
    let model = match &spec.model {
        Some(path) => path.clone(),
        None => train_model(&graph_args, spec.train_users, &spec.work_dir)?,
    };
    let (cache, graph_addr, recommend) = (free_addr()?, free_addr()?, free_addr()?);
    let mut processes = Processes(Vec::new());
    processes.0.push(tern(&[
        "cache",
        "-p",
        &cache.port().to_string(),
        "-l",
        "127.0.0.1",
        "-U",
        "0",
    ])?);
    let mut serve_graph: Vec<String> =
        vec!["graph".into(), "--listen".into(), graph_addr.to_string()];
    serve_graph.extend(graph_args.iter().cloned());
    processes.0.push(tern(
        &serve_graph.iter().map(String::as_str).collect::<Vec<_>>(),
    )?);
    wait_for(cache, Duration::from_secs(10), "tern cache")?;
    wait_for(graph_addr, Duration::from_secs(120), "tern graph")?;
    let mut prepare: Vec<String> = vec![
        "recommend".into(),
        "prepare".into(),
        "--cache".into(),
        cache.to_string(),
    ];
    prepare.extend(graph_args.iter().cloned());
    let status = Command::new(std::env::current_exe()?)
        .args(&prepare)
        .stdout(Stdio::null())
        .status()?;
    anyhow::ensure!(status.success(), "tern recommend prepare failed");
    let model_arg = model.to_string_lossy().into_owned();
    processes.0.push(tern(&[
        "recommend",
        "serve",
        "--listen",
        &recommend.to_string(),
        "--graph-shard",
        &graph_addr.to_string(),
        "--cache",
        &cache.to_string(),
        "--model",
        &model_arg,
        "--deadline-ms",
        "10000",
        "--source-budget-ms",
        "9000",
    ])?);
    wait_for(recommend, Duration::from_secs(30), "tern recommend")?;
    let mut users: Vec<NodeId> = split.users().collect();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(spec.seed);
    users = users
        .choose_multiple(&mut rng, spec.users.min(users.len()))
        .copied()
        .collect();
    users.sort_unstable();
    let mut to_graph = Connection::open(graph_addr)?;
    let mut to_recommend = Connection::open(recommend)?;
    let mut quality = vec![Quality::default(); RANKINGS.len()];
    for &user in &users {
        let viewer = graph.id(user) as i64;
        let relevant: Vec<i64> = split.held[user as usize]
            .iter()
            .map(|&w| graph.id(w) as i64)
            .collect();
        let top = |mut c: Vec<tern_graph_proto::Candidate>,
                   key: fn(&tern_graph_proto::Candidate) -> f64| {
            c.sort_by(|a, b| key(b).total_cmp(&key(a)).then(a.account.cmp(&b.account)));
            c.iter().take(50).map(|c| c.account).collect::<Vec<i64>>()
        };
        let fof = to_graph.candidates(Method::FriendsOfFriends, viewer, None, 50)?;
        quality[0].add(&top(fof.clone(), |c| f64::from(c.common)), &relevant);
        quality[1].add(&top(fof, |c| c.adamic_adar), &relevant);
        let walks = to_graph.candidates(Method::PersonalizedPagerank, viewer, None, 50)?;
        quality[2].add(&top(walks, |c| c.score), &relevant);
        let cofollow = to_graph.candidates(Method::CoFollow, viewer, Some(viewer), 50)?;
        quality[3].add(&top(cofollow, |c| c.score), &relevant);
        let popular = to_graph.candidates(Method::PopularInRegion, viewer, None, 50)?;
        quality[4].add(
            &popular.iter().map(|c| c.account).collect::<Vec<_>>(),
            &relevant,
        );
        let (blend, candidates) = to_recommend.suggested_users(viewer, 50)?;
        quality[5].add(&blend, &relevant);
        quality[5].candidates += candidates;
    }
    Ok(quality)
}

/// Writes the training rows of the reduced graph (with an inner split of its own) and trains the model with
/// scripts/train_model.py, ranking each request's candidates (LambdaRank: measured better than a binary
/// classifier on recall@20 on both real graphs, docs/recommend.md); returns the model's path.
fn train_model(graph_args: &[String], users: usize, work_dir: &Path) -> anyhow::Result<PathBuf> {
    let rows = work_dir.join("train.csv");
    let model = work_dir.join("model.txt");
    let mut args: Vec<String> = vec![
        "recommend".into(),
        "train-data".into(),
        "--users".into(),
        users.to_string(),
        "--out".into(),
        rows.to_string_lossy().into_owned(),
    ];
    args.extend(graph_args.iter().cloned());
    let status = Command::new(std::env::current_exe()?)
        .args(&args)
        .status()?;
    anyhow::ensure!(status.success(), "tern recommend train-data failed");
    let script = std::env::var_os("TERN_TRAIN_SCRIPT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("scripts/train_model.py"));
    let status = Command::new("python3")
        .arg(&script)
        .arg("--train")
        .arg(&rows)
        .arg("--out")
        .arg(&model)
        .args(["--objective", "lambdarank"])
        .status()
        .map_err(|e| anyhow::anyhow!("running python3 {}: {e}", script.display()))?;
    anyhow::ensure!(status.success(), "{} failed", script.display());
    Ok(model)
}
