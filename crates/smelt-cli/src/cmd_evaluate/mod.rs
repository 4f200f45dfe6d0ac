//! `smelt evaluate`: predict every topology's time for every operation over a
//! group (this file), across machines (`models`), by group size (`scaling`), against
//! the exhaustive optimum (`optimum`), and the rank correlation with measured times.

mod models;
mod optimum;
mod scaling;

use crate::cmd_tree::{
    check_finite, emit, group, load, parse_topology, payload, prediction_json, root_pos, t1, units,
    MAX_LINES, MAX_LINE_FACTOR,
};
use anyhow::{bail, Context, Result};
use models::evaluate_models;
use optimum::evaluate_optimum;
use scaling::evaluate_scaling;
use serde_json::{json, Map, Value};
use smelt_model::{format_cpu_list, Model};
use smelt_tree::evaluate::{
    best_static, correlate, evaluate_group, evaluate_tree, read_ab_bench, round_robin_groups,
    speedup, Row, TreeSource,
};
use smelt_tree::optimum::optimum;
use smelt_tree::plot::{render, render_lines, BarChart, LineChart};
use smelt_tree::sim::{broadcast_latency, predict_local};
use smelt_tree::{Costs, Op, Payload, Topology, Tree};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Arguments of `smelt evaluate`.
#[derive(clap::Args)]
#[command(after_help = "Modes:\n  \
    smelt evaluate --model m.json                 every topology x operation, best static tree, speedups\n  \
    smelt evaluate --models DIR [--plot f.png]    the same for every model JSON in DIR (Figure 9)\n  \
    smelt evaluate --model m.json --scaling       group sizes 2..n, round-robin over NUMA nodes (Figure 10)\n  \
    smelt evaluate --model m.json --optimum --cpus 0-7   exhaustive optimum vs adaptive vs optimized\n  \
    smelt evaluate --model m.json --optimum --subsets 10 the same on 10 pseudo-random 8-CPU subsets\n  \
    smelt evaluate --model m.json --ab-bench ab-bench.csv   Spearman rank correlation with measured times\n  \
    smelt evaluate --model m.json --tree t.json   a saved tree (smelt tree --format json -o t.json) beside the topologies\n\n\
    ab-bench.csv is also used automatically when the model was imported from a directory that has one.")]
pub struct EvaluateArgs {
    /// Model JSON file. Default: `SMELT_MODEL`, else this host's cached probe (`smelt
    /// probe --cache`), else a uniform model of this host's CPUs (with a notice).
    #[arg(long, conflicts_with = "models")]
    pub model: Option<PathBuf>,
    /// Directory of model JSON files: compare machines.
    #[arg(long)]
    pub models: Option<PathBuf>,
    /// CPUs of the group (default: all).
    #[arg(long)]
    pub cpus: Option<String>,
    /// Root CPU (OS id); default: the lowest average send cost, for every topology.
    #[arg(long)]
    pub root: Option<u32>,
    /// A tree file (from `smelt tree --format json`) to evaluate beside the
    /// topologies: the group and root are the file's, its row is `file:NAME`.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["models", "cpus", "root", "scaling", "optimum"])]
    pub tree: Option<PathBuf>,
    /// Comma-separated topologies to compare (default: all).
    #[arg(long)]
    pub algos: Option<String>,
    /// Operation for --scaling and --plot: broadcast, ab, reduce, barrier, 2pc.
    #[arg(long, default_value = "broadcast")]
    pub op: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Predicted time per topology for group sizes 2..=n placed round-robin over nodes.
    #[arg(long)]
    pub scaling: bool,
    /// Exhaustive optimum (at most 12 CPUs; 8 take milliseconds; use --cpus or --subsets).
    #[arg(long)]
    pub optimum: bool,
    /// With --optimum: this many pseudo-random subsets of the group (fixed seed).
    #[arg(long, value_parser = crate::common::count(1, 100_000))]
    pub subsets: Option<usize>,
    /// Size of the --subsets groups (2 to 12).
    #[arg(long, default_value_t = 8, value_parser = crate::common::count(2, smelt_tree::optimum::MAX_MEMBERS))]
    pub subset_size: usize,
    /// Seconds: the time limit of one exhaustive search (--optimum), or of the
    /// whole sweep (--scaling: group sizes not reached are left out, and the output
    /// says it was cut short).
    #[arg(long, default_value_t = 60.0, value_parser = crate::common::seconds)]
    pub time_limit: f64,
    /// A machine database ab-bench.csv with measured times to correlate with.
    #[arg(long)]
    pub ab_bench: Option<PathBuf>,
    /// Draw speedups over the best static tree, or with --scaling the time by group
    /// size (.png or .svg).
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Message size in cache lines (1 to 1048576).
    #[arg(long, default_value_t = 1, value_parser = crate::common::count_u32(1, MAX_LINES))]
    pub lines: u32,
    /// Cost of each extra cache line, as a fraction of the one-line cost (0 to 1000).
    #[arg(long, default_value_t = 1.0, value_parser = crate::common::number(0.0, MAX_LINE_FACTOR))]
    pub line_factor: f64,
}

fn parse_op(s: &str) -> Result<Op> {
    s.parse::<Op>().map_err(|e| anyhow::anyhow!("--op: {e}"))
}

fn topologies(list: Option<&str>) -> Result<Vec<Topology>> {
    match list {
        None => Ok(Topology::EVALUATED_EXTENDED.to_vec()),
        Some(s) => {
            let v = s
                .split(',')
                .filter(|x| !x.trim().is_empty())
                .map(|t| parse_topology("--algos", t))
                .collect::<Result<Vec<_>>>()?;
            if v.is_empty() {
                bail!("--algos: no topology given");
            }
            Ok(v)
        }
    }
}

/// `smelt evaluate`.
pub fn evaluate(a: EvaluateArgs) -> Result<()> {
    let pl = payload(a.lines, a.line_factor)?;
    let op = parse_op(&a.op)?;
    let topos = topologies(a.algos.as_deref())?;
    if let Some(plot) = &a.plot {
        let inputs: Vec<&Path> = [
            a.model.as_deref(),
            a.models.as_deref(),
            a.ab_bench.as_deref(),
        ]
        .into_iter()
        .flatten()
        .collect();
        crate::common::check_output("--plot", plot, &inputs)?;
    }
    if let Some(dir) = &a.models {
        return evaluate_models(dir, &a, &topos, pl, op);
    }
    // The model every command uses when given none (smelt_model::default_model).
    let model = match &a.model {
        Some(path) => load(path)?,
        None => {
            smelt_model::default_model(None, None)
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .0
        }
    };
    let file_tree = match &a.tree {
        Some(p) => Some((
            p,
            Tree::load(p).map_err(|e| anyhow::anyhow!("--tree: {e}"))?,
        )),
        None => None,
    };
    let (members, root) = members_and_root(&model, &a, file_tree.as_ref())?;
    if a.optimum {
        return evaluate_optimum(&model, &members, root, &a);
    }
    if a.scaling {
        return evaluate_scaling(&model, &members, &topos, pl, op, &a);
    }
    let mut rows =
        evaluate_group(&model, &members, root, &topos, pl).map_err(|e| anyhow::anyhow!("{e}"))?;
    if let Some((p, t)) = &file_tree {
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| p.display().to_string());
        rows.push(
            evaluate_tree(&model, t, &name, pl)
                .map_err(|e| anyhow::anyhow!("--tree: {}: {e}", p.display()))?,
        );
    }
    for r in &rows {
        check_finite(&r.prediction, &format!("the {} tree", r.topology))?;
    }
    let bench = match &a.ab_bench {
        Some(p) => Some(p.clone()),
        None => model
            .provenance
            .source
            .as_ref()
            .map(|s| Path::new(s).join("ab-bench.csv"))
            .filter(|p| p.is_file()),
    };
    let corr = match &bench {
        Some(p) => {
            let b = read_ab_bench(p).map_err(|e| anyhow::anyhow!("{e}"))?;
            Some(correlations(&model, &members, &b, pl)?)
        }
        None => None,
    };
    if let Some(plot) = &a.plot {
        plot_speedups(&model, &rows, a.model.as_deref(), plot)?;
    }
    if a.json {
        let mut v = group_json(&model, &rows);
        if let Some((file, c)) = bench.as_ref().zip(corr.as_ref()) {
            let agree = c.iter().filter(|x| x.best_agrees()).count();
            v["ab_bench"] = json!({
                "file": file.display().to_string(),
                "correlations": c,
                "predicted_best_is_measured_best": agree,
                "operations": c.len(),
            });
        }
        return emit(None, &(serde_json::to_string_pretty(&v)? + "\n"));
    }
    let mut s = group_text(&model, &rows);
    if let Some((file, c)) = bench.as_ref().zip(corr.as_ref()) {
        s.push_str(&correlation_text(file, c));
    }
    emit(None, &s)
}

/// The group evaluated: the members of `--tree`'s file (and its root), else `--cpus`
/// of the model (and `--root`).
fn members_and_root(
    model: &Model,
    a: &EvaluateArgs,
    file_tree: Option<&(&PathBuf, Tree)>,
) -> Result<(Vec<usize>, Option<usize>)> {
    Ok(match file_tree {
        Some((p, t)) => {
            let cpus: Vec<u32> = t.members.iter().map(|c| c.get()).collect();
            let members = model
                .positions(&cpus)
                .map_err(|e| anyhow::anyhow!("--tree: {}: {e}", p.display()))?;
            let root = members[t.root.index()];
            (members, Some(root))
        }
        None => {
            let members = group(model, a.cpus.as_deref())?;
            let root = root_pos(model, &members, a.root)?;
            (members, root)
        }
    })
}

/// `--plot`: smelt's trees' speedup over the best static tree, per operation.
fn plot_speedups(
    model: &Model,
    rows: &[Row],
    model_path: Option<&Path>,
    plot: &Path,
) -> Result<()> {
    let smelt: Vec<&Row> = rows.iter().filter(|r| !r.topology.is_static()).collect();
    let chart = BarChart {
        title: format!(
            "{}: speedup over the best static tree",
            machine_name(model, model_path.unwrap_or(Path::new("model")))
        ),
        y_label: "speedup".into(),
        groups: Op::SIMULATED.iter().map(|o| o.name().to_string()).collect(),
        series: smelt
            .iter()
            .map(|r| {
                (
                    r.topology.to_string(),
                    Op::SIMULATED
                        .iter()
                        .map(|&o| speedup(rows, r, o).unwrap_or(f64::NAN))
                        .collect(),
                )
            })
            .collect(),
        reference: Some(1.0),
    };
    render(&chart, plot).map_err(|e| anyhow::anyhow!("--plot: {e}"))?;
    Ok(())
}

fn machine_name(model: &Model, path: &Path) -> String {
    if !model.provenance.host.is_empty() {
        model.provenance.host.clone()
    } else {
        path.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

fn group_json(model: &Model, rows: &[Row]) -> Value {
    let mut topo = Map::new();
    for r in rows {
        topo.insert(
            r.topology.to_string(),
            json!({
                "root": r.tree.members[r.tree.root],
                "predicted": prediction_json(&r.prediction),
            }),
        );
    }
    let mut best = Map::new();
    let mut speed = Map::new();
    for op in Op::SIMULATED {
        if let Some(b) = best_static(rows, op) {
            best.insert(
                op.name().into(),
                json!({"topology": b.topology.to_string(), "time": b.prediction.get(op)}),
            );
        }
    }
    for r in rows.iter().filter(|r| !r.topology.is_static()) {
        let mut m = Map::new();
        for op in Op::SIMULATED {
            if let Some(x) = speedup(rows, r, op) {
                m.insert(op.name().into(), json!(x));
            }
        }
        speed.insert(r.topology.to_string(), Value::Object(m));
    }
    let mut cpus: Vec<u32> = rows
        .first()
        .map(|r| r.tree.members.iter().map(|c| c.get()).collect())
        .unwrap_or_default();
    cpus.sort_unstable();
    json!({
        "host": model.provenance.host,
        "units": units(model),
        "cpus": format_cpu_list(&cpus),
        "topologies": topo,
        "best_static": best,
        "speedup_over_best_static": speed,
    })
}

fn group_text(model: &Model, rows: &[Row]) -> String {
    let mut s = String::new();
    let mut cpus: Vec<u32> = rows
        .first()
        .map(|r| r.tree.members.iter().map(|c| c.get()).collect())
        .unwrap_or_default();
    cpus.sort_unstable();
    let _ = writeln!(
        s,
        "Predicted times ({}) on {} ({} CPUs: {}), one-line messages unless --lines",
        units(model),
        if model.provenance.host.is_empty() {
            "?"
        } else {
            &model.provenance.host
        },
        cpus.len(),
        format_cpu_list(&cpus)
    );
    let _ = write!(s, "{:<20}{:>6}", "topology", "root");
    for op in Op::SIMULATED {
        let _ = write!(s, "{:>12}", op.name());
    }
    s.push('\n');
    for r in rows {
        let _ = write!(
            s,
            "{:<20}{:>6}",
            r.topology.to_string(),
            r.tree.members[r.tree.root]
        );
        for op in Op::SIMULATED {
            let _ = write!(s, "{:>12}", t1(r.prediction.get(op)));
        }
        s.push('\n');
    }
    let _ = write!(s, "\n{:<26}", "best static tree");
    for op in Op::SIMULATED {
        let name = best_static(rows, op)
            .map(|b| b.topology.to_string())
            .unwrap_or("-".into());
        let _ = write!(s, "{:>12}", name);
    }
    s.push('\n');
    for r in rows.iter().filter(|r| !r.topology.is_static()) {
        let _ = write!(s, "{:<26}", format!("speedup {}", r.topology));
        for op in Op::SIMULATED {
            match speedup(rows, r, op).filter(|x| x.is_finite()) {
                Some(x) => {
                    let _ = write!(s, "{:>11.3}x", x);
                }
                None => {
                    let _ = write!(s, "{:>12}", "-");
                }
            }
        }
        s.push('\n');
    }
    s
}

fn correlations(
    model: &Model,
    members: &[usize],
    b: &smelt_tree::evaluate::AbBench,
    pl: Payload,
) -> Result<Vec<smelt_tree::evaluate::Correlation>> {
    // As measured by the machine database (and its Simulator): static trees rooted
    // at the first CPU of the group, the adaptive tree at its default root.
    let c = Costs::new(model, members).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(correlate(b, |t| {
        let r = if t.is_static() { 0 } else { c.default_root() };
        predict_local(&c, r, &t.children(&c, r), pl)
    }))
}

fn correlation_text(file: &Path, cs: &[smelt_tree::evaluate::Correlation]) -> String {
    let mut s = format!(
        "\nRank correlation with measured times in {} (static trees rooted at the first CPU):\n",
        file.display()
    );
    for c in cs {
        let _ = writeln!(
            s,
            "  {:<10} vs predicted {:<10} Spearman {}",
            c.operation,
            c.op,
            c.spearman
                .map(|x| format!("{x:+.2}"))
                .unwrap_or("undefined".into())
        );
        let mut m: Vec<&(String, f64, f64)> = c.pairs.iter().collect();
        m.sort_by(|a, b| a.1.total_cmp(&b.1));
        let mut p: Vec<&(String, f64, f64)> = c.pairs.iter().collect();
        p.sort_by(|a, b| a.2.total_cmp(&b.2));
        let names = |v: &[&(String, f64, f64)]| {
            v.iter()
                .map(|x| x.0.as_str())
                .collect::<Vec<_>>()
                .join(" < ")
        };
        let _ = writeln!(s, "    measured:  {}", names(&m));
        let _ = writeln!(s, "    predicted: {}", names(&p));
    }
    let agree = cs.iter().filter(|c| c.best_agrees()).count();
    let _ = writeln!(
        s,
        "  the predicted fastest tree is the measured fastest for {agree} of {} operations",
        cs.len()
    );
    s
}

/// A speedup for a table: `1.234x`, or `-` when undefined.
fn ratio(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.3}x")
    } else {
        "-".into()
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).collect::<String>() + "…"
    }
}
