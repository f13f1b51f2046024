//! The LIFO pool: a lock-free job queue, at most one spinning worker, and a stack of parked
//! workers woken most-recently-idle first (the design of folly's `LifoSem`, seed 002): the
//! worker that just went idle still has its cache, stack and CPU warm, and a lightly loaded
//! pool keeps using the same one or two threads instead of cycling through all of them.
//!
//! Wake-up protocol. `state` packs the number of reserved-or-queued jobs (`<< 1`) with a
//! `CLOSED` bit; `searching` counts workers that are awake and about to look at the queue
//! (spinning, or just woken). A submitter reserves a slot in `state`, pushes the job, then
//! wakes the top of the idle stack unless there are more searchers than jobs queued ahead of
//! its own, each searcher being good for one job. A worker leaving the search
//! (to park, or because it found a job) first publishes that, then re-reads `state`. Both sides
//! put a `SeqCst` fence between their write and their read, so of a submitter and a worker
//! racing, at least one sees the other: either the submitter wakes someone or the worker finds
//! the job. No wake-up is lost.
//!
//! A spinner the kernel has preempted (on an oversubscribed machine) would hold jobs until it
//! is scheduled again, for milliseconds. So a spinner publishes the time each time it looks at
//! the clock (every microsecond or two), and a submitter that finds it has not for 10 µs wakes
//! a parked worker after all. And a worker stops spinning once its spins stopped finding jobs
//! (see `SPIN_CREDIT`): when jobs come further apart than the spin, or the machine has more
//! runnable threads than cores (then the submitter is often off its CPU while the spinner
//! waits, and the spinner's CPU time makes a fair scheduler, such as Linux's EEVDF, run the
//! thread late when it is woken: on a 2-core machine at load 10, spinning on regardless gave
//! the LIFO pool a median hand-off of 6-9 µs against the FIFO pool's 1.4-3.4 µs; with no
//! spin, or spins that stop when they miss, 1.3 µs).

use std::hint;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize};
use std::sync::OnceLock;
use std::thread::{self, Thread};
use std::time::Instant;

use crossbeam_queue::SegQueue;
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

use crate::job::{Common, Job, Pool, Rejected};

const CLOSED: usize = 1;
const ONE_JOB: usize = 2;

/// A worker's spin credit: a spin that finds a job earns one (up to this), one that does not
/// costs one, and a worker out of credit parks at once. Poisson arrivals with a mean gap of
/// half the spin miss one spin in seven; with eight credits such a pool practically never runs
/// out, while a pool whose spins stopped paying stops spinning after eight misses.
const SPIN_CREDIT: u32 = 8;

/// Out of credit, a worker spins once more as a probe only after this many spin times: what
/// stopped the spins paying (jobs further apart, or on an oversubscribed machine a spinner or
/// submitter waiting for a CPU) may have passed, and probing costs at most 2% of a core.
const PROBE_AFTER_SPINS: u32 = 50;

/// A spinner polls the clock every microsecond or two; one that has not for this long has been
/// preempted, and submitters stop leaving jobs to it.
const SPINNER_SILENT_NANOS: u64 = 10_000;

/// How a spin for a job went.
enum Spin {
    Found(Job),
    Missed,
    /// Another worker was spinning, or spinning is off.
    Skipped,
}

pub(crate) struct LifoPool {
    common: Common,
    /// Reserved-or-queued jobs `<< 1`, plus the `CLOSED` bit.
    state: CachePadded<AtomicUsize>,
    /// Lock-free so a submitting I/O thread never waits behind a preempted worker holding a lock.
    queue: SegQueue<Job>,
    searching: CachePadded<AtomicUsize>,
    /// When the spinning worker last polled the queue, in nanoseconds since `epoch`; 0 when
    /// nobody spins. A worker claims the spin by setting it from 0.
    spinner_polled: CachePadded<AtomicU64>,
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
            spinner_polled: CachePadded::new(AtomicU64::new(0)),
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

    /// Polls the queue for up to the configured spin time, unless another worker is spinning
    /// already. At most one worker spins: one is enough to catch the next job.
    fn spin_pop(&self, worker: usize) -> Spin {
        let spin = self.common.config.spin;
        if spin.is_zero() {
            return Spin::Skipped;
        }
        let start = Instant::now();
        let start_nanos = self.nanos_since_epoch(start).max(1);
        // Claimed atomically: two searchers that each saw the other and both parked would
        // leave nobody spinning.
        if self
            .spinner_polled
            .compare_exchange(0, start_nanos, Relaxed, Relaxed)
            .is_err()
        {
            return Spin::Skipped;
        }
        self.common.workers[worker].spun();
        let found = 'spin: loop {
            // Reading the clock costs more than a poll; look at it every few polls.
            for _ in 0..32 {
                if self.state.load(Relaxed) >= ONE_JOB {
                    if let Some(job) = self.pop() {
                        break 'spin Spin::Found(job);
                    }
                }
                hint::spin_loop();
            }
            let now = Instant::now();
            // Tells submitters this spinner is still running (see `searchers_on_time`).
            self.spinner_polled
                .store(self.nanos_since_epoch(now).max(1), Relaxed);
            if now.saturating_duration_since(start) >= spin {
                break Spin::Missed;
            }
        };
        self.spinner_polled.store(0, Relaxed);
        found
    }

    /// Whether a submitter may leave its job to the searching workers: yes, unless one of them
    /// is a spinner that has not polled lately, i.e. has been preempted.
    fn searchers_on_time(&self, now: Instant) -> bool {
        let polled = self.spinner_polled.load(Relaxed);
        polled == 0 || self.nanos_since_epoch(now) <= polled.saturating_add(SPINNER_SILENT_NANOS)
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
        // Each searcher takes one job: with as many jobs queued ahead as searchers, this one
        // needs another worker. (A woken worker the kernel has not run yet must not hold back
        // every job that comes meanwhile: on a busy machine that wait lasts milliseconds.)
        let queued_ahead = before / ONE_JOB;
        let leave_to_searchers =
            self.searching.load(SeqCst) > queued_ahead && self.searchers_on_time(now);
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
        let mut spin_credit = SPIN_CREDIT;
        // When a worker out of credit spins again to see whether spinning pays again.
        let mut probe_at = idle_since;
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
            if spin_credit > 0 || idle_since >= probe_at {
                match self.spin_pop(worker) {
                    Spin::Found(job) => {
                        counters.spin_succeeded();
                        spin_credit = (spin_credit + 1).min(SPIN_CREDIT);
                        searching = false;
                        self.stop_searching();
                        self.common.run(worker, job);
                        continue;
                    }
                    Spin::Missed => {
                        spin_credit = spin_credit.saturating_sub(1);
                        if spin_credit == 0 {
                            probe_at = Instant::now() + spin * PROBE_AFTER_SPINS;
                        }
                    }
                    Spin::Skipped => {}
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
        pool.spinner_polled.store(later, SeqCst);
        pool.submit(job()).unwrap();
        assert_eq!(pool.idle_len.load(SeqCst), 1, "woke a parked worker");
        assert!(!pool.parkers[0].notified.load(SeqCst));
    }

    #[test]
    fn a_submit_wakes_a_parked_worker_when_the_spinner_is_overdue() {
        let pool = pool_with_parked_worker();
        pool.searching.store(1, SeqCst);
        // The spinner has not polled for a millisecond: it has been preempted.
        pool.spinner_polled.store(1, SeqCst);
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
    fn a_submit_wakes_a_parked_worker_when_each_searcher_has_a_job_already() {
        let pool = pool_with_parked_worker();
        // One worker woken earlier is on its way (perhaps not yet run by the kernel).
        pool.searching.store(1, SeqCst);
        pool.submit(job()).unwrap();
        assert_eq!(
            pool.idle_len.load(SeqCst),
            1,
            "the first job is the searcher's"
        );
        pool.submit(job()).unwrap();
        assert_eq!(
            pool.idle_len.load(SeqCst),
            0,
            "the second job was left to a searcher already taken"
        );
        assert!(pool.parkers[0].notified.load(SeqCst));
        assert_eq!(pool.searching.load(SeqCst), 2);
        assert_eq!(pool.queued(), 2);
    }

    #[test]
    fn a_worker_does_not_spin_while_another_does() {
        let pool = pool_with_parked_worker();
        pool.spinner_polled.store(u64::MAX, SeqCst);
        assert!(matches!(pool.spin_pop(0), Spin::Skipped));
        assert_eq!(pool.common.workers[0].snapshot().spins, 0);
        assert_eq!(
            pool.spinner_polled.load(SeqCst),
            u64::MAX,
            "took the spin over"
        );
        pool.spinner_polled.store(0, SeqCst);
        // Nobody spins: this worker does, finds the queue empty and gives the spin back.
        assert!(matches!(pool.spin_pop(0), Spin::Missed));
        assert_eq!(pool.common.workers[0].snapshot().spins, 1);
        assert_eq!(pool.spinner_polled.load(SeqCst), 0);
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
