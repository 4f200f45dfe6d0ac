//! Aggregators whose processes are processes of this host, the short way: each is a
//! member of a process `World` (`smelt_mesh::World`) and calls
//! [`from_world`], which is what these functions do.
//!
//! The creator calls `AmJob::create(n, &cfg.am)`, starts each member with
//! `job.env(i)` in its environment (or joins ranks itself with [`join`]), and each
//! member calls [`join_from_env`] with the same `workers` and configuration.

use crate::{from_world, AggConfig, AggError, Out, Worker};
use smelt_am::process::AmJob;
use smelt_mesh::{Rank, World};

/// Joins as process `rank` of `job` from this process: its `workers` workers (worker
/// `w` of the job is worker `w % workers` of process `w / workers`).
pub fn join<S, H>(
    job: &AmJob,
    rank: usize,
    workers: usize,
    cfg: AggConfig,
    state: impl FnMut(usize) -> S,
    handler: H,
) -> Result<Vec<Worker<S>>, AggError>
where
    H: Fn(&mut S, &[u8], &mut Out<'_>) + Send + Sync + 'static,
{
    let world = job
        .world_job()
        .join(Rank(rank))
        .map_err(smelt_am::AmError::from)?;
    from_world(&world, workers, cfg, state, handler)
}

/// Joins the job described by the environment (set from [`AmJob::env`] or by `smelt
/// launch`): this process's `workers` workers.
pub fn join_from_env<S, H>(
    workers: usize,
    cfg: AggConfig,
    state: impl FnMut(usize) -> S,
    handler: H,
) -> Result<Vec<Worker<S>>, AggError>
where
    H: Fn(&mut S, &[u8], &mut Out<'_>) + Send + Sync + 'static,
{
    let world = World::from_env().map_err(smelt_am::AmError::from)?;
    from_world(&world, workers, cfg, state, handler)
}
