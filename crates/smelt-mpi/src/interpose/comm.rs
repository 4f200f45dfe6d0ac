//! One communicator's smelt state: its nodes, each node's smelt trees in shared memory,
//! the communicator of node leaders, and the hierarchical collectives over them.
//!
//! Every decision that changes which messages flow (smelt or MPI, which tree) is taken
//! from data every rank of the communicator (or of the node) has in common: the set-up
//! is agreed with `MPI_Allreduce`, per-call choices depend only on arguments MPI
//! requires to match (root, datatype signature size, datatype and operation of
//! reductions), and trees for new roots are made the same call on every rank of a node.

use super::config::{InterposeConfig, CUT_OFFS};
use super::ffi::{self, MPI_Comm, MPI_Datatype, MPI_Op, MpiErr, P};
use super::model;
use super::stats::{self, Why};
use crate::ops::Combine;
use smelt_mesh::mpi::{self as mesh_mpi, cpu_mask, hand_out, Layout, Placed};
use smelt_runtime::process::{join, GroupJob};
use smelt_runtime::{GroupConfig, GroupError, Member, WaitPolicy};
use smelt_tree::tuning::AlgorithmTable;
use smelt_tree::{Topology, Tree};
use std::os::raw::{c_int, c_void};
use std::sync::Arc;

/// Most trees (roots) one node keeps for one communicator: the leader's, and one per
/// other root used, made on first use. Past this, a root that is not the node's leader
/// hands its data to the leader over MPI first (memory stays bounded for programs that
/// use every rank as a root).
const MAX_TREES: usize = 16;
/// Tag of the leader <-> root forwarding messages (on the node communicator, which
/// only this crate uses).
const FORWARD_TAG: c_int = 0x5e17;

/// Why a hierarchical collective did not complete. Two words (smelt's error boxed):
/// the express lane's results then come back in registers. As a larger value they
/// were moved between stack slots with loads across their stores, which the store
/// buffer cannot forward: a stall of every call.
#[derive(Debug)]
pub enum Fail {
    /// smelt failed inside a node (a dead or failed peer, a timeout): the job is aborted.
    Smelt(Box<GroupError>),
    /// An MPI call returned an error: returned to the caller.
    Mpi(MpiErr),
}

impl From<MpiErr> for Fail {
    fn from(e: MpiErr) -> Fail {
        Fail::Mpi(e)
    }
}

impl From<GroupError> for Fail {
    #[cold]
    fn from(e: GroupError) -> Fail {
        Fail::Smelt(Box::new(e))
    }
}

const _: () = assert!(std::mem::size_of::<Result<(), Fail>>() <= 16);

/// What a reduction combines: `count` elements of `dt` under `op`, which smelt
/// computes inside a node with `combine` and leaders between nodes with `PMPI_*`.
#[derive(Clone, Copy)]
pub struct Reduction {
    pub count: c_int,
    pub dt: MPI_Datatype,
    pub op: MPI_Op,
    pub combine: Combine,
}

/// A call the express lane ran, remembered with what its checks found, so that the
/// same call again (programs repeat their calls, back to back in a loop) runs with one
/// compare of its arguments instead of the checks: the hot lane
/// ([`Hier::hot_bcast`] and the others). What the checks depend on besides the
/// arguments is fixed once they passed: the cut-offs, a decided route (decisions are
/// final), the node layout, predefined datatypes and operations (never freed); the
/// tree is looked at again on every call.
#[derive(Clone, Copy)]
pub struct HotCall {
    /// The arguments that must match ([`hot_key`]).
    key: [usize; 3],
    /// The tree's local root (its index in `trees`).
    local: usize,
    len: usize,
    is_root: bool,
    combine: Combine,
}

/// The hot lane's calls of a communicator: the last two broadcasts and reductions
/// (programs that rotate the root, as pipelined factorizations and benchmarks do,
/// alternate between roots), the last allreduce.
#[derive(Clone, Copy, Default)]
pub struct Hot {
    bcast: Two,
    reduce: Two,
    allreduce: Option<HotCall>,
    /// The barrier runs on the leader's tree (one node, smelt's route decided).
    barrier: bool,
    allgather: Option<HotGather>,
}

/// An `MPI_Allgather` of predefined datatypes the general path ran through smelt,
/// remembered for the hot lane ([`Hier::hot_allgather`]).
#[derive(Clone, Copy)]
pub struct HotGather {
    /// Send datatype, receive datatype, and the two counts ([`hot_key`]'s layout).
    key: [usize; 3],
    /// Bytes of one rank's block.
    pub k: usize,
    /// Where the receive buffer's data starts (a dense datatype's offset).
    pub roff: isize,
    /// Where the send buffer's data starts; `None`: the call was in place and the send
    /// side was not looked at.
    pub soff: Option<isize>,
}

/// The last two [`HotCall`]s of a kind, the latest first.
#[derive(Clone, Copy, Default)]
struct Two([Option<HotCall>; 2]);

impl Two {
    /// The remembered call with arguments `key`.
    #[inline(always)]
    fn find(&self, key: &[usize; 3]) -> Option<&HotCall> {
        match &self.0 {
            [Some(c), _] if same_key(&c.key, key) => Some(c),
            [_, Some(c)] if same_key(&c.key, key) => Some(c),
            _ => None,
        }
    }

    /// Remembers `call` as the latest (the other one stays unless it has the same
    /// arguments).
    #[inline(always)]
    fn put(&mut self, call: HotCall) {
        if !matches!(&self.0[0], Some(c) if same_key(&c.key, &call.key)) {
            self.0[1] = self.0[0];
        }
        self.0[0] = Some(call);
    }
}

/// The arguments a [`HotCall`] is remembered by: datatype, operation (0 for a
/// broadcast), and count with root (0 for an allreduce).
#[inline(always)]
pub fn hot_key(dt: MPI_Datatype, op: usize, count: c_int, root: c_int) -> [usize; 3] {
    [
        dt.0 as usize,
        op,
        ((count as u32 as usize) << 32) | root as u32 as usize,
    ]
}

/// True if two [`hot_key`]s are the same: word by word, in registers. The arrays'
/// `==` was compiled to 16-byte loads of the caller's key from the stack, right
/// after its 8-byte stores: a load the store buffer cannot forward, which waits for
/// the stores to reach the cache (on every call of the hot lane).
#[inline(always)]
fn same_key(a: &[usize; 3], b: &[usize; 3]) -> bool {
    ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2])) == 0
}

/// The combine of a broadcast's [`HotCall`] (it combines nothing).
fn no_combine(_: &mut [u8], _: &[u8]) {}

/// Whether smelt runs this communicator's collectives.
pub enum Takeover {
    /// Not set up yet: this many collective calls went to MPI so far
    /// (`SMELT_MPI_SETUP_AFTER`).
    Warming(u64),
    /// Everything goes to MPI, for this reason.
    Off(Why),
    /// Hierarchical collectives.
    On(Box<Hier>),
}

enum Slot {
    Untried,
    Ready(Box<Member>),
    Unavailable,
}

/// The hierarchy of a communicator: nodes (ranks sharing memory, or emulated nodes of
/// `SMELT_RANKS_PER_NODE` ranks), smelt trees inside each node, MPI between leaders.
pub struct Hier {
    pub rank: usize,
    pub size: usize,
    node: MPI_Comm,
    node_rank: usize,
    node_size: usize,
    /// Node leaders (node rank 0 of each node; rank in it = node index); null elsewhere.
    leaders: MPI_Comm,
    n_nodes: usize,
    my_node: usize,
    /// For each rank of the communicator: its node and its rank in that node.
    place: Vec<[c_int; 2]>,
    /// Ranks per node, by node.
    node_sizes: Vec<usize>,
    /// Where each node starts in node-major order (nodes by index, ranks by local rank):
    /// the order the leaders' `MPI_Gatherv`/`MPI_Scatterv` move the ranks' parts in.
    node_off: Vec<usize>,
    /// True when node-major order is rank order (nodes of consecutive ranks).
    node_major_is_rank_order: bool,
    /// This node's trees by local root.
    trees: Vec<Slot>,
    /// The key of the job of the leader's tree (`trees[0]`), by which the node's ranks
    /// find it again in their [`SPARES`] for the next communicator of the same node.
    leader_job: Option<String>,
    /// On a node's leader: the kind of node its trees were decided for ([`decide`]).
    kind: Option<Kind>,
    /// The leader's tree was a freed communicator's ([`Spare`]).
    reused: bool,
    made: usize,
    topology: Topology,
    /// The node's model (leader only; `None`: uniform): position `i` is local rank `i`.
    model: Option<smelt_model::Model>,
    /// With `auto` (leader only): the algorithms the node's jobs run for the barrier
    /// and the allreduce (dissemination, recursive doubling) and the tuned fragment
    /// sizes; the members read it from the job.
    algorithms: Option<Arc<AlgorithmTable>>,
    /// The nodes' groups' links (with the wait policy chosen).
    link: smelt_runtime::LinkConfig,
    /// Largest message smelt takes for MPI_Bcast, MPI_Reduce, MPI_Allreduce,
    /// MPI_Gather, MPI_Scatter (the smallest cut-offs of any rank).
    pub max_bytes: [usize; CUT_OFFS],
    /// Smelt's path or MPI's, per call and size, as measured on this communicator.
    pub routes: super::route::Routes,
    /// The datatypes and operations of its last calls, looked up.
    pub kinds: super::Kinds,
    /// The express lane's last calls, for the hot lane.
    hot: Hot,
    scratch: Vec<u8>,
}

impl Drop for Hier {
    fn drop(&mut self) {
        // The leader's tree is kept for the node's next communicator (every rank of the
        // node keeps its end; they reuse it only if all still have it).
        if let Some(job) = self.leader_job.take() {
            if let Slot::Ready(member) = std::mem::replace(&mut self.trees[0], Slot::Unavailable) {
                spare(Spare {
                    job,
                    local: self.node_rank,
                    size: self.node_size,
                    kind: self.kind.take(),
                    member,
                });
            }
        }
        // Leave the trees first (a member process's rings), then the communicators.
        self.trees.clear();
        mesh_mpi::free::<P>(&mut self.node);
        mesh_mpi::free::<P>(&mut self.leaders);
    }
}

/// What a node leader's decisions depend on ([`decide`]): the node's CPUs by local
/// rank and whether its host is oversubscribed (the settings are the process's).
type Kind = (Vec<Option<u32>>, bool);

/// A leader's tree kept after its communicator was freed: this rank's end of it, to be
/// reused by the next communicator of the same node instead of making and joining a new
/// shared-memory job (which costs more than the rest of a set-up).
struct Spare {
    /// The job's key (the same on every rank of the node).
    job: String,
    /// This rank's rank in the node, and the node's size.
    local: usize,
    size: usize,
    /// On the leader: the kind of node the job was decided for.
    kind: Option<Kind>,
    member: Box<Member>,
}

/// Spare trees kept per process (a few: each holds a mapping and a descriptor).
const MAX_SPARES: usize = 4;

/// This process's spare trees, oldest first.
static SPARES: std::sync::Mutex<Vec<Spare>> = std::sync::Mutex::new(Vec::new());

fn spares() -> std::sync::MutexGuard<'static, Vec<Spare>> {
    SPARES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Keeps `s` for a later communicator, dropping the oldest spare past [`MAX_SPARES`].
fn spare(s: Spare) {
    let old = {
        let mut v = spares();
        v.push(s);
        (v.len() > MAX_SPARES).then(|| v.remove(0))
    };
    drop(old);
}

/// Takes the spare that `pick` chooses out of this process's spares.
fn take_spare(pick: impl Fn(&Spare) -> bool) -> Option<Spare> {
    let mut v = spares();
    let i = v.iter().position(pick)?;
    Some(v.remove(i))
}

/// Drops every spare tree (at MPI_Finalize).
pub fn drop_spares() {
    let all = std::mem::take(&mut *spares());
    drop(all);
}

/// The tree of a node of `n` ranks rooted at local rank `root`: member `i` is local
/// rank `i`. With the node's `model` (position `i`: local rank `i`'s CPU) the members
/// are the ranks' CPUs and the costs the model's; without, a uniform model whose
/// made-up CPU ids are the local ranks (MPI ranks are never pinned by smelt either way).
fn node_tree(
    n: usize,
    root: usize,
    topo: Topology,
    model: Option<&smelt_model::Model>,
) -> Result<Tree, String> {
    model::with_node_model(n, model, |m, members| topo.generate(m, members, Some(root)))
        .map_err(|e| format!("tree for a node of {n} ranks: {e}"))
}

/// A broadcast over `m`'s tree: up to 8 bytes travel as one word (the channel's
/// zero-copy path), more as a byte message. Every member takes the same path: the
/// length is the same on all (MPI's matching signatures).
fn tree_bcast(m: &mut Member, buf: &mut [u8]) -> Result<(), GroupError> {
    if buf.len() <= 8 {
        let got = m.broadcast_word(word_of(buf))?;
        set_word(buf, got);
        return Ok(());
    }
    m.broadcast_into(buf)
}

/// Up to 8 bytes as a word (zero-filled; the common 8 without a variable-length copy).
#[inline(always)]
fn word_of(b: &[u8]) -> u64 {
    match <[u8; 8]>::try_from(b) {
        Ok(w) => u64::from_ne_bytes(w),
        Err(_) => {
            let mut w = [0u8; 8];
            w[..b.len()].copy_from_slice(b);
            u64::from_ne_bytes(w)
        }
    }
}

/// The first `b.len()` (at most 8) bytes of `w` into `b`.
#[inline(always)]
fn set_word(b: &mut [u8], w: u64) {
    let x = w.to_ne_bytes();
    match <&mut [u8; 8]>::try_from(&mut *b) {
        Ok(all) => *all = x,
        Err(_) => b.copy_from_slice(&x[..b.len()]),
    }
}

/// A reduction to `m`'s root: up to 8 bytes travel as one word, more as a byte
/// message. As in [`tree_bcast`], every member takes the same path.
fn tree_reduce(m: &mut Member, acc: &mut [u8], combine: Combine) -> Result<(), GroupError> {
    let n = acc.len();
    if n <= 8 {
        let op = |a: u64, b: u64| {
            let (mut x, y) = (a.to_ne_bytes(), b.to_ne_bytes());
            combine(&mut x[..n], &y[..n]);
            u64::from_ne_bytes(x)
        };
        if let Some(r) = m.reduce(word_of(acc), op)? {
            set_word(acc, r);
        }
        return Ok(());
    }
    m.reduce_bytes(acc, combine).map(|_| ())
}

/// `acc[i] |= x[i]` for every byte: the combine of the gathers built on an allreduce.
fn bor_bytes(acc: &mut [u8], x: &[u8]) {
    for (a, b) in acc.iter_mut().zip(x) {
        *a |= *b;
    }
}

/// The express lane's largest broadcast and reduction: the runtime's small message
/// (four channel slots, 192 bytes), received on the stack there too.
pub const SMALL: usize = smelt_runtime::SMALL_MESSAGE_BYTES;

/// A reduction of `src` (at most [`SMALL`] bytes) run by `f` on a copy on the stack
/// (no staging buffer to fill); on the root the result goes to `recv`.
///
/// # Safety
/// On the root `recv` is writable for `src.len()` bytes.
#[inline(always)]
unsafe fn reduce_on_stack(
    src: &[u8],
    recv: *mut u8,
    is_root: bool,
    f: impl FnOnce(&mut [u8]) -> Result<(), Fail>,
) -> Result<(), Fail> {
    let len = src.len();
    if len <= 8 {
        // A word's worth: a fixed-size copy each way.
        let mut word = word_of(src).to_ne_bytes();
        let r = f(&mut word[..len]);
        if r.is_ok() && is_root {
            // SAFETY: the caller's guarantee.
            unsafe { copy_out(&word[..len], recv) };
        }
        return r;
    }
    let mut part = [0u8; SMALL];
    part[..len].copy_from_slice(src);
    let r = f(&mut part[..len]);
    if r.is_ok() && is_root {
        // SAFETY: the caller's guarantee.
        unsafe { copy_out(&part[..len], recv) };
    }
    r
}

/// `src` to `dst` (8 bytes, the common case, as one unaligned store).
///
/// # Safety
/// `dst` is writable for `src.len()` bytes and does not overlap `src`.
#[inline(always)]
unsafe fn copy_out(src: &[u8], dst: *mut u8) {
    match <[u8; 8]>::try_from(src) {
        // SAFETY: the caller's guarantee (8 bytes).
        Ok(w) => unsafe { dst.cast::<[u8; 8]>().write_unaligned(w) },
        // SAFETY: the caller's guarantee.
        Err(_) => unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) },
    }
}

/// Whether a communicator is one smelt can never take, decided locally (the same on
/// every rank, without communication): `Some(why)` for an intercommunicator or a
/// communicator of one rank.
pub fn never(comm: MPI_Comm) -> Result<Option<Why>, MpiErr> {
    if mesh_mpi::is_inter::<P>(comm)? {
        return Ok(Some(Why::Intercomm));
    }
    Ok((mesh_mpi::rank_size::<P>(comm)?.1 <= 1).then_some(Why::OneRank))
}

/// Sets up smelt for `comm` (collective over `comm`; every rank gets the same mode).
pub fn setup(comm: MPI_Comm, cfg: &InterposeConfig) -> Result<Takeover, MpiErr> {
    let off = Takeover::Off;
    if let Some(why) = never(comm)? {
        return Ok(off(why));
    }
    let (rank, size) = mesh_mpi::rank_size::<P>(comm)?;
    // One allgather tells every rank everything the layout needs: each rank's host,
    // MPI_COMM_WORLD rank, bound CPU, cut-offs and allowed CPUs. Every rank computes
    // the same layout from it (no further agreement).
    let allowed = smelt_transport::allowed_cpus().unwrap_or_default();
    let mine = Record {
        host: host_id(),
        world: mesh_mpi::rank_size::<P>(ffi::comm_world())?.0 as i64,
        cpu: match allowed[..] {
            [c] => c as i64,
            _ => -1,
        },
        max_bytes: cfg.max_bytes.map(|m| m as i64),
        mask: cpu_mask(&allowed),
        force: cfg.force,
        measure: if cfg.force { 0 } else { cfg.measure as u64 },
    };
    let all: Vec<Record> = mesh_mpi::allgather_words::<P>(comm, &mine.words(), None)?
        .chunks_exact(RECORD_WORDS)
        .map(Record::from_words)
        .collect();
    debug_assert_eq!(all.len(), size);
    let placed: Vec<Placed> = all
        .iter()
        .map(|r| Placed {
            host: r.host,
            world: r.world.max(0) as u64,
            cpus: r.mask,
        })
        .collect();
    let lay = Layout::of(&placed, cfg.ranks_per_node);
    // Every rank uses the smallest cut-offs any rank has.
    let mut max_bytes = [usize::MAX; CUT_OFFS];
    for r in &all {
        for (m, &b) in max_bytes.iter_mut().zip(&r.max_bytes) {
            *m = (*m).min(b.max(0) as usize);
        }
    }
    // Every rank measures as few trials as any rank (all must decide at the same call).
    let trials = all.iter().map(|r| r.measure).min().unwrap_or(0) as usize;
    let n_nodes = lay.node_sizes.len();
    if n_nodes == size {
        return Ok(off(Why::OneRankPerNode));
    }
    // Several nodes of at most 2 ranks: the hierarchy (node, leaders, node) adds a
    // step to MPI's own and takes little off it (measured: docs/mpi.md), so MPI runs
    // the communicator unless every rank forces smelt (SMELT_MPI_FORCE).
    let forced = all.iter().all(|r| r.force);
    if n_nodes > 1 && lay.node_sizes.iter().all(|&s| s <= 2) && !forced {
        return Ok(off(Why::NoGain));
    }
    // More ranks than CPUs on a host: every rank must be scheduled once per broadcast
    // either way, and smelt's flat tree orders them no better than MPI's binomial one
    // (measured 0.76-0.99× on 4 and 8 ranks on 2 CPUs): broadcasts go to MPI. (Every
    // rank sees every host's layout, so all decide alike.)
    if lay.oversubscribed.iter().any(|&o| o) && !forced {
        max_bytes[0] = 0;
    }
    let place: Vec<[c_int; 2]> = lay.place.iter().map(|p| p.map(|x| x as c_int)).collect();
    let [my_node, node_rank] = place[rank].map(|x| x as usize);
    let node_size = lay.node_sizes[my_node];
    let oversubscribed = lay.oversubscribed[rank];
    let k = cfg.ranks_per_node;
    // The node's communicator (ranks in communicator order, as `place` numbers them)
    // and, with several nodes, the leaders' (node index = rank among the leaders).
    let node = mesh_mpi::split::<P>(comm, my_node as c_int, rank as c_int)?;
    let leaders = if n_nodes > 1 {
        let color = if node_rank == 0 { 0 } else { ffi::undefined() };
        mesh_mpi::split::<P>(comm, color, rank as c_int)?
    } else {
        ffi::comm_null()
    };
    let node_sizes = lay.node_sizes;
    // The node's model: the leader decides from the CPU each rank is bound to (it
    // alone builds the node's trees; the others join them).
    let node_cpus: Vec<Option<u32>> = (0..size)
        .filter(|&r| place[r][0] as usize == my_node)
        .map(|r| u32::try_from(all[r].cpu).ok())
        .collect();
    let decided =
        (node_rank == 0 && node_size > 1).then(|| decide(&node_cpus, oversubscribed, cfg));
    let node_off: Vec<usize> = node_sizes
        .iter()
        .scan(0, |at, &s| {
            let o = *at;
            *at += s;
            Some(o)
        })
        .collect();
    let node_major_is_rank_order = place
        .iter()
        .enumerate()
        .all(|(r, p)| node_off[p[0].max(0) as usize] + p[1].max(0) as usize == r);

    let d = decided.unwrap_or_else(|| Decided::placeholder(oversubscribed, cfg));
    let mut h = Hier {
        rank,
        size,
        node,
        node_rank,
        node_size,
        leaders,
        n_nodes,
        my_node,
        place,
        node_sizes,
        node_off,
        node_major_is_rank_order,
        trees: (0..node_size).map(|_| Slot::Untried).collect(),
        leader_job: None,
        reused: false,
        kind: (node_rank == 0 && node_size > 1).then(|| (node_cpus.clone(), oversubscribed)),
        made: 0,
        topology: d.topology,
        algorithms: d.algorithms.clone(),
        model: d.model.clone(),
        link: smelt_runtime::LinkConfig {
            wait: Some(cfg.link.wait_or(if oversubscribed {
                WaitPolicy::OVERSUBSCRIBED
            } else {
                WaitPolicy::DEDICATED
            })),
            ..cfg.link
        },
        max_bytes,
        routes: super::route::Routes::new(comm, size, trials),
        kinds: super::Kinds::default(),
        hot: Hot::default(),
        scratch: Vec::new(),
    };
    // Every node of more than one rank makes its leader's tree; all or none.
    let local = if node_size > 1 {
        h.make_tree(0)?
    } else {
        Ok(())
    };
    // On one node, making the tree agreed already among all the ranks.
    let ok = if n_nodes > 1 {
        mesh_mpi::all::<P>(comm, local.is_ok(), None)?
    } else {
        local.is_ok()
    };
    if !ok {
        let why = match local {
            Err(e) => e,
            Ok(()) => "on another node".into(),
        };
        if cfg.verbose {
            stats::say(&format!(
                "rank {rank}: set-up failed ({why}); this communicator runs on MPI"
            ));
        }
        stats::note(format!("set-up failed: {why}"));
        return Ok(off(Why::SetupFailed));
    }
    stats::set_up(h.reused);
    if rank == 0 {
        stats::note(format!(
            "communicator of {size} ranks: {n_nodes} node(s){}, {node_size} rank(s) on rank 0's node{}, tree {} ({}), {} wait, cut-offs {}/{}/{}/{}/{} bytes (bcast/reduce/allreduce/gather/scatter), {}/{}/{}/{} (allgather/scan/reduce_scatter_block/alltoall, whole result)",
            if h.node_major_is_rank_order { "" } else { " of ranks not in rank order" },
            if k > 0 { format!(" (SMELT_RANKS_PER_NODE={k})") } else { String::new() },
            h.topology,
            d.tree_from,
            if oversubscribed { "oversubscribed" } else { "dedicated" },
            max_bytes[0],
            max_bytes[1],
            max_bytes[2],
            max_bytes[3],
            max_bytes[4],
            max_bytes[5],
            max_bytes[6],
            max_bytes[7],
            max_bytes[8],
        ));
        if let Some(m) = &d.describe {
            stats::note(format!("tree model on rank 0's node: {m}"));
        }
        if let Some(t) = &h.algorithms {
            use smelt_tree::{tuning::SyncMode, Op};
            let say = |op, bytes| {
                t.lookup(SyncMode::Loose, op, bytes)
                    .map_or("the tree".to_string(), |a| a.to_string())
            };
            stats::note(format!(
                "auto on rank 0's node: barrier by {}, 8-byte allreduce by {}",
                say(Op::Barrier, 0),
                say(Op::Allreduce, 8)
            ));
        }
    }
    Ok(Takeover::On(Box::new(h)))
}

/// Words of one rank's [`Record`] in the set-up's allgather.
const RECORD_WORDS: usize = MASK + 16 + 2;
/// Where a record's CPU mask starts (after host, world rank, CPU and cut-offs).
const MASK: usize = 3 + CUT_OFFS;

/// What one rank tells the others at set-up.
struct Record {
    /// Its host ([`host_id`]).
    host: u64,
    /// Its rank in MPI_COMM_WORLD.
    world: i64,
    /// The CPU it is bound to, or -1 (not bound to exactly one).
    cpu: i64,
    /// Its cut-offs (`SMELT_MPI_MAX_BYTES`).
    max_bytes: [i64; CUT_OFFS],
    /// The CPUs it may run on ([`cpu_mask`]).
    mask: [u64; 16],
    /// `SMELT_MPI_FORCE`.
    force: bool,
    /// `SMELT_MPI_MEASURE` (0 where forced).
    measure: u64,
}

impl Record {
    /// As words for the allgather (signed values two's complement).
    fn words(&self) -> [u64; RECORD_WORDS] {
        let mut w = [0u64; RECORD_WORDS];
        w[0] = self.host;
        w[1] = self.world as u64;
        w[2] = self.cpu as u64;
        for (x, m) in w[3..MASK].iter_mut().zip(self.max_bytes) {
            *x = m as u64;
        }
        w[MASK..MASK + 16].copy_from_slice(&self.mask);
        w[MASK + 16] = self.force as u64;
        w[MASK + 17] = self.measure;
        w
    }

    fn from_words(w: &[u64]) -> Record {
        let mut max_bytes = [0i64; CUT_OFFS];
        for (m, &x) in max_bytes.iter_mut().zip(&w[3..MASK]) {
            *m = x as i64;
        }
        let mut mask = [0u64; 16];
        mask.copy_from_slice(&w[MASK..MASK + 16]);
        Record {
            host: w[0],
            world: w[1] as i64,
            cpu: w[2] as i64,
            max_bytes,
            mask,
            force: w[MASK + 16] != 0,
            measure: w[MASK + 17],
        }
    }
}

/// This process's host, as a number every process of the host computes alike (and
/// processes of other hosts, almost surely, do not): a hash of the host name and the
/// kernel's boot id. Ranks whose shared memory turns out not to be shared (a container
/// of its own with the same name and boot) fail to join at set-up, and the
/// communicator runs on MPI.
fn host_id() -> u64 {
    static ID: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *ID.get_or_init(|| {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
        let name = smelt_model::host::host_name();
        // FNV-1a, 64 bits.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in name.bytes().chain([0]).chain(boot.trim().bytes()) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h
    })
}

/// A node leader's decisions for its node's trees: the model, the tree and (auto) the
/// algorithm table. They depend only on the node's size and CPUs and the settings, so
/// each process decides once per kind of node and reuses it for every communicator
/// (a communicator's set-up then reads no file).
#[derive(Clone)]
struct Decided {
    model: Option<smelt_model::Model>,
    /// For the summary: where the model comes from (`None`: not decided here).
    describe: Option<String>,
    topology: Topology,
    tree_from: String,
    algorithms: Option<Arc<AlgorithmTable>>,
}

impl Decided {
    /// What a rank that is not a leader of a node of 2 or more keeps (it joins the
    /// leader's trees and never builds one).
    fn placeholder(oversubscribed: bool, cfg: &InterposeConfig) -> Decided {
        let topology = match cfg.tree {
            Some(t) => t,
            None if oversubscribed => Topology::Sequential,
            None => Topology::AdaptiveSorted,
        };
        Decided {
            model: None,
            describe: None,
            topology,
            tree_from: "auto".into(),
            algorithms: None,
        }
    }
}

/// The leader's [`Decided`] for a node of `cpus.len()` ranks bound to `cpus` (by local
/// rank), remembered per process.
fn decide(cpus: &[Option<u32>], oversubscribed: bool, cfg: &InterposeConfig) -> Decided {
    type Key = (Vec<Option<u32>>, bool);
    static SEEN: std::sync::Mutex<Vec<(Key, Decided)>> = std::sync::Mutex::new(Vec::new());
    let key = (cpus.to_vec(), oversubscribed);
    if let Some((_, d)) = SEEN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|(k, _)| *k == key)
    {
        return d.clone();
    }
    let n = cpus.len();
    let node_model = model::for_node(cpus, cfg.model.as_deref(), cfg.verbose);
    let m = node_model.model.as_ref();
    // An explicit SMELT_MPI_TREE name wins; `auto` (the default, and what a value
    // that names no tree gives) takes the host's tuning file (`smelt tune`) where the
    // leader finds a usable one.
    let (topology, tree_from) = match cfg.tree {
        Some(t) => (t, "SMELT_MPI_TREE".to_string()),
        None if oversubscribed => (
            Topology::Sequential,
            "more ranks than CPUs: flat".to_string(),
        ),
        None => model::auto_tree(n, m, cfg.verbose),
    };
    let algorithms = if cfg.tree.is_none() && !oversubscribed {
        model::auto_algorithms(n, m, cfg.verbose)
    } else {
        None
    };
    let d = Decided {
        model: node_model.model,
        describe: Some(node_model.describe),
        topology,
        tree_from,
        algorithms,
    };
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if seen.len() < 16 {
        seen.push((key, d.clone()));
    }
    d
}

impl Hier {
    /// Trees made for this communicator so far (a new root's tree is made on first use).
    pub fn trees_made(&self) -> usize {
        self.made
    }

    /// The communicator ranks of this node, by local rank.
    pub fn node_ranks(&self) -> Vec<usize> {
        let mut v: Vec<(c_int, usize)> = (0..self.size)
            .filter(|&r| self.place[r][0] as usize == self.my_node)
            .map(|r| (self.place[r][1], r))
            .collect();
        v.sort_unstable();
        v.into_iter().map(|(_, r)| r).collect()
    }

    /// Makes this node's tree rooted at local rank `root` (collective over the node):
    /// the leader creates the shared memory and announces it, every rank joins, and the
    /// node agrees that all joined. `Err` (the same on every rank of the node) when it
    /// could not be made. The leader's tree (`root` 0) is first looked for among the
    /// spares a freed communicator of the same node left ([`Spare`]): the leader offers
    /// one, and the node takes it if every rank still has its end of it (else the
    /// ranks that took theirs put them back, and a new job is made).
    fn make_tree(&mut self, root: usize) -> Result<Result<(), String>, MpiErr> {
        /// What a rank got from the leader's address.
        enum Got {
            /// Its end of a freed communicator's tree (the address was `=key`).
            Spare(Spare),
            /// Its end of a new job (`+path\nkey`), and the job's key.
            Joined(Member, String),
        }
        let mut may_reuse = root == 0;
        loop {
            let mut job = None;
            let mut offered = None;
            let (me, n) = (self.node_rank, self.node_size);
            let offer = (me == 0).then(|| {
                if may_reuse {
                    let kind = self.kind.as_ref();
                    offered =
                        take_spare(|s| s.local == 0 && s.size == n && s.kind.as_ref() == kind);
                }
                match &offered {
                    Some(s) => Ok(format!("={}", s.job)),
                    None => {
                        let cfg = GroupConfig {
                            link: self.link,
                            algorithms: self.algorithms.clone(),
                            ..GroupConfig::default()
                        };
                        let made = node_tree(n, root, self.topology, self.model.as_ref())
                            .and_then(|t| GroupJob::create(&[t], &cfg).map_err(|e| e.to_string()));
                        let address = match &made {
                            Ok(j) => Ok(format!("+{}\n{}", j.path().display(), j.key())),
                            Err(e) => Err(e.clone()),
                        };
                        job = made.ok();
                        address
                    }
                }
            });
            let reusing = std::cell::Cell::new(false);
            let out = hand_out::<P, _>(
                self.node,
                offer,
                |address| match address.strip_prefix('=') {
                    Some(key) => {
                        reusing.set(true);
                        offered
                            .take()
                            .or_else(|| {
                                take_spare(|s| s.job == key && s.local == me && s.size == n)
                            })
                            .map(Got::Spare)
                            .ok_or_else(|| "no spare tree".to_string())
                    }
                    None => {
                        let (path, key) = address
                            .strip_prefix('+')
                            .and_then(|t| t.split_once('\n'))
                            .ok_or_else(|| "a malformed shared-memory address".to_string())?;
                        join(std::path::Path::new(path), key, smelt_runtime::Rank(me))
                            .map(|m| Got::Joined(m, key.to_string()))
                            .map_err(|e| format!("rank {me} could not join: {e}"))
                    }
                },
                None,
            )?;
            // Every rank has attached (or given up): the name can go.
            drop(job);
            if reusing.get() {
                match out.mine {
                    Ok(Got::Spare(s)) if out.all => {
                        self.trees[0] = Slot::Ready(s.member);
                        self.leader_job = Some(s.job);
                        self.reused = true;
                        return Ok(Ok(()));
                    }
                    // Another rank no longer has its end: put this one back and make a
                    // new job.
                    Ok(Got::Spare(s)) => spare(s),
                    _ => {}
                }
                may_reuse = false;
                continue;
            }
            return Ok(match out.agreed() {
                Ok(Got::Joined(m, key)) => {
                    self.trees[root] = Slot::Ready(Box::new(m));
                    if root == 0 {
                        self.leader_job = Some(key);
                    }
                    Ok(())
                }
                Ok(Got::Spare(s)) => {
                    // Not reached: a spare comes only from an `=` address.
                    spare(s);
                    self.trees[root] = Slot::Unavailable;
                    Err("a spare tree where a new one was made".into())
                }
                Err(e) => {
                    self.trees[root] = Slot::Unavailable;
                    Err(e.to_string())
                }
            });
        }
    }

    /// The node's tree rooted at local rank `root`, made on first use (every rank of the
    /// node calls this for the same roots in the same order); `None` if it cannot be
    /// had.
    fn tree(&mut self, root: usize) -> Result<Option<&mut Member>, MpiErr> {
        if matches!(self.trees[root], Slot::Untried) {
            if self.made + 1 >= MAX_TREES {
                self.trees[root] = Slot::Unavailable;
            } else {
                self.made += 1;
                if let Err(e) = self.make_tree(root)? {
                    stats::note(format!(
                        "no tree for local root {root} ({e}); its data goes through the leader"
                    ));
                }
            }
        }
        Ok(match &mut self.trees[root] {
            Slot::Ready(m) => Some(&mut **m),
            _ => None,
        })
    }

    /// The leader's tree (made at set-up on every node of more than one rank).
    fn leader_tree(&mut self) -> &mut Member {
        match &mut self.trees[0] {
            Slot::Ready(m) => m,
            _ => unreachable!("set-up made the leader's tree"),
        }
    }

    /// Broadcast inside this node from local rank `root`; `buf` is the data on the root
    /// and is overwritten elsewhere.
    fn node_bcast(&mut self, root: usize, buf: &mut [u8]) -> Result<(), Fail> {
        if root != 0 {
            if let Some(m) = self.tree(root)? {
                return Ok(tree_bcast(m, buf)?);
            }
            if self.node_rank == root {
                ffi::send_bytes(buf, 0, FORWARD_TAG, self.node)?;
            } else if self.node_rank == 0 {
                ffi::recv_bytes(buf, root, FORWARD_TAG, self.node)?;
            }
        }
        Ok(tree_bcast(self.leader_tree(), buf)?)
    }

    /// `MPI_Bcast` of `len` bytes at `data` from `root` (a rank of the communicator).
    ///
    /// # Safety
    /// `data` is valid for reads of `len` bytes on the root, and for writes elsewhere.
    pub unsafe fn bcast(&mut self, data: *mut u8, len: usize, root: usize) -> Result<(), Fail> {
        let [rnode, rlocal] = self.place[root].map(|x| x as usize);
        let is_root = self.rank == root;
        if !is_root {
            // The caller guarantees `data` is writable for `len` bytes and MPI
            // gives this call the buffer for its duration.
            // SAFETY: as argued in the lines above.
            let buf = unsafe { std::slice::from_raw_parts_mut(data, len) };
            return self.bcast_hier(buf, rnode, rlocal);
        }
        // The root's buffer is only read (it may be read-only memory): it is copied (a
        // word's worth onto the stack, more into scratch) and sent from there.
        // SAFETY: the caller guarantees `data` is readable for `len` bytes.
        let src = unsafe { std::slice::from_raw_parts(data, len) };
        if len <= 8 {
            let mut word = word_of(src).to_ne_bytes();
            return self.bcast_hier(&mut word[..len], rnode, rlocal);
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        scratch.extend_from_slice(src);
        let r = self.bcast_hier(&mut scratch, rnode, rlocal);
        self.scratch = scratch;
        r
    }

    fn bcast_hier(&mut self, buf: &mut [u8], rnode: usize, rlocal: usize) -> Result<(), Fail> {
        if self.my_node == rnode && self.node_size > 1 {
            self.node_bcast(rlocal, buf)?;
        }
        if self.n_nodes > 1 && self.node_rank == 0 {
            mesh_mpi::bcast_bytes::<P>(self.leaders, buf, rnode, None).map_err(MpiErr::from)?;
        }
        if self.my_node != rnode && self.node_size > 1 {
            tree_bcast(self.leader_tree(), buf)?;
        }
        Ok(())
    }

    /// `MPI_Reduce` of `red` (`len` bytes) to `root`: `input` is this rank's
    /// contribution, `recv` the root's result buffer. Inside a node smelt combines with
    /// `red.combine`; between nodes leaders run `PMPI_Reduce` with `red.dt` and `red.op`.
    ///
    /// # Safety
    /// `input` is readable for `len` bytes; on the root, `recv` is writable for `len`
    /// bytes (it may be `input`, for MPI_IN_PLACE).
    pub unsafe fn reduce(
        &mut self,
        input: *const u8,
        recv: *mut u8,
        len: usize,
        red: Reduction,
        root: usize,
    ) -> Result<(), Fail> {
        let [rnode, rlocal] = self.place[root].map(|x| x as usize);
        let is_root = self.rank == root;
        // SAFETY: the caller guarantees `input` is readable for `len` bytes.
        let src = unsafe { std::slice::from_raw_parts(input, len) };
        if len <= SMALL {
            // One slot's worth: combined on the stack, no staging buffer to fill.
            // SAFETY: the caller guarantees `recv` is writable for `len` bytes on the root.
            return unsafe {
                reduce_on_stack(src, recv, is_root, |acc| {
                    self.reduce_hier(acc, red, rnode, rlocal)
                })
            };
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        scratch.extend_from_slice(src);
        let r = self.reduce_hier(&mut scratch, red, rnode, rlocal);
        if r.is_ok() && is_root {
            // The caller guarantees `recv` is writable for `len` bytes on the
            // root; `scratch` is this crate's own buffer, so they do not overlap.
            // SAFETY: as argued in the lines above.
            unsafe { std::ptr::copy_nonoverlapping(scratch.as_ptr(), recv, len) };
        }
        self.scratch = scratch;
        r
    }

    /// Reduces `acc` (this rank's contribution) so that the root's `acc` holds the
    /// result.
    fn reduce_hier(
        &mut self,
        acc: &mut [u8],
        red: Reduction,
        rnode: usize,
        rlocal: usize,
    ) -> Result<(), Fail> {
        let combine = red.combine;
        if self.n_nodes == 1 {
            if rlocal != 0 {
                if let Some(m) = self.tree(rlocal)? {
                    tree_reduce(m, acc, combine)?;
                    return Ok(());
                }
            }
            tree_reduce(self.leader_tree(), acc, combine)?;
        } else {
            self.reduce_over_nodes(acc, red, Some(rnode))?;
        }
        // The result is at the node's leader; a root elsewhere in the node gets it.
        if self.my_node == rnode && rlocal != 0 {
            if self.node_rank == 0 {
                ffi::send_bytes(acc, rlocal, FORWARD_TAG, self.node)?;
            } else if self.node_rank == rlocal {
                ffi::recv_bytes(acc, 0, FORWARD_TAG, self.node)?;
            }
        }
        Ok(())
    }

    /// Reduces `acc` (this rank's contribution) inside this node to its leader, then
    /// the nodes' results over MPI among the leaders: to the leader of node `Some(rnode)`
    /// (`MPI_Reduce`), or to every leader with `None` (`MPI_Allreduce`). The result is
    /// in that leader's (those leaders') `acc`.
    fn reduce_over_nodes(
        &mut self,
        acc: &mut [u8],
        red: Reduction,
        rnode: Option<usize>,
    ) -> Result<(), Fail> {
        let Reduction {
            count,
            dt,
            op,
            combine,
        } = red;
        if self.node_size > 1 {
            tree_reduce(self.leader_tree(), acc, combine)?;
        }
        if self.node_rank != 0 {
            return Ok(());
        }
        let leaders = self.leaders;
        let recv: *mut c_void = acc.as_mut_ptr().cast();
        match rnode {
            Some(rnode) => {
                // The leaders' root reduces from a copy of its part, not in place:
                // Debian's MPICH 4.0.2 crashes in an in-place MPI_Reduce to a
                // non-zero root (docs/mpi.md, Tests).
                let own;
                let send: *const c_void = if self.my_node == rnode {
                    own = acc.to_vec();
                    own.as_ptr().cast()
                } else {
                    recv
                };
                let root = rnode as c_int;
                // `acc` (and `own`, its copy) holds `count` elements of `dt` (its size is
                // count × the size of `dt`); at the leaders' root the result replaces it.
                // SAFETY: as argued in the lines above.
                ffi::check(unsafe {
                    mpi_sys::PMPI_Reduce(send, recv, count, dt, op, root, leaders)
                })?;
            }
            None => {
                // SAFETY: `acc` holds `count` elements of `dt`; in place is allowed.
                ffi::check(unsafe {
                    mpi_sys::PMPI_Allreduce(ffi::in_place(), recv, count, dt, op, leaders)
                })?;
            }
        }
        Ok(())
    }

    /// `MPI_Allreduce` in place on `acc` (this rank's contribution; the result on return).
    pub fn allreduce(&mut self, acc: &mut [u8], red: Reduction) -> Result<(), Fail> {
        if self.n_nodes == 1 {
            return Ok(self.leader_tree().allreduce_bytes(acc, red.combine)?);
        }
        self.reduce_over_nodes(acc, red, None)?;
        if self.node_size > 1 {
            tree_bcast(self.leader_tree(), acc)?;
        }
        Ok(())
    }

    /// The express lane's tree for a call rooted at communicator rank `root`: on one
    /// node only, the local root of the root's tree if it is made (`None`: the general
    /// path, which makes it or forwards through the leader).
    #[inline(always)]
    fn express_local(&mut self, root: usize) -> Option<usize> {
        if self.n_nodes != 1 {
            return None;
        }
        let local = *self.place.get(root)?.get(1)? as usize;
        self.ready_tree(local)?;
        Some(local)
    }

    /// The hot lane's memo of an express call of `len` bytes rooted at communicator
    /// rank `root` with arguments `key`: `None` where the express lane cannot run it
    /// ([`Hier::express_local`]).
    #[inline(always)]
    fn hot_call(
        &mut self,
        root: usize,
        len: usize,
        combine: Combine,
        key: [usize; 3],
    ) -> Option<HotCall> {
        let local = self.express_local(root)?;
        Some(HotCall {
            key,
            local,
            len,
            is_root: self.rank == root,
            combine,
        })
    }

    /// The express lane's `MPI_Reduce` of at most [`SMALL`] bytes (192) on one
    /// node, where the root's tree is made: [`Hier::reduce`] without its layers (the
    /// same tree, the same word or byte reduction, so every rank may take either
    /// path), remembered for the hot lane under `key`. `None`: the general path must
    /// run it.
    ///
    /// # Safety
    /// As [`Hier::reduce`].
    #[inline(always)]
    pub unsafe fn reduce_small(
        &mut self,
        input: *const u8,
        recv: *mut u8,
        len: usize,
        combine: Combine,
        root: usize,
        key: [usize; 3],
    ) -> Option<Result<(), Fail>> {
        debug_assert!(len <= SMALL);
        let call = self.hot_call(root, len, combine, key)?;
        self.hot.reduce.put(call);
        // SAFETY: the caller's guarantee.
        unsafe { self.run_reduce(call.local, len, call.is_root, combine, input, recv) }
    }

    /// The hot lane's `MPI_Reduce`: the one [`Hier::reduce_small`] remembered, if
    /// `key` is its arguments' (and the call is not in place).
    ///
    /// # Safety
    /// As [`Hier::reduce`].
    #[inline(always)]
    pub unsafe fn hot_reduce(
        &mut self,
        key: [usize; 3],
        input: *const u8,
        recv: *mut u8,
    ) -> Option<Result<(), Fail>> {
        // The fields it needs, not the whole memo (a copy of six words on every call).
        let c = self.hot.reduce.find(&key)?;
        let (local, len, is_root, combine) = (c.local, c.len, c.is_root, c.combine);
        // SAFETY: the caller's guarantee.
        unsafe { self.run_reduce(local, len, is_root, combine, input, recv) }
    }

    /// [`Hier::reduce_small`]'s reduction, `None` if its tree is not there.
    ///
    /// # Safety
    /// As [`Hier::reduce`], for `len` bytes.
    #[inline(always)]
    unsafe fn run_reduce(
        &mut self,
        local: usize,
        len: usize,
        is_root: bool,
        combine: Combine,
        input: *const u8,
        recv: *mut u8,
    ) -> Option<Result<(), Fail>> {
        let m = self.ready_tree(local)?;
        // SAFETY: the caller guarantees `input` is readable for `len` bytes.
        let src = unsafe { std::slice::from_raw_parts(input, len) };
        // SAFETY: the caller guarantees `recv` is writable for `len` bytes on the root.
        let r = unsafe {
            reduce_on_stack(src, recv, is_root, |acc| {
                tree_reduce(m, acc, combine).map_err(Fail::from)
            })
        };
        Some(r)
    }

    /// The express lane's `MPI_Bcast` of at most [`SMALL`] bytes (192) on one
    /// node, where the root's tree is made ([`Hier::reduce_small`] for broadcasts),
    /// remembered for the hot lane under `key`.
    ///
    /// # Safety
    /// As [`Hier::bcast`].
    #[inline(always)]
    pub unsafe fn bcast_small(
        &mut self,
        data: *mut u8,
        len: usize,
        root: usize,
        key: [usize; 3],
    ) -> Option<Result<(), Fail>> {
        debug_assert!(len <= SMALL);
        let call = self.hot_call(root, len, no_combine, key)?;
        self.hot.bcast.put(call);
        // SAFETY: the caller's guarantee.
        unsafe { self.run_bcast(call.local, len, call.is_root, data) }
    }

    /// The hot lane's `MPI_Bcast`: the one [`Hier::bcast_small`] remembered, if `key`
    /// is its arguments'.
    ///
    /// # Safety
    /// As [`Hier::bcast`].
    #[inline(always)]
    pub unsafe fn hot_bcast(&mut self, key: [usize; 3], data: *mut u8) -> Option<Result<(), Fail>> {
        // As in `hot_reduce`.
        let c = self.hot.bcast.find(&key)?;
        let (local, len, is_root) = (c.local, c.len, c.is_root);
        // SAFETY: the caller's guarantee.
        unsafe { self.run_bcast(local, len, is_root, data) }
    }

    /// [`Hier::bcast_small`]'s broadcast, `None` if its tree is not there.
    ///
    /// # Safety
    /// As [`Hier::bcast`], for `len` bytes.
    #[inline(always)]
    unsafe fn run_bcast(
        &mut self,
        local: usize,
        len: usize,
        is_root: bool,
        data: *mut u8,
    ) -> Option<Result<(), Fail>> {
        let m = self.ready_tree(local)?;
        // As `tree_bcast`: up to 8 bytes as a word, more as one byte message. The
        // root's buffer is only read (it may be read-only memory): sent from a copy.
        // Each arm builds its result itself: `.map(drop)` on the runtime's result made
        // the compiler write it to the stack and read it back whole (a stalled load).
        let r = if is_root {
            // SAFETY: the caller guarantees `data` is readable for `len` bytes.
            let src = unsafe { std::slice::from_raw_parts(data, len) };
            if len <= 8 {
                match m.broadcast_word(word_of(src)) {
                    Ok(_) => Ok(()),
                    Err(e) => Err(e),
                }
            } else {
                let mut part = [0u8; SMALL];
                part[..len].copy_from_slice(src);
                m.broadcast_into(&mut part[..len])
            }
        } else {
            // SAFETY: the caller guarantees `data` is writable for `len` bytes off the root.
            let buf = unsafe { std::slice::from_raw_parts_mut(data, len) };
            if len <= 8 {
                match m.broadcast_word(0) {
                    Ok(got) => {
                        set_word(buf, got);
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            } else {
                m.broadcast_into(buf)
            }
        };
        Some(r.map_err(Fail::from))
    }

    /// The express lane's `MPI_Allreduce` on one node ([`Hier::allreduce`] there),
    /// remembered for the hot lane under `key`: `acc` is this rank's contribution and
    /// the result on return.
    #[inline(always)]
    pub fn allreduce_one_node(
        &mut self,
        acc: &mut [u8],
        combine: Combine,
        key: [usize; 3],
    ) -> Result<(), Fail> {
        debug_assert!(self.on_one_node());
        self.hot.allreduce = Some(HotCall {
            key,
            local: 0,
            len: acc.len(),
            is_root: self.rank == 0,
            combine,
        });
        Ok(self.leader_tree().allreduce_bytes(acc, combine)?)
    }

    /// The hot lane's `MPI_Allreduce`: the length and combine of the one
    /// [`Hier::allreduce_one_node`] remembered, if `key` is its arguments'.
    #[inline(always)]
    pub fn hot_allreduce(&self, key: [usize; 3]) -> Option<(usize, Combine)> {
        match &self.hot.allreduce {
            Some(c) if same_key(&c.key, &key) => Some((c.len, c.combine)),
            _ => None,
        }
    }

    /// The hot lane's `MPI_Allreduce` on `acc` (as [`Hier::allreduce_one_node`]).
    #[inline(always)]
    pub fn run_allreduce(&mut self, acc: &mut [u8], combine: Combine) -> Result<(), Fail> {
        Ok(self.leader_tree().allreduce_bytes(acc, combine)?)
    }

    /// The express lane's `MPI_Barrier` on one node ([`Hier::barrier`] there),
    /// remembered for the hot lane.
    #[inline(always)]
    pub fn barrier_one_node(&mut self) -> Result<(), Fail> {
        debug_assert!(self.on_one_node());
        self.hot.barrier = true;
        Ok(self.leader_tree().barrier()?)
    }

    /// Remembers an `MPI_Allgather` the general path is about to run through smelt
    /// (see [`HotGather`]): its key, block and offsets.
    #[inline]
    pub fn remember_allgather(
        &mut self,
        key: [usize; 3],
        k: usize,
        roff: isize,
        soff: Option<isize>,
    ) {
        self.hot.allgather = Some(HotGather { key, k, roff, soff });
    }

    /// The remembered `MPI_Allgather` with arguments `key`.
    #[inline(always)]
    pub fn hot_allgather(&self, key: [usize; 3]) -> Option<HotGather> {
        match &self.hot.allgather {
            Some(g) if same_key(&g.key, &key) => Some(*g),
            _ => None,
        }
    }

    /// True if the express lane ran this communicator's barrier (the hot lane may).
    #[inline(always)]
    pub fn hot_barrier(&self) -> bool {
        self.hot.barrier
    }

    /// True when the communicator lies on one node (where [`Hier::allreduce`] and
    /// [`Hier::barrier`] are the leader's tree's alone: the express lane's calls).
    #[inline(always)]
    pub fn on_one_node(&self) -> bool {
        self.n_nodes == 1
    }

    /// The tree rooted at communicator rank `root` (on one node, where local ranks are
    /// the communicator's), made on first use.
    fn tree_at(&mut self, root: usize) -> Result<Option<&mut Member>, MpiErr> {
        let local = self.place[root][1] as usize;
        self.tree(local)
    }

    /// `MPI_Gather`: `mine` from every rank, `out` (ranks × `mine.len()` bytes, by
    /// rank) on the root. One node: smelt's tree from the root. Several: smelt's trees
    /// to the leaders, `MPI_Gatherv` among them (see [`Hier::gather_nodes`]).
    /// `Ok(false)`: no tree for this root (one node; every rank sees the same), MPI
    /// must do it.
    pub fn gather(&mut self, mine: &[u8], out: &mut [u8], root: usize) -> Result<bool, Fail> {
        if self.n_nodes > 1 {
            self.gather_nodes(mine, out, root)?;
            return Ok(true);
        }
        match self.tree_at(root)? {
            Some(m) => {
                m.gather_bytes(mine, out)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// `MPI_Scatter`: the root's `all` (ranks × `mine.len()` bytes, by rank), each
    /// rank's part into `mine`. One node: smelt's tree from the root; several: the
    /// leaders' `MPI_Scatterv`, then smelt's trees from the leaders. `Ok(false)` as for
    /// [`Hier::gather`].
    pub fn scatter(&mut self, all: &[u8], mine: &mut [u8], root: usize) -> Result<bool, Fail> {
        if self.n_nodes > 1 {
            self.scatter_nodes(all, mine, root)?;
            return Ok(true);
        }
        match self.tree_at(root)? {
            Some(m) => {
                m.scatter_bytes(all, mine)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Every rank's `mine` (`k` bytes) into every rank's `out` (ranks × `k` bytes, by
    /// rank), as one allreduce: each rank puts its part at its place in a zeroed
    /// vector and the vectors are OR-ed (smelt's allreduce inside a node, the leaders'
    /// `MPI_Allreduce` with `MPI_BOR` on `MPI_BYTE` between nodes). For small parts one
    /// allreduce costs less than a gather and a broadcast (two passes over the tree).
    pub fn allgather(&mut self, mine: &[u8], out: &mut [u8]) -> Result<(), Fail> {
        let k = mine.len();
        out[self.rank * k..(self.rank + 1) * k].copy_from_slice(mine);
        self.allgather_placed(out, k)
    }

    /// [`Hier::allgather`] where this rank's part (`k` bytes) is in `out` at its place
    /// already (the rest of `out` is overwritten).
    pub fn allgather_placed(&mut self, out: &mut [u8], k: usize) -> Result<(), Fail> {
        self.allgather_at(out, self.rank * k..(self.rank + 1) * k)
    }

    /// [`Hier::allgather_placed`] with this rank's part at `mine` in `out` (the parts
    /// of the ranks may differ in size: `MPI_Allgatherv`).
    pub fn allgather_at(
        &mut self,
        out: &mut [u8],
        mine: std::ops::Range<usize>,
    ) -> Result<(), Fail> {
        out[..mine.start].fill(0);
        out[mine.end..].fill(0);
        let red = Reduction {
            count: out.len() as c_int,
            dt: ffi::byte(),
            op: ffi::op_bor(),
            combine: bor_bytes,
        };
        self.allreduce(out, red)
    }

    /// Node and rank within its node of communicator rank `r`.
    fn place_of(&self, r: usize) -> [usize; 2] {
        self.place[r].map(|x| x.max(0) as usize)
    }

    /// Position of communicator rank `r` in node-major order.
    fn node_major(&self, r: usize) -> usize {
        let [node, local] = self.place_of(r);
        self.node_off[node] + local
    }

    /// The leaders' `MPI_Gatherv`/`MPI_Scatterv` layout for `k` bytes per rank (bytes
    /// and offset of each node's parts in node-major order), and where this node's
    /// parts lie in it.
    fn leader_layout(&self, k: usize) -> (Vec<c_int>, Vec<c_int>, std::ops::Range<usize>) {
        let counts = self.node_sizes.iter().map(|&s| (s * k) as c_int).collect();
        let displs = self.node_off.iter().map(|&o| (o * k) as c_int).collect();
        let start = self.node_off[self.my_node];
        (counts, displs, start * k..(start + self.node_size) * k)
    }

    /// Gathers this node's parts (`k` bytes each) to its leader's `out` (node size ×
    /// `k` bytes, by local rank; `&mut []` elsewhere).
    fn node_gather(&mut self, mine: &[u8], out: &mut [u8]) -> Result<(), Fail> {
        if self.node_size > 1 {
            self.leader_tree().gather_bytes(mine, out)?;
        } else {
            out.copy_from_slice(mine);
        }
        Ok(())
    }

    /// Scatters the leader's `part` (node size × `k` bytes, by local rank) to the node.
    fn node_scatter(&mut self, part: &[u8], mine: &mut [u8]) -> Result<(), Fail> {
        if self.node_size > 1 {
            self.leader_tree().scatter_bytes(part, mine)?;
        } else {
            mine.copy_from_slice(part);
        }
        Ok(())
    }

    /// `MPI_Gather` over several nodes: smelt's tree gathers each node's parts to its
    /// leader; the leaders `MPI_Gatherv` them (nodes may differ in size) to the leader
    /// of the root's node, which puts them in rank order (nodes need not hold
    /// consecutive ranks) and, for a root that is not the leader, hands them over.
    fn gather_nodes(&mut self, mine: &[u8], out: &mut [u8], root: usize) -> Result<(), Fail> {
        let k = mine.len();
        let [rnode, rlocal] = self.place_of(root);
        let is_root = self.rank == root;
        if self.node_rank != 0 {
            self.node_gather(mine, &mut [])?;
            if is_root {
                ffi::recv_bytes(out, 0, FORWARD_TAG, self.node)?;
            }
            return Ok(());
        }
        let (counts, displs, part) = self.leader_layout(k);
        if self.my_node != rnode {
            let mut own = vec![0u8; part.len()];
            self.node_gather(mine, &mut own)?;
            ffi::gatherv_bytes(Some(&own), &mut [], &counts, &displs, rnode, self.leaders)?;
            return Ok(());
        }
        if is_root && self.node_major_is_rank_order {
            // Straight into the root's buffer.
            self.node_gather(mine, &mut out[part])?;
            ffi::gatherv_bytes(None, out, &counts, &displs, rnode, self.leaders)?;
            return Ok(());
        }
        let mut all = vec![0u8; self.size * k];
        self.node_gather(mine, &mut all[part])?;
        ffi::gatherv_bytes(None, &mut all, &counts, &displs, rnode, self.leaders)?;
        let mut sorted = Vec::new();
        let dst: &mut [u8] = if is_root {
            out
        } else {
            sorted.resize(self.size * k, 0);
            &mut sorted
        };
        for r in 0..self.size {
            let i = self.node_major(r);
            dst[r * k..(r + 1) * k].copy_from_slice(&all[i * k..(i + 1) * k]);
        }
        if !is_root {
            ffi::send_bytes(dst, rlocal, FORWARD_TAG, self.node)?;
        }
        Ok(())
    }

    /// `MPI_Scatter` over several nodes: the root (through its node's leader, when it is
    /// not the leader) `MPI_Scatterv`s each node's parts to its leader, in node-major
    /// order; smelt's tree scatters them inside each node.
    fn scatter_nodes(&mut self, all: &[u8], mine: &mut [u8], root: usize) -> Result<(), Fail> {
        let k = mine.len();
        let [rnode, rlocal] = self.place_of(root);
        let is_root = self.rank == root;
        if self.node_rank != 0 {
            if is_root {
                ffi::send_bytes(all, 0, FORWARD_TAG, self.node)?;
            }
            return self.node_scatter(&[], mine);
        }
        let (counts, displs, part) = self.leader_layout(k);
        if self.my_node != rnode {
            let mut own = vec![0u8; part.len()];
            ffi::scatterv_bytes(&[], &counts, &displs, Some(&mut own), rnode, self.leaders)?;
            return self.node_scatter(&own, mine);
        }
        let mut from_root = Vec::new();
        let src: &[u8] = if is_root {
            all
        } else {
            from_root.resize(self.size * k, 0);
            ffi::recv_bytes(&mut from_root, rlocal, FORWARD_TAG, self.node)?;
            &from_root
        };
        let mut sorted = Vec::new();
        let nm: &[u8] = if self.node_major_is_rank_order {
            src
        } else {
            sorted.resize(self.size * k, 0);
            for r in 0..self.size {
                let i = self.node_major(r);
                sorted[i * k..(i + 1) * k].copy_from_slice(&src[r * k..(r + 1) * k]);
            }
            &sorted
        };
        ffi::scatterv_bytes(nm, &counts, &displs, None, rnode, self.leaders)?;
        self.node_scatter(&nm[part], mine)
    }

    /// `MPI_Barrier`.
    pub fn barrier(&mut self) -> Result<(), Fail> {
        if self.n_nodes == 1 {
            return Ok(self.leader_tree().barrier()?);
        }
        if self.node_size > 1 {
            self.leader_tree().reduce_empty()?;
        }
        if self.node_rank == 0 {
            // SAFETY: a communicator this crate made and owns.
            ffi::check(unsafe { mpi_sys::PMPI_Barrier(self.leaders) })?;
        }
        if self.node_size > 1 {
            self.leader_tree().broadcast_empty()?;
        }
        Ok(())
    }
}

/// What the non-blocking collectives ([`super::nonblocking`]) run over: a hierarchy's
/// node and leaders' communicators, its place in them, and its ready trees.
pub struct NodeView {
    /// The node's communicator (this crate's own).
    pub node: MPI_Comm,
    /// The leaders' communicator (null off the leaders or on one node).
    pub leaders: MPI_Comm,
    pub node_rank: usize,
    pub node_size: usize,
    pub n_nodes: usize,
    pub my_node: usize,
}

impl Hier {
    /// This rank's [`NodeView`].
    pub fn node_view(&self) -> NodeView {
        NodeView {
            node: self.node,
            leaders: self.leaders,
            node_rank: self.node_rank,
            node_size: self.node_size,
            n_nodes: self.n_nodes,
            my_node: self.my_node,
        }
    }

    /// Node and rank within its node of communicator rank `r`.
    pub fn node_place(&self, r: usize) -> [usize; 2] {
        self.place_of(r)
    }

    /// The node's tree rooted at local rank `local` if it is made already (never makes
    /// one: that is collective over the node). The leader's (0) is made at set-up on
    /// every node of more than one rank.
    #[inline]
    pub fn ready_tree(&mut self, local: usize) -> Option<&mut Member> {
        match self.trees.get_mut(local) {
            Some(Slot::Ready(m)) => Some(&mut **m),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(host: u64, world: i64, cpus: &[u32]) -> Record {
        Record {
            host,
            world,
            cpu: -1,
            max_bytes: [0; CUT_OFFS],
            mask: cpu_mask(cpus),
            force: false,
            measure: 10,
        }
    }

    #[test]
    fn record_round_trips_through_words() {
        let mut r = rec(u64::MAX - 3, 7, &[0, 63, 64, 1023]);
        r.cpu = 5;
        r.max_bytes = [1, 2, 3, 4, 1 << 40, 6, 7, 8, 9];
        r.force = true;
        r.measure = 3;
        let back = Record::from_words(&r.words());
        assert_eq!(back.words(), r.words());
        assert_eq!(back.host, u64::MAX - 3);
        assert_eq!(back.mask, r.mask);
        assert!(back.force);
        assert_eq!(back.measure, 3);
    }

    #[test]
    fn records_give_the_meshs_layout() {
        // Communicator ranks 0..4 are world ranks 0, 2, 1, 3 of one host: emulated nodes
        // of 2 follow the world ranks (smelt_mesh::mpi::Layout::of).
        let all: Vec<Placed> = [0, 2, 1, 3]
            .iter()
            .map(|&w| {
                let r = Record::from_words(&rec(9, w, &[w as u32]).words());
                Placed {
                    host: r.host,
                    world: r.world as u64,
                    cpus: r.mask,
                }
            })
            .collect();
        let l = Layout::of(&all, 2);
        assert_eq!(l.place, vec![[0, 0], [1, 0], [0, 1], [1, 1]]);
        assert_eq!(l.node_sizes, vec![2, 2]);
    }
}
