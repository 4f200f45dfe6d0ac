//! Endpoints in several processes of one host, the short way: a process job whose
//! only service is one set of endpoints. Each is a [`World`] of processes
//! ([`smelt_mesh::world`]) and [`Endpoint::from_world`]; a program that wants
//! anything else from its job (collectives, a global array, more endpoints) holds the
//! world itself.
//!
//! The creator calls [`AmJob::create`], starts each member process with the variables
//! of [`AmJob::env`] (the world's: `SMELT_JOB`, `SMELT_JOB_KEY`, `SMELT_RANK`, as
//! `smelt launch` sets them), or joins ranks itself with [`AmJob::join`]; each member
//! calls [`join_from_env`]. Endpoint `i` is named `0.i.0`. A member process that dies
//! (even by `SIGKILL`) is reported to the others as [`AmError::PeerGone`].

use crate::endpoint::{Config, Endpoint};
use crate::error::AmError;
use smelt_mesh::world::{WorldBuilder, WorldJob};
use smelt_mesh::{Rank, World};

/// The creator's handle on a job of endpoints in member processes (a process
/// [`WorldJob`]).
#[derive(Debug)]
pub struct AmJob {
    job: WorldJob,
}

impl AmJob {
    /// Creates the shared memory of a job of `n` endpoints. Every member must make
    /// its endpoint with the same `cfg.capacity` (the links' size).
    pub fn create(n: usize, cfg: &Config) -> Result<AmJob, AmError> {
        cfg.validate()?;
        Ok(AmJob {
            job: WorldBuilder::new(n).create_job(false)?,
        })
    }

    /// Number of endpoints.
    pub fn size(&self) -> usize {
        self.job.size()
    }

    /// The environment member `rank` needs for [`join_from_env`].
    pub fn env(&self, rank: usize) -> Vec<(String, String)> {
        self.job.env(Rank(rank))
    }

    /// The job's world, as its creator holds it.
    pub fn world_job(&self) -> &WorldJob {
        &self.job
    }

    /// Joins as endpoint `rank` from the creator's process.
    pub fn join<S>(&self, rank: usize, state: S, cfg: Config) -> Result<Endpoint<S>, AmError> {
        Endpoint::from_world(&self.job.join(Rank(rank))?, state, cfg)
    }
}

/// Joins the job described by the environment (set from [`AmJob::env`] or by `smelt
/// launch`): [`World::from_env`], then [`Endpoint::from_world`].
pub fn join_from_env<S>(state: S, cfg: Config) -> Result<Endpoint<S>, AmError> {
    cfg.validate()?;
    Endpoint::from_world(&World::from_env()?, state, cfg)
}
