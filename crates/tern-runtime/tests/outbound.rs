//! Outbound calls against a real backend (a ping server) from a loop (a current-thread runtime + LocalSet).

use std::time::{Duration, Instant};

use tern_ping::client::{Call, PingCodec};
use tern_ping::Ping;
use tern_runtime::{
    collect_all, Backend, CallError, PoolConfig, RunningServer, RuntimeConfig, Server,
};

fn backend_server() -> RunningServer {
    let cfg = RuntimeConfig {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        io_threads: 1,
        ..RuntimeConfig::default()
    };
    Server::new(cfg, Ping).start().unwrap()
}

/// A backend pool of `connections` connections to a ping server.
fn ping_backend(addr: std::net::SocketAddr, connections: usize) -> std::rc::Rc<Backend<PingCodec>> {
    Backend::new(
        addr,
        PingCodec,
        PoolConfig {
            connections,
            ..PoolConfig::default()
        },
    )
}

fn on_a_loop<F: std::future::Future>(f: F) -> F::Output {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tokio::task::LocalSet::new().block_on(&rt, f)
}

#[test]
fn pipelined_calls_get_their_own_replies() {
    let server = backend_server();
    let addr = server.local_addr().unwrap();
    on_a_loop(async move {
        let backend = ping_backend(addr, 2);
        let deadline = Instant::now() + Duration::from_secs(5);
        let calls: Vec<Call> = (0..2000).map(|i| Call::Echo(format!("r{i}"))).collect();
        let results = collect_all(calls.iter().map(|c| backend.call(c, deadline)), deadline).await;
        for (i, r) in results.into_iter().enumerate() {
            assert_eq!(r.unwrap(), format!("r{i}").into_bytes());
        }
    });
    server.shutdown();
    server.join();
}

#[test]
fn every_call_has_a_deadline_and_collect_all_keeps_partial_results() {
    let server = backend_server();
    let addr = server.local_addr().unwrap();
    on_a_loop(async move {
        let backend = ping_backend(addr, 3);
        let start = Instant::now();
        let deadline = start + Duration::from_millis(150);
        let calls = [Call::Ping, Call::Sleep(1000), Call::Echo("fast".into())];
        let results = collect_all(
            calls
                .iter()
                .map(|c| backend.call(c, deadline + Duration::from_secs(5))),
            deadline,
        )
        .await;
        let took = start.elapsed();
        assert!(
            took < Duration::from_millis(600),
            "collect_all returned at its deadline: {took:?}"
        );
        assert_eq!(results[0], Ok(b"PONG".to_vec()));
        assert_eq!(results[1], Err(CallError::Timeout));
        assert_eq!(results[2], Ok(b"fast".to_vec()));
        // A call's own deadline.
        let r = backend
            .call(
                &Call::Sleep(500),
                Instant::now() + Duration::from_millis(50),
            )
            .await;
        assert_eq!(r, Err(CallError::Timeout));
        // The connection stays in step after timeouts: the late replies are dropped, not mismatched.
        for i in 0..10 {
            let r = backend
                .call(
                    &Call::Echo(format!("after{i}")),
                    Instant::now() + Duration::from_secs(5),
                )
                .await;
            assert_eq!(r.unwrap(), format!("after{i}").into_bytes());
        }
    });
    server.shutdown();
    server.join();
}

#[test]
fn a_dead_backend_fails_fast_and_a_restarted_one_is_reconnected() {
    let server = backend_server();
    let addr = server.local_addr().unwrap();
    on_a_loop(async move {
        let backend = ping_backend(addr, 1);
        let far = || Instant::now() + Duration::from_secs(5);
        assert_eq!(backend.call(&Call::Ping, far()).await.unwrap(), b"PONG");
        server.shutdown();
        server.join();
        let r = backend.call(&Call::Ping, far()).await;
        assert!(matches!(r, Err(CallError::Connection(_))), "{r:?}");
        let r = backend.call(&Call::Ping, far()).await;
        assert!(
            matches!(r, Err(CallError::Connection(_))),
            "refused while down: {r:?}"
        );
        // Same address again.
        let cfg = RuntimeConfig {
            listen: Some(addr),
            io_threads: 1,
            ..RuntimeConfig::default()
        };
        let again = Server::new(cfg, Ping).start().unwrap();
        assert_eq!(backend.call(&Call::Ping, far()).await.unwrap(), b"PONG");
        again.shutdown();
        again.join();
    });
}
