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

/// Starts `tern run <args>`, waits for its example lines, and answers the child and every line it printed.
fn start_run(args: &[&str]) -> (ChildGuard, Vec<String>) {
    let mut child = ChildGuard(
        Command::new(env!("CARGO_BIN_EXE_tern"))
            .arg("run")
            .args(args)
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
    let mut lines: Vec<String> = Vec::new();
    while !lines.iter().any(|l| l.contains("features of"))
        || !lines.iter().any(|l| l.contains("tern load -s"))
    {
        let line = lines_rx
            .recv_timeout(end.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| {
                panic!(
                    "tern run prints its services, the examples and the features line: {lines:?}"
                )
            });
        lines.push(line);
    }
    (child, lines)
}

/// SIGTERM, and the exit must be clean and prompt.
fn stop(mut child: ChildGuard) {
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

/// The recommender's example: the curl line it printed answers ten items.
fn check_recommend_example(lines: &[String]) {
    let url = lines
        .iter()
        .find_map(|line| {
            line.find("curl '")
                .map(|start| line[start + 6..line.len() - 1].to_owned())
        })
        .expect("a curl line");
    let (status, body) = get(&url);
    assert_eq!(status, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["items"].as_array().unwrap().len(), 10, "{answer}");
    assert_eq!(answer["partial"], false, "{answer}");
}

/// Every command `tern run` printed after a "try" runs as a user would run it, from the repository (its paths
/// are relative to it) with `tern` on the PATH: it exits 0 within a minute, a `curl` answering a 2xx
/// (`--fail`) with a body.
fn check_every_try_command(lines: &[String]) {
    let commands: Vec<&str> = lines
        .windows(2)
        .filter(|pair| pair[0].trim_end().ends_with("try"))
        .map(|pair| pair[1].trim())
        .collect();
    // The cache's, the pacer's, the recommender's (through tern graph) and the ping service's.
    assert!(
        commands.len() >= 4,
        "tern run prints a command to try for its services: {lines:?}"
    );
    let bin_dir = std::path::Path::new(env!("CARGO_BIN_EXE_tern"))
        .parent()
        .unwrap()
        .to_owned();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for command in commands {
        let (program, rest) = command.split_once(' ').unwrap();
        let line = match program {
            "curl" => format!("curl --fail --max-time 30 {rest}"),
            "tern" => format!("timeout 60 {command} -q"),
            "bash" => format!("timeout 30 {command}"),
            other => panic!(
                "tern run printed a command of {other}, which this test does not run: {command}"
            ),
        };
        let out = Command::new("sh")
            .args(["-c", &line])
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .env("PATH", &path)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && !stdout.trim().is_empty(),
            "{command}: {}\n{stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        if program == "bash" {
            assert_eq!(stdout.trim_end(), "PONG", "{command}");
        }
        if program == "curl" && command.contains("-si") {
            assert!(stdout.starts_with("HTTP/1.1 200"), "{command}: {stdout}");
        }
    }
}

#[test]
fn tern_run_serves_everything_and_its_example_works() {
    let (child, lines) = start_run(&[]);
    check_recommend_example(&lines);
    for port in [11211, 7070, 7400, 7600] {
        assert!(
            TcpStream::connect(("127.0.0.1", port)).is_ok(),
            "port {port}"
        );
    }
    stop(child);
}

#[test]
fn tern_run_takes_ports_an_admin_endpoint_and_a_data_directory_it_keeps() {
    let ports: Vec<u16> = (0..6).map(|_| tern_testkit::free_port()).collect();
    let port = |i: usize| ports[i].to_string();
    let dir = std::env::temp_dir().join(format!("tern-run-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let data_dir = dir.to_str().unwrap().to_owned();
    let admin = format!("127.0.0.1:{}", ports[5]);
    let (cache, pacer, graph, recommend, ping) = (port(0), port(1), port(2), port(3), port(4));
    let (child, lines) = start_run(&[
        "--cache-port",
        &cache,
        "--pacer-port",
        &pacer,
        "--graph-port",
        &graph,
        "--recommend-port",
        &recommend,
        "--ping-port",
        &ping,
        "--admin",
        &admin,
        "--data-dir",
        &data_dir,
    ]);
    check_recommend_example(&lines);
    for p in &ports {
        assert!(
            TcpStream::connect(("127.0.0.1", *p)).is_ok(),
            "port {p}: {lines:?}"
        );
    }
    // The admin endpoint: the pacer's campaigns, and every service's metrics in one place.
    let (status, campaigns) = get(&format!("http://{admin}/campaigns"));
    assert_eq!(status, 200, "{campaigns}");
    let (_, metrics) = get(&format!("http://{admin}/metrics"));
    assert!(
        metrics.contains("tern_recommend_") && metrics.contains("tern_pacer_"),
        "{metrics}"
    );
    // The printed examples work: the pacer's OpenRTB request gets a bid (and below, every command printed to
    // try, as printed: the cache's load command, the pacer's curl, the recommender's curl).
    let body = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/openrtb/banner-site.json"
    ))
    .unwrap();
    let mut s = TcpStream::connect(("127.0.0.1", ports[1])).unwrap();
    write!(s, "POST /openrtb2/auction HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n", body.len()).unwrap();
    s.write_all(&body).unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    check_every_try_command(&lines);
    stop(child);
    // What it ran can be looked at afterwards.
    assert!(dir.join("campaigns.toml").exists());
    assert!(dir.join("pacer-journal").is_dir());
    let _ = std::fs::remove_dir_all(&dir);
}
