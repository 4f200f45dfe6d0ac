//! Broadcast trees: the shared [`Tree`] type that every generator produces, the
//! simulator consumes and the runtime instantiates.
//!
//! Members are identified by OS CPU id in files and on the command line; inside a
//! [`Tree`] they are *member indices* (positions in [`Tree::members`]).

pub mod tree;

pub use tree::{Tree, TreeError};
