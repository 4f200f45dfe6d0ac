//! Groups of members built from trees, and running them on threads.

use crate::context::{Context, Peer};
use crate::GroupError;
use smelt_ids::{CpuId, Pos, Rank};
use smelt_plan::Tree;
use smelt_transport::shm::ShmMember;
use smelt_transport::{
    allowed_cpus, pin_current_thread, try_queuepair, Abort, Link, QueuePairEnd, WaitPolicy,
};
use std::sync::{Arc, Mutex};

/// Whether members' threads are pinned to their CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pinning {
    /// Pin each member to its CPU if every member's CPU exists and this process may use
    /// it; otherwise run unpinned (and say why in [`Placement::note`]).
    #[default]
    Auto,
    /// Never pin (the OS scheduler places the threads).
    Never,
    /// As `Auto` when every member has an available CPU; otherwise (more members than
    /// CPUs, or made-up CPU ids) pin the members onto the available CPUs in pre-order
    /// chunks of the first tree, so that a subtree shares a CPU and most tree edges stay
    /// on one CPU.
    Spread,
}

/// How a group is built.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    /// The shared link settings, with their shared defaults: `capacity` is the slots
    /// per channel (each way, per tree edge; default 64); `timeout` is the longest a
    /// collective waits for a peer before failing the group (default 30 s: real waits
    /// on an oversubscribed machine never come close, but a bug never hangs); `wait` is
    /// how blocked members wait (default `None`: [`WaitPolicy::DEDICATED`] when every
    /// member has a CPU of its own, [`WaitPolicy::OVERSUBSCRIBED`] otherwise).
    pub link: smelt_mesh::LinkConfig,
    /// Thread placement. Default [`Pinning::Auto`].
    pub pinning: Pinning,
    /// With more members than CPUs, replace each tree by a flat one (the root's
    /// children are the other members in the tree's pre-order). A tree's machine
    /// awareness assumes one thread per core; oversubscribed, every tree level costs a
    /// scheduling round instead, and the shallowest tree is fastest. Pre-order is kept,
    /// so reductions give the same results. Default false (run the trees as given).
    pub flatten_oversubscribed: bool,
    /// Bytes per fragment of messages longer than one fragment (the byte and slice
    /// broadcasts, reductions, allreductions, gathers and scatters). A long message
    /// crosses the tree as a pipeline: each member forwards (broadcast) or combines and
    /// passes on (reduce) a fragment as soon as it has it, while the next one arrives.
    /// Rounded down to a multiple of [`PAYLOAD_PER_SLOT`](smelt_transport::PAYLOAD_PER_SLOT)
    /// (48) and kept between 48 bytes and one channel (`capacity` × 48). Default
    /// (`None`): half a channel, so one fragment is copied out while the next is copied
    /// in (1536 bytes with the default capacity).
    pub segment: Option<usize>,
    /// Longest message one collective call may move, in bytes (a broadcast's buffer, a
    /// reduction's data, a gather's or scatter's whole buffer). A longer one fails the
    /// call on every member with [`GroupError::Mismatch`] before anything is sent.
    /// Default [`MAX_MESSAGE_BYTES`] (1 GiB).
    pub max_message: usize,
    /// How every context's collectives synchronize to begin with (each context may
    /// change it: [`Context::set_sync`](crate::Context::set_sync), per call
    /// [`Context::with_sync`](crate::Context::with_sync)). Default loose.
    pub sync: crate::SyncMode,
    /// Messages of at least this many bytes (broadcasts with `broadcast_into`,
    /// reductions and allreductions of bytes and slices) are *lent* where the links
    /// can lend ([`Link::can_lend`]: members that are threads of one process): each
    /// receiver copies the sender's buffer directly (or combines it in place), once,
    /// in chunks of [`LOAN_CHUNK`] bytes pipelined along the tree, instead of twice
    /// through the channel's cache-line slots. Default [`LEND_FROM`] (64 KiB), and
    /// [`OVERSUBSCRIBED_LEND_FROM`] (32 KiB) with more members than CPUs; any other
    /// value applies as given, to every collective. `usize::MAX` turns lending off.
    /// Must be the same on every member.
    pub lend_from: usize,
    /// Which algorithm runs the barrier and the allreduces, per mode and message size,
    /// where non-tree algorithms may win (the dissemination barrier, the
    /// recursive-doubling allreduce): `None` (the default) runs every collective on
    /// the tree. A table that may pick a non-tree algorithm makes [`Group::new`]
    /// (and [`process::GroupJob::create`](crate::process::GroupJob::create), which hands the
    /// table to its member processes) build the links it needs between the members,
    /// beyond the tree edges. The table is plain data of `smelt-plan`: the tree crate's
    /// `smelt_tree::tuning::auto_table` fills `auto`'s (`SMELT_TUNE`, the host's tuning
    /// file, else the prediction); `AlgorithmTable::parse("barrier=dissemination")` a
    /// fixed one. Must be the same on every member.
    pub algorithms: Option<Arc<smelt_plan::AlgorithmTable>>,
}

/// The default [`GroupConfig::lend_from`]: 64 KiB.
pub const LEND_FROM: usize = 64 << 10;
/// With more members than CPUs, the default [`GroupConfig::lend_from`]: 32 KiB (8
/// threads on 2 CPUs, `examples/oversub_reduce`: loans 1.2-4x faster than the rings
/// from 32 KiB for broadcasts and reductions on every tree shape, level or slower at
/// 16 KiB for some).
pub const OVERSUBSCRIBED_LEND_FROM: usize = 32 << 10;
/// A broadcast between two members (threads with a CPU each) of at least this many
/// bytes (and lent: at least `lend_from`) is copied by both at once: each lends the other
/// part of its buffer and copies one half (the lower half the other member, the upper
/// one the root).
pub const PAIR_COPY_FROM: usize = 64 << 10;
/// Byte collectives of at most this many bytes that travel as one message (shorter
/// than a fragment, not lent) are received on the stack, without the pipeline's
/// buffers and loops: four channel slots (192 bytes).
pub const SMALL_MESSAGE_BYTES: usize = 4 * smelt_transport::PAYLOAD_PER_SLOT;
/// Bytes per loan of a lent message (a multiple of 48, so no value of an MPI basic
/// type straddles two loans): 256 KiB rounded down.
pub const LOAN_CHUNK: usize = (256 << 10) / 48 * 48;

/// The default [`GroupConfig::max_message`]: 1 GiB.
pub const MAX_MESSAGE_BYTES: usize = 1 << 30;

impl GroupConfig {
    /// The fragment size in bytes that [`segment`](GroupConfig::segment) gives.
    pub fn segment_bytes(&self) -> usize {
        let slot = smelt_transport::PAYLOAD_PER_SLOT;
        let max = self.link.capacity.max(1) * slot;
        let want = self.segment.unwrap_or(max / 2);
        want.clamp(slot, max) / slot * slot
    }
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            link: smelt_mesh::LinkConfig::default(),
            pinning: Pinning::Auto,
            flatten_oversubscribed: false,
            segment: None,
            max_message: MAX_MESSAGE_BYTES,
            sync: crate::SyncMode::Loose,
            lend_from: LEND_FROM,
            algorithms: None,
        }
    }
}

/// Where the group's threads run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Members are pinned (to their own CPUs, or spread by [`Pinning::Spread`]).
    pub pinned: bool,
    /// More members than CPUs this process may use.
    pub oversubscribed: bool,
    /// Why the group runs unpinned, if it does.
    pub note: Option<String>,
    /// The wait policy chosen.
    pub wait: WaitPolicy,
    /// The trees were flattened ([`GroupConfig::flatten_oversubscribed`]).
    pub flattened: bool,
}

/// The first failure in a group.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub(crate) rank: Rank,
    pub(crate) what: String,
    pub(crate) panicked: bool,
}

/// State shared by all members of a group: CPUs by rank, the abort flag, the first
/// failure. For a member process of a job, also the job's segment, where the first
/// failure and the abort flag are shared with the other processes.
#[derive(Debug)]
pub(crate) struct GroupShared {
    pub(crate) cpus: Vec<CpuId>,
    pub(crate) abort: Abort,
    pub(crate) failure: Mutex<Option<Failure>>,
    pub(crate) job: Option<Arc<ShmMember>>,
    /// Two members may copy a long broadcast together (`Context::broadcast_pair_lent`):
    /// threads with a CPU each. Here, not in each context, whose layout the word
    /// collectives' loops are sensitive to (a field added there read 3-19 % slower
    /// back-to-back word reductions in alternated builds).
    pub(crate) shares_copies: bool,
}

impl GroupShared {
    pub(crate) fn new(cpus: Vec<CpuId>, job: Option<Arc<ShmMember>>) -> GroupShared {
        GroupShared::with_abort(cpus, Abort::new(), job)
    }

    pub(crate) fn with_abort(
        cpus: Vec<CpuId>,
        abort: Abort,
        job: Option<Arc<ShmMember>>,
    ) -> GroupShared {
        GroupShared {
            cpus,
            abort,
            failure: Mutex::new(None),
            job,
            shares_copies: false,
        }
    }

    /// True once this group (or, for a process, its job) has failed.
    #[inline(always)]
    pub(crate) fn is_aborted(&self) -> bool {
        self.abort.is_triggered() || self.job.as_ref().is_some_and(|j| j.is_aborted())
    }

    /// The job's first failure, adopted locally (for a process member).
    fn adopt_job_failure(&self) {
        let Some((rank, what)) = self.job.as_ref().and_then(|j| j.failure()) else {
            return;
        };
        let mut f = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        if f.is_none() {
            *f = Some(Failure {
                rank: Rank(rank as usize),
                what,
                panicked: false,
            });
        }
    }

    /// Records a failure of member `rank` (unless one is already recorded), raises the
    /// abort flag, and returns the error members should see (the first failure).
    pub(crate) fn record(&self, rank: Rank, what: String, panicked: bool) -> GroupError {
        {
            let mut f = self.failure.lock().unwrap_or_else(|e| e.into_inner());
            // A panic first recorded without its message (by a drop during unwinding)
            // gets the message when `run` catches it.
            let refine = f
                .as_ref()
                .is_some_and(|x| x.rank == rank && x.panicked && panicked && x.what == "panicked");
            if f.is_none() || refine {
                if let Some(j) = &self.job {
                    j.record_failure(rank.index() as u32, &what);
                }
                *f = Some(Failure {
                    rank,
                    what,
                    panicked,
                });
            }
            // In a job, the first failure any process recorded is everyone's.
            if let Some((r, w)) = self.job.as_ref().and_then(|j| j.failure()) {
                if f.as_ref()
                    .is_none_or(|x| x.rank != Rank(r as usize) || x.what != w)
                {
                    *f = Some(Failure {
                        rank: Rank(r as usize),
                        what: w,
                        panicked: false,
                    });
                }
            }
        }
        self.abort.trigger();
        if let Some(j) = &self.job {
            j.abort();
        }
        self.failure_error().expect("a failure was just recorded")
    }

    /// CPU of `rank` ([`CpuId::UNKNOWN`] for a rank outside the group).
    pub(crate) fn cpu_of(&self, rank: Rank) -> CpuId {
        self.cpus
            .get(rank.index())
            .copied()
            .unwrap_or(CpuId::UNKNOWN)
    }

    /// The first failure as members see it.
    pub(crate) fn failure_error(&self) -> Option<GroupError> {
        self.adopt_job_failure();
        let f = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        f.as_ref().map(|f| GroupError::PeerFailed {
            rank: f.rank,
            cpu: self.cpu_of(f.rank),
            what: f.what.clone(),
        })
    }

    /// The first failure as [`Group::run`] reports it.
    fn run_error(&self) -> Option<GroupError> {
        self.adopt_job_failure();
        let f = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        f.as_ref().map(|f| {
            if f.panicked {
                GroupError::MemberPanicked {
                    rank: f.rank,
                    cpu: self.cpu_of(f.rank),
                    message: f.what.clone(),
                }
            } else {
                GroupError::PeerFailed {
                    rank: f.rank,
                    cpu: self.cpu_of(f.rank),
                    what: f.what.clone(),
                }
            }
        })
    }
}

/// One participant: a rank, a CPU, and one [`Context`] per tree of the group. The
/// collectives on `Member` use context 0; use [`Member::context`] for the others.
///
/// Dropping a member (its thread ending) is seen by its neighbours: if they still
/// expect messages from it, their collectives fail with [`GroupError::PeerFailed`]
/// instead of hanging. A member dropped while its thread panics fails the whole group.
#[derive(Debug)]
pub struct Member<L: Link = QueuePairEnd> {
    pub(crate) rank: Rank,
    pub(crate) contexts: Vec<Option<Context<L>>>,
    /// CPU to pin this member's thread to when run by the group.
    pub(crate) pin_to: Option<CpuId>,
    pub(crate) pinned: bool,
    pub(crate) shared: Arc<GroupShared>,
}

/// Context 0, or `NoContext(0)`. The error is made only when there is no context:
/// `ok_or(GroupError::NoContext(0))` built it on every call and dropped it again, a
/// call to the error's drop code on every collective (4-5 ns of a 9 ns broadcast
/// between processes, once the error type grew too large for it to be inlined).
macro_rules! ctx0 {
    ($self:ident) => {
        match $self.contexts[0].as_mut() {
            Some(c) => c,
            None => return Err(GroupError::NoContext(0)),
        }
    };
}

impl<L: Link> Member<L> {
    /// Rank: index of this member's CPU in the group's CPU list (the first tree's
    /// member order).
    pub fn rank(&self) -> Rank {
        self.rank
    }
    /// OS CPU id.
    pub fn cpu(&self) -> CpuId {
        self.shared.cpus[self.rank]
    }
    /// Number of members.
    pub fn size(&self) -> usize {
        self.shared.cpus.len()
    }
    /// True if this member's thread was pinned to its CPU.
    pub fn is_pinned(&self) -> bool {
        self.pinned
    }
    /// Number of contexts (trees) this member was built with.
    pub fn num_contexts(&self) -> usize {
        self.contexts.len()
    }

    /// Pins the calling thread to this member's CPU, or to the CPU [`Pinning::Spread`]
    /// chose for it (done by [`Group::run`]; call it yourself on threads you attach
    /// with [`Group::into_members`]).
    pub fn pin_thread(&mut self) -> std::io::Result<()> {
        pin_current_thread(self.pin_to.unwrap_or(self.cpu()))?;
        self.pinned = true;
        Ok(())
    }

    /// Context `i` (tree `i` of the group).
    pub fn context(&mut self, i: usize) -> Result<&mut Context<L>, GroupError> {
        match self.contexts.get_mut(i).and_then(|c| c.as_mut()) {
            Some(c) => Ok(c),
            None => Err(GroupError::NoContext(i)),
        }
    }

    /// Takes context `i` out (e.g. to drive it from another thread).
    pub fn take_context(&mut self, i: usize) -> Result<Context<L>, GroupError> {
        match self.contexts.get_mut(i).and_then(|c| c.take()) {
            Some(c) => Ok(c),
            None => Err(GroupError::NoContext(i)),
        }
    }

    /// Puts a context taken with [`take_context`](Member::take_context) back.
    pub fn put_context(&mut self, c: Context<L>) {
        let i = c.id();
        self.contexts[i] = Some(c);
    }

    /// True on context 0's root.
    pub fn is_root(&self) -> bool {
        self.contexts[0].as_ref().is_some_and(|c| c.is_root())
    }

    /// Rank of context 0's root (None if context 0 was taken out).
    pub fn root(&self) -> Option<Rank> {
        self.contexts[0].as_ref().map(|c| c.root())
    }

    /// Parent's rank in context 0 (None on the root or if context 0 was taken out).
    pub fn parent(&self) -> Option<Rank> {
        self.contexts[0].as_ref().and_then(|c| c.parent())
    }

    /// Children's ranks in context 0, in send order.
    pub fn children(&self) -> Vec<Rank> {
        self.contexts[0]
            .as_ref()
            .map(|c| c.children())
            .unwrap_or_default()
    }

    /// Context 0's [`Context::broadcast_word`].
    #[inline(always)]
    pub fn broadcast_word(&mut self, w: u64) -> Result<u64, GroupError> {
        ctx0!(self).broadcast_word(w)
    }
    /// Context 0's [`Context::broadcast_empty`].
    #[inline(always)]
    pub fn broadcast_empty(&mut self) -> Result<(), GroupError> {
        ctx0!(self).broadcast_empty()
    }
    /// Context 0's [`Context::broadcast`].
    pub fn broadcast(&mut self, buf: &mut Vec<u8>) -> Result<(), GroupError> {
        ctx0!(self).broadcast(buf)
    }
    /// Context 0's [`Context::reduce`].
    #[inline(always)]
    pub fn reduce<T: crate::Word>(
        &mut self,
        v: T,
        op: impl Fn(T, T) -> T,
    ) -> Result<Option<T>, GroupError> {
        ctx0!(self).reduce(v, op)
    }
    /// Context 0's [`Context::reduce_empty`].
    #[inline(always)]
    pub fn reduce_empty(&mut self) -> Result<(), GroupError> {
        ctx0!(self).reduce_empty()
    }
    /// Context 0's [`Context::allreduce`].
    #[inline(always)]
    pub fn allreduce<T: crate::Word>(
        &mut self,
        v: T,
        op: impl Fn(T, T) -> T,
    ) -> Result<T, GroupError> {
        ctx0!(self).allreduce(v, op)
    }
    /// Context 0's [`Context::reduce_slice`].
    pub fn reduce_slice<T: crate::Word>(
        &mut self,
        data: &mut [T],
        op: impl Fn(T, T) -> T,
    ) -> Result<bool, GroupError> {
        ctx0!(self).reduce_slice(data, op)
    }
    /// Context 0's [`Context::allreduce_slice`].
    pub fn allreduce_slice<T: crate::Word>(
        &mut self,
        data: &mut [T],
        op: impl Fn(T, T) -> T,
    ) -> Result<(), GroupError> {
        ctx0!(self).allreduce_slice(data, op)
    }
    /// Context 0's [`Context::broadcast_into`].
    pub fn broadcast_into(&mut self, buf: &mut [u8]) -> Result<(), GroupError> {
        ctx0!(self).broadcast_into(buf)
    }
    /// Context 0's [`Context::reduce_bytes`].
    pub fn reduce_bytes(
        &mut self,
        data: &mut [u8],
        combine: impl FnMut(&mut [u8], &[u8]),
    ) -> Result<bool, GroupError> {
        ctx0!(self).reduce_bytes(data, combine)
    }
    /// Context 0's [`Context::allreduce_bytes`].
    pub fn allreduce_bytes(
        &mut self,
        data: &mut [u8],
        combine: impl FnMut(&mut [u8], &[u8]),
    ) -> Result<(), GroupError> {
        ctx0!(self).allreduce_bytes(data, combine)
    }
    /// Context 0's [`Context::gather_bytes`].
    pub fn gather_bytes(&mut self, mine: &[u8], out: &mut [u8]) -> Result<bool, GroupError> {
        ctx0!(self).gather_bytes(mine, out)
    }
    /// Context 0's [`Context::scatter_bytes`].
    pub fn scatter_bytes(&mut self, all: &[u8], mine: &mut [u8]) -> Result<(), GroupError> {
        ctx0!(self).scatter_bytes(all, mine)
    }
    /// Sets how every context of this member synchronizes from now on
    /// ([`Context::set_sync`]; every member must do the same).
    pub fn set_sync(&mut self, mode: crate::SyncMode) {
        for c in self.contexts.iter_mut().flatten() {
            c.set_sync(mode);
        }
    }
    /// Runs `f` with every context in `mode`, then restores each context's own
    /// ([`Context::with_sync`] for the member's collectives).
    pub fn with_sync<T>(
        &mut self,
        mode: crate::SyncMode,
        f: impl FnOnce(&mut Self) -> Result<T, GroupError>,
    ) -> Result<T, GroupError> {
        let before: Vec<Option<crate::SyncMode>> = self
            .contexts
            .iter()
            .map(|c| c.as_ref().map(|c| c.sync_mode()))
            .collect();
        self.set_sync(mode);
        let r = f(self);
        for (c, b) in self.contexts.iter_mut().zip(before) {
            if let (Some(c), Some(b)) = (c.as_mut(), b) {
                c.set_sync(b);
            }
        }
        r
    }
    /// Context 0's [`Context::barrier`].
    #[inline]
    pub fn barrier(&mut self) -> Result<(), GroupError> {
        ctx0!(self).barrier()
    }
    /// Context 0's [`Context::barrier_agree`].
    pub fn barrier_agree(
        &mut self,
        w: u64,
        combine: impl Fn(u64, u64) -> u64,
    ) -> Result<u64, GroupError> {
        ctx0!(self).barrier_agree(w, combine)
    }
    /// Context 0's [`Context::gather_word`].
    pub fn gather_word(&mut self, v: u64) -> Result<Option<Vec<u64>>, GroupError> {
        ctx0!(self).gather_word(v)
    }
    /// Context 0's [`Context::scatter_word`].
    pub fn scatter_word(&mut self, values: Option<&[u64]>) -> Result<u64, GroupError> {
        ctx0!(self).scatter_word(values)
    }

    /// Fails the whole group on this member's behalf (e.g. after an application
    /// error): every member's collectives return [`GroupError::PeerFailed`] naming it.
    pub fn fail(&self, what: &str) -> GroupError {
        self.shared.record(self.rank, what.to_string(), false)
    }
}

impl<L: Link> Drop for Member<L> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.shared.record(self.rank, "panicked".into(), true);
        }
    }
}

/// Members built from one or more trees over the same CPUs, with one queuepair per
/// tree edge. Run them with [`run`](Group::run) (one scoped thread per member, pinned
/// where possible), or take them with [`into_members`](Group::into_members) and move
/// each into a thread of your own.
#[derive(Debug)]
pub struct Group {
    members: Vec<Member>,
    placement: Placement,
    shared: Arc<GroupShared>,
}

impl Group {
    /// A group with one context for `tree` and the default configuration.
    pub fn new(tree: &Tree) -> Result<Group, GroupError> {
        Group::with_config(std::slice::from_ref(tree), &GroupConfig::default())
    }

    /// A group with one context per tree. Every tree must span the same CPUs (any
    /// shape, any root); ranks follow the first tree's member order.
    pub fn with_config(trees: &[Tree], cfg: &GroupConfig) -> Result<Group, GroupError> {
        let cpus = check_trees(trees)?;
        let first = &trees[0];
        let n = cpus.len();
        let allowed: Vec<CpuId> = allowed_cpus()
            .unwrap_or_default()
            .into_iter()
            .map(CpuId)
            .collect();
        let missing: Vec<CpuId> = cpus
            .iter()
            .copied()
            .filter(|c| !allowed.contains(c))
            .collect();
        let (pinned, note) = match cfg.pinning {
            Pinning::Never => (false, Some("pinning disabled".to_string())),
            Pinning::Auto | Pinning::Spread if missing.is_empty() => (true, None),
            Pinning::Spread if !allowed.is_empty() => (
                true,
                Some(format!(
                    "{} of {n} member CPUs are not available to this process; members spread over the {} allowed CPUs in pre-order chunks",
                    missing.len(),
                    allowed.len()
                )),
            ),
            Pinning::Auto | Pinning::Spread => (
                false,
                Some(format!(
                    "{} of {n} member CPUs are not available to this process (first: {}; {} allowed); running unpinned",
                    missing.len(),
                    missing[0],
                    allowed.len()
                )),
            ),
        };
        let oversubscribed = n > allowed.len().max(1);
        let wait = cfg.link.wait.unwrap_or(if oversubscribed {
            WaitPolicy::OVERSUBSCRIBED
        } else {
            WaitPolicy::DEDICATED
        });
        let flattened = cfg.flatten_oversubscribed && oversubscribed;
        // With more members than CPUs the default threshold is lower
        // ([`OVERSUBSCRIBED_LEND_FROM`]): a loan's lender and borrowers wait with the
        // oversubscribed policy (yield, then park), so one copy straight from the
        // lender's buffer beats two through the rings' slots from 32 KiB on every
        // tree shape (8 threads on 2 CPUs, examples/oversub_reduce).
        let lowered;
        let cfg = if oversubscribed && cfg.lend_from == LEND_FROM {
            lowered = GroupConfig {
                lend_from: OVERSUBSCRIBED_LEND_FROM,
                ..cfg.clone()
            };
            &lowered
        } else {
            cfg
        };
        let flat_trees: Vec<Tree>;
        let trees: &[Tree] = if flattened {
            flat_trees = trees
                .iter()
                .map(|t| {
                    let mut children = vec![Vec::new(); t.len()];
                    children[t.root] = t.preorder().into_iter().skip(1).collect();
                    Tree::new(t.members.clone(), t.root, children)
                        .map_err(|e| GroupError::Invalid(format!("flattening: {e}")))
                })
                .collect::<Result<_, _>>()?;
            &flat_trees
        } else {
            trees
        };
        let shared = Arc::new(GroupShared {
            // Sharing a copy needs two CPUs at once.
            shares_copies: !oversubscribed,
            ..GroupShared::new(cpus.clone(), None)
        });
        // Where each rank's thread is pinned: its own CPU, or a pre-order chunk.
        let pin_to: Vec<Option<CpuId>> = if !pinned {
            vec![None; n]
        } else if missing.is_empty() {
            cpus.iter().map(|&c| Some(c)).collect()
        } else {
            let mut v = vec![None; n];
            // The first tree's positions are the ranks.
            for (i, m) in first.preorder().into_iter().enumerate() {
                v[m.index()] = Some(allowed[i * allowed.len() / n]);
            }
            v
        };
        // Every tree edge's queuepair, made up front; each member takes its ends.
        let mut pairs: Vec<Vec<(Option<QueuePairEnd>, Option<QueuePairEnd>)>> = Vec::new();
        for t in trees {
            let mut v = Vec::new();
            for _ in tree_edges(t) {
                let (mut a, mut b) = try_queuepair(cfg.link.capacity, Some(shared.abort.clone()))?;
                a.set_wait_policy(wait);
                b.set_wait_policy(wait);
                v.push((Some(a), Some(b)));
            }
            pairs.push(v);
        }
        // Flattened, the barrier runs on the flat tree whatever the table picked
        // (`AlgorithmTable::for_flat_oversubscribed`: a scheduling round per step).
        let table = match &cfg.algorithms {
            Some(t) if flattened => Some(Arc::new(t.for_flat_oversubscribed())),
            t => t.clone(),
        };
        // Links beyond the trees for the non-tree algorithms: one mesh per context.
        let mut meshes: Vec<Option<Vec<crate::nontree::NonTreeLinks>>> = Vec::new();
        for _ in trees {
            meshes.push(match &table {
                Some(table) => {
                    crate::nontree::build_meshes(table, n, cfg.link.capacity, wait, &shared.abort)?
                }
                None => None,
            });
        }
        let mut members: Vec<Member> = Vec::with_capacity(n);
        for (rank, &pin_to) in pin_to.iter().enumerate() {
            let rank = Rank(rank);
            members.push(Member::build(
                trees,
                rank,
                cfg,
                shared.clone(),
                pin_to,
                |ctx, edge, parent_side| {
                    let p = &mut pairs[ctx][edge];
                    Ok(if parent_side { p.0.take() } else { p.1.take() }
                        .expect("each end taken once"))
                },
            )?);
        }
        for (ctx, m) in meshes.into_iter().enumerate() {
            let Some(m) = m else { continue };
            for (member, links) in members.iter_mut().zip(m) {
                if let Some(c) = member.contexts[ctx].as_mut() {
                    c.nontree = Some(Box::new(links));
                }
            }
        }
        Ok(Group {
            members,
            placement: Placement {
                pinned,
                oversubscribed,
                note,
                wait,
                flattened,
            },
            shared,
        })
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Always false: a group has at least one member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// OS CPU id of each rank.
    pub fn cpus(&self) -> &[CpuId] {
        &self.shared.cpus
    }

    /// Where the members will run.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// A handle to the group's abort flag: triggering it makes every member's pending
    /// and later collectives fail.
    pub fn abort_handle(&self) -> Abort {
        self.shared.abort.clone()
    }

    /// The members, to move into threads of your own (call [`Member::pin_thread`] there
    /// if you want pinning). Collectives fail for all if one member's thread panics.
    pub fn into_members(self) -> Vec<Member> {
        self.members
    }

    /// Runs `f` on every member, each on its own scoped thread (pinned per
    /// [`placement`](Group::placement)), and returns the results by rank.
    ///
    /// If a member panics, or a collective fails (a member left early, a timeout, a
    /// mismatch, [`Member::fail`]), every other member's collectives fail promptly and
    /// `run` returns the first failure ([`GroupError::MemberPanicked`] for a panic).
    pub fn run<R, F>(self, f: F) -> Result<Vec<R>, GroupError>
    where
        R: Send,
        F: Fn(&mut Member) -> R + Sync,
    {
        let shared = self.shared.clone();
        let f = &f;
        let results: Vec<Option<R>> = std::thread::scope(|s| {
            let handles: Vec<_> = self
                .members
                .into_iter()
                .map(|mut m| {
                    std::thread::Builder::new()
                        .name(format!("smelt-rank-{}", m.rank))
                        .spawn_scoped(s, move || {
                            if m.pin_to.is_some() {
                                let _ = m.pin_thread();
                            }
                            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                f(&mut m)
                            }));
                            match r {
                                Ok(v) => Some(v),
                                Err(p) => {
                                    let msg = crate::panic_message(p.as_ref());
                                    m.shared.record(m.rank, msg, true);
                                    None
                                }
                            }
                        })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| match h {
                    Ok(h) => h.join().ok().flatten(),
                    Err(e) => {
                        shared.record(Rank(0), format!("cannot spawn a member thread: {e}"), false);
                        None
                    }
                })
                .collect()
        });
        if let Some(e) = shared.run_error() {
            return Err(e);
        }
        Ok(results
            .into_iter()
            .map(|r| r.expect("no failure recorded, so every member returned"))
            .collect())
    }
}

/// One link a member built with [`Member::with_links`] needs: the edge `edge` (in
/// [`tree_edges`] order) of tree `tree`, between ranks `parent` and `child`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkEnd {
    /// Index of the tree (context) in the list the member is built from.
    pub tree: usize,
    /// Index of the edge in [`tree_edges`] order.
    pub edge: usize,
    /// Group rank of the edge's parent.
    pub parent: Rank,
    /// Group rank of the edge's child.
    pub child: Rank,
    /// True for the parent's end (its link to `child`), false for the child's end.
    pub parent_side: bool,
}

impl<L: Link> Member<L> {
    /// Builds member `rank` of a group over `trees` (one context each; every tree over
    /// the same CPUs, whose order in the first tree gives the ranks) on links of any
    /// transport: `connect` is called once for each link this member has, and must
    /// return this member's end of a link to the other rank of that edge. Every
    /// collective then runs over those links unchanged. Members built this way are not
    /// pinned; `abort` (shared by every member in this process, if given) ends their
    /// waits when one of them fails.
    pub fn with_links(
        trees: &[Tree],
        rank: Rank,
        cfg: &GroupConfig,
        abort: Option<Abort>,
        mut connect: impl FnMut(LinkEnd) -> Result<L, GroupError>,
    ) -> Result<Member<L>, GroupError> {
        let cpus = check_trees(trees)?;
        if rank.index() >= cpus.len() {
            return Err(GroupError::Invalid(format!(
                "rank {rank} in a group of {} members",
                cpus.len()
            )));
        }
        let shared = Arc::new(GroupShared::with_abort(
            cpus,
            abort.unwrap_or_default(),
            None,
        ));
        let edges: Vec<Vec<(Rank, Rank)>> = trees
            .iter()
            .map(|t| {
                let rank_of = ranks_of(&trees[0], t);
                tree_edges(t)
                    .map(|(p, c)| (rank_of[p], rank_of[c]))
                    .collect()
            })
            .collect();
        Member::build(trees, rank, cfg, shared, None, |tree, edge, parent_side| {
            let (parent, child) = edges[tree][edge];
            connect(LinkEnd {
                tree,
                edge,
                parent,
                child,
                parent_side,
            })
        })
    }

    /// Builds member `rank` over `trees` with [`build_contexts`] (`connect` as there),
    /// not yet pinned; `pin_to` is the CPU its thread is to be pinned to, if any.
    pub(crate) fn build(
        trees: &[Tree],
        rank: Rank,
        cfg: &GroupConfig,
        shared: Arc<GroupShared>,
        pin_to: Option<CpuId>,
        connect: impl FnMut(usize, usize, bool) -> Result<L, GroupError>,
    ) -> Result<Member<L>, GroupError> {
        let contexts = build_contexts(trees, rank, cfg, &shared, connect)?;
        Ok(Member {
            rank,
            contexts,
            pin_to,
            pinned: false,
            shared,
        })
    }
}

/// Checks that `trees` describe one group (at least one tree, each valid, all over
/// the same CPUs); returns the CPUs by rank (the first tree's member order).
pub(crate) fn check_trees(trees: &[Tree]) -> Result<Vec<CpuId>, GroupError> {
    let first = trees
        .first()
        .ok_or_else(|| GroupError::Invalid("no tree given".into()))?;
    for (i, t) in trees.iter().enumerate() {
        t.validate()
            .map_err(|e| GroupError::Invalid(format!("tree {i}: {e}")))?;
    }
    let cpus = first.members.clone();
    let mut sorted = cpus.clone();
    sorted.sort_unstable();
    for (i, t) in trees.iter().enumerate().skip(1) {
        let mut s = t.members.clone();
        s.sort_unstable();
        if s != sorted {
            return Err(GroupError::Invalid(format!(
                "tree {i} spans other CPUs than tree 0"
            )));
        }
    }
    Ok(cpus)
}

/// A tree's edges as (parent position, child position), in the order every transport
/// numbers them: parents by position, each parent's children in send order.
pub fn tree_edges(t: &Tree) -> impl Iterator<Item = (Pos, Pos)> + '_ {
    t.children
        .iter()
        .enumerate()
        .flat_map(|(p, cs)| cs.iter().map(move |&c| (Pos(p), c)))
}

/// The group rank of each position of `t`, by position: the index of its CPU in
/// `first`'s member order (trees of one group span the same CPUs).
pub(crate) fn ranks_of(first: &Tree, t: &Tree) -> Vec<Rank> {
    t.members
        .iter()
        .map(|&c| Rank(first.position_of(c).expect("same CPU set").index()))
        .collect()
}

/// Builds member `rank`'s context for each tree over the links `connect` gives:
/// `connect(tree, edge, parent_side)` returns the parent's (`true`) or the child's end
/// of edge number `edge` of tree `tree` (numbered as [`tree_edges`]). Ranks follow the
/// first tree's member order.
pub(crate) fn build_contexts<L: Link>(
    trees: &[Tree],
    rank: Rank,
    cfg: &GroupConfig,
    shared: &Arc<GroupShared>,
    mut connect: impl FnMut(usize, usize, bool) -> Result<L, GroupError>,
) -> Result<Vec<Option<Context<L>>>, GroupError> {
    let scratch_len = cfg.link.capacity * smelt_transport::PAYLOAD_PER_SLOT;
    let mut out = Vec::with_capacity(trees.len());
    for (id, t) in trees.iter().enumerate() {
        // Tree position <-> group rank.
        let rank_of = ranks_of(&trees[0], t);
        let idx = Pos(rank_of
            .iter()
            .position(|&r| r == rank)
            .expect("rank in tree"));
        let mut parent = None;
        let mut children = Vec::new();
        for (e, (p, c)) in tree_edges(t).enumerate() {
            if c == idx {
                parent = Some(Peer {
                    rank: rank_of[p],
                    link: connect(id, e, false)?,
                });
            } else if p == idx {
                children.push(Peer {
                    rank: rank_of[c],
                    link: connect(id, e, true)?,
                });
            }
        }
        let subtree: Vec<Rank> = subtree_preorder(t, idx)
            .into_iter()
            .map(|i| rank_of[i])
            .collect();
        let child_sizes = t.children[idx]
            .iter()
            .map(|&c| subtree_preorder(t, c).len())
            .collect();
        out.push(Some(Context {
            id,
            rank,
            root: rank_of[t.root],
            parent,
            children,
            subtree,
            child_sizes,
            timeout: cfg.link.timeout,
            shared: shared.clone(),
            scratch: vec![0; scratch_len],
            segment: cfg.segment_bytes(),
            max_message: cfg.max_message,
            sync: cfg.sync,
            in_strict: false,
            commutes: false,
            lend_from: cfg.lend_from,
            packed: Vec::new(),
            seq: 0,
            nontree: None,
            tuned: crate::context::TunedFragments::of(cfg.algorithms.as_ref()),
            in_tuned: false,
            stages: None,
        }));
    }
    Ok(out)
}

/// Positions of `m`'s subtree in pre-order.
fn subtree_preorder(t: &Tree, m: Pos) -> Vec<Pos> {
    let mut out = Vec::new();
    let mut stack = vec![m];
    while let Some(x) = stack.pop() {
        out.push(x);
        for &c in t.children[x].iter().rev() {
            stack.push(c);
        }
    }
    out
}
