//! Tree collectives from a [`World`]: [`Member::from_world`]. (This module also
//! re-exports everything of [`smelt_mesh::world`].)
//!
//! A collective call on the world (every member calls it, in the same order as every
//! other service it makes from the world): member `r` of the group is member `r` of
//! the world, at position `r` of the first tree. Members that are threads get exactly
//! what [`Group::with_config`](crate::Group::with_config) builds (in-process
//! queuepairs, loans of large messages), handed out by rank; member processes carve
//! one queuepair per tree edge (and the links the non-tree algorithms need) from the
//! world's segment, and share the job's failure record and abort flag, so a member
//! that fails or dies fails every member's collectives instead of hanging them.

pub use smelt_mesh::world::*;

use crate::group::{check_trees, ranks_of, tree_edges, GroupShared};
use crate::{Group, GroupConfig, GroupError, Member};
use smelt_ids::Rank;
use smelt_plan::Tree;
use smelt_transport::{Abort, QueuePairEnd};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

/// The world attribute under which a launcher (`smelt launch`,
/// [`process::GroupJob`](crate::process::GroupJob)) describes the group its members join
/// with [`process::join_from_env`](crate::process::join_from_env) or
/// [`Member::from_launched_world`].
pub const GROUP_ATTRIBUTE: &str = "smelt.group";

/// What the members must agree on, as text (part of the world's fingerprint of the
/// group: members that pass other trees or settings get a mismatch, not a hang).
fn describe(trees: &[Tree], cfg: &GroupConfig) -> String {
    let mut s = format!(
        "group capacity={} segment={:?} max={} lend={} sync={:?} algorithms={}",
        cfg.link.capacity,
        cfg.segment,
        cfg.max_message,
        cfg.lend_from,
        cfg.sync,
        cfg.algorithms
            .as_ref()
            .map(|t| t.to_json())
            .unwrap_or_default()
    );
    for t in trees {
        let _ = write!(s, " tree {:?} {:?} {:?}", t.members, t.root, t.children);
    }
    s
}

impl Member<QueuePairEnd> {
    /// This world member's member of a group over `trees` (every tree over the same
    /// CPUs; the first tree's member order gives the ranks, which are the world's:
    /// the first tree has one position per world member), configured by `cfg` (the
    /// same on every member). A collective call: every member of the world calls it,
    /// in the same order as the other services it makes from the world.
    ///
    /// Threads are not pinned here (pin them yourself, or start them with
    /// [`World::run`], which pins each to its world CPU); member processes are pinned
    /// by their launcher. Threads get exactly [`Group::with_config`]'s members (with
    /// `cfg.flatten_oversubscribed` applied); processes run the trees as given (a
    /// launcher with more members than CPUs gives a flat tree, as `smelt launch`
    /// does).
    pub fn from_world(
        world: &World,
        trees: &[Tree],
        cfg: &GroupConfig,
    ) -> Result<Member, GroupError> {
        let cpus = check_trees(trees)?;
        let n = cpus.len();
        if n != world.size() {
            return Err(GroupError::Invalid(format!(
                "a tree of {n} members for a world of {}",
                world.size()
            )));
        }
        let rank = world.rank();
        let what = describe(trees, cfg);
        if world.kind() == WorldKind::Threads {
            return Ok(world.hand_out(&what, || {
                Group::with_config(trees, cfg)
                    .map(Group::into_members)
                    .map_err(|e| WorldError::Invalid(e.to_string()))
            })?);
        }
        if cfg.link.capacity == 0 || cfg.link.capacity > smelt_transport::MAX_CAPACITY {
            return Err(GroupError::Invalid(format!(
                "capacity {} (1 to {} slots)",
                cfg.link.capacity,
                smelt_transport::MAX_CAPACITY
            )));
        }
        let wait = cfg.link.wait.unwrap_or(world.wait_policy());
        // Every tree's edges (parent, child), then each context's links beyond its
        // tree: one queuepair each, carved in this order by every member.
        let mut pairs: Vec<(Rank, Rank)> = Vec::new();
        let mut edge_index: HashMap<(usize, usize), usize> = HashMap::new();
        for (id, t) in trees.iter().enumerate() {
            let rank_of = ranks_of(&trees[0], t);
            for (e, (p, c)) in tree_edges(t).enumerate() {
                edge_index.insert((id, e), pairs.len());
                pairs.push((rank_of[p], rank_of[c]));
            }
        }
        let mesh: Vec<(usize, usize)> = match cfg.algorithms.as_deref() {
            Some(t) if n > 1 => crate::nontree::pairs_for(t, n).into_iter().collect(),
            _ => Vec::new(),
        };
        let mesh_base = pairs.len();
        for _ in trees {
            if !mesh.is_empty() {
                pairs.extend(mesh.iter().map(|&(a, b)| (Rank(a), Rank(b))));
            }
        }
        let abort = Abort::new();
        let mut ends =
            world.queuepairs(&pairs, cfg.link.capacity, Some(wait), Some(abort.clone()))?;
        // Staging buffers on the tree edges: long messages in one copy, not through
        // the rings' slots (between processes; threads lend instead).
        let mut stages = crate::large::staged::make(world, &pairs[..mesh_base], wait, &abort)?;
        let mut calls = Vec::new();
        let job = world.shm_member().cloned();
        let shared = Arc::new(GroupShared::with_abort(cpus, abort.clone(), job));
        let mut cfg = cfg.clone();
        cfg.link.wait = Some(wait);
        let mut nontree = Vec::new();
        if let (Some(table), false) = (&cfg.algorithms, mesh.is_empty()) {
            for k in 0..trees.len() {
                let base = mesh_base + k * mesh.len();
                let links: Vec<(Rank, QueuePairEnd)> = (base..base + mesh.len())
                    .filter_map(|i| {
                        let (a, b) = pairs[i];
                        let peer = if a == rank { b } else { a };
                        ends[i].take().map(|ep| (peer, ep))
                    })
                    .collect();
                let m =
                    smelt_mesh::mesh::Mesh::with_links(rank, n, links, Some(abort.clone()), wait)
                        .map_err(|e| GroupError::Job(format!("links beyond the tree: {e}")))?;
                nontree.push(crate::nontree::NonTreeLinks::new(m, table.clone()));
            }
        }
        let mut member = Member::build(trees, rank, &cfg, shared, None, |id, e, side| {
            calls.push((id, e, side));
            edge_index
                .get(&(id, e))
                .and_then(|&i| ends[i].take())
                .ok_or_else(|| GroupError::Job(format!("no link for tree {id} edge {e}")))
        })?;
        for (id, c) in member.contexts.iter_mut().enumerate() {
            if let Some(c) = c.as_mut() {
                c.stages = crate::large::staged::for_context(id, &calls, &edge_index, &mut stages);
            }
        }
        for (c, links) in member.contexts.iter_mut().zip(nontree) {
            if let Some(c) = c.as_mut() {
                c.nontree = Some(Box::new(links));
            }
        }
        Ok(member)
    }

    /// This world member's member of the group its launcher described (the world
    /// attribute [`GROUP_ATTRIBUTE`], set by `smelt launch` and
    /// [`process::GroupJob`](crate::process::GroupJob)): its trees and settings. A collective
    /// call, as [`from_world`](Self::from_world).
    pub fn from_launched_world(world: &World) -> Result<Member, GroupError> {
        let blob = world.attribute(GROUP_ATTRIBUTE).ok_or_else(|| {
            GroupError::Job(format!(
                "the world describes no group (its launcher set no {GROUP_ATTRIBUTE:?}): build one with Member::from_world"
            ))
        })?;
        let (trees, cfg) = crate::process::parse_group(blob)?;
        Member::from_world(world, &trees, &cfg)
    }
}
