//! Errors of global arrays.

use crate::ElemType;
use std::time::Duration;

/// What went wrong with a global array.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GlobalError {
    /// A range of indices that does not lie inside the array.
    #[error("indices {index}..{index}+{count} are out of range: the array has {len} elements (0..{len})")]
    OutOfRange {
        /// First index asked for.
        index: u64,
        /// Number of elements asked for.
        count: usize,
        /// Elements of the array.
        len: u64,
    },
    /// The array holds elements of another type than the caller's.
    #[error("the array holds {array} elements, not {requested}")]
    WrongType {
        /// The array's element type.
        array: ElemType,
        /// The type the caller used.
        requested: ElemType,
    },
    /// A wait for the other members ended at its limit.
    #[error("{what}: the other members did not arrive within {after:?}")]
    Timeout {
        /// What was waited for.
        what: String,
        /// The limit.
        after: Duration,
    },
    /// A member process died (the array's barrier can never complete).
    #[error("member {member} of the array's job died")]
    PeerGone {
        /// The dead member.
        member: usize,
    },
    /// The job's abort flag was raised.
    #[error("the array's job was aborted")]
    Aborted,
    /// Shared memory could not be created or attached.
    #[error("shared memory: {0}")]
    Shm(String),
    /// An MPI call failed.
    #[error("MPI: {0}")]
    Mpi(String),
    /// The world could not make the array's region (a member made something else,
    /// or the job's arena is full).
    #[error(transparent)]
    World(#[from] smelt_mesh::WorldError),
    /// A bad argument or configuration.
    #[error("{0}")]
    Invalid(String),
}

#[cfg(feature = "mpi")]
impl From<smelt_am::AmError> for GlobalError {
    fn from(e: smelt_am::AmError) -> GlobalError {
        match e {
            smelt_am::AmError::Timeout { what, after } => GlobalError::Timeout { what, after },
            smelt_am::AmError::Invalid(m) => GlobalError::Mpi(m),
            other => GlobalError::Mpi(other.to_string()),
        }
    }
}
