//! Workloads of `smelt-tasks` (moving here from the service crate, issue 24).
