//! Connections that became feeds ([`crate::Outcome::Feed`]): what the feed produces is written whenever the
//! socket has room, what the peer sends is read and dropped (so its close is seen at once), and a feed with
//! nothing to say sleeps until its waker, woken from any thread, puts the connection on its loop's list.

use std::io::{self, Read};
use std::sync::Arc;
use std::task::{Wake, Waker};

use super::{IoLoop, WokenFeeds};
use crate::service::{CloseReason, FeedStep, Service};

/// A feed's waker: puts its connection on the loop's list and wakes the loop's poll.
struct FeedWake {
    key: usize,
    generation: u32,
    woken: WokenFeeds,
    poll: Option<Arc<mio::Waker>>,
}

impl Wake for FeedWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let mut woken = self.woken.lock().unwrap_or_else(|e| e.into_inner());
        // One entry per sleep is enough: a connection already listed is served once for all its wakes.
        let first = woken.is_empty();
        if !woken.contains(&(self.key, self.generation)) {
            woken.push((self.key, self.generation));
        }
        drop(woken);
        if first {
            if let Some(poll) = &self.poll {
                let _ = poll.wake();
            }
        }
    }
}

impl<S: Service> IoLoop<S> {
    /// The waker of connection `key`'s feed.
    pub(super) fn feed_waker(&self, key: usize, generation: u32) -> Waker {
        Waker::from(Arc::new(FeedWake {
            key,
            generation,
            woken: self.woken_feeds.clone(),
            poll: self.control.waker(self.id),
        }))
    }

    /// Serves the connections whose feeds woke since the last turn.
    pub(super) fn serve_woken_feeds(&mut self) {
        let woken =
            std::mem::take(&mut *self.woken_feeds.lock().unwrap_or_else(|e| e.into_inner()));
        for (key, generation) in woken {
            if self
                .conns
                .get(key)
                .is_some_and(|c| c.generation == generation && !c.closing)
            {
                self.serve_feed(key);
            }
        }
    }

    /// Serves a feed connection: drops what the peer sent (closing on its EOF or an error), writes what is
    /// pending, and asks the feed for more while the output has room, until the socket is full, the turn's
    /// byte budget is spent or the feed is idle.
    pub(super) fn serve_feed(&mut self, key: usize) {
        let limit = self.cfg.max_output_bytes;
        self.turn_written = 0;
        loop {
            if let Err(e) = self.drop_feed_input(key) {
                tracing::debug!("io loop {}: feed connection {key}: {e}", self.id);
                self.close(key, CloseReason::Error);
                return;
            }
            let Some(conn) = self.conns.get(key) else {
                return;
            };
            if conn.peer_closed {
                self.out.clear();
                self.close(key, CloseReason::Normal);
                return;
            }
            if !self.flush(key) {
                return;
            }
            if self.turn_written >= self.cfg.max_bytes_per_turn {
                self.queue_again(key);
                return;
            }
            let Some(busy) = self.conns.get_mut(key).and_then(|c| c.busy.as_mut()) else {
                return;
            };
            if !busy.slots.is_empty() || busy.unordered > 0 {
                // Replies of requests before the feed go first; their completion serves it again.
                return;
            }
            let Some((feed, waker)) = busy.feed.as_mut() else {
                return;
            };
            while self.out.total_len() < limit {
                if feed.step(&mut self.out, waker) == FeedStep::Idle {
                    break;
                }
            }
            if self.out.total_len() == 0 {
                return;
            }
        }
    }

    /// Reads and drops what a feed's peer sent; notes its EOF.
    fn drop_feed_input(&mut self, key: usize) -> io::Result<()> {
        let Some(conn) = self.conns.get_mut(key) else {
            return Ok(());
        };
        while conn.readable && !conn.peer_closed {
            match conn.stream.read(&mut self.read_buf) {
                Ok(0) => {
                    conn.peer_closed = true;
                    conn.readable = false;
                }
                Ok(n) if n < self.read_buf.len() && !conn.read_closed => conn.readable = false,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => conn.readable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
