//! The CPU executor: a fixed pool of workers woken LIFO, with offload() that resumes on the caller's loop.
