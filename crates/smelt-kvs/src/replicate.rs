//! The pieces of the store that another replication protocol reuses, so that a store
//! replicated some other way (the raft-rs baseline in `smelt-bench`) serves the same
//! requests, applies them the same way and reports like [`Store`](crate::Store): the
//! replicas' [`StateMachine`] (each request applied once, a digest and optionally the
//! log of what was applied, [`ReplicaReport`]), a client's [`Limits`] (key and value
//! lengths, attempts and their timeout) and the error of a client whose replica is
//! [`gone`], and replica threads started and reported as the store's are
//! ([`spawn_replica`], [`replica_thread_failed`]). [`Entry`] is one set, as ordered.

pub use crate::client::{gone, Limits};
pub use crate::replica::{replica_thread_failed, spawn_replica, ReplicaReport, StateMachine};
pub use crate::wire::Entry;
