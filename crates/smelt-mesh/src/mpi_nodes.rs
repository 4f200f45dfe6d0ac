//! Grouping the ranks of a communicator into nodes: the ranks that share memory
//! (a host, found by `MPI_COMM_TYPE_SHARED`), emulated nodes of `k` consecutive ranks
//! of each host (`SMELT_RANKS_PER_NODE=k`, so that the paths between nodes run on one
//! machine), or every rank its own node.
//!
//! [`Layout::of`] computes the nodes from what every rank said about itself (its host,
//! its `MPI_COMM_WORLD` rank, the CPUs it may use), alike at every rank, with no further
//! agreement; [`NodeComm::new`] gathers that over a communicator and makes the node's
//! communicator. The interposer (`libsmelt_mpi`) gathers its own records in the one
//! allgather of its set-up and calls [`Layout::of`] on them.

use super::ffi::MPI_Comm;
use super::{
    allgather_words, allreduce_min, barrier, comm_world, free, rank_size, split, split_shared,
    Calls, MpiError,
};
use std::marker::PhantomData;
use std::os::raw::c_int;
use std::time::Duration;

/// How ranks are grouped into nodes (the ranks of a node share memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nodes {
    /// The ranks that share memory (`MPI_COMM_TYPE_SHARED`): a node per host.
    Shared,
    /// Each host split into emulated nodes of this many consecutive ranks (by
    /// `MPI_COMM_WORLD` rank).
    Emulated(usize),
    /// Every rank its own node: everything between ranks goes over MPI.
    MpiOnly,
}

impl Nodes {
    /// [`Nodes::Emulated`] of `SMELT_RANKS_PER_NODE` when it is set to more than 0, else
    /// [`Nodes::Shared`]. A value that is not a count is an error naming the variable.
    pub fn from_settings() -> Result<Nodes, MpiError> {
        let k = smelt_settings::count(smelt_settings::RANKS_PER_NODE)
            .map_err(|e| MpiError::Invalid(e.to_string()))?;
        Ok(Nodes::per_node(k.unwrap_or(0) as usize))
    }

    /// [`Nodes::Emulated`] of `k` ranks, or [`Nodes::Shared`] for `k` = 0.
    pub fn per_node(k: usize) -> Nodes {
        match k {
            0 => Nodes::Shared,
            k => Nodes::Emulated(k),
        }
    }

    /// The `k` of [`Layout::of`]: 0 for hosts, 1 for every rank its own node.
    pub fn k(self) -> usize {
        match self {
            Nodes::Shared => 0,
            Nodes::Emulated(k) => k,
            Nodes::MpiOnly => 1,
        }
    }

    /// A few words for reports: "shared-memory nodes", "emulated nodes of 2 ranks",
    /// "MPI only".
    pub fn describe(self) -> String {
        match self {
            Nodes::Shared => "shared-memory nodes".into(),
            Nodes::Emulated(k) => format!("emulated nodes of {k} ranks"),
            Nodes::MpiOnly => "MPI only".into(),
        }
    }
}

/// The CPUs a rank may use, as a bit mask of CPUs 0 to 1023.
pub type CpuMask = [u64; 16];

/// The mask of `cpus` (CPUs past 1023 are left out).
pub fn cpu_mask(cpus: &[u32]) -> CpuMask {
    let mut m = [0u64; 16];
    for &c in cpus {
        if let Some(w) = m.get_mut(c as usize / 64) {
            *w |= 1 << (c % 64);
        }
    }
    m
}

/// What one rank says about itself for [`Layout::of`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    /// Its host: any number that the ranks of one host share and others do not.
    pub host: u64,
    /// Its rank in `MPI_COMM_WORLD` (emulated nodes follow it).
    pub world: u64,
    /// The CPUs it may use.
    pub cpus: CpuMask,
}

/// Words of one [`Placed`] in an allgather.
pub const PLACED_WORDS: usize = 18;

impl Placed {
    /// As words for an allgather ([`PLACED_WORDS`]).
    pub fn words(&self) -> [u64; PLACED_WORDS] {
        let mut w = [0u64; PLACED_WORDS];
        w[0] = self.host;
        w[1] = self.world;
        w[2..].copy_from_slice(&self.cpus);
        w
    }

    /// Back from [`words`](Self::words) (`w` holds at least [`PLACED_WORDS`] words).
    pub fn from_words(w: &[u64]) -> Placed {
        let mut cpus = [0u64; 16];
        cpus.copy_from_slice(&w[2..PLACED_WORDS]);
        Placed {
            host: w[0],
            world: w[1],
            cpus,
        }
    }
}

/// The nodes of a communicator, computed alike by every rank from every rank's
/// [`Placed`] (by communicator rank).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// For each rank: its node and its rank in that node (its local rank).
    pub place: Vec<[usize; 2]>,
    /// Ranks per node, by node.
    pub node_sizes: Vec<usize>,
    /// For each rank: whether its host has more ranks than CPUs its ranks may use.
    pub oversubscribed: Vec<bool>,
}

impl Layout {
    /// Nodes are hosts, or with `k` > 0 emulated nodes of `k` ranks of a host (of more
    /// than `k`) in `MPI_COMM_WORLD` rank order (so a process stays with the same others
    /// in every communicator that holds them all, and a communicator that reorders the
    /// ranks has nodes of ranks that do not follow each other, as real nodes may).
    /// Inside a node, ranks are numbered in communicator order; nodes are numbered in
    /// the order of their first rank (local rank 0, the node's leader).
    pub fn of(all: &[Placed], k: usize) -> Layout {
        let n = all.len();
        // Hosts, by first appearance.
        let mut hosts: Vec<(u64, Vec<usize>)> = Vec::new();
        let mut host_of = vec![0usize; n];
        for (r, rec) in all.iter().enumerate() {
            let i = match hosts.iter().position(|(h, _)| *h == rec.host) {
                Some(i) => i,
                None => {
                    hosts.push((rec.host, Vec::new()));
                    hosts.len() - 1
                }
            };
            hosts[i].1.push(r);
            host_of[r] = i;
        }
        // Each rank's emulated node inside its host: its position by world rank / k.
        let mut sub = vec![0usize; n];
        let mut oversubscribed = vec![false; n];
        for (_, members) in &hosts {
            let mut mask = [0u64; 16];
            for &r in members {
                for (m, w) in mask.iter_mut().zip(all[r].cpus) {
                    *m |= w;
                }
            }
            let cpus: usize = mask.iter().map(|w| w.count_ones() as usize).sum();
            let over = members.len() > cpus.max(1);
            for &r in members {
                oversubscribed[r] = over;
            }
            if k > 0 && k < members.len() {
                let mut by_world = members.clone();
                by_world.sort_by_key(|&r| (all[r].world, r));
                for (pos, &r) in by_world.iter().enumerate() {
                    sub[r] = pos / k;
                }
            }
        }
        // Nodes, by their first (lowest) rank; ranks inside in communicator order.
        let mut keys: Vec<(usize, usize)> = Vec::new();
        let mut node_sizes = Vec::new();
        let mut place = Vec::with_capacity(n);
        for r in 0..n {
            let key = (host_of[r], sub[r]);
            let i = match keys.iter().position(|x| *x == key) {
                Some(i) => i,
                None => {
                    keys.push(key);
                    node_sizes.push(0);
                    keys.len() - 1
                }
            };
            place.push([i, node_sizes[i]]);
            node_sizes[i] += 1;
        }
        Layout {
            place,
            node_sizes,
            oversubscribed,
        }
    }

    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.node_sizes.len()
    }

    /// The communicator ranks of node `node`, by local rank.
    pub fn node_ranks(&self, node: usize) -> Vec<usize> {
        let mut v: Vec<(usize, usize)> = (0..self.place.len())
            .filter(|&r| self.place[r][0] == node)
            .map(|r| (self.place[r][1], r))
            .collect();
        v.sort_unstable();
        v.into_iter().map(|(_, r)| r).collect()
    }
}

/// A communicator's ranks grouped into nodes, with this rank's node's communicator
/// (ranks in communicator order, freed on drop). Made collectively by
/// [`NodeComm::new`]; `S` is the symbol set its calls use.
#[derive(Debug)]
pub struct NodeComm<S: Calls> {
    /// This rank in the communicator.
    pub rank: usize,
    /// The communicator's size.
    pub size: usize,
    /// How the ranks were grouped.
    pub nodes: Nodes,
    /// Every rank's node and local rank.
    pub layout: Layout,
    node_comm: MPI_Comm,
    _calls: PhantomData<S>,
}

// SAFETY: the node communicator is a process-wide MPI handle; whoever owns the
// NodeComm makes its calls, one thread at a time as MPI's thread level requires.
unsafe impl<S: Calls> Send for NodeComm<S> {}

impl<S: Calls> NodeComm<S> {
    /// Groups the ranks of `comm` into nodes as `nodes` says (collective over `comm`;
    /// every wait for the other ranks at most `bound`). Hosts are found with
    /// `MPI_COMM_TYPE_SHARED`; a host is known by its lowest `MPI_COMM_WORLD` rank.
    pub fn new(comm: MPI_Comm, nodes: Nodes, bound: Duration) -> Result<Self, MpiError> {
        if nodes == Nodes::Emulated(0) {
            return Err(MpiError::Invalid("emulated nodes of 0 ranks".into()));
        }
        let (rank, size) = rank_size::<S>(comm)?;
        let world = rank_size::<S>(comm_world())?.0 as u64;
        // Every rank is here before the blocking split (a rank that never comes makes
        // the others time out instead of hanging in it).
        barrier::<S>(comm, Some(bound))?;
        let mut host = split_shared::<S>(comm, rank as c_int)?;
        let host_key = allreduce_min::<S>(host, world, Some(bound));
        free::<S>(&mut host);
        let cpus = smelt_transport::allowed_cpus().unwrap_or_default();
        let me = Placed {
            host: host_key?,
            world,
            cpus: cpu_mask(&cpus),
        };
        let all: Vec<Placed> = allgather_words::<S>(comm, &me.words(), Some(bound))?
            .chunks_exact(PLACED_WORDS)
            .map(Placed::from_words)
            .collect();
        let layout = Layout::of(&all, nodes.k());
        let [node, _] = layout.place[rank];
        let node_comm = split::<S>(comm, node as c_int, rank as c_int)?;
        Ok(NodeComm {
            rank,
            size,
            nodes,
            layout,
            node_comm,
            _calls: PhantomData,
        })
    }

    /// The communicator of this rank's node (owned by this `NodeComm`).
    pub fn node_comm(&self) -> MPI_Comm {
        self.node_comm
    }

    /// This rank's node.
    pub fn node(&self) -> usize {
        self.layout.place[self.rank][0]
    }

    /// This rank's rank on its node (0: the node's leader).
    pub fn node_rank(&self) -> usize {
        self.layout.place[self.rank][1]
    }

    /// Ranks on this rank's node.
    pub fn node_size(&self) -> usize {
        self.layout.node_sizes[self.node()]
    }

    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.layout.nodes()
    }

    /// The node of rank `rank`.
    pub fn node_of(&self, rank: usize) -> Option<usize> {
        self.layout.place.get(rank).map(|p| p[0])
    }

    /// Whether this rank's host has more ranks than CPUs its ranks may use.
    pub fn oversubscribed(&self) -> bool {
        self.layout.oversubscribed[self.rank]
    }

    /// "4 ranks, 2 nodes (emulated nodes of 2 ranks)".
    pub fn describe(&self) -> String {
        format!(
            "{} ranks, {} nodes ({})",
            self.size,
            self.nodes(),
            self.nodes.describe()
        )
    }
}

impl<S: Calls> Drop for NodeComm<S> {
    fn drop(&mut self) {
        free::<S>(&mut self.node_comm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(host: u64, world: u64, cpus: &[u32]) -> Placed {
        Placed {
            host,
            world,
            cpus: cpu_mask(cpus),
        }
    }

    #[test]
    fn placed_round_trips_through_words() {
        let r = rec(u64::MAX - 3, 7, &[0, 63, 64, 1023, 5000]);
        assert_eq!(Placed::from_words(&r.words()), r);
        assert_eq!(r.cpus[15], 1 << 63);
    }

    #[test]
    fn one_host_is_one_node_in_communicator_order() {
        let all: Vec<Placed> = (0..4).map(|w| rec(9, 3 - w, &[0, 1])).collect();
        let l = Layout::of(&all, 0);
        assert_eq!(l.place, vec![[0, 0], [0, 1], [0, 2], [0, 3]]);
        assert_eq!(l.node_sizes, vec![4]);
        assert_eq!(l.oversubscribed, vec![true; 4]);
        assert_eq!(l.node_ranks(0), vec![0, 1, 2, 3]);
    }

    #[test]
    fn emulated_nodes_follow_world_ranks() {
        // Communicator ranks 0..4 are world ranks 0, 2, 1, 3 (even ones first).
        let all: Vec<Placed> = [0, 2, 1, 3]
            .iter()
            .map(|&w| rec(9, w, &[w as u32]))
            .collect();
        let l = Layout::of(&all, 2);
        assert_eq!(l.place, vec![[0, 0], [1, 0], [0, 1], [1, 1]]);
        assert_eq!(l.node_sizes, vec![2, 2]);
        assert_eq!(l.oversubscribed, vec![false; 4]);
        assert_eq!(l.node_ranks(1), vec![1, 3]);
        // Nodes of 3 and 1; k as large as the host: one node; k = 1: every rank alone.
        let all: Vec<Placed> = (0..4).map(|w| rec(9, w, &[0])).collect();
        assert_eq!(Layout::of(&all, 3).node_sizes, vec![3, 1]);
        assert_eq!(Layout::of(&all, 4).node_sizes, vec![4]);
        assert_eq!(Layout::of(&all, Nodes::MpiOnly.k()).node_sizes, vec![1; 4]);
    }

    #[test]
    fn hosts_are_nodes_numbered_by_first_rank() {
        let all: Vec<Placed> = [(5, 0), (8, 1), (5, 2), (8, 3), (7, 4)]
            .iter()
            .map(|&(h, w)| rec(h, w, &[w as u32]))
            .collect();
        let l = Layout::of(&all, 0);
        assert_eq!(l.place, vec![[0, 0], [1, 0], [0, 1], [1, 1], [2, 0]]);
        assert_eq!(l.node_sizes, vec![2, 2, 1]);
        assert_eq!(l.nodes(), 3);
    }

    #[test]
    fn nodes_from_a_count() {
        assert_eq!(Nodes::per_node(0), Nodes::Shared);
        assert_eq!(Nodes::per_node(2), Nodes::Emulated(2));
        assert_eq!(Nodes::Emulated(2).describe(), "emulated nodes of 2 ranks");
        assert_eq!(Nodes::Shared.k(), 0);
    }
}
