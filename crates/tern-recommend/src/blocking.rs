//! Seed 000's first design, kept as `tern bench recommend`'s baseline (`--execution blocking`): a fixed pool
//! of workers, each taking a whole request; the request's outbound calls run on threads of their own, with
//! blocking sockets, and the worker joins them before it ranks. The steps are the service's own
//! (`request.rs`); only the waiting differs: a worker is held for every millisecond a source takes, so the
//! pool, not the CPU, bounds the rate.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tern_cache_client::{results_by_key, KeyResult, Node, Request, Ring, TextCodec};
use tern_graph_proto::{read_reply, write_call, GraphCall, ProtocolKind};
use tern_model::Model;
use tern_recommend_proto::{RecommendError, RecommendRequest, Recommendations};
use tern_runtime::{BackendRole, CallError, ClientCodec, Reachability};

use crate::config::RecommendConfig;
use crate::fanout::Called;
use crate::request::Plan;

/// Idle connections to one server, taken by a call and given back after a whole reply.
struct Connections {
    addr: SocketAddr,
    idle: Mutex<Vec<TcpStream>>,
    /// Shared with every other caller of `addr`: one warning when it goes, one line when it is back.
    reachability: Arc<Reachability>,
}

impl Connections {
    fn new(addr: SocketAddr, role: BackendRole) -> Self {
        Connections {
            addr,
            idle: Mutex::new(Vec::new()),
            reachability: Reachability::of(addr, role),
        }
    }

    /// Sends `request` and reads one reply with `read` until `deadline`. A connection is given back only
    /// after a whole reply (one that timed out may still get its reply later, out of step).
    fn call<T>(
        &self,
        request: &[u8],
        deadline: Instant,
        read: impl FnOnce(&mut TcpStream) -> std::io::Result<T>,
    ) -> Result<T, CallError> {
        if Instant::now() >= deadline {
            return Err(CallError::Timeout);
        }
        let taken = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut conn = match taken {
            Some(conn) => conn,
            None => {
                let attempted = Instant::now();
                let left = deadline.saturating_duration_since(attempted);
                let conn =
                    TcpStream::connect_timeout(&self.addr, left.max(Duration::from_millis(1)))
                        .map_err(|e| {
                            // A timeout is the request's deadline, not a sign the server is out.
                            if e.kind() != std::io::ErrorKind::TimedOut {
                                self.reachability.failed(attempted, &e);
                            }
                            CallError::Connection(e.to_string())
                        })?;
                self.reachability.reached();
                let _ = conn.set_nodelay(true);
                conn
            }
        };
        // Not zero, which would mean no timeout at all: a connection may have taken the rest.
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        let failed = |e: std::io::Error| match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => CallError::Timeout,
            _ => CallError::Connection(e.to_string()),
        };
        conn.set_read_timeout(Some(left)).map_err(failed)?;
        conn.write_all(request).map_err(failed)?;
        let reply = read(&mut conn).map_err(failed)?;
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(conn);
        Ok(reply)
    }
}

/// The graph shards' replicas and the cache nodes, shared by every worker.
pub struct BlockingBackends {
    shards: Vec<Vec<Connections>>,
    turn: AtomicUsize,
    ring: Ring,
    nodes: Vec<Connections>,
}

impl BlockingBackends {
    pub fn new(config: &RecommendConfig) -> Self {
        let ring_nodes: Vec<Node> = config
            .cache
            .iter()
            .map(|&addr| Node::from_addr(addr, 1))
            .collect();
        BlockingBackends {
            shards: config
                .graph
                .iter()
                .map(|replicas| {
                    replicas
                        .iter()
                        .map(|&a| Connections::new(a, crate::fanout::GRAPH_ROLE))
                        .collect()
                })
                .collect(),
            turn: AtomicUsize::new(0),
            ring: Ring::new(&ring_nodes, config.cache_hash),
            nodes: config
                .cache
                .iter()
                .map(|&a| Connections::new(a, crate::fanout::FEATURES_ROLE))
                .collect(),
        }
    }

    /// One graph call to a replica of the viewer's shard, in turn.
    fn call_graph(&self, viewer: i64, call: &GraphCall, deadline: Instant) -> Called {
        let started = Instant::now();
        let shard = tern_graph::shard_of(viewer as u64, self.shards.len() as u32) as usize;
        let replicas = &self.shards[shard];
        let replica = &replicas[self.turn.fetch_add(1, Ordering::Relaxed) % replicas.len()];
        let mut frame = Vec::new();
        write_call(&mut frame, ProtocolKind::Compact, 0, call);
        let result = replica.call(&frame, deadline, |conn| {
            let mut length = [0u8; 4];
            conn.read_exact(&mut length)?;
            let mut payload = vec![0u8; u32::from_be_bytes(length) as usize];
            conn.read_exact(&mut payload)?;
            Ok(read_reply(&payload).map(|(_, reply)| reply))
        });
        Called {
            latency: started.elapsed(),
            result,
        }
    }

    /// The keys' items, one `get` per node, each node's on a thread of its own.
    fn get_many(&self, keys: &[&[u8]], deadline: Instant) -> Vec<KeyResult> {
        let mut per_node: Vec<Vec<usize>> = vec![Vec::new(); self.nodes.len()];
        for (i, key) in keys.iter().enumerate() {
            per_node[self.ring.node_for(key)].push(i);
        }
        let mut results: Vec<KeyResult> = (0..keys.len()).map(|_| Ok(None)).collect();
        let answers: Vec<(Vec<usize>, Vec<KeyResult>)> = std::thread::scope(|scope| {
            let calls: Vec<_> = per_node
                .into_iter()
                .enumerate()
                .filter(|(_, wanted)| !wanted.is_empty())
                .map(|(node, wanted)| {
                    scope.spawn(move || {
                        let asked: Vec<Vec<u8>> =
                            wanted.iter().map(|&i| keys[i].to_vec()).collect();
                        let request = Request::Get { keys: asked };
                        let codec = TextCodec::default();
                        let mut bytes = Vec::new();
                        codec.encode(&request, 0, &mut bytes);
                        let answer = self.nodes[node]
                            .call(&bytes, deadline, |conn| read_until_whole(conn, &codec));
                        let Request::Get { keys: asked } = request else {
                            unreachable!("a get")
                        };
                        let answer =
                            answer.and_then(|decoded| decoded.map_err(CallError::Protocol));
                        (wanted, results_by_key(&asked, answer))
                    })
                })
                .collect();
            calls
                .into_iter()
                .map(|call| call.join().expect("a cache call does not panic"))
                .collect()
        });
        for (wanted, answer) in answers {
            for (i, result) in wanted.into_iter().zip(answer) {
                results[i] = result;
            }
        }
        results
    }
}

/// Reads from `conn` until `codec` has one whole reply.
fn read_until_whole(
    conn: &mut TcpStream,
    codec: &TextCodec,
) -> std::io::Result<Result<tern_cache_client::Response, String>> {
    let mut input = Vec::with_capacity(16 << 10);
    let mut chunk = [0u8; 16 << 10];
    loop {
        let n = conn.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        input.extend_from_slice(&chunk[..n]);
        match codec.decode(&input) {
            Ok(Some(decoded)) => return Ok(Ok(decoded.reply)),
            Ok(None) => {}
            Err(e) => return Ok(Err(e)),
        }
    }
}

/// One request, start to answer, on the calling worker.
pub fn recommend_blocking(
    backends: &BlockingBackends,
    config: &RecommendConfig,
    model: &Model,
    request: RecommendRequest,
    received: Instant,
    deadline: Instant,
) -> Result<Recommendations, RecommendError> {
    let plan = Plan::new(config, &request, &[], received, deadline);
    let calls = plan.calls(config);
    let answers: Vec<Called> = std::thread::scope(|scope| {
        let running: Vec<_> = calls
            .iter()
            .map(|call| scope.spawn(|| backends.call_graph(plan.viewer, call, plan.source_until)))
            .collect();
        running
            .into_iter()
            .map(|call| call.join().expect("a graph call does not panic"))
            .collect()
    });
    let gathered = plan.gather(config, answers)?;
    let keys = gathered.feature_keys();
    let fetched = backends.get_many(&keys.keys(), plan.gather_until);
    let ranking = gathered.ranking(fetched, request, config);
    Ok(ranking.run(model).answer(model.version().to_owned()))
}
