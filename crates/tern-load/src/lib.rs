//! tern load: an open- and closed-loop load generator.
