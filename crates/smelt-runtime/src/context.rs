//! A member's place in one tree, and the collectives run over it.

use crate::group::GroupShared;
use crate::word::{pack, unpack_at, Word};
use crate::GroupError;
use smelt_transport::{Consumer, Producer, TransportError};
use std::sync::Arc;
use std::time::Duration;

/// A queuepair to one tree neighbour.
#[derive(Debug)]
pub(crate) struct Link {
    pub(crate) rank: usize,
    pub(crate) tx: Producer,
    pub(crate) rx: Consumer,
}

/// One member's view of one tree: its parent and children links. Collectives on a
/// context involve every member of the group, each calling the same collectives in the
/// same order (MPI semantics); the tree's root sends every broadcast and receives every
/// reduction, so all members deliver a context's broadcasts in one order (atomic
/// broadcast: the root sequences, links are FIFO and reliable).
///
/// A context is `Send`: a member may move one context to another thread, so that
/// several contexts (trees with different roots) run concurrently on the same members.
#[derive(Debug)]
pub struct Context {
    pub(crate) id: usize,
    pub(crate) rank: usize,
    pub(crate) root: usize,
    pub(crate) parent: Option<Link>,
    pub(crate) children: Vec<Link>,
    /// Ranks of this member's subtree in pre-order (self first).
    pub(crate) subtree: Vec<usize>,
    /// Size of each child's subtree (same order as `children`).
    pub(crate) child_sizes: Vec<usize>,
    pub(crate) timeout: Duration,
    pub(crate) shared: Arc<GroupShared>,
    pub(crate) scratch: Vec<u8>,
    /// Packed values of the slice reductions, kept between calls so a reduction in a
    /// loop does not allocate.
    pub(crate) packed: Vec<u8>,
}

type Res<T> = Result<T, GroupError>;

impl Context {
    /// Which tree of the group this is (index in the list the group was built from).
    pub fn id(&self) -> usize {
        self.id
    }
    /// This member's rank (index in the group's CPU list).
    pub fn rank(&self) -> usize {
        self.rank
    }
    /// This member's OS CPU id.
    pub fn cpu(&self) -> u32 {
        self.shared.cpus[self.rank]
    }
    /// Number of members.
    pub fn size(&self) -> usize {
        self.shared.cpus.len()
    }
    /// Rank of this tree's root.
    pub fn root(&self) -> usize {
        self.root
    }
    /// True on the root.
    pub fn is_root(&self) -> bool {
        self.parent.is_none()
    }
    /// Parent's rank (None on the root).
    pub fn parent(&self) -> Option<usize> {
        self.parent.as_ref().map(|l| l.rank)
    }
    /// Children's ranks in send order.
    pub fn children(&self) -> Vec<usize> {
        self.children.iter().map(|l| l.rank).collect()
    }
    /// Operation timeout (from the group's configuration).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Turns a transport error on the link to `peer` into the group's error, recording
    /// a failure (and waking every member) where one happened.
    #[cold]
    fn fail(&self, e: TransportError, peer: usize, op: &'static str) -> GroupError {
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
            other => {
                let err = GroupError::Mismatch {
                    rank: self.rank,
                    what: format!("{op} with member {peer}: {other}"),
                };
                sh.record(self.rank, err.to_string(), false);
                err
            }
        }
    }

    /// Fails fast once the group has failed, even where this collective could still
    /// complete locally.
    #[inline(always)]
    fn check_failed(&self) -> Res<()> {
        if self.shared.abort.is_triggered() {
            return Err(self.fail(TransportError::Aborted, self.rank, "collective"));
        }
        Ok(())
    }

    /// Records a mismatch as this member's failure (waking everyone) and returns it.
    #[cold]
    fn mismatch(&self, what: String) -> GroupError {
        let err = GroupError::Mismatch {
            rank: self.rank,
            what,
        };
        self.shared.record(self.rank, err.to_string(), false);
        err
    }

    #[inline]
    fn up_word(&mut self, w: u64, op: &'static str) -> Res<()> {
        if let Some(p) = self.parent.as_mut() {
            if let Err(e) = p.tx.send_word_timeout(w, self.timeout) {
                let r = p.rank;
                return Err(self.fail(e, r, op));
            }
        }
        Ok(())
    }

    /// Sends a zero-payload message to the parent (header only, no payload store).
    #[inline]
    fn up_empty(&mut self, op: &'static str) -> Res<()> {
        if let Some(p) = self.parent.as_mut() {
            if let Err(e) = p.tx.send_empty_timeout(self.timeout) {
                let r = p.rank;
                return Err(self.fail(e, r, op));
            }
        }
        Ok(())
    }

    /// Sends a zero-payload message to every child.
    #[inline]
    fn down_empty(&mut self, op: &'static str) -> Res<()> {
        for i in 0..self.children.len() {
            if let Err(e) = self.children[i].tx.send_empty_timeout(self.timeout) {
                let r = self.children[i].rank;
                return Err(self.fail(e, r, op));
            }
        }
        Ok(())
    }

    #[inline]
    fn down_word(&mut self, w: u64, op: &'static str) -> Res<()> {
        for i in 0..self.children.len() {
            if let Err(e) = self.children[i].tx.send_word_timeout(w, self.timeout) {
                let r = self.children[i].rank;
                return Err(self.fail(e, r, op));
            }
        }
        Ok(())
    }

    #[inline]
    fn recv_child_word(&mut self, i: usize, op: &'static str) -> Res<u64> {
        match self.children[i].rx.recv_word_timeout(self.timeout) {
            Ok(w) => Ok(w),
            Err(e) => {
                let r = self.children[i].rank;
                Err(self.fail(e, r, op))
            }
        }
    }

    #[inline]
    fn recv_parent_word(&mut self, op: &'static str) -> Res<Option<u64>> {
        let Some(p) = self.parent.as_mut() else {
            return Ok(None);
        };
        match p.rx.recv_word_timeout(self.timeout) {
            Ok(w) => Ok(Some(w)),
            Err(e) => {
                let r = p.rank;
                Err(self.fail(e, r, op))
            }
        }
    }

    /// Broadcasts one word from the root: the root's `w` is returned on every member
    /// (other members' `w` is ignored). Zero-copy fast path.
    #[inline]
    pub fn broadcast_word(&mut self, w: u64) -> Res<u64> {
        self.check_failed()?;
        let w = self.recv_parent_word("broadcast")?.unwrap_or(w);
        self.down_word(w, "broadcast")?;
        Ok(w)
    }

    /// Broadcasts a zero-payload message from the root (a signal).
    #[inline]
    pub fn broadcast_empty(&mut self) -> Res<()> {
        self.check_failed()?;
        self.recv_parent_word("broadcast")?;
        self.down_empty("broadcast")
    }

    /// Broadcasts bytes from the root: on the root `buf` is sent, elsewhere it is
    /// replaced by the root's bytes. Messages larger than one channel message are sent
    /// as fragments that every inner member forwards as soon as it has them.
    pub fn broadcast(&mut self, buf: &mut Vec<u8>) -> Res<()> {
        self.check_failed()?;
        const OP: &str = "broadcast";
        let mut scratch = std::mem::take(&mut self.scratch);
        let r = self.broadcast_inner(buf, &mut scratch, OP);
        self.scratch = scratch;
        r
    }

    fn broadcast_inner(
        &mut self,
        buf: &mut Vec<u8>,
        scratch: &mut [u8],
        op: &'static str,
    ) -> Res<()> {
        let max = scratch.len();
        if self.parent.is_none() {
            let mut off = 0;
            loop {
                let end = (off + max).min(buf.len());
                self.send_children(&buf[off..end], op)?;
                if end - off < max {
                    return Ok(());
                }
                off = end;
            }
        }
        buf.clear();
        loop {
            let p = self.parent.as_mut().expect("non-root has a parent");
            let n = match p.rx.recv_timeout(scratch, self.timeout) {
                Ok(n) => n,
                Err(e) => {
                    let r = p.rank;
                    return Err(self.fail(e, r, op));
                }
            };
            self.send_children(&scratch[..n], op)?;
            buf.extend_from_slice(&scratch[..n]);
            if n < max {
                return Ok(());
            }
        }
    }

    fn send_children(&mut self, msg: &[u8], op: &'static str) -> Res<()> {
        for i in 0..self.children.len() {
            if let Err(e) = self.children[i].tx.send_timeout(msg, self.timeout) {
                let r = self.children[i].rank;
                return Err(self.fail(e, r, op));
            }
        }
        Ok(())
    }

    /// Sends `data` to the parent as fragments (a last fragment shorter than a full
    /// message ends it).
    fn send_up_bytes(&mut self, data: &[u8], op: &'static str) -> Res<()> {
        let max = self.scratch.len();
        let Some(p) = self.parent.as_mut() else {
            return Ok(());
        };
        let mut off = 0;
        loop {
            let end = (off + max).min(data.len());
            if let Err(e) = p.tx.send_timeout(&data[off..end], self.timeout) {
                let r = p.rank;
                return Err(self.fail(e, r, op));
            }
            if end - off < max {
                return Ok(());
            }
            off = end;
        }
    }

    /// Receives fragments from child `child` (or the parent for `None`) into `out`
    /// (appending) until a short one.
    fn recv_bytes(&mut self, child: Option<usize>, out: &mut Vec<u8>, op: &'static str) -> Res<()> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let max = scratch.len();
        let r = loop {
            let link = match child {
                Some(i) => &mut self.children[i],
                None => match self.parent.as_mut() {
                    Some(p) => p,
                    None => break Ok(()),
                },
            };
            match link.rx.recv_timeout(&mut scratch, self.timeout) {
                Ok(n) => {
                    out.extend_from_slice(&scratch[..n]);
                    if n < max {
                        break Ok(());
                    }
                }
                Err(e) => {
                    let r = link.rank;
                    break Err(self.fail(e, r, op));
                }
            }
        };
        self.scratch = scratch;
        r
    }

    /// Reduces one scalar per member to the root with `op` (associative; values are
    /// combined in tree pre-order: own value first, then each child's subtree in send
    /// order, so a commutative `op` gives the plain fold). Returns `Some(result)` on the
    /// root and `None` elsewhere. Zero-copy word path.
    #[inline]
    pub fn reduce<T: Word>(&mut self, v: T, op: impl Fn(T, T) -> T) -> Res<Option<T>> {
        self.check_failed()?;
        let mut acc = v;
        for i in 0..self.children.len() {
            let w = self.recv_child_word(i, "reduce")?;
            acc = op(acc, T::from_word(w));
        }
        if self.parent.is_some() {
            self.up_word(acc.to_word(), "reduce")?;
            Ok(None)
        } else {
            Ok(Some(acc))
        }
    }

    /// A zero-payload reduction: returns once every child subtree has arrived (on the
    /// root: once every member has called it).
    #[inline]
    pub fn reduce_empty(&mut self) -> Res<()> {
        self.check_failed()?;
        for i in 0..self.children.len() {
            self.recv_child_word(i, "reduce")?;
        }
        self.up_empty("reduce")
    }

    /// [`reduce`](Context::reduce) then broadcast of the result: every member gets it.
    #[inline]
    pub fn allreduce<T: Word>(&mut self, v: T, op: impl Fn(T, T) -> T) -> Res<T> {
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
    #[inline]
    pub fn barrier(&mut self) -> Res<()> {
        self.check_failed()?;
        if self.size() == 2 {
            if self.parent.is_some() {
                self.up_empty("barrier")?;
                self.recv_parent_word("barrier")?;
            } else {
                self.down_empty("barrier")?;
                self.recv_child_word(0, "barrier")?;
            }
            return Ok(());
        }
        self.reduce_empty()?;
        self.broadcast_empty()
    }

    /// Element-wise reduction of equally long slices to the root. On the root `data`
    /// holds the result afterwards and `true` is returned; elsewhere `data` is used as
    /// scratch (it holds the subtree's partial result). Slices of different lengths
    /// give [`GroupError::Mismatch`].
    pub fn reduce_slice<T: Word>(&mut self, data: &mut [T], op: impl Fn(T, T) -> T) -> Res<bool> {
        self.check_failed()?;
        let mut bytes = std::mem::take(&mut self.packed);
        let r = self.reduce_slice_inner(data, op, &mut bytes);
        self.packed = bytes;
        r
    }

    fn reduce_slice_inner<T: Word>(
        &mut self,
        data: &mut [T],
        op: impl Fn(T, T) -> T,
        bytes: &mut Vec<u8>,
    ) -> Res<bool> {
        const OP: &str = "reduce_slice";
        for i in 0..self.children.len() {
            bytes.clear();
            self.recv_bytes(Some(i), bytes, OP)?;
            if bytes.len() != data.len() * T::BYTES {
                return Err(self.mismatch(format!(
                    "{OP}: member {} sent {} values, this member has {}",
                    self.children[i].rank,
                    bytes.len() / T::BYTES.max(1),
                    data.len()
                )));
            }
            for (k, x) in data.iter_mut().enumerate() {
                *x = op(*x, unpack_at(bytes, k));
            }
        }
        if self.parent.is_some() {
            bytes.clear();
            pack(data, bytes);
            self.send_up_bytes(bytes, OP)?;
            Ok(false)
        } else {
            Ok(true)
        }
    }

    /// [`reduce_slice`](Context::reduce_slice) then broadcast: every member's `data`
    /// holds the result.
    pub fn allreduce_slice<T: Word>(&mut self, data: &mut [T], op: impl Fn(T, T) -> T) -> Res<()> {
        self.reduce_slice(data, op)?;
        let mut bytes = std::mem::take(&mut self.packed);
        bytes.clear();
        if self.is_root() {
            pack(data, &mut bytes);
        }
        let r = self.broadcast(&mut bytes).and_then(|()| {
            if bytes.len() != data.len() * T::BYTES {
                return Err(self.mismatch("allreduce_slice: result length differs".into()));
            }
            for (k, x) in data.iter_mut().enumerate() {
                *x = unpack_at(&bytes, k);
            }
            Ok(())
        });
        self.packed = bytes;
        r
    }

    /// Gathers one word per member at the root: `Some(values by rank)` on the root.
    pub fn gather_word(&mut self, v: u64) -> Res<Option<Vec<u64>>> {
        self.check_failed()?;
        const OP: &str = "gather";
        let mut vals = vec![v];
        let mut bytes = Vec::new();
        for i in 0..self.children.len() {
            bytes.clear();
            self.recv_bytes(Some(i), &mut bytes, OP)?;
            if bytes.len() != self.child_sizes[i] * 8 {
                return Err(self.mismatch(format!(
                    "{OP}: wrong number of values from member {}",
                    self.children[i].rank
                )));
            }
            vals.extend((0..self.child_sizes[i]).map(|k| unpack_at::<u64>(&bytes, k)));
        }
        if self.parent.is_some() {
            bytes.clear();
            pack(&vals, &mut bytes);
            self.send_up_bytes(&bytes, OP)?;
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
        self.check_failed()?;
        const OP: &str = "scatter";
        let pre: Vec<u64> = if self.parent.is_none() {
            let vals = values.unwrap_or(&[]);
            if vals.len() != self.size() {
                return Err(self.mismatch(format!(
                    "{OP}: the root needs {} values, got {}",
                    self.size(),
                    vals.len()
                )));
            }
            self.subtree.iter().map(|&r| vals[r]).collect()
        } else {
            let mut bytes = Vec::new();
            self.recv_bytes(None, &mut bytes, OP)?;
            if bytes.len() != self.subtree.len() * 8 {
                return Err(self.mismatch(format!("{OP}: wrong number of values from the parent")));
            }
            (0..self.subtree.len())
                .map(|k| unpack_at::<u64>(&bytes, k))
                .collect()
        };
        let mut off = 1;
        let max = self.scratch.len();
        let mut bytes = Vec::new();
        for i in 0..self.children.len() {
            let n = self.child_sizes[i];
            bytes.clear();
            pack(&pre[off..off + n], &mut bytes);
            off += n;
            let mut o = 0;
            loop {
                let end = (o + max).min(bytes.len());
                if let Err(e) = self.children[i]
                    .tx
                    .send_timeout(&bytes[o..end], self.timeout)
                {
                    let r = self.children[i].rank;
                    return Err(self.fail(e, r, OP));
                }
                if end - o < max {
                    break;
                }
                o = end;
            }
        }
        Ok(pre[0])
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // A context moved to another thread that panics fails the group too.
        if std::thread::panicking() {
            self.shared.record(self.rank, "panicked".into(), true);
        }
    }
}
