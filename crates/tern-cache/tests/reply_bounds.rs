//! Replies the cache must bound without being able to stream them: a UDP get (built whole, since its header
//! counts its datagrams) and a multi-get cut short by a key over 250 bytes (its values are never sent). In a
//! binary of its own: it counts hits, and counters are process-wide.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use common::{ask, exchange, stat, Tern};

/// memcached's UDP frame header (request id, sequence number, datagram count, reserved), then the payload.
fn udp_request(id: u16, payload: &[u8]) -> Vec<u8> {
    let mut d = Vec::new();
    for field in [id, 0, 1, 0] {
        d.extend_from_slice(&field.to_be_bytes());
    }
    d.extend_from_slice(payload);
    d
}

/// A client socket whose receive buffer holds a whole multi-megabyte reply sent at once (the kernel
/// would drop what overflows the default buffer: UDP has no flow control).
fn udp_client() -> UdpSocket {
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    let size: libc::c_int = 32 << 20;
    for option in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: a valid socket and a pointer to an int of the size given.
        let ok = unsafe {
            libc::setsockopt(
                client.as_raw_fd(),
                libc::SOL_SOCKET,
                option,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        } == 0;
        if ok {
            break;
        }
    }
    client
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    client
}

/// Sends one request datagram and collects the reply datagrams until a quiet spell.
fn udp_exchange(client: &UdpSocket, server: SocketAddr, datagram: &[u8]) -> Vec<Vec<u8>> {
    client.send_to(datagram, server).unwrap();
    let mut datagrams = Vec::new();
    let mut buf = [0u8; 2048];
    while let Ok((n, _)) = client.recv_from(&mut buf) {
        datagrams.push(buf[..n].to_vec());
    }
    datagrams
}

#[test]
fn a_udp_get_past_the_reply_bound_is_refused_and_a_long_key_multiget_copies_nothing() {
    let tern = Tern::start_udp(&["-m", "64"]);
    let value = "v".repeat(1_000_000);
    assert_eq!(
        ask(tern.addr, &format!("set big 0 0 1000000\r\n{value}\r\n")),
        "STORED\r\n"
    );
    let client = udp_client();
    let udp = tern.udp.unwrap();
    // Two values fit one UDP reply (bounded at 4 MiB with the default -I): every datagram arrives.
    let datagrams = udp_exchange(&client, udp, &udp_request(1, b"get big big\r\n"));
    let payload: Vec<u8> = datagrams.iter().flat_map(|d| d[8..].to_vec()).collect();
    assert_eq!(
        payload.len(),
        2 * (1_000_000 + 2 + "VALUE big 0 1000000\r\n".len()) + 5
    );
    // Five do not: memcached's answer to a get whose reply it cannot hold, in one datagram.
    let hits_before = stat(tern.addr, "", "get_hits").unwrap();
    let datagrams = udp_exchange(
        &client,
        udp,
        &udp_request(2, b"get big big big big big\r\n"),
    );
    assert_eq!(datagrams.len(), 1, "{datagrams:?}");
    assert_eq!(
        &datagrams[0][8..],
        b"SERVER_ERROR out of memory writing get response\r\n"
    );
    // The keys were still looked up and counted, as memcached counts them.
    let hits_after: u64 = stat(tern.addr, "", "get_hits").unwrap().parse().unwrap();
    assert_eq!(hits_after, hits_before.parse::<u64>().unwrap() + 5);
    // A TCP multi-get naming the value 100,000 times, then a key over 250 bytes: memcached fetches and counts
    // every key and answers the error; nothing of the 100 GB of values is built.
    let request = format!("get {} {}\r\n", "big ".repeat(100_000), "k".repeat(251));
    let mut conn = tern.connect();
    let (reply, _) = exchange(&mut conn, request.as_bytes());
    assert_eq!(reply, b"CLIENT_ERROR bad command line format\r\n");
    let hits: u64 = stat(tern.addr, "", "get_hits").unwrap().parse().unwrap();
    assert_eq!(hits, hits_after + 100_000);
}
