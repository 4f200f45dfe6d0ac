//! The tree type shared by every generator, the simulator and the runtime: it lives
//! in `smelt_plan::tree` (the runtime and the store use it without this crate) and is
//! re-exported here (`smelt_tree::Tree` is `smelt_plan::Tree`).

pub use smelt_plan::tree::*;
