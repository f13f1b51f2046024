//! The cache's item store.
