//! A service's background thread (configuration watchers, the lease keeper): runs until its handle is
//! dropped, which asks it to stop, wakes it from `park_timeout` and waits for it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

pub struct Background {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Background {
    /// Starts thread `name` running `work(stop)`; `work` returns once `stop` reads true (checked after
    /// each `park_timeout`). With `low_priority` the thread runs at nice 19, so what it builds does not
    /// preempt the I/O loops for long.
    pub fn spawn(
        name: &str,
        low_priority: bool,
        work: impl FnOnce(&AtomicBool) + Send + 'static,
    ) -> std::io::Result<Background> {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::Builder::new().name(name.into()).spawn({
            let stop = Arc::clone(&stop);
            move || {
                if low_priority {
                    lower_thread_priority();
                }
                work(&stop)
            }
        })?;
        Ok(Background {
            stop,
            thread: Some(thread),
        })
    }

    /// Whether the thread was asked to stop.
    pub fn stopping(stop: &AtomicBool) -> bool {
        stop.load(Ordering::Acquire)
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

/// Lowers the calling thread to the weakest CPU share (nice 19), for a service's background thread
/// (configuration watcher, lease keeper...) that shares cores with the I/O loops: the scheduler then
/// lets it preempt a loop only briefly, while it still progresses when the loops are saturated (where
/// `SCHED_IDLE` would starve it). Best effort: a failure leaves the thread as it was.
fn lower_thread_priority() {
    // SAFETY: plain syscalls on the calling thread's own id.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19);
    }
}
