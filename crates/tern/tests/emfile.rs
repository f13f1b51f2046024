//! Accept hardening against descriptor exhaustion, on a real `tern ping` process run with a low RLIMIT_NOFILE.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tern_bench::process::ChildGuard;
use tern_load::process_cpu_seconds;
use tern_testkit::start_with_port_file;

fn start_ping(nofile: u32) -> (ChildGuard, SocketAddr) {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n {nofile} && exec {} ping --listen 127.0.0.1:0 --io-threads 1",
            env!("CARGO_BIN_EXE_tern")
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line.trim().rsplit(' ').next().unwrap().parse().unwrap();
    (ChildGuard(child), addr)
}

/// Sends a PING on every connection, waits, and says which got their PONG.
fn ping_all(conns: &mut [TcpStream], wait: Duration) -> Vec<bool> {
    for s in conns.iter_mut() {
        s.write_all(b"PING\r\n").unwrap();
    }
    std::thread::sleep(wait);
    conns
        .iter_mut()
        .map(|s| {
            s.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
            let mut buf = [0u8; 6];
            s.read_exact(&mut buf).is_ok() && &buf == b"PONG\r\n"
        })
        .collect()
}

#[test]
fn emfile_pauses_accepting_instead_of_spinning_and_recovers() {
    let (server, addr) = start_ping(32);
    // More connections than the server has descriptors: the excess wait in the listen queue.
    let mut conns: Vec<TcpStream> = (0..60).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let answered = ping_all(&mut conns, Duration::from_millis(300));
    let served = answered.iter().filter(|&&ok| ok).count();
    assert!(
        (10..60).contains(&served),
        "some connections are served, the rest wait: {served}"
    );
    // While out of descriptors, the server must not spin on accept (a naive loop burns a whole core).
    let before = process_cpu_seconds(server.pid()).unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let used = process_cpu_seconds(server.pid()).unwrap() - before;
    assert!(
        used < 0.2,
        "server used {used:.3} CPU-s in 1 s while at EMFILE"
    );
    // Freeing descriptors lets the waiting connections in.
    let mut waiting: Vec<TcpStream> = conns
        .into_iter()
        .zip(answered)
        .filter(|(_, ok)| !ok)
        .map(|(s, _)| s)
        .collect();
    // Their first PING is already queued: each answer is one PONG.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !waiting.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        waiting.retain_mut(|s| {
            s.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
            let mut buf = [0u8; 6];
            !(s.read_exact(&mut buf).is_ok() && &buf == b"PONG\r\n")
        });
    }
    assert!(
        waiting.is_empty(),
        "{} connections never got served after descriptors were freed",
        waiting.len()
    );
}

/// tern cache reports the runtime's accept pauses as memcached's `listen_disabled_num` and
/// `time_in_listen_disabled_us`.
#[test]
fn cache_counts_accept_pauses_as_listen_disabled() {
    // The server says which port it got: a port picked here could be taken by another test's server first.
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(format!(
        "ulimit -n 32 && exec {} cache -l 127.0.0.1 -p -1 -t 1",
        env!("CARGO_BIN_EXE_tern")
    ));
    let (_server, ports) = start_with_port_file(cmd, "emfile");
    assert_eq!(ports[0].0, "TCP INET", "{ports:?}");
    let addr = SocketAddr::from(([127, 0, 0, 1], ports[0].1));
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut first = loop {
        match TcpStream::connect(addr) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("tern cache did not start: {e}"),
        }
    };
    first
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    // More connections than the server has descriptors: it pauses accepting.
    let _waiting: Vec<TcpStream> = (0..60).map(|_| TcpStream::connect(addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(300));
    let reply = tern_testkit::stats_reply(&mut first, "");
    let stat = |name: &str| -> u64 {
        reply
            .lines()
            .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
            .unwrap_or_else(|| panic!("no {name} in {reply}"))
            .parse()
            .unwrap()
    };
    assert!(stat("listen_disabled_num") >= 1, "{reply}");
    assert!(stat("time_in_listen_disabled_us") >= 1_000, "{reply}");
}
