//! What can go wrong.

use std::time::Duration;

/// Why a task computation did not complete.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TaskError {
    /// The pool or job could not be set up as asked.
    #[error("invalid task setup: {0}")]
    Invalid(String),
    /// A worker could not be pinned to its CPU.
    #[error("could not pin worker {worker} to CPU {cpu}: {reason}")]
    Pin {
        /// The worker.
        worker: usize,
        /// The CPU asked for.
        cpu: smelt_ids::CpuId,
        /// What the system said.
        reason: String,
    },
    /// A task panicked: the whole computation fails with its message.
    #[error("a task panicked: {0}")]
    Panicked(String),
    /// A function id that no one registered.
    #[error("no task function with id {0} is registered")]
    UnknownFunction(u32),
    /// A member of the job left (its process died or ended) while tasks were in flight.
    #[error("member {member} of the task job is gone")]
    PeerGone {
        /// The member's rank.
        member: usize,
    },
    /// A wait reached its bound.
    #[error("timed out after {after:?} {what}")]
    Timeout {
        /// What it waited for.
        what: String,
        /// The bound.
        after: Duration,
    },
    /// Another member of the job failed (its message says why).
    #[error("member {member} failed: {message}")]
    Remote {
        /// The member that failed first.
        member: usize,
        /// Its message.
        message: String,
    },
    /// A global array refused an operation (out of range, a dead owner, ...).
    #[error("global array: {0}")]
    Global(String),
    /// The active-message layer failed.
    #[error("active messages: {0}")]
    Am(String),
}

impl From<smelt_am::AmError> for TaskError {
    fn from(e: smelt_am::AmError) -> Self {
        match e {
            smelt_am::AmError::PeerGone { dest } => TaskError::PeerGone { member: dest },
            e => TaskError::Am(e.to_string()),
        }
    }
}

/// The message of a panic payload (`&str` or `String`, else a placeholder).
pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_string()
    }
}
