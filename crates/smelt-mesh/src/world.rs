//! The members of one job and how they reach each other: a [`World`].
//!
//! A program holds one `World` per member (per thread, process or MPI rank). It knows
//! the member's [`rank`](World::rank), the [`size`](World::size) of the job, the
//! [`node`](World::node_of) and [`CPU`](World::cpu_of) of every member, and where the
//! launcher said the machine model is ([`model`](World::model): a path or JSON; the
//! mesh cannot read models, the crates above it resolve it). Every service is made
//! from a world, so one program runs collectives, active messages, aggregation,
//! offload, global arrays and tasks in the same job without learning a setup per
//! service.
//!
//! # Making a world
//!
//! * **Threads** of this process: [`World::threads`]`(n)` (or [`WorldBuilder`] with
//!   CPUs to pin to: [`cpus`](WorldBuilder::cpus), [`spread`](WorldBuilder::spread))
//!   gives one `World` per rank; move each into a thread of your own,
//!   or let [`World::run`] start them (pinned, panics reported by rank).
//! * **Processes** started by `smelt launch -n N -- prog`: each calls
//!   [`World::from_env`]. A launcher of your own makes the job with
//!   [`WorldBuilder::create_job`] and gives member `r` the variables of
//!   [`WorldJob::env`]`(r)` (`SMELT_JOB`, `SMELT_JOB_KEY`, `SMELT_RANK`, `SMELT_SIZE`,
//!   `SMELT_CPU`); by hand, the same variables.
//! * **MPI ranks**: `World::from_mpi` (the `mpi` feature) from a communicator.
//!
//! # Making services: collective calls
//!
//! Every method that makes something ([`mesh`](World::mesh),
//! [`queuepairs`](World::queuepairs), [`region`](World::region),
//! [`hand_out`](World::hand_out)) is a **collective call**, like `MPI_Comm_dup`: every
//! member makes the same things, in the same order, with the same arguments. Nothing
//! is exchanged: a member of a process job carves its part at the next offset of the
//! job's arena, where the other members carve theirs; members that are threads of one
//! process meet at the same slot of the world's table. Each made thing is
//! fingerprinted (what it is, its arguments, its place in the order), and a member
//! that makes something else there gets [`WorldError::Mismatch`] instead of memory
//! that another member uses for something else. (A member makes its services from one
//! thread at a time: the order is per member.)
//!
//! # One segment per job
//!
//! A process job has one shared-memory segment: a header, the world's description,
//! and a large **sparse** arena (`SMELT_WORLD_ARENA`, default 1 GiB of address space;
//! only the pages services carve take memory, allocated as they are carved, so a full
//! tmpfs is an error then, never a SIGBUS). It is created exclusively, mode 0600,
//! under an unguessable name, and unlinked once every member attached (and when the
//! launcher's [`WorldJob`] is dropped, or its process dies): nothing is left in
//! `/dev/shm` after a crash. A member process that dies is an error for its peers
//! (its liveness lock is gone), never a hang.
//!
//! Threads do not use an arena: the first member to make a service builds it whole
//! (in-process queuepairs, doorbells, loans of large messages) and each member takes
//! its own part. Threads thus keep every in-process fast path, and the services see
//! the same types either way ([`Mesh`]`<`[`WorldLink`]`>`, [`QueuePairEnd`], [`Region`]).
//!
//! ```
//! use smelt_mesh::world::{MeshSpec, World};
//! use std::sync::atomic::Ordering;
//! use std::time::Duration;
//! let t = Duration::from_secs(5);
//! let sums = World::run(World::threads(3).unwrap(), |w| {
//!     // Collective calls: every member makes the same mesh, then the same region.
//!     let mut mesh = w.mesh(&MeshSpec::all_to_all()).unwrap();
//!     let region = w.region(8 * w.size()).unwrap();
//!     let me = w.rank().index();
//!     region.words()[me].store(me as u64 + 1, Ordering::Release);
//!     if me == 0 {
//!         // Each other member says when its word is written, then leaves (a
//!         // departure is reported once, after the member's last message).
//!         let mut heard = 0;
//!         while heard < w.size() - 1 {
//!             let mut b = [0u8; 8];
//!             match mesh.recv_any(&mut b, t) {
//!                 Ok(_) => heard += 1,
//!                 Err(smelt_mesh::mesh::MeshError::PeerGone { .. }) => {}
//!                 Err(e) => panic!("{e}"),
//!             }
//!         }
//!         region.words().iter().map(|x| x.load(Ordering::Acquire)).sum::<u64>()
//!     } else {
//!         mesh.send(smelt_mesh::Rank(0), 1, b"done", t).unwrap();
//!         0
//!     }
//! })
//! .unwrap();
//! assert_eq!(sums[0], 6);
//! ```

use crate::job_env::{join_env, read_join_env, JoinVars};
use crate::mesh::{Mesh, MeshBuilder, MeshError};
use serde::{Deserialize, Serialize};
use smelt_ids::{CpuId, Rank};
use smelt_transport::shm::{
    arena_link_bytes, SharedWords, ShmError, ShmJob, ShmMember, ARENA_ALIGN,
};
use smelt_transport::{
    allowed_cpus, pin_current_thread, try_queuepair, Abort, Link, QueuePairEnd, TransportError,
    WaitPolicy,
};
use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// Worlds of MPI ranks: `World::from_mpi` (FFI: `unsafe`, each block with its reason).
#[cfg(feature = "mpi")]
#[allow(unsafe_code)]
#[path = "world_mpi.rs"]
pub mod mpi;
#[cfg(feature = "mpi")]
pub use mpi::{MpiWorld, DEFAULT_TIMEOUT as MPI_TIMEOUT};

/// Environment variable: the world segment's path.
pub const ENV_JOB: &str = smelt_settings::JOB;
/// Environment variable: the job's key (32 hex digits).
pub const ENV_KEY: &str = smelt_settings::JOB_KEY;
/// Environment variable: this member's rank.
pub const ENV_RANK: &str = smelt_settings::RANK;
/// Environment variable: the number of members (checked against the segment's).
pub const ENV_SIZE: &str = smelt_settings::SIZE;
/// Environment variable: the CPU this member is pinned to (informational).
pub const ENV_CPU: &str = smelt_settings::CPU;

const WORLD_VARS: JoinVars = [ENV_JOB, ENV_KEY, ENV_RANK];

/// The default arena of a process job: 1 GiB of address space (sparse).
pub const DEFAULT_ARENA: u64 = 1 << 30;

/// Slots per ring of a link made with the default [`MeshSpec`] (as
/// [`MeshBuilder`]'s): 64, a message of up to 3 KiB.
pub const DEFAULT_CAPACITY: usize = 64;

/// How often, at most, an idle link to another process checks that its peer lives.
pub const LIVENESS_EVERY: Duration = Duration::from_millis(1);

/// Why a world could not be made, joined, or could not make a service.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WorldError {
    /// An argument that cannot work (a size of 0, a link to oneself, ...).
    #[error("world: {0}")]
    Invalid(String),
    /// A variable of the environment is missing or holds garbage.
    #[error("{var} {why}")]
    Env {
        /// The variable.
        var: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// The job's shared memory could not be made or attached.
    #[error(transparent)]
    Shm(#[from] ShmError),
    /// A link could not be opened.
    #[error("world: {0}")]
    Transport(#[from] TransportError),
    /// A mesh could not be built.
    #[error(transparent)]
    Mesh(#[from] MeshError),
    /// The members made services in different orders or with different arguments.
    #[error("world: {0}")]
    Mismatch(String),
    /// A member run by [`World::run`] panicked.
    #[error("member {rank} panicked: {message}")]
    MemberPanicked {
        /// Its rank.
        rank: Rank,
        /// The panic's message.
        message: String,
    },
}

/// Where the machine model of a world comes from, as the launcher said (the mesh
/// layer does not read models; `smelt_model` resolves it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ModelRef {
    /// A model file.
    Path(PathBuf),
    /// A model as JSON text.
    Json(String),
}

/// How the members of a world were started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorldKind {
    /// Threads of one process.
    Threads,
    /// Processes of one host sharing a segment (`smelt launch`, or by hand).
    Processes,
    /// MPI ranks (`World::from_mpi`, the `mpi` feature): the members of a node share
    /// a segment, members on other nodes are reached over MPI.
    Mpi,
}

/// What every member knows about the world (in a process job, the segment's blob).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Description {
    size: usize,
    cpus: Vec<Option<u32>>,
    nodes: Vec<usize>,
    model: Option<ModelRef>,
    attributes: BTreeMap<String, String>,
}

impl Description {
    fn check(&self) -> Result<(), WorldError> {
        if self.size == 0 || self.size > smelt_transport::shm::MAX_MEMBERS as usize {
            return Err(WorldError::Invalid(format!(
                "a world needs 1 to {} members, not {}",
                smelt_transport::shm::MAX_MEMBERS,
                self.size
            )));
        }
        if self.cpus.len() != self.size || self.nodes.len() != self.size {
            return Err(WorldError::Invalid(format!(
                "{} CPUs and {} nodes given for {} members",
                self.cpus.len(),
                self.nodes.len(),
                self.size
            )));
        }
        Ok(())
    }
}

/// Describes a world before it exists: its size, each member's CPU and node, the
/// model source and free-form attributes (what a launcher tells every member); then
/// makes it as threads ([`threads`](Self::threads)) or as a process job
/// ([`create_job`](Self::create_job)).
#[derive(Debug, Clone)]
pub struct WorldBuilder {
    desc: Description,
    arena: Option<u64>,
}

impl WorldBuilder {
    /// A world of `size` members, unpinned, all on node 0, with no model source.
    pub fn new(size: usize) -> WorldBuilder {
        WorldBuilder {
            desc: Description {
                size,
                cpus: vec![None; size],
                nodes: vec![0; size],
                model: None,
                attributes: BTreeMap::new(),
            },
            arena: None,
        }
    }

    /// Member `r` runs on `cpus[r]` (threads of [`World::run`] are pinned there; a
    /// launcher pins its processes). `cpus.len()` must be the size.
    pub fn cpus(mut self, cpus: &[CpuId]) -> WorldBuilder {
        self.desc.cpus = cpus.iter().map(|c| Some(c.get())).collect();
        self
    }

    /// Each member on one of the CPUs this process may use, in order, round-robin when
    /// there are more members than CPUs (several members then share a CPU; trees
    /// over such a world are flat).
    pub fn spread(self) -> WorldBuilder {
        let allowed = allowed_cpus().unwrap_or_default();
        if allowed.is_empty() {
            return self;
        }
        let n = self.desc.size;
        let cpus: Vec<CpuId> = (0..n).map(|r| CpuId(allowed[r % allowed.len()])).collect();
        self.cpus(&cpus)
    }

    /// As [`cpus`](Self::cpus), unless `cpus` was called already (a launcher's own
    /// placement wins over a library's default).
    pub fn default_cpus(self, cpus: &[CpuId]) -> WorldBuilder {
        if self.desc.cpus.iter().any(Option::is_some) {
            self
        } else {
            self.cpus(cpus)
        }
    }

    /// Member `r` is on node `nodes[r]` (members of one node share memory).
    pub fn nodes(mut self, nodes: &[usize]) -> WorldBuilder {
        self.desc.nodes = nodes.to_vec();
        self
    }

    /// Where the members find the machine model.
    pub fn model(mut self, source: ModelRef) -> WorldBuilder {
        self.desc.model = Some(source);
        self
    }

    /// A free-form entry every member reads back with [`World::attribute`] (what a
    /// launcher wants its members to know: a tree, an algorithm table...).
    pub fn attribute(mut self, key: &str, value: &str) -> WorldBuilder {
        self.desc.attributes.insert(key.into(), value.into());
        self
    }

    /// Bytes of a process job's arena (default `SMELT_WORLD_ARENA`, else
    /// [`DEFAULT_ARENA`]).
    pub fn arena(mut self, bytes: u64) -> WorldBuilder {
        self.arena = Some(bytes);
        self
    }

    /// The world as threads of this process: one `World` per rank, in rank order.
    pub fn threads(self) -> Result<Vec<World>, WorldError> {
        self.desc.check()?;
        let desc = Arc::new(self.desc);
        let shared = Arc::new(ThreadsShared::default());
        Ok((0..desc.size)
            .map(|r| World::new(Rank(r), desc.clone(), Backend::Threads(shared.clone())))
            .collect())
    }

    /// The shared memory of a process job: hand member `r` the variables of
    /// [`WorldJob::env`]`(r)`. `guarded`: the segment's name cannot outlive this
    /// process, even one killed by SIGKILL before every member attached (a small
    /// watcher process; for launchers).
    pub fn create_job(self, guarded: bool) -> Result<WorldJob, WorldError> {
        self.desc.check()?;
        let arena = match self.arena {
            Some(a) => a,
            None => smelt_settings::bytes(smelt_settings::WORLD_ARENA)
                .map_err(|e| WorldError::Env {
                    var: smelt_settings::WORLD_ARENA,
                    why: garbage(&e),
                })?
                .unwrap_or(DEFAULT_ARENA),
        };
        if arena < ARENA_ALIGN as u64 {
            return Err(WorldError::Invalid(format!(
                "an arena of {arena} bytes holds no service"
            )));
        }
        let blob = serde_json::to_vec(&self.desc).expect("plain data serializes");
        let shm = ShmJob::create_world(self.desc.size as u32, &blob, arena, guarded)?;
        Ok(WorldJob {
            shm,
            desc: Arc::new(self.desc),
        })
    }
}

/// A process job's world as its creator (a launcher) holds it. Dropping it removes
/// the segment's name (members that attached keep running).
#[derive(Debug)]
pub struct WorldJob {
    shm: ShmJob,
    desc: Arc<Description>,
}

impl WorldJob {
    /// Number of members.
    pub fn size(&self) -> usize {
        self.desc.size
    }

    /// Each member's CPU, by rank.
    pub fn cpus(&self) -> Vec<Option<CpuId>> {
        self.desc.cpus.iter().map(|c| c.map(CpuId)).collect()
    }

    crate::shm_job_accessors!();

    /// The environment member `rank` needs to join ([`World::from_env`]).
    pub fn env(&self, rank: Rank) -> Vec<(String, String)> {
        let mut env = join_env(&self.shm, WORLD_VARS, rank);
        env.push((ENV_SIZE.into(), self.size().to_string()));
        if let Some(Some(c)) = self.desc.cpus.get(rank.index()) {
            env.push((ENV_CPU.into(), c.to_string()));
        }
        env
    }

    /// Joins as member `rank` from the creator's process (a process may hold several
    /// ranks).
    pub fn join(&self, rank: Rank) -> Result<World, WorldError> {
        World::join(self.path(), &self.key(), rank)
    }

    /// Fails the job on member `rank`'s behalf (first failure wins) and raises its
    /// abort flag: every member's waits on the job's links end at once.
    pub fn fail(&self, rank: Rank, what: &str) {
        self.shm.fail(rank.index() as u32, what);
    }

    /// The job's first failure: rank and what happened.
    pub fn failure(&self) -> Option<(Rank, String)> {
        self.shm.failure().map(|(r, w)| (Rank(r as usize), w))
    }

    /// Removes the segment's name now.
    pub fn unlink(&self) {
        self.shm.unlink();
    }
}

/// What threads of one world share: the table where the first member to make a
/// service leaves the other members' parts.
#[derive(Default)]
struct ThreadsShared {
    table: Mutex<HashMap<u64, Pending>>,
    /// Signalled when a part's builder finished (or gave up).
    built: std::sync::Condvar,
}

/// A service made by one member of a threads world, waiting for the others.
struct Pending {
    /// The service's fingerprint.
    tag: u64,
    what: String,
    /// Each rank's part until it takes it (None while the first member builds them,
    /// outside the table's lock).
    parts: Option<Vec<Option<Box<dyn Any + Send>>>>,
    left: usize,
}

/// Removes a slot whose builder did not finish (an error or a panic in `make`), so
/// that the other members build it themselves instead of waiting for it forever.
struct Building<'a> {
    shared: &'a ThreadsShared,
    seq: u64,
    done: bool,
}

impl Drop for Building<'_> {
    fn drop(&mut self) {
        if !self.done {
            let mut table = self.shared.table.lock().unwrap_or_else(|e| e.into_inner());
            if table.get(&self.seq).is_some_and(|p| p.parts.is_none()) {
                table.remove(&self.seq);
            }
            self.shared.built.notify_all();
        }
    }
}

enum Backend {
    Threads(Arc<ThreadsShared>),
    Shm(Arc<ShmMember>),
}

/// What this member made so far (the order every member follows).
#[derive(Debug, Default)]
struct Made {
    /// Services made.
    count: u64,
    /// Next free arena offset (process jobs).
    cursor: u64,
}

/// One member of a job: its rank, the job's members (size, node and CPU of each), the
/// model source, and the means to reach every other member. See the [module
/// documentation](self).
pub struct World {
    rank: Rank,
    desc: Arc<Description>,
    backend: Backend,
    made: Mutex<Made>,
    wait: WaitPolicy,
    /// A world of MPI ranks: its communicators and nodes (`Backend::Shm` is then the
    /// node's segment).
    #[cfg(feature = "mpi")]
    mpi: Option<Arc<mpi::MpiWorld>>,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("rank", &self.rank)
            .field("size", &self.desc.size)
            .field("kind", &self.kind())
            .finish()
    }
}

/// What is wrong with a setting's value, after its name: `is "x", not a number ...`.
fn garbage(e: &smelt_settings::SettingError) -> String {
    format!("is {:?}, not {}", e.value, e.expected)
}

/// FNV-1a of `bytes`: the fingerprint of a made service.
fn fingerprint(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h.max(1)
}

/// Which links a [`World::mesh`] has and how they wait.
#[derive(Debug, Clone, PartialEq)]
pub struct MeshSpec {
    /// `None`: a link between every two members; else these pairs.
    pairs: Option<Vec<(Rank, Rank)>>,
    capacity: usize,
    wait: Option<WaitPolicy>,
}

impl MeshSpec {
    /// A link between every two members.
    pub fn all_to_all() -> MeshSpec {
        MeshSpec {
            pairs: None,
            capacity: DEFAULT_CAPACITY,
            wait: None,
        }
    }

    /// A link between each of `pairs` (asking twice gives one link).
    pub fn pairs(pairs: impl IntoIterator<Item = (Rank, Rank)>) -> MeshSpec {
        MeshSpec {
            pairs: Some(pairs.into_iter().collect()),
            capacity: DEFAULT_CAPACITY,
            wait: None,
        }
    }

    /// Slots per ring, each way (default [`DEFAULT_CAPACITY`]).
    pub fn capacity(mut self, slots: usize) -> MeshSpec {
        self.capacity = slots;
        self
    }

    /// How the links wait (default: the world's [`World::wait_policy`]).
    pub fn wait_policy(mut self, p: WaitPolicy) -> MeshSpec {
        self.wait = Some(p);
        self
    }

    /// The slots and wait policy of a service's link configuration (its `timeout`
    /// bounds the service's own waits, not the mesh's making).
    pub fn link(mut self, l: &crate::LinkConfig) -> MeshSpec {
        self.capacity = l.capacity;
        if let Some(w) = l.wait {
            self.wait = Some(w);
        }
        self
    }
}

/// Shared 64-bit words every member of a world reads and writes with atomic
/// operations ([`World::region`]): the same memory in every member, zeroed when made.
#[derive(Debug, Clone)]
pub struct Region {
    mem: RegionMem,
}

#[derive(Debug, Clone)]
enum RegionMem {
    Heap(Arc<[AtomicU64]>),
    Shm(Arc<SharedWords>),
}

impl Region {
    /// The region's words.
    #[inline]
    pub fn words(&self) -> &[AtomicU64] {
        match &self.mem {
            RegionMem::Heap(w) => w,
            RegionMem::Shm(w) => w,
        }
    }

    /// Number of words.
    pub fn len(&self) -> usize {
        self.words().len()
    }

    /// True for a region of no words.
    pub fn is_empty(&self) -> bool {
        self.words().is_empty()
    }
}

impl World {
    fn new(rank: Rank, desc: Arc<Description>, backend: Backend) -> World {
        // Every member on a CPU of its own (a launcher pins each to its CPU, so this
        // process may then use only one), or this process may use as many CPUs as
        // there are members: the links spin before they yield. Never with more members
        // than the machine has CPUs: distinct CPU ids are then made up (a launcher
        // places such members round-robin), and a spinning member would hold the CPU
        // its peer needs.
        let own_cpus = desc.cpus.iter().all(Option::is_some)
            && desc
                .cpus
                .iter()
                .collect::<std::collections::BTreeSet<_>>()
                .len()
                == desc.size;
        let wait = if desc.size > smelt_transport::online_cpus() {
            WaitPolicy::OVERSUBSCRIBED
        } else if own_cpus || allowed_cpus().map(|c| c.len()).unwrap_or(1) >= desc.size {
            WaitPolicy::DEDICATED
        } else {
            WaitPolicy::OVERSUBSCRIBED
        };
        World {
            rank,
            desc,
            backend,
            made: Mutex::new(Made::default()),
            wait,
            #[cfg(feature = "mpi")]
            mpi: None,
        }
    }

    /// Member `peer`'s index in this member's segment: its rank, except in a world of
    /// MPI ranks (its place on its node; a member of another node is an error).
    fn member_index(&self, peer: Rank) -> Result<u32, WorldError> {
        #[cfg(feature = "mpi")]
        if let Some(m) = &self.mpi {
            return m.member_index(self.rank, peer);
        }
        Ok(peer.index() as u32)
    }

    /// A world of `n` threads of this process, unpinned: one `World` per rank (see
    /// [`WorldBuilder`] for CPUs, a model source and attributes).
    pub fn threads(n: usize) -> Result<Vec<World>, WorldError> {
        WorldBuilder::new(n).threads()
    }

    /// Runs `f` on every world of `worlds` (one per rank, from [`World::threads`]),
    /// each on a scoped thread of its own pinned to the member's CPU where it has
    /// one, and returns the results by rank; a member that panics is reported as
    /// [`WorldError::MemberPanicked`] (the first by rank).
    pub fn run<R, F>(worlds: Vec<World>, f: F) -> Result<Vec<R>, WorldError>
    where
        R: Send,
        F: Fn(World) -> R + Sync,
    {
        let f = &f;
        let results: Vec<Result<R, WorldError>> = std::thread::scope(|s| {
            let handles: Vec<_> = worlds
                .into_iter()
                .map(|w| {
                    let rank = w.rank;
                    let h = std::thread::Builder::new()
                        .name(format!("smelt-rank-{rank}"))
                        .spawn_scoped(s, move || {
                            let _ = w.pin_current_thread();
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(w))).map_err(
                                |p| WorldError::MemberPanicked {
                                    rank,
                                    message: crate::panic_message(p.as_ref()),
                                },
                            )
                        });
                    (rank, h)
                })
                .collect();
            handles
                .into_iter()
                .map(|(rank, h)| match h {
                    Ok(h) => h.join().unwrap_or_else(|p| {
                        Err(WorldError::MemberPanicked {
                            rank,
                            message: crate::panic_message(p.as_ref()),
                        })
                    }),
                    Err(e) => Err(WorldError::Invalid(format!(
                        "cannot start member {rank}'s thread: {e}"
                    ))),
                })
                .collect()
        });
        results.into_iter().collect()
    }

    /// Joins the process job described by the environment (`SMELT_JOB`,
    /// `SMELT_JOB_KEY`, `SMELT_RANK`, and `SMELT_SIZE` when set), as `smelt launch`
    /// or [`WorldJob::env`] set them. A missing variable or a garbage value is an
    /// error naming the variable.
    pub fn from_env() -> Result<World, WorldError> {
        let (path, key, rank) = read_join_env(WORLD_VARS, |k| {
            WorldError::Env {
            var: match k {
                ENV_JOB => ENV_JOB,
                ENV_KEY => ENV_KEY,
                _ => ENV_RANK,
            },
            why: format!(
                "is not set: start this program with `smelt launch -n N -- PROGRAM`, or set {ENV_JOB}, {ENV_KEY} and {ENV_RANK} as smelt_mesh::world::WorldJob::env does"
            ),
        }
        })?;
        let rank: usize = rank.trim().parse().map_err(|_| WorldError::Env {
            var: ENV_RANK,
            why: format!("is {rank:?}, not a rank (a whole number from 0)"),
        })?;
        let size = smelt_settings::count(ENV_SIZE).map_err(|e| WorldError::Env {
            var: ENV_SIZE,
            why: garbage(&e),
        })?;
        if path.as_os_str().is_empty() {
            return Err(WorldError::Env {
                var: ENV_JOB,
                why: "is empty: it must name the job's segment".into(),
            });
        }
        let world = World::join(&path, &key, Rank(rank)).map_err(|e| match e {
            WorldError::Shm(ShmError::NotOurs { why, .. }) if why.contains("key") => {
                WorldError::Env {
                    var: ENV_KEY,
                    why: format!("does not fit the segment: {why}"),
                }
            }
            WorldError::Shm(e @ ShmError::Io { .. }) => WorldError::Env {
                var: ENV_JOB,
                why: format!("names no segment this process can open ({e}): is the job over?"),
            },
            WorldError::Shm(ShmError::Invalid(why)) if why.contains("rank") => WorldError::Env {
                var: ENV_RANK,
                why: format!("is wrong: {why}"),
            },
            e => e,
        })?;
        if let Some(n) = size {
            if n as usize != world.size() {
                return Err(WorldError::Env {
                    var: ENV_SIZE,
                    why: format!("is {n}, but the job has {} members", world.size()),
                });
            }
        }
        Ok(world)
    }

    /// Joins the process job whose segment is at `path` (its key `key`) as member
    /// `rank`.
    pub fn join(path: &Path, key: &str, rank: Rank) -> Result<World, WorldError> {
        let rank32 = u32::try_from(rank.index())
            .map_err(|_| WorldError::Invalid(format!("rank {rank} is too large")))?;
        let shm = ShmMember::attach(path, key, rank32)?;
        if shm.arena_len() == 0 {
            return Err(WorldError::Invalid(format!(
                "{} is a job without an arena: not a world (made by another kind of job)",
                path.display()
            )));
        }
        let desc: Description = serde_json::from_slice(shm.blob()).map_err(|e| {
            WorldError::Invalid(format!("the world's description is unreadable: {e}"))
        })?;
        desc.check()?;
        if desc.size != shm.members() as usize {
            return Err(WorldError::Invalid(format!(
                "the world's description says {} members, its segment {}",
                desc.size,
                shm.members()
            )));
        }
        Ok(World::new(
            rank,
            Arc::new(desc),
            Backend::Shm(Arc::new(shm)),
        ))
    }

    /// This member's rank.
    pub fn rank(&self) -> Rank {
        self.rank
    }

    /// Number of members.
    pub fn size(&self) -> usize {
        self.desc.size
    }

    /// How the members were started.
    pub fn kind(&self) -> WorldKind {
        #[cfg(feature = "mpi")]
        if self.mpi.is_some() {
            return WorldKind::Mpi;
        }
        match self.backend {
            Backend::Threads(_) => WorldKind::Threads,
            Backend::Shm(_) => WorldKind::Processes,
        }
    }

    /// This member's node.
    pub fn node(&self) -> usize {
        self.desc.nodes[self.rank.index()]
    }

    /// Member `rank`'s node (None for a rank outside the world).
    pub fn node_of(&self, rank: Rank) -> Option<usize> {
        self.desc.nodes.get(rank.index()).copied()
    }

    /// Number of nodes (the largest node number + 1).
    pub fn nodes(&self) -> usize {
        self.desc.nodes.iter().max().map_or(0, |n| n + 1)
    }

    /// This member's CPU, if it was given one.
    pub fn cpu(&self) -> Option<CpuId> {
        self.cpu_of(self.rank)
    }

    /// Member `rank`'s CPU, if it was given one.
    pub fn cpu_of(&self, rank: Rank) -> Option<CpuId> {
        self.desc
            .cpus
            .get(rank.index())
            .copied()
            .flatten()
            .map(CpuId)
    }

    /// Every member's CPU, by rank.
    pub fn cpus(&self) -> Vec<Option<CpuId>> {
        self.desc.cpus.iter().map(|c| c.map(CpuId)).collect()
    }

    /// Where the launcher said the machine model is (None: the default model).
    pub fn model(&self) -> Option<&ModelRef> {
        self.desc.model.as_ref()
    }

    /// The launcher's entry `key` ([`WorldBuilder::attribute`]).
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.desc.attributes.get(key).map(String::as_str)
    }

    /// How this world's links wait by default: [`WaitPolicy::DEDICATED`] when every
    /// member has a CPU of its own (distinct CPUs given) or this process may use at
    /// least as many CPUs as the world has members, [`WaitPolicy::OVERSUBSCRIBED`]
    /// otherwise, and always with more members than the machine has CPUs online.
    pub fn wait_policy(&self) -> WaitPolicy {
        self.wait
    }

    /// Pins the calling thread to this member's CPU, if it has one (false: none
    /// given).
    pub fn pin_current_thread(&self) -> std::io::Result<bool> {
        match self.cpu() {
            Some(c) => pin_current_thread(c).map(|_| true),
            None => Ok(false),
        }
    }

    /// The segment this member attached (process jobs), for services that record a
    /// job-wide failure or raise the job's abort flag.
    pub fn shm_member(&self) -> Option<&Arc<ShmMember>> {
        match &self.backend {
            Backend::Shm(s) => Some(s),
            Backend::Threads(_) => None,
        }
    }

    /// Records the next made thing described by `what` (its arguments included):
    /// its fingerprint and, for process jobs, reserves `bytes` of the arena (plus a
    /// marking line) and checks the mark. Returns (fingerprint, offset after the
    /// mark, its place in this member's order).
    fn next(&self, what: &str, bytes: u64) -> Result<(u64, u64, u64), WorldError> {
        let mut made = self.made.lock().unwrap_or_else(|e| e.into_inner());
        let tag = fingerprint(format!("{} {what}", made.count).as_bytes());
        let start = made.cursor;
        let mut offset = 0;
        if let Backend::Shm(shm) = &self.backend {
            let total = (ARENA_ALIGN as u64)
                .checked_add(bytes.next_multiple_of(ARENA_ALIGN as u64))
                .filter(|end| start.checked_add(*end).is_some_and(|e| e <= shm.arena_len()))
                .ok_or_else(|| {
                    WorldError::Invalid(format!(
                        "{what} needs {bytes} bytes of the job's arena, which has {} of {} left (raise {} for the launcher)",
                        shm.arena_len().saturating_sub(start),
                        shm.arena_len(),
                        smelt_settings::WORLD_ARENA
                    ))
                })?;
            shm.arena_mark(start, tag).map_err(|e| match e {
                ShmError::Invalid(why) => {
                    WorldError::Mismatch(format!("{why} (this member made {what})"))
                }
                e => WorldError::Shm(e),
            })?;
            offset = start + ARENA_ALIGN as u64;
            made.cursor = start + total;
        }
        let seq = made.count;
        made.count += 1;
        Ok((tag, offset, seq))
    }

    /// A collective call for worlds of threads: the first member to call builds
    /// every member's part with `make` (one per rank, in rank order), and each member
    /// takes its own. `what` describes the thing and its arguments (the same on
    /// every member; it is part of the fingerprint). Process worlds have no common
    /// memory to hand parts out through: [`WorldError::Invalid`].
    pub fn hand_out<T, F>(&self, what: &str, make: F) -> Result<T, WorldError>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<Vec<T>, WorldError>,
    {
        let Backend::Threads(shared) = &self.backend else {
            return Err(WorldError::Invalid(format!(
                "{what}: only a world of threads hands parts out"
            )));
        };
        let (tag, _, seq) = self.next(what, 0)?;
        let n = self.size();
        let mismatch = |theirs: &str| {
            WorldError::Mismatch(format!(
                "member {} made {what} where another member made {theirs}: every member must make the same services in the same order",
                self.rank
            ))
        };
        let mut make = Some(make);
        let mut table = shared.table.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            match table.get(&seq) {
                Some(p) if p.tag != tag => return Err(mismatch(&p.what)),
                Some(p) if p.parts.is_some() => break,
                // Another member is building the parts.
                Some(_) => {
                    table = shared.built.wait(table).unwrap_or_else(|e| e.into_inner());
                }
                None => {
                    // Build outside the lock (`make` may take a while, or make things
                    // of its own); the others wait for this slot only.
                    table.insert(
                        seq,
                        Pending {
                            tag,
                            what: what.to_string(),
                            parts: None,
                            left: n,
                        },
                    );
                    drop(table);
                    let mut guard = Building {
                        shared,
                        seq,
                        done: false,
                    };
                    // At most once per member: the slot then holds its parts.
                    let make = make.take().expect("one build per member");
                    let parts = make()?;
                    if parts.len() != n {
                        return Err(WorldError::Invalid(format!(
                            "{what}: {} parts made for {n} members",
                            parts.len()
                        )));
                    }
                    table = shared.table.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(p) = table.get_mut(&seq) {
                        p.parts = Some(
                            parts
                                .into_iter()
                                .map(|p| Some(Box::new(p) as Box<dyn Any + Send>))
                                .collect(),
                        );
                    }
                    guard.done = true;
                    shared.built.notify_all();
                }
            }
        }
        let p = table.get_mut(&seq).expect("checked above");
        let part = p.parts.as_mut().expect("checked above")[self.rank.index()]
            .take()
            .ok_or_else(|| {
                WorldError::Mismatch(format!(
                    "member {} took its part of {what} twice",
                    self.rank
                ))
            })?;
        p.left -= 1;
        if p.left == 0 {
            table.remove(&seq);
        }
        drop(table);
        part.downcast::<T>().map(|b| *b).map_err(|_| {
            WorldError::Mismatch(format!(
                "member {}: {what} was made with another type by another member",
                self.rank
            ))
        })
    }

    /// A collective call: this member's end of a queuepair for each of `pairs` that
    /// it belongs to (`None` for the others), in the order given, each of `capacity`
    /// slots per ring and waiting as `wait` (default: [`wait_policy`](Self::wait_policy)).
    /// A pair may repeat: each occurrence is its own queuepair (collectives over
    /// several trees sharing an edge). Waits on the links end when `abort` is
    /// raised. Between processes, a peer's death is seen by every blocking wait.
    pub fn queuepairs(
        &self,
        pairs: &[(Rank, Rank)],
        capacity: usize,
        wait: Option<WaitPolicy>,
        abort: Option<Abort>,
    ) -> Result<Vec<Option<QueuePairEnd>>, WorldError> {
        let n = self.size();
        for &(a, b) in pairs {
            if a == b || a.index() >= n || b.index() >= n {
                return Err(WorldError::Invalid(format!(
                    "a link between members {a} and {b} in a world of {n}"
                )));
            }
            // Every member sees every pair: all refuse a link across nodes alike.
            #[cfg(feature = "mpi")]
            if let Some(m) = &self.mpi {
                m.check_pair(a, b)?;
            }
        }
        if capacity == 0 || capacity > smelt_transport::MAX_CAPACITY {
            return Err(WorldError::Invalid(format!(
                "capacity {capacity} (1 to {} slots)",
                smelt_transport::MAX_CAPACITY
            )));
        }
        let wait = wait.unwrap_or(self.wait);
        let mut desc = format!("queuepairs cap={capacity}");
        for (a, b) in pairs {
            desc.push_str(&format!(" {a}-{b}"));
        }
        match &self.backend {
            Backend::Threads(_) => self.hand_out(&desc, || {
                let mut parts: Vec<Vec<Option<QueuePairEnd>>> = (0..n)
                    .map(|_| (0..pairs.len()).map(|_| None).collect())
                    .collect();
                for (i, &(a, b)) in pairs.iter().enumerate() {
                    let (mut ea, mut eb) = try_queuepair(capacity, abort.clone())?;
                    ea.set_wait_policy(wait);
                    eb.set_wait_policy(wait);
                    parts[a.index()][i] = Some(ea);
                    parts[b.index()][i] = Some(eb);
                }
                Ok(parts)
            }),
            Backend::Shm(shm) => {
                let each = arena_link_bytes(capacity) as u64;
                let (_, base, _) = self.next(&desc, each * pairs.len() as u64)?;
                let me = self.rank;
                pairs
                    .iter()
                    .enumerate()
                    .map(|(i, &(a, b))| {
                        let peer = if a == me {
                            b
                        } else if b == me {
                            a
                        } else {
                            return Ok(None);
                        };
                        let mut ep = shm.arena_link(
                            base + i as u64 * each,
                            capacity,
                            self.member_index(peer)?,
                            abort.clone(),
                        )?;
                        ep.set_wait_policy(wait);
                        Ok(Some(ep))
                    })
                    .collect()
            }
        }
    }

    /// A collective call: this member's end of a staging area
    /// ([`smelt_transport::shm::Stage`]: `slots` buffers of `bytes` bytes each way,
    /// single-copy transfers of long messages) for each of `pairs` it belongs to
    /// (`None` for the others), in the order given, made as
    /// [`queuepairs`](Self::queuepairs) makes links. Between processes only: members
    /// that are threads lend their buffers instead, and get `None` for every pair.
    /// `slots` and `bytes` out of range (1 to
    /// [`MAX_STAGE_SLOTS`](smelt_transport::shm::MAX_STAGE_SLOTS) buffers of 1 to
    /// [`MAX_STAGE_BYTES`](smelt_transport::shm::MAX_STAGE_BYTES) bytes) are
    /// [`WorldError::Invalid`] on every member.
    pub fn stages(
        &self,
        pairs: &[(Rank, Rank)],
        slots: usize,
        bytes: usize,
        wait: Option<WaitPolicy>,
        abort: Option<Abort>,
    ) -> Result<Vec<Option<smelt_transport::shm::Stage>>, WorldError> {
        use smelt_transport::shm::{MAX_STAGE_BYTES, MAX_STAGE_SLOTS};
        let n = self.size();
        // Before `arena_stage_bytes`, whose arithmetic would overflow, and before
        // anything is carved: every member refuses alike.
        if !(1..=MAX_STAGE_SLOTS).contains(&slots) || !(1..=MAX_STAGE_BYTES).contains(&bytes) {
            return Err(WorldError::Invalid(format!(
                "stages of {slots} buffers of {bytes} bytes (1 to {MAX_STAGE_SLOTS} buffers of 1 to {MAX_STAGE_BYTES} bytes)"
            )));
        }
        for &(a, b) in pairs {
            if a == b || a.index() >= n || b.index() >= n {
                return Err(WorldError::Invalid(format!(
                    "a stage between members {a} and {b} in a world of {n}"
                )));
            }
            #[cfg(feature = "mpi")]
            if let Some(m) = &self.mpi {
                m.check_pair(a, b)?;
            }
        }
        let Backend::Shm(shm) = &self.backend else {
            return Ok(pairs.iter().map(|_| None).collect());
        };
        let wait = wait.unwrap_or(self.wait);
        let mut desc = format!("stages slots={slots} bytes={bytes}");
        for (a, b) in pairs {
            desc.push_str(&format!(" {a}-{b}"));
        }
        let each = smelt_transport::shm::arena_stage_bytes(slots, bytes) as u64;
        let (_, base, _) = self.next(&desc, each * pairs.len() as u64)?;
        let me = self.rank;
        pairs
            .iter()
            .enumerate()
            .map(|(i, &(a, b))| {
                let peer = if a == me {
                    b
                } else if b == me {
                    a
                } else {
                    return Ok(None);
                };
                Ok(Some(shm.arena_stage(
                    base + i as u64 * each,
                    slots,
                    bytes,
                    self.member_index(peer)?,
                    abort.clone(),
                    wait,
                )?))
            })
            .collect()
    }

    /// A collective call: this member's [`Mesh`] with the links of `spec`. Messages,
    /// ordering, flow control and errors are those of every mesh; between processes
    /// a peer that dies is reported as [`MeshError::PeerGone`] within about a
    /// millisecond, and for threads members ring each other's doorbell (a parked
    /// receiver wakes at once), as [`MeshBuilder`]'s meshes.
    pub fn mesh(&self, spec: &MeshSpec) -> Result<Mesh<WorldLink>, WorldError> {
        let n = self.size();
        let mut pairs: Vec<(Rank, Rank)> = match &spec.pairs {
            None => (0..n)
                .flat_map(|a| (a + 1..n).map(move |b| (Rank(a), Rank(b))))
                .collect(),
            Some(p) => p.iter().map(|&(a, b)| (a.min(b), a.max(b))).collect(),
        };
        pairs.sort_unstable();
        pairs.dedup();
        #[cfg(feature = "mpi")]
        if let (Some(m), None) = (&self.mpi, &spec.pairs) {
            // An MPI world's members share memory with their node's members only.
            pairs.retain(|&(a, b)| m.same_node(a, b));
        }
        let wait = spec.wait.unwrap_or(self.wait);
        match &self.backend {
            Backend::Threads(_) => {
                let desc = format!("mesh cap={} {pairs:?}", spec.capacity);
                for &(a, b) in &pairs {
                    if a == b || b.index() >= n {
                        return Err(WorldError::Invalid(format!(
                            "a link between members {a} and {b} in a world of {n}"
                        )));
                    }
                }
                self.hand_out(&desc, || {
                    Ok(MeshBuilder::new(n)
                        .links(pairs.iter().copied())
                        .capacity(spec.capacity)
                        .wait_policy(wait)
                        .build_with(WorldLink::local)?)
                })
            }
            Backend::Shm(shm) => {
                let abort = Abort::new();
                let eps =
                    self.queuepairs(&pairs, spec.capacity, Some(wait), Some(abort.clone()))?;
                let mut links = Vec::new();
                for (&(a, b), ep) in pairs.iter().zip(eps) {
                    if let Some(ep) = ep {
                        let peer = if a == self.rank { b } else { a };
                        let index = Rank(self.member_index(peer)? as usize);
                        links.push((peer, WorldLink::watched(ep, shm.clone(), index)));
                    }
                }
                Ok(Mesh::with_links(self.rank, n, links, Some(abort), wait)?)
            }
        }
    }

    /// A collective call: a region of at least `bytes` bytes (rounded up to whole
    /// 64-bit words), zeroed, the same memory in every member.
    pub fn region(&self, bytes: usize) -> Result<Region, WorldError> {
        let words = bytes.div_ceil(8);
        let desc = format!("region words={words}");
        match &self.backend {
            Backend::Threads(_) => {
                let n = self.size();
                self.hand_out(&desc, || {
                    let mem: Arc<[AtomicU64]> = (0..words).map(|_| AtomicU64::new(0)).collect();
                    Ok((0..n)
                        .map(|_| Region {
                            mem: RegionMem::Heap(mem.clone()),
                        })
                        .collect())
                })
            }
            Backend::Shm(shm) => {
                let (_, offset, _) = self.next(&desc, words as u64 * 8)?;
                let mem = if words == 0 {
                    RegionMem::Heap(Arc::from(Vec::new()))
                } else {
                    RegionMem::Shm(Arc::new(shm.arena_words(offset, words)?))
                };
                Ok(Region { mem })
            }
        }
    }
}

/// One member's end of a link of a world's [`Mesh`]: a queuepair in process memory
/// (threads) or in the job's segment (processes), which then also reports its peer's
/// death ([`TransportError::PeerDied`]) on sends and receives that do not wait, at
/// most every [`LIVENESS_EVERY`]. Blocking waits check it at every park.
#[derive(Debug)]
pub struct WorldLink {
    ep: QueuePairEnd,
    watch: Option<Box<Watch>>,
}

/// The liveness check of a world's link to another process.
#[derive(Debug)]
pub(crate) struct Watch {
    job: Arc<ShmMember>,
    peer: u32,
    /// Idle polls since the last check.
    polls: u32,
    next_check: Instant,
    /// The peer's process is known to be dead.
    pub(crate) dead: bool,
}

impl Watch {
    /// A check of member `peer`'s process of `job`, not made yet.
    pub(crate) fn new(job: Arc<ShmMember>, peer: u32) -> Watch {
        Watch {
            job,
            peer,
            polls: 0,
            next_check: Instant::now(),
            dead: false,
        }
    }

    /// True once the peer's process is known to be dead (checked at most every
    /// [`LIVENESS_EVERY`], reading the clock every 8th idle poll).
    #[cold]
    pub(crate) fn peer_dead(&mut self) -> bool {
        if !self.dead {
            self.polls = self.polls.wrapping_add(1);
            if self.polls & 7 != 0 {
                return false;
            }
            let now = Instant::now();
            if now < self.next_check {
                return false;
            }
            self.next_check = now + LIVENESS_EVERY;
            self.dead = !self.job.is_alive(self.peer);
        }
        self.dead
    }

    /// The error of a link whose peer died.
    pub(crate) fn died(&self) -> TransportError {
        TransportError::PeerDied { peer: self.peer }
    }

    /// `ep`'s `try_send`, where a full link to a dead peer is its death.
    #[inline]
    pub(crate) fn try_send(
        &mut self,
        ep: &mut QueuePairEnd,
        tag: u64,
        msg: &[u8],
    ) -> Result<(), TransportError> {
        // Each arm builds its result (as the transport's blocking sends do: the
        // result passed on whole was copied with loads across its stores).
        match Link::try_send(ep, tag, msg) {
            Ok(()) => Ok(()),
            Err(TransportError::Full) if self.peer_dead() => Err(self.died()),
            Err(e) => Err(e),
        }
    }

    /// `ep`'s `try_recv`, where an empty link from a dead peer is its death once what
    /// the peer published before is taken.
    #[inline]
    pub(crate) fn try_recv(
        &mut self,
        ep: &mut QueuePairEnd,
        buf: &mut [u8],
    ) -> Result<(u64, usize), TransportError> {
        // As try_send.
        match Link::try_recv(ep, buf) {
            Ok((tag, len)) => Ok((tag, len)),
            Err(TransportError::Empty) if self.peer_dead() => {
                // Dead: nothing more will be published; take what it published before.
                match Link::try_recv(ep, buf) {
                    Err(TransportError::Empty) => Err(self.died()),
                    r => r,
                }
            }
            Err(e) => Err(e),
        }
    }
}

impl WorldLink {
    /// A link between threads of this process.
    pub fn local(ep: QueuePairEnd) -> WorldLink {
        WorldLink { ep, watch: None }
    }

    /// A link to member `peer`'s process through `job`'s segment.
    pub fn watched(ep: QueuePairEnd, job: Arc<ShmMember>, peer: Rank) -> WorldLink {
        WorldLink {
            ep,
            watch: Some(Box::new(Watch::new(job, peer.index() as u32))),
        }
    }

    /// The queuepair end inside.
    pub fn endpoint(&mut self) -> &mut QueuePairEnd {
        &mut self.ep
    }
}

impl Link for WorldLink {
    #[inline]
    fn max_message_len(&self) -> usize {
        Link::max_message_len(&self.ep)
    }

    #[inline(always)]
    fn try_send(&mut self, tag: u64, msg: &[u8]) -> Result<(), TransportError> {
        match &mut self.watch {
            // Between threads: no liveness to check.
            None => Link::try_send(&mut self.ep, tag, msg),
            Some(w) => w.try_send(&mut self.ep, tag, msg),
        }
    }

    #[inline]
    fn send(
        &mut self,
        tag: u64,
        msg: &[u8],
        timeout: Option<Duration>,
    ) -> Result<(), TransportError> {
        Link::send(&mut self.ep, tag, msg, timeout)
    }

    #[inline]
    fn send_word(
        &mut self,
        tag: u64,
        w: u64,
        timeout: Option<Duration>,
    ) -> Result<(), TransportError> {
        Link::send_word(&mut self.ep, tag, w, timeout)
    }

    #[inline]
    fn send_empty(&mut self, tag: u64, timeout: Option<Duration>) -> Result<(), TransportError> {
        Link::send_empty(&mut self.ep, tag, timeout)
    }

    #[inline(always)]
    fn try_recv(&mut self, buf: &mut [u8]) -> Result<(u64, usize), TransportError> {
        match &mut self.watch {
            // Between threads: no liveness to check.
            None => Link::try_recv(&mut self.ep, buf),
            Some(w) => w.try_recv(&mut self.ep, buf),
        }
    }

    #[inline]
    fn recv(
        &mut self,
        buf: &mut [u8],
        timeout: Option<Duration>,
    ) -> Result<(u64, usize), TransportError> {
        Link::recv(&mut self.ep, buf, timeout)
    }

    #[inline]
    fn recv_word(&mut self, timeout: Option<Duration>) -> Result<(u64, u64), TransportError> {
        Link::recv_word(&mut self.ep, timeout)
    }

    #[inline]
    fn pair_barrier_checked(
        &mut self,
        tag: u64,
        timeout: Option<Duration>,
        failed: impl FnOnce() -> bool,
    ) -> Result<Option<u64>, TransportError> {
        Link::pair_barrier_checked(&mut self.ep, tag, timeout, failed)
    }

    #[inline]
    fn is_ready(&self) -> bool {
        Link::is_ready(&self.ep)
    }

    #[inline]
    fn is_disconnected(&self) -> bool {
        self.watch.as_ref().is_some_and(|w| w.dead) || Link::is_disconnected(&self.ep)
    }

    fn can_lend(&self) -> bool {
        self.ep.can_lend()
    }

    fn lend_all(
        links: &mut [&mut Self],
        tag: u64,
        data: &[u8],
        timeout: Option<Duration>,
    ) -> Result<(), (usize, TransportError)> {
        let mut eps: Vec<&mut QueuePairEnd> = links.iter_mut().map(|l| &mut l.ep).collect();
        QueuePairEnd::lend_all(&mut eps, tag, data, timeout)
    }

    fn borrow<R>(
        &mut self,
        timeout: Option<Duration>,
        f: impl FnOnce(u64, &[u8]) -> R,
    ) -> Result<R, TransportError> {
        self.ep.borrow(timeout, f)
    }

    fn exchange_loans<R>(
        &mut self,
        tag: u64,
        data: &[u8],
        timeout: Option<Duration>,
        f: impl FnOnce(u64, &[u8]) -> R,
    ) -> Result<R, TransportError> {
        self.ep.exchange_loans(tag, data, timeout, f)
    }

    fn exchange_loans_mut<R>(
        &mut self,
        tag: u64,
        data: &mut [u8],
        timeout: Option<Duration>,
        f: impl FnOnce(u64, &mut [u8]) -> R,
    ) -> Result<R, TransportError> {
        self.ep.exchange_loans_mut(tag, data, timeout, f)
    }
}
