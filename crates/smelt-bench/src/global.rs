//! Workloads of `smelt-global` (moving here from the service crate, issue 24).
