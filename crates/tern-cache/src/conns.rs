//! memcached's `stats conns`: a line group per listening socket, UDP socket and open client connection (its
//! peer and listening addresses, its state, the seconds since its last command), numbered by the socket's
//! descriptor as memcached numbers connections. Connections are registered when the runtime opens them and
//! dropped when it closes them (rare events, behind one lock); the time of each one's last command and
//! whether it is inside a request of known length are kept in arrays indexed by descriptor and written only
//! when they change, so the request path almost never writes a cache line that another loop reads.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::Mutex;

use socket2::{SockAddr, SockRef};
use tern_runtime::{ServerSocket, SocketKind};

use crate::clock;

pub(crate) struct Conns {
    /// Peer and listening address of each open connection, by descriptor.
    open: Mutex<BTreeMap<u64, Addresses>>,
    /// The clock second of each connection's last command (or of its opening), by descriptor. A connection
    /// whose descriptor is past the end reports 0 seconds.
    last_command: Box<[AtomicU32]>,
    /// By descriptor: the connection holds a request whose length is known but whose bytes have not all
    /// arrived (memcached's `conn_nread`: reading a value or a binary request's body).
    receiving: Box<[AtomicBool]>,
}

struct Addresses {
    peer: String,
    listen: String,
}

/// memcached's `tcp:IP:PORT` / `unix:PATH` form of a socket address; a Unix client's unnamed end is
/// `?:<AF 0>`, as memcached prints it (it has no address for such a client).
fn describe(addr: std::io::Result<SockAddr>) -> String {
    match addr {
        Ok(addr) => match (addr.as_socket(), addr.as_pathname()) {
            (Some(ip), _) => format!("tcp:{ip}"),
            (None, Some(path)) => format!("unix:{}", path.display()),
            (None, None) => "?:<AF 0>".to_owned(),
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
            receiving: (0..max_fds).map(|_| AtomicBool::new(false)).collect(),
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

    /// Notes that connection `fd` holds an incomplete request, of known length or not.
    pub(crate) fn incomplete(&self, fd: u64, length_known: bool) {
        if let Some(flag) = self.receiving_flag(fd) {
            flag.store(length_known, Relaxed);
        }
    }

    fn receiving_flag(&self, fd: u64) -> Option<&AtomicBool> {
        usize::try_from(fd)
            .ok()
            .and_then(|fd| self.receiving.get(fd))
    }

    pub(crate) fn closed(&self, fd: u64) {
        self.incomplete(fd, false);
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
        if let Some(flag) = self.receiving_flag(fd) {
            if flag.load(Relaxed) {
                flag.store(false, Relaxed);
            }
        }
    }

    /// The `stats conns` lines (without `END`): the server's sockets and the client connections, by
    /// descriptor; `asking` is the connection running the command, which memcached shows parsing it.
    pub(crate) fn write(&self, asking: u64, now: u32, sockets: &[ServerSocket], out: &mut Vec<u8>) {
        let mut text = String::new();
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let since_last = |fd: u64| {
            let last = usize::try_from(fd)
                .ok()
                .and_then(|fd| self.last_command.get(fd))
                .map_or(now, |slot| slot.load(Relaxed));
            // A socket that never had a command counts from the start, as memcached's.
            now.saturating_sub(if last == 0 { clock::START } else { last })
        };
        let mut sockets = sockets.iter().peekable();
        let mut clients = open.iter().peekable();
        loop {
            let socket_first = match (sockets.peek(), clients.peek()) {
                (Some(s), Some((&fd, _))) => (s.fd as u64) < fd,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            if socket_first {
                let Some(socket) = sockets.next() else { break };
                let fd = socket.fd as u64;
                let (addr, state) = match &socket.kind {
                    SocketKind::TcpListener(addr) => (format!("tcp:{addr}"), "conn_listening"),
                    SocketKind::UnixListener(path) => {
                        (format!("unix:{}", path.display()), "conn_listening")
                    }
                    SocketKind::Udp(addr) => {
                        let _ = write!(text, "STAT {fd}:UDP UDP\r\n");
                        (format!("udp:{addr}"), "conn_read")
                    }
                };
                let _ = write!(
                    text,
                    "STAT {fd}:addr {addr}\r\nSTAT {fd}:state {state}\r\n\
                     STAT {fd}:secs_since_last_cmd {}\r\n",
                    since_last(fd)
                );
            } else {
                let Some((&fd, addresses)) = clients.next() else {
                    break;
                };
                let state = if fd == asking {
                    "conn_parse_cmd"
                } else if self.receiving_flag(fd).is_some_and(|f| f.load(Relaxed)) {
                    "conn_nread"
                } else {
                    "conn_read"
                };
                let _ = write!(
                    text,
                    "STAT {fd}:addr {}\r\nSTAT {fd}:listen_addr {}\r\nSTAT {fd}:state {state}\r\n\
                     STAT {fd}:secs_since_last_cmd {}\r\n",
                    addresses.peer,
                    addresses.listen,
                    since_last(fd)
                );
            }
        }
        drop(open);
        out.extend_from_slice(text.as_bytes());
    }
}
