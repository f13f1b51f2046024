//! A connection as its loop keeps it: the socket and its flags, and while it is busy the bytes of its
//! incomplete requests and its reply queue in request order (deferred and streamed replies in numbered
//! slots).

use std::collections::VecDeque;
use std::time::Instant;

use crate::output::{Output, Unsent};
use crate::service::{CloseReason, Feed, ReplyStream, Step};
use crate::stream::Stream;

/// A reply slot of a connection that has deferred or streamed replies: replies leave strictly in request order.
pub(super) enum Slot {
    /// A deferred reply not finished yet.
    Waiting,
    Ready(Unsent),
    /// A reply still being produced; it runs once it is the first slot.
    Streaming(ReplyStream),
    /// A reply held until the rest of its request, which is discarded ([`Busy::skip`]), has arrived:
    /// memcached answers a data block it refuses only once it has swallowed it, and a client still writing
    /// that block may not expect the answer before (spymemcached's binary connection then fails).
    AfterSkip(Unsent),
}

/// What a connection holds only while it is busy; dropped when it becomes idle (in shared-buffer mode).
#[derive(Default)]
pub(super) struct Busy {
    /// Bytes of an incomplete request, or of requests left for a later turn (in per-connection mode, the
    /// connection's own read buffer).
    pub(super) input: Vec<u8>,
    /// Bytes at the front of `input` already handled: dropped lazily, so that a deep pipeline handled a
    /// turn's budget at a time is not moved to the front of its buffer after every turn.
    pub(super) input_done: usize,
    /// Do not decode again before `input` holds this many bytes.
    pub(super) needed: usize,
    /// When the oldest incomplete request started arriving.
    pub(super) partial_since: Option<Instant>,
    /// The decoder's interim reply ([`Decode::Interim`]) for the incomplete request is written.
    pub(super) interim_sent: bool,
    /// `input` may hold complete requests left undecoded when the output backed up or a reply streams.
    pub(super) stalled: bool,
    /// A slot holds a [`Slot::Streaming`] reply: later requests wait undecoded until it ends.
    pub(super) streaming: bool,
    /// Bytes still to discard from the stream (a frame consumed more than it had).
    pub(super) skip: usize,
    /// Replies not yet written, in order.
    pub(super) output: Unsent,
    /// Replies of deferred or streamed requests and of the requests after them; `head_seq` is the first
    /// slot's number.
    pub(super) slots: VecDeque<Slot>,
    pub(super) head_seq: u64,
    /// Unordered deferred replies ([`crate::Deferred::unordered`]) not finished yet: they hold no slot.
    pub(super) unordered: u32,
    /// The connection became a feed ([`crate::Outcome::Feed`]): its input is dropped, its output is the feed's.
    pub(super) feed: Option<(Feed, std::task::Waker)>,
}

impl Busy {
    pub(super) fn unsent(&self) -> usize {
        self.output.len()
    }
    pub(super) fn is_idle(&self) -> bool {
        self.input.is_empty()
            && self.skip == 0
            && self.output.is_empty()
            && self.slots.is_empty()
            && self.unordered == 0
            && self.feed.is_none()
    }
    pub(super) fn stream_first(&self) -> bool {
        matches!(self.slots.front(), Some(Slot::Streaming(_)))
    }
    /// The bytes to discard have all arrived: the reply held for them is ready (no request is decoded while
    /// bytes are discarded, so it is the last slot).
    pub(super) fn skip_done(&mut self) {
        if let Some(slot) = self.slots.back_mut() {
            if let Slot::AfterSkip(reply) = slot {
                *slot = Slot::Ready(std::mem::take(reply));
            }
        }
        self.release_ready();
    }
    /// Moves the finished replies at the front of the slots to the output, up to the first unfinished one.
    pub(super) fn release_ready(&mut self) {
        while let Some(Slot::Ready(_)) = self.slots.front() {
            if let Some(Slot::Ready(mut bytes)) = self.slots.pop_front() {
                self.output.append(&mut bytes);
            }
            self.head_seq += 1;
        }
    }
}

/// Runs `stream` until it ends (true) or `out` holds `limit` bytes (false).
pub(super) fn run_stream(stream: &mut ReplyStream, out: &mut Output, limit: usize) -> bool {
    while out.total_len() < limit {
        if (stream.0)(out) == Step::Done {
            return true;
        }
    }
    false
}

pub(super) struct Conn {
    pub(super) stream: Stream,
    /// Tells a reused slab key from the connection a deferred reply was meant for.
    pub(super) generation: u32,
    pub(super) readable: bool,
    pub(super) writable: bool,
    /// epoll reported the peer's FIN: keep reading until EOF even after a short read, since no further edge will
    /// come for bytes and FIN that arrived together.
    pub(super) read_closed: bool,
    /// The peer sent EOF; close once the pending replies are out.
    pub(super) peer_closed: bool,
    /// Close once the pending replies are out (a handler or the decoder asked to).
    pub(super) close_after_flush: bool,
    /// When it last read, in the loop's milliseconds (`IoLoop::millis`): 4 bytes where an `Instant` takes 16,
    /// which pays for the TLS variant of `stream`, so an idle plain connection costs what it did before TLS.
    pub(super) last_active_ms: u32,
    pub(super) busy: Option<Box<Busy>>,
    /// Done and waiting in the loop's close queue: no longer served.
    pub(super) closing: bool,
    /// In the loop's `again_conns` list (once is enough).
    pub(super) queued_again: bool,
    /// The loop's turn that last served it.
    pub(super) served_in: u32,
    /// The service's own byte of per-connection state (`Service::decode_conn`).
    pub(super) decoder_state: u8,
    /// Why it is closing, once that is decided (told to the service when it closes).
    pub(super) close_reason: CloseReason,
}

impl Conn {
    pub(super) fn has_pending_replies(&self) -> bool {
        self.stream.has_pending_output()
            || self
                .busy
                .as_ref()
                .is_some_and(|b| b.unsent() > 0 || !b.slots.is_empty() || b.unordered > 0)
    }

    /// The connection is a feed ([`crate::Outcome::Feed`]).
    pub(super) fn is_feed(&self) -> bool {
        self.busy.as_ref().is_some_and(|b| b.feed.is_some())
    }

    /// Requests read but not decoded yet (the output backed up, or a reply streams).
    pub(super) fn has_stalled_input(&self) -> bool {
        self.busy.as_ref().is_some_and(|b| b.stalled)
    }

    /// Work the loop can do for this connection now, without a new event: its output is drained and it has a
    /// streamed reply to go on with, requests left undecoded, or a socket that may hold more.
    pub(super) fn has_more_work(&self) -> bool {
        let Some(busy) = self.busy.as_ref() else {
            return self.readable && !self.peer_closed && !self.close_after_flush;
        };
        if busy.unsent() > 0 || busy.feed.is_some() {
            // A feed's loop is woken by the feed, or by its socket.
            return false;
        }
        // Bytes still to discard are read on whatever waits (a reply held for them among others).
        busy.stream_first()
            || (busy.stalled && !busy.streaming)
            || (self.readable
                && !self.peer_closed
                && !self.close_after_flush
                && (busy.slots.is_empty() || busy.skip > 0))
    }
}

#[cfg(test)]
mod tests {
    use std::mem::size_of;

    /// An idle connection is its slab entry, 48 bytes in a release build before TLS; the TLS variant of the
    /// stream (a box) must not make a plain connection bigger (docs/benchmarks.md, conn-memory). Checked in
    /// parts, since mio's socket carries a debug-only field in test builds: the stream is the socket plus at
    /// most a word (the box, with the tag in the socket's padding), and everything else fits 32 bytes (the
    /// last read's time in 4 bytes, not a 16-byte `Instant`, is what pays for the word).
    #[test]
    fn tls_does_not_grow_an_idle_plain_connection() {
        let socket = size_of::<mio::net::TcpStream>().next_multiple_of(8);
        assert!(size_of::<crate::stream::Stream>() <= socket + 8);
        assert!(size_of::<super::Conn>() - size_of::<crate::stream::Stream>() <= 32);
        #[cfg(not(debug_assertions))]
        assert_eq!(size_of::<super::Conn>(), 48);
    }
}
