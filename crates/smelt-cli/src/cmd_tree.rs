//! `smelt tree`: build one tree from a model and print it (text, JSON tree file,
//! Graphviz, SVG). The helpers shared with `smelt evaluate` (loading, groups, roots,
//! output) live here too.

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use smelt_model::{format_cpu_list, parse_cpu_list, Model};
use smelt_tree::sim::{broadcast_arrivals, predict_local};
use smelt_tree::{Costs, Payload, Pos, Prediction, Topology, Tree};
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
    Examples:\n  smelt tree --model m.json      (auto: the tuned tree, see smelt tune)\n  smelt tree --model m.json --algo mst --cpus 0-7 --root 3\n  \
    smelt tree --model m.json --format svg -o tree.svg\n  smelt tree --model m.json --format json -o t.json   \
    (a tree file for --tree)", smelt_tree::topology::help())
)]
pub struct TreeArgs {
    /// Model JSON file (from `smelt probe` or `smelt import`); default: $SMELT_MODEL,
    /// else this host's cached probe (`smelt probe --cache`), else a uniform model
    /// over the CPUs this process may use (with a notice).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Topology to build. `auto` (the default): SMELT_TUNE, else this host's tuning
    /// file (`smelt tune`), else the simulator's best candidate, for --op and a
    /// message of --lines cache lines (see docs/tune.md).
    #[arg(long, default_value = "auto")]
    pub algo: String,
    /// The operation `--algo auto` picks the tree for.
    #[arg(long, default_value = "broadcast", value_parser = |s: &str| s.parse::<smelt_tree::Op>())]
    pub op: smelt_tree::Op,
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
    /// Say on stderr where the model came from (--model, SMELT_MODEL, this host's
    /// cached probe, or the uniform model).
    #[arg(long, short = 'v')]
    pub verbose: bool,
}

/// Largest `--lines` (a 64 MiB message of 64-byte lines).
pub(crate) const MAX_LINES: u32 = 1 << 20;
/// Largest `--line-factor`.
pub(crate) const MAX_LINE_FACTOR: f64 = 1000.0;

/// Default limit of the Graphviz `dot` run of `--format svg`, seconds.
pub const DOT_TIMEOUT_DEFAULT: f64 = 30.0;
/// Environment variable that changes it.
pub const DOT_TIMEOUT_ENV: &str = smelt_settings::DOT_TIMEOUT;

/// A predicted time for a table: one decimal, scientific notation when huge, `-`
/// when undefined (never `inf` or `NaN`).
pub(crate) fn t1(v: f64) -> String {
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
pub(crate) fn check_finite(p: &Prediction, what: &str) -> Result<()> {
    for v in [p.broadcast, p.ab, p.reduce, p.barrier, p.two_pc] {
        if !v.is_finite() {
            bail!("the predicted time of {what} is not a finite number ({v}); check the model's costs and --lines/--line-factor");
        }
    }
    Ok(())
}

pub(crate) fn payload(lines: u32, factor: f64) -> Result<Payload> {
    Ok(Payload {
        lines,
        extra_line_factor: factor,
    })
}

pub(crate) fn load(path: &Path) -> Result<Model> {
    Model::load(path).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Model positions of the group (`--cpus`, default all), in CPU-list order.
pub(crate) fn group(model: &Model, cpus: Option<&str>) -> Result<Vec<usize>> {
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

pub(crate) fn root_pos(
    model: &Model,
    members: &[usize],
    root: Option<u32>,
) -> Result<Option<usize>> {
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
pub(crate) fn parse_topology(option: &str, s: &str) -> Result<Topology> {
    s.trim()
        .parse::<Topology>()
        .map_err(|e| anyhow::anyhow!("{option}: {e}"))
}

pub(crate) fn units(model: &Model) -> String {
    if model.provenance.units.is_empty() {
        "ns".into()
    } else {
        model.provenance.units.clone()
    }
}

/// Writes a result: to `output` atomically, or to stdout (human text with control
/// characters escaped; JSON, DOT and SVG as they are).
pub(crate) fn emit(output: Option<&Path>, text: &str) -> Result<()> {
    emit_as(output, text, true)
}

pub(crate) fn emit_as(output: Option<&Path>, text: &str, human: bool) -> Result<()> {
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

pub(crate) fn prediction_json(p: &Prediction) -> Value {
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
        let inputs: Vec<&Path> = a.model.as_deref().into_iter().collect();
        crate::common::check_output("-o", o, &inputs)?;
    }
    let topo = parse_topology("--algo", &a.algo)?;
    let pl = payload(a.lines, a.line_factor)?;
    let (model, src) =
        smelt_model::default_model(a.model.as_deref(), None).map_err(|e| anyhow::anyhow!("{e}"))?;
    if a.verbose {
        eprintln!("smelt tree: model: {src}");
    }
    let members = group(&model, a.cpus.as_deref())?;
    let root = root_pos(&model, &members, a.root)?;
    let (topo, auto) = resolve_auto_cli(topo, a.op, a.lines, &model, &members, root)?;
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
            if let Some(r) = &auto {
                v["auto"] = json!({
                    "op": a.op.name(),
                    "choice": r.choice.to_string(),
                    "from": r.origin.to_string(),
                });
            }
            v["units"] = json!(units(&model));
            v["predicted_ns"] = prediction_json(&pred);
            serde_json::to_string_pretty(&v)? + "\n"
        }
        TreeFormat::Text => {
            let mut s = String::new();
            if let Some(r) = &auto {
                let _ = writeln!(
                    s,
                    "auto ({} of {} B): {} from {}",
                    a.op,
                    u64::from(a.lines) * smelt_tree::tuning::LINE_BYTES,
                    r.choice,
                    r.origin
                );
                if r.choice.tree().is_none() {
                    let _ = writeln!(
                        s,
                        "({} is not a tree: a group built with auto runs it over links between the members; below, the tree of its other collectives)",
                        r.choice.algorithm
                    );
                }
            }
            s + &text_drawing(&model, &c, &tree, topo, &pred, &at)
        }
        TreeFormat::Dot => dot(&c, &tree, topo, &at, &units(&model)),
        TreeFormat::Svg => {
            let src = dot(&c, &tree, topo, &at, &units(&model));
            run_dot(&src)?
        }
    };
    emit_as(a.output.as_deref(), &text, a.format == TreeFormat::Text)
}

/// Resolves `auto` for `op` and a message of `lines` cache lines (a refused tuning
/// file is a warning: the prediction is used); other topologies pass through.
pub(crate) fn resolve_auto_cli(
    topo: Topology,
    op: smelt_tree::Op,
    lines: u32,
    model: &Model,
    members: &[usize],
    root: Option<usize>,
) -> Result<(Topology, Option<smelt_tree::tuning::Resolved>)> {
    if topo != Topology::Auto {
        return Ok((topo, None));
    }
    let bytes = u64::from(lines.max(1)) * smelt_tree::tuning::LINE_BYTES;
    let (tree, r) = smelt_tree::tuning::resolve_auto_tree(
        op,
        bytes,
        smelt_tree::tuning::SyncMode::Loose,
        model,
        members,
        root,
    )
    .map_err(|e| anyhow::anyhow!("--algo auto: {e}"))?;
    if let Some(w) = &r.warning {
        crate::common::warn(w);
    }
    Ok((tree, Some(r)))
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
    let secs = smelt_settings::seconds(DOT_TIMEOUT_ENV)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .unwrap_or(DOT_TIMEOUT_DEFAULT);
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
