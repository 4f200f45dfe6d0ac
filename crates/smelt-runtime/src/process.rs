//! Members as processes: a job of processes on one host, whose queuepairs live in
//! shared memory ([`smelt_transport::shm`]).
//!
//! Building a job is separate from starting its members. The creator (`smelt launch`,
//! `smelt bench --processes`, or your own launcher) calls [`Job::create`] with the
//! trees and hands each member process the variables of [`Job::env`]; each member
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

use crate::group::{check_trees, ranks_of, tree_edges, GroupShared};
use crate::{GroupConfig, GroupError, Member};
use serde::{Deserialize, Serialize};
use smelt_ids::{CpuId, Pos, Rank};
use smelt_mesh::job_env::{join_env, read_join_env, JoinVars};
use smelt_mesh::shm_job_accessors;
use smelt_transport::shm::{RingSpec, ShmJob, ShmMember};
use smelt_transport::{allowed_cpus, Abort, Endpoint, WaitPolicy};
use smelt_tree::tuning::AlgorithmTable;
use smelt_tree::Tree;
use std::collections::HashMap;
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

const GROUP_VARS: JoinVars = [ENV_JOB, ENV_KEY, ENV_RANK];

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

/// The rings of a job: for each tree, for each edge (in [`tree_edges`] order), the
/// ring down (parent to child) then the ring up, between the edge's ranks; then, for
/// each tree, a ring each way for each pair of ranks in `mesh` (the links beyond the
/// trees that the non-tree algorithms need).
fn rings(trees: &[Tree], capacity: u32, mesh: &[(usize, usize)]) -> Vec<RingSpec> {
    let mut out = Vec::new();
    for t in trees {
        let rank_of = ranks_of(&trees[0], t);
        let rank = |p: Pos| rank_of[p].index() as u32;
        for (p, c) in tree_edges(t) {
            out.extend(RingSpec::both_ways(rank(p), rank(c), capacity));
        }
    }
    for _ in trees {
        for &(a, b) in mesh {
            out.extend(RingSpec::both_ways(a as u32, b as u32, capacity));
        }
    }
    out
}

/// The pairs of ranks a group of `n` needs links between for `table`'s non-tree
/// algorithms (none without a table).
fn mesh_pairs(table: Option<&AlgorithmTable>, n: usize) -> Vec<(usize, usize)> {
    match table {
        Some(t) if n > 1 => crate::nontree::pairs_for(t, n).into_iter().collect(),
        _ => Vec::new(),
    }
}

/// A job of member processes, as its creator holds it. Dropping it removes the
/// segment's name (members that attached keep running).
#[derive(Debug)]
pub struct Job {
    shm: ShmJob,
    cpus: Vec<CpuId>,
}

impl Job {
    /// Creates the job's shared memory for a group of `trees` (as
    /// [`Group::with_config`](crate::Group::with_config): every tree over the same
    /// CPUs; ranks follow the first tree). `cfg.capacity`, `cfg.segment`,
    /// `cfg.max_message`, `cfg.sync`, `cfg.timeout`, `cfg.wait` and `cfg.algorithms`
    /// (with the rings its non-tree algorithms need) apply to every member; pinning is
    /// the launcher's business.
    pub fn create(trees: &[Tree], cfg: &GroupConfig) -> Result<Job, GroupError> {
        Self::create_inner(trees, cfg, false)
    }

    /// As [`create`](Self::create), for a launcher: the segment's name cannot outlive
    /// this process, even one killed by SIGKILL before every member joined
    /// ([`ShmJob::create_guarded`]: a small watcher process removes it). Costs a
    /// `fork`. `smelt launch` and `smelt bench --processes` use it with
    /// [`crate::launch::Members`].
    pub fn create_guarded(trees: &[Tree], cfg: &GroupConfig) -> Result<Job, GroupError> {
        Self::create_inner(trees, cfg, true)
    }

    fn create_inner(trees: &[Tree], cfg: &GroupConfig, guarded: bool) -> Result<Job, GroupError> {
        let cpus = check_trees(trees)?;
        if cfg.capacity == 0 || cfg.capacity > smelt_transport::MAX_CAPACITY {
            return Err(GroupError::Invalid(format!(
                "capacity {} (1 to {} slots)",
                cfg.capacity,
                smelt_transport::MAX_CAPACITY
            )));
        }
        let blob = Blob {
            trees: trees
                .iter()
                .map(|t| BlobTree {
                    members: t.members.clone(),
                    root: t.root,
                    children: t.children.clone(),
                })
                .collect(),
            capacity: cfg.capacity,
            segment: cfg.segment,
            max_message: cfg.max_message,
            strict: cfg.sync == crate::SyncMode::Strict,
            timeout_ns: cfg.timeout.as_nanos().min(u64::MAX as u128) as u64,
            wait: cfg.wait.map(|w| {
                [
                    w.spin_polls as u64,
                    w.yield_polls as u64,
                    w.park_initial.as_nanos() as u64,
                    w.park_max.as_nanos() as u64,
                ]
            }),
            algorithms: cfg.algorithms.as_ref().map(|t| t.to_json()),
        };
        let blob = serde_json::to_vec(&blob).expect("plain data serializes");
        let mesh = mesh_pairs(cfg.algorithms.as_deref(), cpus.len());
        let rings = rings(trees, cfg.capacity as u32, &mesh);
        let shm = if guarded {
            ShmJob::create_guarded(cpus.len() as u32, &rings, &blob, 0)
        } else {
            ShmJob::create(cpus.len() as u32, &rings, &blob)
        }
        .map_err(|e| GroupError::Job(e.to_string()))?;
        Ok(Job { shm, cpus })
    }

    /// Number of members.
    pub fn size(&self) -> usize {
        self.cpus.len()
    }

    /// OS CPU id of each rank.
    pub fn cpus(&self) -> &[CpuId] {
        &self.cpus
    }

    shm_job_accessors!();

    /// The environment member `rank` needs to join ([`join_from_env`]).
    pub fn env(&self, rank: Rank) -> Vec<(String, String)> {
        let mut env = join_env(&self.shm, GROUP_VARS, rank);
        env.push((ENV_SIZE.into(), self.size().to_string()));
        env.push((
            ENV_CPU.into(),
            self.cpus
                .get(rank.index())
                .map(|c| c.to_string())
                .unwrap_or_default(),
        ));
        env
    }

    /// Fails the job on member `rank`'s behalf (first failure wins): every member's
    /// collectives fail at once with [`GroupError::PeerFailed`] naming it.
    pub fn fail(&self, rank: Rank, what: &str) {
        self.shm.fail(rank.index() as u32, what);
    }

    /// The job's first failure: rank and what happened.
    pub fn failure(&self) -> Option<(Rank, String)> {
        self.shm.failure().map(|(r, w)| (Rank(r as usize), w))
    }

    /// Removes the segment's name now (it is removed anyway once every member joined,
    /// and when the `Job` is dropped).
    pub fn unlink(&self) {
        self.shm.unlink();
    }
}

/// Joins the job described by the environment ([`ENV_JOB`], [`ENV_KEY`],
/// [`ENV_RANK`]), as set by `smelt launch` or [`Job::env`].
pub fn join_from_env() -> Result<Member, GroupError> {
    let (path, key, rank) = read_join_env(GROUP_VARS, |k| {
        GroupError::Job(format!(
            "{k} is not set: start this program with `smelt launch`, or set {ENV_JOB}, {ENV_KEY} and {ENV_RANK}"
        ))
    })?;
    let rank: Rank = rank
        .parse()
        .map_err(|_| GroupError::Job(format!("{ENV_RANK} is not a rank")))?;
    join(&path, &key, rank)
}

/// Joins the job whose segment is at `path` as member `rank`.
pub fn join(path: &Path, key: &str, rank: Rank) -> Result<Member, GroupError> {
    let job_err = |e: smelt_transport::shm::ShmError| GroupError::Job(e.to_string());
    let rank32 =
        u32::try_from(rank.index()).map_err(|_| GroupError::Job(format!("rank {rank}")))?;
    let mut shm = ShmMember::attach(path, key, rank32).map_err(job_err)?;
    let blob: Blob = serde_json::from_slice(shm.blob())
        .map_err(|e| GroupError::Job(format!("the job description is unreadable: {e}")))?;
    let trees: Vec<Tree> = blob
        .trees
        .into_iter()
        .map(|t| Tree::new(t.members, t.root, t.children))
        .collect::<Result<_, _>>()
        .map_err(|e| GroupError::Job(format!("the job's tree is invalid: {e}")))?;
    let cpus = check_trees(&trees)?;
    let n = cpus.len();
    let table = match &blob.algorithms {
        Some(j) => Some(Arc::new(AlgorithmTable::from_json(j).map_err(|e| {
            GroupError::Job(format!("the job's algorithm table is unreadable: {e}"))
        })?)),
        None => None,
    };
    let mesh = mesh_pairs(table.as_deref(), n);
    let expected = rings(&trees, blob.capacity as u32, &mesh);
    if shm.rings() != expected {
        return Err(GroupError::Job(
            "the job's rings do not match its trees".into(),
        ));
    }
    let oversubscribed = n > allowed_cpus().map(|a| a.len()).unwrap_or(1).max(1);
    let wait = match blob.wait {
        Some([s, y, pi, pm]) => WaitPolicy {
            spin_polls: s as u32,
            yield_polls: y as u32,
            park_initial: Duration::from_nanos(pi),
            park_max: Duration::from_nanos(pm),
        },
        None if oversubscribed => WaitPolicy::OVERSUBSCRIBED,
        None => WaitPolicy::DEDICATED,
    };
    let cfg = GroupConfig {
        capacity: blob.capacity,
        segment: blob.segment,
        max_message: blob.max_message,
        sync: if blob.strict {
            crate::SyncMode::Strict
        } else {
            crate::SyncMode::Loose
        },
        timeout: Duration::from_nanos(blob.timeout_ns),
        wait: Some(wait),
        algorithms: table.clone(),
        ..GroupConfig::default()
    };
    let abort = Abort::new();
    shm.set_abort(abort.clone());
    // This member's ends: ring 2e (down) and 2e+1 (up) of each tree's edge e.
    let mut ends: HashMap<(usize, usize, bool), Endpoint> = HashMap::new();
    let mut base = 0;
    for (id, t) in trees.iter().enumerate() {
        for (e, _) in tree_edges(t).enumerate() {
            let (down, up) = (base + 2 * e, base + 2 * e + 1);
            let spec = expected[down];
            let open = |tx: usize, rx: usize| -> Result<Endpoint, GroupError> {
                let mut ep = Endpoint {
                    tx: shm.producer(tx)?,
                    rx: shm.consumer(rx)?,
                };
                ep.set_wait_policy(wait);
                Ok(ep)
            };
            if spec.producer == rank32 {
                ends.insert((id, e, true), open(down, up)?);
            } else if spec.consumer == rank32 {
                ends.insert((id, e, false), open(up, down)?);
            }
        }
        base += 2 * tree_edges(t).count();
    }
    // Each context's links beyond its tree: for pair k, ring 2k from its lower rank
    // to its higher one, ring 2k+1 back.
    let mut meshes = Vec::new();
    if let (Some(table), false) = (&table, mesh.is_empty()) {
        for _ in &trees {
            let mut links = Vec::new();
            for (k, &(a, b)) in mesh.iter().enumerate() {
                let (ab, ba) = (base + 2 * k, base + 2 * k + 1);
                let (peer, tx, rx) = if a == rank.index() {
                    (b, ab, ba)
                } else if b == rank.index() {
                    (a, ba, ab)
                } else {
                    continue;
                };
                let mut ep = Endpoint {
                    tx: shm.producer(tx)?,
                    rx: shm.consumer(rx)?,
                };
                ep.set_wait_policy(wait);
                links.push((Rank(peer), ep));
            }
            base += 2 * mesh.len();
            let m = crate::mesh::Mesh::with_links(rank, n, links, Some(abort.clone()), wait)
                .map_err(|e| GroupError::Job(format!("links beyond the tree: {e}")))?;
            meshes.push(crate::nontree::NonTreeLinks::new(m, table.clone()));
        }
    }
    let shared = Arc::new(GroupShared::with_abort(cpus, abort, Some(shm)));
    let mut member = Member::build(&trees, rank, &cfg, shared, None, |id, e, parent_side| {
        ends.remove(&(id, e, parent_side))
            .ok_or_else(|| GroupError::Job(format!("no ring for tree {id} edge {e}")))
    })?;
    for (c, links) in member.contexts.iter_mut().zip(meshes) {
        if let Some(c) = c.as_mut() {
            c.nontree = Some(Box::new(links));
        }
    }
    Ok(member)
}
