//! The README's "short tour" and examples/README.md's commands, run as written (on free ports, with long runs
//! shortened, from the repository, `tern` on the PATH), each checked against what the text says it does.
//! Every process started is a `ChildGuard`, killed when the test ends; every command is bounded in time.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use tern_testkit::ChildGuard;

const TERN: &str = env!("CARGO_BIN_EXE_tern");
const README: &str = include_str!("../../../README.md");
const EXAMPLES: &str = include_str!("../../../examples/README.md");

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The ```sh block that follows `heading` in a Markdown text, as lines.
fn sh_block<'a>(text: &'a str, heading: &str) -> Vec<&'a str> {
    let after = &text[text.find(heading).unwrap_or_else(|| panic!("{heading}"))..];
    let start = after.find("```sh\n").expect("a sh block") + 6;
    let body = &after[start..];
    body[..body.find("```").unwrap()].lines().collect()
}

/// Gives each port the docs use a free one, the same each time it recurs.
#[derive(Default)]
struct Ports(HashMap<String, String>);

impl Ports {
    fn map(&mut self, command: &str) -> String {
        let mut out = String::new();
        let mut rest = command;
        // A port after "127.0.0.1:", or a memcached port flag.
        while let Some(at) = ["127.0.0.1:", "-p ", "-U "]
            .iter()
            .filter_map(|p| rest.find(p).map(|i| (i, p.len())))
            .min()
        {
            let (i, len) = at;
            out.push_str(&rest[..i + len]);
            rest = &rest[i + len..];
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits >= 4 {
                let port = self
                    .0
                    .entry(rest[..digits].to_owned())
                    .or_insert_with(|| tern_testkit::free_port().to_string());
                out.push_str(port);
                rest = &rest[digits..];
            }
        }
        out.push_str(rest);
        out
    }

    fn addr(&mut self, documented: u16) -> SocketAddr {
        self.map(&format!("127.0.0.1:{documented}"))
            .parse()
            .unwrap()
    }
}

/// `sh -c line` from the repository with `tern` on the PATH, bounded: its output, which must be a success.
fn shell(line: &str) -> String {
    let bin_dir = Path::new(TERN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("timeout")
        .args(["120", "sh", "-c", line])
        .current_dir(root())
        .env("PATH", path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{line}: {}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Starts a documented server command (`tern ...`, no shell) and waits until `addr` accepts.
fn serve(command: &str, addr: SocketAddr) -> ChildGuard {
    let args: Vec<&str> = command.split_whitespace().collect();
    assert_eq!(args[0], "tern", "{command}");
    let child = ChildGuard(
        Command::new(TERN)
            .args(&args[1..])
            .current_dir(root())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    assert!(
        tern_testkit::wait_for_port(addr, Duration::from_secs(30)),
        "{command} listens on {addr}"
    );
    child
}

/// A command of a block, without its comment, its trailing `&` and the release binary's path.
fn command(line: &str) -> String {
    let code = match line.find("  #").or_else(|| line.find(" # ")) {
        Some(i) => &line[..i],
        None => line,
    };
    code.trim()
        .trim_end_matches('&')
        .trim()
        .replace("./target/release/tern", "tern")
}

#[test]
fn the_readme_short_tour_runs() {
    let dir = tern_testkit::files::temp_dir("readme-tour");
    let tls = tern_testkit::tls::make_certificates(&dir.join("pki"));
    let mut ports = Ports::default();
    let mut servers = Vec::new();
    let mut ran = 0;
    for line in sh_block(README, "## A short tour") {
        if line.trim_start().starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let original = command(line);
        let mut cmd = ports.map(&original);
        let words: Vec<&str> = original.split_whitespace().collect();
        match words[..] {
            ["cargo", "build", ..] => continue, // the test's own binary
            // Servers: started, and checked by the commands after them.
            ["tern", "cache", ..] => {
                let port: u16 = words[words.iter().position(|w| *w == "-p").unwrap() + 1]
                    .parse()
                    .unwrap();
                if words.contains(&"-Z") {
                    cmd = cmd
                        .replace("crt.pem", tls.server_cert.to_str().unwrap())
                        .replace("key.pem", tls.server_key.to_str().unwrap());
                }
                servers.push(serve(&cmd, ports.addr(port)));
            }
            ["tern", "pacer", "serve", ..] => {
                // On a free port of its own (the README's default, 7400, may be taken; the tour starts two
                // pacers), on the example campaigns.
                let listen: SocketAddr = format!("127.0.0.1:{}", tern_testkit::free_port())
                    .parse()
                    .unwrap();
                cmd = cmd
                    .replace(" campaigns.toml", " examples/campaigns.toml")
                    .replace("/var/lib/tern-pacer", dir.join("journal").to_str().unwrap());
                servers.push(serve(&format!("{cmd} --listen {listen}"), listen));
                let (status, body) = post_banner(listen);
                assert_eq!(status, 200, "{cmd}: {body}");
                if let Some(i) = words.iter().position(|w| *w == "--admin") {
                    let admin: SocketAddr = ports.map(words[i + 1]).parse().unwrap();
                    let (status, body) = http(admin, "GET /campaigns HTTP/1.1", b"");
                    assert_eq!(status, 200, "{body}");
                    assert!(body.contains("spent_micros"), "{body}");
                }
            }
            ["tern", "ping", ..] => {
                let listen = ports.addr(7070);
                servers.push(serve(&cmd, listen));
                let mut s = std::net::TcpStream::connect(listen).unwrap();
                std::io::Write::write_all(&mut s, b"PING\r\n").unwrap();
                let mut reply = [0; 6];
                std::io::Read::read_exact(&mut s, &mut reply).unwrap();
                assert_eq!(&reply, b"PONG\r\n");
                let admin: SocketAddr = ports.map("127.0.0.1:9100").parse().unwrap();
                let (status, metrics) = http(admin, "GET /metrics HTTP/1.1", b"");
                assert_eq!(status, 200);
                assert!(metrics.contains("tern_requests_total"), "{metrics}");
            }
            // Clients and tools: run to the end, shortened where the README runs them long.
            ["memcstat", ..] => {
                let out = shell(&cmd);
                assert!(out.contains("pid"), "{cmd}: {out}");
            }
            ["tern", "load", ..] => {
                cmd = cmd
                    .replace("-d 10", "-d 1")
                    .replace("ca.pem", tls.ca_cert.to_str().unwrap());
                let out = shell(&cmd);
                assert!(out.contains("p99"), "{cmd}: {out}");
            }
            ["tern", "bench", "conn-memory"] => {
                let out = shell(&format!("{cmd} --connections 200"));
                assert!(
                    out.trim_end()
                        .lines()
                        .last()
                        .unwrap()
                        .contains("\"experiment\":\"conn-memory\""),
                    "{out}"
                );
            }
            ["tern", "pacer", "simulate", "--chart", chart] => {
                let chart = dir.join(chart);
                shell(&cmd.replace(
                    &format!("--chart {}", words[4]),
                    &format!("--chart {}", chart.display()),
                ));
                assert!(std::fs::metadata(&chart).unwrap().len() > 1000);
            }
            // The real graphs are downloaded and evaluated at length: tern recommend's own tests run
            // these steps on generated graphs (crates/tern/tests/recommend.rs), and scripts/test.sh fetches
            // the graphs.
            ["bash", "scripts/fetch-graphs.sh"] | ["tern", "recommend", "eval", ..] => continue,
            _ => panic!(
                "the README's short tour has a command this test does not run: {line}\n\
                 (run it here, or say why not)"
            ),
        }
        ran += 1;
    }
    assert!(ran >= 9, "ran {ran} of the tour's commands");
    drop(servers);
    let _ = std::fs::remove_dir_all(&dir);
}

/// One HTTP/1.1 exchange with `Connection: close`: the status and the body.
fn http(addr: SocketAddr, request_line: &str, body: &[u8]) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{request_line}\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let status = reply[9..12].parse().unwrap();
    (status, reply.split_once("\r\n\r\n").unwrap().1.to_owned())
}

fn post_banner(addr: SocketAddr) -> (u16, String) {
    let body = std::fs::read(root().join("examples/openrtb/banner-site.json")).unwrap();
    http(addr, "POST /openrtb2/auction HTTP/1.1", &body)
}

/// The creative ids of examples/campaigns.toml.
fn creative_ids() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("examples/campaigns.toml")).unwrap();
    let file: toml_like::File = toml_like::parse(&text);
    file.creatives
}

/// Just enough of the campaigns file to list its creatives' ids (`id = "..."` under `[[campaign.creative]]`).
mod toml_like {
    pub struct File {
        pub creatives: Vec<String>,
    }

    pub fn parse(text: &str) -> File {
        let mut creatives = Vec::new();
        let mut in_creative = false;
        for line in text.lines().map(str::trim) {
            if line.starts_with('[') {
                in_creative = line == "[[campaign.creative]]";
            } else if let Some(id) = line.strip_prefix("id = \"").filter(|_| in_creative) {
                creatives.push(id.trim_end_matches('"').to_owned());
            }
        }
        File { creatives }
    }
}

#[test]
fn the_examples_readme_commands_give_the_documented_answers() {
    let mut ports = Ports::default();
    let mut pacer = None;
    // "Serve and post": the server, then the loop over every request, each answer checked against the
    // README's table.
    let serve_block = sh_block(EXAMPLES, "## Serve and post");
    let mut script = String::new();
    for line in &serve_block {
        if line.trim_start().starts_with('#') {
            continue;
        }
        let cmd = ports.map(&command(line));
        if cmd.starts_with("cargo build") {
            continue;
        }
        if cmd.starts_with("tern pacer serve") {
            let listen = ports.addr(7400);
            pacer = Some(serve(&format!("{cmd} --listen {listen}"), listen));
            continue;
        }
        script.push_str(&ports.map(line));
        script.push('\n');
    }
    assert!(pacer.is_some(), "the examples start a pacer");
    let output = shell(&script);
    let answers: HashMap<&str, &str> = output
        .split("== examples/openrtb/")
        .skip(1)
        .map(|part| part.split_once('\n').unwrap())
        .collect();
    let creatives = creative_ids();
    let mut rows = 0;
    for row in EXAMPLES.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split(" | ").collect();
        let file = cells[0].trim_start_matches("| ").trim_matches('`');
        if !file.ends_with(".json") {
            continue;
        }
        rows += 1;
        let answer = cells[2];
        let reply = answers
            .get(file)
            .unwrap_or_else(|| panic!("{file} was posted: {output}"));
        let status = &answer[answer.find('`').unwrap() + 1..][..3];
        assert!(
            reply.starts_with(&format!("HTTP/1.1 {status}")),
            "{file}: the README says {answer}, the pacer answered {reply}"
        );
        if let Some(i) = answer.find("X-Tern-No-Bid: ") {
            let reason: String = answer[i..].chars().take_while(|c| *c != '`').collect();
            assert!(
                reply.to_lowercase().contains(&reason.to_lowercase()),
                "{file}: {reason}: {reply}"
            );
        }
        // Every creative the answer names is bid.
        for crid in creatives
            .iter()
            .filter(|c| answer.contains(&format!("`{c}`")))
        {
            assert!(
                reply.contains(&format!("\"crid\":\"{crid}\"")),
                "{file}: {crid}: {reply}"
            );
        }
    }
    assert_eq!(
        rows,
        answers.len(),
        "every request posted has its row: {output}"
    );

    // "Notices, retries, spend": each curl in order, as a person types them, its answer the one its comment
    // gives.
    let mut promised = String::new();
    let mut checked = 0;
    for line in sh_block(EXAMPLES, "## Notices, retries, spend") {
        if let Some(comment) = line.trim_start().strip_prefix('#') {
            promised.push_str(comment);
            continue;
        }
        std::thread::sleep(Duration::from_millis(50));
        let out = shell(&ports.map(line));
        let mut expectations = 0;
        // `{"status":"Applied"}`
        if let Some(json) = promised
            .split_once('{')
            .and_then(|(_, rest)| rest.split_once('}'))
            .map(|(inner, _)| format!("{{{inner}}}"))
        {
            assert!(out.contains(&json), "{line}: promised {json}, got {out}");
            expectations += 1;
        }
        // `-> 400: billing notice refused: ...`: the status, and the body saying why.
        if let Some((_, refusal)) = promised.split_once("-> 4") {
            let (status, why) = refusal.split_once(": ").unwrap();
            let why = why.split([';', '(']).next().unwrap().trim();
            assert!(
                out.starts_with(&format!("HTTP/1.1 4{status}")) && out.contains(why),
                "{line}: promised 4{status}: {why}, got {out}"
            );
            expectations += 1;
        }
        // `204 with X-Tern-No-Bid: DuplicateImpression`
        let with_status = promised.match_indices(" with ").find(|(i, _)| {
            *i >= 3
                && promised.as_bytes()[i - 3..*i]
                    .iter()
                    .all(u8::is_ascii_digit)
        });
        if let Some((i, _)) = with_status {
            let status = &promised[i - 3..i];
            let header: String = promised[i + 6..]
                .chars()
                .take_while(|c| !matches!(c, ';' | ','))
                .collect();
            assert!(
                out.starts_with(&format!("HTTP/1.1 {status}"))
                    && out.to_lowercase().contains(&header.to_lowercase()),
                "{line}: promised {status} with {header}, got {out}"
            );
            expectations += 1;
        }
        // `"spent_micros": 1250`
        if let Some((key, value)) = promised
            .split_once("\": ")
            .map(|(k, v)| (k.rsplit('"').next().unwrap(), v))
        {
            let value: String = value.chars().take_while(char::is_ascii_digit).collect();
            let json: serde_json::Value = serde_json::from_str(&out).unwrap();
            assert_eq!(json[key].to_string(), value, "{line}: {key}: {out}");
            expectations += 1;
        }
        assert!(
            expectations > 0,
            "{line}: no answer documented ({promised})"
        );
        promised.clear();
        checked += 1;
    }
    assert!(checked >= 4, "the notices steps: {checked}");
    drop(pacer);
}
