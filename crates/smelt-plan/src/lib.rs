//! What a group of smelt members runs, as plain data, below the tree crate and with
//! no machine model:
//!
//! - [`Tree`]: a rooted spanning tree over a group's CPUs with each member's children
//!   in send order, and its file form ([`tree::TreeJson`]);
//! - [`Op`]: the one vocabulary of collective operations;
//! - [`NonTree`]: the collective algorithms that are not trees, and the synchronization
//!   [`SyncMode`]s a tuning distinguishes;
//! - [`AlgorithmTable`]: what a group looks each barrier and allreduce up in (a tree or
//!   a non-tree algorithm, and the fragment size of long messages), filled by the tree
//!   crate's tuning, read by the runtime at every call; `SMELT_TUNE`'s grammar;
//! - [`Shape`]: the trait of tree builders, through which a service (the store) is
//!   handed the tree crate's generators and rebuilds its tree when members leave;
//! - [`input`]: the one bounded reader of input files.
//!
//! Why a crate of its own, and why not in the mesh crate: the runtime (collectives
//! over a mesh) and the services need these types, but not the generators, the
//! simulator or the machine model that `smelt-tree` and `smelt-model` bring (and with
//! them file writing, plotting and hwloc); the mesh layer knows links and jobs, not
//! what runs on them. `smelt-tree` re-exports everything here under its old paths
//! (`smelt_tree::Tree`, `smelt_tree::Op`, `smelt_tree::NonTree`,
//! `smelt_tree::tuning::SyncMode`), so either path names the same type.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod algorithm;
pub mod input;
pub mod op;
pub mod shape;
pub mod table;
pub mod tree;

pub use algorithm::{NonTree, SyncMode};
pub use op::Op;
pub use shape::{Ranked, Shape};
pub use smelt_ids::{CpuId, Pos, Rank};
pub use table::{AlgorithmTable, Pick, TableError};
pub use tree::{Tree, TreeError};
