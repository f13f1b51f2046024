//! The order of `tern graph`'s replies on one connection: by default each call is answered when it is done
//! and its reply carries its sequence id, so a slow walk does not hold up a neighbour list pipelined after
//! it; `in_order` keeps the order the calls came in. The slow walk comes from the fault injection, which
//! also delays only the share of calls it is told to.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use tern_graph::{Regions, Shard, Synthetic};
use tern_graph_proto::{
    read_reply, write_call, CandidatesRequest, GraphCall, GraphReply, Method, ProtocolKind,
};
use tern_graph_service::{Fault, GraphData, GraphLimits, GraphService};
use tern_runtime::{RunningServer, RuntimeConfig, Server};

fn serve(configure: impl FnOnce(GraphService) -> GraphService) -> RunningServer {
    let graph = Synthetic::with_edges(20_000, 5).generate();
    let regions = Regions::find(&graph, 1, 10, 100);
    let data = GraphData {
        graph,
        regions,
        shard: Shard::WHOLE,
        limits: GraphLimits::default(),
    };
    let cfg = RuntimeConfig {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        io_threads: 1,
        ..RuntimeConfig::default()
    };
    Server::new(cfg, configure(GraphService::new(data)))
        .start()
        .expect("tern graph starts")
}

fn walk_is_slow(delay_ms: u64) -> Fault {
    Fault {
        delay: Duration::from_millis(delay_ms),
        share: 1.0,
        method: Some(Method::PersonalizedPagerank),
    }
}

/// Sends a walk (seqid 1) then a neighbour list (seqid 2) in one write; returns the seqids in the order
/// their replies came, with when each came.
fn walk_then_neighbours(server: &RunningServer) -> Vec<(i32, Duration)> {
    let mut conn = TcpStream::connect(server.local_addr().unwrap()).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut calls = Vec::new();
    let walk = GraphCall::Candidates {
        method: Method::PersonalizedPagerank,
        request: CandidatesRequest {
            viewer: 1,
            profile: None,
            limit: 10,
            deadline_ms: Some(1000),
            seed: Some(1),
        },
    };
    let neighbours = GraphCall::Neighbours {
        method: Method::OutNeighbours,
        account: 1,
        limit: 0,
    };
    write_call(&mut calls, ProtocolKind::Compact, 1, &walk);
    write_call(&mut calls, ProtocolKind::Compact, 2, &neighbours);
    let started = Instant::now();
    conn.write_all(&calls).unwrap();
    let mut replies = Vec::new();
    for _ in 0..2 {
        let mut length = [0u8; 4];
        conn.read_exact(&mut length).unwrap();
        let mut payload = vec![0u8; u32::from_be_bytes(length) as usize];
        conn.read_exact(&mut payload).unwrap();
        let (seqid, reply) = read_reply(&payload).expect("a reply");
        let expected = match seqid {
            1 => matches!(reply, GraphReply::Candidates(_)),
            2 => matches!(reply, GraphReply::Neighbours(_)),
            _ => false,
        };
        assert!(expected, "seqid {seqid} answered with {reply:?}");
        replies.push((seqid, started.elapsed()));
    }
    replies
}

#[test]
fn a_slow_walk_does_not_hold_up_the_call_behind_it() {
    let server = serve(|s| s.with_fault(walk_is_slow(300)));
    let replies = walk_then_neighbours(&server);
    assert_eq!(replies[0].0, 2, "the neighbour list first: {replies:?}");
    assert!(replies[0].1 < Duration::from_millis(250), "{replies:?}");
    assert!(replies[1].1 >= Duration::from_millis(300), "{replies:?}");
    server.shutdown();
    server.join();
}

#[test]
fn in_order_keeps_the_order_the_calls_came_in() {
    let server = serve(|s| s.in_order().with_fault(walk_is_slow(200)));
    let replies = walk_then_neighbours(&server);
    assert_eq!(
        replies.iter().map(|r| r.0).collect::<Vec<_>>(),
        [1, 2],
        "{replies:?}"
    );
    assert!(replies[1].1 >= Duration::from_millis(200), "{replies:?}");
    server.shutdown();
    server.join();
}

#[test]
fn the_fault_injection_delays_the_share_it_is_told() {
    let server = serve(|s| {
        s.with_fault(Fault {
            delay: Duration::from_millis(100),
            share: 0.1,
            method: None,
        })
    });
    let mut conn = TcpStream::connect(server.local_addr().unwrap()).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut slow = 0;
    for seqid in 0..200 {
        let mut call = Vec::new();
        let neighbours = GraphCall::Neighbours {
            method: Method::InNeighbours,
            account: 2,
            limit: 0,
        };
        write_call(&mut call, ProtocolKind::Binary, seqid, &neighbours);
        let started = Instant::now();
        conn.write_all(&call).unwrap();
        let mut length = [0u8; 4];
        conn.read_exact(&mut length).unwrap();
        let mut payload = vec![0u8; u32::from_be_bytes(length) as usize];
        conn.read_exact(&mut payload).unwrap();
        assert_eq!(read_reply(&payload).expect("a reply").0, seqid);
        if started.elapsed() >= Duration::from_millis(100) {
            slow += 1;
        }
    }
    // 10% of 200, spread by a scrambled counter: not exactly 20, but near it.
    assert!((12..=28).contains(&slow), "{slow} of 200 delayed");
    server.shutdown();
    server.join();
}
