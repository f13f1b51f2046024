//! The LIFO pool: a lock-free job queue, at most one spinning worker, and a stack of parked
//! workers woken most-recently-idle first (the design of folly's `LifoSem`, seed 002): the
//! worker that just went idle still has its cache, stack and CPU warm, and a lightly loaded
//! pool keeps using the same one or two threads instead of cycling through all of them.
//!
//! Wake-up protocol. `state` packs the number of reserved-or-queued jobs (`<< 1`) with a
//! `CLOSED` bit; `searching` counts workers that are awake and about to look at the queue
//! (spinning, or just woken). A submitter reserves a slot in `state`, pushes the job, then
//! wakes the top of the idle stack only if nobody is searching. A worker leaving the search
//! (to park, or because it found a job) first publishes that, then re-reads `state`. Both sides
//! put a `SeqCst` fence between their write and their read, so of a submitter and a worker
//! racing, at least one sees the other: either the submitter wakes someone or the worker finds
//! the job. No wake-up is lost.
//!
//! A spinner the kernel has preempted (on an oversubscribed machine) would hold jobs until it
//! is scheduled again, for milliseconds. So a spinner publishes when its spin ends, and a
//! submitter that finds that time passed while the spinner still counts as searching wakes a
//! parked worker after all. And a worker spins only when its last idle stretch was shorter
//! than the spin time: when jobs come further apart, a spin only burns CPU (and, under a fair
//! scheduler on a busy machine, makes the thread slower to be run when it is woken).

use std::hint;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize};
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
    /// When the current spinner's spin ends, in nanoseconds since `epoch`; 0 when nobody spins.
    spin_until: CachePadded<AtomicU64>,
    epoch: Instant,
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
            spin_until: CachePadded::new(AtomicU64::new(0)),
            epoch: Instant::now(),
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

    fn nanos_since_epoch(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Polls the queue for up to the configured spin time.
    fn spin_pop(&self, worker: usize) -> Option<Job> {
        let spin = self.common.config.spin;
        if spin.is_zero() {
            return None;
        }
        self.common.workers[worker].spun();
        let start = Instant::now();
        self.spin_until
            .store(self.nanos_since_epoch(start + spin).max(1), Relaxed);
        let found = 'spin: loop {
            // Reading the clock costs more than a poll; look at it every few polls.
            for _ in 0..32 {
                if self.state.load(Relaxed) >= ONE_JOB {
                    if let Some(job) = self.pop() {
                        break 'spin Some(job);
                    }
                }
                hint::spin_loop();
            }
            if start.elapsed() >= spin {
                break None;
            }
        };
        self.spin_until.store(0, Relaxed);
        found
    }

    /// Whether a submitter may leave its job to the searching workers: yes, unless one of them
    /// is a spinner past the end of its spin, i.e. preempted.
    fn searchers_on_time(&self, now: Instant) -> bool {
        let spin_until = self.spin_until.load(Relaxed);
        spin_until == 0 || self.nanos_since_epoch(now) <= spin_until
    }

    /// The calling worker found a job and stops searching. If it was the last searcher and more
    /// jobs are queued, it hands the search on: their submitters saw it searching and woke nobody.
    fn stop_searching(&self) {
        let was_last = self.searching.fetch_sub(1, SeqCst) == 1;
        fence(SeqCst);
        if was_last && self.state.load(SeqCst) >= ONE_JOB {
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
        fence(SeqCst);
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
            if self.queue.is_empty() {
                // A job reserved but not pushed yet: let its submitter finish before polling
                // again. (Not when a job is there: yielding could delay it by a time slice.)
                thread::yield_now();
            }
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
        let now = job.enqueued_at();
        self.queue.push(job);
        fence(SeqCst);
        let leave_to_searchers = self.searching.load(SeqCst) != 0 && self.searchers_on_time(now);
        if !leave_to_searchers && self.idle_len.load(SeqCst) != 0 {
            self.wake_one();
        }
        Ok(())
    }

    fn run_worker(&self, worker: usize) {
        // Set before this worker can be on the idle stack, so every waker finds it.
        let _ = self.parkers[worker].thread.set(thread::current());
        let counters = &self.common.workers[worker];
        let spin = self.common.config.spin;
        let mut searching = false;
        // When this worker last ran out of jobs.
        let mut idle_since = Instant::now();
        // Whether the last idle stretch was short enough for a spin to have caught its end.
        let mut spin_pays = true;
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
                idle_since = Instant::now();
            }
            // One spinner is enough to catch the next job; more would only burn CPU.
            if spin_pays && self.searching.load(Relaxed) == 1 {
                if let Some(job) = self.spin_pop(worker) {
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
            spin_pays = idle_since.elapsed() <= spin;
        }
    }

    fn close(&self) {
        self.state.fetch_or(CLOSED, SeqCst);
        fence(SeqCst);
        // Wake everyone; woken workers see CLOSED, drain the queue and exit instead of parking.
        while self.idle_len.load(SeqCst) != 0 {
            self.wake_one();
        }
    }

    fn queued(&self) -> usize {
        self.state.load(Relaxed) / ONE_JOB
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Config;

    /// A pool with no worker threads whose only "worker" 0 is the test thread, parked on paper.
    fn pool_with_parked_worker() -> LifoPool {
        let pool = LifoPool::new(Common::new(Config {
            workers: 1,
            spin: Duration::from_millis(1),
            ..Config::default()
        }));
        pool.parkers[0].thread.set(thread::current()).unwrap();
        pool.idle.lock().push(0);
        pool.idle_len.store(1, SeqCst);
        pool
    }

    fn job() -> Job {
        Job::new(None, Box::new(|_| {}))
    }

    #[test]
    fn a_submit_leaves_its_job_to_a_spinner_on_time() {
        let pool = pool_with_parked_worker();
        pool.searching.store(1, SeqCst);
        let later = pool.nanos_since_epoch(Instant::now() + Duration::from_secs(60));
        pool.spin_until.store(later, SeqCst);
        pool.submit(job()).unwrap();
        assert_eq!(pool.idle_len.load(SeqCst), 1, "woke a parked worker");
        assert!(!pool.parkers[0].notified.load(SeqCst));
    }

    #[test]
    fn a_submit_wakes_a_parked_worker_when_the_spinner_is_overdue() {
        let pool = pool_with_parked_worker();
        pool.searching.store(1, SeqCst);
        // The spin should have ended already: its spinner has been preempted.
        pool.spin_until.store(1, SeqCst);
        thread::sleep(Duration::from_millis(1));
        pool.submit(job()).unwrap();
        assert_eq!(
            pool.idle_len.load(SeqCst),
            0,
            "left the job to a preempted spinner"
        );
        assert!(pool.parkers[0].notified.load(SeqCst));
        assert_eq!(
            pool.searching.load(SeqCst),
            2,
            "the woken worker counts as searching"
        );
    }

    #[test]
    fn a_submit_leaves_its_job_to_a_woken_worker() {
        let pool = pool_with_parked_worker();
        // Searching, but nobody spins: a worker woken earlier is on its way.
        pool.searching.store(1, SeqCst);
        pool.submit(job()).unwrap();
        assert_eq!(pool.idle_len.load(SeqCst), 1);
    }

    #[test]
    fn a_submit_with_nobody_searching_wakes_the_top_of_the_stack() {
        let pool = pool_with_parked_worker();
        pool.submit(job()).unwrap();
        assert_eq!(pool.idle_len.load(SeqCst), 0);
        assert!(pool.parkers[0].notified.load(SeqCst));
        assert_eq!(pool.queued(), 1);
    }
}
