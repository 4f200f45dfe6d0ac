//! Reductions of long vectors: the typed reductions with a predefined operation
//! ([`Context::reduce_slice_op`], [`Context::allreduce_slice_op`]: the values lent
//! and combined as they lie in memory, by the kernels of [`crate::combine`]) and
//! Rabenseifner's allreduce (reduce-scatter by recursive halving, allgather by
//! recursive doubling) over the links beyond the tree.

pub(crate) mod staged;

use crate::combine::{combine_bytes, Elem, ReduceOp};
use crate::context::{Coll, Context, Tag};
use crate::nontree::{pow2_floor, NonTreeLinks};
use crate::{GroupError, SyncMode};
use smelt_ids::Rank;
use smelt_plan::NonTree;
use smelt_transport::Link;
use std::time::Duration;

type Res<T> = Result<T, GroupError>;

/// What an exchange does with a received piece: `take(mine, got)`.
type Take<'a> = &'a mut dyn FnMut(&mut [u8], &mut [u8]);
/// One pair step of Rabenseifner's halving and doubling: the partner, the range
/// sent, the range received, and whether the received range is combined into this
/// member's (reduce-scatter) or copied into place (allgather).
struct PairStep {
    partner: usize,
    send: (usize, usize),
    recv: (usize, usize),
    combine: bool,
}

/// The pair steps of member `me` of `p` (a power of two) over its `ranges`
/// ([`halving_ranges`]), in order: for d = 1, 2, …, p/2 the reduce-scatter with
/// `me XOR d` (keep one half of the current range, send the other), then the
/// allgather with the same partners in reverse (send the range held, receive the
/// partner's).
fn pair_steps(me: usize, p: usize, ranges: &[(usize, usize)]) -> Vec<PairStep> {
    // The half of `whole` that is not `part`: the upper one for the lower member of
    // the pair (`me & d == 0`), else the lower one.
    let other = |d: usize, part: (usize, usize), whole: (usize, usize)| {
        if me & d == 0 {
            (part.1, whole.1)
        } else {
            (whole.0, part.0)
        }
    };
    let mut steps = Vec::new();
    let (mut d, mut k) = (1, 0);
    while d < p {
        let keep = ranges[k + 1];
        let give = other(d, keep, ranges[k]);
        steps.push(PairStep {
            partner: me ^ d,
            send: give,
            recv: keep,
            combine: true,
        });
        d *= 2;
        k += 1;
    }
    while d > 1 {
        d /= 2;
        let held = ranges[k];
        let theirs = other(d, held, ranges[k - 1]);
        steps.push(PairStep {
            partner: me ^ d,
            send: held,
            recv: theirs,
            combine: false,
        });
        k -= 1;
    }
    steps
}

/// What a pair step by loans does with the partner's lent bytes (`fold(mine, theirs)`).
type Fold<'a> = &'a mut dyn FnMut(&mut [u8], &[u8]);

/// Rabenseifner's blocks are cut at multiples of this many bytes, so no value of a
/// basic type (1, 2, 4, 8, 16 bytes) straddles two blocks.
pub(crate) const UNIT: usize = 48;

/// The `(start, end)` pieces of `lo..hi` in chunks of `chunk` (none when empty).
fn spans(lo: usize, hi: usize, chunk: usize) -> impl Iterator<Item = (usize, usize)> {
    let chunk = chunk.max(1);
    (lo..hi)
        .step_by(chunk)
        .map(move |o| (o, (o + chunk).min(hi)))
}

/// The blocks of Rabenseifner's reduce-scatter for `len` bytes and `p` members: the
/// range a member keeps after each step (in bytes), steps with partners at distance
/// 1, 2, 4, ...: after the step of distance `d` the member whose bit `d` is clear keeps
/// the lower half (in units of [`UNIT`] bytes) of its range, its partner the upper.
pub(crate) fn halving_ranges(len: usize, p: usize, me: usize) -> Vec<(usize, usize)> {
    let units = len.div_ceil(UNIT);
    let (mut lo, mut hi) = (0, units);
    let mut out = vec![(0, len)];
    let mut d = 1;
    while d < p {
        let mid = lo + (hi - lo) / 2;
        if me & d == 0 {
            hi = mid;
        } else {
            lo = mid;
        }
        out.push(((lo * UNIT).min(len), (hi * UNIT).min(len)));
        d *= 2;
    }
    out
}

/// True for the algorithms that, between two members, are one exchange of halves
/// (Rabenseifner, and the ring of two).
pub(crate) fn halves(a: Option<NonTree>) -> bool {
    matches!(a, Some(NonTree::Rabenseifner | NonTree::Ring))
}

/// The `(start, end)` byte range of block `b` of the ring allreduce of `len` bytes in
/// `n` blocks: cut at multiples of [`UNIT`] bytes (so no value straddles two blocks),
/// the first blocks one unit longer where the units do not divide evenly; blocks past
/// the end are empty.
pub(crate) fn ring_block(len: usize, n: usize, b: usize) -> (usize, usize) {
    let units = len.div_ceil(UNIT);
    let (q, r) = (units / n, units % n);
    let start = b * q + b.min(r);
    let end = start + q + usize::from(b < r);
    ((start * UNIT).min(len), (end * UNIT).min(len))
}

impl<L: Link> Context<L> {
    /// Element-wise reduction of equally long slices to the root with a predefined
    /// operation ([`ReduceOp`]): on the root `data` holds the result and `true` is
    /// returned; elsewhere `data` is scratch. The same tree, messages and order of
    /// combination as [`reduce_slice`](Context::reduce_slice), but the values travel
    /// as they lie in memory (lent between threads without packing) and are combined
    /// by the vectorised kernels of [`crate::combine`]. An operation not defined on
    /// `T` (bitwise or logical on floats) gives [`GroupError::Invalid`] before
    /// anything is sent.
    pub fn reduce_slice_op<T: Elem>(&mut self, data: &mut [T], op: ReduceOp) -> Res<bool> {
        op.check::<T>()?;
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(data);
        self.reduce_bytes(bytes, |acc, o| combine_bytes::<T>(op, acc, o))
    }

    /// Element-wise allreduce of equally long slices with a predefined operation:
    /// every member's `data` holds the result, bit for bit the same on every member.
    /// The algorithm is the one [`allreduce_bytes`](Context::allreduce_bytes) runs for
    /// this many bytes (the group's table: the tree's reduce then broadcast, recursive
    /// doubling, or Rabenseifner's reduce-scatter and allgather), with the values
    /// lent and combined as they lie in memory ([`reduce_slice_op`](Self::reduce_slice_op)).
    pub fn allreduce_slice_op<T: Elem>(&mut self, data: &mut [T], op: ReduceOp) -> Res<()> {
        self.allreduce_bytes_op::<T>(bytemuck::cast_slice_mut(data), op)
    }

    /// [`allreduce_slice_op`](Self::allreduce_slice_op) on the values' little-endian
    /// bytes, at any alignment (what the C API hands over): the same algorithms and
    /// kernels. A length that is not a whole number of values leaves the last bytes
    /// as they are.
    pub fn allreduce_bytes_op<T: Elem>(&mut self, bytes: &mut [u8], op: ReduceOp) -> Res<()> {
        op.check::<T>()?;
        if self.pair_lends(bytes.len()) {
            let mut combine = |acc: &mut [u8], o: &[u8]| combine_bytes::<T>(op, acc, o);
            return self.allreduce_pair(bytes, &mut combine, true);
        }
        // The predefined operations commute (bit for bit): the ring may run.
        self.commutes = true;
        let r = self.allreduce_bytes(bytes, |acc, o| combine_bytes::<T>(op, acc, o));
        self.commutes = false;
        r
    }

    /// Rabenseifner between two members by loans ([`allreduce_pair_lent`](Self::allreduce_pair_lent))
    /// as one collective call; `commutative`: `combine(a, b)` and `combine(b, a)`
    /// give the same bits (the predefined operations), so the member that keeps the
    /// upper half combines in place instead of through a copy.
    pub(crate) fn allreduce_pair(
        &mut self,
        data: &mut [u8],
        combine: &mut dyn FnMut(&mut [u8], &[u8]),
        commutative: bool,
    ) -> Res<()> {
        let t = self.begin(Coll::ReduceSlice)?;
        self.check_len(data.len(), t)?;
        if self.stages_for(data.len()) {
            return self.allreduce_pair_staged(data, combine, commutative, t);
        }
        self.allreduce_pair_lent(data, combine, commutative, t)
    }

    /// True if a typed allreduce of `len` bytes runs Rabenseifner between two members
    /// by loans ([`allreduce_pair_lent`](Self::allreduce_pair_lent)) or, between two
    /// member processes, through the stages of their link
    /// ([`allreduce_pair_staged`](Self::allreduce_pair_staged)): the table picks
    /// Rabenseifner for this size, the group has two members, the call is loose, and
    /// the message is long enough to lend (from `lend_from` bytes) and the link
    /// between them can lend, or long enough to stage
    /// ([`staged::STAGE_FROM`]) and the link has a stage.
    pub(crate) fn pair_lends(&mut self, len: usize) -> bool {
        if self.size() != 2 || self.sync != SyncMode::Loose || self.in_strict || len < 2 * UNIT {
            return false;
        }
        let link = match (&self.parent, self.children.first()) {
            (Some(p), _) => &p.link,
            (None, Some(c)) => &c.link,
            _ => return false,
        };
        let path = (len >= self.lend_from && link.can_lend()) || self.stages_for(len);
        path && halves(self.allreduce_non_tree(len))
    }

    /// Rabenseifner's allreduce of two members that share memory, by loans over the
    /// tree's one link: the root keeps the lower half (cut at a multiple of
    /// [`UNIT`] bytes), the other member the upper. Reduce-scatter: each lends the half
    /// the other keeps and, while it is out, borrows the other's loan and combines it
    /// into the half it keeps (both combine at once, each reading the other's buffer
    /// directly). Allgather: each lends the half it holds the result of and copies the
    /// other's into place. Each value is combined once, `x0 ⊕ x1` (the root's value on
    /// the left, as the tree combines; with a `commutative` combine the other member
    /// computes `x1 ⊕ x0` in place, the same bits), then copied: the same bits on both.
    fn allreduce_pair_lent(
        &mut self,
        data: &mut [u8],
        combine: &mut dyn FnMut(&mut [u8], &[u8]),
        commutative: bool,
        t: Tag,
    ) -> Res<()> {
        let mid = data.len().div_ceil(UNIT) / 2 * UNIT;
        let root = self.parent.is_none();
        // The root's value on the left where the combine may not commute: the upper
        // half's keeper combines into a copy of the root's loan.
        let mut copy = (!root && !commutative).then(|| std::mem::take(&mut self.packed));
        let (lower, upper) = data.split_at_mut(mid);
        let (keep, give) = if root { (lower, upper) } else { (upper, lower) };
        let timeout = Some(self.timeout);
        let (want_in, want_out) = (keep.len(), give.len());
        let rs = t.word();
        let ag = t.word() | (1 << 32);
        let peer = match self.parent.as_mut() {
            Some(p) => p,
            None => &mut self.children[0],
        };
        let rank = peer.rank;
        // Reduce-scatter: lend `give`, combine the other's into `keep`.
        let r = peer.link.exchange_loans(rs, give, timeout, |tag, theirs| {
            if tag != rs || theirs.len() != want_in {
                return Err((tag, theirs.len()));
            }
            match copy.as_mut() {
                Some(c) => {
                    c.clear();
                    c.extend_from_slice(theirs);
                    combine(c, keep);
                    keep.copy_from_slice(c);
                }
                None => combine(keep, theirs),
            }
            Ok(())
        });
        if let Some(c) = copy.take() {
            self.packed = c;
        }
        self.pair_checked(r, rs, want_in, rank, t)?;
        // Allgather: lend `keep` (now the result), copy the other's into `give`.
        let peer = match self.parent.as_mut() {
            Some(p) => p,
            None => &mut self.children[0],
        };
        let r = peer.link.exchange_loans(ag, keep, timeout, |tag, theirs| {
            if tag != ag || theirs.len() != want_out {
                return Err((tag, theirs.len()));
            }
            give.copy_from_slice(theirs);
            Ok(())
        });
        self.pair_checked(r, ag, want_out, rank, t)
    }

    /// [`broadcast_into`](Context::broadcast_into) between two members by loans, both
    /// copying at once (two cores copy a long message faster than one): the buffer is
    /// cut at half its length (rounded down to a cache line); the root lends its lower
    /// part and writes its upper part straight into the other member's, which it lent
    /// for writing; meanwhile the other member copies the root's lower part into its
    /// own. One exchange of loans ([`smelt_transport::Link::exchange_loans_mut`]); a member whose
    /// buffer has another length sees a loan of another length, so the two fail.
    pub(crate) fn broadcast_pair_lent(&mut self, buf: &mut [u8], t: Tag) -> Res<()> {
        let mid = buf.len() / 2 / 64 * 64;
        let root = self.parent.is_none();
        let (lo, hi) = buf.split_at_mut(mid);
        let timeout = Some(self.timeout);
        let tag = t.word();
        let peer = match self.parent.as_mut() {
            Some(p) => p,
            None => &mut self.children[0],
        };
        let rank = peer.rank;
        // The root lends its lower half and writes its upper half into the other's
        // loan; the other lends its upper half and copies the root's loan into its
        // lower half.
        let (lent, mine) = if root { (lo, hi) } else { (hi, lo) };
        let want = mine.len();
        let r = peer
            .link
            .exchange_loans_mut(tag, lent, timeout, |got, theirs| {
                if got != tag || theirs.len() != want {
                    return Err((got, theirs.len()));
                }
                if root {
                    theirs.copy_from_slice(mine);
                } else {
                    mine.copy_from_slice(theirs);
                }
                Ok(())
            });
        self.pair_checked(r, tag, want, rank, t)
    }

    /// The outcome of one exchange of loans as the group's result.
    fn pair_checked(
        &self,
        r: Result<Result<(), (u64, usize)>, smelt_transport::TransportError>,
        tag: u64,
        want: usize,
        rank: Rank,
        t: Tag,
    ) -> Res<()> {
        match r {
            Ok(Ok(())) => Ok(()),
            Ok(Err((got, n))) => {
                if got != tag {
                    return Err(self.crossed(got, t, rank));
                }
                Err(self.mismatch(format!(
                    "{}: member {rank} lends {n} bytes where this member expects {want} (the data differ in length)",
                    t.op()
                )))
            }
            Err(e) => Err(self.fail(e, rank, t.op())),
        }
    }

    /// Rabenseifner's allreduce over the links beyond the tree (the pairs of
    /// recursive doubling), called by [`allreduce_doubling`](Self::allreduce_doubling)
    /// when the table picks it. With p the largest power of two ≤ n:
    ///
    /// 1. ranks `e ≥ p` send their data to `e − p`, which combines it (its own on the
    ///    left);
    /// 2. reduce-scatter: for d = 1, 2, …, p/2 member `i` and `i XOR d` split their
    ///    current range in halves ([`halving_ranges`]), each sends the half the other
    ///    keeps and combines the half it receives into its own (the lower rank's
    ///    value on the left), in pieces of one link message, sending and receiving in
    ///    turn;
    /// 3. allgather: the same pairs in reverse order, each sending the range it holds
    ///    and receiving its partner's into place;
    /// 4. `e − p` sends the result to `e`.
    ///
    /// Where n is a power of two (steps 1 and 4 are empty), the links can lend
    /// (members that are threads) and the data are at least the group's
    /// `lend_from` long, each pair step is one exchange of loans instead
    /// ([`lend_step`](Self::lend_step)): each member reads its
    /// partner's half directly.
    ///
    /// Each value is combined once, by the member that keeps it, grouped as
    /// recursive doubling groups it: `((x0 ⊕ x(p)) ⊕ (x1 ⊕ x(p+1))) ⊕ ((x2 ⊕ …) ⊕ …)`.
    pub(crate) fn allreduce_rabenseifner(
        &mut self,
        data: &mut [u8],
        combine: &mut dyn FnMut(&mut [u8], &[u8]),
        t: Tag,
    ) -> Res<()> {
        self.with_nontree(|c, nt| c.rabenseifner_steps(nt, data, combine, t))
    }

    /// Runs `f` with this context's links beyond the tree taken out (so `f` may use
    /// them beside `&self`), and puts them back whatever `f` returned.
    fn with_nontree<R>(&mut self, f: impl FnOnce(&Self, &mut NonTreeLinks) -> Res<R>) -> Res<R> {
        let mut nt = self.nontree.take().expect("checked by the caller");
        let r = f(self, &mut nt);
        self.nontree = Some(nt);
        r
    }

    fn rabenseifner_steps(
        &self,
        nt: &mut NonTreeLinks,
        data: &mut [u8],
        combine: &mut dyn FnMut(&mut [u8], &[u8]),
        t: Tag,
    ) -> Res<()> {
        let n = self.size();
        let me = self.rank.index();
        let p = pow2_floor(n);
        let len = data.len();
        let whole = (0, len);
        let none = (0, 0);
        if me >= p {
            let h = Rank(me - p);
            self.exchange(nt, h, whole, none, data, 0, t, None)?;
            return self.exchange(nt, h, none, whole, data, 1, t, None);
        }
        let extra = (me + p < n).then_some(Rank(me + p));
        if let Some(e) = extra {
            let mut fold = |mine: &mut [u8], got: &mut [u8]| combine(mine, got);
            self.exchange(nt, e, none, whole, data, 0, t, Some(&mut fold))?;
        }
        let ranges = halving_ranges(len, p, me);
        // Between threads, the pairs' halves are lent (each side reads the other's
        // directly, one exchange a step) where the steps are only pairs (n a power of
        // two: no message of this call goes through the mesh, so none can be held
        // there) and the data are long enough.
        let lent = p == n
            && len >= self.lend_from
            && (0..n.trailing_zeros()).all(|b| {
                let link = nt.mesh.link_mut(Rank(me ^ (1 << b)));
                link.is_some_and(|l| l.can_lend())
            });
        let commutes = self.commutes;
        for (i, s) in pair_steps(me, p, &ranges).into_iter().enumerate() {
            let step = 2 + i as u64;
            let (peer, lower) = (Rank(s.partner), me < s.partner);
            match (lent, s.combine) {
                (false, true) => {
                    let mut fold = |mine: &mut [u8], got: &mut [u8]| {
                        if lower {
                            combine(mine, got);
                        } else {
                            combine(got, mine);
                            mine.copy_from_slice(got);
                        }
                    };
                    self.exchange(nt, peer, s.send, s.recv, data, step, t, Some(&mut fold))?;
                }
                (false, false) => self.exchange(nt, peer, s.send, s.recv, data, step, t, None)?,
                (true, true) => {
                    let mut fold = |mine: &mut [u8], theirs: &[u8]| {
                        if lower || commutes {
                            combine(mine, theirs);
                        } else {
                            let mut c = theirs.to_vec();
                            combine(&mut c, mine);
                            mine.copy_from_slice(&c);
                        }
                    };
                    self.lend_step(nt, &s, data, (step, t), Some(&mut fold))?;
                }
                (true, false) => self.lend_step(nt, &s, data, (step, t), None)?,
            }
        }
        if let Some(e) = extra {
            self.exchange(nt, e, whole, none, data, 1, t, None)?;
        }
        Ok(())
    }

    /// Pair step `s` (number `step`) by loans: lends `data[s.send]` to the partner
    /// and, while it is out, takes the partner's loan for `data[s.recv]`
    /// (`fold(mine, theirs)`, else a copy into place); the two ranges do not overlap.
    fn lend_step(
        &self,
        nt: &mut NonTreeLinks,
        s: &PairStep,
        data: &mut [u8],
        (step, t): (u64, Tag),
        fold: Option<Fold<'_>>,
    ) -> Res<()> {
        let (peer, give, keep) = (Rank(s.partner), s.send, s.recv);
        let tag = t.word() | (step << 32);
        let (given, kept): (&[u8], &mut [u8]) = if give.0 < keep.0 {
            let (a, b) = data.split_at_mut(keep.0);
            (&a[give.0..give.1], &mut b[..keep.1 - keep.0])
        } else {
            let (a, b) = data.split_at_mut(give.0);
            (&b[..give.1 - give.0], &mut a[keep.0..keep.1])
        };
        let want = kept.len();
        debug_assert!(!nt.mesh.holds_from(peer));
        let Some(link) = nt.mesh.link_mut(peer) else {
            return Err(self.fail(smelt_transport::TransportError::Disconnected, peer, t.op()));
        };
        let r = link.exchange_loans(tag, given, Some(self.timeout), |got, theirs| {
            if got != tag || theirs.len() != want {
                return Err((got, theirs.len()));
            }
            match fold {
                Some(f) => f(kept, theirs),
                None => kept.copy_from_slice(theirs),
            }
            Ok(())
        });
        self.pair_checked(r, tag, want, peer, t)
    }

    /// The ring allreduce ([`NonTree::Ring`], `n > 2` members, a commutative
    /// `combine`): the data cut into `n` blocks ([`ring_block`]).
    /// 1. reduce-scatter, steps `s = 0 .. n − 2`: member `i` sends block `i − s`
    ///    (mod n) to member `i + 1` and combines block `i − s − 1`, which member
    ///    `i − 1` sends, into its own (`combine(mine, got)`); after it member `i`
    ///    holds block `i + 1` reduced;
    /// 2. allgather, steps `s = 0 .. n − 2`: member `i` sends block `i + 1 − s` to
    ///    member `i + 1` and receives block `i − s` into place.
    ///
    /// Block `b` is combined once per member along the ring from member `b`:
    /// `x(b−1) ⊕ (… ⊕ (x(b+1) ⊕ x(b)))` (indices mod n), then copied, so every member
    /// holds the same bits.
    pub(crate) fn allreduce_ring(
        &mut self,
        data: &mut [u8],
        combine: &mut dyn FnMut(&mut [u8], &[u8]),
        t: Tag,
    ) -> Res<()> {
        let n = self.size();
        let me = self.rank.index();
        let (next, prev) = (Rank((me + 1) % n), Rank((me + n - 1) % n));
        let len = data.len();
        let block = |b: usize| ring_block(len, n, b % n);
        self.with_nontree(|c, nt| {
            let mut fold = |mine: &mut [u8], got: &mut [u8]| combine(mine, got);
            for s in 0..n - 1 {
                let (send, recv) = (block(me + n - s), block(me + 2 * n - s - 1));
                let step = 2 + s as u64;
                let fold: Take<'_> = &mut fold;
                c.shift(nt, (next, send), (prev, recv), data, step, t, Some(fold))?;
            }
            for s in 0..n - 1 {
                let (send, recv) = (block(me + 1 + n - s), block(me + n - s));
                let step = 1 + n as u64 + s as u64;
                c.shift(nt, (next, send), (prev, recv), data, step, t, None)?;
            }
            Ok(())
        })
    }

    /// Sends `data[send]` to `peer` while receiving `peer`'s bytes for `data[recv]`,
    /// in pieces of half a link message, a send then a receive in turn (deadlock-free
    /// and never blocked on a full link: each side sends its next piece only after
    /// taking the other's previous one, and a link holds two pieces); `take(mine, got)` gets each received piece with
    /// the matching piece of `data` (`None`: the pieces are received into `data`). Step `step` goes in the tag's upper half.
    #[allow(clippy::too_many_arguments)]
    fn exchange(
        &self,
        nt: &mut NonTreeLinks,
        peer: Rank,
        send: (usize, usize),
        recv: (usize, usize),
        data: &mut [u8],
        step: u64,
        t: Tag,
        take: Option<Take<'_>>,
    ) -> Res<()> {
        self.shift(nt, (peer, send), (peer, recv), data, step, t, take)
    }

    /// [`exchange`](Self::exchange) with two peers: `data[to.1]` goes to member `to.0`
    /// while member `from.0`'s bytes for `data[from.1]` come in, piece by piece in
    /// turn. Round a ring a link may hold more than two pieces while its receiver is
    /// behind; the mesh's send then takes in what arrives meanwhile, so no member
    /// waits on another that waits on it.
    #[allow(clippy::too_many_arguments)]
    fn shift(
        &self,
        nt: &mut NonTreeLinks,
        to: (Rank, (usize, usize)),
        from: (Rank, (usize, usize)),
        data: &mut [u8],
        step: u64,
        t: Tag,
        mut take: Option<Take<'_>>,
    ) -> Res<()> {
        let ((peer, send), (source, recv)) = (to, from);
        let timeout: Duration = self.timeout;
        let tag = t.word() | (step << 32);
        // Pieces of half a link message (whole units): when a side sends piece i, its
        // link holds at most piece i − 1 (the other side took i − 2 before sending
        // its i − 1), so a send never finds the link full (a full link parks the
        // sender unwoken).
        let chunk = (nt.buf.len() / 2 / UNIT * UNIT)
            .max(UNIT)
            .min(nt.buf.len())
            .max(1);
        let mut sp = spans(send.0, send.1, chunk);
        let mut rp = spans(recv.0, recv.1, chunk);
        loop {
            let (s, r) = (sp.next(), rp.next());
            if s.is_none() && r.is_none() {
                return Ok(());
            }
            if let Some((a, b)) = s {
                nt.mesh
                    .send(peer, tag, &data[a..b], timeout)
                    .map_err(|e| self.mesh_fail(e, t.op()))?;
            }
            if let Some((a, b)) = r {
                // A copy goes straight into place.
                let into = match take {
                    Some(_) => &mut nt.buf[..],
                    None => &mut data[a..b],
                };
                let (got, k) = nt
                    .mesh
                    .recv_from(source, into, timeout)
                    .map_err(|e| self.mesh_fail(e, t.op()))?;
                if got != tag {
                    return Err(self.crossed(got, t, source));
                }
                if k != b - a {
                    return Err(self.mismatch(format!(
                        "{}: member {source} sent a piece of {k} bytes where member {} expected {} (the data differ in length)",
                        t.op(),
                        self.rank,
                        b - a
                    )));
                }
                if let Some(take) = take.as_mut() {
                    take(&mut data[a..b], &mut nt.buf[..k]);
                }
            }
        }
    }
}

impl<L: Link> crate::Member<L> {
    /// Context 0's [`Context::reduce_slice_op`].
    pub fn reduce_slice_op<T: Elem>(&mut self, data: &mut [T], op: ReduceOp) -> Res<bool> {
        self.context(0)?.reduce_slice_op(data, op)
    }
    /// Context 0's [`Context::allreduce_slice_op`].
    pub fn allreduce_slice_op<T: Elem>(&mut self, data: &mut [T], op: ReduceOp) -> Res<()> {
        self.context(0)?.allreduce_slice_op(data, op)
    }
    /// Context 0's [`Context::allreduce_bytes_op`].
    pub fn allreduce_bytes_op<T: Elem>(&mut self, bytes: &mut [u8], op: ReduceOp) -> Res<()> {
        self.context(0)?.allreduce_bytes_op::<T>(bytes, op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_blocks_partition_the_data_at_whole_units() {
        for n in [1, 2, 3, 5, 8, 16] {
            for len in [0, 1, 47, 48, 49, 48 * 3 + 5, 48 * 16, 10_000, 1 << 20] {
                let mut at = 0;
                for b in 0..n {
                    let (lo, hi) = ring_block(len, n, b);
                    assert_eq!(lo, at, "n={n} len={len} block {b}");
                    assert!(hi >= lo && (hi == len || hi % UNIT == 0), "n={n} len={len}");
                    // Blocks before the end are the first block's length or one unit
                    // shorter (the first ones take the units left over).
                    let (l0, h0) = ring_block(len, n, 0);
                    if hi < len {
                        let d = (h0 - l0) - (hi - lo);
                        assert!(d == 0 || d == UNIT, "n={n} len={len} block {b}");
                    }
                    at = hi;
                }
                assert_eq!(at, len, "n={n} len={len}");
            }
        }
    }

    #[test]
    fn halving_ranges_partition_the_data() {
        for p in [1, 2, 4, 8, 16] {
            for len in [0, 1, 47, 48, 49, 48 * 3 + 5, 48 * 16, 10_000, 1 << 20] {
                let mut finals: Vec<(usize, usize)> = (0..p)
                    .map(|me| *halving_ranges(len, p, me).last().unwrap())
                    .collect();
                for me in 0..p {
                    let r = halving_ranges(len, p, me);
                    assert_eq!(r.len(), p.trailing_zeros() as usize + 1);
                    // Partners at every step share the range they split.
                    for (k, range) in r.iter().take(r.len() - 1).enumerate() {
                        assert_eq!(halving_ranges(len, p, me ^ (1 << k))[k], *range);
                    }
                }
                finals.sort();
                let mut at = 0;
                for (a, b) in finals {
                    assert_eq!(a.min(len), at.min(len), "p={p} len={len}");
                    at = at.max(b);
                }
                assert_eq!(at, len, "p={p} len={len}");
            }
        }
    }
}
