//! Measuring this machine: the pairwise `t_send` / `t_receive` / round-trip probe that
//! builds a smelt [`Model`](smelt_model::Model) (the Smelt paper's §3.2), and smelt's
//! own transport measured for `smelt bench` ([`transport`], reported as a [`figure`]).
//!
//! All measurements share one [`harness`]: calibrated batches on pinned threads,
//! robust [`stats`] over repetitions, and a deadline on every wait. The peers smelt is
//! compared with, and the raw cache-line floor, live in the `smelt-peers` crate and use
//! this same harness.

#![forbid(unsafe_code)]

pub mod affinity;
mod error;
pub mod figure;
pub mod harness;
pub mod link;
pub mod probe;
pub mod progress;
pub mod stats;
pub mod transport;

pub use error::ProbeError;
pub use harness::{Budget, Deadline, Timeout};
pub use smelt_ids::CpuId;
pub use stats::Summary;
