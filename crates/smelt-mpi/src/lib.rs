//! smelt under MPI.
//!
//! Built with the `mpi` feature, this crate is `libsmelt_mpi.so`, an interposition
//! library: preloaded into an unchanged MPI program
//!
//! ```sh
//! LD_PRELOAD=target/release/libsmelt_mpi.so mpirun -np 8 ./my_mpi_program
//! ```
//!
//! it runs `MPI_Bcast`, `MPI_Reduce`, `MPI_Allreduce`, `MPI_Barrier`, `MPI_Gather` and
//! `MPI_Scatter` hierarchically:
//! smelt's trees over shared memory inside each node (the ranks that share memory, or
//! emulated nodes of `SMELT_RANKS_PER_NODE` ranks), MPI's own collectives between the
//! nodes' leaders. Everything it does not take (user operations, `MPI_MAXLOC`, derived
//! datatypes in reductions, intercommunicators, messages past the cut-off, a
//! communicator's first few calls, a call made while another thread is inside a
//! collective on the same communicator) goes to `PMPI_*` unchanged. See `docs/mpi.md`.
//!
//! Without the feature the crate holds only [`ops`], the element-wise reduction
//! kernels, and builds where no MPI is installed.

pub mod ops;

#[cfg(feature = "mpi")]
mod interpose;
