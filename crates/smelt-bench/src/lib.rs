//! smelt's benchmarks, in one library. **Everything that measures lives here** (issue 24):
//! the measurement harness and the statistics type, the peers smelt is compared against,
//! and one workload module per service; the service crates (`smelt-am`, `smelt-agg`,
//! `smelt-global`, `smelt-kvs`, `smelt-tasks`) keep only their API and carry no
//! benchmark-only dependency. The `smelt` CLI's `smelt bench <what>` and `smelt report`
//! call this crate and print the typed, serializable reports it returns.
//!
//! * [`stats`]: the one [`Summary`](stats::Summary), the one median and the one seeded
//!   RNG of the workspace (defined low, in `smelt-ids`, so that the probe and the runtime
//!   share them; re-exported here).
//! * [`harness`]: the measurement harness (calibrated batches on pinned threads, a
//!   deadline on every wait) — `smelt_probe::harness`, re-exported: it stays in the
//!   probe, which measures the machine with it and cannot depend on this crate.
//! * [`peers`]: the systems a user would pick instead of smelt (`smelt-peers`: Rust
//!   channels, C pthread/OpenMP/UMP ring/Open MPI, UCX's `ucx_perftest`), re-exported;
//!   the raft-rs store is [`kvs::RaftStore`].
//! * one module per service: [`am`] (LogP, the distributed histogram), [`agg`] (Bale
//!   histogram, index-gather), [`global`] (global arrays, work stealing), [`kvs`] (the
//!   store's load against raft-rs), [`tasks`] (fork-join applications).
//! * `smelt-bench-mpi am|agg|global|tasks` (feature `mpi`): the one MPI driver of the
//!   services, run under `mpirun` by the suite and by `tests/mpirun_*.rs`.
//! * [`suite`]: the benchmarks of `smelt bench collectives|processes|mpi|large|sync|am|
//!   aggregation|offload|tasks`, one module each, each a function from plain options to
//!   a typed report ([`suite::BenchReport`]: its JSON, its table, its failed figures);
//!   [`suite::bench_model`] is the model they build trees from.
//! * [`tune`]: `smelt tune`'s engine (measure, check, predict, compare, export to Open
//!   MPI's rules).

#![warn(missing_docs)]

pub mod agg;
pub mod am;
mod error;
pub mod global;
pub mod kvs;
pub mod stats;
pub mod suite;
pub mod tasks;
pub mod tune;

pub use error::BenchError;

/// The measurement harness: `smelt_probe::harness`, re-exported.
pub use smelt_probe::harness;

/// The peers smelt is compared against: the `smelt-peers` crate, re-exported.
pub use smelt_peers as peers;
