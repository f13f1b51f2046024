//! `tern graph` called by Apache Thrift's own Python client, generated from `idl/graph.thrift`: every method
//! in both protocols gives what the graph says, declared exceptions arrive as the IDL declares them, and
//! unknown methods, unreadable and oversized frames get a `TApplicationException`.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tern_graph::{Regions, Shard, Synthetic};
use tern_graph_proto::{CandidatesRequest, GraphReply, Method};
use tern_graph_service::{GraphData, GraphLimits, GraphService};
use tern_runtime::{RunningServer, RuntimeConfig, Server};
use tern_testkit::thrift::{generate_python, idl};

fn serve(shard: Shard) -> (RunningServer, Arc<GraphData>) {
    let graph = Synthetic::with_edges(40_000, 5).generate();
    let regions = Regions::find(&graph, 1, 10, 100);
    let data = GraphData {
        graph,
        regions,
        shard,
        limits: GraphLimits {
            max_frame_bytes: 4096,
            ..GraphLimits::default()
        },
    };
    let cfg = RuntimeConfig {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        io_threads: 1,
        ..RuntimeConfig::default()
    };
    let server = Server::new(cfg, GraphService::new(data));
    let data = Arc::clone(server.service().data());
    (server.start().expect("tern graph starts"), data)
}

/// The Python client: calls every method with each protocol and prints one JSON document.
const CLIENT: &str = r#"
import json, sys
from thrift.transport import TSocket, TTransport
from thrift.protocol import TBinaryProtocol, TCompactProtocol
from thrift.Thrift import TApplicationException, TMessageType
from tern_graph import Graph
from tern_graph.ttypes import CandidatesRequest, BadRequest, WrongShard

port, viewer, profile, unknown = (int(a) for a in sys.argv[1:5])
result = {}
for name, factory in (("binary", TBinaryProtocol.TBinaryProtocol), ("compact", TCompactProtocol.TCompactProtocol)):
    transport = TTransport.TFramedTransport(TSocket.TSocket("127.0.0.1", port))
    protocol = factory(transport)
    client = Graph.Client(protocol)
    transport.open()
    got = {}
    info = client.info()
    got["info"] = [info.accounts, info.follows, info.directed, info.shard, info.shards, info.regions]
    got["out"] = client.out_neighbours(viewer, 0)
    got["in"] = client.in_neighbours(viewer, 5)
    def pairs(response):
        # Candidates come as columns; a column of defaults may come empty.
        n = len(response.accounts)
        def column(values, default):
            return values if values else [default] * n
        columns = (response.accounts, column(response.scores, 0.0), column(response.common, 0),
                   column(response.adamic_adar, 0.0), column(response.in_region, False))
        return [list(c) for c in zip(*columns)]
    got["fof"] = pairs(client.friends_of_friends(CandidatesRequest(viewer=viewer, limit=20, seed=3)))
    got["cofollow"] = pairs(client.co_follow(CandidatesRequest(viewer=viewer, profile=profile, limit=20, seed=3)))
    walk = client.personalized_pagerank(CandidatesRequest(viewer=viewer, limit=20, seed=3, deadline_ms=1000))
    got["ppr"] = pairs(walk) + [walk.steps, walk.cut_short]
    got["popular"] = pairs(client.popular_in_region(CandidatesRequest(viewer=viewer, limit=20)))
    try:
        client.out_neighbours(unknown, 0)
        got["unknown"] = "no exception"
    except BadRequest as e:
        got["unknown"] = e.message
    try:
        client.friends_of_friends(CandidatesRequest(viewer=viewer, limit=1000000))
        got["too_many"] = "no exception"
    except BadRequest as e:
        got["too_many"] = e.message
    # A method the IDL does not have, written by hand.
    protocol.writeMessageBegin("no_such_method", TMessageType.CALL, 41)
    protocol.writeStructBegin("args")
    protocol.writeFieldStop()
    protocol.writeStructEnd()
    protocol.writeMessageEnd()
    transport.flush()
    (method, kind, seqid) = protocol.readMessageBegin()
    error = TApplicationException()
    error.read(protocol)
    protocol.readMessageEnd()
    got["no_such_method"] = [method, kind == TMessageType.EXCEPTION, seqid, error.type, error.message]
    # The connection still serves.
    got["after"] = client.info().accounts
    transport.close()
    result[name] = got
print(json.dumps(result))
"#;

fn candidates(data: &GraphData, method: Method, request: CandidatesRequest) -> Vec<(i64, f64)> {
    match data.candidates(method, &request, None) {
        GraphReply::Candidates(r) => r.candidates.iter().map(|c| (c.account, c.score)).collect(),
        other => panic!("{method:?}: {other:?}"),
    }
}

/// The same accounts in the same order, with the same scores (to the last bits JSON's decimal text keeps).
fn same(got: &[(i64, f64)], want: &[(i64, f64)], what: &str, protocol: &str) {
    let accounts = |list: &[(i64, f64)]| list.iter().map(|c| c.0).collect::<Vec<_>>();
    assert_eq!(accounts(got), accounts(want), "{protocol}: {what}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g.1 - w.1).abs() <= 1e-12 * w.1.abs().max(1.0),
            "{protocol}: {what}: {g:?} vs {w:?}"
        );
    }
}

#[test]
fn apache_thrift_python_client_calls_every_method_in_both_protocols() {
    let Some(python) = generate_python(&idl("graph.thrift")) else {
        return;
    };
    let (server, data) = serve(Shard::WHOLE);
    let port = server.local_addr().unwrap().port();
    // A viewer with a neighbourhood, and a profile it does not follow.
    let viewer = (0..data.graph.nodes() as u32)
        .find(|&v| (5..50).contains(&data.graph.out_neighbours(v).len()))
        .unwrap();
    let profile = (0..data.graph.nodes() as u32)
        .find(|&p| {
            p != viewer && data.graph.in_neighbours(p).len() > 10 && !data.graph.has_arc(viewer, p)
        })
        .unwrap();
    let unknown = data.graph.nodes() + 10;
    let output = python.run(
        CLIENT,
        &[
            &port.to_string(),
            &viewer.to_string(),
            &profile.to_string(),
            &unknown.to_string(),
        ],
    );
    let got: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("JSON from the client");
    let request = |limit, profile: Option<i64>, seed| CandidatesRequest {
        viewer: i64::from(viewer),
        profile,
        limit,
        deadline_ms: None,
        seed,
    };
    let ids = |list: &[u32]| list.iter().map(|&v| i64::from(v)).collect::<Vec<_>>();
    let fof = candidates(&data, Method::FriendsOfFriends, request(20, None, Some(3)));
    let cofollow = candidates(
        &data,
        Method::CoFollow,
        request(20, Some(i64::from(profile)), Some(3)),
    );
    let ppr = candidates(
        &data,
        Method::PersonalizedPagerank,
        request(20, None, Some(3)),
    );
    let popular = candidates(&data, Method::PopularInRegion, request(20, None, None));
    assert!(!fof.is_empty() && !cofollow.is_empty() && !ppr.is_empty() && !popular.is_empty());
    for protocol in ["binary", "compact"] {
        let got = &got[protocol];
        let firsts = |key: &str| -> Vec<(i64, f64)> {
            got[key]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|c| c.as_array())
                .map(|c| (c[0].as_i64().unwrap(), c[1].as_f64().unwrap()))
                .collect()
        };
        assert_eq!(
            got["info"],
            serde_json::json!([
                data.graph.nodes(),
                data.graph.arcs(),
                true,
                0,
                1,
                data.regions.count()
            ]),
            "{protocol}"
        );
        assert_eq!(
            got["out"],
            serde_json::json!(ids(data.graph.out_neighbours(viewer))),
            "{protocol}"
        );
        let first_five: Vec<u32> = data
            .graph
            .in_neighbours(viewer)
            .iter()
            .take(5)
            .copied()
            .collect();
        assert_eq!(got["in"], serde_json::json!(ids(&first_five)), "{protocol}");
        same(&firsts("fof"), &fof, "friends of friends", protocol);
        same(&firsts("cofollow"), &cofollow, "co-follow", protocol);
        same(
            &firsts("ppr"),
            &ppr,
            "personalized PageRank (the same seed walks the same walks)",
            protocol,
        );
        same(&firsts("popular"), &popular, "popular in region", protocol);
        assert_eq!(
            got["unknown"],
            serde_json::json!(format!("unknown account {unknown}"))
        );
        assert!(
            got["too_many"].as_str().unwrap().contains("limit 1000000"),
            "{got}"
        );
        // TApplicationException UNKNOWN_METHOD = 1, for the call's name and sequence id.
        assert_eq!(
            got["no_such_method"],
            serde_json::json!([
                "no_such_method",
                true,
                41,
                1,
                "Invalid method name: 'no_such_method'"
            ])
        );
        assert_eq!(got["after"], serde_json::json!(data.graph.nodes()));
    }
    server.shutdown();
    server.join();
}

/// A raw connection to the server.
fn connect(addr: SocketAddr) -> std::net::TcpStream {
    let s = tern_testkit::connect(addr);
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

/// Reads one frame's payload.
fn read_frame(s: &mut std::net::TcpStream) -> Vec<u8> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).expect("a frame's length");
    let mut payload = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut payload).expect("a frame's payload");
    payload
}

#[test]
fn garbage_and_oversized_frames_get_an_application_exception() {
    let (server, _data) = serve(Shard::WHOLE);
    let addr = server.local_addr().unwrap();
    let mut s = connect(addr);
    // A frame of garbage: answered, and the connection goes on (the framing is intact).
    s.write_all(&[0, 0, 0, 3, 0xff, 0xfe, 0xfd]).unwrap();
    let reply = tern_graph_proto::read_reply(&read_frame(&mut s));
    assert!(
        matches!(
            &reply,
            Err(tern_graph_proto::ReplyError::Application {
                kind: tern_thrift::ApplicationErrorKind::ProtocolError,
                ..
            })
        ),
        "{reply:?}"
    );
    let mut call = Vec::new();
    tern_graph_proto::write_call(
        &mut call,
        tern_graph_proto::ProtocolKind::Compact,
        9,
        &tern_graph_proto::GraphCall::Info,
    );
    s.write_all(&call).unwrap();
    let (seqid, reply) = tern_graph_proto::read_reply(&read_frame(&mut s)).unwrap();
    assert_eq!(seqid, 9);
    assert!(matches!(reply, GraphReply::Info(_)));
    // A frame over --max-frame-bytes (4096 here): a protocol error, then the connection closes.
    s.write_all(&100_000u32.to_be_bytes()).unwrap();
    let reply = tern_graph_proto::read_reply(&read_frame(&mut s));
    assert!(
        matches!(&reply, Err(tern_graph_proto::ReplyError::Application { message, .. }) if message.contains("over the limit")),
        "{reply:?}"
    );
    let mut rest = Vec::new();
    assert_eq!(
        s.read_to_end(&mut rest).unwrap(),
        0,
        "closed after the answer"
    );
    server.shutdown();
    server.join();
}

#[test]
fn a_shard_refuses_other_shards_accounts_and_names_the_right_one() {
    let (server, data) = serve("1/2".parse().unwrap());
    let addr = server.local_addr().unwrap();
    let mut s = connect(addr);
    let (mine, theirs) = {
        let mut accounts = (0..data.graph.nodes() as u64)
            .filter(|&a| data.graph.out_neighbours(a as u32).len() > 2);
        let mine = accounts
            .clone()
            .find(|&a| tern_graph::shard_of(a, 2) == 1)
            .unwrap();
        let theirs = accounts.find(|&a| tern_graph::shard_of(a, 2) == 0).unwrap();
        (mine, theirs)
    };
    for (seqid, account) in [(1, mine), (2, theirs)] {
        let mut call = Vec::new();
        tern_graph_proto::write_call(
            &mut call,
            tern_graph_proto::ProtocolKind::Binary,
            seqid,
            &tern_graph_proto::GraphCall::Candidates {
                method: Method::FriendsOfFriends,
                request: CandidatesRequest::for_viewer(account as i64),
            },
        );
        s.write_all(&call).unwrap();
    }
    // Each call is answered when it is done (the refusal at once, the count on the CPU pool): the replies
    // are told apart by their sequence ids.
    let mut replies: Vec<(i32, GraphReply)> = (0..2)
        .map(|_| tern_graph_proto::read_reply(&read_frame(&mut s)).unwrap())
        .collect();
    replies.sort_by_key(|(seqid, _)| *seqid);
    let [(1, mine_reply), (2, theirs_reply)] = <[_; 2]>::try_from(replies).unwrap() else {
        panic!("replies to seqids 1 and 2");
    };
    assert!(
        matches!(mine_reply, GraphReply::Candidates(_)),
        "{mine_reply:?}"
    );
    assert_eq!(
        theirs_reply,
        GraphReply::Error(tern_graph_proto::GraphError::WrongShard {
            message: format!("account {theirs} is served by shard 0/2, this is 1/2"),
            shard: 0,
            shards: 2
        })
    );
    server.shutdown();
    server.join();
}
