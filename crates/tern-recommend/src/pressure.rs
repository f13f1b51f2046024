//! Overload control, per loop: when the CPU pool that ranks has a standing queue, first ask fewer sources
//! (degrade), then refuse requests on the I/O thread before any work is spent on them (shed), and undo both
//! as the queue drains.
//!
//! The signal is CoDel's (Nichols and Jacobson 2012; Facebook's "Fail at Scale" applies it to server
//! queues), taken at the two places work queues in a loop: the least time a ranking job waited for a
//! worker, and the least time the loop's own timer fired late (event-loop lag: a loop busy without a break
//! reads its sockets late, and requests wait in the kernel where no deadline sees them), each in every
//! 100 ms interval; the larger of the two counts. A burst makes some jobs wait, but only a queue that never
//! empties makes every one of an interval wait, so the minimum tells overload from bursts. It is local on
//! purpose: a slow or dead source makes requests slow but the CPU idle, and must not cost answers (sources
//! have their own budgets and hedges).
//!
//! - Degrade: each interval whose minimum wait is over `degrade_after` skips one more source, in
//!   [`DEGRADE_ORDER`] (costliest first); each interval under half of it asks one more again.
//! - Shed: once every source that can be skipped is, each interval whose minimum wait is over `shed_after`
//!   caps the requests the loop runs at once to three quarters of the most it ran in that interval, but
//!   never below what the requests it answered in that interval need to go on being answered within half
//!   their deadline (Little's law: answers per second times that time; on a machine whose cores are shared
//!   with other busy processes the wait stays long however few requests run, and cutting below it would
//!   only cost answers); each interval under half of it doubles the cap, until the cap is gone (about a
//!   second from the smallest).

use std::cell::Cell;
use std::time::{Duration, Instant};

use tern_graph_proto::Method;
use tern_metrics::Gauge;

static RUNNING: Gauge = Gauge::new(
    "tern_recommend_running",
    "Requests running now (admitted, not yet answered), summed over the loops",
);
static STANDING_WAIT_US: Gauge = Gauge::new(
    "tern_recommend_standing_wait_us",
    "The last interval's standing wait (the least ranking queue wait or loop lag in it), microseconds, \
     summed over the loops",
);
static SKIPPED: Gauge = Gauge::new(
    "tern_recommend_sources_skipped",
    "Sources skipped under pressure now (degrade), summed over the loops",
);
static CAP: Gauge = Gauge::new(
    "tern_recommend_running_cap",
    "The cap on requests running at once while shedding (0: no cap), summed over the loops",
);

/// The sources skipped under pressure, first to last: the personalized PageRank walks (the graph's
/// costliest calls by far, thousands of steps each), then friends of friends and co-follow (two-hop counts
/// over the first hop's follows). Popular accounts are never skipped: they keep every answer non-empty.
pub const DEGRADE_ORDER: [Method; 3] = [
    Method::PersonalizedPagerank,
    Method::FriendsOfFriends,
    Method::CoFollow,
];

/// How pressure is judged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PressurePolicy {
    pub interval: Duration,
    /// Skip sources once the ranking queue's standing wait is over this (zero: never).
    pub degrade_after: Duration,
    /// Refuse requests once the standing wait is over this with every source skipped (zero: never).
    pub shed_after: Duration,
    /// The time a request may take that the cap keeps room for (half the default deadline).
    pub answer_within: Duration,
}

impl PressurePolicy {
    /// Whether it degrades or sheds at all (else the loop's lag is not watched).
    pub fn watches(&self) -> bool {
        !self.degrade_after.is_zero() || !self.shed_after.is_zero()
    }

    pub const DEFAULT: PressurePolicy = PressurePolicy {
        interval: Duration::from_millis(100),
        degrade_after: Duration::from_millis(2),
        shed_after: Duration::from_millis(5),
        answer_within: Duration::from_millis(50),
    };
}

/// Below this cap the loop stops cutting: a few requests at once always run.
const MIN_CAP: usize = 4;
/// Past this cap it is lifted.
const MAX_CAP: usize = 1 << 16;

/// How often a loop's timer checks the loop's lag.
pub const LAG_PROBE: Duration = Duration::from_millis(5);

/// Measures the loop's lag until `pressure` is gone (the loop's state dropped): a timer every
/// [`LAG_PROBE`], and how late it fires. Runs as a task on the loop.
pub async fn watch_lag(pressure: std::rc::Weak<Pressure>) {
    let mut due = Instant::now() + LAG_PROBE;
    loop {
        tokio::time::sleep_until(due.into()).await;
        let now = Instant::now();
        let Some(pressure) = pressure.upgrade() else {
            return;
        };
        pressure.lagged(now.saturating_duration_since(due), now);
        due = now + LAG_PROBE;
    }
}

/// One loop's view of the pressure on its CPU: its ranking pool's queue and its own lag.
pub struct Pressure {
    policy: PressurePolicy,
    interval_start: Cell<Instant>,
    /// The least ranking queue wait seen in this interval.
    least_wait: Cell<Option<Duration>>,
    /// The least lateness of the loop's timer in this interval.
    least_lag: Cell<Option<Duration>>,
    /// The most requests running at once in this interval.
    most_running: Cell<usize>,
    running: Cell<usize>,
    /// Requests that ended in this interval.
    ended: Cell<usize>,
    /// Sources skipped: the first `skipped` of [`DEGRADE_ORDER`].
    skipped: Cell<usize>,
    cap: Cell<Option<usize>>,
}

impl Pressure {
    pub fn new(policy: PressurePolicy, now: Instant) -> Self {
        Pressure {
            policy,
            interval_start: Cell::new(now),
            least_wait: Cell::new(None),
            least_lag: Cell::new(None),
            most_running: Cell::new(0),
            running: Cell::new(0),
            ended: Cell::new(0),
            skipped: Cell::new(0),
            cap: Cell::new(None),
        }
    }

    /// Whether a new request may run now; if so it counts as running until [`Pressure::finished`].
    pub fn admit(&self, now: Instant) -> bool {
        self.tick(now);
        let running = self.running.get();
        if self.cap.get().is_some_and(|cap| running >= cap) {
            return false;
        }
        self.running.set(running + 1);
        RUNNING.incr();
        self.most_running
            .set(self.most_running.get().max(running + 1));
        true
    }

    pub fn finished(&self) {
        RUNNING.decr();
        self.running.set(self.running.get().saturating_sub(1));
        self.ended.set(self.ended.get() + 1);
    }

    /// A ranking job waited `wait` for a worker (or at least that long, if it was refused for waiting).
    pub fn waited(&self, wait: Duration, now: Instant) {
        self.least_wait
            .set(Some(self.least_wait.get().map_or(wait, |w| w.min(wait))));
        self.tick(now);
    }

    /// The loop's timer fired `lag` late.
    pub fn lagged(&self, lag: Duration, now: Instant) {
        self.least_lag
            .set(Some(self.least_lag.get().map_or(lag, |l| l.min(lag))));
        self.tick(now);
    }

    /// The sources to skip now.
    pub fn skipped(&self) -> &'static [Method] {
        &DEGRADE_ORDER[..self.skipped.get()]
    }

    /// The cap on requests running at once, if there is one.
    pub fn cap(&self) -> Option<usize> {
        self.cap.get()
    }

    fn tick(&self, now: Instant) {
        if now.saturating_duration_since(self.interval_start.get()) < self.policy.interval {
            return;
        }
        self.interval_start.set(now);
        let most_running = self.most_running.replace(self.running.get());
        let ended = self.ended.replace(0);
        // An interval in which no ranking ended says nothing of the pool's queue; one with nothing
        // running means no queue at all.
        let pool = match self.least_wait.take() {
            Some(least) => Some(least),
            None if most_running == 0 => Some(Duration::ZERO),
            None => None,
        };
        let least = match (pool, self.least_lag.take()) {
            (None, None) => return,
            (pool, lag) => pool.max(lag).unwrap_or_default(),
        };
        let skipped = self.skipped.get();
        let degrading = !self.policy.degrade_after.is_zero();
        if degrading && least > self.policy.degrade_after {
            self.skipped.set((skipped + 1).min(DEGRADE_ORDER.len()));
        } else if least < self.policy.degrade_after / 2 {
            self.skipped.set(skipped.saturating_sub(1));
        }
        let shedding = !self.policy.shed_after.is_zero();
        let degraded = !degrading || skipped == DEGRADE_ORDER.len();
        if shedding && degraded && least > self.policy.shed_after {
            let keep = ended as f64 * self.policy.answer_within.as_secs_f64()
                / self.policy.interval.as_secs_f64();
            self.cap
                .set(Some((most_running * 3 / 4).max(keep as usize).max(MIN_CAP)));
        } else if least < self.policy.shed_after / 2 {
            self.cap.set(
                self.cap
                    .get()
                    .map(|cap| cap * 2)
                    .filter(|&cap| cap < MAX_CAP),
            );
        }
        // Each loop sets its own thread's part; the exported value sums the loops.
        STANDING_WAIT_US.set(least.as_micros() as i64);
        SKIPPED.set(self.skipped.get() as i64);
        CAP.set(self.cap.get().unwrap_or(0) as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// One interval in which every ranking job waited `wait`, with `running` requests admitted.
    fn interval(p: &Pressure, start: Instant, running: usize, wait: Duration) -> Instant {
        for _ in 0..running {
            if p.admit(start) {
                p.waited(wait, start);
                p.finished();
            }
        }
        start + PressurePolicy::DEFAULT.interval
    }

    #[test]
    fn a_standing_queue_degrades_then_sheds_and_a_drained_one_undoes_both() {
        let t0 = Instant::now();
        let p = Pressure::new(PressurePolicy::DEFAULT, t0);
        // Bursts make some jobs wait, not all: nothing happens.
        let mut t = t0;
        for _ in 0..5 {
            p.admit(t);
            p.waited(Duration::ZERO, t);
            p.finished();
            t = interval(&p, t, 10, 20 * MS);
        }
        assert_eq!((p.skipped().len(), p.cap()), (0, None));
        // Every job waits 10 ms: one more source skipped per interval, then a cap.
        for skipped in 1..=3 {
            t = interval(&p, t, 10, 10 * MS);
            p.admit(t);
            p.finished();
            assert_eq!(p.skipped().len(), skipped);
            assert_eq!(p.cap(), None);
        }
        assert_eq!(p.skipped(), &DEGRADE_ORDER);
        // 40 running at once, all waiting: the cap is three quarters of that, and holds.
        for _ in 0..40 {
            assert!(p.admit(t));
        }
        p.waited(10 * MS, t);
        t += PressurePolicy::DEFAULT.interval;
        p.admit(t);
        assert_eq!(p.cap(), Some(30));
        assert!(!p.admit(t), "40 running, cap 30");
        for _ in 0..40 {
            p.finished();
        }
        // The queue drains: the cap grows until it is gone, and the sources come back one an interval.
        let mut intervals = 0;
        while p.cap().is_some() || !p.skipped().is_empty() {
            t = interval(&p, t, 1, Duration::ZERO);
            p.admit(t);
            p.finished();
            intervals += 1;
            assert!(intervals <= 12, "still capped at {:?}", p.cap());
        }
    }

    #[test]
    fn the_cap_keeps_room_for_what_the_loop_answers() {
        let t0 = Instant::now();
        let p = Pressure::new(PressurePolicy::DEFAULT, t0);
        let mut t = t0;
        // Every source skipped, then an interval in which 400 requests ended, all of whose rankings
        // waited: 400 answers per 100 ms need 200 running at once to take 50 ms each.
        for _ in 0..3 {
            t = interval(&p, t, 10, 10 * MS);
        }
        t = interval(&p, t, 400, 10 * MS);
        p.admit(t);
        assert_eq!(p.cap(), Some(200));
    }

    #[test]
    fn a_loop_that_is_always_late_is_pressure_too() {
        let t0 = Instant::now();
        let p = Pressure::new(PressurePolicy::DEFAULT, t0);
        let mut t = t0;
        for _ in 0..3 {
            // Requests running, none ranked yet, and every timer 4 ms late.
            p.admit(t);
            for probe in 0..20 {
                p.lagged(4 * MS, t + probe * LAG_PROBE);
            }
            t += PressurePolicy::DEFAULT.interval;
        }
        p.lagged(4 * MS, t);
        assert_eq!(p.skipped().len(), 3);
    }

    #[test]
    fn slow_requests_with_an_idle_pool_are_not_pressure() {
        // A dead source makes every request take its budget, but ranking never waits.
        let t0 = Instant::now();
        let p = Pressure::new(PressurePolicy::DEFAULT, t0);
        let mut t = t0;
        for _ in 0..20 {
            for _ in 0..50 {
                assert!(p.admit(t));
            }
            p.waited(Duration::from_micros(30), t);
            t += PressurePolicy::DEFAULT.interval;
            for _ in 0..50 {
                p.finished();
            }
        }
        assert_eq!((p.skipped().len(), p.cap()), (0, None));
    }
}
