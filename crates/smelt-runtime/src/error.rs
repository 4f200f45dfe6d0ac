//! The runtime's error type.

use smelt_ids::{CpuId, Rank};
use std::time::Duration;

/// Why a group could not be built or a collective did not complete.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GroupError {
    /// The tree(s) given do not describe one group.
    #[error("invalid group: {0}")]
    Invalid(String),
    /// Another member failed (panicked, timed out, or left the group while others still
    /// expected messages from it); every member's collectives then fail with this.
    #[error("member {rank} (CPU {cpu}) failed: {what}")]
    PeerFailed {
        /// Rank of the member that failed first.
        rank: Rank,
        /// Its OS CPU id.
        cpu: CpuId,
        /// What happened.
        what: String,
    },
    /// A member's closure panicked (from [`Group::run`](crate::Group::run)).
    #[error("member {rank} (CPU {cpu}) panicked: {message}")]
    MemberPanicked {
        /// Rank of the member.
        rank: Rank,
        /// Its OS CPU id.
        cpu: CpuId,
        /// The panic message.
        message: String,
    },
    /// A collective waited longer than the group's operation timeout.
    #[error(
        "member {rank} (CPU {cpu}) timed out after {after:?} in {op} waiting for member {peer}"
    )]
    Timeout {
        /// The member that gave up.
        rank: Rank,
        /// Its OS CPU id.
        cpu: CpuId,
        /// The member it was waiting for.
        peer: Rank,
        /// The collective.
        op: &'static str,
        /// The timeout.
        after: Duration,
    },
    /// Members called different collectives, or gave inputs that do not fit together
    /// (e.g. slices of different lengths to `reduce_slice`).
    #[error("member {rank}: {what}")]
    Mismatch {
        /// The member that noticed.
        rank: Rank,
        /// What did not match.
        what: String,
    },
    /// A context index that the member does not hold (or that was taken out).
    #[error("no context {0} on this member")]
    NoContext(usize),
    /// A job of processes could not be created or joined (shared memory, the
    /// environment, the job description).
    #[error("job: {0}")]
    Job(String),
    /// The world could not make the group's links (see [`smelt_mesh::WorldError`]).
    /// Boxed: every collective returns a `Result` with this error, and a large or
    /// deep variant makes its drop code too big to inline, a call on every collective's
    /// success (measured: 4-5 ns of a 9 ns broadcast between processes).
    #[error(transparent)]
    World(Box<smelt_mesh::WorldError>),
    /// Building the channels failed.
    #[error("transport: {0}")]
    Transport(#[from] smelt_transport::TransportError),
}

pub use smelt_mesh::panic_message;

impl From<smelt_mesh::WorldError> for GroupError {
    fn from(e: smelt_mesh::WorldError) -> GroupError {
        GroupError::World(Box::new(e))
    }
}

// Every collective returns `Result<_, GroupError>`: keep the error small (a large
// variant goes in a box), so that the result fits in a few registers' worth of stack.
const _: () = assert!(std::mem::size_of::<GroupError>() <= 56);
