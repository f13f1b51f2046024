//! The LIFO pool: a lock-free job queue, at most one spinning worker, and a stack of parked
//! workers woken most-recently-idle first (the design of folly's `LifoSem`, seed 002): the
//! worker that just went idle still has its cache, stack and CPU warm, and a lightly loaded
//! pool keeps using the same one or two threads instead of cycling through all of them.
//!
//! Wake-up protocol. `state` packs the number of reserved-or-queued jobs (`<< 1`) with a
//! `CLOSED` bit; `searching` counts workers that are awake and about to look at the queue
//! (spinning, or just woken). A submitter reserves a slot in `state`, pushes the job, then
//! wakes the top of the idle stack only if nobody is searching. A worker leaving the search
//! (to park, or because it found a job) first publishes that, then re-reads `state`. All of
//! these are `SeqCst`, so of a submitter and a worker racing, at least one sees the other:
//! either the submitter wakes someone or the worker finds the job. No wake-up is lost.

use std::hint;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::OnceLock;
use std::thread::{self, Thread};
use std::time::Instant;

use crossbeam_queue::SegQueue;
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

use crate::job::{Common, Job};
use crate::{Pool, Rejected};

const CLOSED: usize = 1;
const ONE_JOB: usize = 2;

pub(crate) struct LifoPool {
    common: Common,
    /// Reserved-or-queued jobs `<< 1`, plus the `CLOSED` bit.
    state: CachePadded<AtomicUsize>,
    /// Lock-free so a submitting I/O thread never waits behind a preempted worker holding a lock.
    queue: SegQueue<Job>,
    searching: CachePadded<AtomicUsize>,
    /// Length of `idle`, readable without its lock so a submit with nobody idle stays lock-free.
    idle_len: CachePadded<AtomicUsize>,
    /// Parked workers, most recently idle on top. Only the park and wake paths take this lock.
    idle: Mutex<Vec<usize>>,
    parkers: Box<[CachePadded<Parker>]>,
}

struct Parker {
    /// Set by the worker itself before it first advertises itself idle.
    thread: OnceLock<Thread>,
    /// Set (under the idle lock) by whoever pops this worker off the idle stack.
    notified: AtomicBool,
}

impl LifoPool {
    pub(crate) fn new(common: Common) -> LifoPool {
        let workers = common.config.workers;
        LifoPool {
            common,
            state: CachePadded::new(AtomicUsize::new(0)),
            queue: SegQueue::new(),
            searching: CachePadded::new(AtomicUsize::new(0)),
            idle_len: CachePadded::new(AtomicUsize::new(0)),
            idle: Mutex::new(Vec::with_capacity(workers)),
            parkers: (0..workers)
                .map(|_| {
                    CachePadded::new(Parker {
                        thread: OnceLock::new(),
                        notified: AtomicBool::new(false),
                    })
                })
                .collect(),
        }
    }

    fn pop(&self) -> Option<Job> {
        let job = self.queue.pop()?;
        self.state.fetch_sub(ONE_JOB, SeqCst);
        Some(job)
    }

    /// Polls the queue for up to the configured spin time.
    fn spin_pop(&self) -> Option<Job> {
        let spin = self.common.config.spin;
        if spin.is_zero() {
            return None;
        }
        let start = Instant::now();
        loop {
            // Reading the clock costs more than a poll; look at it every few polls.
            for _ in 0..32 {
                if self.state.load(Relaxed) >= ONE_JOB {
                    if let Some(job) = self.pop() {
                        return Some(job);
                    }
                }
                hint::spin_loop();
            }
            if start.elapsed() >= spin {
                return None;
            }
        }
    }

    /// The calling worker found a job and stops searching. If it was the last searcher and more
    /// jobs are queued, it hands the search on: their submitters saw it searching and woke nobody.
    fn stop_searching(&self) {
        if self.searching.fetch_sub(1, SeqCst) == 1 && self.state.load(SeqCst) >= ONE_JOB {
            self.wake_one();
        }
    }

    /// Wakes the most recently idle worker, counting it as searching until it finds a job.
    fn wake_one(&self) {
        let mut idle = self.idle.lock();
        let Some(worker) = idle.pop() else {
            return;
        };
        self.idle_len.fetch_sub(1, SeqCst);
        self.searching.fetch_add(1, SeqCst);
        let parker = &self.parkers[worker];
        parker.notified.store(true, Release);
        drop(idle);
        if let Some(thread) = parker.thread.get() {
            thread.unpark();
        }
    }

    /// Parks the calling (searching) worker until a submitter or `close` wakes it. Returns with
    /// the worker counted as searching again.
    fn park(&self, worker: usize) {
        let parker = &self.parkers[worker];
        {
            let mut idle = self.idle.lock();
            idle.push(worker);
            self.idle_len.fetch_add(1, SeqCst);
            self.searching.fetch_sub(1, SeqCst);
        }
        // A submitter that reserved its job before seeing us on the stack woke nobody: look again.
        if self.state.load(SeqCst) != 0 {
            let mut idle = self.idle.lock();
            if let Some(at) = idle.iter().rposition(|&w| w == worker) {
                idle.remove(at);
                self.idle_len.fetch_sub(1, SeqCst);
                self.searching.fetch_add(1, SeqCst);
            } else {
                // A waker popped us and counted us as searching; its notification is consumed
                // here (it was set under the lock we hold) and its unpark token, if any, only
                // makes a later `thread::park` return early, which the loop below tolerates.
                parker.notified.store(false, Relaxed);
            }
            drop(idle);
            // The job may be reserved but not pushed yet, or the pool is closing with jobs still
            // running elsewhere: let those threads make progress before we poll again.
            thread::yield_now();
            return;
        }
        let counters = &self.common.workers[worker];
        counters.parked();
        while !parker.notified.swap(false, Acquire) {
            thread::park();
        }
        counters.woken();
    }
}

impl Pool for LifoPool {
    fn common(&self) -> &Common {
        &self.common
    }

    fn submit(&self, job: Job) -> Result<(), Rejected> {
        let before = self.state.fetch_add(ONE_JOB, SeqCst);
        if before & CLOSED != 0 || before / ONE_JOB >= self.common.config.max_queued {
            self.state.fetch_sub(ONE_JOB, SeqCst);
            let why = if before & CLOSED != 0 {
                Rejected::ShutDown
            } else {
                Rejected::QueueFull
            };
            return Err(self.common.refuse(why));
        }
        self.queue.push(job);
        if self.searching.load(SeqCst) == 0 && self.idle_len.load(SeqCst) != 0 {
            self.wake_one();
        }
        Ok(())
    }

    fn run_worker(&self, worker: usize) {
        // Set before this worker can be on the idle stack, so every waker finds it.
        let _ = self.parkers[worker].thread.set(thread::current());
        let counters = &self.common.workers[worker];
        let mut searching = false;
        loop {
            if let Some(job) = self.pop() {
                if searching {
                    searching = false;
                    self.stop_searching();
                }
                self.common.run(worker, job);
                continue;
            }
            if !searching {
                searching = true;
                self.searching.fetch_add(1, SeqCst);
            }
            // One spinner is enough to catch the next job; more would only burn CPU.
            if self.searching.load(Relaxed) == 1 {
                if let Some(job) = self.spin_pop() {
                    counters.spin_succeeded();
                    searching = false;
                    self.stop_searching();
                    self.common.run(worker, job);
                    continue;
                }
            }
            // Exit only once closed and every reserved job has been popped: a job is never
            // stranded in the queue after the workers are gone.
            if self.state.load(SeqCst) == CLOSED {
                self.searching.fetch_sub(1, SeqCst);
                return;
            }
            self.park(worker);
        }
    }

    fn close(&self) {
        self.state.fetch_or(CLOSED, SeqCst);
        // Wake everyone; woken workers see CLOSED, drain the queue and exit instead of parking.
        while self.idle_len.load(SeqCst) != 0 {
            self.wake_one();
        }
    }

    fn queued(&self) -> usize {
        self.state.load(Relaxed) / ONE_JOB
    }
}
