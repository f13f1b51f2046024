//! The tern runtime: per-core I/O loops, the protocol contract, connection handling, overload control and outbound calls.
