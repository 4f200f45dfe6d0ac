//! Statistics of measurements: [`Summary`], the median, outlier rejection and Spearman's
//! rank correlation. They live in `smelt_ids::stats` (the lowest crate, so that the
//! model, the probe, the runtime and the benchmarks share one of each); this module
//! re-exports them under their old path.

pub use smelt_ids::stats::*;
