//! Sending replies: serving a ready connection (its streamed reply first, then its input), writing the
//! loop's output to it (what the socket does not take stays queued on the connection), putting deferred
//! replies in their slots as they finish, and settling a connection that is done.

use std::time::Instant;

use super::conn::{run_stream, Busy, Conn, Slot};
use super::{IoLoop, READS_PER_TURN};
use crate::config::BufferMode;
use crate::metrics;
use crate::output::Unsent;
use crate::service::Service;

impl<S: Service> IoLoop<S> {
    /// Serves one connection: writes what is pending, then goes on with a streamed reply, with requests left
    /// undecoded, or reads, decodes and handles new ones, until it would block, its output backs up, or it
    /// used its share of the turn (reads and bytes).
    pub(super) fn serve(&mut self, key: usize, now: Instant) {
        if self.conns.get(key).is_none_or(|c| c.closing) {
            return;
        }
        self.turn_written = 0;
        self.turn_requests = 0;
        for _ in 0..READS_PER_TURN {
            if !self.flush(key) {
                return;
            }
            if self.turn_written >= self.cfg.max_bytes_per_turn
                || self.turn_requests >= self.cfg.max_requests_per_turn
            {
                break;
            }
            let Some(conn) = self.conns.get(key) else {
                return;
            };
            let busy = conn.busy.as_deref();
            let backed_up = busy.is_some_and(|b| b.unsent() > 0);
            let streaming = busy.is_some_and(|b| b.streaming);
            if !backed_up && busy.is_some_and(Busy::stream_first) {
                self.resume_stream(key);
                continue;
            }
            if !backed_up && !streaming && conn.has_stalled_input() {
                if let Err(e) = self.handle_own_input(key, now) {
                    tracing::debug!("io loop {}: connection {key}: {e}", self.id);
                    self.close(key);
                    return;
                }
                continue;
            }
            if !conn.readable
                || conn.peer_closed
                || conn.close_after_flush
                || backed_up
                || streaming
            {
                self.settle(key);
                return;
            }
            match self.read_and_handle(key, now) {
                Ok(true) => {}
                Ok(false) => {
                    if self.flush(key) {
                        // What the read left undecoded (the output filled up) continues next turn.
                        if self.conns.get(key).is_some_and(Conn::has_more_work) {
                            self.again_conns.push(key);
                        }
                    }
                    self.settle(key);
                    return;
                }
                Err(e) => {
                    tracing::debug!("io loop {}: connection {key}: {e}", self.id);
                    self.close(key);
                    return;
                }
            }
        }
        if self.flush(key) {
            self.settle(key);
            if self.conns.get(key).is_some_and(Conn::has_more_work) {
                self.again_conns.push(key);
            }
        }
    }

    /// Writes the connection's pending replies and whatever the last read produced. Returns false when the
    /// connection is gone or its socket is full (it will be served again when writable).
    pub(super) fn flush(&mut self, key: usize) -> bool {
        let Some(conn) = self.conns.get_mut(key) else {
            self.out.clear();
            return false;
        };
        // Replies of earlier requests still queued go first.
        let pending = conn.busy.as_mut().filter(|b| b.unsent() > 0);
        let result = match pending {
            Some(busy) => {
                self.out.drain_after(0, &mut busy.output);
                busy.output.write_to(&mut conn.stream)
            }
            None if self.out.total_len() == 0 => Ok(0),
            None => self.out.write_to(&mut conn.stream).inspect(|&n| {
                if n < self.out.total_len() {
                    let busy = conn.busy.get_or_insert_with(Box::default);
                    self.out.drain_after(n, &mut busy.output);
                }
                self.out.clear();
            }),
        };
        match result {
            Ok(n) => {
                metrics::BYTES_WRITTEN.add(n as u64);
                self.turn_written += n;
                let done = conn.busy.as_ref().is_none_or(|b| b.unsent() == 0);
                if !done {
                    conn.writable = false;
                }
                done
            }
            Err(e) => {
                self.out.clear();
                tracing::debug!("io loop {}: connection {key}: write: {e}", self.id);
                self.close(key);
                false
            }
        }
    }

    /// Runs the streamed reply at the front of the connection's slots until it ends or the output reaches the
    /// limit; once it ends, the finished replies behind it follow.
    pub(super) fn resume_stream(&mut self, key: usize) {
        let limit = self.cfg.max_output_bytes;
        let Some(busy) = self.conns.get_mut(key).and_then(|c| c.busy.as_mut()) else {
            return;
        };
        let Some(Slot::Streaming(stream)) = busy.slots.front_mut() else {
            return;
        };
        if !run_stream(stream, &mut self.out, limit) {
            return;
        }
        busy.slots.pop_front();
        busy.head_seq += 1;
        busy.streaming = false;
        if !busy.slots.is_empty() {
            // What the stream wrote goes before the replies queued behind it.
            self.out.drain_after(0, &mut busy.output);
            busy.release_ready();
        }
    }

    /// Frees a connection's busy state once it holds nothing (shared-buffer mode keeps idle connections lean).
    pub(super) fn settle(&mut self, key: usize) {
        let per_connection = self.cfg.buffer_mode == BufferMode::PerConnection;
        let draining = self.draining_until.is_some();
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        let idle = conn.busy.as_ref().is_none_or(|b| b.is_idle());
        if idle && !per_connection {
            conn.busy = None;
        }
        // A peer that sent its requests and closed its side still gets the replies to all of them.
        let quiet = !conn.has_pending_replies();
        let finished =
            conn.close_after_flush || draining || (conn.peer_closed && !conn.has_stalled_input());
        if quiet && finished {
            self.close(key);
        }
    }

    pub(super) fn apply_completions(&mut self) {
        let done = std::mem::take(&mut *self.completions.done.borrow_mut());
        let now = Instant::now();
        for c in done {
            self.admission.finished();
            let Some(conn) = self.conns.get_mut(c.key) else {
                continue;
            };
            if conn.generation != c.generation {
                continue;
            }
            let Some(busy) = conn.busy.as_mut() else {
                continue;
            };
            let Some(slot) = busy.slots.get_mut((c.seq - busy.head_seq) as usize) else {
                continue;
            };
            *slot = Slot::Ready(Unsent::from(c.reply));
            busy.release_ready();
            self.serve(c.key, now);
        }
    }
}
