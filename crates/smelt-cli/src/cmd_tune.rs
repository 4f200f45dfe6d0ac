//! `smelt tune measure|check|predict|compare|export` (plain `smelt tune` is `smelt
//! tune measure`): the handlers of `smelt_bench::tune`, which measures every operation
//! × message size × group × synchronization mode on this machine and writes the host's
//! tuning file that `auto` uses (docs/tune.md); also the same file from the simulator
//! (`predict`), a fresh re-measurement of a file's choices (`check`), a comparison of
//! two files (`compare`) and an export to Open MPI's `tuned` dynamic rules (`export`).

use anyhow::{bail, Context as _, Result};
use smelt_bench::tune::{self, Space};
use smelt_model::Model;
use smelt_tree::tuning::{self, Source, TuningFile};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Arguments of `smelt tune`: a command, or `measure`'s own arguments (plain `smelt
/// tune` is `smelt tune measure`).
#[derive(clap::Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_value_name = "COMMAND",
    subcommand_help_heading = "Commands",
    after_help = "Without a command, `smelt tune [OPTIONS]` runs `smelt tune measure [OPTIONS]`.\n\n\
    Examples:\n  smelt tune --quick --time-limit 120      (measure; writes ~/.cache/smelt/tune-<host>.json)\n  \
    smelt tune --resume                       (continue a run the time limit stopped)\n  \
    smelt tune check --quick                  (re-measure: is each choice within 5 % of the best?)\n  \
    smelt tune predict --model m.json         (from the simulator, for the model's host)\n  \
    smelt tune compare predicted.json         (how often the predicted choice is the measured one)\n  \
    smelt tune export rules.conf              (Open MPI coll_tuned_dynamic_rules_filename)\n\
    See docs/tune.md."
)]
pub struct TuneArgs {
    /// What to do (default: measure).
    #[command(subcommand)]
    pub cmd: Option<TuneCmd>,
    #[command(flatten)]
    pub measure: MeasureArgs,
}

/// The commands of `smelt tune`.
#[derive(clap::Subcommand)]
pub enum TuneCmd {
    /// Measure the candidates on this machine and write its tuning file (the default).
    #[command(
        after_help = "Examples:\n  smelt tune measure --quick --time-limit 120\n  \
        smelt tune measure --resume\n  \
        smelt tune measure --mode both --ops barrier,allreduce --sizes 8,512,8k -o t.json"
    )]
    Measure(MeasureArgs),
    /// Re-measure every cell of the tuning file: the share of cells whose choice is
    /// within 5 % of the best candidate.
    #[command(after_help = "Examples:\n  smelt tune check --quick\n  \
        smelt tune check -o t.json --time-limit 60")]
    Check(CheckArgs),
    /// Write the tuning file from the simulator's predictions (for the model's host,
    /// any machine).
    #[command(after_help = "Examples:\n  smelt tune predict --model m.json\n  \
        smelt tune predict --model m.json --mode both --sizes 8,512,8k,64k -o pred.json")]
    Predict(PredictArgs),
    /// Compare the tuning file with another (e.g. predicted) one: how often the choices
    /// agree, and how far the other's choices are from the measured best.
    #[command(after_help = "Examples:\n  smelt tune compare pred.json\n  \
        smelt tune compare pred.json -o measured.json")]
    Compare(CompareArgs),
    /// Write the tuning file's choices as an Open MPI `tuned` dynamic rules file.
    #[command(after_help = "Examples:\n  smelt tune export rules.conf\n  \
        smelt tune export -o t.json rules.conf\n\
        Use it with mpirun --mca coll_tuned_use_dynamic_rules 1 \
        --mca coll_tuned_dynamic_rules_filename rules.conf.")]
    Export(ExportArgs),
}

/// The model and the tuning file a command works on.
#[derive(clap::Args)]
pub struct FileArgs {
    /// Model file: the CPUs, nodes and costs the trees are built from. Default: this
    /// host's cached model (smelt probe --cache), else a uniform model over the CPUs
    /// this process may use.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// The tuning file to write (or to read, for check, compare and export). Default:
    /// the host's cache path ($XDG_CACHE_HOME/smelt/tune-<host>.json).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Say on stderr where the model came from (--model, SMELT_MODEL, this host's
    /// cached probe, or the uniform model).
    #[arg(long, short = 'v')]
    pub verbose: bool,
}

/// What to tune.
#[derive(clap::Args)]
pub struct SpaceArgs {
    /// Synchronization modes: loose, strict or both.
    #[arg(long, default_value = "loose", value_parser = ["loose", "strict", "both"])]
    pub mode: String,
    /// Operations (default: broadcast, reduce, allreduce, barrier, gather, scatter, 2pc).
    #[arg(long)]
    pub ops: Option<String>,
    /// Candidates: trees (registry names; knomial:A-B for a range of radices) and
    /// non-tree algorithms (dissemination: barrier; recursive-doubling, rabenseifner, ring: allreduce),
    /// each measured for the operations it runs.
    #[arg(long, default_value = tuning::DEFAULT_CANDIDATES)]
    pub candidates: String,
    /// Message sizes in bytes: a list (8,64,4k) or a range of powers of two (8-64k).
    /// Default 8-64k; with --quick 8,512,8k,64k.
    #[arg(long)]
    pub sizes: Option<String>,
    /// Fewer sizes and repeats.
    #[arg(long)]
    pub quick: bool,
}

impl SpaceArgs {
    fn space(&self) -> Result<Space> {
        Space::parse(
            &self.mode,
            self.ops.as_deref(),
            &self.candidates,
            self.sizes.as_deref(),
            self.quick,
        )
    }
}

/// Arguments of `smelt tune measure` (and plain `smelt tune`).
#[derive(clap::Args)]
pub struct MeasureArgs {
    #[command(flatten)]
    pub file: FileArgs,
    #[command(flatten)]
    pub space: SpaceArgs,
    /// Fragment sizes tried for messages longer than a fragment, with the best tree.
    #[arg(long, default_value = "768,1536,3072")]
    pub segments: String,
    /// Stop measuring after this many seconds (the cells done are written; --resume
    /// continues).
    #[arg(long, value_parser = crate::common::seconds)]
    pub time_limit: Option<f64>,
    /// Keep the cells already in the output file and measure only the others.
    #[arg(long)]
    pub resume: bool,
}

/// Arguments of `smelt tune check`.
#[derive(clap::Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub file: FileArgs,
    /// Candidates measured beside each choice (as for measure).
    #[arg(long, default_value = tuning::DEFAULT_CANDIDATES)]
    pub candidates: String,
    /// Fragment sizes tried with each choice's tree.
    #[arg(long, default_value = "768,1536,3072")]
    pub segments: String,
    /// Fewer repeats.
    #[arg(long)]
    pub quick: bool,
    /// Stop re-measuring after this many seconds (the cells done are reported).
    #[arg(long, value_parser = crate::common::seconds)]
    pub time_limit: Option<f64>,
}

/// Arguments of `smelt tune predict`.
#[derive(clap::Args)]
pub struct PredictArgs {
    #[command(flatten)]
    pub file: FileArgs,
    #[command(flatten)]
    pub space: SpaceArgs,
}

/// Arguments of `smelt tune compare`.
#[derive(clap::Args)]
pub struct CompareArgs {
    /// The other tuning file (e.g. from smelt tune predict).
    #[arg(value_name = "OTHER")]
    pub other: PathBuf,
    #[command(flatten)]
    pub file: FileArgs,
}

/// Arguments of `smelt tune export`.
#[derive(clap::Args)]
pub struct ExportArgs {
    /// The Open MPI rules file to write.
    #[arg(value_name = "RULES")]
    pub export_ompi: PathBuf,
    #[command(flatten)]
    pub file: FileArgs,
}

/// `smelt tune`.
pub fn run(a: TuneArgs) -> Result<()> {
    match a.cmd {
        None => measure(a.measure),
        Some(TuneCmd::Measure(m)) => measure(m),
        Some(TuneCmd::Check(c)) => check(c),
        Some(TuneCmd::Predict(p)) => predict(p),
        Some(TuneCmd::Compare(c)) => compare(c),
        Some(TuneCmd::Export(e)) => export(e),
    }
}

/// `smelt tune measure`.
fn measure(a: MeasureArgs) -> Result<()> {
    let model = machine(&a.file)?;
    let space = a.space.space()?;
    measurable_here(&model)?;
    let segments = tune::parse_segments(&a.segments)?;
    let path = output_path(a.file.output.as_deref(), &model)?;
    // Before any measuring: the tuning file must be writable and no input.
    crate::common::check_output("-o", &path, &[])?;
    let mut file = if a.resume && path.exists() {
        resumed(&path, &model)?
    } else {
        tune::new_file(&model)
    };
    let limit = a.time_limit.map(Duration::from_secs_f64);
    let o = tune::measure(
        &model,
        &mut file,
        &path,
        &space,
        &segments,
        a.space.quick,
        limit,
    )?;
    crate::common::print_text(&tune::table(&file));
    eprintln!(
        "wrote {} ({} of {} cells: {} measured now, {} kept; {:.0} s)",
        path.display(),
        o.done + o.kept,
        o.total,
        o.done,
        o.kept,
        o.seconds
    );
    if o.stopped {
        eprintln!("the time limit stopped the run; 'smelt tune --resume' measures the rest");
    }
    Ok(())
}

/// `smelt tune check`.
fn check(a: CheckArgs) -> Result<()> {
    let model = machine(&a.file)?;
    let cands = tuning::parse_candidates(&a.candidates)
        .map_err(|e| anyhow::anyhow!("--candidates: {e}"))?;
    measurable_here(&model)?;
    let segments = tune::parse_segments(&a.segments)?;
    let f = load_file(&a.file, Some(&model))?;
    let limit = a.time_limit.map(Duration::from_secs_f64);
    let out = tune::check(&f, &model, &cands, &segments, a.quick, limit)?;
    crate::common::print_text(&out);
    Ok(())
}

/// `smelt tune predict`.
fn predict(a: PredictArgs) -> Result<()> {
    if a.file.model.is_none() {
        bail!("smelt tune predict needs --model FILE (the machine to predict for)");
    }
    let model = machine(&a.file)?;
    let space = a.space.space()?;
    let path = output_path(a.file.output.as_deref(), &model)?;
    crate::common::check_output("-o", &path, &[])?;
    let f = tune::predict(&model, &space)?;
    f.save(&path).map_err(|e| anyhow::anyhow!(e))?;
    crate::common::print_text(&tune::table(&f));
    eprintln!("wrote {} (predicted)", path.display());
    Ok(())
}

/// `smelt tune compare`.
fn compare(a: CompareArgs) -> Result<()> {
    let f = load_file(&a.file, None)?;
    let o = TuningFile::load(&a.other).map_err(|e| anyhow::anyhow!(e))?;
    crate::common::print_text(&tune::compare(&f, &o));
    Ok(())
}

/// `smelt tune export`.
fn export(a: ExportArgs) -> Result<()> {
    let f = load_file(&a.file, None)?;
    let out = &a.export_ompi;
    crate::common::check_output("RULES", out, &[])?;
    let text = tune::export_ompi(&f)?;
    smelt_model::write_atomic(out, text.as_bytes()).map_err(|e| anyhow::anyhow!("{e}"))?;
    eprintln!("wrote {}", out.display());
    Ok(())
}

/// The machine: the default model ([`smelt_model::default_model`]: `--model`, else
/// `SMELT_MODEL`, else this host's cached probe, else a uniform model with a notice).
fn machine(a: &FileArgs) -> Result<Model> {
    let (m, src) =
        smelt_model::default_model(a.model.as_deref(), None).map_err(|e| match &a.model {
            Some(_) => anyhow::anyhow!("--model: {e}"),
            None => anyhow::anyhow!("{e}"),
        })?;
    if a.verbose {
        eprintln!("smelt tune: model: {src}");
    }
    Ok(m)
}

/// Measuring runs here: the model must be of this host, its CPUs ours to use.
fn measurable_here(model: &Model) -> Result<()> {
    let here = smelt_model::host::host_name();
    if model.provenance.host != here {
        bail!(
            "the model is of host '{}', this is '{here}': measuring runs here (use 'smelt tune predict' for a model of another machine)",
            model.provenance.host
        );
    }
    let avail = smelt_transport::allowed_cpus().unwrap_or_default();
    if let Some(c) = model.cpus.iter().find(|c| !avail.contains(c)) {
        bail!(
            "CPU {c} of the model is not available to this process (it may use {})",
            smelt_model::format_cpu_list(&avail)
        );
    }
    Ok(())
}

/// `--resume`: the measured file at `path`, of `model`'s machine.
fn resumed(path: &Path, model: &Model) -> Result<TuningFile> {
    let f = TuningFile::load(path).map_err(|e| anyhow::anyhow!("--resume: {e}"))?;
    f.check_machine(model)
        .map_err(|e| anyhow::anyhow!("--resume: {}: {e}", path.display()))?;
    if f.source != Source::Measured {
        bail!("--resume: {} is a predicted file", path.display());
    }
    Ok(f)
}

/// `-o`, else the host's cache path (its directory made).
fn output_path(output: Option<&Path>, model: &Model) -> Result<PathBuf> {
    match output {
        Some(p) => Ok(p.to_path_buf()),
        None => {
            let p = tuning::cached_path(&model.provenance.host).ok_or_else(|| {
                anyhow::anyhow!(
                    "neither XDG_CACHE_HOME nor HOME is an absolute directory: give -o FILE"
                )
            })?;
            // The cache directory is smelt's own: make it (as `smelt probe --cache`
            // does), so the output check before measuring finds it.
            if let Some(dir) = p.parent() {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?;
            }
            Ok(p)
        }
    }
}

/// The file to read for check, compare, export: -o, else the host's cache path (of the
/// model's host where a model is given, else of this host).
fn load_file(a: &FileArgs, model: Option<&Model>) -> Result<TuningFile> {
    let path = match (&a.output, model) {
        (Some(p), _) => p.clone(),
        (None, Some(m)) => output_path(None, m)?,
        (None, None) => {
            let host = match &a.model {
                Some(p) => {
                    Model::load(p)
                        .map_err(|e| anyhow::anyhow!("--model: {e}"))?
                        .provenance
                        .host
                }
                None => smelt_model::host::host_name(),
            };
            tuning::cached_path(&host)
                .ok_or_else(|| anyhow::anyhow!("no cache directory: give -o FILE"))?
        }
    };
    // The tuning file read here is an input like any other: no output may replace it.
    smelt_model::files::declare_inputs([path.clone()]);
    if !path.exists() {
        bail!(
            "no tuning file at {} (run 'smelt tune' first)",
            path.display()
        );
    }
    let f = TuningFile::load(&path).map_err(|e| anyhow::anyhow!(e))?;
    if let Some(m) = model {
        f.check_machine(m)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    }
    Ok(f)
}
