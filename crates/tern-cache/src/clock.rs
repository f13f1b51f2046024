//! memcached's clock: seconds since the process started, plus 62 (memcached sets `process_started` to
//! `time(0) - ITEM_UPDATE_INTERVAL - 2`, so no timestamp is ever 0 and fresh items need no access-time
//! bump), and its rules for turning a client's exptime into an absolute time on that clock. The offset
//! shows: an item a negative TTL expired has exptime 1, and `t` prints `1 - now` as an unsigned 32-bit
//! number, as memcached does.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Relative exptimes are at most 30 days; larger values are unix times.
pub const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;
/// memcached's `ITEM_UPDATE_INTERVAL`.
const ITEM_UPDATE_INTERVAL: u32 = 60;
/// The clock's value when the process starts (memcached's `current_time` then).
pub const START: u32 = ITEM_UPDATE_INTERVAL + 2;

#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
    /// Unix time of clock value 0 (memcached's `process_started`: [`START`] seconds before the real start).
    process_started: i64,
}

impl Default for Clock {
    fn default() -> Self {
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        Clock {
            start: Instant::now(),
            process_started: unix - i64::from(START),
        }
    }
}

impl Clock {
    /// The clock's value at `at` (memcached's `current_time`).
    pub fn at(&self, at: Instant) -> u32 {
        (at.saturating_duration_since(self.start).as_secs() + u64::from(START)) as u32
    }

    pub fn now(&self) -> u32 {
        self.at(Instant::now())
    }

    /// Unix time of a clock value.
    pub fn unix(&self, t: u32) -> i64 {
        self.process_started + i64::from(t)
    }

    /// memcached's `uptime` stat at clock value `now`: `current_time - ITEM_UPDATE_INTERVAL`, so it starts
    /// at 2.
    pub fn uptime(now: u32) -> u32 {
        now.saturating_sub(ITEM_UPDATE_INTERVAL)
    }

    /// memcached's `realtime(EXPTIME_TO_POSITIVE_TIME(exptime))`: 0 never expires; a negative exptime is
    /// already expired; up to 30 days is relative to `now`; larger is a unix time (one before the start
    /// becomes 1, i.e. expired).
    pub fn expiry(&self, exptime: i64, now: u32) -> u32 {
        let exptime = if exptime < 0 {
            REALTIME_MAXDELTA + 1
        } else {
            exptime
        };
        if exptime == 0 {
            0
        } else if exptime > REALTIME_MAXDELTA {
            if exptime <= self.process_started {
                1
            } else {
                (exptime - self.process_started) as u32
            }
        } else {
            (exptime + i64::from(now)) as u32
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exptime_rules_match_memcached() {
        let c = Clock::default();
        let now = 100;
        assert_eq!(c.expiry(0, now), 0);
        assert_eq!(c.expiry(10, now), 110);
        assert_eq!(
            c.expiry(REALTIME_MAXDELTA, now),
            (REALTIME_MAXDELTA + 100) as u32
        );
        assert_eq!(c.expiry(-1, now), 1, "negative: expired at once");
        assert_eq!(
            c.expiry(REALTIME_MAXDELTA + 1, now),
            1,
            "a unix time before the start"
        );
        let in_an_hour = c.unix(0) + 3600;
        assert_eq!(c.expiry(in_an_hour, now), 3600);
        assert!(c.now() >= START);
        assert_eq!(Clock::uptime(START), 2, "memcached's uptime starts at 2");
        // A negative TTL stores exptime 1; memcached's `t` then prints 1 - now as a u32.
        assert_eq!(1u32.wrapping_sub(START), 4294967235);
    }
}
