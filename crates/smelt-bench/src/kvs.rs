//! Workloads of `smelt-kvs` (moving here from the service crate, issue 24).
