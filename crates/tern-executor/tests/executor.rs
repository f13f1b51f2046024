//! Behaviour tests of both pool designs over real threads.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use tern_executor::{current_worker, Config, Executor, Rejected, StartError, WakeOrder};

const BOTH: [WakeOrder; 2] = [WakeOrder::Lifo, WakeOrder::Fifo];

fn config(order: WakeOrder, workers: usize) -> Config {
    Config {
        workers,
        wake_order: order,
        thread_name_prefix: format!("test-{order:?}"),
        ..Config::default()
    }
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("tokio runtime")
        .block_on(future)
}

/// Occupies one worker until the returned sender is dropped or sent to; returns once it runs.
fn occupy(executor: &Executor) -> (mpsc::Sender<()>, usize) {
    let (release, released) = mpsc::channel::<()>();
    let (started, start) = mpsc::channel();
    executor
        .execute(move |admission| {
            admission.expect("blocker admitted");
            started
                .send(current_worker().expect("on a worker"))
                .unwrap();
            let _ = released.recv();
        })
        .expect("blocker queued");
    let worker = start
        .recv_timeout(Duration::from_secs(5))
        .expect("blocker started");
    (release, worker)
}

fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let give_up = Instant::now() + Duration::from_secs(5);
    while !condition() {
        assert!(Instant::now() < give_up, "timed out waiting until {what}");
        thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn every_job_runs_exactly_once_under_concurrent_submitters() {
    for order in BOTH {
        let executor = Executor::new(config(order, 3)).unwrap();
        const SUBMITTERS: usize = 4;
        const PER_SUBMITTER: usize = 5_000;
        let runs: Arc<Vec<AtomicU32>> = Arc::new(
            (0..SUBMITTERS * PER_SUBMITTER)
                .map(|_| AtomicU32::new(0))
                .collect(),
        );
        thread::scope(|scope| {
            for submitter in 0..SUBMITTERS {
                let (executor, runs) = (&executor, &runs);
                scope.spawn(move || {
                    for i in 0..PER_SUBMITTER {
                        let runs = Arc::clone(runs);
                        let slot = submitter * PER_SUBMITTER + i;
                        executor
                            .execute(move |admission| {
                                admission.unwrap();
                                runs[slot].fetch_add(1, SeqCst);
                            })
                            .unwrap();
                    }
                });
            }
        });
        executor.shutdown();
        let counts: Vec<u32> = runs.iter().map(|r| r.load(SeqCst)).collect();
        assert!(
            counts.iter().all(|&c| c == 1),
            "{order:?}: a job ran other than once"
        );
        let stats = executor.stats();
        assert_eq!(stats.total().jobs_run, (SUBMITTERS * PER_SUBMITTER) as u64);
        assert_eq!(stats.queued, 0);
    }
}

/// Two workers go idle in a known order; the next job must go to the one that went idle last.
#[test]
fn lifo_wakes_the_most_recently_idle_worker() {
    let executor = Executor::new(Config {
        spin: Duration::ZERO,
        ..config(WakeOrder::Lifo, 4)
    })
    .unwrap();
    // Workers that have not started yet would later land on top of the idle stack.
    wait_until("all workers park", || {
        executor
            .stats()
            .workers
            .iter()
            .all(|w| w.parks == w.wakes + 1)
    });
    for flip in [false, true] {
        let (release_a, worker_a) = occupy(&executor);
        let (release_b, worker_b) = occupy(&executor);
        assert_ne!(worker_a, worker_b);
        let (first, last) = if flip {
            ((release_b, worker_b), (release_a, worker_a))
        } else {
            ((release_a, worker_a), (release_b, worker_b))
        };
        let most_recently_idle = last.1;
        for (release, worker) in [first, last] {
            let parks = executor.stats().workers[worker].parks;
            drop(release);
            wait_until("the released worker parks", || {
                executor.stats().workers[worker].parks > parks
            });
        }
        let ran_on = block_on(executor.offload(current_worker)).unwrap();
        assert_eq!(
            ran_on,
            Some(most_recently_idle),
            "job did not go to the most recently idle worker"
        );
    }
}

/// Jobs submitted one at a time with gaps: LIFO keeps reusing one worker, FIFO cycles through all.
#[test]
fn sequential_jobs_stay_on_one_worker_with_lifo_and_cycle_with_fifo() {
    for order in BOTH {
        let executor = Executor::new(Config {
            spin: Duration::ZERO,
            ..config(order, 4)
        })
        .unwrap();
        let mut used = std::collections::BTreeSet::new();
        for _ in 0..16 {
            // Each job finds the whole pool asleep (a worker counts its park before sleeping
            // and its wake after), as in a lightly loaded server.
            wait_until("all workers park", || {
                executor
                    .stats()
                    .workers
                    .iter()
                    .all(|w| w.parks == w.wakes + 1)
            });
            used.insert(block_on(executor.offload(current_worker)).unwrap().unwrap());
        }
        match order {
            WakeOrder::Lifo => assert_eq!(used.len(), 1, "LIFO used workers {used:?}"),
            WakeOrder::Fifo => assert_eq!(used.len(), 4, "FIFO used workers {used:?}"),
        }
    }
}

/// A LIFO worker spins for jobs that come within the spin time of each other, and stops
/// spinning (parks at once) once they come further apart.
#[test]
fn lifo_spins_only_while_spinning_pays() {
    let executor = Executor::new(Config {
        spin: Duration::from_millis(5),
        ..config(WakeOrder::Lifo, 1)
    })
    .unwrap();
    // Submits `jobs` jobs one at a time, each `apart` after the previous one finished.
    let submit_spaced = |jobs: usize, apart: Duration| {
        for _ in 0..jobs {
            let (done, finished) = mpsc::channel();
            executor.execute(move |_| done.send(()).unwrap()).unwrap();
            finished.recv_timeout(Duration::from_secs(5)).unwrap();
            thread::sleep(apart);
        }
    };
    let before = executor.stats().workers[0];
    submit_spaced(40, Duration::from_micros(300));
    let after = executor.stats().workers[0];
    // The worker, idle for 300 us between jobs, catches most of them spinning; without the
    // spin it would park after every one.
    assert!(
        after.spin_successes - before.spin_successes >= 20,
        "{before:?} -> {after:?}"
    );
    assert!(after.parks - before.parks <= 20, "{before:?} -> {after:?}");
    let before = after;
    // Far enough apart that a spinner preempted for a while still cannot catch the next job.
    submit_spaced(15, Duration::from_millis(50));
    let after = executor.stats().workers[0];
    // It gives up spinning after its spins missed 8 times, then probes with a spin once per
    // 50 spin times (250 ms) at most.
    assert!(after.spins - before.spins <= 12, "{before:?} -> {after:?}");
    assert!(after.parks - before.parks >= 13, "{before:?} -> {after:?}");
}

/// One long gap among short ones (a Poisson stream has them) does not stop a LIFO worker from
/// spinning for the next job.
#[test]
fn lifo_keeps_spinning_through_an_occasional_long_gap() {
    let executor = Executor::new(Config {
        // Far longer than the short gaps take even on a busy machine.
        spin: Duration::from_millis(50),
        ..config(WakeOrder::Lifo, 1)
    })
    .unwrap();
    let run_after = |apart: Duration| {
        thread::sleep(apart);
        let (done, finished) = mpsc::channel();
        executor.execute(move |_| done.send(()).unwrap()).unwrap();
        finished.recv_timeout(Duration::from_secs(5)).unwrap();
    };
    for _ in 0..5 {
        run_after(Duration::from_micros(300));
    }
    run_after(Duration::from_millis(200));
    let before = executor.stats().workers[0];
    run_after(Duration::from_micros(300));
    let after = executor.stats().workers[0];
    assert_eq!(
        after.spin_successes - before.spin_successes,
        1,
        "{before:?} -> {after:?}"
    );
    assert_eq!(after.parks, before.parks, "{before:?} -> {after:?}");
}

/// A LIFO worker whose spins stopped paying still spins now and then, to find out whether
/// they pay again.
#[test]
fn lifo_probes_with_a_spin_after_it_stopped_spinning() {
    let spin = Duration::from_micros(100);
    let executor = Executor::new(Config {
        spin,
        ..config(WakeOrder::Lifo, 1)
    })
    .unwrap();
    for _ in 0..40 {
        thread::sleep(Duration::from_millis(1));
        let (done, finished) = mpsc::channel();
        executor.execute(move |_| done.send(()).unwrap()).unwrap();
        finished.recv_timeout(Duration::from_secs(5)).unwrap();
    }
    let stats = executor.stats().workers[0];
    // 8 misses use the credit up; then one probe per 50 spin times (5 ms) at most.
    assert!(stats.spins > 8, "never probed: {stats:?}");
    assert!(stats.spins <= 32, "probed too often: {stats:?}");
}

#[test]
fn jobs_that_waited_past_the_queue_timeout_are_rejected() {
    for order in BOTH {
        let executor = Executor::new(Config {
            queue_timeout: Some(Duration::from_millis(100)),
            ..config(order, 1)
        })
        .unwrap();
        let (release, _) = occupy(&executor);
        let waiting: Vec<_> = (0..5).map(|i| executor.offload(move || i)).collect();
        thread::sleep(Duration::from_millis(150));
        drop(release);
        for job in waiting {
            assert_eq!(block_on(job), Err(Rejected::QueueTimeout), "{order:?}");
        }
        // The pool is free again: a fresh job runs.
        assert_eq!(block_on(executor.offload(|| 7)), Ok(7));
        let total = executor.stats().total();
        assert_eq!(total.rejected_queue_timeout, 5);
        assert_eq!(total.queue_wait.total(), 7, "blocker + 5 rejected + 1 run");
    }
}

#[test]
fn jobs_picked_up_after_their_deadline_are_rejected() {
    for order in BOTH {
        let executor = Executor::new(config(order, 1)).unwrap();
        let past = Instant::now();
        assert_eq!(
            block_on(executor.offload_before(past, || 1)),
            Err(Rejected::DeadlineExpired)
        );
        let (release, _) = occupy(&executor);
        let soon = executor.offload_before(Instant::now() + Duration::from_millis(10), || 2);
        let later = executor.offload_before(Instant::now() + Duration::from_secs(60), || 3);
        let (told, heard) = mpsc::channel();
        executor
            .execute_before(
                Instant::now() + Duration::from_millis(10),
                move |admission| {
                    told.send(admission).unwrap();
                },
            )
            .unwrap();
        thread::sleep(Duration::from_millis(30));
        drop(release);
        assert_eq!(block_on(soon), Err(Rejected::DeadlineExpired), "{order:?}");
        assert_eq!(block_on(later), Ok(3), "{order:?}");
        assert_eq!(heard.recv().unwrap(), Err(Rejected::DeadlineExpired));
        assert_eq!(executor.stats().total().rejected_deadline, 3);
    }
}

#[test]
fn a_full_queue_refuses_synchronously() {
    for order in BOTH {
        let executor = Executor::new(Config {
            max_queued: 4,
            ..config(order, 1)
        })
        .unwrap();
        let (release, _) = occupy(&executor);
        let queued: Vec<_> = (0..4).map(|i| executor.offload(move || i)).collect();
        assert_eq!(
            executor.execute(|_| {}),
            Err(Rejected::QueueFull),
            "{order:?}"
        );
        assert_eq!(block_on(executor.offload(|| 9)), Err(Rejected::QueueFull));
        assert_eq!(executor.stats().queued, 4);
        drop(release);
        let results: Vec<_> = queued.into_iter().map(block_on).collect();
        assert_eq!(results, vec![Ok(0), Ok(1), Ok(2), Ok(3)]);
        assert_eq!(executor.stats().rejected_queue_full, 2);
        // Room again.
        assert_eq!(block_on(executor.offload(|| 5)), Ok(5));
    }
}

#[test]
fn shutdown_finishes_queued_work_then_refuses() {
    for order in BOTH {
        let executor = Executor::new(config(order, 2)).unwrap();
        let (release_a, _) = occupy(&executor);
        let (release_b, _) = occupy(&executor);
        let done = Arc::new(AtomicUsize::new(0));
        for _ in 0..100 {
            let done = Arc::clone(&done);
            executor
                .execute(move |admission| {
                    admission.unwrap();
                    done.fetch_add(1, SeqCst);
                })
                .unwrap();
        }
        let releaser = thread::spawn(move || {
            thread::sleep(Duration::from_millis(20));
            drop((release_a, release_b));
        });
        executor.shutdown();
        releaser.join().unwrap();
        assert_eq!(done.load(SeqCst), 100, "{order:?}");
        assert_eq!(executor.execute(|_| {}), Err(Rejected::ShutDown));
        assert_eq!(block_on(executor.offload(|| ())), Err(Rejected::ShutDown));
        assert_eq!(executor.stats().rejected_shut_down, 2);
        executor.shutdown(); // idempotent
    }
}

#[test]
fn shutdown_from_a_job_does_not_deadlock() {
    for order in BOTH {
        let executor = Executor::new(config(order, 2)).unwrap();
        let handle = executor.clone();
        let result = block_on(executor.offload(move || {
            handle.shutdown();
            current_worker()
        }));
        assert!(result.unwrap().is_some());
        assert_eq!(executor.execute(|_| {}), Err(Rejected::ShutDown));
        // The last handle is dropped inside a job: the pool must wind down without joining itself.
        let executor = Executor::new(config(order, 2)).unwrap();
        let handle = executor.clone();
        let (told, heard) = mpsc::channel();
        executor
            .execute(move |_| {
                thread::sleep(Duration::from_millis(10));
                drop(handle);
                told.send(()).unwrap();
            })
            .unwrap();
        drop(executor);
        heard.recv_timeout(Duration::from_secs(5)).unwrap();
    }
}

#[test]
fn offload_resumes_on_the_callers_own_loop_thread() {
    for order in BOTH {
        let executor = Executor::new(config(order, 2)).unwrap();
        thread::scope(|scope| {
            for _ in 0..3 {
                let executor = executor.clone();
                scope.spawn(move || {
                    let caller = thread::current().id();
                    block_on(async {
                        for i in 0..200u64 {
                            let (worker, worker_thread) = executor
                                .offload(move || (current_worker(), thread::current().id()))
                                .await
                                .unwrap();
                            assert!(worker.is_some(), "ran off the pool");
                            assert_ne!(worker_thread, caller, "ran on the caller's thread");
                            assert_eq!(thread::current().id(), caller, "resumed elsewhere");
                            assert_eq!(executor.offload(move || i * 2).await, Ok(i * 2));
                        }
                    });
                });
            }
        });
    }
}

#[test]
fn a_panicking_job_is_reported_and_the_worker_survives() {
    for order in BOTH {
        let executor = Executor::new(config(order, 1)).unwrap();
        let panicked =
            block_on(executor.offload(|| -> u32 { panic!("job panic (expected by test)") }));
        assert_eq!(panicked, Err(Rejected::Panicked));
        assert_eq!(block_on(executor.offload(|| 1)), Ok(1));
        assert_eq!(executor.stats().total().panicked, 1);
    }
}

/// Bursts of jobs from several submitters with random gaps, against pools that park at once
/// (spin zero) and that spin: every burst must complete, so no wake-up was lost.
#[test]
fn no_wakeup_is_lost_under_stress() {
    for (order, spin) in [
        (WakeOrder::Lifo, Duration::ZERO),
        (WakeOrder::Lifo, Duration::from_micros(5)),
        (WakeOrder::Fifo, Duration::ZERO),
    ] {
        let executor = Executor::new(Config {
            spin,
            ..config(order, 4)
        })
        .unwrap();
        let stop_at = Instant::now() + Duration::from_millis(500);
        thread::scope(|scope| {
            for seed in 0..3u64 {
                let executor = &executor;
                scope.spawn(move || {
                    let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                    let mut bursts = 0;
                    while Instant::now() < stop_at {
                        // xorshift: cheap randomness for burst sizes and gaps
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        let burst = 1 + (rng % 4) as usize;
                        let (done, finished) = mpsc::channel();
                        for _ in 0..burst {
                            let done = done.clone();
                            executor.execute(move |_| done.send(()).unwrap()).unwrap();
                        }
                        for _ in 0..burst {
                            finished
                                .recv_timeout(Duration::from_secs(2))
                                .unwrap_or_else(|_| panic!("{order:?}/{spin:?}: lost wake-up"));
                        }
                        if rng % 3 == 0 {
                            thread::sleep(Duration::from_micros(rng % 200));
                        }
                        bursts += 1;
                    }
                    assert!(bursts > 10);
                });
            }
        });
    }
}

/// A submitter that busy-polls for each job's completion and submits the next one at once
/// races the worker on its way from the finished job to its parking spot, the window where
/// a wake-up is lost if the worker does not look at the queue again after advertising itself idle.
#[test]
fn back_to_back_submits_race_the_worker_going_idle() {
    for (order, spin) in [
        (WakeOrder::Lifo, Duration::ZERO),
        (WakeOrder::Lifo, Duration::from_micros(1)),
        (WakeOrder::Fifo, Duration::ZERO),
    ] {
        let executor = Executor::new(Config {
            spin,
            ..config(order, 1)
        })
        .unwrap();
        let finished = Arc::new(AtomicUsize::new(0));
        for round in 1..=5_000 {
            let flag = Arc::clone(&finished);
            executor
                .execute(move |_| flag.store(round, SeqCst))
                .unwrap();
            let give_up = Instant::now() + Duration::from_secs(2);
            while finished.load(SeqCst) != round {
                assert!(
                    Instant::now() < give_up,
                    "{order:?}/{spin:?}: lost wake-up in round {round}"
                );
                std::hint::spin_loop();
            }
        }
    }
}

#[test]
fn config_reads_from_toml_with_defaults_and_rejects_bad_values() {
    let config: Config = toml::from_str(
        r#"
        workers = 3
        wake_order = "fifo"
        spin = "50us"
        queue_timeout = "25ms"
        "#,
    )
    .unwrap();
    assert_eq!(config.workers, 3);
    assert_eq!(config.wake_order, WakeOrder::Fifo);
    assert_eq!(config.spin, Duration::from_micros(50));
    assert_eq!(config.queue_timeout, Some(Duration::from_millis(25)));
    assert_eq!(config.max_queued, Config::default().max_queued);
    assert!(toml::from_str::<Config>("wake_order = \"random\"").is_err());
    assert!(toml::from_str::<Config>("workerz = 3").is_err());
    assert!(toml::from_str::<Config>("spin = \"fast\"").is_err());
    for bad in [
        Config {
            workers: 0,
            ..Config::default()
        },
        Config {
            max_queued: 0,
            ..Config::default()
        },
        Config {
            thread_name_prefix: "a\0b".into(),
            ..Config::default()
        },
    ] {
        assert!(matches!(Executor::new(bad), Err(StartError::Config(_))));
    }
}
