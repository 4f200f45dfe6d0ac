//! Long messages between member processes through staging buffers
//! ([`smelt_transport::shm::Stage`]): each tree link of a process member has
//! [`STAGE_SLOTS`] buffers of [`STAGE_BYTES`] each way, carved from the job's arena
//! when the group is made ([`crate::Member::from_world`]). From [`STAGE_FROM`] bytes
//! a reduction, a broadcast into a buffer and the two-member allreduce move their
//! data in chunks of up to [`STAGE_BYTES`]: the sender copies a chunk into a buffer
//! once and sends a one-word descriptor on the link's ring; the receiver combines the
//! chunk straight from the buffer into its own data (a broadcast copies it), then
//! gives the buffer back. Through the rings every byte was copied into 48-byte slots
//! and out again before it was combined.
//!
//! The messages, their order and the order of combination are the tree's (or the
//! two-member exchange's): only the way the bytes travel differs, so results are bit
//! for bit those of the rings. Waits are the link's (bounded by the group's timeout,
//! ended by the job's abort flag and by the peer's death); a sender waiting for a
//! buffer checks the same.

use crate::context::{Coll, Context, Tag};
use crate::{GroupError, World};
use smelt_ids::Rank;
use smelt_transport::shm::{Stage, STAGED_TAG};
use smelt_transport::{Abort, Link, TransportError, WaitPolicy};
use std::collections::HashMap;

type Res<T> = Result<T, GroupError>;

/// Buffers per direction of a link.
pub(crate) const STAGE_SLOTS: usize = 4;
/// Bytes per buffer: the largest chunk. A multiple of 48 (as the rings' fragments and
/// [`LOAN_CHUNK`](crate::group::LOAN_CHUNK)), so no value whose size divides 48 bytes
/// (what `reduce_bytes` allows a combine to work on) straddles two chunks.
pub(crate) const STAGE_BYTES: usize = (16 << 10) / super::UNIT * super::UNIT;
/// Messages of at least this many bytes go through the stages.
pub(crate) const STAGE_FROM: usize = 512;
/// Bit set in the tag of a message's last chunk (beside the call's tag): a receiver
/// whose data end at another chunk than the sender's sees the bit where it expects
/// none, or none where it expects it, and names the lengths' mismatch in that call
/// (chunks of the same length would otherwise go unnoticed: the rings' pipelines end
/// on a short or empty fragment).
const LAST: u64 = 1 << 33;

/// [`LAST`] if the chunk ending at `end` is the last of a range ending at `hi`.
fn last(end: usize, hi: usize) -> u64 {
    if end == hi {
        LAST
    } else {
        0
    }
}

/// A context's stages: one per tree link, in the order of its links.
#[derive(Debug)]
pub(crate) struct Stages {
    parent: Option<Stage>,
    children: Vec<Stage>,
}

/// A stage for each of `pairs` (the tree edges) this member belongs to (between
/// processes; `None` everywhere for threads).
pub(crate) fn make(
    world: &World,
    pairs: &[(Rank, Rank)],
    wait: WaitPolicy,
    abort: &Abort,
) -> Res<Vec<Option<Stage>>> {
    Ok(world.stages(
        pairs,
        STAGE_SLOTS,
        STAGE_BYTES,
        Some(wait),
        Some(abort.clone()),
    )?)
}

/// Context `id`'s stages, taken from `stages` (indexed as the edges of
/// `edge_index`) in the order its links were made (`calls`: tree, edge, and whether
/// this member is the edge's parent): `None` unless every link of the context has one.
pub(crate) fn for_context(
    id: usize,
    calls: &[(usize, usize, bool)],
    edge_index: &HashMap<(usize, usize), usize>,
    stages: &mut [Option<Stage>],
) -> Option<Box<Stages>> {
    let mut parent = None;
    let mut children = Vec::new();
    for &(tree, e, parent_side) in calls.iter().filter(|c| c.0 == id) {
        let s = stages.get_mut(*edge_index.get(&(tree, e))?)?.take()?;
        if parent_side {
            children.push(s);
        } else {
            parent = Some(s);
        }
    }
    if parent.is_none() && children.is_empty() {
        return None;
    }
    Some(Box::new(Stages { parent, children }))
}

/// The `(start, end)` chunks of `lo..hi`.
fn chunks(lo: usize, hi: usize, chunk: usize) -> impl Iterator<Item = (usize, usize)> {
    (lo..hi)
        .step_by(chunk.max(1))
        .map(move |o| (o, (o + chunk.max(1)).min(hi)))
}

/// What a receive of a staged chunk found: `Ok(Ok(r))` the chunk (and `f`'s answer);
/// `Ok(Err((tag, len)))` a staged chunk with another tag or length than expected, or
/// (`Err` inside `Ok(Err)` of the transport) something else.
type Got<R> = Result<Result<Result<R, (u64, usize)>, (u64, usize)>, TransportError>;

impl<L: Link> Context<L> {
    /// True if a message of `len` bytes travels through the stages: this member's
    /// links have them (member processes) and it is long enough. The same answer at
    /// both ends of every link for the same length.
    #[inline]
    pub(crate) fn stages_for(&self, len: usize) -> bool {
        len >= STAGE_FROM && self.stages.is_some()
    }

    /// The group's error for a staged receive from `peer` that did not get the chunk
    /// it expected (`want` bytes tagged `t`).
    #[cold]
    fn staged_failed<R>(&self, r: Got<R>, peer: Rank, want: usize, t: Tag) -> GroupError {
        match r {
            Err(e) => self.fail(e, peer, t.op()),
            Ok(Ok(Err((tag, n)))) | Ok(Err((tag, n)))
                if tag != 0 && tag & !(LAST | 1 << 32) != t.word() =>
            {
                let _ = n;
                self.crossed(tag, t, peer)
            }
            Ok(Ok(Err((tag, n)))) if n == want => self.mismatch(format!(
                "{}: member {peer} stages a chunk of {n} bytes {} where this member's data {} (the data differ in length)",
                t.op(),
                if tag & LAST != 0 { "that ends its data" } else { "and more after it" },
                if tag & LAST != 0 { "go on" } else { "end" },
            )),
            Ok(Ok(Err((_, n)))) => self.mismatch(format!(
                "{}: member {peer} stages a chunk of {n} bytes where this member expects {want} (the data differ in length)",
                t.op()
            )),
            Ok(Err((_, n))) => self.mismatch(format!(
                "{}: member {peer} sends {n} bytes through the ring where this member expects a staged chunk of {want} bytes (the data differ in length)",
                t.op()
            )),
            Ok(Ok(Ok(_))) => unreachable!("a chunk received is not a failure"),
        }
    }

    /// Receives the next staged chunk from child `i` (`None`: the parent), expecting
    /// `want` bytes tagged `tag`, and hands it to `take`.
    fn staged_recv(
        &mut self,
        st: &mut Stages,
        from: Option<usize>,
        want: usize,
        tag: u64,
        t: Tag,
        take: impl FnOnce(&[u8]),
    ) -> Res<()> {
        let timeout = Some(self.timeout);
        let (peer, stage) = match from {
            Some(i) => (&mut self.children[i], &mut st.children[i]),
            None => (
                self.parent.as_mut().expect("a member with a parent"),
                st.parent.as_mut().expect("a stage for every link"),
            ),
        };
        let rank = peer.rank;
        let r = stage.recv(&mut peer.link, timeout, |got, src| {
            if got != tag || src.len() != want {
                return Err((got, src.len()));
            }
            take(src);
            Ok(())
        });
        match r {
            Ok(Ok(Ok(()))) => Ok(()),
            r => Err(self.staged_failed(r, rank, want, t)),
        }
    }

    /// Stages `data` (at most one chunk) to child `i` (`None`: the parent).
    fn staged_send(
        &mut self,
        st: &mut Stages,
        to: Option<usize>,
        tag: u64,
        data: &[u8],
        t: Tag,
    ) -> Res<()> {
        let timeout = Some(self.timeout);
        let (peer, stage) = match to {
            Some(i) => (&mut self.children[i], &mut st.children[i]),
            None => (
                self.parent.as_mut().expect("a member with a parent"),
                st.parent.as_mut().expect("a stage for every link"),
            ),
        };
        let rank = peer.rank;
        stage
            .send(&mut peer.link, tag, data, timeout)
            .map_err(|e| self.fail(e, rank, t.op()))
    }

    /// Runs `f` with the stages taken out of the context.
    fn with_stages<R>(&mut self, f: impl FnOnce(&mut Self, &mut Stages) -> Res<R>) -> Res<R> {
        let mut st = self.stages.take().expect("checked by stages_for");
        let r = f(self, &mut st);
        self.stages = Some(st);
        r
    }

    fn chunk_bytes(&self) -> usize {
        self.stages
            .as_ref()
            .and_then(|s| s.parent.as_ref().or(s.children.first()))
            .map_or(STAGE_BYTES, Stage::chunk)
    }

    /// The tree's reduction through the stages: chunk by chunk, each child's chunk is
    /// combined straight from its buffer into this member's (`combine(acc, other)`,
    /// children in send order), then the chunk goes up to the parent's stage.
    pub(crate) fn reduce_staged(
        &mut self,
        data: &mut [u8],
        combine: &mut dyn FnMut(&mut [u8], &[u8]),
        t: Tag,
    ) -> Res<()> {
        let chunk = self.chunk_bytes();
        self.with_stages(|c, st| {
            for (off, end) in chunks(0, data.len(), chunk) {
                let tag = t.word() | last(end, data.len());
                for i in 0..c.children.len() {
                    let acc = &mut data[off..end];
                    c.staged_recv(st, Some(i), end - off, tag, t, |src| combine(acc, src))?;
                }
                if c.parent.is_some() {
                    c.staged_send(st, None, tag, &data[off..end], t)?;
                }
            }
            Ok(())
        })
    }

    /// The tree's broadcast into `buf` (every member knows its length) through the
    /// stages: chunk by chunk, copied out of the parent's buffer into `buf`, then
    /// staged to every child.
    pub(crate) fn broadcast_staged(&mut self, buf: &mut [u8], t: Tag) -> Res<()> {
        let chunk = self.chunk_bytes();
        self.with_stages(|c, st| {
            for (off, end) in chunks(0, buf.len(), chunk) {
                let tag = t.word() | last(end, buf.len());
                if c.parent.is_some() {
                    let dst = &mut buf[off..end];
                    c.staged_recv(st, None, end - off, tag, t, |src| dst.copy_from_slice(src))?;
                }
                for i in 0..c.children.len() {
                    c.staged_send(st, Some(i), tag, &buf[off..end], t)?;
                }
            }
            Ok(())
        })
    }

    /// An allreduce of two member processes whose table picks a non-tree algorithm,
    /// through the stages of their link: Rabenseifner (and the ring, which for two
    /// members is the same exchange of halves) as
    /// [`allreduce_pair_staged`](Self::allreduce_pair_staged); recursive doubling,
    /// which for two members is one exchange, as
    /// [`exchange_staged`](Self::exchange_staged) with rank 0's value on the left
    /// (as recursive doubling combines).
    pub(crate) fn allreduce_two_staged(
        &mut self,
        data: &mut [u8],
        combine: &mut dyn FnMut(&mut [u8], &[u8]),
    ) -> Res<()> {
        if super::halves(self.allreduce_non_tree(data.len())) {
            return self.allreduce_pair(data, combine, false);
        }
        let t = self.begin(Coll::RecursiveDoubling)?;
        self.check_len(data.len(), t)?;
        let left = self.rank.index() == 0;
        self.exchange_staged(data, combine, left, t)
    }

    /// The two-member allreduce through the stages: each member stages its data to
    /// the other, then both compute `left ⊕ right` (`left`: this member's value goes
    /// on the left; the tree's exchange puts the root's there). The left member
    /// combines in place from the other's buffer, the other into a copy of the left
    /// chunk, so a combine that does not commute gives the same bits on both. At most
    /// [`STAGE_SLOTS`] chunks may be sent before the other's are taken, so longer
    /// data go chunk by chunk in turn.
    pub(crate) fn exchange_staged(
        &mut self,
        data: &mut [u8],
        combine: &mut dyn FnMut(&mut [u8], &[u8]),
        left: bool,
        t: Tag,
    ) -> Res<()> {
        let chunk = self.chunk_bytes();
        let other = if self.parent.is_some() { None } else { Some(0) };
        let root = left;
        let mut copy = std::mem::take(&mut self.packed);
        let r = self.with_stages(|c, st| {
            for (off, end) in chunks(0, data.len(), chunk) {
                let tag = t.word() | last(end, data.len());
                c.staged_send(st, other, tag, &data[off..end], t)?;
                let acc = &mut data[off..end];
                c.staged_recv(st, other, end - off, tag, t, |src| {
                    if root {
                        combine(acc, src);
                    } else {
                        copy.clear();
                        copy.extend_from_slice(src);
                        combine(&mut copy, acc);
                        acc.copy_from_slice(&copy);
                    }
                })?;
            }
            Ok(())
        });
        self.packed = copy;
        r
    }

    /// Rabenseifner's allreduce of two member processes through the stages of the
    /// tree's one link, as [`allreduce_pair_lent`](Self::allreduce_pair) does by loans
    /// between threads: the root keeps the lower half (cut at a multiple of
    /// [`UNIT`](super::UNIT) bytes), the other member the upper. Reduce-scatter: chunk
    /// by chunk in turn, each stages a chunk of the half the other keeps and combines
    /// the other's chunk into the half it keeps, straight from the buffer. Allgather:
    /// each stages the half it holds the result of and copies the other's into
    /// place. Each value is combined once, `x0 ⊕ x1` (the root's on the left; with a
    /// `commutative` combine the other member computes `x1 ⊕ x0` in place, the same
    /// bits), then copied: the same bits on both.
    pub(crate) fn allreduce_pair_staged(
        &mut self,
        data: &mut [u8],
        combine: &mut dyn FnMut(&mut [u8], &[u8]),
        commutative: bool,
        t: Tag,
    ) -> Res<()> {
        let chunk = self.chunk_bytes();
        let mid = data.len().div_ceil(super::UNIT) / 2 * super::UNIT;
        let root = self.parent.is_none();
        let other = if root { Some(0) } else { None };
        let (keep, give) = if root {
            ((0, mid), (mid, data.len()))
        } else {
            ((mid, data.len()), (0, mid))
        };
        let (rs, ag) = (t.word(), t.word() | (1 << 32));
        let mut copy = std::mem::take(&mut self.packed);
        let r = self.with_stages(|c, st| {
            let mut gs = chunks(give.0, give.1, chunk);
            let mut ks = chunks(keep.0, keep.1, chunk);
            loop {
                let (g, k) = (gs.next(), ks.next());
                if g.is_none() && k.is_none() {
                    break;
                }
                if let Some((a, b)) = g {
                    c.staged_send(st, other, rs | last(b, give.1), &data[a..b], t)?;
                }
                if let Some((a, b)) = k {
                    let acc = &mut data[a..b];
                    c.staged_recv(st, other, b - a, rs | last(b, keep.1), t, |src| {
                        if root || commutative {
                            combine(acc, src);
                        } else {
                            copy.clear();
                            copy.extend_from_slice(src);
                            combine(&mut copy, acc);
                            acc.copy_from_slice(&copy);
                        }
                    })?;
                }
            }
            let mut ks = chunks(keep.0, keep.1, chunk);
            let mut gs = chunks(give.0, give.1, chunk);
            loop {
                let (k, g) = (ks.next(), gs.next());
                if g.is_none() && k.is_none() {
                    break;
                }
                if let Some((a, b)) = k {
                    c.staged_send(st, other, ag | last(b, keep.1), &data[a..b], t)?;
                }
                if let Some((a, b)) = g {
                    let dst = &mut data[a..b];
                    let tag = ag | last(b, give.1);
                    c.staged_recv(st, other, b - a, tag, t, |src| dst.copy_from_slice(src))?;
                }
            }
            Ok(())
        });
        self.packed = copy;
        r
    }
}

/// True if `tag` is a staged chunk's descriptor for the call tagged `t` (what a
/// member expecting ring data got from a member that stages: the data differ in
/// length).
pub(crate) fn staged_for(tag: u64, t: u64) -> bool {
    tag & STAGED_TAG != 0 && tag & !(STAGED_TAG | LAST) == t
}
