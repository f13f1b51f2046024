//! A TLS session over a non-blocking socket, read and written like the socket: the one piece of TLS the
//! runtime's servers (`rustls::ServerConnection`) and the load generator's clients (`rustls::ClientConnection`)
//! share. Reads return plaintext and fill the caller's buffer as far as the socket allows (a short read means
//! the socket is drained, as for a plain socket, so edge- and level-triggered readiness keep their meaning);
//! writes take plaintext once the records queued before it are out. Handshake messages are answered from the
//! read path. What a write leaves queued when the socket is full is [`TlsSocket::has_pending_output`], for the
//! caller to flush when the socket is writable again.
//!
//! Written here because rustls's own `Stream`/`StreamOwned` drive a blocking socket (their `complete_io`
//! loops until the handshake is done), and tokio-rustls needs tokio's I/O types, which the runtime's loops
//! (mio) and the load generator (raw epoll) do not use.

use std::io::{self, IoSlice, Read, Write};
use std::ops::DerefMut;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rustls::ConnectionCommon;

/// A TLS session `C` (a rustls server or client connection) over the socket `S`.
pub struct TlsSocket<S, C> {
    pub sock: S,
    pub session: C,
    /// Counts handshakes that fail on a protocol error, when given.
    handshake_errors: Option<Arc<AtomicU64>>,
}

impl<S: Read + Write, C: DerefMut<Target = ConnectionCommon<D>>, D> TlsSocket<S, C> {
    /// `handshake_errors`, if given, counts this session's handshake if it fails on a protocol error.
    pub fn new(sock: S, session: C, handshake_errors: Option<Arc<AtomicU64>>) -> Self {
        TlsSocket {
            sock,
            session,
            handshake_errors,
        }
    }

    /// Records the session has produced that the socket has not taken yet.
    pub fn has_pending_output(&self) -> bool {
        self.session.wants_write()
    }

    /// Sends queued records until none is left (Ok) or the socket is full (WouldBlock).
    pub fn flush_records(&mut self) -> io::Result<()> {
        while self.session.wants_write() {
            match self.session.write_tls(&mut self.sock) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Reads what the socket holds into the session and processes it; Ok(false) at the end of the stream.
    fn receive(&mut self) -> io::Result<bool> {
        let n = loop {
            match self.session.read_tls(&mut self.sock) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => break other?,
            }
        };
        if n == 0 {
            return Ok(false);
        }
        let handshaking = self.session.is_handshaking();
        if let Err(e) = self.session.process_new_packets() {
            if let Some(count) = self.handshake_errors.as_ref().filter(|_| handshaking) {
                count.fetch_add(1, Ordering::Relaxed);
            }
            // The alert rustls queued tells the peer why, if the socket takes it.
            let _ = self.flush_records();
            return Err(io::Error::new(io::ErrorKind::InvalidData, e));
        }
        // Handshake messages to answer (best effort: what the socket does not take now goes when it is
        // writable, before any reply).
        match self.flush_records() {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(e),
            _ => Ok(true),
        }
    }

    /// Writes plaintext once the records queued before it are out.
    fn write_with(
        &mut self,
        write: impl FnOnce(&mut ConnectionCommon<D>) -> io::Result<usize>,
    ) -> io::Result<usize> {
        self.flush_records()?;
        let n = write(&mut self.session)?;
        if n == 0 {
            return Ok(0);
        }
        // Sent now if the socket takes it; otherwise it is pending output, flushed when writable.
        match self.flush_records() {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(e),
            _ => Ok(n),
        }
    }

    /// Says goodbye properly (close_notify) if the socket takes it now.
    pub fn close(&mut self) {
        if !self.session.is_handshaking() {
            self.session.send_close_notify();
            let _ = self.flush_records();
        }
    }
}

impl<S: Read + Write, C: DerefMut<Target = ConnectionCommon<D>>, D> Read for TlsSocket<S, C> {
    /// Fills `buf` with plaintext as far as the socket allows. A short read means the socket is drained.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut filled = 0;
        while filled < buf.len() {
            match self.session.reader().read(&mut buf[filled..]) {
                Ok(0) => return Ok(filled), // close_notify: the end of the stream after what was read
                Ok(n) => {
                    filled += n;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if filled > 0 => {
                    tracing::debug!("TLS: {e} after {filled} bytes");
                    return Ok(filled);
                }
                Err(e) => return Err(e),
            }
            match self.receive() {
                Ok(true) => {}
                Ok(false) => return Ok(filled),
                // Would block, or a socket error: what was read is served first.
                Err(e) if filled > 0 && e.kind() != io::ErrorKind::InvalidData => {
                    return Ok(filled)
                }
                Err(e) => return Err(e),
            }
        }
        Ok(filled)
    }
}

impl<S: Read + Write, C: DerefMut<Target = ConnectionCommon<D>>, D> Write for TlsSocket<S, C> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_with(|s| s.writer().write(buf))
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.write_with(|s| s.writer().write_vectored(bufs))
    }
    fn flush(&mut self) -> io::Result<()> {
        self.flush_records()
    }
}
