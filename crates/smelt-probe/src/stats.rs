//! Robust statistics over repeated measurements: median, MAD-based outlier rejection,
//! percentiles. They live in [`smelt_tree::stats`] (below both this crate and the
//! runtime, so the probe, the peers and the runtime's `measure` share one
//! [`Summary`]); re-exported here.

pub use smelt_tree::stats::{
    halve, mad, median_sorted, percentile_sorted, summarize, summarize_k, Summary,
};
