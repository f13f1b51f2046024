//! The baseline: the classic `Mutex<VecDeque>` + `Condvar` pool (a `pthread_cond_t` pool).
//! The condition variable wakes the longest-waiting worker, so work cycles through every idle
//! thread; the `wakeup` experiment measures what that costs against the LIFO pool.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use crate::job::{Common, Job, Pool, Rejected};

pub(crate) struct FifoPool {
    common: Common,
    queue: Mutex<FifoQueue>,
    job_available: Condvar,
}

struct FifoQueue {
    jobs: VecDeque<Job>,
    closed: bool,
}

impl FifoPool {
    pub(crate) fn new(common: Common) -> FifoPool {
        FifoPool {
            common,
            queue: Mutex::new(FifoQueue {
                jobs: VecDeque::new(),
                closed: false,
            }),
            job_available: Condvar::new(),
        }
    }

    /// Jobs run outside the lock and their panics are caught, so poisoning cannot leave the
    /// queue half-updated: it is safe to go on with the inner value.
    fn lock(&self) -> MutexGuard<'_, FifoQueue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Pool for FifoPool {
    fn common(&self) -> &Common {
        &self.common
    }

    fn submit(&self, job: Job) -> Result<(), Rejected> {
        let mut queue = self.lock();
        if queue.closed {
            return Err(self.common.refuse(Rejected::ShutDown));
        }
        if queue.jobs.len() >= self.common.config.max_queued {
            return Err(self.common.refuse(Rejected::QueueFull));
        }
        queue.jobs.push_back(job);
        drop(queue);
        self.job_available.notify_one();
        Ok(())
    }

    fn run_worker(&self, worker: usize) {
        let counters = &self.common.workers[worker];
        let mut queue = self.lock();
        loop {
            if let Some(job) = queue.jobs.pop_front() {
                drop(queue);
                self.common.run(worker, job);
                queue = self.lock();
            } else if queue.closed {
                return;
            } else {
                counters.parked();
                queue = self
                    .job_available
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner);
                counters.woken();
            }
        }
    }

    fn close(&self) {
        self.lock().closed = true;
        self.job_available.notify_all();
    }

    fn queued(&self) -> usize {
        self.lock().jobs.len()
    }
}
