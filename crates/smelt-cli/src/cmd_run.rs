//! `smelt run` (being written).

#[derive(clap::Args)]
pub struct RunArgs {}

pub fn run(_args: RunArgs) -> anyhow::Result<()> {
    anyhow::bail!("'smelt run' is not implemented yet")
}
