//! Robust statistics over repeated measurements: median, MAD-based outlier rejection,
//! percentiles. They live in [`smelt_ids::stats`] (the lowest crate, below this one,
//! the runtime and the benchmarks, so the probe, the peers, the runtime's `measure`
//! and `smelt-bench` share one [`Summary`] and one median); re-exported here.

pub use smelt_ids::stats::{
    halve, mad, median, median_sorted, percentile_sorted, summarize, summarize_k, Summary,
};
