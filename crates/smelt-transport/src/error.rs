//! The transport's error type.

use std::time::Duration;

/// Why a send or receive did not complete.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// `try_send`: not enough free slots right now.
    #[error("the channel is full")]
    Full,
    /// `try_recv`: no message is waiting.
    #[error("the channel is empty")]
    Empty,
    /// The other end was dropped (and, for a receiver, every message it sent has
    /// already been received).
    #[error("the other end of the channel was dropped")]
    Disconnected,
    /// The process at the other end of a ring shared between processes died (was
    /// killed, crashed, or exited without leaving the job).
    #[error("the process of member {peer} at the other end died")]
    PeerDied {
        /// The member at the other end.
        peer: u32,
    },
    /// A ring end that does not exist or belongs to another member of a job.
    #[error("{0}")]
    NotYours(String),
    /// The channel's [`Abort`](crate::Abort) flag was raised.
    #[error("the channel was aborted")]
    Aborted,
    /// A blocking operation did not complete in time.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The message needs more slots than the ring has.
    #[error("message of {len} bytes exceeds the channel's maximum of {max} bytes")]
    MessageTooLarge {
        /// Length of the message.
        len: usize,
        /// Largest message this channel carries (capacity x payload per slot).
        max: usize,
    },
    /// The receive buffer is shorter than the waiting message (which stays queued).
    #[error("receive buffer of {got} bytes is too small for a {needed}-byte message")]
    BufferTooSmall {
        /// Length of the waiting message.
        needed: usize,
        /// Length of the buffer given.
        got: usize,
    },
    /// A channel needs between 1 and [`MAX_CAPACITY`](crate::MAX_CAPACITY) slots.
    #[error("invalid channel capacity {0} (must be 1..=16777216 slots)")]
    InvalidCapacity(usize),
    /// A borrow found no loan: the peer sent data, or nothing was lent (it stays
    /// queued), or the ring cannot lend (its ends are in different processes).
    #[error("expected a lent buffer, found {0}")]
    NoLoan(String),
    /// `recv_word` found a message that is not a word (0 or 8 bytes); it stays queued.
    #[error("expected a one-word message, found a {len}-byte message")]
    NotAWord {
        /// Length of the waiting message.
        len: usize,
    },
    /// A receive waited while the peer entered a two-party barrier
    /// ([`Link::pair_barrier`](crate::Link::pair_barrier)) this end is not in: it would
    /// send nothing until this end enters it too.
    #[error("the peer entered a barrier (its tag's low 32 bits {mark}) instead of sending")]
    PeerInBarrier {
        /// The low 32 bits of the barrier's tag.
        mark: u32,
    },
}
