//! Replies that finish after their request was handled: a deferred reply put in its slot when its task
//! completes, a streamed reply resumed once the client has read, and a connection settled (closed or made
//! idle) when nothing is left in flight.

use std::time::Instant;

use super::conn::{run_stream, Slot};
use super::IoLoop;
use crate::config::BufferMode;
use crate::output::Unsent;
use crate::service::{CloseReason, Service};

impl<S: Service> IoLoop<S> {
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
        let ended = conn.close_after_flush || (conn.peer_closed && !conn.has_stalled_input());
        if quiet && (ended || draining) {
            let why = if ended {
                CloseReason::Normal
            } else {
                CloseReason::Shutdown
            };
            self.close(key, why);
        }
    }

    pub(super) fn apply_completions(&mut self) {
        let done = std::mem::take(&mut *self.completions.done.borrow_mut());
        let now = Instant::now();
        let latency = self.service.request_latency();
        for c in done {
            self.admission.finished();
            if let (Some(family), Some(kind)) = (latency, c.kind) {
                family.record_duration(kind, now.saturating_duration_since(c.received));
            }
            let Some(conn) = self.conns.get_mut(c.key) else {
                continue;
            };
            if conn.generation != c.generation {
                continue;
            }
            let Some(busy) = conn.busy.as_mut() else {
                continue;
            };
            match c.seq {
                Some(seq) => {
                    let Some(slot) = busy.slots.get_mut((seq - busy.head_seq) as usize) else {
                        continue;
                    };
                    *slot = Slot::Ready(Unsent::from(c.reply));
                    busy.release_ready();
                }
                None => {
                    busy.unordered -= 1;
                    if busy.streaming {
                        // Not into the middle of a streamed reply: after it.
                        busy.slots.push_back(Slot::Ready(Unsent::from(c.reply)));
                    } else {
                        busy.output.append(&mut Unsent::from(c.reply));
                    }
                }
            }
            self.serve(c.key, now);
        }
    }
}
