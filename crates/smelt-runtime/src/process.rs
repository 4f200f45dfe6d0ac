//! Members as processes: a job of processes on one host, whose queuepairs live in
//! shared memory ([`smelt_transport::shm`]).
//!
//! Building a job is separate from starting its members. The creator (`smelt launch`,
//! `smelt bench processes`, or your own launcher) calls [`GroupJob::create`] with the
//! trees and hands each member process the variables of [`GroupJob::env`]; each member
//! calls [`join_from_env`] (or [`join`]) and gets a [`Member`] with its rank, CPU and
//! contexts, running the same collectives as a thread member.
//!
//! ```no_run
//! // In each member process (started by `smelt launch -n 4 -- ./prog`):
//! let mut m = smelt_runtime::process::join_from_env()?;
//! m.barrier()?;
//! let sum = m.allreduce(m.rank().index() as u64, |a, b| a + b)?;
//! # Ok::<(), smelt_runtime::GroupError>(())
//! ```
//!
//! A member process that dies makes every other member's collectives fail with
//! [`GroupError::PeerFailed`] within milliseconds (its liveness lock is gone), and a
//! failure recorded by any member (a mismatch, a timeout, [`Member::fail`]) is every
//! member's error.

use crate::group::check_trees;
use crate::world::GROUP_ATTRIBUTE;
use crate::{GroupConfig, GroupError, Member};
use serde::{Deserialize, Serialize};
use smelt_ids::{CpuId, Pos, Rank};
use smelt_mesh::world::{World, WorldBuilder, WorldError, WorldJob};
use smelt_plan::AlgorithmTable;
use smelt_plan::Tree;
use smelt_transport::WaitPolicy;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Environment variable: the job segment's path.
pub const ENV_JOB: &str = smelt_settings::JOB;
/// Environment variable: the job's key (32 hex digits).
pub const ENV_KEY: &str = smelt_settings::JOB_KEY;
/// Environment variable: this member's rank.
pub const ENV_RANK: &str = smelt_settings::RANK;
/// Environment variable: the number of members.
pub const ENV_SIZE: &str = smelt_settings::SIZE;
/// Environment variable: this member's OS CPU id (informational; the launcher pins).
pub const ENV_CPU: &str = smelt_settings::CPU;

/// What members read back from the segment.
#[derive(Serialize, Deserialize)]
struct Blob {
    trees: Vec<BlobTree>,
    capacity: usize,
    /// [`GroupConfig::segment`] (absent in jobs of older versions: the default).
    #[serde(default)]
    segment: Option<usize>,
    /// [`GroupConfig::max_message`] (absent in jobs of older versions: the default).
    #[serde(default = "default_max_message")]
    max_message: usize,
    /// [`GroupConfig::sync`] is strict.
    #[serde(default)]
    strict: bool,
    timeout_ns: u64,
    wait: Option<[u64; 4]>,
    /// [`GroupConfig::algorithms`] ([`AlgorithmTable::to_json`]); absent: trees only.
    #[serde(default)]
    algorithms: Option<String>,
}

fn default_max_message() -> usize {
    crate::group::MAX_MESSAGE_BYTES
}

/// A tree as the job description holds it (the ids serialize as bare numbers).
#[derive(Serialize, Deserialize)]
struct BlobTree {
    members: Vec<CpuId>,
    root: Pos,
    children: Vec<Vec<Pos>>,
}

/// A job of member processes, as its creator holds it: a world ([`WorldJob`]) whose
/// members are told the group to join (the world attribute [`GROUP_ATTRIBUTE`]).
/// Dropping it removes the segment's name (members that attached keep running).
#[derive(Debug)]
pub struct GroupJob {
    world: WorldJob,
    cpus: Vec<CpuId>,
}

/// The group description of `trees` and `cfg` that members read back.
fn group_blob(trees: &[Tree], cfg: &GroupConfig) -> String {
    let blob = Blob {
        trees: trees
            .iter()
            .map(|t| BlobTree {
                members: t.members.clone(),
                root: t.root,
                children: t.children.clone(),
            })
            .collect(),
        capacity: cfg.link.capacity,
        segment: cfg.segment,
        max_message: cfg.max_message,
        strict: cfg.sync == crate::SyncMode::Strict,
        timeout_ns: cfg.link.timeout.as_nanos().min(u64::MAX as u128) as u64,
        wait: cfg.link.wait.map(|w| {
            [
                w.spin_polls as u64,
                w.yield_polls as u64,
                w.park_initial.as_nanos() as u64,
                w.park_max.as_nanos() as u64,
            ]
        }),
        algorithms: cfg.algorithms.as_ref().map(|t| t.to_json()),
    };
    serde_json::to_string(&blob).expect("plain data serializes")
}

/// The trees and configuration of a group description ([`GROUP_ATTRIBUTE`]).
pub(crate) fn parse_group(text: &str) -> Result<(Vec<Tree>, GroupConfig), GroupError> {
    let blob: Blob = serde_json::from_str(text)
        .map_err(|e| GroupError::Job(format!("the job description is unreadable: {e}")))?;
    let trees: Vec<Tree> = blob
        .trees
        .into_iter()
        .map(|t| Tree::new(t.members, t.root, t.children))
        .collect::<Result<_, _>>()
        .map_err(|e| GroupError::Job(format!("the job's tree is invalid: {e}")))?;
    let table = match &blob.algorithms {
        Some(j) => Some(Arc::new(AlgorithmTable::from_json(j).map_err(|e| {
            GroupError::Job(format!("the job's algorithm table is unreadable: {e}"))
        })?)),
        None => None,
    };
    let cfg = GroupConfig {
        link: smelt_mesh::LinkConfig {
            capacity: blob.capacity,
            timeout: Duration::from_nanos(blob.timeout_ns),
            wait: blob.wait.map(|[s, y, pi, pm]| WaitPolicy {
                spin_polls: s as u32,
                yield_polls: y as u32,
                park_initial: Duration::from_nanos(pi),
                park_max: Duration::from_nanos(pm),
            }),
        },
        segment: blob.segment,
        max_message: blob.max_message,
        sync: if blob.strict {
            crate::SyncMode::Strict
        } else {
            crate::SyncMode::Loose
        },
        algorithms: table,
        ..GroupConfig::default()
    };
    Ok((trees, cfg))
}

impl GroupJob {
    /// Creates the job's shared memory for a group of `trees` (as
    /// [`Group::with_config`](crate::Group::with_config): every tree over the same
    /// CPUs; ranks follow the first tree). `cfg.link.capacity`, `cfg.segment`,
    /// `cfg.max_message`, `cfg.sync`, `cfg.link.timeout`, `cfg.link.wait` and `cfg.algorithms`
    /// (with the links its non-tree algorithms need) apply to every member; pinning
    /// is the launcher's business. The job is a world: a member may also call
    /// [`World::from_env`] and make other services besides the group.
    pub fn create(trees: &[Tree], cfg: &GroupConfig) -> Result<GroupJob, GroupError> {
        Self::create_in(
            WorldBuilder::new(trees.first().map_or(0, Tree::len)),
            trees,
            cfg,
            false,
        )
    }

    /// As [`create`](Self::create), for a launcher: the segment's name cannot outlive
    /// this process, even one killed by SIGKILL before every member joined
    /// ([`smelt_transport::shm::ShmJob::create_guarded`]: a small watcher process
    /// removes it). Costs a `fork`. `smelt launch` and `smelt bench processes` use
    /// it with [`crate::launch::Members`].
    pub fn create_guarded(trees: &[Tree], cfg: &GroupConfig) -> Result<GroupJob, GroupError> {
        Self::create_in(
            WorldBuilder::new(trees.first().map_or(0, Tree::len)),
            trees,
            cfg,
            true,
        )
    }

    /// As [`create`](Self::create) (`guarded`: as
    /// [`create_guarded`](Self::create_guarded)), in the world `world` describes (its
    /// model source, nodes and attributes; its CPUs, unless it gives some, are the
    /// first tree's).
    pub fn create_in(
        world: WorldBuilder,
        trees: &[Tree],
        cfg: &GroupConfig,
        guarded: bool,
    ) -> Result<GroupJob, GroupError> {
        let cpus = check_trees(trees)?;
        if cfg.link.capacity == 0 || cfg.link.capacity > smelt_transport::MAX_CAPACITY {
            return Err(GroupError::Invalid(format!(
                "capacity {} (1 to {} slots)",
                cfg.link.capacity,
                smelt_transport::MAX_CAPACITY
            )));
        }
        let world = world
            .default_cpus(&cpus)
            .attribute(GROUP_ATTRIBUTE, &group_blob(trees, cfg))
            .create_job(guarded)
            .map_err(job_error)?;
        Ok(GroupJob { world, cpus })
    }

    /// Number of members.
    pub fn size(&self) -> usize {
        self.cpus.len()
    }

    /// OS CPU id of each rank.
    pub fn cpus(&self) -> &[CpuId] {
        &self.cpus
    }

    /// The job's world, as its creator holds it.
    pub fn world(&self) -> &WorldJob {
        &self.world
    }

    /// The segment's path.
    pub fn path(&self) -> &Path {
        self.world.path()
    }

    /// The job's key.
    pub fn key(&self) -> String {
        self.world.key()
    }

    /// Members that have joined so far.
    pub fn joined(&self) -> usize {
        self.world.joined()
    }

    /// True once member `rank` has joined (it may have left or died since).
    pub fn has_joined(&self, rank: Rank) -> bool {
        self.world.has_joined(rank)
    }

    /// True once member `rank`'s process died after joining.
    pub fn is_dead(&self, rank: Rank) -> bool {
        self.world.is_dead(rank)
    }

    /// The environment member `rank` needs to join ([`join_from_env`], or
    /// [`World::from_env`]).
    pub fn env(&self, rank: Rank) -> Vec<(String, String)> {
        self.world.env(rank)
    }

    /// Fails the job on member `rank`'s behalf (first failure wins): every member's
    /// collectives fail at once with [`GroupError::PeerFailed`] naming it.
    pub fn fail(&self, rank: Rank, what: &str) {
        self.world.fail(rank, what);
    }

    /// The job's first failure: rank and what happened.
    pub fn failure(&self) -> Option<(Rank, String)> {
        self.world.failure()
    }

    /// Removes the segment's name now (it is removed anyway once every member joined,
    /// and when the `GroupJob` is dropped).
    pub fn unlink(&self) {
        self.world.unlink();
    }
}

/// A world error as the group's job error (the message names the variable or file).
fn job_error(e: WorldError) -> GroupError {
    GroupError::Job(e.to_string())
}

/// Joins the job described by the environment ([`ENV_JOB`], [`ENV_KEY`],
/// [`ENV_RANK`]), as set by `smelt launch` or [`GroupJob::env`]: [`World::from_env`], then
/// [`Member::from_launched_world`]. (To make other services in the same job, call
/// those two yourself and keep the world.)
pub fn join_from_env() -> Result<Member, GroupError> {
    let world = World::from_env().map_err(job_error)?;
    Member::from_launched_world(&world)
}

/// Joins the job whose segment is at `path` as member `rank`.
pub fn join(path: &Path, key: &str, rank: Rank) -> Result<Member, GroupError> {
    let world = World::join(path, key, rank).map_err(job_error)?;
    Member::from_launched_world(&world)
}
