//! Hedged requests ("The Tail at Scale", Dean and Barroso 2013): when a call to a replicated source has been
//! out longer than that source's recent p95, the same call goes to another replica and the first answer
//! wins. What decides it: each source's recent latencies (a window per loop, no lock) and a token bucket
//! that earns a fraction of a hedge per call, so hedges stay within a budget of the calls made and stop
//! when everything is slow (a slow system would otherwise get twice the load just when it can least take
//! it).

use std::cell::{Cell, RefCell};
use std::time::Duration;

/// When to hedge, and how much.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HedgePolicy {
    /// Hedge a call once it has been out longer than this percentile of its source's recent latencies.
    pub percentile: f64,
    /// Most hedges as a share of the calls made (0.05: at most one extra call in twenty, over time).
    pub budget: f64,
}

impl HedgePolicy {
    pub const DEFAULT: HedgePolicy = HedgePolicy {
        percentile: 0.95,
        budget: 0.05,
    };
}

/// Latencies kept per source: the recent past, a few seconds at the rates a loop sees.
const WINDOW: usize = 1024;
/// The percentile is found again after this many new latencies (sorting the window each call would cost
/// more than the call's own bookkeeping).
const REFRESH_EVERY: u32 = 64;
/// No hedging until a source has this many latencies: a percentile of fewer says little.
const MIN_SAMPLES: usize = 100;

/// A source's recent latencies, in microseconds, and the percentile last found in them.
pub struct LatencyWindow {
    samples: RefCell<Vec<u32>>,
    /// Where the percentile is found (reused: no allocation per refresh).
    scratch: RefCell<Vec<u32>>,
    next: Cell<usize>,
    since_refresh: Cell<u32>,
    threshold_us: Cell<Option<u32>>,
    percentile: f64,
}

impl LatencyWindow {
    pub fn new(percentile: f64) -> Self {
        LatencyWindow {
            samples: RefCell::new(Vec::with_capacity(WINDOW)),
            scratch: RefCell::new(Vec::with_capacity(WINDOW)),
            next: Cell::new(0),
            since_refresh: Cell::new(0),
            threshold_us: Cell::new(None),
            percentile,
        }
    }

    /// Adds a call's latency (for a call cut short by a hedge that won: how long it had been out, a lower
    /// bound, which keeps slow calls in the window rather than hiding them).
    pub fn record(&self, latency: Duration) {
        let us = u32::try_from(latency.as_micros()).unwrap_or(u32::MAX);
        let mut samples = self.samples.borrow_mut();
        if samples.len() < WINDOW {
            samples.push(us);
        } else {
            samples[self.next.get()] = us;
            self.next.set((self.next.get() + 1) % WINDOW);
        }
        let since = self.since_refresh.get() + 1;
        if since < REFRESH_EVERY || samples.len() < MIN_SAMPLES {
            self.since_refresh.set(since);
            return;
        }
        self.since_refresh.set(0);
        let mut sorted = self.scratch.borrow_mut();
        sorted.clear();
        sorted.extend_from_slice(&samples);
        let rank = ((sorted.len() as f64 * self.percentile) as usize).min(sorted.len() - 1);
        let (_, at, _) = sorted.select_nth_unstable(rank);
        self.threshold_us.set(Some(*at));
    }

    /// How long a call may be out before it is hedged; `None` until enough latencies are known.
    pub fn threshold(&self) -> Option<Duration> {
        self.threshold_us
            .get()
            .map(|us| Duration::from_micros(u64::from(us)))
    }
}

/// The hedges a loop may still send: each call earns `budget` of one, a hedge spends a whole one, and
/// at most [`HedgeBudget::MAX_SAVED`] are saved up for a burst. Counted in millionths of a hedge, so the
/// share is exact over any number of calls.
pub struct HedgeBudget {
    millionths: Cell<u64>,
    earn: u64,
}

impl HedgeBudget {
    const ONE: u64 = 1_000_000;
    const MAX_SAVED: u64 = 10;

    pub fn new(budget: f64) -> Self {
        HedgeBudget {
            millionths: Cell::new(0),
            earn: (budget.clamp(0.0, 1.0) * Self::ONE as f64).round() as u64,
        }
    }

    /// A call was made.
    pub fn earn(&self) {
        self.millionths
            .set((self.millionths.get() + self.earn).min(Self::MAX_SAVED * Self::ONE));
    }

    /// Takes one hedge if there is one.
    pub fn take(&self) -> bool {
        match self.millionths.get().checked_sub(Self::ONE) {
            Some(left) => {
                self.millionths.set(left);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_threshold_is_the_windows_percentile() {
        let window = LatencyWindow::new(0.95);
        for us in 0..(MIN_SAMPLES as u64 - 1) {
            window.record(Duration::from_micros(us));
        }
        assert_eq!(window.threshold(), None, "too few latencies");
        // Latencies of 1..=1024 µs, twice over, after many of 1 s: by the last refresh only the former
        // are in the window.
        for _ in 0..WINDOW {
            window.record(Duration::from_secs(1));
        }
        for us in (1..=WINDOW as u64).chain(1..=WINDOW as u64) {
            window.record(Duration::from_micros(us));
        }
        let p95 = window.threshold().unwrap().as_micros();
        assert!((970..=975).contains(&p95), "{p95}");
    }

    #[test]
    fn the_budget_allows_its_share_of_calls_and_a_small_burst() {
        let budget = HedgeBudget::new(0.05);
        let mut hedges = 0;
        for _ in 0..10_000 {
            budget.earn();
            if budget.take() {
                hedges += 1;
            }
        }
        assert_eq!(hedges, 500);
        // Saved up while nothing was slow: at most MAX_SAVED at once.
        for _ in 0..10_000 {
            budget.earn();
        }
        let burst = (0..100).filter(|_| budget.take()).count();
        assert_eq!(burst, 10);
    }
}
