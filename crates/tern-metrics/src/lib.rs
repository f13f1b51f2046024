//! Per-thread metrics aggregated on demand, and the admin HTTP endpoint.
