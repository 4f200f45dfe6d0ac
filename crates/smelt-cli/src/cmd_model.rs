//! `smelt import` and `smelt model show|heatmap` (being written).

#[derive(clap::Args)]
pub struct ImportArgs {}

#[derive(clap::Subcommand)]
pub enum ModelCmd {
    /// Summary of a model (being written).
    Show,
}

pub fn import(_a: ImportArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}

pub fn run(_c: ModelCmd) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
