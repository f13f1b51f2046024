//! The path of a request through its loop: a ready connection served (its streamed reply first, then its
//! input), one read into the loop's shared buffer (or the connection's own while a request is partial), the
//! service's decoder run until the bytes are used up, each request admitted and handled, what is left of an
//! incomplete request kept for the next read, and one write of every reply (what the socket does not take
//! stays queued on the connection).

use std::io::{self, Read};
use std::time::Instant;

use super::conn::{run_stream, Busy, Conn, Slot};
use super::{Completion, IoLoop, READS_PER_TURN};
use crate::config::BufferMode;
use crate::metrics;
use crate::output::Unsent;
use crate::service::{CloseReason, Cx, Decode, Outcome, Rejection, Service};

/// Spare room guaranteed when reading into a connection's own buffer.
const MIN_OWN_READ: usize = 4096;

impl<S: Service> IoLoop<S> {
    /// One read and the requests it completes. Ok(true): the socket may hold more.
    pub(super) fn read_and_handle(&mut self, key: usize, now: Instant) -> io::Result<bool> {
        let conn = &mut self.conns[key];
        let own_buffer = conn
            .busy
            .as_ref()
            .is_some_and(|b| !b.input.is_empty() || b.input.capacity() > 0);
        let (n, more) = if own_buffer {
            let busy = conn.busy.as_mut().expect("own buffer");
            let want = busy
                .needed
                .saturating_sub(busy.input.len() - busy.input_done)
                .max(MIN_OWN_READ);
            busy.input.reserve(want);
            let len = busy.input.len();
            let cap = busy.input.capacity();
            busy.input.resize(cap, 0);
            let r = conn.stream.read(&mut busy.input[len..]);
            match r {
                Ok(n) => {
                    busy.input.truncate(len + n);
                    (n, n == cap - len)
                }
                Err(e) => {
                    busy.input.truncate(len);
                    return self.read_error(key, e);
                }
            }
        } else {
            match conn.stream.read(&mut self.read_buf) {
                Ok(n) => (n, n == self.read_buf.len()),
                Err(e) => return self.read_error(key, e),
            }
        };
        let millis = self.millis(now);
        let conn = &mut self.conns[key];
        if n == 0 {
            conn.peer_closed = true;
            conn.readable = false;
            return Ok(false);
        }
        if !more && !conn.read_closed {
            // A short read drained the socket; edge-triggered epoll reports the next arrival.
            conn.readable = false;
        }
        metrics::BYTES_READ.add(n as u64);
        conn.last_active_ms = millis;
        if own_buffer {
            self.handle_own_input(key, now)?;
        } else {
            let buf = std::mem::take(&mut self.read_buf);
            let result = self.handle_input(key, &buf[..n], now);
            let keep = match result {
                Ok(keep) => keep,
                Err(e) => {
                    self.read_buf = buf;
                    return Err(e);
                }
            };
            if keep > 0 {
                if let Some(conn) = self.conns.get_mut(key) {
                    let busy = conn.busy.get_or_insert_with(Box::default);
                    busy.input.reserve(keep.max(busy.needed));
                    busy.input.extend_from_slice(&buf[n - keep..n]);
                }
            }
            self.read_buf = buf;
        }
        // After a FIN the next read returns the end of the stream; no further edge will announce it.
        Ok(more
            || self
                .conns
                .get(key)
                .is_some_and(|c| c.read_closed && !c.peer_closed))
    }

    /// Decodes and handles what the connection's own buffer holds.
    pub(super) fn handle_own_input(&mut self, key: usize, now: Instant) -> io::Result<()> {
        let busy = self.conns[key].busy.as_mut().expect("own buffer");
        busy.stalled = false;
        let mut input = std::mem::take(&mut busy.input);
        let done = busy.input_done;
        let keep = self.handle_input(key, &input[done..], now)?;
        if let Some(busy) = self.conns.get_mut(key).and_then(|c| c.busy.as_mut()) {
            let handled = input.len() - keep;
            if keep == 0 {
                input.clear();
                busy.input_done = 0;
            } else if handled >= input.len() / 2 {
                // Moving what is left costs less than what was handled since the last move.
                input.drain(..handled);
                busy.input_done = 0;
            } else {
                busy.input_done = handled;
            }
            if input.is_empty() && self.cfg.buffer_mode == BufferMode::Shared {
                input = Vec::new();
            }
            busy.input = input;
        }
        Ok(())
    }

    pub(super) fn read_error(&mut self, key: usize, e: io::Error) -> io::Result<bool> {
        match e.kind() {
            io::ErrorKind::WouldBlock => {
                self.conns[key].readable = false;
                Ok(false)
            }
            io::ErrorKind::Interrupted => Ok(true),
            _ => Err(e),
        }
    }

    /// Decodes and handles the requests in `bytes`. Returns how many bytes at its end are left for later: an
    /// incomplete request, or requests not decoded because the output backed up.
    pub(super) fn handle_input(
        &mut self,
        key: usize,
        bytes: &[u8],
        now: Instant,
    ) -> io::Result<usize> {
        let mut pos = 0;
        // Bytes the stream still owes to a frame that consumed more than it had.
        let busy = self.conns[key].busy.as_mut();
        if let Some(b) = busy {
            if b.skip > 0 {
                let n = b.skip.min(bytes.len());
                b.skip -= n;
                pos = n;
                if b.skip == 0 {
                    b.skip_done();
                }
            }
            if b.needed > bytes.len() {
                return Ok(bytes.len() - pos);
            }
            b.needed = 0;
        }
        let deadline = self.cfg.request_deadline.map(|d| now + d);
        let mut frames = 0u64;
        let result = self.handle_frames(key, bytes, pos, now, deadline, &mut frames);
        metrics::REQUESTS.add(frames);
        self.record_batch_latency(now);
        result
    }

    /// Records the requests answered on the loop from this read, all with the time from the read until
    /// now (their replies are written together): two clock reads a read, not two a request.
    fn record_batch_latency(&mut self, read_at: Instant) {
        if self.batch_kinds.is_empty() {
            return;
        }
        // Only a service with a latency family counts them (`handle_frames`).
        let Some(family) = self.service.request_latency() else {
            self.batch_kinds.clear();
            return;
        };
        let nanos = u64::try_from(read_at.elapsed().as_nanos()).unwrap_or(u64::MAX);
        for (kind, n) in self.batch_kinds.drain(..) {
            family.record_n(kind, nanos, n);
        }
    }

    /// Counts a request answered on the loop in this read's batch (see `record_batch_latency`).
    fn count_in_batch(&mut self, kind: usize) {
        match self.batch_kinds.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => self.batch_kinds.push((kind, 1)),
        }
    }

    pub(super) fn handle_frames(
        &mut self,
        key: usize,
        bytes: &[u8],
        mut pos: usize,
        now: Instant,
        deadline: Option<Instant>,
        frames: &mut u64,
    ) -> io::Result<usize> {
        let limit = self.cfg.max_output_bytes;
        while pos < bytes.len() {
            let streaming = self.conns[key].busy.as_ref().is_some_and(|b| b.streaming);
            let budget_spent = self.turn_requests >= self.cfg.max_requests_per_turn;
            if self.out.total_len() >= limit || streaming || budget_spent {
                // Back-pressure, or the turn's budget: stop here; the rest waits in the connection until the
                // replies are out, or until the loop has served the others.
                self.conns[key]
                    .busy
                    .get_or_insert_with(Box::default)
                    .stalled = true;
                break;
            }
            match self
                .service
                .decode_conn(&bytes[pos..], &mut self.conns[key].decoder_state)
            {
                Decode::Incomplete { needed } => {
                    return self.hold_incomplete(key, bytes.len() - pos, needed, None, now);
                }
                Decode::Interim { reply, needed } => {
                    return self.hold_incomplete(key, bytes.len() - pos, needed, Some(reply), now);
                }
                Decode::Frame { request, consumed } => {
                    if consumed == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "decoder consumed nothing",
                        ));
                    }
                    let avail = bytes.len() - pos;
                    // The frame owns bytes still to come, which are discarded as they arrive; its reply
                    // waits for them (Slot::AfterSkip).
                    let discarding = consumed > avail;
                    if discarding {
                        self.conns[key].busy.get_or_insert_with(Box::default).skip =
                            consumed - avail;
                        pos = bytes.len();
                    } else {
                        pos += consumed;
                    }
                    if let Some(b) = self.conns[key].busy.as_mut() {
                        b.partial_since = None;
                        b.interim_sent = false;
                    }
                    let ordered = self.conns[key]
                        .busy
                        .as_ref()
                        .is_some_and(|b| !b.slots.is_empty());
                    let mark = self.out.len();
                    *frames += 1;
                    self.turn_requests += self.service.weight(&request).max(1);
                    let deadline = self.service.deadline(&request, now).or(deadline);
                    // Only a service with a latency family has its requests counted by kind.
                    let kind = self
                        .service
                        .request_latency()
                        .map(|_| self.service.request_kind(&request));
                    // Reading the clock only for requests that have a deadline keeps the common path free of it.
                    let admitted = match deadline {
                        Some(d) if Instant::now() >= d => Err(Rejection::DeadlineExpired),
                        _ => self.admission.admit(now),
                    };
                    let outcome = match admitted {
                        Err(why) => {
                            metrics::REJECTED.incr(match why {
                                Rejection::InFlightLimit => 0,
                                Rejection::RateLimit => 1,
                                _ => 2,
                            });
                            self.service.reject(&request, why, &mut self.out);
                            Outcome::Reply
                        }
                        Ok(()) => {
                            let mut cx = Cx {
                                loop_state: &self.state,
                                loop_id: self.id,
                                conn: self.conns[key].stream.fd(),
                                received: now,
                                first_in_batch: *frames == 1,
                                deadline,
                                server: &self.control,
                                executor: &self.executor,
                                output_room: limit.saturating_sub(self.out.total_len()),
                            };
                            self.service.handle(&mut cx, request, &mut self.out)
                        }
                    };
                    if let Some(kind) = kind.filter(|_| !matches!(outcome, Outcome::Defer(_))) {
                        self.count_in_batch(kind);
                    }
                    let conn = &mut self.conns[key];
                    let held = discarding && matches!(outcome, Outcome::Reply);
                    if ordered || held {
                        // Once a reply is pending, later replies queue behind it.
                        let busy = conn.busy.get_or_insert_with(Box::default);
                        let mut reply = Unsent::default();
                        self.out.split_into(mark, &mut reply);
                        if held {
                            busy.slots.push_back(Slot::AfterSkip(reply));
                        } else if !reply.is_empty() {
                            busy.slots.push_back(Slot::Ready(reply));
                        }
                    }
                    match outcome {
                        Outcome::Reply => {}
                        Outcome::Stream(mut stream) => {
                            // Next in order when nothing is pending before it: it writes straight on.
                            if ordered || !run_stream(&mut stream, &mut self.out, limit) {
                                let busy = conn.busy.get_or_insert_with(Box::default);
                                busy.slots.push_back(Slot::Streaming(stream));
                                busy.streaming = true;
                            }
                        }
                        Outcome::Close => {
                            conn.close_after_flush = true;
                            return Ok(0);
                        }
                        Outcome::Feed(feed) => {
                            // What else the read held is dropped: a feed reads nothing more.
                            let generation = conn.generation;
                            let waker = self.feed_waker(key, generation);
                            let busy = self.conns[key].busy.get_or_insert_with(Box::default);
                            busy.feed = Some((feed, waker));
                            return Ok(0);
                        }
                        Outcome::Defer(deferred) => {
                            let busy = conn.busy.get_or_insert_with(Box::default);
                            let seq = if deferred.unordered {
                                busy.unordered += 1;
                                None
                            } else {
                                busy.slots.push_back(Slot::Waiting);
                                Some(busy.head_seq + busy.slots.len() as u64 - 1)
                            };
                            self.admission.started();
                            let done = self.completions.clone();
                            let generation = conn.generation;
                            let close_after = deferred.close_after;
                            tokio::task::spawn_local(async move {
                                let reply = deferred.reply.await;
                                done.done.borrow_mut().push(Completion {
                                    key,
                                    generation,
                                    seq,
                                    reply,
                                    received: now,
                                    kind,
                                });
                                done.notify.notify_one();
                            });
                            if close_after {
                                conn.close_after_flush = true;
                                return Ok(0);
                            }
                        }
                    }
                }
                Decode::Close { reply } => {
                    if let Some(reply) = reply {
                        let conn = &mut self.conns[key];
                        match conn.busy.as_mut().filter(|b| !b.slots.is_empty()) {
                            Some(b) => b.slots.push_back(Slot::Ready(Unsent::from(reply))),
                            None => self.out.extend_from_slice(reply),
                        }
                    }
                    let conn = &mut self.conns[key];
                    conn.close_after_flush = true;
                    conn.close_reason = CloseReason::Error;
                    return Ok(0);
                }
            }
        }
        Ok(bytes.len() - pos)
    }

    /// Keeps the `held` bytes of an incomplete frame for later (returns how many), and writes the decoder's
    /// interim reply for that frame, once.
    pub(super) fn hold_incomplete(
        &mut self,
        key: usize,
        held: usize,
        needed: Option<usize>,
        interim: Option<&'static [u8]>,
        now: Instant,
    ) -> io::Result<usize> {
        if held > self.cfg.max_frame_bytes || needed.is_some_and(|n| n > self.cfg.max_frame_bytes) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "frame over max_frame_bytes",
            ));
        }
        let busy = self.conns[key].busy.get_or_insert_with(Box::default);
        // The service hears of a new partial request, and again once its length is known (a storage
        // command's line has ended).
        let tell = busy.partial_since.is_none() || (busy.needed == 0 && needed.is_some());
        busy.needed = needed.unwrap_or(0);
        busy.partial_since.get_or_insert(now);
        if let Some(reply) = interim.filter(|_| !busy.interim_sent) {
            // In request order: behind the replies still pending for the requests before it.
            busy.interim_sent = true;
            if busy.slots.is_empty() {
                self.out.extend_from_slice(reply);
            } else {
                busy.slots.push_back(Slot::Ready(Unsent::from(reply)));
            }
        }
        if tell {
            let fd = self.conns[key].stream.fd();
            self.service.request_incomplete(&self.state, fd, needed);
        }
        Ok(held)
    }

    /// Serves one connection: writes what is pending, then goes on with a streamed reply, with requests left
    /// undecoded, or reads, decodes and handles new ones, until it would block, its output backs up, or it
    /// used its share of the turn (reads and bytes).
    pub(super) fn serve(&mut self, key: usize, now: Instant) {
        if self.conns.get(key).is_none_or(|c| c.closing) {
            return;
        }
        self.turn_written = 0;
        self.turn_requests = 0;
        if let Some(conn) = self.conns.get_mut(key) {
            conn.served_in = self.turn_number;
            if conn.is_feed() {
                self.serve_feed(key);
                return;
            }
        }
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
                    self.close(key, CloseReason::Error);
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
                Ok(_) if self.conns.get(key).is_some_and(Conn::is_feed) => {
                    // The request just handled made it one.
                    self.serve_feed(key);
                    return;
                }
                Ok(true) => {}
                Ok(false) => {
                    if self.flush(key) {
                        // What the read left undecoded (the output filled up) continues next turn.
                        if self.conns.get(key).is_some_and(Conn::has_more_work) {
                            self.queue_again(key);
                        }
                    }
                    self.settle(key);
                    return;
                }
                Err(e) => {
                    tracing::debug!("io loop {}: connection {key}: {e}", self.id);
                    self.close(key, CloseReason::Error);
                    return;
                }
            }
        }
        if self.flush(key) {
            self.settle(key);
            if self.conns.get(key).is_some_and(Conn::has_more_work) {
                self.queue_again(key);
            }
        }
    }

    /// Serves the connection again next turn (once, however many budgets it hit).
    pub(super) fn queue_again(&mut self, key: usize) {
        if let Some(conn) = self.conns.get_mut(key) {
            if !conn.queued_again {
                conn.queued_again = true;
                self.again_conns.push(key);
            }
        }
    }

    /// Writes the connection's pending replies and whatever the last read produced, at most what is left of
    /// the connection's `max_bytes_per_turn` in this turn. Returns false when the connection is gone or has
    /// replies left: its socket is full (it is served again when writable) or its share of the turn is spent
    /// (it is served again next turn).
    pub(super) fn flush(&mut self, key: usize) -> bool {
        let Some(conn) = self.conns.get_mut(key) else {
            self.out.clear();
            return false;
        };
        let budget = self
            .cfg
            .max_bytes_per_turn
            .saturating_sub(self.turn_written);
        // Replies of earlier requests still queued go first.
        let pending = conn.busy.as_mut().filter(|b| b.unsent() > 0);
        let result = match pending {
            Some(busy) => {
                self.out.drain_after(0, &mut busy.output);
                busy.output.write_to(&mut conn.stream, budget)
            }
            // Nothing new: records a TLS session still holds (handshake messages, the end of a reply).
            None if self.out.total_len() == 0 => match conn.stream.flush_pending() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
                other => other.map(|()| 0),
            },
            None => self.out.write_to(&mut conn.stream, budget).inspect(|&n| {
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
                let done = conn.busy.as_ref().is_none_or(|b| b.unsent() == 0)
                    && !conn.stream.has_pending_output();
                if !done {
                    if n >= budget {
                        // Stopped by the budget, not the socket: no edge will announce room that is there.
                        if !conn.queued_again {
                            conn.queued_again = true;
                            self.again_conns.push(key);
                        }
                    } else {
                        conn.writable = false;
                    }
                }
                done
            }
            Err(e) => {
                self.out.clear();
                tracing::debug!("io loop {}: connection {key}: write: {e}", self.id);
                self.close(key, CloseReason::Error);
                false
            }
        }
    }
}
