//! Request ids unique across runs.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::config::Config;

pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Request ids unique within a run and across runs against the same server (which may remember
/// them, as the pacer remembers reservations): the run's start time in milliseconds in the high
/// bits, above the request's index in the run, which worker threads interleave.
pub(crate) struct RunIds {
    tag: u64,
    thread: u64,
    threads: u64,
    next: u64,
}

impl RunIds {
    /// Bits of the index; the tag holds the rest (it wraps every 4.6 hours).
    pub const INDEX_BITS: u32 = 40;
    pub const INDEX_MASK: u64 = (1 << Self::INDEX_BITS) - 1;

    pub fn new(config: &Config, thread: usize) -> Self {
        RunIds {
            tag: unix_ms() & (u64::MAX >> Self::INDEX_BITS),
            thread: thread as u64,
            threads: config.threads as u64,
            next: 0,
        }
    }

    pub fn next_id(&mut self) -> u64 {
        let index = (self.next * self.threads + self.thread) & Self::INDEX_MASK;
        self.next += 1;
        self.tag << Self::INDEX_BITS | index
    }
}
