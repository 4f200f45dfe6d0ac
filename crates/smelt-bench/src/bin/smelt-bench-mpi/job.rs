//! The MPI job every service of the driver runs in: MPI initialised through rsmpi
//! (`MPI_THREAD_SERIALIZED`, as endpoints over MPI need), one world of its ranks
//! (`World::from_mpi_with`: nodes as the environment says) from which each service
//! is made, and the few collectives the driver itself needs (verdicts, sums).

use smelt_mesh::mpi::rsmpi::{self, environment::Universe, Threading};
use smelt_mesh::mpi::{self as mesh_mpi, MpiCalls, MpiError, Nodes};
use smelt_mesh::world::MpiWorld;
use smelt_mesh::{Rank, World};
use std::time::Duration;

/// MPI and the world of its ranks (dropped in that order: the world first).
pub struct Job {
    world: Option<World>,
    universe: Option<Universe>,
    grouping: Nodes,
}

impl Job {
    /// Initialises MPI and makes the world of `MPI_COMM_WORLD`'s ranks, grouped into
    /// nodes as `nodes` says; every wait for the other ranks is at most `timeout`.
    /// Every rank calls it.
    pub fn init(nodes: Nodes, timeout: Duration) -> Result<Job, String> {
        let (universe, provided) = rsmpi::initialize_with_threading(Threading::Serialized)
            .ok_or("MPI was initialised already")?;
        if provided < Threading::Serialized {
            return Err(format!(
                "MPI gives thread level {provided:?}, below MPI_THREAD_SERIALIZED"
            ));
        }
        let world =
            World::from_mpi_with(&universe.world(), nodes, timeout).map_err(|e| e.to_string())?;
        Ok(Job {
            world: Some(world),
            universe: Some(universe),
            grouping: nodes,
        })
    }

    /// The world every service is made from.
    pub fn world(&self) -> &World {
        self.world.as_ref().expect("present until finalize")
    }

    fn mpi(&self) -> &MpiWorld {
        self.world().mpi().expect("a world of MPI ranks")
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.world().rank().index()
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.world().size()
    }

    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.world().nodes()
    }

    /// The node of rank `rank`.
    pub fn node_of(&self, rank: usize) -> Option<usize> {
        self.world().node_of(Rank(rank))
    }

    /// How the ranks were asked to be grouped.
    pub fn grouping(&self) -> Nodes {
        self.grouping
    }

    /// "4 ranks, 2 nodes (emulated nodes of 2 ranks)".
    pub fn describe(&self) -> String {
        self.mpi().describe()
    }

    /// True at every rank if `ok` is true at every rank (bounded by the world's
    /// timeout).
    pub fn all(&self, ok: bool) -> Result<bool, MpiError> {
        let m = self.mpi();
        mesh_mpi::all::<MpiCalls>(m.comm(), ok, Some(m.timeout()))
    }

    /// `v` of every rank, in rank order (bounded).
    pub fn gather(&self, v: u64) -> Result<Vec<u64>, MpiError> {
        let m = self.mpi();
        mesh_mpi::allgather_words::<MpiCalls>(m.comm(), &[v], Some(m.timeout()))
    }

    /// Waits until every rank got here (bounded).
    pub fn barrier(&self) -> Result<(), MpiError> {
        let m = self.mpi();
        mesh_mpi::barrier::<MpiCalls>(m.comm(), Some(m.timeout()))
    }

    /// Drops the world, then finalises MPI (drop every service first). Every rank
    /// calls it.
    pub fn finalize(mut self) {
        drop(self.world.take());
        drop(self.universe.take());
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        // The world's communicators go before MPI is finalised.
        drop(self.world.take());
        drop(self.universe.take());
    }
}
