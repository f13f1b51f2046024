//! Admission on the I/O thread (fbthrift's model): a cap on requests in flight and an optional rate limit,
//! both split evenly over the loops so that checking them touches no shared counter.

use std::time::Instant;

use crate::config::RuntimeConfig;
use crate::service::Rejection;

/// Refills continuously at `rate` tokens per second up to a burst of a tenth of a second's worth.
struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    fn new(rate: f64, now: Instant) -> Self {
        let burst = (rate / 10.0).max(1.0);
        TokenBucket {
            rate,
            burst,
            tokens: burst,
            last: now,
        }
    }

    fn take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = self.last.max(now);
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// One loop's share of the server's admission limits.
pub(crate) struct Admission {
    in_flight: usize,
    in_flight_limit: usize,
    bucket: Option<TokenBucket>,
}

impl Admission {
    pub(crate) fn new(cfg: &RuntimeConfig, loops: usize) -> Self {
        let loops = loops.max(1);
        Admission {
            in_flight: 0,
            in_flight_limit: cfg.max_in_flight.div_ceil(loops),
            bucket: (cfg.rate_limit > 0)
                .then(|| TokenBucket::new(cfg.rate_limit as f64 / loops as f64, Instant::now())),
        }
    }

    /// Decides whether a request read at `now` may run.
    pub(crate) fn admit(&mut self, now: Instant) -> Result<(), Rejection> {
        if self.in_flight_limit > 0 && self.in_flight >= self.in_flight_limit {
            return Err(Rejection::InFlightLimit);
        }
        match self.bucket.as_mut() {
            Some(b) => {
                if b.take(now) {
                    Ok(())
                } else {
                    Err(Rejection::RateLimit)
                }
            }
            None => Ok(()),
        }
    }

    /// A request was deferred: it stays in flight until `finished`.
    pub(crate) fn started(&mut self) {
        self.in_flight += 1;
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
    }

    pub(crate) fn finished(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn in_flight_limit_is_split_over_loops() {
        let cfg = RuntimeConfig {
            max_in_flight: 4,
            ..RuntimeConfig::default()
        };
        let mut a = Admission::new(&cfg, 2);
        let now = Instant::now();
        a.admit(now).unwrap();
        a.started();
        a.admit(now).unwrap();
        a.started();
        assert_eq!(a.admit(now), Err(Rejection::InFlightLimit));
        a.finished();
        assert!(a.admit(now).is_ok());
    }

    #[test]
    fn rate_limit_refills_over_time() {
        let start = Instant::now();
        let mut b = TokenBucket::new(100.0, start);
        let taken = (0..100).filter(|_| b.take(start)).count();
        assert_eq!(taken, 10, "burst is a tenth of a second's worth");
        assert!(!b.take(start));
        assert!(
            b.take(start + Duration::from_millis(20)),
            "2 tokens refilled after 20 ms"
        );
    }
}
