//! `smelt tree` (build, print or draw one tree) and `smelt evaluate` (predict every
//! topology's time for every operation; across machines; scaling; exhaustive
//! optimum; rank correlation with measured times).

use anyhow::{bail, Context, Result};
use serde_json::{json, Map, Value};
use smelt_model::{format_cpu_list, parse_cpu_list, Model};
use smelt_tree::evaluate::{
    best_static, correlate, evaluate_group, evaluate_tree, read_ab_bench, round_robin_groups,
    speedup, Row, TreeSource,
};
use smelt_tree::optimum::optimum;
use smelt_tree::plot::{render, render_lines, BarChart, LineChart};
use smelt_tree::sim::{broadcast_arrivals, broadcast_latency, predict_local};
use smelt_tree::{Costs, Op, Payload, Pos, Prediction, Topology, Tree};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Output format of `smelt tree`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TreeFormat {
    /// Indented drawing with the time each CPU holds the message.
    Text,
    /// `{"root", "children", "predicted_ns"}` with OS CPU ids.
    Json,
    /// Graphviz source (clusters = NUMA nodes, edge labels = send order).
    Dot,
    /// The Graphviz drawing as SVG (runs `dot -Tsvg`).
    Svg,
}

/// Arguments of `smelt tree`.
#[derive(clap::Args)]
#[command(
    after_help = format!("Topologies:\n{}\n\
    Examples:\n  smelt tree --model m.json\n  smelt tree --model m.json --algo mst --cpus 0-7 --root 3\n  \
    smelt tree --model m.json --format svg -o tree.svg\n  smelt tree --model m.json --format json -o t.json   \
    (a tree file for --tree)", smelt_tree::topology::help())
)]
pub struct TreeArgs {
    /// Model JSON file (from `smelt probe` or `smelt import`).
    #[arg(long)]
    pub model: PathBuf,
    /// Topology to build.
    #[arg(long, default_value = "adaptive-shuffled")]
    pub algo: String,
    /// CPUs of the group as a list (e.g. 0-7,16-23); default: every CPU of the model.
    #[arg(long)]
    pub cpus: Option<String>,
    /// Root CPU (OS id); default: the CPU with the lowest average send cost.
    #[arg(long)]
    pub root: Option<u32>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = TreeFormat::Text)]
    pub format: TreeFormat,
    /// Message size in cache lines for the predicted times (1 to 1048576).
    #[arg(long, default_value_t = 1, value_parser = crate::common::count_u32(1, MAX_LINES))]
    pub lines: u32,
    /// Cost of each extra cache line, as a fraction of the one-line cost (0 to 1000).
    #[arg(long, default_value_t = 1.0, value_parser = crate::common::number(0.0, MAX_LINE_FACTOR))]
    pub line_factor: f64,
    /// Write the output to this file instead of standard output.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

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
    /// Model JSON file.
    #[arg(long, required_unless_present = "models", conflicts_with = "models")]
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

/// Largest `--lines` (a 64 MiB message of 64-byte lines).
const MAX_LINES: u32 = 1 << 20;
/// Largest `--line-factor`.
const MAX_LINE_FACTOR: f64 = 1000.0;

/// Default limit of the Graphviz `dot` run of `--format svg`, seconds.
pub const DOT_TIMEOUT_DEFAULT: f64 = 30.0;
/// Environment variable that changes it.
pub const DOT_TIMEOUT_ENV: &str = "SMELT_DOT_TIMEOUT";

/// A predicted time for a table: one decimal, scientific notation when huge, `-`
/// when undefined (never `inf` or `NaN`).
fn t1(v: f64) -> String {
    if !v.is_finite() {
        "-".into()
    } else if v.abs() >= 1e12 {
        format!("{v:.3e}")
    } else {
        format!("{v:.1}")
    }
}

/// Errors when a prediction is not a finite number (it cannot be with the cost and
/// option bounds, but a table of `inf` must never be printed).
fn check_finite(p: &Prediction, what: &str) -> Result<()> {
    for v in [p.broadcast, p.ab, p.reduce, p.barrier, p.two_pc] {
        if !v.is_finite() {
            bail!("the predicted time of {what} is not a finite number ({v}); check the model's costs and --lines/--line-factor");
        }
    }
    Ok(())
}

fn payload(lines: u32, factor: f64) -> Result<Payload> {
    Ok(Payload {
        lines,
        extra_line_factor: factor,
    })
}

fn load(path: &Path) -> Result<Model> {
    Model::load(path).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Model positions of the group (`--cpus`, default all), in CPU-list order.
fn group(model: &Model, cpus: Option<&str>) -> Result<Vec<usize>> {
    match cpus {
        None => Ok((0..model.len()).collect()),
        Some(s) => {
            let list = parse_cpu_list(s).map_err(|e| anyhow::anyhow!("--cpus: {e}"))?;
            if list.is_empty() {
                bail!("--cpus: the CPU set is empty");
            }
            model
                .positions(&list)
                .map_err(|e| anyhow::anyhow!("--cpus: {e}"))
        }
    }
}

fn root_pos(model: &Model, members: &[usize], root: Option<u32>) -> Result<Option<usize>> {
    let Some(r) = root else { return Ok(None) };
    let p = model.position(r).with_context(|| {
        format!(
            "--root: CPU {r} is not in the model (it has CPUs {})",
            format_cpu_list(&model.cpus)
        )
    })?;
    if !members.contains(&p) {
        bail!("--root: CPU {r} is not in the group");
    }
    Ok(Some(p))
}

/// A topology name given to `option` (`--algo`, `--algos`).
fn parse_topology(option: &str, s: &str) -> Result<Topology> {
    s.trim()
        .parse::<Topology>()
        .map_err(|e| anyhow::anyhow!("{option}: {e}"))
}

fn units(model: &Model) -> String {
    if model.provenance.units.is_empty() {
        "ns".into()
    } else {
        model.provenance.units.clone()
    }
}

/// Writes a result: to `output` atomically, or to stdout (human text with control
/// characters escaped; JSON, DOT and SVG as they are).
fn emit(output: Option<&Path>, text: &str) -> Result<()> {
    emit_as(output, text, true)
}

fn emit_as(output: Option<&Path>, text: &str, human: bool) -> Result<()> {
    match output {
        Some(p) => {
            smelt_model::write_atomic(p, text.as_bytes()).map_err(|e| anyhow::anyhow!("{e}"))
        }
        None if human => {
            crate::common::print_text(text);
            Ok(())
        }
        None => {
            let mut out = std::io::stdout().lock();
            // A closed pipe (e.g. `| head`) is not an error worth reporting.
            let _ = out.write_all(text.as_bytes());
            Ok(())
        }
    }
}

fn prediction_json(p: &Prediction) -> Value {
    json!({
        "broadcast": p.broadcast,
        "ab": p.ab,
        "reduce": p.reduce,
        "barrier": p.barrier,
        "2pc": p.two_pc,
    })
}

/// `smelt tree`.
pub fn tree(a: TreeArgs) -> Result<()> {
    if let Some(o) = &a.output {
        crate::common::check_output("-o", o, &[&a.model])?;
    }
    let topo = parse_topology("--algo", &a.algo)?;
    let pl = payload(a.lines, a.line_factor)?;
    let model = load(&a.model)?;
    let members = group(&model, a.cpus.as_deref())?;
    let root = root_pos(&model, &members, a.root)?;
    let tree = topo
        .generate(&model, &members, root)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let c = Costs::new(&model, &members).map_err(|e| anyhow::anyhow!("{e}"))?;
    let pred = predict_local(&c, tree.root.index(), &tree.child_indices(), pl);
    check_finite(&pred, &format!("the {topo} tree"))?;
    let at = broadcast_arrivals(
        &c,
        tree.root.index(),
        &tree.child_indices(),
        pl.scale(),
        0.0,
    );
    let text = match a.format {
        TreeFormat::Json => {
            let j = tree.to_json();
            let mut v = serde_json::to_value(&j)?;
            v["algo"] = json!(topo.to_string());
            v["units"] = json!(units(&model));
            v["predicted_ns"] = prediction_json(&pred);
            serde_json::to_string_pretty(&v)? + "\n"
        }
        TreeFormat::Text => text_drawing(&model, &c, &tree, topo, &pred, &at),
        TreeFormat::Dot => dot(&c, &tree, topo, &at, &units(&model)),
        TreeFormat::Svg => {
            let src = dot(&c, &tree, topo, &at, &units(&model));
            run_dot(&src)?
        }
    };
    emit_as(a.output.as_deref(), &text, a.format == TreeFormat::Text)
}

fn text_drawing(
    model: &Model,
    c: &Costs,
    t: &Tree,
    topo: Topology,
    p: &Prediction,
    at: &[f64],
) -> String {
    let u = units(model);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{topo} tree over {} CPUs ({}), root CPU {}; times in {u} (when each CPU holds the message)",
        t.len(),
        format_cpu_list(&{
            let mut v: Vec<u32> = t.members.iter().map(|c| c.get()).collect();
            v.sort_unstable();
            v
        }),
        t.members[t.root]
    );
    let _ = writeln!(s, "{}", t.members[t.root]);
    fn walk(s: &mut String, c: &Costs, t: &Tree, at: &[f64], v: Pos, prefix: &str) {
        let k = t.children[v].len();
        for (i, &ch) in t.children[v].iter().enumerate() {
            let last = i + 1 == k;
            let remote = if c.node[ch] != c.node[v] {
                "  (remote)"
            } else {
                ""
            };
            let _ = writeln!(
                s,
                "{prefix}{}{}  @ {}{remote}",
                if last { "└── " } else { "├── " },
                t.members[ch],
                t1(at[ch])
            );
            let next = format!("{prefix}{}", if last { "    " } else { "│   " });
            walk(s, c, t, at, ch, &next);
        }
    }
    walk(&mut s, c, t, at, t.root, "");
    let _ = writeln!(
        s,
        "predicted ({u}): broadcast {}  ab {}  reduce {}  barrier {}  2pc {}",
        t1(p.broadcast),
        t1(p.ab),
        t1(p.reduce),
        t1(p.barrier),
        t1(p.two_pc)
    );
    s
}

fn dot(c: &Costs, t: &Tree, topo: Topology, at: &[f64], units: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "digraph smelt {{");
    let _ = writeln!(
        s,
        "  label=\"{topo} tree, root {}, times in {units}\";\n  labelloc=t;\n  node [shape=circle, fontsize=10];\n  edge [fontsize=9];",
        t.members[t.root]
    );
    let mut nodes: Vec<usize> = c.node.clone();
    nodes.sort_unstable();
    nodes.dedup();
    for g in nodes {
        let _ = writeln!(
            s,
            "  subgraph cluster_{g} {{\n    label=\"node {g}\"; style=rounded; color=gray;"
        );
        for (v, &time) in at.iter().enumerate() {
            if c.node[v] == g {
                let shape = if Pos(v) == t.root {
                    ", shape=doublecircle"
                } else {
                    ""
                };
                let _ = writeln!(
                    s,
                    "    \"{}\" [label=\"{}\\n{:.0}\"{shape}];",
                    t.members[v], t.members[v], time
                );
            }
        }
        let _ = writeln!(s, "  }}");
    }
    for (p, kids) in t.children.iter().enumerate() {
        for (k, &ch) in kids.iter().enumerate() {
            let style = if c.node[p] != c.node[ch] {
                ", color=red"
            } else {
                ""
            };
            let _ = writeln!(
                s,
                "  \"{}\" -> \"{}\" [label=\"{}\"{style}];",
                t.members[p],
                t.members[ch],
                k + 1
            );
        }
    }
    let _ = writeln!(s, "}}");
    s
}

/// The limit of one `dot` run: `SMELT_DOT_TIMEOUT` seconds, default 30.
fn dot_timeout() -> Result<Duration> {
    let secs = match std::env::var(DOT_TIMEOUT_ENV) {
        Err(_) => DOT_TIMEOUT_DEFAULT,
        Ok(v) => crate::common::seconds(&v).map_err(|why| {
            anyhow::anyhow!("environment variable {DOT_TIMEOUT_ENV}='{v}': {why}")
        })?,
    };
    Ok(Duration::from_secs_f64(secs))
}

fn run_dot(src: &str) -> Result<String> {
    use std::io::Read as _;
    use std::process::{Command, Stdio};
    let limit = dot_timeout()?;
    let mut child = Command::new("dot")
        .arg("-Tsvg")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            anyhow::anyhow!("cannot run graphviz 'dot' ({e}); install graphviz or use --format dot")
        })?;
    let mut stdin = child.stdin.take().context("dot: no stdin")?;
    let mut stdout = child.stdout.take().context("dot: no stdout")?;
    let mut stderr = child.stderr.take().context("dot: no stderr")?;
    let src = src.to_string();
    let writer = std::thread::spawn(move || stdin.write_all(src.as_bytes()));
    let out_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stdout.read_to_end(&mut v);
        v
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stderr.read_to_end(&mut v);
        v
    });
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().context("waiting for dot")? {
            break status;
        }
        if start.elapsed() >= limit {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "graphviz 'dot -Tsvg' did not finish within {} s and was killed (set {DOT_TIMEOUT_ENV} to allow longer, or use --format dot)",
                limit.as_secs_f64()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let _ = writer.join();
    let out = out_reader.join().unwrap_or_default();
    let err = err_reader.join().unwrap_or_default();
    if !status.success() {
        bail!(
            "dot -Tsvg failed: {}",
            String::from_utf8_lossy(&err).lines().next().unwrap_or("")
        );
    }
    String::from_utf8(out).context("dot produced non-UTF-8 output")
}

fn parse_op(s: &str) -> Result<Op> {
    Op::ALL
        .into_iter()
        .find(|o| o.name() == s)
        .with_context(|| {
            format!("--op: unknown operation '{s}' (known: broadcast, ab, reduce, barrier, 2pc)")
        })
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
    let path = a
        .model
        .as_ref()
        .context("--model or --models is required")?;
    let model = load(path)?;
    let file_tree = match &a.tree {
        Some(p) => Some((
            p,
            Tree::load(p).map_err(|e| anyhow::anyhow!("--tree: {e}"))?,
        )),
        None => None,
    };
    let (members, root) = match &file_tree {
        Some((p, t)) => {
            let cpus: Vec<u32> = t.members.iter().map(|c| c.get()).collect();
            let members = model
                .positions(&cpus)
                .map_err(|e| anyhow::anyhow!("--tree: {}: {e}", p.display()))?;
            let root = members[t.root.index()];
            (members, Some(root))
        }
        None => {
            let members = group(&model, a.cpus.as_deref())?;
            let root = root_pos(&model, &members, a.root)?;
            (members, root)
        }
    };
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
        let smelt: Vec<&Row> = rows.iter().filter(|r| !r.topology.is_static()).collect();
        let chart = BarChart {
            title: format!(
                "{}: speedup over the best static tree",
                machine_name(&model, path)
            ),
            y_label: "speedup".into(),
            groups: Op::ALL.iter().map(|o| o.name().to_string()).collect(),
            series: smelt
                .iter()
                .map(|r| {
                    (
                        r.topology.to_string(),
                        Op::ALL
                            .iter()
                            .map(|&o| speedup(&rows, r, o).unwrap_or(f64::NAN))
                            .collect(),
                    )
                })
                .collect(),
            reference: Some(1.0),
        };
        render(&chart, plot).map_err(|e| anyhow::anyhow!("--plot: {e}"))?;
    }
    if a.json {
        let mut v = group_json(&model, &rows);
        if let Some((file, c)) = bench.as_ref().zip(corr.as_ref()) {
            v["ab_bench"] = json!({ "file": file.display().to_string(), "correlations": c });
        }
        return emit(None, &(serde_json::to_string_pretty(&v)? + "\n"));
    }
    let mut s = group_text(&model, &rows);
    if let Some((file, c)) = bench.as_ref().zip(corr.as_ref()) {
        s.push_str(&correlation_text(file, c));
    }
    emit(None, &s)
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
    for op in Op::ALL {
        if let Some(b) = best_static(rows, op) {
            best.insert(
                op.name().into(),
                json!({"topology": b.topology.to_string(), "time": b.prediction.get(op)}),
            );
        }
    }
    for r in rows.iter().filter(|r| !r.topology.is_static()) {
        let mut m = Map::new();
        for op in Op::ALL {
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
    for op in Op::ALL {
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
        for op in Op::ALL {
            let _ = write!(s, "{:>12}", t1(r.prediction.get(op)));
        }
        s.push('\n');
    }
    let _ = write!(s, "\n{:<26}", "best static tree");
    for op in Op::ALL {
        let name = best_static(rows, op)
            .map(|b| b.topology.to_string())
            .unwrap_or("-".into());
        let _ = write!(s, "{:>12}", name);
    }
    s.push('\n');
    for r in rows.iter().filter(|r| !r.topology.is_static()) {
        let _ = write!(s, "{:<26}", format!("speedup {}", r.topology));
        for op in Op::ALL {
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
    s
}

fn evaluate_scaling(
    model: &Model,
    members: &[usize],
    topos: &[Topology],
    pl: Payload,
    op: Op,
    a: &EvaluateArgs,
) -> Result<()> {
    let (as_json, plot) = (a.json, a.plot.as_deref());
    let groups = round_robin_groups(model, members);
    if groups.is_empty() {
        bail!("--scaling needs at least 2 CPUs");
    }
    // Bigger groups cost more: count progress in members simulated, not in groups.
    let work: u64 = groups.iter().map(|g| g.len() as u64).sum();
    let progress = smelt_probe::progress::Progress::new(true, work, "CPUs simulated")
        .with_label("smelt evaluate --scaling");
    let limit = Duration::from_secs_f64(a.time_limit);
    let start = std::time::Instant::now();
    let mut table: Vec<(usize, Vec<f64>)> = Vec::new();
    for g in &groups {
        if start.elapsed() >= limit {
            break;
        }
        progress.step(format!("{} CPUs", g.len()));
        let rows = evaluate_group(model, g, None, topos, pl).map_err(|e| anyhow::anyhow!("{e}"))?;
        for r in &rows {
            check_finite(&r.prediction, &format!("the {} tree", r.topology))?;
        }
        table.push((g.len(), rows.iter().map(|r| r.prediction.get(op)).collect()));
        progress.inc_by(g.len() as u64);
    }
    progress.finish();
    let cut_short = (table.len() < groups.len()).then(|| {
        format!(
            "cut short by --time-limit {}: group sizes {} to {} of {} were computed in {:.1} s, the larger ones were not (raise --time-limit for all)",
            a.time_limit,
            groups[0].len(),
            table.last().map_or(0, |t| t.0),
            groups.last().map_or(0, |g| g.len()),
            start.elapsed().as_secs_f64()
        )
    });
    if let Some(w) = &cut_short {
        crate::common::warn(w);
    }
    if table.is_empty() {
        bail!(
            "--time-limit {} s passed before the first group size was computed",
            a.time_limit
        );
    }
    if let Some(p) = plot {
        let chart = LineChart {
            title: format!(
                "{}: predicted {} time by group size",
                model.provenance.host,
                op.name()
            ),
            x_label: "CPUs (round-robin over nodes)".into(),
            y_label: units(model),
            x: table.iter().map(|(n, _)| *n as f64).collect(),
            series: topos
                .iter()
                .enumerate()
                .map(|(i, t)| (t.to_string(), table.iter().map(|(_, v)| v[i]).collect()))
                .collect(),
        };
        render_lines(&chart, p).map_err(|e| anyhow::anyhow!("--plot: {e}"))?;
    }
    if as_json {
        let v: Vec<Value> = table
            .iter()
            .map(|(n, t)| {
                let mut m = Map::new();
                m.insert("cpus".into(), json!(n));
                for (tp, x) in topos.iter().zip(t) {
                    m.insert(tp.to_string(), json!(x));
                }
                Value::Object(m)
            })
            .collect();
        let out = json!({"operation": op.name(), "units": units(model), "sizes": v, "cut_short": cut_short});
        return emit(None, &(serde_json::to_string_pretty(&out)? + "\n"));
    }
    let mut s = format!(
        "Predicted {} time ({}) by group size, CPUs added round-robin over nodes\n{:>5}",
        op.name(),
        units(model),
        "cpus"
    );
    for t in topos {
        let _ = write!(s, "{:>19}", t.to_string());
    }
    s.push('\n');
    for (n, t) in &table {
        let _ = write!(s, "{n:>5}");
        for x in t {
            let _ = write!(s, "{:>19}", t1(*x));
        }
        s.push('\n');
    }
    if let Some(w) = &cut_short {
        let _ = writeln!(s, "({w})");
    }
    emit(None, &s)
}

/// Deterministic pseudo-random subsets of `k` of `members`.
fn subsets(members: &[usize], k: usize, count: usize) -> Vec<Vec<usize>> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..count)
        .map(|_| {
            let mut v = members.to_vec();
            for i in 0..k.min(v.len()) {
                let j = i + (next() % (v.len() - i) as u64) as usize;
                v.swap(i, j);
            }
            v.truncate(k);
            v.sort_unstable();
            v
        })
        .collect()
}

fn evaluate_optimum(
    model: &Model,
    members: &[usize],
    root: Option<usize>,
    a: &EvaluateArgs,
) -> Result<()> {
    const MAX: usize = smelt_tree::optimum::MAX_MEMBERS;
    if !(2..=MAX).contains(&a.subset_size) {
        bail!("--subset-size must be between 2 and {MAX}");
    }
    let groups = match a.subsets {
        Some(0) => bail!("--subsets must be at least 1"),
        Some(k) => subsets(members, a.subset_size.min(members.len()), k),
        None => {
            if members.len() > MAX {
                bail!(
                    "--optimum searches at most {MAX} CPUs, the group has {}; pick some with --cpus or use --subsets N",
                    members.len()
                );
            }
            vec![members.to_vec()]
        }
    };
    let limit = Duration::try_from_secs_f64(a.time_limit)
        .map_err(|_| anyhow::anyhow!("--time-limit {} is out of range", a.time_limit))?;
    let mut results = Vec::new();
    for g in &groups {
        let c = Costs::new(model, g).map_err(|e| anyhow::anyhow!("{e}"))?;
        let r = match root.and_then(|p| g.iter().position(|&m| m == p)) {
            Some(r) => r,
            None => c.default_root(),
        };
        let lat = |t: Topology| broadcast_latency(&c, r, &t.children(&c, r));
        let opt_tree = Topology::Optimized.children(&c, r);
        let o = optimum(&c, r, limit, Some(&opt_tree)).map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut cpus: Vec<u32> = g.iter().map(|&p| model.cpus[p]).collect();
        cpus.sort_unstable();
        let best_static = Topology::EVALUATED
            .iter()
            .filter(|t| t.is_static())
            .map(|&t| lat(t))
            .fold(f64::INFINITY, f64::min);
        results.push(json!({
            "cpus": format_cpu_list(&cpus),
            "root": model.cpus[g[r]],
            "optimum": o.latency,
            "proven_optimal": o.proven,
            "search_nodes": o.visited,
            "search_seconds": o.elapsed.as_secs_f64(),
            "adaptive": lat(Topology::Adaptive),
            "adaptive-sorted": lat(Topology::AdaptiveSorted),
            "adaptive-shuffled": lat(Topology::AdaptiveShuffled),
            "optimized": broadcast_latency(&c, r, &opt_tree),
            "best_static": best_static,
            "optimum_tree": c.tree(r, o.children.clone()).to_json(),
        }));
    }
    // latency / optimum - 1; 0 when both are 0; undefined (NaN, printed "-") otherwise.
    let gap = |v: &Value, k: &str| {
        let (x, o) = (
            v[k].as_f64().unwrap_or(f64::NAN),
            v["optimum"].as_f64().unwrap_or(f64::NAN),
        );
        if o > 0.0 {
            x / o - 1.0
        } else if x == 0.0 && o == 0.0 {
            0.0
        } else {
            f64::NAN
        }
    };
    let pct = |g: f64, prec: usize| {
        if g.is_finite() {
            format!("{:+.prec$}%", 100.0 * g)
        } else {
            "-".to_string()
        }
    };
    let keys = [
        "adaptive",
        "adaptive-sorted",
        "adaptive-shuffled",
        "optimized",
        "best_static",
    ];
    let mean_gap = |k: &str| {
        let g: Vec<f64> = results
            .iter()
            .map(|v| gap(v, k))
            .filter(|g| g.is_finite())
            .collect();
        if g.is_empty() {
            f64::NAN
        } else {
            g.iter().sum::<f64>() / g.len() as f64
        }
    };
    if a.json {
        let mut means = Map::new();
        for k in keys {
            means.insert(k.into(), json!(mean_gap(k)));
        }
        let out = json!({"units": units(model), "groups": results, "mean_gap_over_optimum": means});
        return emit(None, &(serde_json::to_string_pretty(&out)? + "\n"));
    }
    let mut s = format!(
        "Broadcast latency ({}) vs the exhaustive optimum (gap = latency / optimum - 1)\n{:<26}{:>5}{:>11}{:>7}",
        units(model),
        "cpus",
        "root",
        "optimum",
        "proven"
    );
    for k in keys {
        let _ = write!(s, "{:>19}", k);
    }
    s.push('\n');
    for v in &results {
        let _ = write!(
            s,
            "{:<26}{:>5}{:>11}{:>7}",
            v["cpus"].as_str().unwrap_or(""),
            v["root"],
            t1(v["optimum"].as_f64().unwrap_or(f64::NAN)),
            if v["proven_optimal"].as_bool() == Some(true) {
                "yes"
            } else {
                "no"
            }
        );
        for k in keys {
            let _ = write!(
                s,
                "{:>19}",
                format!(
                    "{} ({})",
                    t1(v[k].as_f64().unwrap_or(f64::NAN)),
                    pct(gap(v, k), 1)
                )
            );
        }
        s.push('\n');
    }
    let _ = write!(s, "{:<49}", "mean gap");
    for k in keys {
        let _ = write!(s, "{:>19}", pct(mean_gap(k), 2));
    }
    s.push('\n');
    emit(None, &s)
}

fn evaluate_models(
    dir: &Path,
    a: &EvaluateArgs,
    topos: &[Topology],
    pl: Payload,
    op: Op,
) -> Result<()> {
    if a.model.is_some() || a.scaling || a.optimum || a.cpus.is_some() || a.root.is_some() {
        bail!("--models compares whole machines; it takes no --model, --cpus, --root, --scaling or --optimum");
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("{}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("json"))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        bail!(
            "{}: no model JSON files (*.json) in this directory",
            dir.display()
        );
    }
    let smelt: Vec<Topology> = topos.iter().copied().filter(|t| !t.is_static()).collect();
    if smelt.is_empty() || smelt.len() == topos.len() {
        bail!("--algos must name at least one static and one smelt (adaptive*/optimized) topology");
    }
    // machine -> (n, best static per op, speedups[smelt][op])
    let mut machines = Vec::new();
    for f in &files {
        let m = load(f)?;
        let all: Vec<usize> = (0..m.len()).collect();
        let rows = evaluate_group(&m, &all, None, topos, pl)
            .map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?;
        let name = f
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let best: Vec<String> = Op::ALL
            .iter()
            .map(|&o| {
                best_static(&rows, o)
                    .map(|b| b.topology.to_string())
                    .unwrap_or_default()
            })
            .collect();
        let sp: Vec<Vec<f64>> = smelt
            .iter()
            .map(|t| {
                let r = rows
                    .iter()
                    .find(|r| r.topology == TreeSource::Generated(*t))
                    .expect("evaluated");
                Op::ALL
                    .iter()
                    .map(|&o| speedup(&rows, r, o).unwrap_or(f64::NAN))
                    .collect()
            })
            .collect();
        machines.push((name, m.len(), best, sp));
    }
    let oi = |o: Op| Op::ALL.iter().position(|&x| x == o).unwrap_or(0);
    let mean = |si: usize, o: usize| {
        let v: Vec<f64> = machines
            .iter()
            .map(|m| m.3[si][o])
            .filter(|x| x.is_finite())
            .collect();
        if v.is_empty() {
            f64::NAN
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    if let Some(plot) = &a.plot {
        let chart = BarChart {
            title: format!("{} speedup over the best static tree", op.name()),
            y_label: "speedup".into(),
            groups: machines
                .iter()
                .map(|m| m.0.clone())
                .chain(["mean".to_string()])
                .collect(),
            series: smelt
                .iter()
                .enumerate()
                .map(|(si, t)| {
                    (
                        t.to_string(),
                        machines
                            .iter()
                            .map(|m| m.3[si][oi(op)])
                            .chain([mean(si, oi(op))])
                            .collect(),
                    )
                })
                .collect(),
            reference: Some(1.0),
        };
        render(&chart, plot).map_err(|e| anyhow::anyhow!("--plot: {e}"))?;
    }
    if a.json {
        let ms: Vec<Value> = machines
            .iter()
            .map(|(name, n, best, sp)| {
                let mut b = Map::new();
                let mut s = Map::new();
                for (k, o) in Op::ALL.iter().enumerate() {
                    b.insert(o.name().into(), json!(best[k]));
                }
                for (si, t) in smelt.iter().enumerate() {
                    let mut m = Map::new();
                    for (k, o) in Op::ALL.iter().enumerate() {
                        m.insert(o.name().into(), json!(sp[si][k]));
                    }
                    s.insert(t.to_string(), Value::Object(m));
                }
                json!({"machine": name, "cpus": n, "best_static": b, "speedup": s})
            })
            .collect();
        let mut means = Map::new();
        for (si, t) in smelt.iter().enumerate() {
            let mut m = Map::new();
            for (k, o) in Op::ALL.iter().enumerate() {
                m.insert(o.name().into(), json!(mean(si, k)));
            }
            means.insert(t.to_string(), Value::Object(m));
        }
        let out = json!({"machines": ms, "mean_speedup": means});
        return emit(None, &(serde_json::to_string_pretty(&out)? + "\n"));
    }
    let mut s = String::from(
        "Speedup of each smelt topology over the best static tree (>1 = faster), per operation\n",
    );
    for (k, o) in Op::ALL.iter().enumerate() {
        let _ = write!(
            s,
            "\n[{}]\n{:<48}{:>5}{:>14}",
            o.name(),
            "machine",
            "cpus",
            "best static"
        );
        for t in &smelt {
            let _ = write!(s, "{:>19}", t.to_string());
        }
        s.push('\n');
        for (name, n, best, sp) in &machines {
            let _ = write!(s, "{:<48}{:>5}{:>14}", truncate(name, 47), n, best[k]);
            for row in sp {
                let _ = write!(s, "{:>19}", ratio(row[k]));
            }
            s.push('\n');
        }
        let _ = write!(s, "{:<67}", "mean");
        for si in 0..smelt.len() {
            let _ = write!(s, "{:>19}", ratio(mean(si, k)));
        }
        s.push('\n');
    }
    emit(None, &s)
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
