//! The io_uring floor of a memcached server's CPU cost per request (issue 3's io_uring question):
//! the least a server can spend answering `memcaslap`'s one-request-per-connection load when its
//! socket I/O goes through io_uring with batched submission, deferred task running and a single
//! issuer, and its own work is close to nothing (`get` and `set` on a `HashMap`, a minimal parser).
//! It is a measuring instrument, not a server: it speaks only `get` and `set`, keeps no limits and
//! stores without bound. `bench/cpu_split.py --uring-floor PATH` runs it beside memcached and tern
//! cache under the same load.
//!
//! `cargo run --release -p tern-bench --example uring_floor -- PORT [--no-defer]`

use std::collections::HashMap;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use anyhow::Context as _;
use io_uring::{cqueue, opcode, squeue, types, IoUring};

/// The completion's operation, in the low byte of its user data; the connection's slot above it.
const ACCEPT: u64 = 1;
const RECV: u64 = 2;
const SEND: u64 = 3;

struct Conn {
    socket: OwnedFd,
    recv_buf: Box<[u8]>,
    /// Bytes of an incomplete command, kept until the rest arrives.
    partial: Vec<u8>,
    /// Replies composed while a send is in flight.
    replies: Vec<u8>,
    /// The bytes of the send in flight; the kernel reads them until its completion.
    sending: Vec<u8>,
    /// The peer closed while a send was in flight: dropped when the send completes, since the
    /// kernel may read `sending` until then.
    closing: bool,
}

fn user_data(slot: usize, op: u64) -> u64 {
    ((slot as u64) << 8) | op
}

impl Conn {
    fn recv(&mut self, slot: usize) -> squeue::Entry {
        let len = u32::try_from(self.recv_buf.len()).unwrap_or(u32::MAX);
        opcode::Recv::new(
            types::Fd(self.socket.as_raw_fd()),
            self.recv_buf.as_mut_ptr(),
            len,
        )
        .build()
        .user_data(user_data(slot, RECV))
    }

    /// Starts sending the composed replies unless a send is in flight (its completion does).
    fn send(&mut self, slot: usize) -> Option<squeue::Entry> {
        if !self.sending.is_empty() || self.replies.is_empty() {
            return None;
        }
        std::mem::swap(&mut self.sending, &mut self.replies);
        let len = u32::try_from(self.sending.len()).unwrap_or(u32::MAX);
        Some(
            opcode::Send::new(
                types::Fd(self.socket.as_raw_fd()),
                self.sending.as_ptr(),
                len,
            )
            .build()
            .user_data(user_data(slot, SEND)),
        )
    }
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let port: u16 = args
        .next()
        .context("usage: uring_floor PORT [--no-defer]")?
        .parse()
        .context("PORT must be a port number")?;
    let defer = args.next().as_deref() != Some("--no-defer");
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    let mut builder = IoUring::builder();
    if defer {
        // Completions' task work runs only when this thread asks for events, in one batch.
        builder
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_coop_taskrun();
    }
    let mut ring = builder.setup_cqsize(4096).build(1024)?;
    let mut conns: Vec<Option<Conn>> = Vec::new();
    let mut store: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    let mut to_submit = vec![opcode::AcceptMulti::new(types::Fd(listener.as_raw_fd()))
        .build()
        .user_data(ACCEPT)];
    loop {
        {
            let mut submission = ring.submission();
            for entry in to_submit.drain(..) {
                // Safety: every buffer an entry points at is owned by a `Conn`, which stays in
                // `conns` (boxed or in a Vec not touched meanwhile) until its operations complete.
                unsafe { submission.push(&entry) }.context("submission queue full")?;
            }
        }
        ring.submit_and_wait(1)?;
        let completions: Vec<(u64, i32)> = ring
            .completion()
            .map(|c: cqueue::Entry| (c.user_data(), c.result()))
            .collect();
        for (data, result) in completions {
            let slot = usize::try_from(data >> 8)?;
            match data & 0xff {
                ACCEPT if result >= 0 => {
                    // Safety: a successful accept completion's result is a new descriptor we own.
                    let socket = unsafe { OwnedFd::from_raw_fd(result) };
                    let slot = conns.iter().position(Option::is_none).unwrap_or_else(|| {
                        conns.push(None);
                        conns.len() - 1
                    });
                    let conn = conns[slot].insert(Conn {
                        socket,
                        recv_buf: vec![0; 16 * 1024].into_boxed_slice(),
                        partial: Vec::new(),
                        replies: Vec::new(),
                        sending: Vec::new(),
                        closing: false,
                    });
                    to_submit.push(conn.recv(slot));
                }
                RECV => {
                    let Some(conn) = conns.get_mut(slot).and_then(Option::as_mut) else {
                        continue;
                    };
                    let Ok(len @ 1..) = usize::try_from(result) else {
                        // End of stream or an error.
                        if conn.sending.is_empty() {
                            conns[slot] = None;
                        } else {
                            conn.closing = true;
                        }
                        continue;
                    };
                    conn.partial.extend_from_slice(&conn.recv_buf[..len]);
                    let used = answer(&conn.partial, &mut conn.replies, &mut store);
                    conn.partial.drain(..used);
                    to_submit.extend(conn.send(slot));
                    to_submit.push(conn.recv(slot));
                }
                SEND => {
                    let Some(conn) = conns.get_mut(slot).and_then(Option::as_mut) else {
                        continue;
                    };
                    if conn.closing {
                        conns[slot] = None;
                        continue;
                    }
                    let sent = usize::try_from(result).unwrap_or(0);
                    // A short send (never seen with these small replies) goes out again.
                    let rest = conn.sending.split_off(sent.min(conn.sending.len()));
                    conn.sending.clear();
                    conn.replies.splice(0..0, rest);
                    to_submit.extend(conn.send(slot));
                }
                _ => {}
            }
        }
    }
}

/// Answers the complete `get` and `set` commands at the start of `input`; returns the bytes used.
fn answer(input: &[u8], replies: &mut Vec<u8>, store: &mut HashMap<Vec<u8>, Vec<u8>>) -> usize {
    let mut used = 0;
    while let Some(end) = input[used..].windows(2).position(|w| w == b"\r\n") {
        let line = &input[used..used + end];
        let mut words = line.split(|&b| b == b' ');
        match (words.next(), words.next()) {
            (Some(b"get"), Some(first)) => {
                for key in std::iter::once(first).chain(words) {
                    if let Some(value) = store.get(key) {
                        replies.extend_from_slice(b"VALUE ");
                        replies.extend_from_slice(key);
                        replies.extend_from_slice(format!(" 0 {}\r\n", value.len()).as_bytes());
                        replies.extend_from_slice(value);
                        replies.extend_from_slice(b"\r\n");
                    }
                }
                replies.extend_from_slice(b"END\r\n");
                used += end + 2;
            }
            (Some(b"set"), Some(key)) => {
                let Some(len) = words
                    .nth(2)
                    .and_then(|n| std::str::from_utf8(n).ok())
                    .and_then(|n| n.parse::<usize>().ok())
                else {
                    replies.extend_from_slice(b"CLIENT_ERROR bad command line format\r\n");
                    used += end + 2;
                    continue;
                };
                let data = used + end + 2;
                if input.len() < data + len + 2 {
                    break;
                }
                store.insert(key.to_vec(), input[data..data + len].to_vec());
                replies.extend_from_slice(b"STORED\r\n");
                used = data + len + 2;
            }
            _ => {
                replies.extend_from_slice(b"ERROR\r\n");
                used += end + 2;
            }
        }
    }
    used
}
