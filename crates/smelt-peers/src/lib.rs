//! The peers `smelt bench` compares smelt against: the systems a user would choose
//! instead of smelt, measured with the same harness as smelt itself
//! ([`smelt_probe::harness`]: calibrated batches on pinned threads, robust statistics,
//! a deadline on every wait), so that ratios taken in one run compare the systems, not
//! the harnesses.
//!
//! * [`floor`]: the raw cache-line ping-pong between two pinned threads, the physical
//!   floor every message-passing figure is reported against.
//! * [`rust`]: in-process Rust peers — `rtrb` and `crossbeam-channel` latency and
//!   throughput, `std::sync::Barrier`.
//! * [`c`]: C programs embedded in this crate (`c/*.c`), compiled at run time with
//!   whatever compilers exist: `pthread_barrier_wait`, a dissemination barrier, OpenMP
//!   barrier and reduction (gcc → libgomp, clang → LLVM libomp), a UMP-style ring, and
//!   Open MPI `MPI_Barrier` / `MPI_Bcast` / `MPI_Reduce`.
//! * [`ucx`]: UCX's `ucx_perftest` (active-message latency and rate, get) between two
//!   pinned processes over shared memory.
//!
//! Every peer reports a [`PeerResult`], the figure type smelt's own measurements use
//! too. A missing toolchain makes a peer [`Status::Skipped`], a crash or timeout makes
//! it [`Status::Failed`]; neither is an error of the benchmark as a whole.

#![forbid(unsafe_code)]

pub mod c;
mod error;
pub mod floor;
pub mod rust;
pub mod ucx;

pub use error::PeerError;
pub use smelt_probe::figure::{Metric, PeerResult, Status};
