//! The runtime's own counters, per thread (see `tern-metrics`): what every service gets for free on
//! `/metrics` and what memcached-style `stats` report.

use tern_metrics::{Counter, CounterFamily, Gauge};

pub static CONNECTIONS_ACCEPTED: Counter = Counter::new(
    "tern_connections_accepted_total",
    "Connections accepted and served",
);
pub static CONNECTIONS_REFUSED: Counter = Counter::new(
    "tern_connections_refused_total",
    "Connections refused at max_connections",
);
pub static CONNECTIONS_OPEN: Gauge = Gauge::new("tern_connections_open", "Connections open now");
pub static BYTES_READ: Counter = Counter::new("tern_bytes_read_total", "Bytes read from clients");
pub static BYTES_WRITTEN: Counter =
    Counter::new("tern_bytes_written_total", "Bytes written to clients");
pub static REQUESTS: Counter = Counter::new("tern_requests_total", "Requests decoded and answered");
pub static ACCEPT_PAUSES: Counter = Counter::new(
    "tern_accept_pauses_total",
    "Times accepting paused on EMFILE/ENFILE",
);
pub static ACCEPT_PAUSED_MICROS: Counter = Counter::new(
    "tern_accept_paused_microseconds_total",
    "Time accepting was paused on EMFILE/ENFILE, in microseconds (summed over loops)",
);
pub static DATAGRAMS: Counter = Counter::new("tern_datagrams_total", "UDP datagrams received");
pub static IDLE_CLOSED: Counter = Counter::new(
    "tern_connections_idle_closed_total",
    "Connections closed for being idle past idle_timeout",
);
pub static REJECTED: CounterFamily = CounterFamily::new(
    "tern_requests_rejected_total",
    "Requests refused by the runtime's admission control or past their deadline",
    "reason",
    &["in_flight_limit", "rate_limit", "deadline_expired"],
);

pub(crate) fn register() {
    for c in [
        &CONNECTIONS_ACCEPTED,
        &CONNECTIONS_REFUSED,
        &BYTES_READ,
        &BYTES_WRITTEN,
        &REQUESTS,
        &ACCEPT_PAUSES,
        &ACCEPT_PAUSED_MICROS,
        &DATAGRAMS,
        &IDLE_CLOSED,
    ] {
        c.register();
    }
    CONNECTIONS_OPEN.register();
    REJECTED.register();
}
