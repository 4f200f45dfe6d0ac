//! The one vocabulary of collective operations: the simulator predicts them, the
//! runtime measures them, `smelt bench`, `smelt evaluate`, tuning files, the C API and
//! the CLI name them, all with the names and the parser of `smelt_plan::op`
//! (re-exported here: `smelt_tree::Op` is `smelt_plan::Op`).

pub use smelt_plan::op::*;
