//! Aggregators whose processes are processes of this host: each member process joins
//! a [`smelt_am::process::AmJob`] (shared-memory queuepairs between the processes'
//! endpoints) and runs its `workers` worker threads over its endpoint.
//!
//! The creator calls `AmJob::create(n, &cfg.am)`, starts each member with
//! `job.env(i)` in its environment (or joins ranks itself with [`join`]), and each
//! member calls [`join_from_env`] with the same `workers` and configuration.

use crate::shared::Shared;
use crate::worker::build;
use crate::{AggConfig, AggError, Out, Worker};
use smelt_am::process::AmJob;
use smelt_mesh::mesh_job::ShmLink;

/// Joins as process `rank` of `job` from this process: its `workers` workers (worker
/// `w` of the job is worker `w % workers` of process `w / workers`).
pub fn join<S, H>(
    job: &AmJob,
    rank: usize,
    workers: usize,
    cfg: AggConfig,
    state: impl FnMut(usize) -> S,
    handler: H,
) -> Result<Vec<Worker<S, ShmLink>>, AggError>
where
    H: Fn(&mut S, &[u8], &mut Out<'_>) + Send + Sync + 'static,
{
    cfg.validate(job.size(), workers)?;
    let ep = job.join(
        rank,
        Shared::new(rank, job.size(), workers, &cfg),
        cfg.am.clone(),
    )?;
    finish(ep, workers, cfg, state, handler)
}

/// Joins the job described by the environment (set from [`AmJob::env`]): this
/// process's `workers` workers.
pub fn join_from_env<S, H>(
    workers: usize,
    cfg: AggConfig,
    state: impl FnMut(usize) -> S,
    handler: H,
) -> Result<Vec<Worker<S, ShmLink>>, AggError>
where
    H: Fn(&mut S, &[u8], &mut Out<'_>) + Send + Sync + 'static,
{
    cfg.validate(1, workers)?;
    // The process's index and count are known once joined.
    let ep = smelt_am::process::join_from_env(Shared::new(0, 1, workers, &cfg), cfg.am.clone())?;
    finish(ep, workers, cfg, state, handler)
}

pub(crate) fn finish<S, H>(
    mut ep: smelt_am::Endpoint<std::sync::Arc<Shared>, ShmLink>,
    workers: usize,
    cfg: AggConfig,
    state: impl FnMut(usize) -> S,
    handler: H,
) -> Result<Vec<Worker<S, ShmLink>>, AggError>
where
    H: Fn(&mut S, &[u8], &mut Out<'_>) + Send + Sync + 'static,
{
    cfg.validate(ep.size(), workers)?;
    let sh = Shared::new(ep.me(), ep.size(), workers, &cfg);
    *ep.state_mut() = sh.clone();
    build(vec![ep], vec![sh], workers, cfg, true, state, handler)
}
