//! Workloads of `smelt-am` (moving here from the service crate, issue 24).
