//! Measuring this machine: the pairwise `t_send` / `t_receive` / round-trip probe that
//! builds a smelt [`Model`](smelt_model::Model) (the Smelt paper's §3.2), the raw
//! cache-line floor every figure is compared with, and the peers `smelt bench` runs
//! beside smelt (in-process Rust channels and barriers, and C programs: pthread,
//! OpenMP, a UMP ring, Open MPI).
//!
//! All measurements share one [`harness`]: calibrated batches on pinned threads,
//! robust [`stats`] over repetitions, and a deadline on every wait.

#![forbid(unsafe_code)]

pub mod affinity;
pub mod floor;
pub mod harness;
pub mod link;
pub mod peers;
pub mod probe;
pub mod progress;
pub mod stats;
pub mod transport;

pub use harness::{Budget, Deadline, Timeout};
pub use stats::Summary;
