//! Client side of the memcached protocol: encode requests, parse replies incrementally.
