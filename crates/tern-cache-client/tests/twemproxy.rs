//! The client against real peers: three in-process tern cache nodes, a real twemproxy (`nutcracker`) in front
//! of them, and the check that the client's ring puts every key on the node twemproxy put it on, for each
//! key hash and with unequal weights; then the client's calls, including a multi-get with one node gone.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use clap::Parser;
use tern_cache::CacheArgs;
use tern_cache_client::{CacheClient, ClientError, KeyHash, Node, Ring};
use tern_runtime::{CallError, PoolConfig, RunningServer};
use tern_testkit::Nutcracker;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: CacheArgs,
}

/// A tern cache node served from this process on 127.0.0.1 port 0.
fn start_node() -> RunningServer {
    let mut settings = Cli::try_parse_from(["tern", "-t", "1"])
        .expect("flags parse")
        .args
        .settings()
        .expect("flags are valid");
    settings.tcp = vec!["127.0.0.1:0".parse().unwrap()];
    settings.udp = Vec::new();
    tern_cache::server(settings)
        .unwrap()
        .start()
        .expect("tern cache starts")
}

/// Sends `request` and reads until the reply ends with `end`.
fn exchange(conn: &mut TcpStream, request: &[u8], end: &[u8]) -> Vec<u8> {
    conn.write_all(request).unwrap();
    let mut reply = Vec::new();
    let mut buf = [0u8; 65536];
    while !reply.ends_with(end) {
        let n = conn.read(&mut buf).expect("reply before the read timeout");
        assert!(n > 0, "connection closed; got {reply:?}");
        reply.extend_from_slice(&buf[..n]);
    }
    reply
}

fn connect(addr: SocketAddr) -> TcpStream {
    let conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    conn
}

/// nutcracker over `nodes` (address, weight) with `hash`.
fn nutcracker(nodes: &[(SocketAddr, u32)], hash: &str) -> Nutcracker {
    let servers: String = nodes
        .iter()
        .map(|(addr, weight)| format!("   - {addr}:{weight}\n"))
        .collect();
    Nutcracker::start(&format!(
        "  hash: {hash}\n  distribution: ketama\n  timeout: 2000\n  auto_eject_hosts: false\n  \
         servers:\n{servers}"
    ))
}

/// Keys of several shapes, including bytes >= 0x80 (hashed as signed C chars by twemproxy).
fn sample_keys() -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = (0..150).map(|i| format!("key:{i}").into_bytes()).collect();
    keys.extend((0..50).map(|i| format!("user:{}:profile", i * 7919).into_bytes()));
    keys.extend((0..20u8).map(|i| vec![b'k', 0xc3, 0xa9, b'0' + i % 10, 0x80 + i]));
    keys
}

/// Which node holds `key`, asking each node directly.
fn holder(conns: &mut [TcpStream], key: &[u8]) -> Vec<usize> {
    let mut get = b"get ".to_vec();
    get.extend_from_slice(key);
    get.extend_from_slice(b"\r\n");
    (0..conns.len())
        .filter(|&i| exchange(&mut conns[i], &get, b"END\r\n").starts_with(b"VALUE"))
        .collect()
}

#[test]
fn the_ring_places_keys_where_twemproxy_does() {
    let servers: Vec<RunningServer> = (0..3).map(|_| start_node()).collect();
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.local_addr().unwrap()).collect();
    let mut direct: Vec<TcpStream> = addrs.iter().map(|&a| connect(a)).collect();
    let keys = sample_keys();
    for (hash, weights) in [
        ("fnv1a_64", [1, 1, 1]),
        ("md5", [1, 1, 1]),
        ("fnv1_64", [1, 2, 3]),
        ("fnv1a_32", [3, 1, 1]),
        ("fnv1_32", [1, 1, 1]),
        ("one_at_a_time", [2, 1, 2]),
    ] {
        for conn in &mut direct {
            assert_eq!(exchange(conn, b"flush_all\r\n", b"\r\n"), b"OK\r\n");
        }
        let nodes: Vec<(SocketAddr, u32)> = addrs.iter().copied().zip(weights).collect();
        let proxy = nutcracker(&nodes, hash);
        let mut via_proxy = connect(proxy.addr);
        for key in &keys {
            let mut set = b"set ".to_vec();
            set.extend_from_slice(key);
            set.extend_from_slice(b" 0 0 1\r\nx\r\n");
            assert_eq!(exchange(&mut via_proxy, &set, b"\r\n"), b"STORED\r\n");
        }
        let ring_nodes: Vec<Node> = nodes.iter().map(|&(a, w)| Node::from_addr(a, w)).collect();
        let ring = Ring::new(&ring_nodes, KeyHash::from_name(hash).unwrap());
        let mut per_node = [0usize; 3];
        for key in &keys {
            let held = holder(&mut direct, key);
            assert_eq!(
                held,
                vec![ring.node_for(key)],
                "{hash} {weights:?}: key {:?}",
                String::from_utf8_lossy(key)
            );
            per_node[held[0]] += 1;
        }
        assert!(per_node.iter().all(|&n| n > 0), "{hash}: {per_node:?}");
    }
}

/// Runs `f` on a current-thread runtime inside a `LocalSet`, as on a tern I/O loop.
fn on_a_loop<F: std::future::Future>(f: F) -> F::Output {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tokio::task::LocalSet::new().block_on(&rt, f)
}

#[test]
fn client_calls_agree_with_twemproxy_and_keep_partial_results() {
    let mut servers: Vec<Option<RunningServer>> = (0..3).map(|_| Some(start_node())).collect();
    let addrs: Vec<SocketAddr> = servers
        .iter()
        .map(|s| s.as_ref().unwrap().local_addr().unwrap())
        .collect();
    let nodes: Vec<(SocketAddr, u32)> = addrs.iter().map(|&a| (a, 1)).collect();
    // md5: twemproxy's fnv1a_64 (32-bit, prime 0x1b3) puts short sequential keys like these on one node.
    let proxy = nutcracker(&nodes, "md5");
    let pool = PoolConfig {
        connections: 1,
        ..PoolConfig::default()
    };
    let keys: Vec<Vec<u8>> = (0..60).map(|i| format!("item:{i}").into_bytes()).collect();
    let deadline = || Instant::now() + Duration::from_secs(2);

    let client = CacheClient::new(&nodes, KeyHash::Md5, pool.clone());
    on_a_loop(async {
        for (i, key) in keys.iter().enumerate() {
            let value = format!("value {i}");
            assert!(client
                .set(key, value.as_bytes(), i as u32, 0, deadline())
                .await
                .unwrap());
        }
        let hit = client.get(b"item:7", deadline()).await.unwrap().unwrap();
        assert_eq!((&hit.value[..], hit.flags), (&b"value 7"[..], 7));
        assert_eq!(client.get(b"absent", deadline()).await.unwrap(), None);
        assert!(client.delete(b"item:59", deadline()).await.unwrap());
        assert!(!client.delete(b"item:59", deadline()).await.unwrap());
        assert!(matches!(
            client.get(b"bad key", deadline()).await,
            Err(ClientError::Encode(_))
        ));
        assert!(client.set(b"n", b"41", 0, 0, deadline()).await.unwrap());
        assert_eq!(
            client.arithmetic(b"n", 1, false, deadline()).await.unwrap(),
            Some(42)
        );
        assert!(client.touch(b"n", 100, deadline()).await.unwrap());
    });

    // What the client stored, twemproxy finds: both hash every key to the same node.
    let mut via_proxy = connect(proxy.addr);
    for (i, key) in keys[..59].iter().enumerate() {
        let mut get = b"get ".to_vec();
        get.extend_from_slice(key);
        get.extend_from_slice(b"\r\n");
        let want = format!(
            "VALUE {} {i} {}\r\nvalue {i}\r\nEND\r\n",
            String::from_utf8_lossy(key),
            format!("value {i}").len()
        );
        assert_eq!(
            String::from_utf8_lossy(&exchange(&mut via_proxy, &get, b"END\r\n")),
            want
        );
    }

    // One node gone: a multi-get keeps every other node's answers and fails only the lost node's keys.
    let lost = client.node_for(b"item:3");
    assert!(
        keys.iter().any(|k| client.node_for(k) != lost),
        "the keys must span more than one node"
    );
    let stopped = servers[lost].take().unwrap();
    stopped.shutdown();
    stopped.join();
    let key_refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let client = CacheClient::new(&nodes, KeyHash::Md5, pool);
    let results = on_a_loop(client.get_many(&key_refs, deadline()));
    for (i, (key, result)) in keys.iter().zip(&results).enumerate() {
        if client.node_for(key) == lost {
            assert!(
                matches!(result, Err(ClientError::Call(CallError::Connection(_)))),
                "{i}: {result:?}"
            );
        } else if i == 59 {
            assert_eq!(result, &Ok(None));
        } else {
            let item = result.as_ref().unwrap().as_ref().unwrap();
            assert_eq!(item.value, format!("value {i}").into_bytes());
        }
    }
    assert!(results.iter().filter(|r| r.is_err()).count() < keys.len());
}

/// A node's `stats` counter.
fn stat(addr: SocketAddr, name: &str) -> u64 {
    let reply = exchange(&mut connect(addr), b"stats\r\n", b"END\r\n");
    let prefix = format!("STAT {name} ");
    String::from_utf8_lossy(&reply)
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in stats"))
}

#[test]
fn concurrent_multi_gets_of_a_key_ask_the_node_once() {
    let node = start_node();
    let addr = node.local_addr().unwrap();
    let client = CacheClient::new(&[(addr, 1)], KeyHash::Md5, PoolConfig::default());
    let deadline = Instant::now() + Duration::from_secs(2);
    let (misses, hits) = on_a_loop(async {
        assert!(client.set(b"known", b"v", 0, 0, deadline).await.unwrap());
        // 16 multi-gets at once of a missing key, and of a stored one beside a key of their own.
        let missing: Vec<_> = (0..16)
            .map(|_| client.get_many(&[b"missing"], deadline))
            .collect();
        let own: Vec<Vec<u8>> = (0..16).map(|i| format!("own:{i}").into_bytes()).collect();
        let asks: Vec<[&[u8]; 2]> = own.iter().map(|k| [&b"known"[..], k]).collect();
        let known: Vec<_> = asks
            .iter()
            .map(|keys| client.get_many(keys, deadline))
            .collect();
        (
            futures::future::join_all(missing).await,
            futures::future::join_all(known).await,
        )
    });
    assert!(misses.iter().all(|r| r == &vec![Ok(None)]), "{misses:?}");
    for answer in &hits {
        assert_eq!(answer[0].as_ref().unwrap().as_ref().unwrap().value, "v");
        assert_eq!(answer[1], Ok(None));
    }
    // Keys looked up by the node (memcached's cmd_get counts keys): the missing key once, the stored key
    // once, each own key once; 16 + 32 without single-flight.
    assert_eq!(stat(addr, "cmd_get"), 1 + 1 + 16);
    assert_eq!(stat(addr, "get_hits"), 1);
    assert_eq!(client.coalesced_keys(), 15 + 15);
    node.shutdown();
    node.join();
}
