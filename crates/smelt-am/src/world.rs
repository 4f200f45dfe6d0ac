//! Endpoints made from a [`World`]: the way to get active messages, whoever started
//! the members (threads of this process, processes of `smelt launch`).
//!
//! [`Endpoint::from_world`] is a **collective call** (as every service made from a
//! world): every member makes its endpoint, in the same order relative to the other
//! services it makes from that world. Endpoint `i` is member `i` of the world; it is
//! named `node.0.k` (threads) or `node.k.0` (processes), `k` its place among the
//! members of its node. Each call makes a new set of endpoints on links of their own
//! (an all-to-all mesh of `AmConfig::link.capacity` slots per ring): a member may hold
//! several endpoints of one world (offload lanes do), endpoint `i` of one set talking
//! only to the endpoints of that set.
//!
//! Every endpoint gets a random protection tag, and learns every other endpoint's:
//! between threads the first member to call draws them all; between processes each
//! member publishes its own in a region of the world's segment and waits (at most
//! `AmConfig::link.timeout`) until every member did, so a member that never comes is a
//! [`AmError::Timeout`] and one that died is [`AmError::PeerGone`], never a hang.
//!
//! ```
//! use smelt_am::{AmConfig, Endpoint};
//! use smelt_mesh::World;
//! use std::time::Duration;
//! const ADD: u8 = 1;
//! const SUM: u8 = 2;
//! let t = Duration::from_secs(5);
//! let sums = World::run(World::threads(2)?, |w| {
//!     let mut ep = Endpoint::from_world(&w, 0u64, AmConfig::default()).unwrap();
//!     // The server counts the requests it answered; the client keeps the sum.
//!     ep.register(ADD, |n: &mut u64, ctx, m| {
//!         *n += 1;
//!         ctx.reply(SUM, &[m.args[0] + m.args[1]]).unwrap()
//!     })
//!     .unwrap();
//!     ep.register(SUM, |sum: &mut u64, _, m| *sum = m.args[0]).unwrap();
//!     if w.rank().index() == 1 {
//!         ep.request(0, ADD, &[40, 2]).unwrap();
//!         ep.quiesce(t).unwrap();
//!     } else {
//!         ep.run_until(t, |n| *n == 1).unwrap();
//!     }
//!     *ep.state()
//! })?;
//! assert_eq!(sums, [1, 42]);
//! # Ok::<(), smelt_mesh::WorldError>(())
//! ```

use crate::endpoint::{AmConfig, Endpoint, Name};
use crate::error::AmError;
use crate::setup::{random_tag, Table};
use smelt_mesh::world::{MeshSpec, World, WorldKind, WorldLink};
use smelt_mesh::Rank;
use smelt_transport::Backoff;
use std::sync::atomic::Ordering;
use std::time::Instant;

impl<S> Endpoint<S, WorldLink> {
    /// A collective call: this member's endpoint of a new set of endpoints of `world`
    /// (see the [module documentation](crate::world)), with state `state`.
    pub fn from_world(world: &World, state: S, cfg: AmConfig) -> Result<Self, AmError> {
        #[cfg(feature = "mpi")]
        if world.kind() == WorldKind::Mpi {
            return crate::mpi::world_endpoint(world, state, cfg);
        }
        cfg.validate()?;
        reachable(world)?;
        let me = world.rank().index();
        let table = Table {
            names: names(world),
            tags: tags(world, &cfg)?,
        };
        let spec = MeshSpec::all_to_all().link(&cfg.link);
        let mesh = world.mesh(&spec)?;
        // Every member is reached over the world's mesh (mesh rank = world rank).
        let (dests, global) = table.dests_by(me, |_| true);
        Endpoint::new(me, mesh, global, None, dests, table.tags[me], state, cfg)
    }
}

/// Ok when every member of `world` is reached over its meshes.
fn reachable(world: &World) -> Result<(), AmError> {
    match world.kind() {
        WorldKind::Threads | WorldKind::Processes => Ok(()),
        // A world of MPI ranks (made by `crate::mpi::world_endpoint` with the `mpi`
        // feature) in a build without it.
        #[allow(unreachable_patterns)]
        other => Err(AmError::Invalid(format!(
            "active messages over a world of {other:?} need smelt-am's `mpi` feature"
        ))),
    }
}

/// Each member's name: `node.0.k` for threads, `node.k.0` for processes (`k` its
/// place among its node's members).
fn names(world: &World) -> Vec<Name> {
    let mut next = std::collections::HashMap::<usize, u32>::new();
    (0..world.size())
        .map(|r| {
            let node = world.node_of(Rank(r)).unwrap_or(0);
            let k = next.entry(node).or_insert(0);
            let at = *k;
            *k += 1;
            let node = node as u32;
            match world.kind() {
                WorldKind::Threads => Name {
                    node,
                    process: 0,
                    endpoint: at,
                },
                _ => Name {
                    node,
                    process: at,
                    endpoint: 0,
                },
            }
        })
        .collect()
}

/// A collective call: every member's tag.
fn tags(world: &World, cfg: &AmConfig) -> Result<Vec<u64>, AmError> {
    let n = world.size();
    if world.kind() == WorldKind::Threads {
        return Ok(world.hand_out(&format!("active-message tags n={n}"), || {
            let t: Vec<u64> = (0..n).map(|_| random_tag()).collect();
            Ok(vec![t; n])
        })?);
    }
    // Per member: its tag, then a word that says it is there.
    let region = world.region(16 * n)?;
    let w = region.words();
    let me = world.rank().index();
    w[2 * me].store(random_tag(), Ordering::Relaxed);
    w[2 * me + 1].store(1, Ordering::Release);
    let start = Instant::now();
    let wait = cfg.link.wait.unwrap_or_else(|| world.wait_policy());
    let mut backoff = Backoff::with_policy(&wait);
    let mut park = wait.park_initial;
    let mut r = 0;
    while r < n {
        if w[2 * r + 1].load(Ordering::Acquire) == 1 {
            r += 1;
            continue;
        }
        if !backoff.is_completed() {
            backoff.snooze();
            continue;
        }
        if let Some(job) = world.shm_member() {
            if job.is_aborted() {
                return Err(AmError::Aborted);
            }
            if !job.is_alive(r as u32) {
                return Err(AmError::PeerGone { dest: r });
            }
        }
        if start.elapsed() >= cfg.link.timeout {
            return Err(AmError::Timeout {
                what: format!("for member {r} to make its endpoint (a collective call)"),
                after: cfg.link.timeout,
            });
        }
        std::thread::sleep(park);
        park = (park * 2).min(wait.park_max);
    }
    Ok((0..n).map(|r| w[2 * r].load(Ordering::Relaxed)).collect())
}
