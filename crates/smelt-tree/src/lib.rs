//! Broadcast trees: the shared [`Tree`] type that every generator produces, the
//! simulator consumes and the runtime instantiates.
//!
//! Members are identified by OS CPU id ([`CpuId`]) in files and on the command line;
//! inside a [`Tree`] they are *positions* ([`Pos`], indices into [`Tree::members`]).
//!
//! - [`Topology`]: every generator (static trees, Smelt's adaptive trees, the
//!   `optimized` local search) behind one interface.
//! - [`sim`]: the event-based simulator predicting broadcast, AB, reduce, barrier and
//!   two-phase commit times.
//! - [`optimum`]: exhaustive branch-and-bound search for the optimal broadcast tree
//!   of small groups.
//! - [`shape`]: the generators as `smelt_plan::Shape`s, for services that rebuild
//!   their tree when members leave (the store).
//! - [`tuning`]: tuning files (`smelt tune`), `SMELT_TUNE` and the tree `auto`.
//! - [`stats`]: Spearman rank correlation, for comparing predictions with
//!   measurements, and [`stats::Summary`], the robust statistics (median, MAD-based
//!   outlier rejection, percentiles) every measurement of smelt reports.

#![forbid(unsafe_code)]

pub mod costs;
mod error;
pub mod evaluate;
pub mod op;
pub mod optimize;
pub mod optimum;
#[cfg(feature = "plot")]
pub mod plot;
pub mod shape;
pub mod sim;
pub mod stats;
pub mod topology;
pub mod tree;
pub mod tuning;

pub use costs::Costs;
pub use error::Error;
pub use op::Op;
pub use shape::ModelShape;
pub use sim::{predict, Payload, Prediction};
pub use smelt_ids::{CpuId, Pos};
pub use smelt_plan::Shape;
pub use topology::{Algorithm, NonTree, Topology};
pub use tree::{Tree, TreeError};
