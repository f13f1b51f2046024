//! A served address belongs to one server: its own loops share it, any other server is refused.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use tern_ping::Ping;
use tern_runtime::{AddressInUse, RunningServer, RuntimeConfig, Server, Transport};

fn config(tweak: impl FnOnce(&mut RuntimeConfig)) -> RuntimeConfig {
    let mut cfg = RuntimeConfig {
        io_threads: 2,
        ..RuntimeConfig::default()
    };
    tweak(&mut cfg);
    cfg
}

fn start(cfg: RuntimeConfig) -> std::io::Result<RunningServer> {
    Server::new(cfg, Ping).start()
}

fn pings(addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return false;
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"PING\r\n").unwrap();
    let mut reply = [0u8; 6];
    s.read_exact(&mut reply).is_ok() && &reply == b"PONG\r\n"
}

fn refused(result: std::io::Result<RunningServer>) -> AddressInUse {
    match result {
        Ok(_) => panic!("a second server started on a served address"),
        Err(e) => {
            assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse, "{e}");
            AddressInUse::of(&e).expect("the refused address").clone()
        }
    }
}

#[test]
fn a_second_server_on_a_served_tcp_or_udp_address_is_refused() {
    // Port 0 with several loops: they share the port the kernel chose.
    let first = start(config(|c| {
        c.listen = Some("127.0.0.1:0".parse().unwrap());
        c.udp = Some("127.0.0.1:0".parse().unwrap());
    }))
    .unwrap();
    let tcp = first.local_addr().unwrap();
    let udp = first.udp_addr().unwrap();
    assert!(pings(tcp));

    let taken = refused(start(config(|c| c.listen = Some(tcp))));
    assert_eq!(
        (taken.transport, taken.addr, taken.by_tern),
        (Transport::Tcp, tcp, true)
    );
    let taken = refused(start(config(|c| c.udp = Some(udp))));
    assert_eq!(
        (taken.transport, taken.addr, taken.by_tern),
        (Transport::Udp, udp, true)
    );
    // Also as a second address, and in acceptor mode.
    let free = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    refused(start(config(|c| {
        c.listen = Some(free);
        c.listen_also = vec![tcp];
    })));
    refused(start(config(|c| {
        c.listen = Some(tcp);
        c.spread = tern_runtime::Spread::Acceptor;
    })));

    // The first server still serves every client, on both loops.
    for _ in 0..8 {
        assert!(pings(tcp));
    }
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    client.send_to(b"PING\r\n", udp).unwrap();
    let mut buf = [0u8; 64];
    let (n, _) = client.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"PONG\r\n");

    // Once it has stopped, the address can be served again.
    first.shutdown();
    first.join();
    let again = start(config(|c| c.listen = Some(tcp))).unwrap();
    assert!(pings(tcp));
    again.shutdown();
    again.join();
}

#[test]
fn an_address_another_program_serves_is_refused() {
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = other.local_addr().unwrap();
    let taken = refused(start(config(|c| c.listen = Some(addr))));
    assert_eq!((taken.addr, taken.by_tern), (addr, false));
    let other_udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let udp = other_udp.local_addr().unwrap();
    let taken = refused(start(config(|c| c.udp = Some(udp))));
    assert_eq!((taken.transport, taken.by_tern), (Transport::Udp, false));
}

#[test]
fn a_unix_socket_a_live_server_holds_is_refused_and_a_stale_one_replaced() {
    let dir = std::env::temp_dir().join(format!("tern-listeners-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ping.sock");
    let _ = std::fs::remove_file(&path);
    let first = start(config(|c| c.unix = Some(path.clone()))).unwrap();
    let err = start(config(|c| c.unix = Some(path.clone())))
        .err()
        .expect("a second server on a live socket path is refused");
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse, "{err}");
    // The first one still has its clients.
    let mut s = std::os::unix::net::UnixStream::connect(&path).unwrap();
    s.write_all(b"PING\r\n").unwrap();
    let mut reply = [0u8; 6];
    s.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"PONG\r\n");
    drop(s);
    // A socket file nobody accepts on (a server that died) is replaced.
    first.shutdown();
    first.join();
    drop(std::os::unix::net::UnixListener::bind(dir.join("stale.sock")).unwrap());
    let stale = dir.join("stale.sock");
    assert!(stale.exists());
    let again = start(config(|c| c.unix = Some(stale.clone()))).unwrap();
    std::os::unix::net::UnixStream::connect(&stale).unwrap();
    again.shutdown();
    again.join();
    let _ = std::fs::remove_dir_all(&dir);
}
