//! Tasks' workloads: fib, cilksort and UTS, sequentially and as fork-join programs
//! over smelt-tasks' pool and across members (`smelt_tasks::apps`, re-exported).
//!
//! They stay in `smelt-tasks` rather than moving here (unlike the other services'
//! workloads): they are the programs the crate's own tests run (`tests/pool.rs`,
//! `tests/dist.rs`) and its documentation's example, not benchmark-only code, and they
//! carry no dependency of their own. `smelt bench tasks` ([`crate::suite::tasks`])
//! and `smelt-bench-mpi tasks` take them from here.

pub use smelt_tasks::apps::*;
