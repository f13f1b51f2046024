//! memcached's `stats conns`: a line group per open client connection (its peer and listening addresses,
//! its state, the seconds since its last command), numbered by the socket's descriptor as memcached numbers
//! connections. Connections are registered when the runtime opens them and dropped when it closes them
//! (rare events, behind one lock); the time of each one's last command is kept in an array indexed by
//! descriptor and written only when the clock's second changes, so the request path almost never writes a
//! cache line that another loop reads.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Mutex;

use socket2::{SockAddr, SockRef};

pub(crate) struct Conns {
    /// Peer and listening address of each open connection, by descriptor.
    open: Mutex<BTreeMap<u64, Addresses>>,
    /// The clock second of each connection's last command (or of its opening), by descriptor. A connection
    /// whose descriptor is past the end reports 0 seconds.
    last_command: Box<[AtomicU32]>,
}

struct Addresses {
    peer: String,
    listen: String,
}

/// memcached's `tcp:IP:PORT` / `unix:PATH` form of a socket address.
fn describe(addr: std::io::Result<SockAddr>) -> String {
    match addr {
        Ok(addr) => match (addr.as_socket(), addr.as_pathname()) {
            (Some(ip), _) => format!("tcp:{ip}"),
            (None, Some(path)) => format!("unix:{}", path.display()),
            (None, None) => "unix:".to_owned(),
        },
        Err(_) => "unknown".to_owned(),
    }
}

impl Conns {
    /// `max_fds`: descriptors past this are still listed, without a last-command time.
    pub(crate) fn new(max_fds: usize) -> Conns {
        Conns {
            open: Mutex::new(BTreeMap::new()),
            last_command: (0..max_fds).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    pub(crate) fn opened(&self, fd: u64, now: u32) {
        let Ok(raw) = i32::try_from(fd) else {
            return;
        };
        // Safety: the runtime calls this on the loop that owns the open socket `fd`, which stays open for
        // the duration of this call; the borrow does not outlive it.
        let socket = unsafe { BorrowedFd::borrow_raw(raw) };
        let socket = SockRef::from(&socket);
        let addresses = Addresses {
            peer: describe(socket.peer_addr()),
            listen: describe(socket.local_addr()),
        };
        self.command(fd, now);
        self.open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(fd, addresses);
    }

    pub(crate) fn closed(&self, fd: u64) {
        self.open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&fd);
    }

    /// Notes a command on connection `fd` at clock second `now`.
    pub(crate) fn command(&self, fd: u64, now: u32) {
        let slot = usize::try_from(fd)
            .ok()
            .and_then(|fd| self.last_command.get(fd));
        if let Some(slot) = slot {
            if slot.load(Relaxed) != now {
                slot.store(now, Relaxed);
            }
        }
    }

    /// The `stats conns` lines (without `END`); `asking` is the connection running the command, which
    /// memcached shows parsing it.
    pub(crate) fn write(&self, asking: u64, now: u32, out: &mut Vec<u8>) {
        let mut text = String::new();
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        for (&fd, addresses) in open.iter() {
            let last = usize::try_from(fd)
                .ok()
                .and_then(|fd| self.last_command.get(fd))
                .map_or(now, |slot| slot.load(Relaxed));
            let state = if fd == asking {
                "conn_parse_cmd"
            } else {
                "conn_read"
            };
            let _ = write!(
                text,
                "STAT {fd}:addr {}\r\nSTAT {fd}:listen_addr {}\r\nSTAT {fd}:state {state}\r\n\
                 STAT {fd}:secs_since_last_cmd {}\r\n",
                addresses.peer,
                addresses.listen,
                now.saturating_sub(last)
            );
        }
        drop(open);
        out.extend_from_slice(text.as_bytes());
    }
}
