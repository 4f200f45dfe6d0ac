//! Tree collectives over a world of MPI ranks (the `mpi` feature), whatever its nodes:
//! [`MpiCollectives`], from [`collectives`].
//!
//! A world of MPI ranks ([`World::from_mpi`]) shares memory inside each node only, so
//! [`WorldExt::collectives`] (one tree over every member) serves a world of one node.
//! Across nodes the collectives are hierarchical, as `libsmelt_mpi`'s: a smelt tree
//! inside each node (over queuepairs carved from the node's segment, rooted at the
//! node's leader, its place 0), and MPI between the nodes' leaders (on a communicator
//! of the leaders split from the world's). An allreduce is a reduction up the node's
//! tree, the leaders' exchange of their nodes' results (an allgather, combined in node
//! order, so every node gets the same value whatever the operation), and a broadcast
//! down the tree; a barrier is a reduction, an MPI barrier of the leaders and a
//! broadcast. Operations: [`barrier`](MpiCollectives::barrier),
//! [`allreduce`](MpiCollectives::allreduce),
//! [`allreduce_slice`](MpiCollectives::allreduce_slice),
//! [`allreduce_bytes`](MpiCollectives::allreduce_bytes),
//! [`broadcast_word`](MpiCollectives::broadcast_word) and
//! [`broadcast_into`](MpiCollectives::broadcast_into) (from member 0),
//! [`gather_word`](MpiCollectives::gather_word) and
//! [`gather_bytes`](MpiCollectives::gather_bytes) (at member 0).
//!
//! ```no_run
//! use smelt_world::{mpi, Topology, World};
//! use smelt_mesh::mpi::rsmpi::traits::Communicator;
//! let universe = smelt_mesh::mpi::rsmpi::initialize().expect("MPI");
//! let world = World::from_mpi(&universe.world())?;
//! let mut coll = mpi::collectives(&world, Topology::Auto)?;
//! let n = coll.allreduce(1u64, |a, b| a + b)?;
//! assert_eq!(n as usize, world.size());
//! # Ok::<(), smelt_world::Error>(())
//! ```

use super::{flat, in_rank_order, Error, WorldExt};
use smelt_ids::{CpuId, Rank};
use smelt_mesh::mpi::{self as m, ffi::MPI_Comm, MpiCalls, MpiError};
use smelt_mesh::world::{World, WorldError};
use smelt_runtime::{GroupConfig, GroupError, Member, Word};
use smelt_tree::{Topology, Tree};
use std::time::Duration;

impl From<MpiError> for Error {
    fn from(e: MpiError) -> Error {
        Error::World(WorldError::from(e))
    }
}

/// This rank's collectives over a world of MPI ranks: its node's tree and, at the
/// node's leader, MPI to the other leaders. Every operation is a collective call over
/// the whole world.
#[derive(Debug)]
pub struct MpiCollectives {
    node: Member,
    /// The nodes' leaders (rank `i` is node `i`'s leader); `MPI_COMM_NULL` elsewhere
    /// and in a world of one node.
    leaders: MPI_Comm,
    /// Each node's ranks, by place.
    node_ranks: Vec<Vec<usize>>,
    rank: Rank,
    size: usize,
    timeout: Duration,
}

/// A collective call over `world` (a world of MPI ranks): this rank's collectives,
/// each node's tree of `topo` over its members' CPUs (a flat tree where they have no
/// CPUs of their own), with the default configuration.
pub fn collectives(world: &World, topo: Topology) -> Result<MpiCollectives, Error> {
    collectives_with(world, topo, GroupConfig::default())
}

/// As [`collectives`], the node trees configured by `cfg`.
pub fn collectives_with(
    world: &World,
    topo: Topology,
    cfg: GroupConfig,
) -> Result<MpiCollectives, Error> {
    let mpi = world.mpi().ok_or_else(|| {
        Error::World(WorldError::Invalid(
            "MPI collectives need a world of MPI ranks (World::from_mpi); other worlds: WorldExt::collectives"
                .into(),
        ))
    })?;
    let layout = mpi.layout();
    let node_ranks: Vec<Vec<usize>> = (0..layout.nodes()).map(|k| layout.node_ranks(k)).collect();
    let mine = &node_ranks[world.node()];
    let tree = node_tree(world, topo, mine)?;
    // The tree's edges, in the node's ranks; each a queuepair of the node's segment.
    // (The tree is in place order: position `i` is place `i`.)
    let edges: Vec<(usize, usize)> = smelt_runtime::tree_edges(&tree)
        .map(|(p, c)| (p.index(), c.index()))
        .collect();
    let pairs: Vec<(Rank, Rank)> = edges
        .iter()
        .map(|&(p, c)| (Rank(mine[p]), Rank(mine[c])))
        .collect();
    let wait = cfg.link.wait.unwrap_or_else(|| world.wait_policy());
    let mut ends = world.queuepairs(&pairs, cfg.link.capacity, Some(wait), None)?;
    let cfg = GroupConfig {
        link: cfg.link.wait(wait),
        algorithms: None,
        ..cfg
    };
    let node = Member::with_links(
        std::slice::from_ref(&tree),
        Rank(mpi.node_rank()),
        &cfg,
        None,
        |end| {
            ends[end.edge]
                .take()
                .ok_or_else(|| GroupError::Job(format!("no link for edge {}", end.edge)))
        },
    );
    // Every rank has its node's tree (or every rank fails).
    let t = Some(mpi.timeout());
    let ok = m::all::<MpiCalls>(mpi.comm(), node.is_ok(), t)?;
    let node = node?;
    if !ok {
        return Err(Error::Group(GroupError::Job(
            "a rank on another node could not make its node's tree".into(),
        )));
    }
    let leaders = if node_ranks.len() > 1 {
        let color = if mpi.node_rank() == 0 {
            0
        } else {
            m::undefined()
        };
        m::split::<MpiCalls>(mpi.comm(), color, world.rank().index() as i32)?
    } else {
        m::comm_null()
    };
    Ok(MpiCollectives {
        node,
        leaders,
        node_ranks,
        rank: world.rank(),
        size: world.size(),
        timeout: mpi.timeout(),
    })
}

/// The tree of a node whose members are world ranks `ranks` (by place), rooted at
/// place 0: `topo` over their CPUs, or a flat tree.
fn node_tree(world: &World, topo: Topology, ranks: &[usize]) -> Result<Tree, Error> {
    let n = ranks.len();
    let cpus: Option<Vec<CpuId>> = ranks.iter().map(|&r| world.cpu_of(Rank(r))).collect();
    let distinct = cpus.as_ref().is_some_and(|c| {
        let mut s = c.clone();
        s.sort_unstable();
        s.dedup();
        s.len() == c.len()
    });
    let (Some(cpus), true, true) = (cpus, distinct, n > 1) else {
        return flat(n);
    };
    let model = world.machine_model()?;
    let ids: Vec<u32> = cpus.iter().map(|c| c.get()).collect();
    let pos = model.positions(&ids)?;
    let tree = topo
        .generate(&model, &pos, Some(pos[0]))
        .map_err(|e| Error::Tree(e.to_string()))
        .and_then(|t| in_rank_order(&t, &cpus))?;
    if tree.root.index() == 0 {
        Ok(tree)
    } else {
        flat(n)
    }
}

impl MpiCollectives {
    /// This member's rank in the world.
    pub fn rank(&self) -> Rank {
        self.rank
    }

    /// Members of the world.
    pub fn size(&self) -> usize {
        self.size
    }

    fn leader(&self) -> bool {
        self.leaders != m::comm_null()
    }

    /// Every node's `words` (the same number at every leader), by node.
    fn exchange(&self, words: &[u64]) -> Result<Vec<u64>, Error> {
        Ok(m::allgather_words::<MpiCalls>(
            self.leaders,
            words,
            Some(self.timeout),
        )?)
    }

    /// Waits until every member of the world got here.
    pub fn barrier(&mut self) -> Result<(), Error> {
        self.node.reduce_empty()?;
        if self.leader() {
            m::barrier::<MpiCalls>(self.leaders, Some(self.timeout))?;
        }
        self.node.broadcast_empty()?;
        Ok(())
    }

    /// `op` over every member's `v` (combined within each node, then node by node in
    /// node order): the result at every member.
    pub fn allreduce<T: Word>(&mut self, v: T, op: impl Fn(T, T) -> T) -> Result<T, Error> {
        let part = self.node.reduce(v, &op)?;
        let mut w = 0;
        if let (Some(part), true) = (part, self.leader()) {
            let all = self.exchange(&[part.to_word()])?;
            w = all
                .into_iter()
                .map(T::from_word)
                .reduce(&op)
                .map_or(0, Word::to_word);
        } else if let Some(part) = part {
            w = part.to_word();
        }
        Ok(T::from_word(self.node.broadcast_word(w)?))
    }

    /// `op` element-wise over every member's `data` (the same length everywhere), in
    /// place at every member.
    pub fn allreduce_slice<T: Word>(
        &mut self,
        data: &mut [T],
        op: impl Fn(T, T) -> T,
    ) -> Result<(), Error> {
        let root = self.node.reduce_slice(data, &op)?;
        if root && self.leader() {
            let mine: Vec<u64> = data.iter().map(|x| x.to_word()).collect();
            let all = self.exchange(&mine)?;
            for (i, x) in data.iter_mut().enumerate() {
                *x = all
                    .iter()
                    .skip(i)
                    .step_by(mine.len().max(1))
                    .map(|&w| T::from_word(w))
                    .reduce(&op)
                    .unwrap_or(*x);
            }
        }
        let mut bytes: Vec<u8> = data
            .iter()
            .flat_map(|x| x.to_word().to_le_bytes())
            .collect();
        self.node.broadcast_into(&mut bytes)?;
        for (x, b) in data.iter_mut().zip(bytes.chunks_exact(8)) {
            *x = T::from_word(u64::from_le_bytes(b.try_into().expect("8 bytes")));
        }
        Ok(())
    }

    /// Member 0's `w`, at every member.
    pub fn broadcast_word(&mut self, w: u64) -> Result<u64, Error> {
        let mut v = w;
        if self.leader() {
            let mut b = w.to_le_bytes();
            m::bcast_bytes::<MpiCalls>(self.leaders, &mut b, 0, Some(self.timeout))?;
            v = u64::from_le_bytes(b);
        }
        Ok(self.node.broadcast_word(v)?)
    }

    /// Member 0's `buf` into every member's (the same length everywhere): MPI between
    /// the leaders, then down each node's tree.
    pub fn broadcast_into(&mut self, buf: &mut [u8]) -> Result<(), Error> {
        if self.leader() {
            m::bcast_bytes::<MpiCalls>(self.leaders, buf, 0, Some(self.timeout))?;
        }
        Ok(self.node.broadcast_into(buf)?)
    }

    /// Every node's `bytes` (the same length at every leader), by node: padded to words
    /// for the leaders' allgather.
    fn exchange_bytes(&self, bytes: &[u8]) -> Result<Vec<Vec<u8>>, Error> {
        let words: Vec<u64> = bytes
            .chunks(8)
            .map(|c| {
                let mut w = [0u8; 8];
                w[..c.len()].copy_from_slice(c);
                u64::from_le_bytes(w)
            })
            .collect();
        let all = self.exchange(&words)?;
        Ok(all
            .chunks(words.len().max(1))
            .take(self.node_ranks.len())
            .map(|ws| {
                let mut b: Vec<u8> = ws.iter().flat_map(|w| w.to_le_bytes()).collect();
                b.truncate(bytes.len());
                b
            })
            .collect())
    }

    /// `combine` over every member's `data` (the same length everywhere), in place at
    /// every member: combined up each node's tree, then node by node in node order.
    pub fn allreduce_bytes(
        &mut self,
        data: &mut [u8],
        mut combine: impl FnMut(&mut [u8], &[u8]),
    ) -> Result<(), Error> {
        let root = self.node.reduce_bytes(data, &mut combine)?;
        if root && self.leader() {
            let all = self.exchange_bytes(data)?;
            let mut acc = all[0].clone();
            for other in &all[1..] {
                combine(&mut acc, other);
            }
            data.copy_from_slice(&acc);
        }
        Ok(self.node.broadcast_into(data)?)
    }

    /// Every member's `mine` (the same length everywhere) at member 0: `out` (members ×
    /// `mine.len()` bytes) receives rank `r`'s bytes at `r × mine.len()` there, and
    /// `true` is returned; elsewhere `out` is not used (pass `&mut []`).
    pub fn gather_bytes(&mut self, mine: &[u8], out: &mut [u8]) -> Result<bool, Error> {
        let k = mine.len();
        let here = self.node.size();
        let mut part = vec![
            0u8;
            if self.node.rank().index() == 0 {
                here * k
            } else {
                0
            }
        ];
        if !self.node.gather_bytes(mine, &mut part)? {
            return Ok(false);
        }
        let at_zero = self.rank.index() == 0;
        if at_zero && out.len() != self.size * k {
            return Err(Error::Group(GroupError::Invalid(format!(
                "gather_bytes: {} bytes of room at member 0 for {} members of {k}",
                out.len(),
                self.size
            ))));
        }
        if !self.leader() {
            // A world of one node: the node's gather is the world's (place = rank).
            out.copy_from_slice(&part);
            return Ok(true);
        }
        let most = self.node_ranks.iter().map(Vec::len).max().unwrap_or(0);
        part.resize(most * k, 0);
        let all = self.exchange_bytes(&part)?;
        if !at_zero {
            return Ok(false);
        }
        for (node, ranks) in self.node_ranks.iter().enumerate() {
            for (place, &r) in ranks.iter().enumerate() {
                out[r * k..(r + 1) * k].copy_from_slice(&all[node][place * k..(place + 1) * k]);
            }
        }
        Ok(true)
    }

    /// Every member's `w`, by rank, at member 0 (`None` elsewhere).
    pub fn gather_word(&mut self, w: u64) -> Result<Option<Vec<u64>>, Error> {
        let part = self.node.gather_word(w)?;
        let Some(part) = part else {
            return Ok(None);
        };
        if !self.leader() {
            // A world of one node: the node's gather is the world's.
            return Ok((self.rank.index() == 0).then_some(part));
        }
        let most = self.node_ranks.iter().map(Vec::len).max().unwrap_or(0);
        let mut mine = part.clone();
        mine.resize(most, 0);
        let all = self.exchange(&mine)?;
        if self.rank.index() != 0 {
            return Ok(None);
        }
        let mut out = vec![0u64; self.size];
        for (k, ranks) in self.node_ranks.iter().enumerate() {
            for (place, &r) in ranks.iter().enumerate() {
                out[r] = all[k * most + place];
            }
        }
        Ok(Some(out))
    }
}

impl Drop for MpiCollectives {
    fn drop(&mut self) {
        m::free::<MpiCalls>(&mut self.leaders);
    }
}
