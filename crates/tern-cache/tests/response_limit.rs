//! `-o read_buf_mem_limit`: memcached's per-thread memory for unwritten replies, one response object per
//! command and per key of a get. tern and memcached 1.6.18 with the same limit give the same answers where it
//! runs out: a multi-get past it is refused with memcached's error (its keys up to the limit looked up and
//! counted), a pipeline past it closes the connection without a reply, and smaller ones are answered whole.

mod common;

use std::net::{SocketAddr, TcpStream};

use common::{ask, have, stat, Memcached, Tern};

/// The replies to `input` on a fresh connection, and whether the server closed it (the harness's exchange:
/// its closing sentinel is an `mg` miss, one response object and one get miss more on both servers).
fn replies(addr: SocketAddr, input: &[u8]) -> (Vec<u8>, bool) {
    common::exchange(&mut TcpStream::connect(addr).unwrap(), input)
}

fn counter(addr: SocketAddr, name: &str) -> u64 {
    stat(addr, "", name).unwrap().parse().unwrap()
}

#[test]
fn replies_past_the_response_memory_are_refused_as_memcached_refuses_them() {
    if !have("memcached") {
        return;
    }
    // 1 MB over 32 threads: two 16 KB buffers each, one for input, one of 13 response objects.
    let flags = ["-o", "read_buf_mem_limit=1", "-R", "500", "-t", "32"];
    let memcached = Memcached::start(&flags);
    // The harness gives tern `-t 2`: the thread count is set after parsing.
    let tern = Tern::start_tweaked(&flags[..4], false, |s| s.threads = 32);
    let get = |keys: usize| format!("get {}\r\n", vec!["foo"; keys].join(" "));
    let mgs = |count: usize| "mg foo v\r\n".repeat(count);
    let mut answers = Vec::new();
    for addr in [memcached.addr, tern.addr] {
        assert_eq!(
            ask(addr, "stats settings\r\n")
                .lines()
                .find(|l| l.starts_with("STAT read_buf_mem_limit "))
                .unwrap(),
            "STAT read_buf_mem_limit 1048576"
        );
        let misses = counter(addr, "get_misses");
        let fits = replies(addr, get(13).as_bytes());
        let after_fits = counter(addr, "get_misses");
        let refused = replies(addr, get(500).as_bytes());
        let after_refused = counter(addr, "get_misses");
        let few = replies(addr, mgs(10).as_bytes());
        let many = replies(addr, mgs(500).as_bytes());
        let oom = counter(addr, "response_obj_oom");
        answers.push((
            fits,
            after_fits - misses,
            refused,
            after_refused - after_fits,
            few,
            many,
            oom,
        ));
    }
    assert_eq!(answers[1], answers[0]);
    let (fits, fit_misses, refused, refused_misses, few, many, oom) = &answers[1];
    assert_eq!(fits, &(b"END\r\n".to_vec(), false));
    // 13 keys, and the sentinels of the exchange and of the `stat` reading (`mg` misses).
    assert_eq!(*fit_misses, 15);
    assert_eq!(
        refused,
        &(
            b"SERVER_ERROR out of memory writing get response\r\n".to_vec(),
            false
        )
    );
    // The keys it had response objects for were looked up (and the two sentinels).
    assert_eq!(*refused_misses, 15);
    assert_eq!(few, &(b"EN\r\n".repeat(10), false));
    assert_eq!(many, &(Vec::new(), true));
    assert_eq!(*oom, 2);
}

/// Without the option nothing is refused: the same multi-get and pipeline are answered whole.
#[test]
fn without_the_limit_everything_is_answered() {
    let tern = Tern::start_tweaked(&[], false, |s| s.threads = 32);
    let (reply, closed) = replies(
        tern.addr,
        format!("get {}\r\n", vec!["foo"; 500].join(" ")).as_bytes(),
    );
    assert_eq!((reply.as_slice(), closed), (&b"END\r\n"[..], false));
    let (reply, closed) = replies(tern.addr, "mg foo v\r\n".repeat(500).as_bytes());
    assert_eq!((reply, closed), (b"EN\r\n".repeat(500), false));
    assert_eq!(counter(tern.addr, "response_obj_oom"), 0);
}
