//! smelt in one crate: a [`World`] — the members of one job, however they were
//! started — and every service made from it.
//!
//! ```no_run
//! use smelt_world::{Topology, World, WorldExt};
//! // One world, however the members were started: `smelt launch -n 8 -- ./prog`
//! // (World::from_env), threads (World::threads), or MPI ranks (World::from_mpi).
//! let world = World::from_env()?;
//! // Tree collectives tuned for this machine: the default model (the launcher's
//! // --model, SMELT_MODEL, this host's cached probe, else uniform) and `auto`.
//! let mut coll = world.collectives(Topology::Auto)?;
//! // Other services on the same job, made the same way by every member.
//! let mut ep = world.endpoint(0u64)?;                   // active messages
//! let a = world.global_array::<f64>(1 << 20)?;          // global memory
//! coll.barrier()?;
//! let sum = coll.allreduce(a.get_one(world.rank().index() as u64)?, |x, y| x + y)?;
//! # let _ = (&mut ep, sum);
//! # Ok::<(), smelt_world::Error>(())
//! ```
//!
//! Threads:
//!
//! ```
//! use smelt_world::{Topology, World, WorldExt};
//! let sums = World::run(World::threads(4)?, |w| {
//!     let mut m = w.collectives(Topology::Auto)?;
//!     Ok::<u64, smelt_world::Error>(m.allreduce(w.rank().index() as u64 + 1, |a, b| a + b)?)
//! })?;
//! assert!(sums.into_iter().all(|s| s.unwrap() == 10));
//! # Ok::<(), smelt_world::Error>(())
//! ```
//!
//! Every method that makes something from a world is a collective call: every member
//! makes the same services in the same order (see [`smelt_mesh::world`]). The
//! services' own crates are re-exported ([`am`], [`agg`], [`global`], [`offload`],
//! [`tasks`]); their constructors take a world.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

#[cfg(feature = "mpi")]
pub mod mpi;

pub use smelt_agg as agg;
pub use smelt_am as am;
pub use smelt_global as global;
pub use smelt_ids::{CpuId, Pos, Rank};
pub use smelt_mesh::mesh::{Mesh, MeshError};
pub use smelt_mesh::world::{
    MeshSpec, ModelRef, Region, World, WorldBuilder, WorldError, WorldJob, WorldKind, WorldLink,
};
pub use smelt_mesh::{launch, WaitPolicy};
pub use smelt_model::Model;
pub use smelt_offload as offload;
pub use smelt_runtime::{GroupConfig, GroupError, Member, ReduceOp, SyncMode};
pub use smelt_tasks as tasks;
pub use smelt_tree::tuning::AlgorithmTable;
pub use smelt_tree::{Topology, Tree};

use smelt_runtime::world::GROUP_ATTRIBUTE;
use std::sync::Arc;

/// Why a service could not be made from a world.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The world (its links, regions, environment).
    #[error(transparent)]
    World(#[from] WorldError),
    /// The collectives.
    #[error(transparent)]
    Group(#[from] GroupError),
    /// A mesh's messages.
    #[error(transparent)]
    Mesh(#[from] MeshError),
    /// The machine model the world names, or the default model.
    #[error(transparent)]
    Model(#[from] smelt_model::ModelError),
    /// The tree could not be built (the model lacks a member's CPU, a topology that
    /// cannot be built over these members...).
    #[error("tree: {0}")]
    Tree(String),
    /// Active messages.
    #[error(transparent)]
    Am(#[from] smelt_am::AmError),
    /// A global array.
    #[error(transparent)]
    Global(#[from] smelt_global::GlobalError),
    /// An aggregator.
    #[error(transparent)]
    Agg(#[from] smelt_agg::AggError),
}

/// Services of a world that need the machine model and the tree builders (which the
/// mesh layer, below them, does not know).
pub trait WorldExt {
    /// The world's machine model: the file or JSON its launcher named
    /// ([`World::model`]), else the default model over the members' CPUs
    /// (`SMELT_MODEL`, this host's cached probe, else a uniform model).
    fn machine_model(&self) -> Result<Model, Error>;

    /// The group's trees and algorithm table for `topo` ([`Topology::Auto`]: the
    /// tuned tree and table, from `SMELT_TUNE`, this host's tuning file, else the
    /// simulator's prediction) over the members' CPUs; ranks stay the world's. A
    /// world whose members have no CPUs of their own (or share CPUs) gets a flat tree
    /// (a scheduling round per tree level is what an oversubscribed tree costs).
    fn plan(&self, topo: Topology) -> Result<(Tree, Option<Arc<AlgorithmTable>>), Error>;

    /// Tree collectives over `topo` with the default configuration: this member's
    /// [`Member`]. With [`Topology::Auto`] in a job whose launcher chose the group
    /// (`smelt launch`), the launcher's tree and table. A collective call.
    fn collectives(&self, topo: Topology) -> Result<Member, Error>;

    /// As [`collectives`](Self::collectives), configured by `cfg` (its
    /// `algorithms`, if `None`, are `topo`'s).
    fn collectives_with(&self, topo: Topology, cfg: GroupConfig) -> Result<Member, Error>;

    /// This member's active-message endpoint of a new set of endpoints of the world,
    /// with the handlers' state `state` and the default configuration
    /// ([`am::Endpoint::from_world`]). A collective call.
    fn endpoint<S>(&self, state: S) -> Result<am::Endpoint<S, WorldLink>, Error>;

    /// This member's handle on a new global array of `len` elements of `T` spread over
    /// the world's members, with the default configuration
    /// ([`global::GlobalArray::from_world`]). A collective call.
    fn global_array<T: global::Element>(&self, len: u64) -> Result<global::GlobalArray<T>, Error>;
}

/// `tree` with its members in `cpus`' order (position `r` holds `cpus[r]`), the
/// same shape.
fn in_rank_order(tree: &Tree, cpus: &[CpuId]) -> Result<Tree, Error> {
    let new_pos: Vec<Pos> = tree
        .members
        .iter()
        .map(|c| {
            cpus.iter()
                .position(|x| x == c)
                .map(Pos)
                .ok_or_else(|| Error::Tree(format!("the tree holds CPU {c}, no member's")))
        })
        .collect::<Result<_, _>>()?;
    let mut children = vec![Vec::new(); cpus.len()];
    for (old, cs) in tree.children.iter().enumerate() {
        children[new_pos[old].index()] = cs.iter().map(|c| new_pos[c.index()]).collect();
    }
    Tree::new(cpus.to_vec(), new_pos[tree.root.index()], children)
        .map_err(|e| Error::Tree(e.to_string()))
}

/// A flat tree over `n` members (made-up CPU ids 0..n): rank 0 sends to every other.
fn flat(n: usize) -> Result<Tree, Error> {
    let mut children = vec![Vec::new(); n];
    children[0] = (1..n).collect();
    Tree::from_raw((0..n as u32).collect(), 0, children).map_err(|e| Error::Tree(e.to_string()))
}

impl WorldExt for World {
    fn machine_model(&self) -> Result<Model, Error> {
        match self.model() {
            Some(ModelRef::Path(p)) => Ok(Model::load(p)?),
            Some(ModelRef::Json(j)) => Ok(Model::from_json(j, None)?),
            None => {
                let cpus: Option<Vec<u32>> = self
                    .cpus()
                    .into_iter()
                    .map(|c| c.map(|c| c.get()))
                    .collect();
                let (m, source) = smelt_model::default_model::resolve(None, cpus.as_deref())?;
                // Once per job, not once per member.
                if self.rank() == Rank(0) {
                    if let Some(n) = source.notice() {
                        eprintln!("{n}");
                    }
                }
                Ok(m)
            }
        }
    }

    fn plan(&self, topo: Topology) -> Result<(Tree, Option<Arc<AlgorithmTable>>), Error> {
        let n = self.size();
        let cpus: Option<Vec<CpuId>> = self.cpus().into_iter().collect();
        let distinct = cpus.as_ref().is_some_and(|c| {
            let mut s = c.clone();
            s.sort_unstable();
            s.dedup();
            s.len() == c.len()
        });
        let (Some(cpus), true) = (cpus, distinct) else {
            return Ok((flat(n)?, None));
        };
        let model = self.machine_model()?;
        let ids: Vec<u32> = cpus.iter().map(|c| c.get()).collect();
        let pos = model.positions(&ids)?;
        let tree = topo
            .generate(&model, &pos, None)
            .map_err(|e| Error::Tree(e.to_string()))?;
        let table = if topo == Topology::Auto {
            let (t, refused) = smelt_tree::tuning::auto_table(&model, &pos)
                .map_err(|e| Error::Tree(e.to_string()))?;
            if let (Some(why), Rank(0)) = (refused, self.rank()) {
                eprintln!("smelt: {why}");
            }
            Some(Arc::new(t))
        } else {
            None
        };
        Ok((in_rank_order(&tree, &cpus)?, table))
    }

    fn collectives(&self, topo: Topology) -> Result<Member, Error> {
        if topo == Topology::Auto && self.attribute(GROUP_ATTRIBUTE).is_some() {
            return Ok(Member::from_launched_world(self)?);
        }
        self.collectives_with(topo, GroupConfig::default())
    }

    fn endpoint<S>(&self, state: S) -> Result<am::Endpoint<S, WorldLink>, Error> {
        Ok(am::Endpoint::from_world(
            self,
            state,
            am::AmConfig::default(),
        )?)
    }

    fn global_array<T: global::Element>(&self, len: u64) -> Result<global::GlobalArray<T>, Error> {
        Ok(global::GlobalArray::from_world(
            self,
            len,
            global::GlobalConfig::default(),
        )?)
    }

    fn collectives_with(&self, topo: Topology, mut cfg: GroupConfig) -> Result<Member, Error> {
        let (tree, table) = self.plan(topo)?;
        if cfg.algorithms.is_none() {
            cfg.algorithms = table;
        }
        Ok(Member::from_world(self, &[tree], &cfg)?)
    }
}
