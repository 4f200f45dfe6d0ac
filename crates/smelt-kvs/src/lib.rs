//! A replicated key-value store over smelt's trees (issue 12; paper §5.6–5.7).
//!
//! Replicas and clients are threads linked by a [`smelt_mesh::mesh`]. Sets are
//! ordered by an agreement protocol whose broadcast runs down a smelt tree rooted at
//! the acceptor ([`Protocol::OnePaxos`], [`Protocol::TwoPc`]) or by a plain atomic
//! broadcast ([`Protocol::Broadcast`]); every replica applies them in the same order.
//! Gets are answered by the client's home replica from its own copy.
//!
//! See `docs/kvs.md` for the protocols, the failure model and what is not done yet.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod bench;
mod client;
mod config;
pub mod history;
pub mod process;
mod replica;
pub mod replicate;
mod store;
mod wire;

pub use client::Client;
pub use config::{KvsError, ParentsChildren, Protocol, StoreConfig, TreeSpec, Veto};
pub use process::{Deployment, Launcher};
pub use replica::{Applied, ReplicaReport};
pub use smelt_mesh::LinkConfig;
pub use store::{Store, StoreReport};
pub use wire::Entry;
