//! `smelt run`: the main job. Probes this machine, shows its model, builds its trees,
//! predicts their latency, then measures the collectives against the peers and prints
//! the comparison. Each step is one of smelt's own subcommands, run as a user would
//! run it, so what `smelt run` prints is reproducible step by step.

use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::Command;

#[derive(clap::Args)]
pub struct RunArgs {
    /// Directory for the model, trees and bench results.
    #[arg(long, default_value = "smelt-out")]
    pub out: PathBuf,
    /// CPUs to use (e.g. `0-7,12`); default: every CPU this process may use.
    #[arg(long)]
    pub cpus: Option<String>,
    /// Use this model instead of probing the machine.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Longer probe and benchmark (default: the quick passes).
    #[arg(long)]
    pub full: bool,
    /// Skip the peer programs (pthread, OpenMP, MPI).
    #[arg(long)]
    pub no_peers: bool,
}

/// One step: `smelt <args>`, its output passed through; fails with the step named.
fn step(title: &str, args: &[String]) -> Result<()> {
    let exe = std::env::current_exe().context("cannot find the smelt executable")?;
    crate::common::print_text(&format!("\n=== {title}\n$ smelt {}\n", args.join(" ")));
    let status = Command::new(&exe)
        .args(args)
        .status()
        .with_context(|| format!("cannot run smelt {}", args.join(" ")))?;
    if !status.success() {
        bail!("step '{title}' failed ({status})");
    }
    Ok(())
}

pub fn run(a: RunArgs) -> Result<()> {
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("cannot create {}", a.out.display()))?;
    let s = |p: &str| a.out.join(p).display().to_string();
    let cpus: Vec<String> = a
        .cpus
        .iter()
        .flat_map(|c| ["--cpus".to_string(), c.clone()])
        .collect();
    let model = match &a.model {
        Some(m) => m.display().to_string(),
        None => {
            // --cache: this host's model from now on, for every command and library
            // entry point given none (smelt_model::default_model), the MPI interposer
            // included.
            let mut args = vec![
                "probe".into(),
                "-o".into(),
                s("model.json"),
                "--cache".into(),
            ];
            if !a.full {
                args.push("--quick".into());
            }
            args.extend(cpus.iter().cloned());
            step(
                "1. probe this machine (pairwise send/receive/round-trip costs; kept as this host's model)",
                &args,
            )?;
            // Measure what `auto` (the default tree and algorithms) picks here, so the
            // bench's headline rows and every program after run the measured winner.
            let mut tune = vec![
                "tune".into(),
                "--model".into(),
                s("model.json"),
                "--time-limit".into(),
                if a.full { "300" } else { "60" }.into(),
            ];
            if !a.full {
                tune.push("--quick".into());
            }
            step(
                "1b. tune auto on this machine (the best algorithm per operation and size; ~/.cache/smelt/tune-<host>.json)",
                &tune,
            )?;
            s("model.json")
        }
    };
    step(
        "2. the machine model",
        &["model".into(), "show".into(), model.clone()],
    )?;
    let mut tree = vec![
        "tree".into(),
        "--model".into(),
        model.clone(),
        "--algo".into(),
        "auto".into(),
    ];
    tree.extend(cpus.iter().cloned());
    step(
        "3. the tree smelt picks for this machine (auto: tuning file, else prediction)",
        &tree,
    )?;
    let mut eval = vec!["evaluate".into(), "--model".into(), model.clone()];
    eval.extend(cpus.iter().cloned());
    step("4. predicted latency of every topology (simulator)", &eval)?;
    let mut bench = vec![
        "bench".into(),
        "--model".into(),
        model.clone(),
        "--json-out".into(),
        s("bench.json"),
    ];
    if !a.full {
        bench.push("--quick".into());
    }
    if a.no_peers {
        bench.push("--no-peers".into());
    }
    bench.extend(cpus.iter().cloned());
    step(
        "5. measured collectives vs the peers, in one run (ratios)",
        &bench,
    )?;
    crate::common::print_text(&format!(
        "\nmodel: {model}\nbench results: {}\nnext: smelt model heatmap {model} -o costs.png; smelt tree --model {model} --format svg > tree.svg\n",
        s("bench.json")
    ));
    Ok(())
}
