//! A port something else serves is refused by every tern listener: tern cache with memcached's message and
//! exit code (compared with a second memcached on the same port), the pacer and ping with an error naming
//! the address. Real processes; each one started here is killed on return.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use tern_testkit::free_port;

const TERN: &str = env!("CARGO_BIN_EXE_tern");

/// A child process, killed when dropped unless taken.
struct Killed(Option<Child>);

impl Drop for Killed {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn serving(cmd: &mut Command, port: u16) -> Killed {
    let child = Killed(Some(
        cmd.stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("server starts"),
    ));
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "nothing serves {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// Runs a server that must refuse to start; its exit code and standard error.
fn refused(cmd: &mut Command) -> (Option<i32>, String) {
    let mut child = Killed(Some(
        cmd.stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("runs"),
    ));
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.0.as_mut().unwrap().try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "{cmd:?} started on a served port"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out: Output = child.0.take().unwrap().wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn memcached(args: &[&str]) -> Command {
    let mut cmd = Command::new("memcached");
    cmd.args(["-u", "root", "-U", "0"]).args(args);
    cmd
}

fn tern(args: &[&str]) -> Command {
    let mut cmd = Command::new(TERN);
    cmd.args(args);
    cmd
}

#[test]
fn tern_cache_refuses_a_served_port_as_memcached_does() {
    if Command::new("memcached").arg("-h").output().is_err() {
        assert!(
            std::env::var_os("CI").is_none(),
            "memcached is not installed"
        );
        return;
    }
    // Held by memcached: a second memcached and tern cache give the same words and exit code.
    let port = free_port().to_string();
    let _memcached = serving(
        &mut memcached(&["-l", "127.0.0.1", "-p", &port]),
        port.parse().unwrap(),
    );
    let theirs = refused(&mut memcached(&["-l", "127.0.0.1", "-p", &port]));
    let ours = refused(&mut tern(&[
        "cache",
        "-l",
        "127.0.0.1",
        "-p",
        &port,
        "-U",
        "0",
    ]));
    assert_eq!(theirs.0, Some(71), "{theirs:?}");
    assert_eq!(ours.0, theirs.0);
    assert_eq!(ours.1.trim(), theirs.1.trim());

    // Held by tern cache, without -l: memcached words it by port.
    let port = free_port().to_string();
    let _first = serving(
        &mut tern(&["cache", "-p", &port, "-U", "0"]),
        port.parse().unwrap(),
    );
    let ours = refused(&mut tern(&["cache", "-p", &port, "-U", "0"]));
    assert_eq!(ours.0, Some(71));
    assert_eq!(
        ours.1.trim(),
        format!("failed to listen on TCP port {port}: Address already in use")
    );
    // The same port by UDP.
    let udp = free_port().to_string();
    let tcp = free_port().to_string();
    let _udp_first = serving(
        &mut tern(&["cache", "-p", &tcp, "-U", &udp]),
        tcp.parse().unwrap(),
    );
    let other = free_port().to_string();
    let ours = refused(&mut tern(&["cache", "-p", &other, "-U", &udp]));
    assert_eq!(ours.0, Some(71));
    assert_eq!(
        ours.1.trim(),
        format!("failed to listen on UDP port {udp}: Address already in use")
    );
}

#[test]
fn ping_pacer_and_admin_ports_that_are_served_are_refused() {
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap().to_string();
    let (code, err) = refused(&mut tern(&["ping", "--listen", &addr]));
    assert_ne!(code, Some(0));
    assert!(
        err.contains(&addr) && err.contains("already served"),
        "{err}"
    );

    let campaigns = concat!(env!("CARGO_MANIFEST_DIR"), "/src/default-campaigns.toml");
    let dir = std::env::temp_dir().join(format!("tern-listen-refused-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (code, err) = refused(&mut tern(&[
        "pacer",
        "serve",
        "--config",
        campaigns,
        "--journal-dir",
        dir.to_str().unwrap(),
        "--listen",
        &addr,
    ]));
    assert_ne!(code, Some(0));
    assert!(err.contains(&addr), "{err}");

    // The admin endpoint of a cache, on a served port.
    let port = free_port().to_string();
    let (code, err) = refused(&mut tern(&[
        "cache", "-p", &port, "-U", "0", "--admin", &addr,
    ]));
    assert_ne!(code, Some(0));
    assert!(err.contains(&addr), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
