//! `smelt import` and `smelt model show|heatmap`.

use anyhow::Context;
use smelt_model::import::{import as import_model, Format, ImportOptions};
use smelt_model::stats::{sizes_text, summarize_model, HierarchySummary, LevelCosts, MinMedMax};
use smelt_model::Model;
use std::path::PathBuf;

/// `println!` that ignores a closed stdout (`smelt model show m.json | head`)
/// instead of panicking.
macro_rules! say {
    ($($arg:tt)*) => {{
        $crate::common::print_text(&(format!($($arg)*) + "\n"));
    }};
}

/// Arguments of `smelt import`.
#[derive(clap::Args)]
#[command(after_help = "Formats:\n  \
    smelt-machinedb  a Smelt machine database directory (pairwise-nsend_send, \
    pairwise-nsend_receive, optional pairwise-nsend_rtt; cycles; lscpu.txt, likwid.txt)\n  \
    c2c-csv          a core-to-core-latency CSV (lower-triangular one-way latencies, ns)\n\n\
    The format is detected when --format is not given: a directory with \
    pairwise-nsend_send is a machine database, a .csv file a latency matrix.")]
pub struct ImportArgs {
    /// Directory (Smelt machine database) or .csv file (core-to-core-latency) to import.
    pub path: PathBuf,
    /// Where to write the model JSON.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Input format (detected from PATH when omitted).
    #[arg(long, value_parser = ["smelt-machinedb", "c2c-csv"])]
    pub format: Option<String>,
    /// Clock rate in GHz to turn cycle counts into ns (wins over lscpu.txt's "CPU MHz");
    /// 0.01 to 100.
    #[arg(long, value_parser = crate::common::number(
        smelt_model::import::MIN_GHZ,
        smelt_model::import::MAX_GHZ
    ))]
    pub ghz: Option<f64>,
}

/// `smelt model ...` subcommands.
#[derive(clap::Subcommand)]
pub enum ModelCmd {
    /// Summary of a model: provenance, CPUs, OS and inferred hierarchies, where they
    /// disagree, and costs per hierarchy level.
    Show(ShowArgs),
    /// Draw the send and receive matrices as a heat map (PNG).
    Heatmap(HeatmapArgs),
}

/// Arguments of `smelt model show`.
#[derive(clap::Args)]
pub struct ShowArgs {
    /// Model JSON file.
    pub model: PathBuf,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `smelt model heatmap`.
#[derive(clap::Args)]
pub struct HeatmapArgs {
    /// Model JSON file.
    pub model: PathBuf,
    /// PNG file to write.
    #[arg(short, long)]
    pub output: PathBuf,
}

/// Runs `smelt import`.
pub fn import(a: ImportArgs) -> anyhow::Result<()> {
    crate::common::check_output("-o", &a.output, &[&a.path])?;
    let opts = ImportOptions {
        format: a.format.as_deref().and_then(Format::from_name),
        ghz: a.ghz,
    };
    let model = import_model(&a.path, &opts).map_err(flat)?;
    model.save(&a.output).map_err(flat)?;
    say!(
        "imported {} CPUs ({}) from {} -> {}",
        model.len(),
        model.provenance.method,
        a.path.display(),
        a.output.display()
    );
    if let Some(h) = &model.inferred_hierarchy {
        say!("inferred hierarchy: {}", describe_levels(h));
    }
    for n in &model.provenance.notes {
        match n.strip_prefix("warning: ") {
            Some(w) => crate::common::warn(w),
            None => say!("note: {n}"),
        }
    }
    Ok(())
}

fn describe_levels(h: &smelt_model::Hierarchy) -> String {
    if h.levels.is_empty() {
        return "no grouping (costs are uniform)".into();
    }
    h.levels
        .iter()
        .map(|l| {
            let sizes: Vec<usize> = l.groups.iter().map(Vec::len).collect();
            format!("{} [{}]", l.name, sizes_text(&sizes))
        })
        .collect::<Vec<_>>()
        .join(" > ")
}

/// Runs a `smelt model` subcommand.
pub fn run(c: ModelCmd) -> anyhow::Result<()> {
    match c {
        ModelCmd::Show(a) => show(a),
        ModelCmd::Heatmap(a) => heatmap(a),
    }
}

/// A model error as one flat message: its text already names the file and the
/// cause, so the cause must not be chained a second time.
fn flat(e: smelt_model::ModelError) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

fn load(path: &PathBuf) -> anyhow::Result<Model> {
    Model::load(path).map_err(flat)
}

fn show(a: ShowArgs) -> anyhow::Result<()> {
    let model = load(&a.model)?;
    let s = summarize_model(&model);
    if a.json {
        say!(
            "{}",
            serde_json::to_string_pretty(&s).context("serializing the summary")?
        );
        return Ok(());
    }
    let p = &s.provenance;
    say!("model {}", a.model.display());
    say!("  host:        {}", p.host);
    say!("  CPU model:   {}", p.cpu_model);
    say!("  date:        {}", p.date);
    say!("  tool:        {}", p.tool);
    say!("  method:      {}", p.method);
    say!("  units:       {}", p.units);
    if let Some(src) = &p.source {
        say!("  source:      {src}");
    }
    if let Some(g) = p.clock_ghz {
        say!("  clock:       {g} GHz");
    }
    if let Some(d) = &p.derivation {
        say!("  derivation:  {d}");
    }
    for n in &p.notes {
        say!("  note:        {n}");
    }
    say!(
        "CPUs ({}): {}{}",
        s.cpu_count,
        s.cpus,
        if s.has_rtt { " (rtt measured)" } else { "" }
    );
    print_hierarchy("OS hierarchy", &s.hierarchy);
    if let Some(h) = &s.inferred_hierarchy {
        print_hierarchy("Inferred hierarchy", h);
    }
    say!("OS vs inferred:");
    for l in &s.comparison {
        say!("  - {l}");
    }
    if let Some(d) = &s.numa_distances {
        say!("NUMA distances:");
        for row in d {
            let r: Vec<String> = row.iter().map(|v| format!("{v:>4}")).collect();
            say!("  {}", r.join(" "));
        }
    }
    Ok(())
}

fn print_hierarchy(title: &str, h: &HierarchySummary) {
    say!("{title} (source: {}):", h.source);
    if h.levels.is_empty() {
        say!("  (no levels)");
    }
    for l in &h.levels {
        let members = if l.groups <= 8 {
            format!("  {}", l.members.join(" | "))
        } else {
            String::new()
        };
        say!(
            "  {:<10} {:>4} groups, sizes {}{}",
            l.name,
            l.groups,
            sizes_text(&l.sizes),
            members
        );
    }
    if h.costs.is_empty() {
        return;
    }
    say!("  costs by innermost shared level, ns (min / median / max):");
    let has_rtt = h.costs.iter().any(|c| c.rtt.is_some());
    let w = h
        .costs
        .iter()
        .map(|c| c.level.len())
        .max()
        .unwrap_or(0)
        .max(10);
    say!(
        "    {:<w$} {:>6}  {:<22} {:<22}{}",
        "level",
        "pairs",
        "send",
        "receive",
        if has_rtt { " rtt" } else { "" }
    );
    for c in &h.costs {
        print_costs(c, has_rtt, w);
    }
}

fn mmm(m: &Option<MinMedMax>) -> String {
    match m {
        Some(m) => format!("{:.1} / {:.1} / {:.1}", m.min, m.median, m.max),
        None => "-".into(),
    }
}

fn print_costs(c: &LevelCosts, has_rtt: bool, w: usize) {
    say!(
        "    {:<w$} {:>6}  {:<22} {:<22}{}",
        c.level,
        c.pairs,
        mmm(&c.send),
        mmm(&c.receive),
        if has_rtt {
            format!(" {}", mmm(&c.rtt))
        } else {
            String::new()
        }
    );
}

fn heatmap(a: HeatmapArgs) -> anyhow::Result<()> {
    crate::common::check_output("-o", &a.output, &[&a.model])?;
    let model = load(&a.model)?;
    smelt_model::heatmap::save_png(&model, &a.output).map_err(flat)?;
    say!(
        "heat map of {} CPUs (send | receive) -> {}",
        model.len(),
        a.output.display()
    );
    Ok(())
}
