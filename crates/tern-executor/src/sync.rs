//! The primitives the LIFO pool's wake-up protocol is built from. Under `--cfg loom` they are
//! loom's, so the model tests in `lifo.rs` can explore every interleaving of the protocol:
//! `RUSTFLAGS="--cfg loom" cargo test -p tern-executor --release --lib loom`.

#[cfg(not(loom))]
pub(crate) use crossbeam_queue::SegQueue as JobQueue;
#[cfg(not(loom))]
pub(crate) use parking_lot::Mutex;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize};
#[cfg(not(loom))]
pub(crate) use std::thread::{self, Thread};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize};
#[cfg(loom)]
pub(crate) use loom::thread::{self, Thread};
#[cfg(loom)]
pub(crate) use loom_shims::{JobQueue, Mutex};

#[cfg(loom)]
mod loom_shims {
    use std::collections::VecDeque;

    /// `parking_lot::Mutex`'s API over loom's mutex.
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Mutex<T> {
            Mutex(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
            self.0.lock().expect("no panics while locked in the model")
        }
    }

    /// `SegQueue`'s API over a locked deque: loom cannot see inside crossbeam's atomics, and
    /// the model checks the wake-up protocol given a linearizable queue, which `SegQueue` is.
    pub(crate) struct JobQueue<T>(Mutex<VecDeque<T>>);

    impl<T> JobQueue<T> {
        pub(crate) fn new() -> JobQueue<T> {
            JobQueue(Mutex::new(VecDeque::new()))
        }

        pub(crate) fn push(&self, value: T) {
            self.0.lock().push_back(value);
        }

        pub(crate) fn pop(&self) -> Option<T> {
            self.0.lock().pop_front()
        }

        pub(crate) fn is_empty(&self) -> bool {
            self.0.lock().is_empty()
        }
    }
}
