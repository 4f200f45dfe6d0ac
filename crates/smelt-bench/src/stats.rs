//! Statistics of measurements: the one [`Summary`] (with [`summarize`]), the one
//! [`median`], and the one seeded RNG ([`rng::SplitMix64`]). They are defined in
//! `smelt_ids` (`smelt_ids::stats`, `smelt_ids::rng`), the lowest crate of the
//! workspace, because the probe, the runtime's `measure` and the services' tests need
//! them too and cannot depend on this crate; this module is where benchmarks take them.

pub use smelt_ids::rng;
pub use smelt_ids::stats::*;
