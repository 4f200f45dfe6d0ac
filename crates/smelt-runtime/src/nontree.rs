//! Collectives that are not trees — the dissemination barrier and the
//! recursive-doubling allreduce — over a [`Mesh`] of links between the members that
//! are not tree edges. A group gets these links when its
//! [`GroupConfig::algorithms`](crate::GroupConfig::algorithms) table may pick one of
//! them (`auto`: `SMELT_TUNE`, the host's tuning file, else the prediction); each call
//! of [`Context::barrier`] and of the allreduces asks the table which algorithm runs
//! it (one lookup per call; the allreduce's answer is kept for the next call of the
//! same size). Groups of threads and process jobs ([`crate::process`]: the links are
//! rings of the job's segment); members built over other links
//! ([`Member::with_links`](crate::Member::with_links)) run trees.
//!
//! Every wait is bounded by the group's timeout and backs off (spin, yield, park, with
//! the mesh's doorbells); a member that leaves is reported as
//! [`GroupError::PeerFailed`], a failure elsewhere in the group ends the waits (the
//! mesh shares the group's abort flag).

use crate::context::{Coll, Context};
use crate::mesh::{Mesh, MeshBuilder, MeshError};
use crate::word::{pack, unpack_into, unpack_one, Word};
use crate::{GroupError, SyncMode};
use smelt_ids::Rank;
use smelt_plan::AlgorithmTable;
use smelt_plan::{NonTree, Op};
use smelt_transport::{Abort, Link, WaitPolicy};
use std::collections::BTreeSet;
use std::sync::Arc;

type Res<T> = Result<T, GroupError>;

/// How a word-carrying dissemination folds two words.
pub(crate) type Combine<'a> = dyn Fn(u64, u64) -> u64 + 'a;

/// A context's links beyond its tree and the table that says when to use them.
#[derive(Debug)]
pub(crate) struct NonTreeLinks {
    pub(crate) mesh: Mesh,
    table: Arc<AlgorithmTable>,
    /// Barrier by dissemination, per mode (loose, strict): looked up once.
    dissemination: [bool; 2],
    /// The last allreduce's lookup: (mode, bytes, the non-tree algorithm if any).
    pub(crate) last: Option<(SyncMode, usize, Option<NonTree>)>,
    /// Receive buffer (one chunk).
    pub(crate) buf: Vec<u8>,
}

/// The largest power of two not above `n` (n ≥ 1).
pub(crate) fn pow2_floor(n: usize) -> usize {
    1usize << (usize::BITS - 1 - n.max(1).leading_zeros())
}

/// The pairs of ranks the algorithms of `table` need links between, in a group of
/// `n`: dissemination `{i, i + 2^k mod n}`; recursive doubling and Rabenseifner
/// `{i, i XOR 2^k}` below the largest power of two p ≤ n and `{i − p, i}` above it;
/// the ring `{i, i + 1 mod n}` and Rabenseifner's pairs (its fallback).
pub(crate) fn pairs_for(table: &AlgorithmTable, n: usize) -> BTreeSet<(usize, usize)> {
    let mut out = BTreeSet::new();
    let mut add = |a: usize, b: usize| {
        if a != b {
            out.insert((a.min(b), a.max(b)));
        }
    };
    if table.may_use(NonTree::Dissemination) {
        let mut d = 1;
        while d < n {
            for i in 0..n {
                add(i, (i + d) % n);
            }
            d *= 2;
        }
    }
    if table.may_use(NonTree::Ring) {
        for i in 0..n {
            add(i, (i + 1) % n);
        }
    }
    // The ring falls back to Rabenseifner for a combine that may not commute.
    if table.may_use(NonTree::RecursiveDoubling)
        || table.may_use(NonTree::Rabenseifner)
        || table.may_use(NonTree::Ring)
    {
        let p = pow2_floor(n);
        let mut d = 1;
        while d < p {
            for i in 0..p {
                add(i, i ^ d);
            }
            d *= 2;
        }
        for e in p..n {
            add(e - p, e);
        }
    }
    out
}

/// The meshes of a group of `n` thread members for `table` (by rank), or `None`
/// when the table never picks a non-tree algorithm (or the group has one member).
pub(crate) fn build_meshes(
    table: &Arc<AlgorithmTable>,
    n: usize,
    capacity: usize,
    wait: WaitPolicy,
    abort: &Abort,
) -> Result<Option<Vec<NonTreeLinks>>, GroupError> {
    let pairs = pairs_for(table, n);
    if n < 2 || pairs.is_empty() {
        return Ok(None);
    }
    let meshes = MeshBuilder::new(n)
        .links(pairs.into_iter().map(|(a, b)| (Rank(a), Rank(b))))
        .capacity(capacity)
        .wait_policy(wait)
        .abort(abort.clone())
        .build()
        .map_err(|e| GroupError::Invalid(format!("links beyond the tree: {e}")))?;
    Ok(Some(
        meshes
            .into_iter()
            .map(|mesh| NonTreeLinks::new(mesh, table.clone()))
            .collect(),
    ))
}

impl NonTreeLinks {
    /// A context's links beyond its tree (`mesh`, with a link for each pair of
    /// [`pairs_for`] this member is in) and the table that says when to use them.
    pub(crate) fn new(mesh: Mesh, table: Arc<AlgorithmTable>) -> NonTreeLinks {
        let dissemination = [SyncMode::Loose, SyncMode::Strict]
            .map(|s| table.non_tree(s, Op::Barrier, 0) == Some(NonTree::Dissemination));
        let chunk = mesh.max_message_len_all();
        NonTreeLinks {
            mesh,
            table,
            dissemination,
            last: None,
            buf: vec![0; chunk],
        }
    }
}

/// The `(start, end)` pieces of `len` bytes in chunks of `chunk`; one empty piece for
/// an empty message (so a step still exchanges a message).
fn pieces(len: usize, chunk: usize) -> impl Iterator<Item = (usize, usize)> {
    let chunk = chunk.max(1);
    (0..len.max(1))
        .step_by(chunk)
        .map(move |o| (o.min(len), (o + chunk).min(len)))
}

impl<L: Link> Context<L> {
    /// True if the table picks the dissemination barrier for this context's mode
    /// (with two members [`Context::barrier`] runs it over the tree's link).
    #[inline(always)]
    pub(crate) fn barrier_by_dissemination(&self) -> bool {
        self.nontree
            .as_ref()
            .is_some_and(|nt| nt.dissemination[(self.sync == SyncMode::Strict) as usize])
    }

    /// True if an allreduce of `bytes` runs by a non-tree algorithm (recursive
    /// doubling, Rabenseifner or the ring; [`allreduce_doubling`](Self::allreduce_doubling) runs
    /// either): the table's answer for the last size is kept.
    #[inline]
    pub(crate) fn allreduce_by_doubling(&mut self, bytes: usize) -> bool {
        self.allreduce_non_tree(bytes).is_some()
    }

    /// The non-tree algorithm the table picks for an allreduce of `bytes` in this
    /// context's mode, if any (the answer for the last size is kept).
    #[inline]
    pub(crate) fn allreduce_non_tree(&mut self, bytes: usize) -> Option<NonTree> {
        let sync = self.sync;
        let nt = self.nontree.as_mut()?;
        if let Some((s, b, a)) = nt.last {
            if s == sync && b == bytes {
                return a;
            }
        }
        let a = nt
            .table
            .non_tree(sync, Op::Allreduce, bytes as u64)
            .filter(|a| {
                matches!(
                    a,
                    NonTree::RecursiveDoubling | NonTree::Rabenseifner | NonTree::Ring
                )
            });
        nt.last = Some((sync, bytes, a));
        a
    }

    /// Which algorithm this context runs for `op` with `bytes` per member in its
    /// current synchronization mode: a non-tree one, or `None` for the tree.
    pub fn non_tree_for(&mut self, op: Op, bytes: usize) -> Option<NonTree> {
        match op {
            Op::Barrier => self
                .barrier_by_dissemination()
                .then_some(NonTree::Dissemination),
            Op::Allreduce => self.allreduce_non_tree(bytes),
            _ => None,
        }
    }

    /// A mesh error as the group's error, recording a failure where one happened.
    #[cold]
    pub(crate) fn mesh_fail(&self, e: MeshError, op: &'static str) -> GroupError {
        let sh = &self.shared;
        match e {
            MeshError::PeerGone { peer, .. } => sh.record(
                peer,
                format!(
                    "left the group while member {} still expected it in {op}",
                    self.rank
                ),
                false,
            ),
            MeshError::Aborted { .. } => sh.failure_error().unwrap_or(GroupError::PeerFailed {
                rank: self.rank,
                cpu: self.cpu(),
                what: "the group was aborted".into(),
            }),
            MeshError::Timeout { peer, after, .. } => {
                let err = GroupError::Timeout {
                    rank: self.rank,
                    cpu: self.cpu(),
                    peer: peer.unwrap_or(self.rank),
                    op,
                    after,
                };
                sh.record(self.rank, err.to_string(), false);
                err
            }
            other => {
                let err = GroupError::Mismatch {
                    rank: self.rank,
                    what: format!("{op}: {other}"),
                };
                sh.record(self.rank, err.to_string(), false);
                err
            }
        }
    }

    /// The dissemination barrier: in round `k` signal member `rank + 2^k` and wait for
    /// member `rank − 2^k` (mod n). No member leaves before every member entered.
    pub(crate) fn barrier_dissemination(&mut self) -> Res<()> {
        self.dissemination(None).map(|_| ())
    }

    /// The dissemination barrier carrying `word` and `combine`: each round sends this
    /// member's combination so far and folds in the one received, so after the last
    /// round every member holds the combination of every member's word. Members are
    /// reached more than once when `n` is not a power of two, so `combine` must be
    /// idempotent as well as commutative and associative (min, max, and, or, "equal or
    /// a marker").
    pub(crate) fn dissemination(&mut self, word: Option<(u64, &'_ Combine)>) -> Res<u64> {
        let t = self.begin(Coll::Dissemination)?;
        let n = self.size();
        let me = self.rank.index();
        let timeout = self.timeout;
        let mut nt = self.nontree.take().expect("checked by the caller");
        let mut acc = word.map_or(0, |w| w.0);
        let r = (|| {
            let mut d = 1;
            let mut round = 0u64;
            while d < n {
                let tag = t.word() | (round << 32);
                let to = Rank((me + d) % n);
                let from = Rank((me + n - d) % n);
                let payload = acc.to_le_bytes();
                let msg: &[u8] = if word.is_some() { &payload } else { &[] };
                nt.mesh
                    .send(to, tag, msg, timeout)
                    .map_err(|e| self.mesh_fail(e, t.op()))?;
                let (got, len) = nt
                    .mesh
                    .recv_from(from, &mut nt.buf, timeout)
                    .map_err(|e| self.mesh_fail(e, t.op()))?;
                if got != tag || len != msg.len() {
                    return Err(self.crossed(got, t, from));
                }
                if let Some((_, combine)) = word {
                    let other = u64::from_le_bytes(nt.buf[..8].try_into().expect("8 bytes"));
                    acc = combine(acc, other);
                }
                d *= 2;
                round += 1;
            }
            Ok(acc)
        })();
        self.nontree = Some(nt);
        r
    }

    /// Recursive doubling over `data`: every member ends with the combination of all
    /// members' data (`combine(acc, other)` makes `acc` = acc ⊕ other, the lower
    /// rank's value on the left at every step, so all members compute the same bits).
    /// Messages longer than one link message go in pieces, each sent, then the
    /// partner's received and combined.
    pub(crate) fn allreduce_doubling(
        &mut self,
        data: &mut [u8],
        combine: &mut dyn FnMut(&mut [u8], &[u8]),
    ) -> Res<()> {
        let t = self.begin(Coll::RecursiveDoubling)?;
        self.check_len(data.len(), t)?;
        match self.allreduce_non_tree(data.len()) {
            Some(NonTree::Ring) if self.size() > 2 && self.commutes => {
                return self.allreduce_ring(data, combine, t);
            }
            // Two members' ring is Rabenseifner's one exchange of halves; a combine
            // that may not commute needs rank order.
            Some(NonTree::Rabenseifner | NonTree::Ring) => {
                return self.allreduce_rabenseifner(data, combine, t);
            }
            _ => {}
        }
        let n = self.size();
        let me = self.rank.index();
        let timeout = self.timeout;
        let mut nt = self.nontree.take().expect("checked by the caller");
        let r = (|| {
            let chunk = nt.buf.len().max(1);
            let p = pow2_floor(n);
            let len = data.len();
            let recv_into = |nt: &mut NonTreeLinks,
                             from: Rank,
                             a: usize,
                             b: usize,
                             step: u64|
             -> Res<()> {
                let tag = t.word() | (step << 32);
                let (got, k) = nt
                    .mesh
                    .recv_from(from, &mut nt.buf, timeout)
                    .map_err(|e| self.mesh_fail(e, t.op()))?;
                if got != tag {
                    return Err(self.crossed(got, t, from));
                }
                if k != b - a {
                    return Err(self.mismatch(format!(
                        "{}: member {from} sent a piece of {k} bytes where member {} expected {} (the data differ in length)",
                        t.op(),
                        self.rank,
                        b - a
                    )));
                }
                Ok(())
            };
            let send = |nt: &mut NonTreeLinks, to: Rank, piece: &[u8], step: u64| -> Res<()> {
                let tag = t.word() | (step << 32);
                nt.mesh
                    .send(to, tag, piece, timeout)
                    .map_err(|e| self.mesh_fail(e, t.op()))
            };
            if me >= p {
                // An extra rank: fold into rank me − p, get the result back.
                let h = Rank(me - p);
                for (a, b) in pieces(len, chunk) {
                    send(&mut nt, h, &data[a..b], 0)?;
                }
                for (a, b) in pieces(len, chunk) {
                    recv_into(&mut nt, h, a, b, 1)?;
                    data[a..b].copy_from_slice(&nt.buf[..b - a]);
                }
                return Ok(());
            }
            let extra = (me + p < n).then_some(Rank(me + p));
            if let Some(e) = extra {
                for (a, b) in pieces(len, chunk) {
                    recv_into(&mut nt, e, a, b, 0)?;
                    combine(&mut data[a..b], &nt.buf[..b - a]);
                }
            }
            let mut d = 1;
            let mut step = 2u64;
            while d < p {
                let partner = me ^ d;
                let pr = Rank(partner);
                for (a, b) in pieces(len, chunk) {
                    send(&mut nt, pr, &data[a..b], step)?;
                    recv_into(&mut nt, pr, a, b, step)?;
                    if me < partner {
                        combine(&mut data[a..b], &nt.buf[..b - a]);
                    } else {
                        let (mine, theirs) = (&mut data[a..b], &mut nt.buf[..b - a]);
                        combine(theirs, mine);
                        mine.copy_from_slice(theirs);
                    }
                }
                d *= 2;
                step += 1;
            }
            if let Some(e) = extra {
                for (a, b) in pieces(len, chunk) {
                    send(&mut nt, e, &data[a..b], 1)?;
                }
            }
            Ok(())
        })();
        self.nontree = Some(nt);
        r
    }

    /// [`allreduce_doubling`](Self::allreduce_doubling) of one scalar.
    pub(crate) fn allreduce_doubling_word<T: Word>(
        &mut self,
        v: T,
        op: impl Fn(T, T) -> T,
    ) -> Res<T> {
        let mut b = v.to_word().to_le_bytes();
        self.allreduce_doubling(&mut b[..T::BYTES], &mut |acc, o| {
            let x = op(unpack_one::<T>(acc), unpack_one::<T>(o));
            acc.copy_from_slice(&x.to_word().to_le_bytes()[..T::BYTES]);
        })?;
        Ok(unpack_one::<T>(&b[..T::BYTES]))
    }

    /// [`allreduce_doubling`](Self::allreduce_doubling) of a slice, element-wise.
    pub(crate) fn allreduce_doubling_slice<T: Word>(
        &mut self,
        data: &mut [T],
        op: impl Fn(T, T) -> T,
    ) -> Res<()> {
        let mut bytes = std::mem::take(&mut self.packed);
        bytes.clear();
        pack(data, &mut bytes);
        let r = self.allreduce_doubling(&mut bytes, &mut |acc, o| {
            for (a, b) in acc.chunks_exact_mut(T::BYTES).zip(o.chunks_exact(T::BYTES)) {
                let x = op(unpack_one::<T>(a), unpack_one::<T>(b));
                a.copy_from_slice(&x.to_word().to_le_bytes()[..T::BYTES]);
            }
        });
        if r.is_ok() {
            unpack_into(&bytes, data);
        }
        self.packed = bytes;
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_cover_every_round_and_fold() {
        for n in 1..=19 {
            let t = AlgorithmTable::parse("barrier=dissemination;allreduce=recursive-doubling")
                .unwrap();
            let pairs = pairs_for(&t, n);
            let has = |a: usize, b: usize| pairs.contains(&(a.min(b), a.max(b)));
            let mut d = 1;
            while d < n {
                for i in 0..n {
                    assert!(has(i, (i + d) % n), "n={n} d={d} i={i}");
                }
                d *= 2;
            }
            let p = pow2_floor(n);
            for e in p..n {
                assert!(has(e - p, e));
            }
            assert!(pairs.iter().all(|&(a, b)| a < b && b < n));
        }
        assert!(pairs_for(&AlgorithmTable::trees_only(), 8).is_empty());
        assert_eq!(pow2_floor(1), 1);
        assert_eq!(pow2_floor(6), 4);
        assert_eq!(pow2_floor(16), 16);
        let p: Vec<_> = pieces(0, 48).collect();
        assert_eq!(p, vec![(0, 0)]);
        let p: Vec<_> = pieces(100, 48).collect();
        assert_eq!(p, vec![(0, 48), (48, 96), (96, 100)]);
    }
}
