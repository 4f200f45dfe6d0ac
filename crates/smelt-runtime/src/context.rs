//! A member's place in one tree, and the collectives run over it, written once for
//! every transport ([`Link`]).

use crate::group::GroupShared;
use crate::word::{pack, unpack_at, unpack_into, unpack_one, Word};
use crate::GroupError;
use smelt_ids::{CpuId, Rank};
use smelt_plan::Op;
use smelt_plan::{AlgorithmTable, SyncMode};
use smelt_transport::{Link, QueuePairEnd, TransportError};
use std::sync::Arc;
use std::time::Duration;

/// Two members' values combined in the given order on both: `mine_first` puts `data`
/// (this member's) first, else `other`'s; the result is left in `data`.
fn fold_pair(
    mine_first: bool,
    data: &mut [u8],
    other: &mut [u8],
    mut combine: impl FnMut(&mut [u8], &[u8]),
) {
    if mine_first {
        combine(data, other);
    } else {
        combine(other, data);
        data.copy_from_slice(other);
    }
}

/// The largest allreduce two members exchange in one message each
/// ([`Context::exchange_one`], received on the stack): 384 bytes, past the
/// interposer's cut-offs of the calls built on an allreduce (256 bytes of result).
/// Callgrind, the interposer's `MPI_Allreduce` on 2 ranks, rank 0, instructions a call
/// through the general path / this exchange: 256 B 1418 / 1268, 384 B 1711 / 1524, but
/// 512 B 1125 / 1834 (the general path lends its halves there).
const EXCHANGE_ONE: usize = 384;

/// A link to one tree neighbour.
#[derive(Debug)]
pub(crate) struct Peer<L> {
    pub(crate) rank: Rank,
    pub(crate) link: L,
}

/// The collectives, as carried in message tags: every message of a collective is
/// tagged with its operation and the context's sequence number, so members that call
/// different collectives (or one collective more) are told apart at the first
/// message that crosses them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Coll {
    Broadcast = 1,
    Reduce = 2,
    Barrier = 3,
    ReduceSlice = 4,
    Gather = 5,
    Scatter = 6,
    /// The dissemination barrier (links beyond the tree).
    Dissemination = 7,
    /// The recursive-doubling allreduce (links beyond the tree).
    RecursiveDoubling = 8,
}

impl Coll {
    const ALL: [Coll; 8] = [
        Coll::Broadcast,
        Coll::Reduce,
        Coll::Barrier,
        Coll::ReduceSlice,
        Coll::Gather,
        Coll::Scatter,
        Coll::Dissemination,
        Coll::RecursiveDoubling,
    ];

    /// The collective whose code a tag word carries in its top byte.
    fn of_code(code: u8) -> Option<Coll> {
        Coll::ALL.into_iter().find(|c| *c as u8 == code)
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Coll::Broadcast => "broadcast",
            Coll::Reduce => "reduce",
            Coll::Barrier => "barrier",
            Coll::ReduceSlice => "reduce_slice",
            Coll::Gather => "gather",
            Coll::Scatter => "scatter",
            Coll::Dissemination => "dissemination barrier",
            Coll::RecursiveDoubling => "recursive-doubling allreduce",
        }
    }
}

/// The tag of one collective call: the operation's code in the top byte, the
/// sequence number in the low 32 bits. Made once per call, as the word its messages
/// carry: a loop holds one word (as an operation and a number, the word was put
/// together again on the stack for every message).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tag(u64);

impl Tag {
    #[inline(always)]
    fn new(coll: Coll, seq: u32) -> Tag {
        Tag(((coll as u64) << 56) | seq as u64)
    }
    #[inline(always)]
    pub(crate) fn word(self) -> u64 {
        self.0
    }
    fn seq(self) -> u32 {
        self.0 as u32
    }
    pub(crate) fn op(self) -> &'static str {
        Coll::of_code((self.0 >> 56) as u8).map_or("collective", Coll::name)
    }
    /// What a received tag says, for error messages.
    fn describe(w: u64) -> String {
        match Coll::of_code((w >> 56) as u8) {
            Some(c) => format!("{} #{}", c.name(), w as u32),
            None => format!("an untagged message ({w:#x})"),
        }
    }
}

/// One member's view of one tree: its parent and children links. Collectives on a
/// context involve every member of the group, each calling the same collectives in the
/// same order (MPI semantics); the tree's root sends every broadcast and receives every
/// reduction, so all members deliver a context's broadcasts in one order (atomic
/// broadcast: the root sequences, links are FIFO and reliable).
///
/// The collectives are written once against [`Link`]: `L` is the transport, by default
/// the in-process or shared-memory queuepair ([`QueuePairEnd`]).
///
/// A context is `Send`: a member may move one context to another thread, so that
/// several contexts (trees with different roots) run concurrently on the same members.
#[derive(Debug)]
#[repr(align(128))]
pub struct Context<L: Link = QueuePairEnd> {
    pub(crate) id: usize,
    pub(crate) rank: Rank,
    pub(crate) root: Rank,
    pub(crate) parent: Option<Peer<L>>,
    pub(crate) children: Vec<Peer<L>>,
    /// Ranks of this member's subtree in pre-order (self first).
    pub(crate) subtree: Vec<Rank>,
    /// Size of each child's subtree (same order as `children`).
    pub(crate) child_sizes: Vec<usize>,
    pub(crate) timeout: Duration,
    pub(crate) shared: Arc<GroupShared>,
    pub(crate) scratch: Vec<u8>,
    /// Bytes per fragment of long messages ([`GroupConfig::segment`]).
    pub(crate) segment: usize,
    /// Longest message of one call ([`GroupConfig::max_message`]).
    pub(crate) max_message: usize,
    /// How this context's collectives synchronize ([`Context::set_sync`]).
    pub(crate) sync: SyncMode,
    /// Inside a strict collective: the collectives it is made of run as they are.
    pub(crate) in_strict: bool,
    /// Inside a reduction with a predefined (commutative) operation
    /// ([`Context::allreduce_bytes_op`]): the ring allreduce may run, which combines
    /// each block in ring order rather than rank order.
    pub(crate) commutes: bool,
    /// Messages of at least this many bytes are lent ([`GroupConfig::lend_from`]).
    pub(crate) lend_from: usize,
    /// Packed values of the slice reductions, kept between calls so a reduction in a
    /// loop does not allocate.
    pub(crate) packed: Vec<u8>,
    /// Collectives called on this context so far.
    pub(crate) seq: u32,
    /// Links beyond the tree for the non-tree algorithms, when the group's
    /// [`GroupConfig::algorithms`](crate::GroupConfig::algorithms) may pick one.
    pub(crate) nontree: Option<Box<crate::nontree::NonTreeLinks>>,
    /// The group's algorithm table, when it tunes fragment sizes per operation and
    /// message size ([`AlgorithmTable::segment`]), with the fragment of the last call.
    pub(crate) tuned: Option<Box<TunedFragments>>,
    /// Inside a call whose fragment size the table set (the collectives it is made of
    /// keep it).
    pub(crate) in_tuned: bool,
    /// Staging buffers on every tree link, between member processes: long messages
    /// go through them in one copy instead of through the rings' slots
    /// ([`crate::large::staged`]).
    pub(crate) stages: Option<Box<crate::large::staged::Stages>>,
}

type Res<T> = Result<T, GroupError>;

/// A table that tunes fragment sizes, and the fragment its last lookup for each of
/// broadcast, reduce and allreduce gave. The lookup (the table's rules, then the
/// nearest of its size classes on a log scale) costs several hundred instructions,
/// more than a small collective itself; programs repeat one size call after call.
#[derive(Debug)]
pub(crate) struct TunedFragments {
    table: Arc<AlgorithmTable>,
    /// Per operation: the mode and length looked up, and the fragment.
    last: [Option<(SyncMode, usize, usize)>; 3],
}

impl TunedFragments {
    /// `table` where it tunes fragment sizes, else `None` (the group's own size).
    pub(crate) fn of(table: Option<&Arc<AlgorithmTable>>) -> Option<Box<TunedFragments>> {
        let table = table.filter(|t| t.tunes_segments())?.clone();
        Some(Box::new(TunedFragments {
            table,
            last: [None; 3],
        }))
    }

    fn slot(op: Op) -> Option<usize> {
        match op {
            Op::Broadcast => Some(0),
            Op::Reduce => Some(1),
            Op::Allreduce => Some(2),
            _ => None,
        }
    }
}

/// The `(start, end)` ranges of `len` items in pieces of `chunk` (the last shorter).
fn loan_chunks(len: usize, chunk: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..len)
        .step_by(chunk.max(1))
        .map(move |o| (o, (o + chunk.max(1)).min(len)))
}

impl<L: Link> Context<L> {
    /// Which tree of the group this is (index in the list the group was built from).
    pub fn id(&self) -> usize {
        self.id
    }
    /// This member's rank (index in the group's CPU list).
    pub fn rank(&self) -> Rank {
        self.rank
    }
    /// This member's OS CPU id.
    pub fn cpu(&self) -> CpuId {
        self.shared.cpus[self.rank]
    }
    /// Number of members.
    pub fn size(&self) -> usize {
        self.shared.cpus.len()
    }
    /// Rank of this tree's root (its position in this tree is another matter: ranks
    /// follow the group's first tree).
    pub fn root(&self) -> Rank {
        self.root
    }
    /// True on the root.
    pub fn is_root(&self) -> bool {
        self.parent.is_none()
    }
    /// Parent's rank (None on the root).
    pub fn parent(&self) -> Option<Rank> {
        self.parent.as_ref().map(|l| l.rank)
    }
    /// Children's ranks in send order.
    pub fn children(&self) -> Vec<Rank> {
        self.children.iter().map(|l| l.rank).collect()
    }
    /// Operation timeout (from the group's configuration).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
    /// Collectives called on this context so far.
    pub fn sequence(&self) -> u32 {
        self.seq
    }

    /// Turns a transport error on the link to `peer` into the group's error, recording
    /// a failure (and waking every member) where one happened.
    #[cold]
    pub(crate) fn fail(&self, e: TransportError, peer: Rank, op: &'static str) -> GroupError {
        let sh = &self.shared;
        match e {
            TransportError::Aborted => sh.failure_error().unwrap_or(GroupError::PeerFailed {
                rank: peer,
                cpu: sh.cpus[peer],
                what: "the group was aborted".into(),
            }),
            TransportError::Disconnected => sh.record(
                peer,
                format!(
                    "left the group while member {} still expected it in {op}",
                    self.rank
                ),
                false,
            ),
            TransportError::PeerDied { .. } => sh.record(
                peer,
                format!(
                    "its process died while member {} expected it in {op}",
                    self.rank
                ),
                false,
            ),
            TransportError::Timeout(after) => {
                let err = GroupError::Timeout {
                    rank: self.rank,
                    cpu: self.cpu(),
                    peer,
                    op,
                    after,
                };
                sh.record(self.rank, err.to_string(), false);
                err
            }
            TransportError::PeerInBarrier { mark } => self.mismatch(format!(
                "in {op} it found member {peer} in barrier #{mark}: members called different collectives"
            )),
            other => self.mismatch(format!("{op} with member {peer}: {other}")),
        }
    }

    /// Starts collective `coll`: fails fast once the group has failed (even where this
    /// collective could still complete locally) and returns the call's tag.
    #[inline(always)]
    pub(crate) fn begin(&mut self, coll: Coll) -> Res<Tag> {
        if self.shared.is_aborted() {
            return Err(self.fail(TransportError::Aborted, self.rank, coll.name()));
        }
        self.seq = self.seq.wrapping_add(1);
        Ok(Tag::new(coll, self.seq))
    }

    /// How this context's collectives synchronize (default: the group's
    /// [`GroupConfig::sync`](crate::GroupConfig::sync), loose unless set).
    pub fn sync_mode(&self) -> SyncMode {
        self.sync
    }

    /// Makes every later collective on this context run `mode`. Every member must make
    /// the same choice at the same point (a strict collective adds barriers, which
    /// the other members must call too).
    pub fn set_sync(&mut self, mode: SyncMode) {
        self.sync = mode;
    }

    /// Runs `f` (one or more collectives on this context) in `mode`, then restores the
    /// context's own mode: the per-call choice, e.g.
    /// `ctx.with_sync(SyncMode::Strict, |c| c.reduce_slice(&mut v, |a, b| a + b))`.
    pub fn with_sync<T>(&mut self, mode: SyncMode, f: impl FnOnce(&mut Self) -> Res<T>) -> Res<T> {
        let before = std::mem::replace(&mut self.sync, mode);
        let r = f(self);
        self.sync = before;
        r
    }

    /// Runs one collective in this context's mode: as it is when loose (or inside a
    /// strict collective), between two barriers when strict.
    #[inline(always)]
    fn synced<T>(&mut self, f: impl FnOnce(&mut Self) -> Res<T>) -> Res<T> {
        if self.runs_loose() {
            return f(self);
        }
        self.strict_section(f)
    }

    /// True when a collective runs as it is (loose, or inside a strict one). The word
    /// collectives test this themselves instead of going through [`synced`]
    /// (Context::synced): calling their body from two places would keep it out of
    /// line, a call per operation on the fast path.
    #[inline(always)]
    fn runs_loose(&self) -> bool {
        self.sync == SyncMode::Loose || self.in_strict
    }

    /// A strict collective: a barrier (no data moves before every member entered),
    /// the collective, a barrier (no member leaves before it ended everywhere).
    #[inline(never)]
    fn strict_section<T>(&mut self, f: impl FnOnce(&mut Self) -> Res<T>) -> Res<T> {
        self.in_strict = true;
        let r = match self.barrier() {
            Ok(()) => match f(self) {
                Ok(v) => self.barrier().map(|()| v),
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        self.in_strict = false;
        r
    }

    /// Fails the call on every member (before anything is sent) when `len` bytes are
    /// more than [`GroupConfig::max_message`](crate::GroupConfig::max_message).
    #[inline]
    pub(crate) fn check_len(&self, len: usize, t: Tag) -> Res<()> {
        if len > self.max_message {
            return Err(self.mismatch(format!(
                "{}: a message of {len} bytes is longer than the limit of {} bytes (GroupConfig::max_message)",
                t.op(),
                self.max_message
            )));
        }
        Ok(())
    }

    /// Records a mismatch as this member's failure (waking everyone) and returns it.
    #[cold]
    pub(crate) fn mismatch(&self, what: String) -> GroupError {
        let err = GroupError::Mismatch {
            rank: self.rank,
            what,
        };
        self.shared.record(self.rank, err.to_string(), false);
        err
    }

    /// Checks a received tag against the collective this member is in.
    #[inline(always)]
    fn expect(&self, got: u64, t: Tag, peer: Rank) -> Res<()> {
        if got == t.word() {
            return Ok(());
        }
        Err(self.crossed(got, t, peer))
    }

    #[cold]
    pub(crate) fn crossed(&self, got: u64, t: Tag, peer: Rank) -> GroupError {
        if crate::large::staged::staged_for(got, t.word()) {
            return self.mismatch(format!(
                "{}: member {peer} stages a long message where this member expects a short one through the ring (the data differ in length)",
                t.op()
            ));
        }
        self.mismatch(format!(
            "in {} #{} on context {} it received {} from member {peer}: members called different collectives",
            t.op(),
            t.seq(),
            self.id,
            Tag::describe(got)
        ))
    }

    #[inline(always)]
    fn up_word(&mut self, w: u64, t: Tag) -> Res<()> {
        if let Some(p) = self.parent.as_mut() {
            if let Err(e) = p.link.send_word(t.word(), w, Some(self.timeout)) {
                let r = p.rank;
                return Err(self.fail(e, r, t.op()));
            }
        }
        Ok(())
    }

    /// Sends a zero-payload message to the parent (header only, no payload store).
    #[inline(always)]
    fn up_empty(&mut self, t: Tag) -> Res<()> {
        if let Some(p) = self.parent.as_mut() {
            if let Err(e) = p.link.send_empty(t.word(), Some(self.timeout)) {
                let r = p.rank;
                return Err(self.fail(e, r, t.op()));
            }
        }
        Ok(())
    }

    /// Sends a zero-payload message to every child.
    #[inline(always)]
    fn down_empty(&mut self, t: Tag) -> Res<()> {
        for i in 0..self.children.len() {
            if let Err(e) = self.children[i]
                .link
                .send_empty(t.word(), Some(self.timeout))
            {
                let r = self.children[i].rank;
                return Err(self.fail(e, r, t.op()));
            }
        }
        Ok(())
    }

    #[inline(always)]
    fn down_word(&mut self, w: u64, t: Tag) -> Res<()> {
        for i in 0..self.children.len() {
            if let Err(e) = self.children[i]
                .link
                .send_word(t.word(), w, Some(self.timeout))
            {
                let r = self.children[i].rank;
                return Err(self.fail(e, r, t.op()));
            }
        }
        Ok(())
    }

    #[inline(always)]
    fn recv_child_word(&mut self, i: usize, t: Tag) -> Res<u64> {
        let c = &mut self.children[i];
        match c.link.recv_word(Some(self.timeout)) {
            Ok((tag, w)) => {
                let r = c.rank;
                self.expect(tag, t, r)?;
                Ok(w)
            }
            Err(e) => {
                let r = c.rank;
                Err(self.fail(e, r, t.op()))
            }
        }
    }

    /// Receives the next message from the parent (`None`) or from child `i` into
    /// `into`, checking its tag; its length.
    fn recv_checked(&mut self, child: Option<usize>, into: &mut [u8], t: Tag) -> Res<usize> {
        let p = match child {
            Some(i) => &mut self.children[i],
            None => self.parent.as_mut().expect("a member with a parent"),
        };
        match p.link.recv(into, Some(self.timeout)) {
            Ok((tag, n)) => {
                let r = p.rank;
                self.expect(tag, t, r)?;
                Ok(n)
            }
            Err(e) => {
                let r = p.rank;
                Err(self.fail(e, r, t.op()))
            }
        }
    }

    #[inline(always)]
    fn recv_parent_word(&mut self, t: Tag) -> Res<Option<u64>> {
        let Some(p) = self.parent.as_mut() else {
            return Ok(None);
        };
        match p.link.recv_word(Some(self.timeout)) {
            Ok((tag, w)) => {
                let r = p.rank;
                self.expect(tag, t, r)?;
                Ok(Some(w))
            }
            Err(e) => {
                let r = p.rank;
                Err(self.fail(e, r, t.op()))
            }
        }
    }

    /// Broadcasts one word from the root: the root's `w` is returned on every member
    /// (other members' `w` is ignored). Zero-copy fast path.
    #[inline(always)]
    pub fn broadcast_word(&mut self, w: u64) -> Res<u64> {
        if self.runs_loose() {
            return self.broadcast_word_loose(w);
        }
        self.strict_section(|c| c.broadcast_word_loose(w))
    }

    /// [`broadcast_word`](Context::broadcast_word) without the synchronization of [`SyncMode::Strict`].
    #[inline(always)]
    fn broadcast_word_loose(&mut self, w: u64) -> Res<u64> {
        let t = self.begin(Coll::Broadcast)?;
        let w = self.recv_parent_word(t)?.unwrap_or(w);
        self.down_word(w, t)?;
        Ok(w)
    }

    /// Broadcasts a zero-payload message from the root (a signal).
    #[inline(always)]
    pub fn broadcast_empty(&mut self) -> Res<()> {
        if self.runs_loose() {
            return self.broadcast_empty_loose();
        }
        self.strict_section(|c| c.broadcast_empty_loose())
    }

    /// [`broadcast_empty`](Context::broadcast_empty) without the synchronization of [`SyncMode::Strict`].
    #[inline(always)]
    fn broadcast_empty_loose(&mut self) -> Res<()> {
        let t = self.begin(Coll::Broadcast)?;
        self.recv_parent_word(t)?;
        self.down_empty(t)
    }

    /// Broadcasts bytes from the root: on the root `buf` is sent, elsewhere it is
    /// replaced by the root's bytes. Messages larger than one channel message are sent
    /// as fragments that every inner member forwards as soon as it has them.
    pub fn broadcast(&mut self, buf: &mut Vec<u8>) -> Res<()> {
        self.synced(|c| c.broadcast_loose(buf))
    }

    /// [`broadcast`](Context::broadcast) without the synchronization of [`SyncMode::Strict`].
    #[inline]
    fn broadcast_loose(&mut self, buf: &mut Vec<u8>) -> Res<()> {
        let t = self.begin(Coll::Broadcast)?;
        let mut scratch = std::mem::take(&mut self.scratch);
        let r = self.broadcast_inner(buf, &mut scratch, t);
        self.scratch = scratch;
        r
    }

    fn broadcast_inner(&mut self, buf: &mut Vec<u8>, scratch: &mut [u8], t: Tag) -> Res<()> {
        let max = self.segment;
        if self.parent.is_none() {
            self.check_len(buf.len(), t)?;
            let mut off = 0;
            loop {
                let end = (off + max).min(buf.len());
                self.send_children(&buf[off..end], t)?;
                if end - off < max {
                    return Ok(());
                }
                off = end;
            }
        }
        buf.clear();
        loop {
            let n = self.recv_checked(None, scratch, t)?;
            self.send_children(&scratch[..n], t)?;
            buf.extend_from_slice(&scratch[..n]);
            if n < max {
                return Ok(());
            }
        }
    }

    fn send_children(&mut self, msg: &[u8], t: Tag) -> Res<()> {
        for i in 0..self.children.len() {
            if let Err(e) = self.children[i]
                .link
                .send(t.word(), msg, Some(self.timeout))
            {
                let r = self.children[i].rank;
                return Err(self.fail(e, r, t.op()));
            }
        }
        Ok(())
    }

    /// Sends `data` to one link as fragments of at most `max` bytes (a last fragment
    /// shorter than `max` ends it).
    fn send_fragments(&mut self, to: Option<usize>, data: &[u8], t: Tag) -> Res<()> {
        let max = self.segment;
        let timeout = self.timeout;
        let peer = match to {
            Some(i) => &mut self.children[i],
            None => match self.parent.as_mut() {
                Some(p) => p,
                None => return Ok(()),
            },
        };
        let mut off = 0;
        loop {
            let end = (off + max).min(data.len());
            if let Err(e) = peer.link.send(t.word(), &data[off..end], Some(timeout)) {
                let r = peer.rank;
                return Err(self.fail(e, r, t.op()));
            }
            if end - off < max {
                return Ok(());
            }
            off = end;
        }
    }

    /// Receives fragments from child `child` (or the parent for `None`) into `out`
    /// (appending) until a short one.
    fn recv_bytes(&mut self, child: Option<usize>, out: &mut Vec<u8>, t: Tag) -> Res<()> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let max = self.segment;
        let r = loop {
            if child.is_none() && self.parent.is_none() {
                break Ok(());
            }
            match self.recv_checked(child, &mut scratch, t) {
                Ok(n) => {
                    out.extend_from_slice(&scratch[..n]);
                    if n < max {
                        break Ok(());
                    }
                }
                Err(e) => break Err(e),
            }
        };
        self.scratch = scratch;
        r
    }

    /// Reduces one scalar per member to the root with `op` (associative; values are
    /// combined in tree pre-order: own value first, then each child's subtree in send
    /// order, so a commutative `op` gives the plain fold). Returns `Some(result)` on the
    /// root and `None` elsewhere. Zero-copy word path.
    #[inline(always)]
    pub fn reduce<T: Word>(&mut self, v: T, op: impl Fn(T, T) -> T) -> Res<Option<T>> {
        if self.runs_loose() {
            return self.reduce_loose(v, op);
        }
        self.strict_section(|c| c.reduce_loose(v, op))
    }

    /// [`reduce`](Context::reduce) without the synchronization of [`SyncMode::Strict`].
    #[inline(always)]
    fn reduce_loose<T: Word>(&mut self, v: T, op: impl Fn(T, T) -> T) -> Res<Option<T>> {
        let t = self.begin(Coll::Reduce)?;
        let mut acc = v;
        for i in 0..self.children.len() {
            let w = self.recv_child_word(i, t)?;
            acc = op(acc, T::from_word(w));
        }
        if self.parent.is_some() {
            self.up_word(acc.to_word(), t)?;
            Ok(None)
        } else {
            Ok(Some(acc))
        }
    }

    /// A zero-payload reduction: returns once every child subtree has arrived (on the
    /// root: once every member has called it).
    #[inline(always)]
    pub fn reduce_empty(&mut self) -> Res<()> {
        if self.runs_loose() {
            return self.reduce_empty_loose();
        }
        self.strict_section(|c| c.reduce_empty_loose())
    }

    /// [`reduce_empty`](Context::reduce_empty) without the synchronization of [`SyncMode::Strict`].
    #[inline(always)]
    fn reduce_empty_loose(&mut self) -> Res<()> {
        let t = self.begin(Coll::Reduce)?;
        self.reduce_empty_tagged(t)
    }

    #[inline(always)]
    fn reduce_empty_tagged(&mut self, t: Tag) -> Res<()> {
        for i in 0..self.children.len() {
            self.recv_child_word(i, t)?;
        }
        self.up_empty(t)
    }

    /// [`reduce`](Context::reduce) then broadcast of the result: every member gets it.
    #[inline(always)]
    pub fn allreduce<T: Word>(&mut self, v: T, op: impl Fn(T, T) -> T) -> Res<T> {
        if self.runs_loose() {
            return self.allreduce_loose(v, op);
        }
        self.strict_section(|c| c.allreduce_loose(v, op))
    }

    /// [`allreduce`](Context::allreduce) without the synchronization of [`SyncMode::Strict`].
    #[inline(always)]
    fn allreduce_loose<T: Word>(&mut self, v: T, op: impl Fn(T, T) -> T) -> Res<T> {
        if self.nontree.is_some() && self.allreduce_by_doubling(T::BYTES) {
            return self.allreduce_doubling_word(v, op);
        }
        let r = self.reduce(v, op)?;
        let w = self.broadcast_word(r.map_or(0, |x| x.to_word()))?;
        Ok(T::from_word(w))
    }

    /// Barrier (the paper's: a zero-payload reduce, then a zero-payload broadcast). No
    /// member returns before every member has called it.
    ///
    /// With exactly two members the root's release carries no more information than
    /// its own arrival, so both send their arrival at once and wait for the other's:
    /// one message latency instead of two, with the same two messages.
    ///
    /// When the group's [`algorithms`](crate::GroupConfig::algorithms) table picks the
    /// dissemination barrier for this context's mode, it runs that instead (over
    /// links beyond the tree), except with two members: there dissemination is this
    /// same exchange (one round, each member signals the other and waits for it), and
    /// the tree's one link carries it without the mesh's general receive.
    #[inline(always)]
    pub fn barrier(&mut self) -> Res<()> {
        let pair = self.size() == 2;
        if !pair && self.barrier_by_dissemination() {
            return self.barrier_dissemination();
        }
        if pair {
            // One flag each way (the link's barrier), not a message each way. The
            // group's failure is looked at (as `begin` does) after this member's flag
            // is set and before it waits: between seeing the other's flag and setting
            // its own for the next barrier a member is on the other's critical path,
            // and the look is a chain of dependent loads (the group's and the job's
            // abort words).
            self.seq = self.seq.wrapping_add(1);
            let t = Tag::new(Coll::Barrier, self.seq);
            let shared = &self.shared;
            let mut failed = false;
            let p = match self.parent.as_mut() {
                Some(p) => p,
                None => &mut self.children[0],
            };
            let r = p
                .link
                .pair_barrier_checked(t.word(), Some(self.timeout), || {
                    failed = shared.is_aborted();
                    failed
                });
            let peer = p.rank;
            return match r {
                Ok(None) => Ok(()),
                Ok(Some(got)) => Err(self.crossed(got, t, peer)),
                // The group had failed before this barrier (what `begin` reports).
                Err(_) if failed => Err(self.fail(TransportError::Aborted, self.rank, t.op())),
                Err(e) => Err(self.fail(e, peer, t.op())),
            };
        }
        let t = self.begin(Coll::Barrier)?;
        self.reduce_empty_tagged(t)?;
        self.recv_parent_word(t)?;
        self.down_empty(t)
    }

    /// Bytes per fragment of a call of `op` (broadcast, reduce or allreduce) with
    /// `len` bytes per member in this context's mode: the size the group's algorithm
    /// table tuned for that operation and size ([`AlgorithmTable::segment`]: a
    /// `SMELT_TUNE` rule's `segment=`, or the host's tuning file), rounded as
    /// [`GroupConfig::segment`](crate::GroupConfig::segment) is, else the group's own.
    /// Every member looks up the same table with the same length, so all of them cut
    /// the message alike. The answer for each of the three operations is remembered
    /// until the mode or the length changes (the lookup costs more than a small
    /// collective; programs repeat one size call after call).
    pub fn fragment_bytes(&mut self, op: Op, len: usize) -> usize {
        let sync = self.sync;
        let Some(t) = self.tuned.as_ref() else {
            return self.segment;
        };
        let i = TunedFragments::slot(op);
        if let Some((s, l, f)) = i.and_then(|i| t.last[i]) {
            if s == sync && l == len {
                return f;
            }
        }
        let want = t.table.segment(sync, op, len as u64);
        let f = match want {
            Some(w) => {
                let slot = smelt_transport::PAYLOAD_PER_SLOT;
                w.clamp(slot, self.scratch.len().max(slot)) / slot * slot
            }
            None => self.segment,
        };
        if let (Some(t), Some(i)) = (self.tuned.as_mut(), i) {
            t.last[i] = Some((sync, len, f));
        }
        f
    }

    /// Runs `f` with [`fragment_bytes`](Context::fragment_bytes) of `op` and `len`
    /// (kept by the collectives `f` is made of).
    #[inline]
    fn tuned_segment<R>(&mut self, op: Op, len: usize, f: impl FnOnce(&mut Self) -> R) -> R {
        // A message of one slot is one fragment whatever the size (every fragment is at
        // least a slot): no lookup.
        if self.tuned.is_none() || self.in_tuned || len <= smelt_transport::PAYLOAD_PER_SLOT {
            return f(self);
        }
        let keep = self.segment;
        self.segment = self.fragment_bytes(op, len);
        self.in_tuned = true;
        let r = f(self);
        self.segment = keep;
        self.in_tuned = false;
        r
    }

    /// A [`barrier`](Context::barrier) that also agrees on a word: every member gets
    /// the combination of every member's `w`. It runs as the barrier does: by
    /// dissemination where the group's algorithm table picks it, else as a reduction
    /// to the root and a broadcast. `combine` must be commutative, associative and
    /// idempotent (min, max, and, or, "equal or a marker"), because dissemination
    /// reaches a member more than once when the group's size is not a power of two.
    /// The C API checks that every member called the same collective this way.
    ///
    /// With two members both run dissemination's one round over the tree's link, whatever
    /// the table says: each sends its word to the other and combines the one it gets.
    pub fn barrier_agree(&mut self, w: u64, combine: impl Fn(u64, u64) -> u64) -> Res<u64> {
        if self.size() == 2 {
            let t = self.begin(Coll::Dissemination)?;
            let other = if self.parent.is_some() {
                self.up_word(w, t)?;
                self.recv_parent_word(t)?.unwrap_or(w)
            } else {
                self.down_word(w, t)?;
                self.recv_child_word(0, t)?
            };
            return Ok(combine(w, other));
        }
        if self.barrier_by_dissemination() {
            return self.dissemination(Some((w, &combine)));
        }
        let all = self.reduce(w, &combine)?;
        self.broadcast_word(all.unwrap_or(0))
    }

    /// Element-wise reduction of equally long slices to the root. On the root `data`
    /// holds the result afterwards and `true` is returned; elsewhere `data` is used as
    /// scratch (it holds the subtree's partial result). Slices of different lengths
    /// give [`GroupError::Mismatch`].
    pub fn reduce_slice<T: Word>(&mut self, data: &mut [T], op: impl Fn(T, T) -> T) -> Res<bool> {
        let len = std::mem::size_of_val(data);
        self.synced(|c| c.tuned_segment(Op::Reduce, len, |c| c.reduce_slice_loose(data, op)))
    }

    /// [`reduce_slice`](Context::reduce_slice) without the synchronization of [`SyncMode::Strict`].
    #[inline]
    fn reduce_slice_loose<T: Word>(&mut self, data: &mut [T], op: impl Fn(T, T) -> T) -> Res<bool> {
        let t = self.begin(Coll::ReduceSlice)?;
        let mut bytes = std::mem::take(&mut self.packed);
        let r = self.reduce_slice_inner(data, op, &mut bytes, t);
        self.packed = bytes;
        r
    }

    fn reduce_slice_inner<T: Word>(
        &mut self,
        data: &mut [T],
        op: impl Fn(T, T) -> T,
        bytes: &mut Vec<u8>,
        t: Tag,
    ) -> Res<bool> {
        let len = data.len() * T::BYTES;
        self.check_len(len, t)?;
        if self.lends(len) {
            return self.reduce_slice_lent(data, op, bytes, t);
        }
        bytes.clear();
        pack(data, bytes);
        // Fragments are multiples of 48 bytes, so no value straddles two of them.
        let mut combine = |acc: &mut [u8], other: &[u8]| {
            for (a, o) in acc
                .chunks_exact_mut(T::BYTES)
                .zip(other.chunks_exact(T::BYTES))
            {
                let v = op(unpack_one::<T>(a), unpack_one::<T>(o));
                a.copy_from_slice(&v.to_word().to_le_bytes()[..T::BYTES]);
            }
        };
        self.reduce_pipeline(bytes, &mut combine, t, T::BYTES)?;
        if self.parent.is_some() {
            return Ok(false);
        }
        unpack_into(bytes, data);
        Ok(true)
    }

    /// [`reduce_slice`](Context::reduce_slice) by loans, on the values themselves:
    /// chunk by chunk, each child's lent bytes are combined straight into `data`, and
    /// only the chunk going up is packed (into `bytes`) and lent to the parent. The
    /// same messages and the same combining order as [`reduce_lent`](Self::reduce_lent).
    fn reduce_slice_lent<T: Word>(
        &mut self,
        data: &mut [T],
        op: impl Fn(T, T) -> T,
        bytes: &mut Vec<u8>,
        t: Tag,
    ) -> Res<bool> {
        // LOAN_CHUNK is a multiple of 48, so of every value size.
        let per = crate::group::LOAN_CHUNK / T::BYTES;
        for (e0, e1) in loan_chunks(data.len(), per) {
            let want = (e1 - e0) * T::BYTES;
            for i in 0..self.children.len() {
                let acc = &mut data[e0..e1];
                self.borrow_chunk(Some(i), want, t, |src| {
                    for (x, c) in acc.iter_mut().zip(src.chunks_exact(T::BYTES)) {
                        *x = op(*x, unpack_one(c));
                    }
                })?;
            }
            if self.parent.is_some() {
                bytes.clear();
                pack(&data[e0..e1], bytes);
                self.lend_chunk(true, bytes, t)?;
            }
        }
        Ok(self.parent.is_none())
    }

    /// True if a message of `len` bytes is lent: long enough, and every link of this
    /// member can lend (the same answer at both ends of each link).
    #[inline]
    fn lends(&self, len: usize) -> bool {
        len >= self.lend_from
            && self.parent.as_ref().is_none_or(|p| p.link.can_lend())
            && self.children.iter().all(|c| c.link.can_lend())
    }

    /// Receives one lent chunk from the parent (`None`) or child `i` and passes it to
    /// `take` if its tag and length are right; then checks what came.
    fn borrow_chunk(
        &mut self,
        from: Option<usize>,
        want: usize,
        t: Tag,
        take: impl FnOnce(&[u8]),
    ) -> Res<()> {
        let timeout = self.timeout;
        let peer = match from {
            Some(i) => &mut self.children[i],
            None => self.parent.as_mut().expect("a member with a parent"),
        };
        let r = peer.link.borrow(Some(timeout), |tag, src| {
            if tag != t.word() {
                return Err((tag, src.len()));
            }
            if src.len() != want {
                return Err((tag, src.len()));
            }
            take(src);
            Ok(())
        });
        let rank = peer.rank;
        match r {
            Ok(Ok(())) => Ok(()),
            Ok(Err((tag, n))) => {
                self.expect(tag, t, rank)?;
                Err(self.mismatch(format!(
                    "{}: member {rank} lends {n} bytes where this member expects {want}",
                    t.op()
                )))
            }
            Err(e) => Err(self.fail(e, rank, t.op())),
        }
    }

    /// Lends `data` to the parent (`to_parent`) or to every child at once.
    fn lend_chunk(&mut self, to_parent: bool, data: &[u8], t: Tag) -> Res<()> {
        let timeout = Some(self.timeout);
        let r = if to_parent {
            match self.parent.as_mut() {
                Some(p) => L::lend_all(&mut [&mut p.link], t.word(), data, timeout)
                    .map_err(|(_, e)| (p.rank, e)),
                None => Ok(()),
            }
        } else if self.children.is_empty() {
            Ok(())
        } else {
            let mut links: Vec<&mut L> = self.children.iter_mut().map(|c| &mut c.link).collect();
            L::lend_all(&mut links, t.word(), data, timeout)
                .map_err(|(i, e)| (self.children[i].rank, e))
        };
        r.map_err(|(rank, e)| self.fail(e, rank, t.op()))
    }

    /// [`broadcast_into`](Context::broadcast_into) by loans: chunk by chunk, copy the
    /// parent's chunk once, then lend it to every child at once.
    fn broadcast_lent(&mut self, buf: &mut [u8], t: Tag) -> Res<()> {
        for (off, end) in loan_chunks(buf.len(), crate::group::LOAN_CHUNK) {
            if self.parent.is_some() {
                let dst = &mut buf[off..end];
                self.borrow_chunk(None, end - off, t, |src| dst.copy_from_slice(src))?;
            }
            self.lend_chunk(false, &buf[off..end], t)?;
        }
        Ok(())
    }

    /// The reduction's pipeline by loans: chunk by chunk, combine every child's lent
    /// chunk into this member's in place (no copy), then lend it to the parent.
    fn reduce_lent(
        &mut self,
        data: &mut [u8],
        combine: &mut dyn FnMut(&mut [u8], &[u8]),
        t: Tag,
    ) -> Res<()> {
        for (off, end) in loan_chunks(data.len(), crate::group::LOAN_CHUNK) {
            for i in 0..self.children.len() {
                let acc = &mut data[off..end];
                self.borrow_chunk(Some(i), end - off, t, |src| combine(acc, src))?;
            }
            self.lend_chunk(true, &data[off..end], t)?;
        }
        Ok(())
    }

    /// A reduction as a pipeline of fragments over `data` (the callers checked its
    /// length and chose not to lend): fragment by fragment (each
    /// [`segment`](crate::GroupConfig::segment) bytes, the last one shorter, an empty one
    /// when the length is a multiple of it), each child's fragment is received and
    /// folded into this member's (`combine(acc, other)`, children in send order), then
    /// the fragment goes on to the parent while the next one arrives. Children whose
    /// data has another length give [`GroupError::Mismatch`] (`unit`: bytes per value,
    /// for the message).
    fn reduce_pipeline(
        &mut self,
        data: &mut [u8],
        combine: &mut dyn FnMut(&mut [u8], &[u8]),
        t: Tag,
        unit: usize,
    ) -> Res<()> {
        if self.stages_for(data.len()) {
            return self.reduce_staged(data, combine, t);
        }
        let seg = self.segment;
        let mut scratch = std::mem::take(&mut self.scratch);
        let r = (|| {
            let mut off = 0;
            loop {
                let want = (data.len() - off).min(seg);
                for i in 0..self.children.len() {
                    let n = self.recv_checked(Some(i), &mut scratch, t)?;
                    if n != want {
                        return Err(self.part_mismatch(t, i, n, want, off, data.len(), unit));
                    }
                    combine(&mut data[off..off + n], &scratch[..n]);
                }
                if let Some(p) = self.parent.as_mut() {
                    if let Err(e) =
                        p.link
                            .send(t.word(), &data[off..off + want], Some(self.timeout))
                    {
                        let r = p.rank;
                        return Err(self.fail(e, r, t.op()));
                    }
                }
                off += want;
                if want < seg {
                    return Ok(());
                }
            }
        })();
        self.scratch = scratch;
        r
    }

    /// [`reduce_slice`](Context::reduce_slice) then broadcast: every member's `data`
    /// holds the result.
    pub fn allreduce_slice<T: Word>(&mut self, data: &mut [T], op: impl Fn(T, T) -> T) -> Res<()> {
        let len = std::mem::size_of_val(data);
        self.synced(|c| c.tuned_segment(Op::Allreduce, len, |c| c.allreduce_slice_loose(data, op)))
    }

    /// [`allreduce_slice`](Context::allreduce_slice) without the synchronization of [`SyncMode::Strict`].
    #[inline]
    fn allreduce_slice_loose<T: Word>(
        &mut self,
        data: &mut [T],
        op: impl Fn(T, T) -> T,
    ) -> Res<()> {
        if self.nontree.is_some() && self.allreduce_by_doubling(data.len() * T::BYTES) {
            return self.allreduce_doubling_slice(data, op);
        }
        self.reduce_slice(data, op)?;
        // Every member knows the result's length: broadcast it in place (lent between
        // threads when long).
        let mut bytes = std::mem::take(&mut self.packed);
        bytes.clear();
        if self.is_root() {
            pack(data, &mut bytes);
        } else {
            bytes.resize(data.len() * T::BYTES, 0);
        }
        let r = self
            .broadcast_into(&mut bytes)
            .map(|()| unpack_into(&bytes, data));
        self.packed = bytes;
        r
    }

    /// Broadcasts a buffer whose length every member knows: the root's `buf` is sent
    /// (and left unchanged), every other member's `buf` is overwritten with it. Same
    /// messages as [`broadcast`](Context::broadcast), without allocating; a member
    /// whose `buf` has another length than the root's gets [`GroupError::Mismatch`].
    pub fn broadcast_into(&mut self, buf: &mut [u8]) -> Res<()> {
        self.synced(|c| c.tuned_segment(Op::Broadcast, buf.len(), |c| c.broadcast_into_loose(buf)))
    }

    /// [`broadcast_into`](Context::broadcast_into) without the synchronization of [`SyncMode::Strict`].
    #[inline]
    fn broadcast_into_loose(&mut self, buf: &mut [u8]) -> Res<()> {
        let t = self.begin(Coll::Broadcast)?;
        if self.is_small(buf.len()) {
            self.check_len(buf.len(), t)?;
            if let Some(r) = self.broadcast_small(buf, t) {
                return r;
            }
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        let r = self.broadcast_into_inner(buf, &mut scratch, t);
        self.scratch = scratch;
        r
    }

    /// [`broadcast_into_inner`](Context::broadcast_into_inner) of a small message
    /// ([`is_small`](Context::is_small)): received on the stack. `None`: the parent
    /// sent a longer message, still queued, for the general path to receive and report.
    #[inline]
    fn broadcast_small(&mut self, buf: &mut [u8], t: Tag) -> Option<Res<()>> {
        let Some(p) = self.parent.as_mut() else {
            return Some(self.send_children(buf, t));
        };
        let mut part = [0u8; crate::group::SMALL_MESSAGE_BYTES];
        let n = match p.link.recv(&mut part, Some(self.timeout)) {
            Ok((tag, n)) => {
                let r = p.rank;
                if let Err(e) = self.expect(tag, t, r) {
                    return Some(Err(e));
                }
                n
            }
            Err(TransportError::BufferTooSmall { .. }) => return None,
            Err(e) => {
                let r = p.rank;
                return Some(Err(self.fail(e, r, t.op())));
            }
        };
        if n != buf.len() {
            return Some(Err(self.mismatch(format!(
                "{}: the root sent {n} bytes, this member expects {}",
                t.op(),
                buf.len()
            ))));
        }
        // Children first, then this member's copy (as the general path).
        if let Err(e) = self.send_children(&part[..n], t) {
            return Some(Err(e));
        }
        buf.copy_from_slice(&part[..n]);
        Some(Ok(()))
    }

    fn broadcast_into_inner(&mut self, buf: &mut [u8], scratch: &mut [u8], t: Tag) -> Res<()> {
        let max = self.segment;
        self.check_len(buf.len(), t)?;
        if self.lends(buf.len()) {
            if self.size() == 2 && buf.len() >= crate::PAIR_COPY_FROM && self.shared.shares_copies {
                return self.broadcast_pair_lent(buf, t);
            }
            return self.broadcast_lent(buf, t);
        }
        if self.stages_for(buf.len()) {
            return self.broadcast_staged(buf, t);
        }
        let mut off = 0;
        loop {
            let n = match self.parent {
                None => {
                    let end = (off + max).min(buf.len());
                    self.send_children(&buf[off..end], t)?;
                    end - off
                }
                Some(_) => {
                    // Straight into `buf` where a whole fragment fits, else through
                    // scratch (the last, short fragment; or too much data: a mismatch).
                    let direct = buf.len() - off >= max;
                    let into = if direct {
                        &mut buf[off..off + max]
                    } else {
                        &mut scratch[..]
                    };
                    let n = self.recv_checked(None, into, t)?;
                    if off + n > buf.len() {
                        return Err(self.mismatch(format!(
                            "{}: the root sends more than this member's {} bytes",
                            t.op(),
                            buf.len()
                        )));
                    }
                    // Children first, then this member's copy.
                    if direct {
                        self.send_children(&buf[off..off + n], t)?;
                    } else {
                        self.send_children(&scratch[..n], t)?;
                        buf[off..off + n].copy_from_slice(&scratch[..n]);
                    }
                    n
                }
            };
            off += n;
            if n < max {
                break;
            }
        }
        if off != buf.len() {
            return Err(self.mismatch(format!(
                "{}: the root sent {off} bytes, this member expects {}",
                t.op(),
                buf.len()
            )));
        }
        Ok(())
    }

    /// Reduces equally long byte buffers to the root with a combining function of your
    /// own: `combine(acc, other)` folds `other` (a child subtree's partial result, as
    /// long as `acc`) into `acc`. Partial results are combined in tree pre-order, as
    /// [`reduce_slice`](Context::reduce_slice) does, with the same messages. On the root
    /// `data` holds the result and `true` is returned; elsewhere `data` is scratch.
    /// Buffers of different lengths give [`GroupError::Mismatch`].
    ///
    /// Long buffers cross the tree as a pipeline of fragments
    /// ([`GroupConfig::segment`](crate::GroupConfig::segment) bytes, a multiple of 48):
    /// `combine` is called once per fragment and child with the matching pieces of
    /// `acc` and `other`, so it must work element by element, for elements whose size
    /// divides 48 bytes (1, 2, 4, 8, 16, ...: every MPI basic type). A buffer of at most
    /// one fragment gets one call with the whole buffers.
    pub fn reduce_bytes(
        &mut self,
        data: &mut [u8],
        combine: impl FnMut(&mut [u8], &[u8]),
    ) -> Res<bool> {
        self.synced(|c| {
            c.tuned_segment(Op::Reduce, data.len(), |c| {
                c.reduce_bytes_loose(data, combine)
            })
        })
    }

    /// [`reduce_bytes`](Context::reduce_bytes) without the synchronization of [`SyncMode::Strict`].
    #[inline]
    fn reduce_bytes_loose(
        &mut self,
        data: &mut [u8],
        mut combine: impl FnMut(&mut [u8], &[u8]),
    ) -> Res<bool> {
        let t = self.begin(Coll::ReduceSlice)?;
        self.check_len(data.len(), t)?;
        if self.is_small(data.len()) {
            self.reduce_small(data, &mut combine, t, 1)?;
        } else if self.lends(data.len()) {
            self.reduce_lent(data, &mut combine, t)?;
        } else {
            self.reduce_pipeline(data, &mut combine, t, 1)?;
        }
        Ok(self.parent.is_none())
    }

    /// True when a byte collective of `len` bytes per member travels as one message of
    /// at most [`SMALL_MESSAGE_BYTES`](crate::SMALL_MESSAGE_BYTES) (four slots) whatever
    /// path it takes (shorter than a fragment, not lent): the small-message
    /// paths ([`reduce_small`](Context::reduce_small),
    /// [`broadcast_small`](Context::broadcast_small)) send and receive exactly
    /// what the general ones would, without their buffers and loops.
    #[inline(always)]
    fn is_small(&self, len: usize) -> bool {
        len <= crate::group::SMALL_MESSAGE_BYTES && len < self.segment && !self.lends(len)
    }

    /// [`reduce_pipeline`](Context::reduce_pipeline) of a small message
    /// ([`is_small`](Context::is_small)): each child's part received on the stack, no
    /// fragments, no scratch buffer to lend out and back (the interposer's reductions of
    /// 9 to 192 bytes come this way).
    #[inline]
    fn reduce_small(
        &mut self,
        data: &mut [u8],
        combine: &mut dyn FnMut(&mut [u8], &[u8]),
        t: Tag,
        unit: usize,
    ) -> Res<()> {
        let mut part = [0u8; crate::group::SMALL_MESSAGE_BYTES];
        let want = data.len();
        for i in 0..self.children.len() {
            let c = &mut self.children[i];
            let n = match c.link.recv(&mut part, Some(self.timeout)) {
                Ok((tag, n)) => {
                    let r = c.rank;
                    self.expect(tag, t, r)?;
                    n
                }
                // Longer than a slot: received as the pipeline would (its tag checked
                // too), then reported as the other length it is.
                Err(TransportError::BufferTooSmall { .. }) => {
                    let mut scratch = std::mem::take(&mut self.scratch);
                    let r = self.recv_checked(Some(i), &mut scratch, t);
                    self.scratch = scratch;
                    r?
                }
                Err(e) => {
                    let r = c.rank;
                    return Err(self.fail(e, r, t.op()));
                }
            };
            if n != want {
                return Err(self.part_mismatch(t, i, n, want, 0, data.len(), unit));
            }
            combine(data, &part[..n]);
        }
        if let Some(p) = self.parent.as_mut() {
            if let Err(e) = p.link.send(t.word(), data, Some(self.timeout)) {
                let r = p.rank;
                return Err(self.fail(e, r, t.op()));
            }
        }
        Ok(())
    }

    /// The error of a reduction whose child `i` sent `n` bytes where `want` were due at
    /// byte `off` of this member's `len` (in items of `unit` bytes).
    #[cold]
    #[allow(clippy::too_many_arguments)]
    fn part_mismatch(
        &mut self,
        t: Tag,
        i: usize,
        n: usize,
        want: usize,
        off: usize,
        len: usize,
        unit: usize,
    ) -> GroupError {
        let what = if unit == 1 { "bytes" } else { "values" };
        self.mismatch(format!(
            "{}: member {} sends another length than this member's {} {what} ({n} bytes where {want} were due at byte {off})",
            t.op(),
            self.children[i].rank,
            len / unit.max(1),
        ))
    }

    /// [`reduce_bytes`](Context::reduce_bytes) then
    /// [`broadcast_into`](Context::broadcast_into): every member's `data` holds the
    /// result (identical bytes everywhere).
    ///
    /// With exactly two members and data shorter than one channel message, both send
    /// their data at once and combine what they receive, the root's data first on both
    /// (so the bytes are identical, as in the tree's order): one message latency
    /// instead of two, as [`barrier`](Context::barrier) does.
    pub fn allreduce_bytes(
        &mut self,
        data: &mut [u8],
        combine: impl FnMut(&mut [u8], &[u8]),
    ) -> Res<()> {
        self.synced(|c| {
            c.tuned_segment(Op::Allreduce, data.len(), |c| {
                c.allreduce_bytes_loose(data, combine)
            })
        })
    }

    /// [`allreduce_bytes`](Context::allreduce_bytes) without the synchronization of [`SyncMode::Strict`].
    #[inline]
    fn allreduce_bytes_loose(
        &mut self,
        data: &mut [u8],
        mut combine: impl FnMut(&mut [u8], &[u8]),
    ) -> Res<()> {
        if self.size() == 2 && data.len() <= EXCHANGE_ONE && self.pair_carries(data.len()) {
            return self.exchange_one(data, combine);
        }
        if self.nontree.is_some() && self.allreduce_by_doubling(data.len()) {
            if self.pair_lends(data.len()) {
                return self.allreduce_pair(data, &mut combine, false);
            }
            if self.size() == 2 && self.stages_for(data.len()) {
                return self.allreduce_two_staged(data, &mut combine);
            }
            return self.allreduce_doubling(data, &mut combine);
        }
        if self.size() == 2 && (data.len() < self.scratch.len() || self.stages_for(data.len())) {
            return self.exchange_bytes(data, combine);
        }
        self.reduce_bytes(data, &mut combine)?;
        self.broadcast_into(data)
    }

    /// True if the two members' one link carries `len` bytes in one message (both
    /// ends of a tree's link are alike, so both members answer the same).
    #[inline(always)]
    fn pair_carries(&self, len: usize) -> bool {
        match (&self.parent, self.children.first()) {
            (Some(p), _) => len <= p.link.max_message_len(),
            (None, Some(c)) => len <= c.link.max_message_len(),
            _ => false,
        }
    }

    /// The two-member allreduce of at most [`EXCHANGE_ONE`] bytes: each sends its data
    /// to the other in one message over the tree's one link (crossing sends cannot
    /// block each other: an empty ring holds it), then both combine the
    /// two in the order the picked algorithm does (member 0's first for recursive
    /// doubling, else the root's). With two members recursive doubling and the tree's
    /// reduce-then-broadcast both come to this exchange, so it is taken whatever the
    /// algorithm table picks: through doubling's general receive over the mesh, the
    /// interposer's `MPI_Allreduce` of one double on 2 ranks took 853 instructions a
    /// call on rank 0, this way 339 (callgrind, the polls of the wait included).
    fn exchange_one(&mut self, data: &mut [u8], combine: impl FnMut(&mut [u8], &[u8])) -> Res<()> {
        let t = self.begin(Coll::ReduceSlice)?;
        let n = data.len();
        let timeout = Some(self.timeout);
        // Whose value comes first in `combine` is the algorithm's: recursive doubling
        // puts member 0's first, the tree its root's.
        let first = if self.nontree.is_some() && self.allreduce_by_doubling(n) {
            self.rank.index() == 0
        } else {
            self.parent.is_none()
        };
        let p = match self.parent.as_mut() {
            Some(p) => p,
            None => &mut self.children[0],
        };
        let peer = p.rank;
        // One word (a double, a long: the common case) on the links' word path; an
        // 8-byte message from the other member is read as one either way. Longer data
        // is received on the stack (the buffer is made only on that path).
        if let Ok(w) = <[u8; 8]>::try_from(&*data) {
            let got = match p.link.send_word(t.word(), u64::from_ne_bytes(w), timeout) {
                Ok(()) => p.link.recv_word(timeout),
                Err(e) => Err(e),
            };
            let (tag, w) = match got {
                Ok(r) => r,
                Err(e) => return Err(self.fail(e, peer, t.op())),
            };
            self.expect(tag, t, peer)?;
            fold_pair(first, data, &mut w.to_ne_bytes(), combine);
            return Ok(());
        }
        let mut other = [0u8; EXCHANGE_ONE];
        let got = match p.link.send(t.word(), data, timeout) {
            Ok(()) => p.link.recv(&mut other, timeout),
            Err(e) => Err(e),
        };
        let (tag, len) = match got {
            Ok(r) => r,
            Err(e) => return Err(self.fail(e, peer, t.op())),
        };
        self.expect(tag, t, peer)?;
        if len != n {
            return Err(self.mismatch(format!(
                "{}: the other member sent {len} bytes, this member has {n}",
                t.op()
            )));
        }
        fold_pair(first, data, &mut other[..n], combine);
        Ok(())
    }

    /// The two-member allreduce: each sends its data to the other (one message each,
    /// which an empty ring always holds, so the crossing sends cannot block each
    /// other), then both compute `combine(root's, child's)`.
    fn exchange_bytes(
        &mut self,
        data: &mut [u8],
        mut combine: impl FnMut(&mut [u8], &[u8]),
    ) -> Res<()> {
        let t = self.begin(Coll::ReduceSlice)?;
        if self.stages_for(data.len()) {
            self.check_len(data.len(), t)?;
            let root = self.parent.is_none();
            return self.exchange_staged(data, &mut combine, root, t);
        }
        let other_link = if self.parent.is_some() { None } else { Some(0) };
        self.send_fragments(other_link, data, t)?;
        let mut other = std::mem::take(&mut self.packed);
        other.clear();
        let r = self.recv_bytes(other_link, &mut other, t).and_then(|()| {
            if other.len() != data.len() {
                return Err(self.mismatch(format!(
                    "{}: the other member sent {} bytes, this member has {}",
                    t.op(),
                    other.len(),
                    data.len()
                )));
            }
            fold_pair(self.parent.is_none(), data, &mut other, &mut combine);
            Ok(())
        });
        self.packed = other;
        r
    }

    /// Gathers `mine` (as long on every member) at the root: on the root, `out` (members
    /// × `mine.len()` bytes) receives member `r`'s bytes at `r × mine.len()` and `true` is
    /// returned; elsewhere `out` is not used (pass `&mut []`). Each member sends its
    /// subtree's bytes to its parent in one message (fragmented when long). Lengths
    /// that do not fit together give [`GroupError::Mismatch`].
    pub fn gather_bytes(&mut self, mine: &[u8], out: &mut [u8]) -> Res<bool> {
        self.synced(|c| c.gather_bytes_loose(mine, out))
    }

    /// [`gather_bytes`](Context::gather_bytes) without the synchronization of [`SyncMode::Strict`].
    #[inline]
    fn gather_bytes_loose(&mut self, mine: &[u8], out: &mut [u8]) -> Res<bool> {
        let t = self.begin(Coll::Gather)?;
        let k = mine.len();
        self.check_len(k.saturating_mul(self.size()), t)?;
        let mut bytes = std::mem::take(&mut self.packed);
        bytes.clear();
        bytes.extend_from_slice(mine);
        let r = (|| {
            for i in 0..self.children.len() {
                let before = bytes.len();
                self.recv_bytes(Some(i), &mut bytes, t)?;
                if bytes.len() - before != self.child_sizes[i] * k {
                    return Err(self.mismatch(format!(
                        "{}: member {} sent {} bytes for {} members of {k} bytes",
                        t.op(),
                        self.children[i].rank,
                        bytes.len() - before,
                        self.child_sizes[i]
                    )));
                }
            }
            if self.parent.is_some() {
                self.send_fragments(None, &bytes, t)?;
                return Ok(false);
            }
            if out.len() != self.size() * k {
                return Err(self.mismatch(format!(
                    "{}: the root's buffer has {} bytes for {} members of {k} bytes",
                    t.op(),
                    out.len(),
                    self.size()
                )));
            }
            for (j, r) in self.subtree.iter().enumerate() {
                let r = r.index();
                out[r * k..(r + 1) * k].copy_from_slice(&bytes[j * k..(j + 1) * k]);
            }
            Ok(true)
        })();
        self.packed = bytes;
        r
    }

    /// Scatters from the root: `all` (members × `mine.len()` bytes, on the root; ignored
    /// elsewhere) holds member `r`'s bytes at `r × mine.len()`, which land in its
    /// `mine`. Each member receives its subtree's bytes from its parent in one message
    /// and passes each child its part. Lengths that do not fit together give
    /// [`GroupError::Mismatch`].
    pub fn scatter_bytes(&mut self, all: &[u8], mine: &mut [u8]) -> Res<()> {
        self.synced(|c| c.scatter_bytes_loose(all, mine))
    }

    /// [`scatter_bytes`](Context::scatter_bytes) without the synchronization of [`SyncMode::Strict`].
    #[inline]
    fn scatter_bytes_loose(&mut self, all: &[u8], mine: &mut [u8]) -> Res<()> {
        let t = self.begin(Coll::Scatter)?;
        let k = mine.len();
        self.check_len(k.saturating_mul(self.size()), t)?;
        let mut pre = std::mem::take(&mut self.packed);
        pre.clear();
        let r = (|| {
            if self.parent.is_none() {
                if all.len() != self.size() * k {
                    return Err(self.mismatch(format!(
                        "{}: the root has {} bytes for {} members of {k} bytes",
                        t.op(),
                        all.len(),
                        self.size()
                    )));
                }
                for r in &self.subtree {
                    let r = r.index();
                    pre.extend_from_slice(&all[r * k..(r + 1) * k]);
                }
            } else {
                self.recv_bytes(None, &mut pre, t)?;
                if pre.len() != self.subtree.len() * k {
                    return Err(self.mismatch(format!(
                        "{}: the parent sent {} bytes for {} members of {k} bytes",
                        t.op(),
                        pre.len(),
                        self.subtree.len()
                    )));
                }
            }
            mine.copy_from_slice(&pre[..k]);
            let mut off = k;
            for i in 0..self.children.len() {
                let n = self.child_sizes[i] * k;
                self.send_fragments(Some(i), &pre[off..off + n], t)?;
                off += n;
            }
            Ok(())
        })();
        self.packed = pre;
        r
    }

    /// Gathers one word per member at the root: `Some(values by rank)` on the root.
    pub fn gather_word(&mut self, v: u64) -> Res<Option<Vec<u64>>> {
        self.synced(|c| c.gather_word_loose(v))
    }

    /// [`gather_word`](Context::gather_word) without the synchronization of [`SyncMode::Strict`].
    #[inline]
    fn gather_word_loose(&mut self, v: u64) -> Res<Option<Vec<u64>>> {
        let t = self.begin(Coll::Gather)?;
        let mut vals = vec![v];
        let mut bytes = Vec::new();
        for i in 0..self.children.len() {
            bytes.clear();
            self.recv_bytes(Some(i), &mut bytes, t)?;
            if bytes.len() != self.child_sizes[i] * 8 {
                return Err(self.mismatch(format!(
                    "{}: wrong number of values from member {}",
                    t.op(),
                    self.children[i].rank
                )));
            }
            vals.extend((0..self.child_sizes[i]).map(|k| unpack_at::<u64>(&bytes, k)));
        }
        if self.parent.is_some() {
            bytes.clear();
            pack(&vals, &mut bytes);
            self.send_fragments(None, &bytes, t)?;
            return Ok(None);
        }
        let mut out = vec![0; self.size()];
        for (k, &r) in self.subtree.iter().enumerate() {
            out[r] = vals[k];
        }
        Ok(Some(out))
    }

    /// Scatters one word to each member from the root: the root passes `Some(values)`
    /// indexed by rank (one per member); every member gets its own value.
    pub fn scatter_word(&mut self, values: Option<&[u64]>) -> Res<u64> {
        self.synced(|c| c.scatter_word_loose(values))
    }

    /// [`scatter_word`](Context::scatter_word) without the synchronization of [`SyncMode::Strict`].
    #[inline]
    fn scatter_word_loose(&mut self, values: Option<&[u64]>) -> Res<u64> {
        let t = self.begin(Coll::Scatter)?;
        let pre: Vec<u64> = if self.parent.is_none() {
            let vals = values.unwrap_or(&[]);
            if vals.len() != self.size() {
                return Err(self.mismatch(format!(
                    "{}: the root needs {} values, got {}",
                    t.op(),
                    self.size(),
                    vals.len()
                )));
            }
            self.subtree.iter().map(|&r| vals[r]).collect()
        } else {
            let mut bytes = Vec::new();
            self.recv_bytes(None, &mut bytes, t)?;
            if bytes.len() != self.subtree.len() * 8 {
                return Err(self.mismatch(format!(
                    "{}: wrong number of values from the parent",
                    t.op()
                )));
            }
            (0..self.subtree.len())
                .map(|k| unpack_at::<u64>(&bytes, k))
                .collect()
        };
        let mut off = 1;
        let mut bytes = Vec::new();
        for i in 0..self.children.len() {
            let n = self.child_sizes[i];
            bytes.clear();
            pack(&pre[off..off + n], &mut bytes);
            off += n;
            self.send_fragments(Some(i), &bytes, t)?;
        }
        Ok(pre[0])
    }
}

impl<L: Link> Drop for Context<L> {
    fn drop(&mut self) {
        // A context moved to another thread that panics fails the group too.
        if std::thread::panicking() {
            self.shared.record(self.rank, "panicked".into(), true);
        }
    }
}
