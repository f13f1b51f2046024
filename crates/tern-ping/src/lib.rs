//! A tiny ping service on the tern runtime.
