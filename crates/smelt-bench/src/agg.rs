//! Workloads of `smelt-agg` (moving here from the service crate, issue 24).
