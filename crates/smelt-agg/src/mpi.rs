//! Aggregators whose processes are MPI ranks (feature `mpi`): each rank's workers
//! share the rank's endpoint from [`smelt_am::mpi::Mpi::endpoint`] (shared memory to
//! the ranks of its node, MPI to the others; emulated nodes with
//! `SMELT_RANKS_PER_NODE`). One endpoint per rank polls MPI, whichever worker holds
//! it, so MPI's `MPI_THREAD_SERIALIZED` is enough.

use crate::shared::Shared;
use crate::world::over_endpoint;
use crate::{AggConfig, AggError, Out, Worker};
use smelt_am::mpi::Mpi;
use smelt_mesh::mesh_job::ShmLink;

/// Collective over the ranks: this rank's `workers` workers (worker `w` of the job
/// is worker `w % workers` of rank `w / workers`).
pub fn join<S, H>(
    mpi: &Mpi,
    workers: usize,
    cfg: AggConfig,
    state: impl FnMut(usize) -> S,
    handler: H,
) -> Result<Vec<Worker<S, ShmLink>>, AggError>
where
    H: Fn(&mut S, &[u8], &mut Out<'_>) + Send + Sync + 'static,
{
    cfg.validate(mpi.size(), workers)?;
    let ep = mpi.endpoint(
        Shared::new(mpi.rank(), mpi.size(), workers, &cfg),
        crate::am_config(&cfg, mpi.node_size()),
    )?;
    over_endpoint(ep, workers, cfg, state, handler)
}
