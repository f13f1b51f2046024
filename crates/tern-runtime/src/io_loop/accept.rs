//! Taking connections in: from the loop's own listeners (pausing on EMFILE/ENFILE with a back-off that
//! doubles, instead of spinning on a listener that stays readable) or handed over by the acceptor thread,
//! and letting them go: closes are queued and done a few per turn.

use std::io;
use std::time::Instant;

use mio::net::TcpStream;

use mio::{Interest, Token};

use super::conn::{Busy, Conn};
use super::IoLoop;
use crate::acceptor::{is_resource_exhaustion, refuse, Handoff};
use crate::config::BufferMode;
use crate::metrics;
use crate::service::{CloseReason, Service};
use crate::stream::Stream;
use crate::tls::Tls;

/// Accepts per turn, for the same reason.
const ACCEPTS_PER_TURN: usize = 4;

impl<S: Service> IoLoop<S> {
    /// Accepts from every listener (after a pause or a turn that hit its budget).
    pub(super) fn accept_all(&mut self) {
        for i in 0..self.listeners.len() {
            self.accept(i);
        }
    }

    pub(super) fn accept(&mut self, which: usize) {
        if self.accept_paused_until.is_some() || self.draining_until.is_some() {
            return;
        }
        for _ in 0..ACCEPTS_PER_TURN {
            let Some(listener) = self.listeners.get(which) else {
                return;
            };
            match listener.accept() {
                Ok((stream, tls)) => {
                    self.accept_backoff = self.cfg.accept_backoff_min;
                    self.add_conn(stream, tls, false);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if is_resource_exhaustion(&e) => {
                    // The pending connection stays queued and the listener stays readable: retrying now would
                    // spin. Pause, doubling the pause while the condition lasts.
                    tracing::warn!(
                        "io loop {}: accept: {e}; pausing accepts for {} ms",
                        self.id,
                        self.accept_backoff.as_millis()
                    );
                    metrics::ACCEPT_PAUSES.incr();
                    metrics::ACCEPT_PAUSED_MICROS
                        .add(u64::try_from(self.accept_backoff.as_micros()).unwrap_or(u64::MAX));
                    self.accept_paused_until = Some(Instant::now() + self.accept_backoff);
                    self.accept_backoff =
                        (self.accept_backoff * 2).min(self.cfg.accept_backoff_max);
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => tracing::debug!("io loop {}: accept: {e}", self.id),
            }
        }
        self.again_accept = true;
    }

    /// A connection the acceptor thread handed over (already counted against the cap).
    pub(super) fn handoff_conn(&mut self, handoff: Handoff) {
        if self.draining_until.is_some() {
            self.control.remove_connection();
        } else {
            let stream = Stream::Tcp(TcpStream::from_std(handoff.stream));
            self.add_conn(stream, handoff.tls, true);
        }
    }

    /// Takes a new connection into the loop, served over `tls` if given; `counted` says the acceptor already
    /// counted it against the cap.
    pub(super) fn add_conn(&mut self, mut stream: Stream, tls: Option<Tls>, counted: bool) {
        if !counted && !self.control.try_add_connection() {
            metrics::CONNECTIONS_REFUSED.incr();
            let mut refusal = Vec::new();
            self.service.refuse_connection(&mut refusal);
            // In plain text, before any TLS, as memcached does.
            refuse(&mut stream, &refusal);
            return;
        }
        if let Some(tls) = tls {
            stream = match stream.into_tls(&tls) {
                Ok(stream) => stream,
                Err(e) => {
                    tracing::warn!("io loop {}: cannot start TLS: {e}", self.id);
                    self.control.remove_connection();
                    return;
                }
            };
        }
        stream.set_nodelay();
        let now_ms = self.millis(Instant::now());
        let entry = self.conns.vacant_entry();
        let key = entry.key();
        if let Err(e) = self.poll.get_ref().registry().register(
            &mut stream,
            Token(key),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            tracing::warn!("io loop {}: cannot register connection: {e}", self.id);
            self.control.remove_connection();
            return;
        }
        self.next_generation = self.next_generation.wrapping_add(1);
        let busy = (self.cfg.buffer_mode == BufferMode::PerConnection).then(|| {
            Box::new(Busy {
                input: Vec::with_capacity(self.cfg.read_buffer_bytes),
                ..Busy::default()
            })
        });
        metrics::CONNECTIONS_ACCEPTED.incr();
        metrics::CONNECTIONS_OPEN.incr();
        let conn = stream.fd();
        entry.insert(Conn {
            stream,
            generation: self.next_generation,
            readable: false,
            writable: true,
            read_closed: false,
            peer_closed: false,
            close_after_flush: false,
            last_active_ms: now_ms,
            busy,
            closing: false,
            queued_again: false,
            served_in: self.turn_number,
            decoder_state: 0,
            close_reason: CloseReason::Normal,
        });
        self.service.connection_opened(&self.state, conn);
    }

    /// Queues a connection that is done for closing. Closing a socket is the costly part of a connection's
    /// end (on loopback it also runs the peer's side of the teardown: ~23 us of kernel time each here, for
    /// memcached as for tern); when thousands of clients leave at once, closing each as its EOF is read would
    /// make the loop's other clients wait behind all of them. Queued, at most `CLOSES_PER_TURN` are closed
    /// per turn, between the turns that serve everyone else.
    pub(super) fn close(&mut self, key: usize, why: CloseReason) {
        if let Some(conn) = self.conns.get_mut(key) {
            if !conn.closing {
                conn.closing = true;
                if why != CloseReason::Normal {
                    conn.close_reason = why;
                }
                self.closing.push_back(key);
            }
        }
    }

    pub(super) fn close_now(&mut self, key: usize) {
        if self.conns.contains(key) {
            // No deregistering: closing the socket (when `conn` drops) takes it out of the poll set, since no
            // other descriptor refers to it; one system call less per close when thousands close at once.
            let mut conn = self.conns.remove(key);
            conn.stream.close();
            self.control.remove_connection();
            metrics::CONNECTIONS_OPEN.decr();
            // Before the socket is closed (when `conn` drops), so its number is not reused yet.
            self.service
                .connection_closed(&self.state, conn.stream.fd(), conn.close_reason);
        }
    }
}
