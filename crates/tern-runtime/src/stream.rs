//! The kinds of stream a loop serves: TCP, TLS over TCP, and Unix domain sockets (memcached's `-s`).

use std::io::{self, Read, Write};

use mio::event::Source;
use mio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use mio::{Interest, Registry, Token};

use crate::tls::{Tls, TlsStream};

pub(crate) enum Stream {
    Tcp(TcpStream),
    /// Boxed: a TLS session is kilobytes, and a plain connection must not pay for it.
    Tls(Box<TlsStream>),
    Unix(UnixStream),
}

impl Stream {
    /// The socket's file descriptor: unique among open connections, memcached's connection number.
    pub(crate) fn fd(&self) -> u64 {
        use std::os::fd::AsRawFd;
        let fd = match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Tls(s) => s.sock.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        };
        fd as u64
    }

    pub(crate) fn set_nodelay(&self) {
        match self {
            Stream::Tcp(s) => {
                let _ = s.set_nodelay(true);
            }
            Stream::Tls(s) => {
                let _ = s.sock.set_nodelay(true);
            }
            Stream::Unix(_) => {}
        }
    }

    /// A TCP stream becomes the server side of a TLS session.
    pub(crate) fn into_tls(self, tls: &Tls) -> io::Result<Stream> {
        match self {
            Stream::Tcp(s) => Ok(Stream::Tls(Box::new(tls.accept(s)?))),
            other => Ok(other),
        }
    }

    /// Bytes written to the stream that have not reached the socket yet (a TLS session's queued records).
    pub(crate) fn has_pending_output(&self) -> bool {
        matches!(self, Stream::Tls(s) if s.has_pending_output())
    }

    /// A TLS stream says goodbye (close_notify) before its socket closes, if the socket takes it.
    pub(crate) fn close(&mut self) {
        if let Stream::Tls(s) = self {
            s.close();
        }
    }

    /// Sends what [`Stream::has_pending_output`] holds; WouldBlock if the socket is full.
    pub(crate) fn flush_pending(&mut self) -> io::Result<()> {
        match self {
            Stream::Tls(s) => s.flush_records(),
            _ => Ok(()),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write_vectored(bufs),
            Stream::Tls(s) => s.write_vectored(bufs),
            Stream::Unix(s) => s.write_vectored(bufs),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Source for Stream {
    fn register(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.register(registry, token, interests),
            Stream::Tls(s) => s.sock.register(registry, token, interests),
            Stream::Unix(s) => s.register(registry, token, interests),
        }
    }
    fn reregister(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.reregister(registry, token, interests),
            Stream::Tls(s) => s.sock.reregister(registry, token, interests),
            Stream::Unix(s) => s.reregister(registry, token, interests),
        }
    }
    fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.deregister(registry),
            Stream::Tls(s) => s.sock.deregister(registry),
            Stream::Unix(s) => s.deregister(registry),
        }
    }
}

/// A listening socket of either kind; a TCP one serves TLS when it has a [`Tls`].
pub(crate) enum Listener {
    Tcp(TcpListener, Option<Tls>),
    Unix(UnixListener),
}

impl Listener {
    /// A new connection, and the TLS it is to be served with (it starts once the connection is admitted).
    pub(crate) fn accept(&self) -> io::Result<(Stream, Option<Tls>)> {
        match self {
            Listener::Tcp(l, tls) => l.accept().map(|(s, _)| (Stream::Tcp(s), tls.clone())),
            Listener::Unix(l) => l.accept().map(|(s, _)| (Stream::Unix(s), None)),
        }
    }

    pub(crate) fn source(&mut self) -> &mut dyn Source {
        match self {
            Listener::Tcp(l, _) => l,
            Listener::Unix(l) => l,
        }
    }
}
