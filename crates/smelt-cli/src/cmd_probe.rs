//! `smelt probe` (being written).

#[derive(clap::Args)]
pub struct ProbeArgs {}

pub fn run(_args: ProbeArgs) -> anyhow::Result<()> {
    anyhow::bail!("'smelt probe' is not implemented yet")
}
