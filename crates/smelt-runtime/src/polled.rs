//! Polled steps of a collective: the pieces a caller builds a non-blocking collective
//! from, as a state machine that advances only when it is polled (MPI's
//! `MPI_Ibarrier`, `MPI_Ibcast`, `MPI_Iallreduce` in `smelt-mpi`, whose progress is
//! made inside `MPI_Test`/`MPI_Wait`).
//!
//! A polled collective takes its tag with [`Context::begin_polled`] (the context's
//! sequence number advances as for any collective: every member must start the same
//! polled and blocking collectives on a context in the same order), then moves
//! messages to and from its tree neighbours with [`Context::poll_send`] and
//! [`Context::poll_recv`], which never wait unless asked to (`wait`), and check each
//! received message's tag. Which messages flow is the caller's: every member of the
//! context must follow the same pattern.

use crate::context::{Coll, Context, Tag};
use crate::GroupError;
use smelt_transport::{Link, TransportError};
use std::time::Duration;

/// The collective a polled call is, as its messages' tags say (so that members that
/// call different collectives are told apart at the first message that crosses them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolledColl {
    /// Data or a signal from the root down the tree.
    Broadcast,
    /// Data or a signal from the leaves up to the root.
    Reduce,
    /// Signals both ways (a barrier, or an exchange between two members).
    Barrier,
}

/// The tag of one polled collective call ([`Context::begin_polled`]).
#[derive(Debug, Clone, Copy)]
pub struct PolledTag(Tag);

/// A tree neighbour of a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Neighbour {
    /// The parent (none on the root).
    Parent,
    /// Child `i`, in send order.
    Child(usize),
}

impl<L: Link> Context<L> {
    /// Starts a polled collective: fails once the group has failed, else advances the
    /// context's sequence number and returns the call's tag.
    pub fn begin_polled(&mut self, coll: PolledColl) -> Result<PolledTag, GroupError> {
        let c = match coll {
            PolledColl::Broadcast => Coll::Broadcast,
            PolledColl::Reduce => Coll::Reduce,
            PolledColl::Barrier => Coll::Barrier,
        };
        self.begin(c).map(PolledTag)
    }

    /// Number of children.
    pub fn num_children(&self) -> usize {
        self.children.len()
    }

    /// Bytes one polled message may carry: the group's fragment size (a multiple of
    /// 48 bytes, the same on every member, and never more than a channel holds).
    pub fn polled_fragment(&self) -> usize {
        self.segment
    }

    /// Records `what` as this member's failure (a mismatch: the members disagree on
    /// the messages of a call) and returns it.
    pub fn polled_mismatch(&self, what: String) -> GroupError {
        self.mismatch(what)
    }

    /// Sends `msg` (at most [`polled_fragment`](Context::polled_fragment) bytes) to
    /// `to` with tag `t`: `Ok(true)` once sent. `wait` `None`: only if there is room
    /// now (`Ok(false)` otherwise); `Some(d)`: waiting at most `d` for room (a wait
    /// that runs out is `Ok(false)`, not a failure). A peer that died or left, or a
    /// group that failed, is an error (recorded as for any collective). Sending to the
    /// parent on the root does nothing (`Ok(true)`).
    pub fn poll_send(
        &mut self,
        to: Neighbour,
        t: PolledTag,
        msg: &[u8],
        wait: Option<Duration>,
    ) -> Result<bool, GroupError> {
        let Some(p) = self.neighbour(to) else {
            return Ok(true);
        };
        let tag = t.0.word();
        let r = match p.link.try_send(tag, msg) {
            Err(TransportError::Full) => match wait {
                Some(d) => p.link.send(tag, msg, Some(d)),
                None => return Ok(false),
            },
            r => r,
        };
        match r {
            Ok(()) => Ok(true),
            Err(TransportError::Full | TransportError::Timeout(_)) => Ok(false),
            Err(e) => {
                let rank = p.rank;
                Err(self.fail(e, rank, t.0.op()))
            }
        }
    }

    /// Receives the next message from `from` into `buf` (at least
    /// [`polled_fragment`](Context::polled_fragment) bytes), checking that it carries
    /// tag `t`: `Ok(Some(len))` once received, `Ok(None)` when none is waiting (`wait`
    /// as in [`poll_send`](Context::poll_send)). A message of another collective is a
    /// mismatch; a dead or departed peer, or a failed group, an error. The parent of
    /// the root sends nothing: `Ok(Some(0))`.
    pub fn poll_recv(
        &mut self,
        from: Neighbour,
        t: PolledTag,
        buf: &mut [u8],
        wait: Option<Duration>,
    ) -> Result<Option<usize>, GroupError> {
        let Some(p) = self.neighbour(from) else {
            return Ok(Some(0));
        };
        let r = match p.link.try_recv(buf) {
            Err(TransportError::Empty) => match wait {
                Some(d) => p.link.recv(buf, Some(d)),
                None => return Ok(None),
            },
            r => r,
        };
        let rank = p.rank;
        match r {
            Ok((tag, n)) if tag == t.0.word() => Ok(Some(n)),
            Ok((tag, _)) => Err(self.crossed(tag, t.0, rank)),
            Err(TransportError::Empty | TransportError::Timeout(_)) => Ok(None),
            Err(e) => Err(self.fail(e, rank, t.0.op())),
        }
    }

    fn neighbour(&mut self, n: Neighbour) -> Option<&mut crate::context::Peer<L>> {
        match n {
            Neighbour::Parent => self.parent.as_mut(),
            Neighbour::Child(i) => self.children.get_mut(i),
        }
    }
}
