//! What the services say when something they depend on fails, as an operator reads it on standard error:
//! a backend that becomes unreachable is one warning naming its address, the cause and what happens
//! meanwhile, however many requests fail, and one line when it is back (tern recommend's graph replicas and
//! cache nodes, the pacer's Redis and PostgreSQL); a service that cannot start says why in a sentence, with
//! no Rust debug formatting, and exits non-zero.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tern_testkit::{free_port, wait_for_port, ChildGuard, Postgres};

mod common;
use common::{addr, http_get, TERN};

const CAMPAIGNS: &str =
    "currency = \"USD\"\n\n[[campaign]]\nid = 1\nbudget = \"10\"\nmax_cpm = \"1\"\n\
    start_ms = 0\nend_ms = 99999999999999\nstrategy = { kind = \"hard-cap\" }\n";

/// A directory for one test's files, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("tern-warnings-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    fn campaigns(&self) -> PathBuf {
        let path = self.path("campaigns.toml");
        std::fs::write(&path, CAMPAIGNS).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Starts `tern <args>` at the info level with its standard error written to `stderr`.
fn spawn_logging(args: &[&str], stderr: &Path) -> ChildGuard {
    ChildGuard(
        Command::new(TERN)
            .args(args)
            .env_remove("RUST_LOG")
            .env_remove("RUST_BACKTRACE")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(stderr).unwrap())
            .spawn()
            .expect("tern starts"),
    )
}

fn read(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut file) = std::fs::File::open(path) {
        file.read_to_string(&mut text).unwrap();
    }
    text
}

/// The lines of `text` that hold every one of `parts`.
fn lines_with<'a>(text: &'a str, parts: &[&str]) -> Vec<&'a str> {
    text.lines()
        .filter(|line| parts.iter().all(|p| line.contains(p)))
        .collect()
}

/// Waits up to `within` for a line of `path` holding every one of `parts`; the file's text either way.
fn await_line(path: &Path, parts: &[&str], within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let text = read(path);
        if !lines_with(&text, parts).is_empty() || Instant::now() >= deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn await_port(port: u16, what: &str) {
    assert!(
        wait_for_port(addr(port), Duration::from_secs(60)),
        "{what} on port {port} did not start"
    );
}

/// `tern graph` of a small generated graph on `listen`, logging to `stderr`.
fn graph(listen: &str, stderr: &Path) -> ChildGuard {
    spawn_logging(
        &[
            "graph",
            "--synthetic-edges",
            "2000",
            "--listen",
            listen,
            "--io-threads",
            "1",
            "--cpu-workers",
            "1",
        ],
        stderr,
    )
}

/// `tern recommend serve` at `listen` on one graph shard and one cache node, with two I/O loops (each has
/// its own connections to every backend, and still an outage is one warning) and `flags`.
fn recommend(listen: &str, graph: &str, cache: &str, flags: &[&str], stderr: &Path) -> ChildGuard {
    let mut args = vec![
        "recommend",
        "serve",
        "--listen",
        listen,
        "--graph-shard",
        graph,
        "--cache",
        cache,
        "--io-threads",
        "2",
        "--cpu-workers",
        "1",
    ];
    args.extend_from_slice(flags);
    spawn_logging(&args, stderr)
}

/// `tern cache` on `port`.
fn cache(port: u16, stderr: &Path) -> ChildGuard {
    spawn_logging(&common::cache_args(&port.to_string()), stderr)
}

/// `tern recommend prepare`: the small graph's features onto the cache at `cache`.
fn prepare(cache: &str) {
    let (ok, stderr) = run_to_exit(&[
        "recommend",
        "prepare",
        "--synthetic-edges",
        "2000",
        "--cache",
        cache,
    ]);
    assert!(ok, "prepare: {stderr}");
}

/// Asks the recommender for viewer 3's suggestions: the answer's `partial` flag (`None`: no JSON answer).
fn partial(port: u16) -> Option<bool> {
    let (_, body) = http_get(port, "/v1/suggested-users?viewer=3&n=5");
    body["partial"].as_bool()
}

/// Asks until an answer is whole (graph and cache both answering), for up to 30 s.
fn await_whole(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while partial(port) != Some(false) {
        assert!(Instant::now() < deadline, "no whole answer");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Stops a backend of the recommender at `port` (`backend`, named `name` at `listen`): its 20 next answers
/// are partial and one warning says `<name> <listen> is unreachable`; then starts it again (`restart`) and
/// waits for a whole answer: one line says it is back and for how long it was out. Answers the warning.
fn outage(
    port: u16,
    log: &Path,
    backend: &mut Option<ChildGuard>,
    (name, listen): (&str, &str),
    restart: impl FnOnce() -> ChildGuard,
) -> String {
    drop(backend.take());
    for _ in 0..20 {
        assert_eq!(partial(port), Some(true));
    }
    let text = await_line(log, &["unreachable", listen], Duration::from_secs(5));
    let warned = lines_with(&text, &["WARN", "unreachable", listen]);
    assert_eq!(
        warned.len(),
        1,
        "one warning for 20 failed requests:\n{text}"
    );
    let warning = warned[0].to_owned();
    assert!(
        warning.contains(&format!("{name} {listen} is unreachable")),
        "{warning}"
    );
    *backend = Some(restart());
    await_whole(port);
    let text = await_line(log, &["reachable again", listen], Duration::from_secs(5));
    let back = lines_with(&text, &["INFO", listen, "is reachable again after"]);
    assert_eq!(back.len(), 1, "{text}");
    assert!(back[0].contains("s out"), "{}", back[0]);
    assert_eq!(
        lines_with(&text, &["WARN", "unreachable", listen]).len(),
        1,
        "{text}"
    );
    warning
}

#[test]
fn a_backend_of_tern_recommend_that_goes_and_comes_back_is_one_warning_and_one_line() {
    let scratch = Scratch::new("recommend");
    let graph_listen = addr(free_port()).to_string();
    let cache_port = free_port();
    let cache_listen = addr(cache_port).to_string();
    let port = free_port();
    let graph_err = scratch.path("graph.err");
    let mut graph_process = Some(graph(&graph_listen, &graph_err));
    let mut cache_process = Some(cache(cache_port, &scratch.path("cache.err")));
    let log = scratch.path("recommend.err");
    let listen = addr(port).to_string();
    let _recommend = recommend(
        &listen,
        &graph_listen,
        &cache_listen,
        &[
            "--deadline-ms",
            "2000",
            "--degrade-after-ms",
            "0",
            "--shed-after-ms",
            "0",
        ],
        &log,
    );
    await_port(cache_port, "tern cache");
    prepare(&cache_listen);
    await_port(
        graph_listen.parse::<SocketAddr>().unwrap().port(),
        "tern graph",
    );
    await_port(port, "tern recommend");
    await_whole(port);
    assert!(
        lines_with(&read(&log), &["unreachable"]).is_empty(),
        "{}",
        read(&log)
    );

    // The graph goes: every request fails its sources, one warning says so, with the cause (the io error,
    // as a sentence) and what to do.
    let warning = outage(
        port,
        &log,
        &mut graph_process,
        ("tern graph replica", &graph_listen),
        || {
            let process = graph(&graph_listen, &graph_err);
            await_port(
                graph_listen.parse::<SocketAddr>().unwrap().port(),
                "tern graph",
            );
            process
        },
    );
    assert!(warning.contains("refused"), "{warning}");
    assert!(warning.contains("partial answers"), "{warning}");
    assert!(
        warning.contains("check that tern graph runs there"),
        "{warning}"
    );
    assert!(
        !warning.contains("Os {") && !warning.contains("kind:"),
        "{warning}"
    );

    // The same for the cache node holding the features.
    let warning = outage(
        port,
        &log,
        &mut cache_process,
        ("tern cache node", &cache_listen),
        || {
            let process = cache(cache_port, &scratch.path("cache.err"));
            await_port(cache_port, "tern cache");
            prepare(&cache_listen);
            process
        },
    );
    assert!(
        warning.contains("check that tern cache runs there"),
        "{warning}"
    );
    let text = read(&log);
    // Two outages, two warnings, two lines: nothing per request.
    assert_eq!(lines_with(&text, &["WARN"]).len(), 2, "{text}");
    drop((graph_process, cache_process));
}

/// A TCP forwarder on a fixed port, to take a backend out of reach and bring it back without restarting
/// it: `stop` closes the listener and every connection through it, `start` listens again on the same port.
struct Gate {
    port: u16,
    to: SocketAddr,
    running: Option<(Arc<AtomicBool>, std::thread::JoinHandle<()>)>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
}

impl Gate {
    fn new(to: SocketAddr) -> Gate {
        let mut gate = Gate {
            port: free_port(),
            to,
            running: None,
            conns: Arc::default(),
        };
        gate.start();
        gate
    }

    fn addr(&self) -> SocketAddr {
        addr(self.port)
    }

    fn start(&mut self) {
        let listener = TcpListener::bind(self.addr()).expect("the gate's port is free again");
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (to, conns) = (self.to, Arc::clone(&self.conns));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            while !stopping.load(Ordering::Acquire) {
                let Ok((client, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let _ = client.set_nonblocking(false);
                let Ok(server) = TcpStream::connect(to) else {
                    continue;
                };
                let mut all = conns.lock().unwrap();
                for (mut from, mut into) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server.try_clone().unwrap(), client.try_clone().unwrap()),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut into);
                        let _ = into.shutdown(Shutdown::Both);
                        let _ = from.shutdown(Shutdown::Both);
                    });
                }
                all.extend([client, server]);
            }
        });
        self.running = Some((stop, thread));
    }

    fn stop(&mut self) {
        if let Some((stop, thread)) = self.running.take() {
            stop.store(true, Ordering::Release);
            thread.join().unwrap();
        }
        for conn in self.conns.lock().unwrap().drain(..) {
            let _ = conn.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs `tern pacer serve` with `flags` behind a gate to a backend, closes the gate for `out`, opens it
/// again, and checks the outage is one warning naming the gate's address (with `warning` in it) and one line
/// when it is back (with `back` in it). Answers the pacer's standard error.
fn pacer_outage(
    name: &str,
    gate: &mut Gate,
    flags: &[&str],
    warning: &[&str],
    back: &[&str],
    out: Duration,
) -> String {
    let scratch = Scratch::new(name);
    let campaigns = scratch.campaigns();
    let listen = addr(free_port()).to_string();
    let log = scratch.path("pacer.err");
    let mut args = vec!["pacer", "serve", "--listen", &listen];
    args.extend_from_slice(flags);
    let has_source = flags.contains(&"--postgres");
    if !has_source {
        args.extend(["--config", campaigns.to_str().unwrap()]);
    }
    let _pacer = spawn_logging(&args, &log);
    await_port(listen.parse::<SocketAddr>().unwrap().port(), "tern pacer");
    let gate_addr = gate.addr().to_string();
    assert!(
        lines_with(&read(&log), &["WARN"]).is_empty(),
        "{}",
        read(&log)
    );
    gate.stop();
    let mut wanted = warning.to_vec();
    wanted.push(&gate_addr);
    await_line(&log, &wanted, Duration::from_secs(10));
    // Let it retry many times while out: still one warning.
    std::thread::sleep(out);
    let text = read(&log);
    let warned = lines_with(&text, &wanted);
    assert_eq!(warned.len(), 1, "one warning for the outage:\n{text}");
    assert!(warned[0].contains("WARN"), "{}", warned[0]);
    assert!(
        !warned[0].contains("Os {") && !warned[0].contains("kind:"),
        "{}",
        warned[0]
    );
    gate.start();
    let mut wanted_back = back.to_vec();
    wanted_back.push(&gate_addr);
    let text = await_line(&log, &wanted_back, Duration::from_secs(10));
    let lines = lines_with(&text, &wanted_back);
    assert_eq!(lines.len(), 1, "one line when it is back:\n{text}");
    assert!(lines[0].contains("INFO"), "{}", lines[0]);
    assert_eq!(lines_with(&text, &wanted).len(), 1, "{text}");
    text
}

#[test]
fn the_pacers_redis_out_of_reach_is_one_warning_and_one_line_when_back() {
    let Some(redis) = tern_testkit::Redis::start() else {
        return;
    };
    let mut gate = Gate::new(redis.addr);
    let url = format!("redis://{}/0", gate.addr());
    let text = pacer_outage(
        "redis",
        &mut gate,
        &["--redis", &url, "--node-id", "a", "--lease-ms", "400"],
        &["Redis at", "is unreachable", "check that Redis runs at"],
        &["Redis at", "answers again after"],
        // Past 3/4 of the lease: the node stops dealing out budget, which is a warning of its own.
        Duration::from_millis(800),
    );
    assert_eq!(
        lines_with(&text, &["WARN", "dealing out no more budget"]).len(),
        1,
        "{text}"
    );
    assert_eq!(
        lines_with(&text, &["answers again", "bidding resumes"]).len(),
        1,
        "{text}"
    );
    // Nothing else, though the syncs failed every 50 ms for most of a second: at most the lease found
    // clawed back if the outage outlasted it.
    let others: Vec<&str> = lines_with(&text, &["WARN"])
        .into_iter()
        .filter(|l| {
            !l.contains("is unreachable")
                && !l.contains("dealing out no more budget")
                && !l.contains("budget lease expired and was clawed back")
        })
        .collect();
    assert!(others.is_empty(), "{text}");
    assert!(
        lines_with(&text, &["WARN", "clawed back"]).len() <= 1,
        "{text}"
    );
    drop(redis);
}

#[test]
fn the_pacers_postgresql_out_of_reach_is_one_warning_and_one_line_when_back() {
    let Some(pg) = Postgres::start("warnings") else {
        return;
    };
    // The tables the pacer reads (docs/pacer.md has the whole schema, triggers included; the pacer polls).
    let psql = ["/usr/lib/postgresql/15/bin/psql", "psql"]
        .into_iter()
        .find(|p| !p.contains('/') || Path::new(p).exists())
        .unwrap();
    let created = Command::new(psql)
        .args([&pg.url(), "-q", "-v", "ON_ERROR_STOP=1", "-c"])
        .arg(
            "CREATE TABLE pacer_campaigns (id bigint PRIMARY KEY, currency char(3) NOT NULL, \
             budget_micros bigint NOT NULL, max_cpm_micros bigint NOT NULL, \
             flight_start timestamptz NOT NULL, flight_end timestamptz NOT NULL, \
             strategy jsonb NOT NULL DEFAULT '{\"kind\": \"hard-cap\"}', \
             targeting jsonb NOT NULL DEFAULT '{}', seat text, deals jsonb NOT NULL DEFAULT '[]', \
             creatives jsonb NOT NULL DEFAULT '[]'); \
             CREATE TABLE pacer_budget_deltas (id bigserial PRIMARY KEY, campaign_id bigint NOT NULL, \
             delta_micros bigint NOT NULL); \
             INSERT INTO pacer_campaigns VALUES (1, 'USD', 10000000, 1000000, now(), \
             now() + interval '1 day');",
        )
        .output()
        .expect("psql runs");
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let mut gate = Gate::new(addr(pg.port));
    let url = format!("postgres://postgres@{}/postgres", gate.addr());
    let text = pacer_outage(
        "postgres",
        &mut gate,
        &["--postgres", &url, "--pg-poll-ms", "50"],
        &[
            "PostgreSQL at",
            "is unreachable",
            "check that PostgreSQL runs there",
        ],
        &["PostgreSQL at", "is reachable again after"],
        Duration::from_millis(600),
    );
    assert_eq!(lines_with(&text, &["WARN"]).len(), 1, "{text}");
    assert!(!text.contains("invalid pacer configuration"), "{text}");
    drop(pg);
}

/// Runs `tern <args>` until it exits (killed after 60 s): whether it succeeded, and its standard error.
fn run_to_exit(args: &[&str]) -> (bool, String) {
    let mut child = ChildGuard(
        Command::new(TERN)
            .args(args)
            .env_remove("RUST_LOG")
            .env_remove("RUST_BACKTRACE")
            .env_remove("RUST_LIB_BACKTRACE")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tern starts"),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "tern {args:?} did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status.success(), stderr)
}

/// No Rust debug formatting: what an io error or a struct looks like under `{:?}`.
fn assert_readable(what: &str, stderr: &str) {
    for debug in ["Os {", "code:", "kind:", "Custom {", "Error {"] {
        assert!(
            !stderr.contains(debug),
            "{what}: debug formatting ({debug}):\n{stderr}"
        );
    }
}

#[test]
fn a_service_that_cannot_start_says_why_and_exits() {
    let scratch = Scratch::new("exit");
    let campaigns = scratch.campaigns();
    let campaigns = campaigns.to_str().unwrap();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_addr = taken.local_addr().unwrap().to_string();
    let cases: Vec<(&str, Vec<&str>)> = vec![
        (
            "tern pacer serve",
            vec![
                "pacer",
                "serve",
                "--config",
                campaigns,
                "--listen",
                &taken_addr,
            ],
        ),
        (
            "tern pacer serve --admin",
            vec![
                "pacer",
                "serve",
                "--config",
                campaigns,
                "--listen",
                "127.0.0.1:0",
                "--admin",
                &taken_addr,
            ],
        ),
        (
            "tern graph",
            vec![
                "graph",
                "--synthetic-edges",
                "2000",
                "--listen",
                &taken_addr,
            ],
        ),
        (
            "tern recommend serve",
            vec![
                "recommend",
                "serve",
                "--graph-shard",
                "127.0.0.1:1",
                "--cache",
                "127.0.0.1:1",
                "--listen",
                &taken_addr,
            ],
        ),
        ("tern ping", vec!["ping", "--listen", &taken_addr]),
    ];
    for (what, args) in cases {
        let (ok, stderr) = run_to_exit(&args);
        assert!(!ok, "{what} started on a taken address:\n{stderr}");
        assert!(
            stderr.contains(&taken_addr),
            "{what}: the address is not named:\n{stderr}"
        );
        assert!(
            stderr.contains("already served by another process")
                || stderr.contains("Address already in use"),
            "{what}: the cause is not said:\n{stderr}"
        );
        assert_readable(what, &stderr);
    }
    let missing = scratch.path("missing.toml");
    let (ok, stderr) = run_to_exit(&["pacer", "serve", "--config", missing.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        stderr.contains(missing.to_str().unwrap()) && stderr.contains("No such file"),
        "{stderr}"
    );
    assert_readable("a missing campaigns file", &stderr);
    drop(taken);
}

/// The recommender's log is readable with the stack down from the start: a backend never reached is
/// warned about once too, at the first request that needs it.
#[test]
fn a_backend_down_from_the_start_is_one_warning() {
    let scratch = Scratch::new("never");
    let log = scratch.path("recommend.err");
    let port = free_port();
    let graph_listen = addr(free_port()).to_string();
    let listen = addr(port).to_string();
    let _recommend = recommend(
        &listen,
        &graph_listen,
        &addr(free_port()).to_string(),
        &[],
        &log,
    );
    await_port(port, "tern recommend");
    for _ in 0..10 {
        let mut conn = tern_testkit::connect(addr(port));
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write!(
            conn,
            "GET /v1/suggested-users?viewer=3&n=5 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut reply = String::new();
        conn.read_to_string(&mut reply).unwrap();
        assert!(reply.starts_with("HTTP/1.1 "), "{reply}");
    }
    let text = await_line(
        &log,
        &["unreachable", &graph_listen],
        Duration::from_secs(5),
    );
    assert_eq!(
        lines_with(&text, &["WARN", "unreachable", &graph_listen]).len(),
        1,
        "{text}"
    );
}
