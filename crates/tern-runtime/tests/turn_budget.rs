//! The per-turn request budget (`max_requests_per_turn`): a connection's deep pipeline is handled a budget
//! at a time, the rest waiting in its buffer, and every reply still comes back, in order, whatever the
//! budget, the buffer mode and the way the pipeline is cut into writes.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use tern_ping::Ping;
use tern_runtime::{BufferMode, RunningServer, RuntimeConfig, Server};

fn start(budget: usize, buffer_mode: BufferMode) -> RunningServer {
    let cfg = RuntimeConfig {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        io_threads: 1,
        max_requests_per_turn: budget,
        buffer_mode,
        ..RuntimeConfig::default()
    };
    Server::new(cfg, Ping).start().expect("server starts")
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// `count` requests of varied lengths, and the replies they must get, in order.
fn pipeline(count: usize) -> (Vec<u8>, Vec<u8>) {
    let (mut requests, mut replies) = (Vec::new(), Vec::new());
    for i in 0..count {
        let text = format!("{i}-{}", "y".repeat(i % 97));
        requests.extend_from_slice(format!("ECHO {text}\r\n").as_bytes());
        replies.extend_from_slice(format!("{text}\r\n").as_bytes());
    }
    (requests, replies)
}

#[test]
fn deep_pipelines_are_answered_whole_and_in_order_a_budget_at_a_time() {
    for mode in [BufferMode::Shared, BufferMode::PerConnection] {
        for budget in [1, 3, 64] {
            let server = start(budget, mode);
            let addr = server.local_addr().expect("a TCP listener");
            let (requests, replies) = pipeline(5_000);
            // Whole, then in odd-sized writes that cut requests anywhere.
            for chunk in [requests.len(), 1_009, 7] {
                let mut conn = connect(addr);
                let writer = {
                    let mut conn = conn.try_clone().unwrap();
                    let requests = requests.clone();
                    std::thread::spawn(move || {
                        for part in requests.chunks(chunk) {
                            conn.write_all(part).unwrap();
                        }
                    })
                };
                let mut got = vec![0u8; replies.len()];
                conn.read_exact(&mut got).expect("every reply");
                writer.join().unwrap();
                assert!(
                    got == replies,
                    "{mode:?}, budget {budget}, writes of {chunk}: replies differ"
                );
            }
            server.shutdown();
        }
    }
}
