//! The point-to-point link interface the collectives are written against.

use crate::{QueuePairEnd, TransportError};
use std::time::Duration;

/// One end of a reliable, FIFO, bidirectional link to one peer, carrying tagged
/// messages: what every transport (in-process queuepairs, queuepairs in memory shared
/// between processes, a network engine) offers the collectives.
///
/// * Messages are byte strings of up to [`max_message_len`](Link::max_message_len)
///   bytes, each with a 64-bit tag the receiver gets back (the collectives tag each
///   message with its operation and sequence number, to detect members that call
///   different collectives). Words are the fast path.
/// * `try_` operations never block: [`TransportError::Full`] / [`TransportError::Empty`].
///   The others wait (spin, yield, park) at most `timeout` (`None`: no limit) and fail
///   with [`TransportError::Timeout`].
/// * Failures: [`TransportError::Disconnected`] (the peer closed its end),
///   [`TransportError::PeerDied`] (the peer's process died), [`TransportError::Aborted`]
///   (the link's abort flag was raised).
pub trait Link: Send {
    /// Largest message one send carries, in bytes.
    fn max_message_len(&self) -> usize;
    /// Sends `msg` with `tag` if that is possible without waiting.
    fn try_send(&mut self, tag: u64, msg: &[u8]) -> Result<(), TransportError>;
    /// Sends `msg` with `tag`, waiting at most `timeout` for room.
    fn send(
        &mut self,
        tag: u64,
        msg: &[u8],
        timeout: Option<Duration>,
    ) -> Result<(), TransportError>;
    /// Sends one word with `tag` (the fast path; received as an 8-byte message).
    fn send_word(
        &mut self,
        tag: u64,
        w: u64,
        timeout: Option<Duration>,
    ) -> Result<(), TransportError> {
        self.send(tag, &w.to_le_bytes(), timeout)
    }
    /// Sends an empty message with `tag` (a signal).
    fn send_empty(&mut self, tag: u64, timeout: Option<Duration>) -> Result<(), TransportError> {
        self.send(tag, &[], timeout)
    }
    /// Receives the next message into `buf` if one is waiting: its tag and length.
    fn try_recv(&mut self, buf: &mut [u8]) -> Result<(u64, usize), TransportError>;
    /// Receives the next message into `buf`, waiting at most `timeout`.
    fn recv(
        &mut self,
        buf: &mut [u8],
        timeout: Option<Duration>,
    ) -> Result<(u64, usize), TransportError>;
    /// Receives a word (an 8-byte message; an empty one reads as 0) with its tag.
    fn recv_word(&mut self, timeout: Option<Duration>) -> Result<(u64, u64), TransportError> {
        let mut b = [0u8; 8];
        let (tag, n) = self.recv(&mut b, timeout)?;
        match n {
            8 => Ok((tag, u64::from_le_bytes(b))),
            0 => Ok((tag, 0)),
            len => Err(TransportError::NotAWord { len }),
        }
    }
    /// A barrier of the two ends of this link: both call it with the same `tag` (the
    /// collectives' tag; its low 32 bits, their sequence number, differ from the
    /// previous call's), and it returns `Ok(None)` once both did and every message the
    /// peer sent before it was received. `Ok(Some(got))` if a message tagged `got`
    /// from before the peer's barrier, or instead of it, is waiting (it stays queued). A receive of the peer that waits
    /// while this end is in the barrier may fail with
    /// [`TransportError::PeerInBarrier`]. Default: an empty message each way (the
    /// peer's is consumed); queuepairs publish a mark in the ring's control block
    /// instead, one cache line each way as a flag barrier.
    fn pair_barrier(
        &mut self,
        tag: u64,
        timeout: Option<Duration>,
    ) -> Result<Option<u64>, TransportError> {
        self.pair_barrier_checked(tag, timeout, || false)
    }
    /// [`pair_barrier`](Link::pair_barrier) that calls `failed` once this end's part
    /// is published and before it waits for the peer's, and returns
    /// [`TransportError::Aborted`] if it says so: a caller's own failure check, off the
    /// peer's critical path (the peer waits for this end's mark, not for the check).
    fn pair_barrier_checked(
        &mut self,
        tag: u64,
        timeout: Option<Duration>,
        failed: impl FnOnce() -> bool,
    ) -> Result<Option<u64>, TransportError> {
        self.send_empty(tag, timeout)?;
        if failed() {
            return Err(TransportError::Aborted);
        }
        let (got, _) = self.recv(&mut [], timeout)?;
        Ok((got != tag).then_some(got))
    }
    /// True if a message is waiting (a receive would not block).
    fn is_ready(&self) -> bool;
    /// True once the peer closed its end.
    fn is_disconnected(&self) -> bool;
    /// True if this link can lend buffers to its peer and borrow the peer's
    /// ([`Link::lend_all`], [`Link::borrow`]): single-copy transfers of large
    /// messages. Must be the same at both ends of a link. Default: false.
    fn can_lend(&self) -> bool {
        false
    }
    /// Lends `data` to the peers of all `links` at once and returns when every one of
    /// them gave it back (see [`crate::lend_all`]); errors name the link's index.
    /// Default: [`TransportError::NoLoan`] (the transport cannot lend).
    fn lend_all(
        links: &mut [&mut Self],
        tag: u64,
        data: &[u8],
        timeout: Option<Duration>,
    ) -> Result<(), (usize, TransportError)>
    where
        Self: Sized,
    {
        let _ = (links, tag, data, timeout);
        Err((0, cannot_lend()))
    }
    /// Borrows what the peer lends: calls `f(tag, bytes)` with the lent bytes (see
    /// [`Consumer::borrow`](crate::Consumer::borrow)). Default:
    /// [`TransportError::NoLoan`].
    fn borrow<R>(
        &mut self,
        timeout: Option<Duration>,
        f: impl FnOnce(u64, &[u8]) -> R,
    ) -> Result<R, TransportError>
    where
        Self: Sized,
    {
        let _ = (timeout, f);
        Err(cannot_lend())
    }
    /// Lends `data` to the peer and, while it is out, borrows what the peer lends
    /// (`f(tag, bytes)`), then waits for this end's loan to come back: both ends call
    /// it to exchange loans at once, each reading the other's buffer in parallel (see
    /// [`crate::lend_while`]). Default: [`TransportError::NoLoan`].
    fn exchange_loans<R>(
        &mut self,
        tag: u64,
        data: &[u8],
        timeout: Option<Duration>,
        f: impl FnOnce(u64, &[u8]) -> R,
    ) -> Result<R, TransportError>
    where
        Self: Sized,
    {
        let _ = (tag, data, timeout, f);
        Err(cannot_lend())
    }
    /// As [`exchange_loans`](Link::exchange_loans), both loans writable: lends `data`
    /// for writing and, while it is out, borrows the peer's writable loan
    /// (`f(tag, bytes)` may write it; see
    /// [`Consumer::borrow_mut`](crate::Consumer::borrow_mut)). Two members fill each
    /// other's buffers at once this way. Default: [`TransportError::NoLoan`].
    fn exchange_loans_mut<R>(
        &mut self,
        tag: u64,
        data: &mut [u8],
        timeout: Option<Duration>,
        f: impl FnOnce(u64, &mut [u8]) -> R,
    ) -> Result<R, TransportError>
    where
        Self: Sized,
    {
        let _ = (tag, data, timeout, f);
        Err(cannot_lend())
    }
}

/// The error of the lending methods' defaults: a transport that cannot lend.
fn cannot_lend() -> TransportError {
    TransportError::NoLoan("a transport that cannot lend".into())
}

impl Link for QueuePairEnd {
    #[inline]
    fn max_message_len(&self) -> usize {
        self.tx.max_message_len().min(self.rx.max_message_len())
    }
    #[inline]
    fn try_send(&mut self, tag: u64, msg: &[u8]) -> Result<(), TransportError> {
        self.tx.try_send_tagged(tag, msg)
    }
    #[inline]
    fn send(
        &mut self,
        tag: u64,
        msg: &[u8],
        timeout: Option<Duration>,
    ) -> Result<(), TransportError> {
        self.tx.send_tagged(tag, msg, timeout)
    }
    #[inline(always)]
    fn send_word(
        &mut self,
        tag: u64,
        w: u64,
        timeout: Option<Duration>,
    ) -> Result<(), TransportError> {
        self.tx.send_word_tagged(tag, w, timeout)
    }
    #[inline(always)]
    fn send_empty(&mut self, tag: u64, timeout: Option<Duration>) -> Result<(), TransportError> {
        self.tx.send_empty_tagged(tag, timeout)
    }
    #[inline]
    fn try_recv(&mut self, buf: &mut [u8]) -> Result<(u64, usize), TransportError> {
        self.rx.try_recv_tagged(buf)
    }
    #[inline]
    fn recv(
        &mut self,
        buf: &mut [u8],
        timeout: Option<Duration>,
    ) -> Result<(u64, usize), TransportError> {
        self.rx.recv_tagged(buf, timeout)
    }
    #[inline(always)]
    fn recv_word(&mut self, timeout: Option<Duration>) -> Result<(u64, u64), TransportError> {
        self.rx.recv_word_tagged(timeout)
    }
    #[inline]
    fn pair_barrier_checked(
        &mut self,
        tag: u64,
        timeout: Option<Duration>,
        failed: impl FnOnce() -> bool,
    ) -> Result<Option<u64>, TransportError> {
        self.tx.set_mark(tag);
        if failed() {
            return Err(TransportError::Aborted);
        }
        self.rx.wait_mark(tag, timeout)
    }
    #[inline]
    fn is_ready(&self) -> bool {
        !self.rx.is_empty()
    }
    #[inline]
    fn is_disconnected(&self) -> bool {
        self.tx.is_disconnected() || self.rx.is_disconnected()
    }
    fn can_lend(&self) -> bool {
        self.tx.can_lend() && self.rx.can_lend()
    }
    fn lend_all(
        links: &mut [&mut Self],
        tag: u64,
        data: &[u8],
        timeout: Option<Duration>,
    ) -> Result<(), (usize, TransportError)> {
        let mut tx: Vec<&mut crate::Producer> = links.iter_mut().map(|l| &mut l.tx).collect();
        crate::lend_all(&mut tx, tag, data, timeout)
    }
    fn borrow<R>(
        &mut self,
        timeout: Option<Duration>,
        f: impl FnOnce(u64, &[u8]) -> R,
    ) -> Result<R, TransportError> {
        self.rx.borrow(timeout, f)
    }
    fn exchange_loans<R>(
        &mut self,
        tag: u64,
        data: &[u8],
        timeout: Option<Duration>,
        f: impl FnOnce(u64, &[u8]) -> R,
    ) -> Result<R, TransportError> {
        let rx = &mut self.rx;
        let lent = crate::loan::Lent::Shared(data);
        crate::loan::exchange(&mut self.tx, tag, lent, timeout, || rx.borrow(timeout, f))
    }
    fn exchange_loans_mut<R>(
        &mut self,
        tag: u64,
        data: &mut [u8],
        timeout: Option<Duration>,
        f: impl FnOnce(u64, &mut [u8]) -> R,
    ) -> Result<R, TransportError> {
        let rx = &mut self.rx;
        let lent = crate::loan::Lent::Exclusive(data);
        crate::loan::exchange(&mut self.tx, tag, lent, timeout, || {
            rx.borrow_mut(timeout, f)
        })
    }
}
