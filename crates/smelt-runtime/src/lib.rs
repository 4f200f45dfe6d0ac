//! The Smelt runtime's collective layer (paper §4.2): a [`Group`] built from one or
//! more [`smelt_plan::Tree`]s (the type `smelt_tree::Tree` re-exports), one
//! queuepair per tree edge, members run as (pinned)
//! threads, and collectives over the tree — [`broadcast`](Context::broadcast) (atomic:
//! the root sequences), [`reduce`](Context::reduce), [`allreduce`](Context::allreduce),
//! [`barrier`](Context::barrier) (zero-payload reduce then broadcast), gather and
//! scatter of words — with zero-copy paths for words and empty messages.
//!
//! ```
//! use smelt_runtime::{CpuId, Group, Pos};
//! use smelt_plan::Tree;
//! // CPU 0 is the root with children 1 and 2 (any CPU ids work: members that have no
//! // CPU here run unpinned).
//! let tree = Tree::new(
//!     CpuId::list([0, 1, 2]),
//!     Pos(0),
//!     vec![vec![Pos(1), Pos(2)], vec![], vec![]],
//! )
//! .unwrap();
//! let sums = Group::new(&tree).unwrap().run(|m| {
//!     m.barrier()?;
//!     m.allreduce(m.rank().index() as u64 + 1, |a, b| a + b)
//! }).unwrap();
//! assert!(sums.iter().all(|s| *s == Ok(6)));
//! ```
//!
//! Failures never hang the group: a member that panics or leaves early makes every
//! other member's collectives return [`GroupError::PeerFailed`], and [`Group::run`]
//! names the member. Every wait is also bounded by `GroupConfig::link.timeout`.
//!
//! [`measure`] holds the measurement helpers behind `smelt bench`.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod combine;
mod context;
mod error;
mod group;
mod large;
pub mod measure;
mod nontree;
pub mod polled;
pub mod process;
mod word;
pub mod world;

pub use combine::{Elem, ReduceOp};
pub use context::Context;
pub use error::{panic_message, GroupError};
pub use group::{
    tree_edges, Group, GroupConfig, LinkEnd, Member, Pinning, Placement, LEND_FROM, LOAN_CHUNK,
    MAX_MESSAGE_BYTES, OVERSUBSCRIBED_LEND_FROM, PAIR_COPY_FROM, SMALL_MESSAGE_BYTES,
};
pub use smelt_ids::{CpuId, Pos, Rank};
pub use smelt_plan::SyncMode;
// The mesh layer (links, shared-memory jobs, the launcher) lives in smelt-mesh; its
// modules are the runtime's too, so `smelt_runtime::mesh::Mesh` keeps working.
pub use smelt_mesh::{launch, mesh, LinkConfig, World, WorldError};
pub use smelt_transport::WaitPolicy;
pub use word::Word;
