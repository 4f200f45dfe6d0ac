//! How smelt's members reach each other, below the collectives and every service:
//!
//! * [`mesh`]: links between any two members of a group (queuepairs in process memory
//!   or in shared memory), polled and waited on as one;
//! * [`world`]: the [`World`] a program holds, one per member of a job (threads,
//!   processes, MPI ranks), from which every service is made: one segment per job,
//!   services carved from it by collective calls;
//! * [`launch`]: starting member processes (pinned, in a process group of their own,
//!   dying with their launcher, signalled and reaped together).
//!
//! Active messages, aggregation, tasks and the store build on this crate alone (with
//! the transport), so they compile neither the tree nor the model crates;
//! `smelt-runtime` re-exports it for the collectives.

#![warn(missing_docs)]
// `unsafe` only in the MPI module (the `mpi` feature: FFI), each block with its reason.
#![cfg_attr(not(feature = "mpi"), forbid(unsafe_code))]
#![cfg_attr(feature = "mpi", deny(unsafe_code))]

#[doc(hidden)]
pub mod job_env;
pub mod launch;
mod link_config;
pub mod mesh;
#[cfg(feature = "mpi")]
#[allow(unsafe_code)]
pub mod mpi;
pub mod world;

pub use link_config::LinkConfig;
pub use smelt_ids::{CpuId, Pos, Rank};
pub use smelt_transport::WaitPolicy;
pub use world::{World, WorldError};

/// The message of a caught panic (its `&str` or `String` payload), for reporting a
/// member that panicked, or a panic stopped at an FFI boundary.
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}
