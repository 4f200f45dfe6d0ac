//! `smelt bench` (being written).

#[derive(clap::Args)]
pub struct BenchArgs {}

pub fn run(_args: BenchArgs) -> anyhow::Result<()> {
    anyhow::bail!("'smelt bench' is not implemented yet")
}
