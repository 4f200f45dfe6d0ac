//! Bidirectional queuepairs: two channels, one each way.

use crate::channel::{try_channel, Consumer, Producer};
use crate::{Abort, TransportError, WaitPolicy};
use std::time::Duration;

/// One end of a queuepair: sends on one channel, receives on the other.
#[derive(Debug)]
pub struct QueuePairEnd {
    /// Sends to the other end.
    pub tx: Producer,
    /// Receives from the other end.
    pub rx: Consumer,
}

/// A queuepair of two channels of `capacity_slots` slots each.
///
/// # Panics
/// If `capacity_slots` is 0 or above [`MAX_CAPACITY`](crate::MAX_CAPACITY).
pub fn queuepair(capacity_slots: usize) -> (QueuePairEnd, QueuePairEnd) {
    try_queuepair(capacity_slots, None).unwrap_or_else(|e| panic!("{e}"))
}

/// Checked queuepair constructor; both channels are guarded by `abort` if given.
pub fn try_queuepair(
    capacity_slots: usize,
    abort: Option<Abort>,
) -> Result<(QueuePairEnd, QueuePairEnd), TransportError> {
    let (atx, brx) = try_channel(capacity_slots, abort.clone())?;
    let (btx, arx) = try_channel(capacity_slots, abort)?;
    Ok((
        QueuePairEnd { tx: atx, rx: arx },
        QueuePairEnd { tx: btx, rx: brx },
    ))
}

impl QueuePairEnd {
    /// Splits into the sending and receiving halves (to move them to different threads).
    pub fn split(self) -> (Producer, Consumer) {
        (self.tx, self.rx)
    }

    /// Sets how both halves wait.
    pub fn set_wait_policy(&mut self, p: WaitPolicy) {
        self.tx.set_wait_policy(p);
        self.rx.set_wait_policy(p);
    }

    /// See [`Producer::send`].
    #[inline]
    pub fn send(&mut self, msg: &[u8]) -> Result<(), TransportError> {
        self.tx.send(msg)
    }

    /// See [`Producer::try_send`].
    #[inline]
    pub fn try_send(&mut self, msg: &[u8]) -> Result<(), TransportError> {
        self.tx.try_send(msg)
    }

    /// See [`Producer::send_timeout`].
    pub fn send_timeout(&mut self, msg: &[u8], t: Duration) -> Result<(), TransportError> {
        self.tx.send_timeout(msg, t)
    }

    /// See [`Producer::send_word`].
    #[inline]
    pub fn send_word(&mut self, w: u64) -> Result<(), TransportError> {
        self.tx.send_word(w)
    }

    /// See [`Consumer::recv`].
    #[inline]
    pub fn recv(&mut self, buf: &mut [u8]) -> Result<usize, TransportError> {
        self.rx.recv(buf)
    }

    /// See [`Consumer::try_recv`].
    #[inline]
    pub fn try_recv(&mut self, buf: &mut [u8]) -> Result<usize, TransportError> {
        self.rx.try_recv(buf)
    }

    /// See [`Consumer::recv_timeout`].
    pub fn recv_timeout(&mut self, buf: &mut [u8], t: Duration) -> Result<usize, TransportError> {
        self.rx.recv_timeout(buf, t)
    }

    /// See [`Consumer::recv_word`].
    #[inline]
    pub fn recv_word(&mut self) -> Result<u64, TransportError> {
        self.rx.recv_word()
    }

    /// See [`Consumer::recv_vec`].
    pub fn recv_vec(&mut self) -> Result<Vec<u8>, TransportError> {
        self.rx.recv_vec()
    }
}
