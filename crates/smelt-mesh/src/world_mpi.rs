//! Worlds of MPI ranks (the `mpi` feature): [`World::from_mpi`].
//!
//! A program started by `mpirun` (or any MPI launcher) that holds a communicator of
//! rsmpi's `mpi` crate gets a `World` from it: member `r` is rank `r` of the
//! communicator. The ranks are grouped into nodes ([`crate::mpi::nodes`]: the ranks
//! that share memory, `MPI_COMM_TYPE_SHARED`, or emulated nodes of
//! `SMELT_RANKS_PER_NODE` consecutive ranks); each node's leader creates one world
//! segment for the node (an arena, as a process job's) and hands it out over the
//! node's communicator ([`crate::mpi::hand_out`]), and every rank of the node attaches
//! it. So the services a program makes from the world share one segment per node,
//! and members on one node reach each other through it ([`World::queuepairs`],
//! [`World::mesh`] and [`World::region`] take the node's members). Members on other
//! nodes are reached over MPI, on the world's own duplicate of the communicator
//! ([`MpiWorld::comm`]): active messages send to them with smelt-am's MPI channel,
//! global arrays with MPI one-sided communication.
//!
//! ```no_run
//! use smelt_mesh::mpi::rsmpi::traits::Communicator;
//! use smelt_mesh::World;
//! let universe = smelt_mesh::mpi::rsmpi::initialize().expect("MPI");
//! let comm = universe.world();
//! let world = World::from_mpi(&comm)?;
//! assert_eq!(world.rank().index(), comm.rank() as usize);
//! # Ok::<(), smelt_mesh::WorldError>(())
//! ```
//!
//! Making the world is a collective call over the communicator (every rank calls it);
//! every wait for the other ranks is bounded ([`MpiWorld::timeout`]): a rank that
//! never comes makes the others fail with an error instead of hanging. MPI must stay
//! initialised while the world is used; the world frees its communicators when it is
//! dropped (nothing once MPI is finalised).

use super::{Backend, Description, World, WorldBuilder, WorldError};
use crate::mpi::rsmpi::topology::Communicator;
use crate::mpi::{self as m, ffi, hand_out, Layout, MpiCalls, MpiError, NodeComm, Nodes};
use smelt_ids::Rank;
use smelt_transport::shm::ShmMember;
use smelt_transport::WaitPolicy;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The default bound on every wait for the other ranks while a world is made.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

impl From<MpiError> for WorldError {
    fn from(e: MpiError) -> WorldError {
        WorldError::Invalid(format!("MPI: {e}"))
    }
}

/// What a world of MPI ranks holds besides its node's segment: the world's own
/// duplicate of the communicator, and how its ranks are grouped into nodes
/// ([`World::mpi`]).
#[derive(Debug)]
pub struct MpiWorld {
    comm: ffi::MPI_Comm,
    nodes: NodeComm<MpiCalls>,
    timeout: Duration,
}

// SAFETY: the communicators are process-wide MPI handles; the world's owner makes
// its calls on them, one thread at a time as the MPI thread level requires.
unsafe impl Send for MpiWorld {}
// SAFETY: as above: sharing the handles makes no MPI call by itself.
unsafe impl Sync for MpiWorld {}

impl MpiWorld {
    /// The world's duplicate of the communicator it was made from (member `r` is rank
    /// `r`): for the services' traffic between nodes. Owned by the world.
    pub fn comm(&self) -> ffi::MPI_Comm {
        self.comm
    }

    /// The communicator of this rank's node (ranks in world order). Owned by the
    /// world.
    pub fn node_comm(&self) -> ffi::MPI_Comm {
        self.nodes.node_comm()
    }

    /// The ranks grouped into nodes: each rank's node and its place on it.
    pub fn layout(&self) -> &Layout {
        &self.nodes.layout
    }

    /// How the ranks were grouped.
    pub fn grouping(&self) -> Nodes {
        self.nodes.nodes
    }

    /// This rank's place on its node (0: the node's leader); also its member index
    /// in the node's segment.
    pub fn node_rank(&self) -> usize {
        self.nodes.node_rank()
    }

    /// Ranks on this rank's node.
    pub fn node_size(&self) -> usize {
        self.nodes.node_size()
    }

    /// The ranks of this rank's node, by place on it.
    pub fn node_ranks(&self) -> Vec<usize> {
        self.nodes.layout.node_ranks(self.nodes.node())
    }

    /// Rank `rank`'s place on its node.
    pub fn place_of(&self, rank: Rank) -> Option<usize> {
        self.nodes.layout.place.get(rank.index()).map(|p| p[1])
    }

    /// Whether this rank's host has more ranks than CPUs they may use.
    pub fn oversubscribed(&self) -> bool {
        self.nodes.oversubscribed()
    }

    /// The bound on every wait for the other ranks in a collective step.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// "4 ranks, 2 nodes (emulated nodes of 2 ranks)".
    pub fn describe(&self) -> String {
        self.nodes.describe()
    }

    /// The index in this node's segment of member `peer`, seen from member `me`: an
    /// error when `peer` is on another node (reached over MPI, not through the
    /// segment).
    pub(super) fn member_index(&self, me: Rank, peer: Rank) -> Result<u32, WorldError> {
        let l = &self.nodes.layout;
        match (l.place.get(me.index()), l.place.get(peer.index())) {
            (Some(a), Some(b)) if a[0] == b[0] => Ok(b[1] as u32),
            (Some(_), Some(_)) => Err(WorldError::Invalid(format!(
                "members {me} and {peer} are on different nodes of an MPI world: only the members of a node share memory (reach the others over MPI, MpiWorld::comm)"
            ))),
            _ => Err(WorldError::Invalid(format!(
                "no member {peer} in a world of {}",
                l.place.len()
            ))),
        }
    }

    /// Ok when members `a` and `b` share a node (a link between them can be carved
    /// from its segment).
    pub(super) fn check_pair(&self, a: Rank, b: Rank) -> Result<(), WorldError> {
        if self.same_node(a, b) {
            Ok(())
        } else {
            Err(WorldError::Invalid(format!(
                "members {a} and {b} are on different nodes of an MPI world: only the members of a node share memory (tree collectives across nodes: smelt_world::mpi::collectives; other traffic over MPI, MpiWorld::comm)"
            )))
        }
    }

    /// Whether members `a` and `b` are on one node.
    pub(super) fn same_node(&self, a: Rank, b: Rank) -> bool {
        let p = &self.nodes.layout.place;
        matches!((p.get(a.index()), p.get(b.index())), (Some(x), Some(y)) if x[0] == y[0])
    }
}

impl Drop for MpiWorld {
    fn drop(&mut self) {
        m::free::<MpiCalls>(&mut self.comm);
    }
}

impl World {
    /// A collective call over `comm`: this rank's member of the world of `comm`'s
    /// ranks (member `r` is rank `r`), with nodes as the settings say
    /// (`SMELT_RANKS_PER_NODE`; see [`crate::mpi::Nodes::from_settings`]) and waits
    /// bounded by [`DEFAULT_TIMEOUT`]. See the [module documentation](self).
    pub fn from_mpi<C: Communicator>(comm: &C) -> Result<World, WorldError> {
        World::from_mpi_with(comm, Nodes::from_settings()?, DEFAULT_TIMEOUT)
    }

    /// [`from_mpi`](Self::from_mpi) with nodes grouped as `nodes` and every wait for
    /// the other ranks at most `timeout`.
    pub fn from_mpi_with<C: Communicator>(
        comm: &C,
        nodes: Nodes,
        timeout: Duration,
    ) -> Result<World, WorldError> {
        // SAFETY: rsmpi's communicators hold valid handles while they live, and `comm` is borrowed for the whole call.
        unsafe { World::from_raw_mpi(comm.as_raw(), nodes, timeout) }
    }

    /// [`from_mpi_with`](Self::from_mpi_with) from a raw communicator handle (as C
    /// programs hold one; the C API's `smelt_world_from_mpi`).
    ///
    /// # Safety
    /// `comm` must be a valid intracommunicator handle of this process, MPI
    /// initialised; the world keeps a duplicate, so `comm` may be freed afterwards.
    pub unsafe fn from_raw_mpi(
        comm: ffi::MPI_Comm,
        nodes: Nodes,
        timeout: Duration,
    ) -> Result<World, WorldError> {
        m::require_active()?;
        if comm == m::comm_null() {
            return Err(WorldError::Invalid(
                "MPI_COMM_NULL has no ranks to make a world of".into(),
            ));
        }
        if m::is_inter::<MpiCalls>(comm)? {
            return Err(WorldError::Invalid(
                "an intercommunicator makes no world (use an intracommunicator)".into(),
            ));
        }
        // Every rank is here before the blocking duplicate (a rank that never comes
        // makes the others time out instead of hanging in it).
        m::barrier::<MpiCalls>(comm, Some(timeout))?;
        let mut own = m::dup::<MpiCalls>(comm)?;
        let nodes = match NodeComm::<MpiCalls>::new(own, nodes, timeout) {
            Ok(n) => n,
            Err(e) => {
                m::free::<MpiCalls>(&mut own);
                return Err(e.into());
            }
        };
        let part = MpiWorld {
            comm: own,
            nodes,
            timeout,
        };
        let (rank, size) = (part.nodes.rank, part.nodes.size);
        // Every rank's CPU, where it is bound to exactly one.
        let cpu = match smelt_transport::allowed_cpus().unwrap_or_default()[..] {
            [c] => c as u64,
            _ => u64::MAX,
        };
        let cpus: Vec<Option<u32>> =
            m::allgather_words::<MpiCalls>(part.comm, &[cpu], Some(timeout))?
                .into_iter()
                .map(|c| u32::try_from(c).ok())
                .collect();
        let desc = Description {
            size,
            cpus,
            nodes: part.nodes.layout.place.iter().map(|p| p[0]).collect(),
            model: None,
            attributes: BTreeMap::new(),
        };
        desc.check()?;
        let shm = node_segment(&part);
        // Every rank of every node attached (or fails alike).
        let ok = m::all::<MpiCalls>(part.comm, shm.is_ok(), Some(timeout))?;
        let shm = shm?;
        if !ok {
            return Err(WorldError::Invalid(
                "a rank on another node could not attach its node's segment".into(),
            ));
        }
        let mut w = World::new(Rank(rank), Arc::new(desc), Backend::Shm(Arc::new(shm)));
        w.wait = if part.oversubscribed() {
            WaitPolicy::OVERSUBSCRIBED
        } else {
            WaitPolicy::DEDICATED
        };
        w.mpi = Some(Arc::new(part));
        Ok(w)
    }

    /// The MPI side of a world made by [`from_mpi`](Self::from_mpi) (None for worlds
    /// of threads or processes).
    pub fn mpi(&self) -> Option<&MpiWorld> {
        self.mpi.as_deref()
    }
}

/// This rank's attachment to its node's world segment: the node's leader creates it
/// and hands it out over the node's communicator; the node agrees.
fn node_segment(part: &MpiWorld) -> Result<ShmMember, WorldError> {
    let (n, local) = (part.node_size(), part.node_rank());
    let mut job = None;
    let offer = (local == 0).then(|| {
        WorldBuilder::new(n)
            .create_job(false)
            .map(|j| {
                let address = format!("{}\n{}", j.path().display(), j.key());
                job = Some(j);
                address
            })
            .map_err(|e| e.to_string())
    });
    let out = hand_out::<MpiCalls, _>(
        part.node_comm(),
        offer,
        |address| {
            let (path, key) = address
                .split_once('\n')
                .ok_or("a malformed segment address")?;
            ShmMember::attach(Path::new(path), key, local as u32).map_err(|e| e.to_string())
        },
        Some(part.timeout),
    )?;
    // Every rank of the node attached (or gave up): the name can go.
    drop(job);
    out.agreed().map_err(|e| WorldError::Invalid(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_world_needs_mpi_initialised() {
        // MPI_COMM_WORLD is a valid handle; MPI is checked first.
        // No test of this binary initialises MPI (the mpirun tests are smelt-world's).
        // SAFETY: as argued in the lines above.
        let e = unsafe { World::from_raw_mpi(m::comm_world(), Nodes::Shared, DEFAULT_TIMEOUT) }
            .unwrap_err();
        assert!(e.to_string().contains("not initialised"), "{e}");
    }
}
