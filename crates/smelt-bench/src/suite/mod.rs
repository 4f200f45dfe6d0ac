//! The benchmarks `smelt bench` runs, one module per subcommand
//! (`smelt bench collectives|processes|mpi|large|sync|am|aggregation|offload|tasks`).
//! Each takes its options as a plain struct and returns a typed, serializable report
//! ([`BenchReport`]): its terminal table and the figures that failed. The `smelt` CLI
//! parses the arguments, calls the measurement, and prints (or writes) the report.

use serde::Serialize;

pub mod aggregation;
pub mod am;
pub mod collectives;
pub mod global;
pub mod large;
pub mod mpi;
pub mod offload;
pub mod processes;
pub mod report;
pub mod smelt;
pub mod sync;
pub mod tasks;

/// smelt's tree where a fixed one is needed (the flattened row of the topology table,
/// the non-tree rows' completion messages, the sync and large benchmarks). The
/// comparison with the peers measures the default instead, `auto` (what a program gets
/// with no options), never the best measured topology: picking the minimum of many
/// noisy figures would flatter it.
pub const SMELT_TREE: smelt_tree::Topology = smelt_tree::Topology::AdaptiveShuffled;

/// What every report of the suite gives besides its JSON (`serde::Serialize`).
pub trait BenchReport: Serialize {
    /// The report as the terminal table.
    fn table(&self) -> String;
    /// Every figure that failed, named with its reason (none: the run is complete).
    fn failed(&self) -> Vec<String>;
}

/// The options every benchmark of the suite takes.
#[derive(Clone, Debug, Default)]
pub struct Common {
    /// Shorter runs (fewer sizes, rounds and repeats).
    pub quick: bool,
    /// Give up on one figure (or peer) after this many seconds (default: the
    /// benchmark's own).
    pub timeout: Option<f64>,
    /// Bound on the whole run, seconds, where the benchmark honours one.
    pub time_limit: Option<f64>,
}

/// A speed target of an issue, checked in this run (the offload and tasks reports).
#[derive(Serialize, Clone, Debug)]
pub struct Target {
    /// What is measured.
    pub name: &'static str,
    /// The figure measured, if any.
    pub value: Option<f64>,
    /// The target's bound.
    pub limit: f64,
    /// "≤" or "≥".
    pub sense: &'static str,
    /// Whether the figure meets the bound (unknown without a figure).
    pub met: Option<bool>,
}

/// The target `value ≤ limit` (`at_most`) or `value ≥ limit`; unmet is unknown
/// without a value.
pub fn target(name: &'static str, value: Option<f64>, limit: f64, at_most: bool) -> Target {
    Target {
        name,
        value,
        limit,
        sense: if at_most { "≤" } else { "≥" },
        met: value.map(|v| if at_most { v <= limit } else { v >= limit }),
    }
}

/// One `warning: ...` line on stderr, escaped (what the CLI prints for a warning).
pub fn warn(msg: &str) {
    eprintln!("warning: {}", smelt_model::text::escape_line(msg));
}

/// `sizes` (else `default`) for measurements of vectors of doubles: each a multiple
/// of 8 bytes.
pub fn double_sizes(sizes: &[usize], default: Vec<usize>) -> anyhow::Result<Vec<usize>> {
    let sizes = if sizes.is_empty() {
        default
    } else {
        sizes.to_vec()
    };
    if let Some(bad) = sizes.iter().find(|&&s| s % 8 != 0) {
        anyhow::bail!(
            "option --sizes: {bad} bytes is not a whole number of doubles (a multiple of 8)"
        );
    }
    Ok(sizes)
}

/// The model a benchmark of trees measures over, and what the report calls its
/// source: the default model ([`smelt_model::default_model()`]: `path` (`--model`),
/// else `SMELT_MODEL`, else this host's cached probe), and where a program would get
/// the uniform model, a quick probe instead (a benchmark of machine-aware trees over a
/// uniform model would measure nothing). Restricted to `cpus` (`--cpus`) where given;
/// every CPU must be one this process may use. `verbose`: say on stderr where the
/// model came from.
pub fn bench_model(
    path: Option<&std::path::Path>,
    cpus: Option<&[u32]>,
    verbose: bool,
) -> anyhow::Result<(smelt_model::Model, String)> {
    use anyhow::Context as _;
    let (model, src) = default_or_probed(path, cpus, verbose)?;
    let model = match cpus {
        Some(c) => model.restrict(c).context("option --cpus")?,
        None => model,
    };
    let allowed = smelt_probe::affinity::allowed_cpus();
    if let Some(bad) = model.cpus.iter().find(|c| !allowed.contains(c)) {
        anyhow::bail!(
            "the model's CPU {bad} is not available to this process (it may use CPUs {}); pick CPUs with --cpus",
            smelt_model::format_cpu_list(&allowed)
        );
    }
    Ok((model, src))
}

/// [`bench_model`] before the restriction to the CPUs.
fn default_or_probed(
    path: Option<&std::path::Path>,
    requested: Option<&[u32]>,
    verbose: bool,
) -> anyhow::Result<(smelt_model::Model, String)> {
    let (m, src) =
        smelt_model::default_model::resolve(path, requested).map_err(|e| anyhow::anyhow!("{e}"))?;
    if !src.is_uniform() {
        if verbose {
            eprintln!("smelt bench: model: {src}");
        }
        return Ok((m, src.to_string()));
    }
    let why = match &src {
        smelt_model::ModelSource::Uniform(why) => why.clone(),
        _ => String::new(),
    };
    // The CPUs first: a bad --cpus is one error line, nothing else.
    let disc = smelt_model::topology::discover(requested)?;
    eprintln!(
        "notice: no model of this machine ({why}); probing it quickly (run 'smelt probe --cache' or 'smelt run' to keep one)"
    );
    let mut cfg = smelt_probe::probe::ProbeConfig::quick(disc.cpus.clone());
    cfg.hierarchy = disc.hierarchy.clone();
    let r = smelt_probe::probe::probe(&cfg).map_err(anyhow::Error::msg)?;
    let m = r
        .to_model(disc.to_model_skeleton())
        .map_err(anyhow::Error::msg)?;
    if verbose {
        eprintln!("smelt bench: model: probe --quick ({why})");
    }
    Ok((m, "probe --quick".into()))
}
