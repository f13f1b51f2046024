//! `tern run`, the README's first command: every service comes up on its default port, and the curl line
//! it prints for the recommender answers; SIGTERM stops it all.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tern_testkit::ChildGuard;

/// `GET` over HTTP/1.1 with `Connection: close`: the status and the body.
fn get(url: &str) -> (u16, String) {
    let rest = url.strip_prefix("http://").expect("an http URL");
    let (host, target) = rest.split_at(rest.find('/').expect("a path"));
    let addr: SocketAddr = host.parse().unwrap();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let status = reply[9..12].parse().unwrap();
    (status, reply.split_once("\r\n\r\n").unwrap().1.to_owned())
}

#[test]
fn tern_run_serves_everything_and_its_example_works() {
    let mut child = ChildGuard(
        Command::new(env!("CARGO_BIN_EXE_tern"))
            .arg("run")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("tern run starts"),
    );
    let stdout = child.0.stdout.take().unwrap();
    let (lines_tx, lines_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let end = Instant::now() + Duration::from_secs(60);
    let (mut url, mut features) = (None, false);
    while url.is_none() || !features {
        let line = lines_rx
            .recv_timeout(end.saturating_duration_since(Instant::now()))
            .expect("tern run prints its services, the example and the features line");
        if let Some(start) = line.find("curl '") {
            url = Some(line[start + 6..line.len() - 1].to_owned());
        }
        features |= line.contains("features of");
    }
    let (status, body) = get(&url.unwrap());
    assert_eq!(status, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["items"].as_array().unwrap().len(), 10, "{answer}");
    assert_eq!(answer["partial"], false, "{answer}");
    for port in [11211, 7070, 7400, 7600] {
        assert!(
            TcpStream::connect(("127.0.0.1", port)).is_ok(),
            "port {port}"
        );
    }
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(child.pid() as i32, libc::SIGTERM) };
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            break;
        }
        assert!(Instant::now() < end, "tern run did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}
