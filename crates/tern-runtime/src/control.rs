//! The handle every part of a running server shares: the shutdown signal, the connection count, and the
//! sockets it listens on.

use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::watch;

/// Shared controls of a running server: shutdown, and the connection count the cap is checked against.
#[derive(Clone)]
pub struct ServerControl {
    inner: Arc<ControlInner>,
}

struct ControlInner {
    shutdown: watch::Sender<bool>,
    /// Wake each loop blocked in its own poll (see the loop's `direct_wait`).
    wakers: std::sync::OnceLock<Vec<Arc<mio::Waker>>>,
    connections: AtomicUsize,
    max_connections: usize,
    sockets: std::sync::OnceLock<Vec<ServerSocket>>,
}

/// A socket the server serves on (not a client connection), as `stats conns`-style listings show them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerSocket {
    pub fd: RawFd,
    pub kind: SocketKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SocketKind {
    TcpListener(SocketAddr),
    UnixListener(PathBuf),
    /// A UDP socket; with several I/O loops each has its own on every UDP address.
    Udp(SocketAddr),
}

impl ServerControl {
    pub(crate) fn new(max_connections: usize) -> Self {
        ServerControl {
            inner: Arc::new(ControlInner {
                shutdown: watch::channel(false).0,
                wakers: std::sync::OnceLock::new(),
                connections: AtomicUsize::new(0),
                max_connections,
                sockets: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Hands over the loops' wakers, once they exist, so that a shutdown wakes loops blocked in their poll.
    pub(crate) fn set_wakers(&self, wakers: Vec<Arc<mio::Waker>>) {
        let _ = self.inner.wakers.set(wakers);
    }

    /// The waker of loop `id`'s poll, once the server has made it.
    pub(crate) fn waker(&self, id: usize) -> Option<Arc<mio::Waker>> {
        self.inner.wakers.get()?.get(id).cloned()
    }

    /// Starts a graceful shutdown: stop accepting, finish in-flight requests up to the grace period, exit.
    pub fn shutdown(&self) {
        self.inner.shutdown.send_replace(true);
        for waker in self.inner.wakers.get().into_iter().flatten() {
            let _ = waker.wake();
        }
    }

    pub(crate) fn set_sockets(&self, sockets: Vec<ServerSocket>) {
        let _ = self.inner.sockets.set(sockets);
    }

    /// The listening and UDP sockets, by descriptor (empty until the server has bound them).
    pub fn sockets(&self) -> &[ServerSocket] {
        self.inner.sockets.get().map_or(&[], Vec::as_slice)
    }

    pub fn is_shutting_down(&self) -> bool {
        *self.inner.shutdown.borrow()
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<bool> {
        self.inner.shutdown.subscribe()
    }

    /// Open connections, server-wide.
    pub fn connections(&self) -> usize {
        self.inner.connections.load(Ordering::Relaxed)
    }

    /// Counts a new connection unless the server is full. Only accept and close touch this counter, never a
    /// request.
    pub(crate) fn try_add_connection(&self) -> bool {
        let prev = self.inner.connections.fetch_add(1, Ordering::Relaxed);
        if prev >= self.inner.max_connections {
            self.inner.connections.fetch_sub(1, Ordering::Relaxed);
            false
        } else {
            true
        }
    }

    pub(crate) fn remove_connection(&self) {
        self.inner.connections.fetch_sub(1, Ordering::Relaxed);
    }
}
