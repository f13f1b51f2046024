//! Throughput benchmarks: the job queue candidates on their own (why the LIFO pool uses
//! `SegQueue`), and whole pools, LIFO and FIFO, moving batches of small jobs.

use std::collections::VecDeque;
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use crossbeam_queue::SegQueue;
use parking_lot::Mutex;
use tern_executor::{Config, Executor, WakeOrder};

const ITEMS: usize = 20_000;

/// The pools compared: LIFO with the default spin, LIFO parking at once, and the FIFO baseline.
const POOLS: [(&str, WakeOrder, Duration); 3] = [
    ("lifo", WakeOrder::Lifo, Duration::from_micros(20)),
    ("lifo_no_spin", WakeOrder::Lifo, Duration::ZERO),
    ("fifo", WakeOrder::Fifo, Duration::ZERO),
];
const THREADS_EACH_SIDE: usize = 2;

/// Two producers and two consumers move `ITEMS` boxed items through one queue.
fn mpmc<Q: Sync>(queue: &Q, push: fn(&Q, Box<usize>), pop: fn(&Q) -> Option<Box<usize>>) {
    let taken = AtomicUsize::new(0);
    thread::scope(|scope| {
        for _ in 0..THREADS_EACH_SIDE {
            scope.spawn(|| {
                for i in 0..ITEMS / THREADS_EACH_SIDE {
                    push(queue, Box::new(i));
                }
            });
            scope.spawn(|| {
                while taken.load(SeqCst) < ITEMS {
                    match pop(queue) {
                        Some(item) => {
                            black_box(item);
                            taken.fetch_add(1, SeqCst);
                        }
                        None => std::hint::spin_loop(),
                    }
                }
            });
        }
    });
}

fn queues(c: &mut Criterion) {
    let mut group = c.benchmark_group("queue_mpmc_2x2");
    group.throughput(Throughput::Elements(ITEMS as u64));
    group.bench_function("segqueue", |b| {
        let queue = SegQueue::new();
        b.iter(|| mpmc(&queue, |q, item| q.push(item), |q| q.pop()));
    });
    group.bench_function("mutex_vecdeque", |b| {
        let queue = Mutex::new(VecDeque::new());
        b.iter(|| {
            mpmc(
                &queue,
                |q, item| q.lock().push_back(item),
                |q| q.lock().pop_front(),
            )
        });
    });
    group.finish();
}

fn pools(c: &mut Criterion) {
    const BATCH: usize = 1_000;
    let mut group = c.benchmark_group("pool_batch_of_1000_jobs");
    group.throughput(Throughput::Elements(BATCH as u64));
    for (name, order, spin) in POOLS {
        let executor = Executor::new(Config {
            workers: 2,
            wake_order: order,
            spin,
            ..Config::default()
        })
        .expect("executor");
        group.bench_function(name, |b| {
            b.iter(|| {
                let remaining = Arc::new(AtomicUsize::new(BATCH));
                let (done, finished) = mpsc::channel();
                for _ in 0..BATCH {
                    let (remaining, done) = (Arc::clone(&remaining), done.clone());
                    executor
                        .execute(move |_| {
                            if remaining.fetch_sub(1, SeqCst) == 1 {
                                done.send(()).expect("bench waits");
                            }
                        })
                        .expect("queued");
                }
                finished.recv().expect("batch finished");
            });
        });
        executor.shutdown();
    }
    group.finish();

    let mut group = c.benchmark_group("pool_round_trip");
    for (name, order, spin) in POOLS {
        let executor = Executor::new(Config {
            workers: 2,
            wake_order: order,
            spin,
            ..Config::default()
        })
        .expect("executor");
        group.bench_function(name, |b| {
            b.iter(|| {
                let (done, finished) = mpsc::channel();
                executor
                    .execute(move |_| done.send(()).expect("bench waits"))
                    .expect("queued");
                finished.recv().expect("job finished");
            });
        });
        executor.shutdown();
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = queues, pools
}
criterion_main!(benches);
