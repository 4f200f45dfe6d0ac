//! `smelt bench --aggregation` (being written).

use super::BenchArgs;
use anyhow::{bail, Result};

/// Runs the benchmark.
pub fn run(_a: &BenchArgs) -> Result<()> {
    bail!("not built yet")
}
