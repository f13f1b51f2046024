//! Starting a service: binding sockets, one thread per I/O loop (plus the acceptor thread in `acceptor`
//! mode), the control handle, and graceful shutdown on a signal.

use std::io;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::thread::JoinHandle;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::sync::mpsc;

use crate::acceptor::run_acceptor;
use crate::config::{RuntimeConfig, Spread};
use crate::control::{ServerControl, ServerSocket, SocketKind};
use crate::io_loop::{run_loop_thread, LoopSetup};
use crate::service::Service;
use crate::tls::Tls;

/// Descriptors beyond `max_connections` the reserved table leaves room for: listeners, poll sets, wakers,
/// outbound connections, files.
const SPARE_DESCRIPTORS: usize = 256;

/// Grows the process's descriptor table now, to hold `max_connections` sockets and some spare, so that
/// accepting never grows it later. Why: Linux grows the table by doubling, and in a process with more than
/// one thread each growth waits for an RCU grace period (`expand_fdtable` calls `synchronize_rcu`); the
/// accepting I/O loop then sleeps in `accept4` and its other clients wait (measured here: 6-12 ms per
/// growth, six growths on the way to 3,000 connections). The kernel never shrinks the table, so one `dup2`
/// to the highest number needed, closed at once, reserves it for the process's life; it costs 8 bytes and
/// 2 bits per descriptor (about 160 KB for 20,000). Capped at the soft `RLIMIT_NOFILE`, past which no
/// descriptor can be opened anyway.
fn reserve_descriptor_table(max_connections: usize) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return;
    }
    let wanted = max_connections.saturating_add(SPARE_DESCRIPTORS) as u64;
    let Ok(highest) = libc::c_int::try_from(wanted.min(limit.rlim_cur).saturating_sub(1)) else {
        return;
    };
    let Ok(any) = std::fs::File::open("/dev/null") else {
        return;
    };
    // SAFETY: fcntl(F_DUPFD) makes a new descriptor numbered `highest` or above (the lowest free one there),
    // which nothing else knows of and which is closed at once; `any` stays open throughout.
    unsafe {
        let spare = libc::fcntl(any.as_raw_fd(), libc::F_DUPFD_CLOEXEC, highest);
        if spare >= 0 {
            libc::close(spare);
        }
    }
}

/// A service bound to a configuration, ready to start.
pub struct Server<S: Service> {
    config: RuntimeConfig,
    service: Arc<S>,
    tls: Option<Tls>,
    /// TCP addresses served without TLS when `tls` is set (memcached's `notls:` listeners).
    plain: Vec<SocketAddr>,
}

/// A started server: its addresses, controls and threads.
pub struct RunningServer {
    control: ServerControl,
    local_addrs: Vec<SocketAddr>,
    udp_addrs: Vec<SocketAddr>,
    threads: Vec<JoinHandle<()>>,
    executor: tern_executor::Executor,
    signals: Signals,
    /// What SIGHUP does (see [`RunningServer::on_hangup`]).
    hangup: Option<Box<dyn Fn() + Send>>,
    /// Held for the server's life: no other process can claim its addresses (see [`AddressClaim`]).
    _claims: Vec<AddressClaim>,
    /// Reports the server's open connections as `tern_service_connections_open{service}` while it runs.
    _connections_gauge: Option<tern_metrics::CollectorGuard>,
}

/// What `run_until_signal` waits on, made in `start` before any loop accepts: under descriptor exhaustion the
/// loops could otherwise take every descriptor first, and the server would fail to set up its signal handling.
struct Signals {
    /// Taken on drop and shut down in the background: a server may be dropped inside an async context (tests),
    /// where dropping a runtime in place panics.
    runtime: Option<tokio::runtime::Runtime>,
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    usr1: tokio::signal::unix::Signal,
    /// Taken so that SIGHUP never ends the process (its default), as a daemon's operators expect.
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> io::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let _guard = runtime.enter();
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            // memcached's graceful stop signal.
            usr1: signal(SignalKind::user_defined1())?,
            hup: signal(SignalKind::hangup())?,
            runtime: Some(runtime),
        })
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

fn tcp_listener(addr: SocketAddr, reuseport: bool, backlog: u32) -> io::Result<TcpListener> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    sock.set_reuse_address(true)?;
    if reuseport {
        sock.set_reuse_port(true)?;
    }
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    sock.listen(backlog.min(i32::MAX as u32) as i32)?;
    Ok(sock.into())
}

/// The TCP listeners and UDP sockets the server serves on.
fn server_sockets(
    per_loop: &[Vec<(TcpListener, Option<Tls>)>],
    acceptor: &[(TcpListener, Option<Tls>)],
    udp: &[Vec<UdpSocket>],
) -> Vec<ServerSocket> {
    use std::os::fd::AsRawFd;
    let tcp = per_loop
        .iter()
        .flatten()
        .chain(acceptor)
        .filter_map(|(l, _)| {
            Some(ServerSocket {
                fd: l.as_raw_fd(),
                kind: SocketKind::TcpListener(l.local_addr().ok()?),
            })
        });
    let udp = udp.iter().flatten().filter_map(|s| {
        Some(ServerSocket {
            fd: s.as_raw_fd(),
            kind: SocketKind::Udp(s.local_addr().ok()?),
        })
    });
    tcp.chain(udp).collect()
}

/// Binds a Unix listener at `path` (replacing a stale socket file) with `mode` permissions.
fn unix_listener(
    path: &std::path::Path,
    mode: u32,
) -> io::Result<std::os::unix::net::UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
        // A socket file a live server still accepts on is that server's: refuse rather than take its
        // clients (memcached removes it regardless). One nobody accepts on is left from a dead server.
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("{} is served by another process", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    let listener = std::os::unix::net::UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

fn udp_socket(addr: SocketAddr) -> io::Result<UdpSocket> {
    let sock = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    sock.set_reuse_address(true)?;
    sock.set_reuse_port(true)?;
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    Ok(sock.into())
}

/// Binds `count` sockets to `addr`; when its port is 0, the later ones reuse the port the first one got.
fn bind_all<T>(
    addr: SocketAddr,
    count: usize,
    bind: impl Fn(SocketAddr) -> io::Result<T>,
    local: impl Fn(&T) -> io::Result<SocketAddr>,
) -> io::Result<Vec<T>> {
    let first = bind(addr)?;
    let actual = local(&first)?;
    let mut all = vec![first];
    for _ in 1..count {
        all.push(bind(actual)?);
    }
    Ok(all)
}

/// The transport of an address a server claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    Udp,
}

/// Why [`Server::start`] failed with `io::ErrorKind::AddrInUse` for a TCP or UDP address: something else
/// already serves it (the error's inner value; see [`AddressInUse::of`]).
#[derive(Debug, Clone)]
pub struct AddressInUse {
    pub transport: Transport,
    pub addr: SocketAddr,
    /// The holder is another tern process (else: any other program).
    pub by_tern: bool,
}

impl AddressInUse {
    /// The details of a start error, if it is a refused address.
    pub fn of(error: &io::Error) -> Option<&AddressInUse> {
        error.get_ref()?.downcast_ref()
    }
}

impl std::fmt::Display for AddressInUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let transport = match self.transport {
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
        };
        let by = if self.by_tern {
            "another tern process"
        } else {
            "another process"
        };
        write!(
            f,
            "{transport} address {} is already served by {by}",
            self.addr
        )
    }
}

impl std::error::Error for AddressInUse {}

/// Proof that this process, and no other, serves an address: an abstract Unix socket named after it.
///
/// Why: each loop binds its own socket to a served address with SO_REUSEPORT, so that the kernel spreads
/// connections and datagrams over the loops without a thundering herd. But SO_REUSEPORT lets any process of
/// the same user join the group, and a second tern on a port already served would start and silently take
/// half of its clients. So before binding the group a server (1) binds an abstract socket named after the
/// address, which only one live process can hold and which the kernel releases when it dies, whatever the
/// death: a second tern is refused even if both start in the same instant; and (2) binds the address once
/// without SO_REUSEPORT, which fails if anything else (memcached, any program) serves it. Port 0 needs
/// neither: the kernel picks a port nobody serves.
struct AddressClaim {
    _lock: std::os::unix::net::UnixDatagram,
}

fn in_use(addr: SocketAddr, transport: Transport, by_tern: bool) -> io::Error {
    io::Error::new(
        io::ErrorKind::AddrInUse,
        AddressInUse {
            transport,
            addr,
            by_tern,
        },
    )
}

/// Takes `addr`'s abstract-socket lock (see [`AddressClaim`]); `AddrInUse` if another tern holds it.
fn lock(addr: SocketAddr, transport: Transport) -> io::Result<AddressClaim> {
    use std::os::linux::net::SocketAddrExt;
    let name = format!("tern/{transport:?}/{addr}");
    let name = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
    match std::os::unix::net::UnixDatagram::bind_addr(&name) {
        Ok(lock) => Ok(AddressClaim { _lock: lock }),
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => Err(in_use(addr, transport, true)),
        Err(e) => Err(e),
    }
}

/// Binds `addr` once without SO_REUSEPORT (see [`AddressClaim`]); `AddrInUse` if anything serves it.
fn probe(addr: SocketAddr, transport: Transport) -> io::Result<()> {
    let probe = match transport {
        // SO_REUSEADDR as the real listeners have it, so connections of an earlier server still in TIME_WAIT
        // do not count; a listening socket does.
        Transport::Tcp => {
            let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
            sock.set_reuse_address(true)?;
            sock
        }
        // Without SO_REUSEADDR, which two UDP sockets may share.
        Transport::Udp => Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?,
    };
    match probe.bind(&addr.into()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => Err(in_use(addr, transport, false)),
        Err(e) => Err(e),
    }
}

/// Binds the sockets of one served address (one per loop, or one), claimed for this process: for a given
/// port, the lock and the probe come first; for port 0 the lock is taken on the port the kernel chose.
fn bind_claimed<T>(
    addr: SocketAddr,
    transport: Transport,
    claims: &mut Vec<AddressClaim>,
    bind: impl FnOnce(SocketAddr) -> io::Result<Vec<T>>,
    local: impl Fn(&T) -> io::Result<SocketAddr>,
) -> io::Result<Vec<T>> {
    if addr.port() != 0 {
        claims.push(lock(addr, transport)?);
        probe(addr, transport)?;
    }
    let all = bind(addr)?;
    if addr.port() == 0 {
        claims.push(lock(local(&all[0])?, transport)?);
    }
    Ok(all)
}

impl<S: Service> Server<S> {
    pub fn new(config: RuntimeConfig, service: S) -> Self {
        Server {
            config,
            service: Arc::new(service),
            tls: None,
            plain: Vec::new(),
        }
    }

    /// Serves TLS on every TCP address but those in `plain` (Unix sockets and UDP stay plain).
    pub fn with_tls(mut self, tls: Tls, plain: Vec<SocketAddr>) -> Self {
        self.tls = Some(tls);
        self.plain = plain;
        self
    }

    pub fn service(&self) -> &Arc<S> {
        &self.service
    }

    /// Binds every socket (so address errors surface here, synchronously) and starts the threads.
    pub fn start(self) -> io::Result<RunningServer> {
        self.config
            .validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let cfg = Arc::new(self.config);
        crate::metrics::register();
        reserve_descriptor_table(cfg.max_connections);
        let loops = cfg.loops();
        let control = ServerControl::new(cfg.max_connections);
        let signals = Signals::new()?;
        let executor = tern_executor::Executor::new(cfg.executor.clone())
            .map_err(|e| io::Error::other(format!("starting the CPU executor: {e}")))?;

        let reuseport = cfg.spread == Spread::Reuseport;
        // Per loop, one listener (reuseport) and one UDP socket per address; or the acceptor's listeners.
        let mut listeners: Vec<Vec<(TcpListener, Option<Tls>)>> =
            (0..loops).map(|_| Vec::new()).collect();
        let mut acceptor_listeners = Vec::new();
        let mut local_addrs = Vec::new();
        let mut claims = Vec::new();
        for &addr in cfg.listen.iter().chain(&cfg.listen_also) {
            let all = bind_claimed(
                addr,
                Transport::Tcp,
                &mut claims,
                |addr| match reuseport {
                    true => bind_all(
                        addr,
                        loops,
                        |a| tcp_listener(a, true, cfg.backlog),
                        |l| l.local_addr(),
                    ),
                    false => Ok(vec![tcp_listener(addr, false, cfg.backlog)?]),
                },
                |l| l.local_addr(),
            )?;
            local_addrs.push(all[0].local_addr()?);
            let tls = self.tls.clone().filter(|_| !self.plain.contains(&addr));
            if reuseport {
                for (slot, l) in listeners.iter_mut().zip(all) {
                    slot.push((l, tls.clone()));
                }
            } else {
                acceptor_listeners.extend(all.into_iter().map(|l| (l, tls.clone())));
            }
        }
        let mut udp_sockets: Vec<Vec<UdpSocket>> = (0..loops).map(|_| Vec::new()).collect();
        let mut udp_addrs = Vec::new();
        for &addr in cfg.udp.iter().chain(&cfg.udp_also) {
            let all = bind_claimed(
                addr,
                Transport::Udp,
                &mut claims,
                |addr| bind_all(addr, loops, udp_socket, |s| s.local_addr()),
                |s| s.local_addr(),
            )?;
            udp_addrs.push(all[0].local_addr()?);
            for (slot, s) in udp_sockets.iter_mut().zip(all) {
                slot.push(s);
            }
        }

        // One per loop: the listener itself for the first, copies for the others, made now so that their
        // descriptors come before any client's (memcached lists its listeners first in `stats conns`).
        let mut unix_listeners = match &cfg.unix {
            Some(path) => {
                let first = unix_listener(path, cfg.unix_mode)?;
                let mut all = Vec::with_capacity(loops);
                for _ in 1..loops {
                    all.push(first.try_clone()?);
                }
                all.insert(0, first);
                all.into_iter().map(Some).collect()
            }
            None => Vec::new(),
        };

        let mut sockets = server_sockets(&listeners, &acceptor_listeners, &udp_sockets);

        // Every loop's descriptors (poll set, waker, tokio runtime) are made here, before any loop or the
        // acceptor takes connections that could use them all up.
        let mut polls = Vec::with_capacity(loops);
        let mut wakers = Vec::with_capacity(loops);
        let mut runtimes = Vec::with_capacity(loops);
        for _ in 0..loops {
            runtimes.push(
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?,
            );
            let poll = mio::Poll::new()?;
            wakers.push(Arc::new(mio::Waker::new(
                poll.registry(),
                crate::io_loop::WAKER,
            )?));
            polls.push(poll);
        }
        control.set_wakers(wakers.clone());

        let mut handoff_tx = Vec::new();
        let mut threads = Vec::new();
        for (id, (((listener, udp), poll), runtime)) in listeners
            .into_iter()
            .zip(udp_sockets)
            .zip(polls)
            .zip(runtimes)
            .enumerate()
        {
            let handoff = if !acceptor_listeners.is_empty() {
                let (tx, rx) = mpsc::unbounded_channel();
                handoff_tx.push(tx);
                Some(rx)
            } else {
                None
            };
            let setup = LoopSetup {
                id,
                poll,
                loops,
                service: self.service.clone(),
                config: cfg.clone(),
                control: control.clone(),
                executor: executor.clone(),
                listeners: listener,
                unix_listener: match (unix_listeners.get_mut(id).and_then(Option::take), &cfg.unix)
                {
                    (Some(l), Some(path)) => {
                        if id == 0 {
                            sockets.push(ServerSocket {
                                fd: l.as_raw_fd(),
                                kind: SocketKind::UnixListener(path.clone()),
                            });
                        }
                        Some(l)
                    }
                    _ => None,
                },
                udp,
                handoff,
            };
            threads.push(
                std::thread::Builder::new()
                    .name(format!("tern-io-{id}"))
                    .spawn(move || run_loop_thread(setup, runtime))?,
            );
        }
        sockets.sort_by_key(|s| s.fd);
        control.set_sockets(sockets);
        if !acceptor_listeners.is_empty() {
            let control = control.clone();
            let cfg = cfg.clone();
            let mut refusal = Vec::new();
            self.service.refuse_connection(&mut refusal);
            let refusal: Arc<[u8]> = refusal.into();
            threads.push(
                std::thread::Builder::new()
                    .name("tern-acceptor".into())
                    .spawn(move || {
                        run_acceptor(
                            acceptor_listeners,
                            handoff_tx,
                            wakers,
                            refusal,
                            control,
                            cfg,
                        )
                    })?,
            );
        }
        let connections_gauge = service_connections_gauge(self.service.name(), &control);
        tracing::info!(
            "{}",
            start_line(self.service.name(), &cfg, &local_addrs, &udp_addrs)
        );
        Ok(RunningServer {
            _connections_gauge: connections_gauge,
            control,
            local_addrs,
            udp_addrs,
            threads,
            executor,
            signals,
            hangup: None,
            _claims: claims,
        })
    }
}

/// The line a server logs when it starts: what it serves, where, and with which limits.
fn start_line(name: &str, cfg: &RuntimeConfig, tcp: &[SocketAddr], udp: &[SocketAddr]) -> String {
    let what = if name.is_empty() {
        "server".to_owned()
    } else {
        format!("tern {name}")
    };
    let list = |kind: &str, addrs: &[SocketAddr]| {
        addrs
            .iter()
            .map(|a| format!("{kind} {a}"))
            .collect::<Vec<_>>()
    };
    let mut places = list("tcp", tcp);
    places.extend(list("udp", udp));
    if let Some(path) = &cfg.unix {
        places.push(format!("unix {}", path.display()));
    }
    let count = |n: u64| match n {
        0 => "unlimited".to_owned(),
        n => n.to_string(),
    };
    let time = |d: Option<std::time::Duration>| {
        d.map_or("off".to_owned(), |d| format!("{} ms", d.as_millis()))
    };
    let many = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    format!(
        "{what} serving {} with {} and {}; limits: connections {}, requests in flight {}, requests per \
         second {}, frame {} bytes, idle timeout {}, request deadline {}",
        if places.is_empty() { "nothing".to_owned() } else { places.join(", ") },
        many(cfg.loops(), "I/O loop"),
        many(cfg.executor.workers, "CPU worker"),
        cfg.max_connections,
        count(cfg.max_in_flight as u64),
        count(cfg.rate_limit),
        cfg.max_frame_bytes,
        time(cfg.idle_timeout),
        time(cfg.request_deadline),
    )
}

/// `tern_service_connections_open{service=name}` from the server's own count, for services that have a name:
/// `tern_connections_open` is one sum over every server of the process (`tern run` has five).
fn service_connections_gauge(
    name: &'static str,
    control: &ServerControl,
) -> Option<tern_metrics::CollectorGuard> {
    if name.is_empty() {
        return None;
    }
    let control = control.clone();
    Some(tern_metrics::register_collector(move |_| {
        vec![tern_metrics::MetricSnapshot::labelled(
            "tern_service_connections_open",
            "Connections open now, by service",
            "service",
            [(name.to_owned(), control.connections() as i64)],
        )]
    }))
}

/// What stopped [`RunningServer::run_until_signal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// SIGTERM.
    Terminate,
    /// SIGINT.
    Interrupt,
    /// SIGUSR1: memcached's graceful stop (its restartable cache saves then).
    Graceful,
    /// [`ServerControl::shutdown`], e.g. from a command the service serves.
    Requested,
}

impl RunningServer {
    /// The TCP address actually bound for `listen` (useful with port 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addrs.first().copied()
    }

    /// Every TCP address bound: `listen`, then `listen_also`.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.local_addrs
    }

    pub fn udp_addr(&self) -> Option<SocketAddr> {
        self.udp_addrs.first().copied()
    }

    /// Every UDP address bound: `udp`, then `udp_also`.
    pub fn udp_addrs(&self) -> &[SocketAddr] {
        &self.udp_addrs
    }

    pub fn control(&self) -> &ServerControl {
        &self.control
    }

    /// Starts a graceful shutdown (see [`ServerControl::shutdown`]).
    pub fn shutdown(&self) {
        self.control.shutdown();
    }

    /// The CPU pool the handlers offload to.
    pub fn executor(&self) -> &tern_executor::Executor {
        &self.executor
    }

    /// Waits for every loop to finish, then stops the CPU pool.
    pub fn join(self) {
        for t in self.threads {
            let _ = t.join();
        }
        self.executor.shutdown();
    }

    /// Runs `reload` on every SIGHUP while [`RunningServer::run_until_signal`] serves (memcached rereads its
    /// `-Y` file then). Without it a SIGHUP is logged and ignored.
    pub fn on_hangup(&mut self, reload: impl Fn() + Send + 'static) {
        self.hangup = Some(Box::new(reload));
    }

    /// Serves until SIGTERM, SIGINT or SIGUSR1 (or until something else shuts the server down), then shuts down
    /// gracefully and returns, once every thread has finished, what stopped it. SIGHUP runs the
    /// [`RunningServer::on_hangup`] hook.
    pub fn run_until_signal(mut self) -> io::Result<Stopped> {
        let mut stopped = self.control.subscribe();
        let Signals {
            runtime,
            term,
            int,
            usr1,
            hup,
        } = &mut self.signals;
        let hangup = self.hangup.as_deref();
        let runtime = runtime.as_ref().expect("present until drop");
        let why = runtime.block_on(async {
            loop {
                tokio::select! {
                    _ = term.recv() => {
                        tracing::info!("SIGTERM: shutting down");
                        break Stopped::Terminate;
                    }
                    _ = int.recv() => {
                        tracing::info!("SIGINT: shutting down");
                        break Stopped::Interrupt;
                    }
                    _ = usr1.recv() => {
                        tracing::info!("SIGUSR1: shutting down gracefully");
                        break Stopped::Graceful;
                    }
                    _ = hup.recv() => match hangup {
                        Some(reload) => reload(),
                        None => tracing::info!("SIGHUP: nothing to reload"),
                    },
                    _ = stopped.wait_for(|s| *s) => break Stopped::Requested,
                }
            }
        });
        self.control.shutdown();
        self.join();
        Ok(why)
    }
}
