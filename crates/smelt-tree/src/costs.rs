//! Dense cost matrices for one group of members, extracted from a [`Model`].
//!
//! Every generator and the simulator work on *local* member indices `0..n` (the
//! position of a member in the slice it was built from), so that a tree for a subset
//! of the machine never touches the rest of the model.

use crate::tree::{CpuId, Pos, Tree, TreeError};
use smelt_model::Model;

/// `t_send` / `t_receive` between the members of one group, row-major `n × n`, plus
/// each member's node (the paper's NUMA node, from [`Model::node_ids`]).
#[derive(Debug, Clone)]
pub struct Costs {
    n: usize,
    send: Vec<f64>,
    recv: Vec<f64>,
    /// Node (NUMA node) index of every member, as [`Model::node_ids`] reports it.
    pub node: Vec<usize>,
    /// OS CPU id of every member.
    pub cpus: Vec<CpuId>,
    /// Position in the model of every member.
    pub positions: Vec<usize>,
}

impl Costs {
    /// Costs among `members` (positions in `model`), in that order. Errors on an
    /// empty list, a position outside the model or a member listed twice.
    pub fn new(model: &Model, members: &[usize]) -> Result<Costs, TreeError> {
        let ids = model.node_ids();
        Self::with_nodes(model, members, &ids)
    }

    /// Like [`Costs::new`] with a precomputed [`Model::node_ids`] (saves its cost
    /// when many groups are built from one model).
    pub fn with_nodes(
        model: &Model,
        members: &[usize],
        node_ids: &[usize],
    ) -> Result<Costs, TreeError> {
        if members.is_empty() {
            return Err(TreeError::Empty);
        }
        let len = model.len();
        let mut seen = vec![false; len];
        for &p in members {
            if p >= len {
                return Err(TreeError::Invalid(format!(
                    "member position {p} is outside the model ({len} CPUs)"
                )));
            }
            if seen[p] {
                return Err(TreeError::Invalid(format!(
                    "CPU {} is listed twice",
                    model.cpus[p]
                )));
            }
            seen[p] = true;
        }
        let n = members.len();
        let mut send = Vec::with_capacity(n * n);
        let mut recv = Vec::with_capacity(n * n);
        for &i in members {
            let (srow, rrow) = (&model.send[i], &model.receive[i]);
            for &j in members {
                send.push(srow[j]);
                recv.push(rrow[j]);
            }
        }
        Ok(Costs {
            n,
            send,
            recv,
            node: members
                .iter()
                .map(|&p| node_ids.get(p).copied().unwrap_or(0))
                .collect(),
            cpus: members.iter().map(|&p| CpuId(model.cpus[p])).collect(),
            positions: members.to_vec(),
        })
    }

    /// Costs among the members of `tree` (OS CPU ids looked up in `model`), indexed
    /// like the tree's members.
    pub fn for_tree(model: &Model, tree: &Tree) -> Result<Costs, TreeError> {
        let pos: std::collections::HashMap<CpuId, usize> = model
            .cpus
            .iter()
            .enumerate()
            .map(|(i, &c)| (CpuId(c), i))
            .collect();
        let members = tree
            .members
            .iter()
            .map(|&c| {
                pos.get(&c).copied().ok_or_else(|| {
                    TreeError::Invalid(format!("CPU {c} of the tree is not in the model"))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Self::new(model, &members)
    }

    /// A group from explicit matrices (row-major `n × n`), for tests and callers
    /// without a [`Model`]. Nodes default to one node for all.
    pub fn from_matrices(send: Vec<f64>, recv: Vec<f64>, n: usize) -> Result<Costs, TreeError> {
        if n == 0 {
            return Err(TreeError::Empty);
        }
        if send.len() != n * n || recv.len() != n * n {
            return Err(TreeError::Invalid(format!(
                "cost matrices must have {n}×{n} entries"
            )));
        }
        Ok(Costs {
            n,
            send,
            recv,
            node: vec![0; n],
            cpus: (0..n as u32).map(CpuId).collect(),
            positions: (0..n).collect(),
        })
    }

    /// Number of members.
    #[inline]
    pub fn len(&self) -> usize {
        self.n
    }

    /// True when there is no member (never, for a constructed value).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// `t_send(i, j)` between local members.
    #[inline]
    pub fn s(&self, i: usize, j: usize) -> f64 {
        self.send[i * self.n + j]
    }

    /// `t_receive(i, j)`: receiver `j` taking a message from `i`.
    #[inline]
    pub fn r(&self, i: usize, j: usize) -> f64 {
        self.recv[i * self.n + j]
    }

    /// `t_send(i, j) + t_receive(i, j)`: the time from `i` starting a send until `j`
    /// holds the message.
    #[inline]
    pub fn sr(&self, i: usize, j: usize) -> f64 {
        self.s(i, j) + self.r(i, j)
    }

    /// The paper's default root: the member with the lowest average send cost to the
    /// others (lowest index on ties).
    pub fn default_root(&self) -> usize {
        let mut best = (f64::INFINITY, 0);
        for i in 0..self.n {
            let sum: f64 = (0..self.n).filter(|&j| j != i).map(|j| self.s(i, j)).sum();
            if sum < best.0 {
                best = (sum, i);
            }
        }
        best.1
    }

    /// A tree over these members from local child lists (local index `i` is the
    /// tree's position `Pos(i)`).
    pub fn tree(&self, root: usize, children: Vec<Vec<usize>>) -> Tree {
        Tree {
            members: self.cpus.clone(),
            root: Pos(root),
            children: children.into_iter().map(Pos::list).collect(),
        }
    }
}
