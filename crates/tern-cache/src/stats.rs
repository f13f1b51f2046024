//! The cache's counters, kept per thread by `tern-metrics` (no shared lock or contended atomic on the hot
//! path, the fix seed 001 describes) and summed when a client asks for `stats`.

use tern_metrics::{Counter, Snapshot};

macro_rules! counters {
    ($($ident:ident => $stat:literal, $help:literal;)*) => {
        $(pub static $ident: Counter = Counter::new(concat!("tern_cache_", $stat, "_total"), $help);)*
        /// Every counter with its memcached stat name and its metric name, in memcached's `stats` order.
        pub static ALL: &[(&str, &str, &Counter)] = &[$(($stat, concat!("tern_cache_", $stat, "_total"), &$ident)),*];
    };
}

counters! {
    CMD_GET => "cmd_get", "Keys requested by get-family commands";
    CMD_SET => "cmd_set", "Storage commands";
    CMD_FLUSH => "cmd_flush", "flush_all commands";
    CMD_TOUCH => "cmd_touch", "Touch commands (touch, gat, gats)";
    CMD_META => "cmd_meta", "me commands (memcached 1.6.18 counts no other meta command here)";
    GET_HITS => "get_hits", "Keys found by get-family commands";
    GET_MISSES => "get_misses", "Keys not found by get-family commands";
    GET_EXPIRED => "get_expired", "Keys found expired";
    GET_FLUSHED => "get_flushed", "Keys found invalidated by flush_all";
    DELETE_MISSES => "delete_misses", "Deletes of missing keys";
    DELETE_HITS => "delete_hits", "Deletes of present keys";
    INCR_MISSES => "incr_misses", "Increments of missing keys";
    INCR_HITS => "incr_hits", "Increments of present keys";
    DECR_MISSES => "decr_misses", "Decrements of missing keys";
    DECR_HITS => "decr_hits", "Decrements of present keys";
    CAS_MISSES => "cas_misses", "CAS on missing keys";
    CAS_HITS => "cas_hits", "Successful CAS";
    CAS_BADVAL => "cas_badval", "CAS with a stale value";
    TOUCH_HITS => "touch_hits", "Touches of present keys";
    TOUCH_MISSES => "touch_misses", "Touches of missing keys";
    STORE_TOO_LARGE => "store_too_large", "Items refused as larger than -I";
    STORE_NO_MEMORY => "store_no_memory", "Items refused for lack of memory";
    AUTH_CMDS => "auth_cmds", "SASL authentications tried";
    AUTH_ERRORS => "auth_errors", "SASL authentications failed";
}

/// The commands memcached also counts per slab class in `stats slabs`, in its order (its `stats` totals are
/// the sums over the classes).
pub static PER_CLASS: &[(&str, &Counter)] = &[
    ("get_hits", &GET_HITS),
    ("cmd_set", &CMD_SET),
    ("delete_hits", &DELETE_HITS),
    ("incr_hits", &INCR_HITS),
    ("decr_hits", &DECR_HITS),
    ("cas_hits", &CAS_HITS),
    ("cas_badval", &CAS_BADVAL),
    ("touch_hits", &TOUCH_HITS),
];

/// memcached's `conn_yields`, which `stats` lists apart from the others (after `threads`).
pub static CONN_YIELDS: Counter = Counter::new(
    "tern_cache_conn_yields_total",
    "Times a connection used up its requests per event (-R) and let the others go first",
);

/// memcached's `response_obj_oom`, which `stats` lists among the connection figures: commands and keys refused
/// for want of a response object under `-o read_buf_mem_limit` (see `Cache::responses_per_loop`).
pub static RESPONSE_OBJ_OOM: Counter = Counter::new(
    "tern_cache_response_obj_oom_total",
    "Commands or get keys refused because the loop's response objects (read_buf_mem_limit) were used up",
);

/// Exports every counter (as 0) from the start, so `stats` and `/metrics` list them all.
pub fn register_all() {
    for (_, _, counter) in ALL {
        counter.register();
    }
    CONN_YIELDS.register();
    RESPONSE_OBJ_OOM.register();
}

/// The totals of every counter, read from one metrics snapshot.
pub fn totals(snapshot: &Snapshot) -> impl Iterator<Item = (&'static str, u64)> + '_ {
    ALL.iter()
        .map(move |(stat, metric, _)| (*stat, snapshot.counter(metric).unwrap_or(0)))
}
