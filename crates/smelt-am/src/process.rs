//! Endpoints in several processes of one host, linked by queuepairs in shared memory
//! ([`smelt_mesh::mesh_job`]).
//!
//! The creator calls [`AmJob::create`], starts each member process with the variables
//! of [`AmJob::env`] (or joins ranks itself with [`AmJob::join`]), and each member
//! calls [`join_from_env`]. Endpoint `i` is named `0.i.0`. A member process that dies
//! (even by `SIGKILL`) is reported to the others as [`AmError::PeerGone`].

use crate::endpoint::{Config, Endpoint, Name};
use crate::error::AmError;
use crate::setup::{random_tag, Table};
use smelt_mesh::mesh_job::{self, MeshJob, ShmLink};
use smelt_mesh::Rank;

/// The creator's handle on a job of endpoints in member processes.
#[derive(Debug)]
pub struct AmJob {
    job: MeshJob,
}

impl AmJob {
    /// Creates the shared memory of a job of `n` endpoints, linked all to all with
    /// queuepairs of `cfg.capacity` slots, each with a random tag.
    pub fn create(n: usize, cfg: &Config) -> Result<AmJob, AmError> {
        cfg.validate()?;
        let table = Table {
            names: (0..n as u32)
                .map(|process| Name {
                    node: 0,
                    process,
                    endpoint: 0,
                })
                .collect(),
            tags: (0..n).map(|_| random_tag()).collect(),
        };
        let pairs: Vec<(Rank, Rank)> = (0..n)
            .flat_map(|a| (a + 1..n).map(move |b| (Rank(a), Rank(b))))
            .collect();
        let job = MeshJob::create(n, &pairs, cfg.capacity, &table.encode())
            .map_err(|e| AmError::Invalid(e.to_string()))?;
        Ok(AmJob { job })
    }

    /// Number of endpoints.
    pub fn size(&self) -> usize {
        self.job.size()
    }

    /// The environment member `rank` needs for [`join_from_env`].
    pub fn env(&self, rank: usize) -> Vec<(String, String)> {
        self.job.env(Rank(rank))
    }

    /// Joins as endpoint `rank` from the creator's process.
    pub fn join<S>(
        &self,
        rank: usize,
        state: S,
        cfg: Config,
    ) -> Result<Endpoint<S, ShmLink>, AmError> {
        join(self.job.path(), &self.job.key(), rank, state, cfg)
    }
}

fn join<S>(
    path: &std::path::Path,
    key: &str,
    rank: usize,
    state: S,
    cfg: Config,
) -> Result<Endpoint<S, ShmLink>, AmError> {
    let (mesh, blob) = mesh_job::join(path, key, Rank(rank), cfg.wait, None)
        .map_err(|e| AmError::Invalid(e.to_string()))?;
    let table = Table::decode(&blob)?;
    if table.names.len() != mesh.size() {
        return Err(AmError::Invalid(
            "the job's table does not match its links".into(),
        ));
    }
    table.endpoint(rank, mesh, None, state, cfg)
}

/// Joins the job described by the environment (set from [`AmJob::env`]).
pub fn join_from_env<S>(state: S, cfg: Config) -> Result<Endpoint<S, ShmLink>, AmError> {
    cfg.validate()?;
    let (mesh, blob) =
        mesh_job::join_from_env(cfg.wait).map_err(|e| AmError::Invalid(e.to_string()))?;
    let table = Table::decode(&blob)?;
    let rank = mesh.rank().index();
    if table.names.len() != mesh.size() {
        return Err(AmError::Invalid(
            "the job's table does not match its links".into(),
        ));
    }
    table.endpoint(rank, mesh, None, state, cfg)
}
