//! Active messages' workloads (moved here from `smelt-am`, which keeps only its API):
//!
//! * [`logp`]: the LogP parameters of a pair of endpoints (RTT, o_s, o_r, g, L, G),
//!   measured as Culler et al. do; `smelt bench am` and `smelt-bench-mpi am logp`.
//! * [`histogram`]: the distributed histogram (Bale's, with active messages): every
//!   endpoint increments random bins owned by the others; checked by block sums.

pub mod histogram;
pub mod logp;
