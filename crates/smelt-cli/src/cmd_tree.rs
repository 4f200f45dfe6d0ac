//! `smelt tree` and `smelt evaluate` (being written).

#[derive(clap::Args)]
pub struct TreeArgs {}

#[derive(clap::Args)]
pub struct EvaluateArgs {}

pub fn tree(_a: TreeArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}

pub fn evaluate(_a: EvaluateArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
