//! How test harnesses start memcached on free ports (memcached's own `t/lib/MemcachedTest.pm` does this): `-p -1`
//! and `-U -1` ask for any free port, and `$MEMCACHED_PORT_FILENAME` names a file where the server writes the
//! ports it got. tern cache and memcached are started the same way here, their files compared, and the ports
//! tern wrote are used (TCP and UDP). Real processes; each one started here is killed on return.

use std::net::UdpSocket;
use std::process::Command;
use std::time::Duration;

use tern_testkit::{start_with_port_file, stats_reply};

const TERN: &str = env!("CARGO_BIN_EXE_tern");

fn memcached(args: &[&str]) -> Command {
    let mut cmd = Command::new("memcached");
    cmd.args(["-u", "root"]).args(args);
    cmd
}

fn tern_cache(args: &[&str]) -> Command {
    let mut cmd = Command::new(TERN);
    cmd.arg("cache").args(args);
    cmd
}

/// `stats settings`' `tcpport` and `udpport` lines, asked over TCP.
fn port_settings(port: u16) -> Vec<String> {
    let mut conn = tern_testkit::connect(([127, 0, 0, 1], port).into());
    stats_reply(&mut conn, "settings")
        .lines()
        .filter(|l| l.starts_with("STAT tcpport ") || l.starts_with("STAT udpport "))
        .map(str::to_owned)
        .collect()
}

#[test]
fn free_ports_are_written_where_memcacheds_harness_reads_them() {
    if Command::new("memcached").arg("-h").output().is_err() {
        assert!(
            std::env::var_os("CI").is_none(),
            "memcached is not installed"
        );
        return;
    }
    let both = ["-l", "127.0.0.1", "-p", "-1", "-U", "-1"];
    let (_theirs, their_lines) = start_with_port_file(memcached(&both), "memcached");
    let (_ours, our_lines) = start_with_port_file(tern_cache(&both), "tern");
    let (theirs, ours) = (&their_lines, &our_lines);
    let kinds = |ports: &[(String, u16)]| ports.iter().map(|p| p.0.clone()).collect::<Vec<_>>();
    assert_eq!(kinds(theirs), ["TCP INET", "UDP INET"], "{their_lines:?}");
    assert_eq!(kinds(ours), kinds(theirs), "{our_lines:?}");
    assert!(ours.iter().all(|p| p.1 != 0), "{our_lines:?}");
    let (tcp, udp) = (ours[0].1, ours[1].1);
    // Both report the flags as given.
    assert_eq!(port_settings(tcp), port_settings(theirs[0].1));
    assert_eq!(port_settings(tcp), ["STAT tcpport -1", "STAT udpport -1"]);
    // The UDP port answers a datagram (memcached's frame header: request id 7, sequence 0, 1 datagram).
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    socket
        .send_to(
            b"\x00\x07\x00\x00\x00\x01\x00\x00version\r\n",
            ("127.0.0.1", udp),
        )
        .unwrap();
    let mut reply = [0u8; 1500];
    let n = socket.recv(&mut reply).unwrap();
    assert_eq!(&reply[..2], b"\x00\x07");
    assert!(reply[8..n].starts_with(b"VERSION "), "{:?}", &reply[..n]);

    // TCP off, UDP on any port: one UDP line from each.
    let udp_only = ["-l", "127.0.0.1", "-p", "0", "-U", "-1"];
    let (_theirs, their_lines) = start_with_port_file(memcached(&udp_only), "memcached-udp");
    let (_ours, our_lines) = start_with_port_file(tern_cache(&udp_only), "tern-udp");
    assert_eq!(kinds(&their_lines), ["UDP INET"]);
    assert_eq!(kinds(&our_lines), ["UDP INET"]);
}

#[test]
fn ports_outside_memcacheds_range_are_refused() {
    for bad in ["-2", "65536", "x"] {
        let out = tern_cache(&["-p", bad]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "-p {bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("-p"), "-p {bad}: {err}");
    }
}
