//! `smelt tune`'s engine: the empirical search over the candidate trees (and fragment
//! sizes) for every operation × message size × group × synchronization mode on this
//! machine ([`measure`]), the fresh re-measurement of a tuning file's choices
//! ([`check`]), the comparison of two files ([`compare`]), the table of a file
//! ([`table`]) and the export to Open MPI's `tuned` dynamic rules ([`export_ompi`]).
//! The CLI's `smelt tune measure|check|predict|compare|export` parse the arguments and
//! print what these return (docs/tune.md).

use anyhow::{bail, Result};
use smelt_model::Model;
use smelt_runtime::measure::{back_to_back_member_with, measure_back_to_back_with, MeasureConfig};
use smelt_runtime::{GroupConfig, Member, Pinning, ReduceOp, SyncMode};
use smelt_tree::tuning::{self, AlgorithmTable, Entry, Source, TuningFile};
use smelt_tree::{Algorithm, Costs, NonTree, Op, Topology, Tree};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

/// What to tune: the synchronization modes, operations, candidates and message sizes.
#[derive(Clone, Debug)]
pub struct Space {
    /// Synchronization modes.
    pub modes: Vec<SyncMode>,
    /// Operations.
    pub ops: Vec<Op>,
    /// Candidate algorithms ([`tuning::parse_candidates`]).
    pub cands: Vec<Algorithm>,
    /// Message sizes in bytes ([`parse_sizes`]).
    pub sizes: Vec<u64>,
}

impl Space {
    /// The space of `--mode` (loose, strict or both), `--ops` (default: every
    /// operation), `--candidates` and `--sizes` ([`parse_sizes`]).
    pub fn parse(
        mode: &str,
        ops: Option<&str>,
        candidates: &str,
        sizes: Option<&str>,
        quick: bool,
    ) -> Result<Space> {
        let modes: Vec<SyncMode> = match mode {
            "both" => SyncMode::ALL.to_vec(),
            m => vec![m
                .parse()
                .map_err(|e: String| anyhow::anyhow!("--mode: {e}"))?],
        };
        let ops = match ops {
            None => Op::RUN.to_vec(),
            Some(s) => s
                .split(',')
                .map(|o| o.parse::<Op>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| anyhow::anyhow!("--ops: {e}"))?,
        };
        let cands = tuning::parse_candidates(candidates)
            .map_err(|e| anyhow::anyhow!("--candidates: {e}"))?;
        Ok(Space {
            modes,
            ops,
            cands,
            sizes: parse_sizes(sizes, quick)?,
        })
    }
}

/// How a measuring run ended.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Cells measured in this run.
    pub done: usize,
    /// Cells kept from the file (`--resume`).
    pub kept: usize,
    /// Cells of the whole plan.
    pub total: usize,
    /// The time limit stopped the run.
    pub stopped: bool,
    /// Seconds the run took.
    pub seconds: f64,
}

/// Measures every cell of `space` on `model` that `file` lacks, saving `file` to
/// `path` after each (so a stopped run keeps what it measured): the tuning of this
/// machine. `limit`: stop measuring after it.
pub fn measure(
    model: &Model,
    file: &mut TuningFile,
    path: &Path,
    space: &Space,
    segments: &[usize],
    quick: bool,
    limit: Option<Duration>,
) -> Result<Outcome> {
    let groups = tuning::default_groups(model);
    let cfg = measure_config(quick);
    let plan = Plan::new(
        model,
        &groups,
        &space.ops,
        &space.sizes,
        &space.modes,
        &space.cands,
        segments,
    )?;
    let todo: Vec<&Cell> = plan
        .cells
        .iter()
        .filter(|c| file.cell(c.mode, c.op, c.group_size, c.bytes).is_none())
        .collect();
    let kept = plan.cells.len() - todo.len();
    let total: u64 = todo
        .iter()
        .map(|c| (c.work(&plan) * passes(quick)) as u64)
        .sum();
    let progress =
        smelt_probe::progress::Progress::new(true, total, "measurements").with_label("smelt tune");
    let start = Instant::now();
    let mut done = 0usize;
    let mut stopped = false;
    for cell in todo {
        if limit.is_some_and(|l| start.elapsed() >= l) {
            stopped = true;
            break;
        }
        progress.step(cell.label());
        let lim = limit.map(|l| (start, l));
        match tune_cell(cell, &plan, &cfg, passes(quick), &progress, lim) {
            Ok(Some(e)) => {
                file.insert(cell.mode, cell.op, cell.group_size, e);
                file.save(path).map_err(|e| anyhow::anyhow!(e))?;
                done += 1;
            }
            Ok(None) => {
                stopped = true;
                break;
            }
            Err(e) => crate::suite::warn(&format!("{}: {e:#}", cell.label())),
        }
    }
    progress.finish();
    if done == 0 && kept == 0 {
        if stopped {
            bail!("the time limit ran out before the first cell was measured; give more time");
        }
        bail!("no cell could be measured (see the warnings above)");
    }
    file.save(path).map_err(|e| anyhow::anyhow!(e))?;
    Ok(Outcome {
        done,
        kept,
        total: plan.cells.len(),
        stopped,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// The tuning file of `space` predicted by the simulator for `model` (any host).
pub fn predict(model: &Model, space: &Space) -> Result<TuningFile> {
    let members: Vec<Vec<usize>> = tuning::default_groups(model)
        .into_iter()
        .map(|g| g.1)
        .collect();
    tuning::tune_predicted(
        model,
        &members,
        &space.ops,
        &space.sizes,
        &space.modes,
        &space.cands,
    )
    .map_err(|e| anyhow::anyhow!(e))
}

/// A new, empty measured tuning file for `model` on this host.
pub fn new_file(model: &Model) -> TuningFile {
    let mut cpus = model.cpus.clone();
    cpus.sort_unstable();
    TuningFile::new(
        &smelt_model::host::host_name(),
        &model.provenance.cpu_model,
        &cpus,
        Source::Measured,
    )
}

/// `--sizes`: a list (8,64,4k) or a range of powers of two (8-64k); default 8-64k, with
/// `quick` 8,512,8k,64k.
pub fn parse_sizes(s: Option<&str>, quick: bool) -> Result<Vec<u64>> {
    let s = match s {
        Some(s) => s,
        None if quick => "8,512,8k,64k",
        None => "8-64k",
    };
    let bad = |e: smelt_tree::tuning::TableError| anyhow::anyhow!("--sizes: {e}");
    let mut v = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (
                    tuning::parse_size(lo).map_err(bad)?,
                    tuning::parse_size(hi).map_err(bad)?,
                );
                v.extend(tuning::powers_of_two(lo, hi));
            }
            None => v.push(tuning::parse_size(part).map_err(bad)?),
        }
    }
    v.sort_unstable();
    v.dedup();
    if v.is_empty() || v[0] == 0 {
        bail!("--sizes: give sizes of at least 1 byte");
    }
    if let Some(big) = v.iter().find(|&&b| b > 1 << 24) {
        bail!("--sizes: {big} bytes is more than the 16 MiB smelt tune measures");
    }
    Ok(v)
}

/// `--segments`: distinct fragment sizes as the runtime rounds them.
pub fn parse_segments(s: &str) -> Result<Vec<usize>> {
    let mut v = Vec::new();
    for p in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let b = tuning::parse_size(p).map_err(|e| anyhow::anyhow!("--segments: {e}"))?;
        let seg = GroupConfig {
            segment: Some(b as usize),
            ..GroupConfig::default()
        }
        .segment_bytes();
        if !v.contains(&seg) {
            v.push(seg);
        }
    }
    Ok(v)
}

fn measure_config(quick: bool) -> MeasureConfig {
    MeasureConfig {
        rounds: if quick { 7 } else { 15 },
        warmup: if quick { 2 } else { 3 },
        batch: Duration::from_millis(if quick { 1 } else { 5 }),
        group: GroupConfig {
            link: smelt_runtime::LinkConfig::default().timeout(Duration::from_secs(20)),
            pinning: Pinning::Auto,
            ..GroupConfig::default()
        },
    }
}

/// One cell to tune.
struct Cell {
    mode: SyncMode,
    op: Op,
    /// Index into [`Plan::groups`].
    group: usize,
    group_size: usize,
    bytes: u64,
}

impl Cell {
    fn label(&self) -> String {
        format!(
            "{} {} n={} {} B",
            self.mode, self.op, self.group_size, self.bytes
        )
    }

    /// Measurements per pass: one per distinct tree, plus the fragment sizes tried
    /// (with the default again).
    fn work(&self, plan: &Plan) -> usize {
        let s = plan.segments_for(self).len();
        plan.trees(self.group, self.op).len() + if s > 0 { s + 1 } else { 0 }
    }
}

/// The groups' distinct trees per operation, and the cells.
struct Plan {
    /// Per group: per operation, the distinct candidate trees, then the non-tree
    /// candidates of the operation (each with the tree the group runs its other
    /// collectives on: the first candidate tree).
    trees: Vec<BTreeMap<Op, Vec<(Algorithm, Tree)>>>,
    cells: Vec<Cell>,
    segments: Vec<usize>,
    default_segment: usize,
}

impl Plan {
    fn new(
        model: &Model,
        groups: &[(String, Vec<usize>)],
        ops: &[Op],
        sizes: &[u64],
        modes: &[SyncMode],
        cands: &[Algorithm],
        segments: &[usize],
    ) -> Result<Plan> {
        let mut trees = Vec::new();
        let mut cells = Vec::new();
        let mut sizes_seen = Vec::new();
        for (gi, (_, members)) in groups.iter().enumerate() {
            let c = Costs::new(model, members).map_err(|e| anyhow::anyhow!("{e}"))?;
            let root = c.default_root();
            let mut per_op = BTreeMap::new();
            for &op in ops {
                let mut ts: Vec<(Algorithm, Tree)> = tuning::distinct_trees(&c, root, cands, op)
                    .into_iter()
                    .map(|(t, ch)| (Algorithm::Tree(t), c.tree(root, ch)))
                    .collect();
                let base = ts
                    .first()
                    .map(|t| t.1.clone())
                    .unwrap_or_else(|| group_tree(&c, root));
                for a in tuning::non_tree_candidates(cands, op) {
                    ts.push((Algorithm::NonTree(a), base.clone()));
                }
                if ts.is_empty() {
                    bail!("--candidates: none of them runs {op}");
                }
                per_op.insert(op, ts);
            }
            trees.push(per_op);
            // Rules are keyed by group size: the first group of a size is tuned.
            if sizes_seen.contains(&members.len()) {
                continue;
            }
            sizes_seen.push(members.len());
            for &mode in modes {
                for &op in ops {
                    for bytes in tuning::sizes_for(op, sizes) {
                        cells.push(Cell {
                            mode,
                            op,
                            group: gi,
                            group_size: members.len(),
                            bytes,
                        });
                    }
                }
            }
        }
        Ok(Plan {
            trees,
            cells,
            segments: segments.to_vec(),
            default_segment: GroupConfig::default().segment_bytes(),
        })
    }

    fn trees(&self, group: usize, op: Op) -> &[(Algorithm, Tree)] {
        self.trees[group].get(&op).map_or(&[], |v| &v[..])
    }

    /// Fragment sizes other than the default worth trying for the cell: those shorter
    /// than the message (or the default's), for operations that carry data.
    fn segments_for(&self, c: &Cell) -> Vec<usize> {
        if !c.op.carries_data() {
            return Vec::new();
        }
        let len = match c.op {
            Op::Gather | Op::Scatter => c.bytes as usize * c.group_size,
            _ => c.bytes as usize,
        };
        if len <= self.segments.iter().copied().min().unwrap_or(usize::MAX) {
            return Vec::new();
        }
        self.segments
            .iter()
            .copied()
            .filter(|&s| s != self.default_segment && (s < len || self.default_segment < len))
            .collect()
    }
}

/// One member's part: `op` on `bytes` per member in `mode`, back to back.
fn member_loop(
    m: &mut Member,
    op: Op,
    mode: SyncMode,
    bytes: usize,
    cfg: &MeasureConfig,
) -> Result<(Vec<f64>, usize), smelt_runtime::GroupError> {
    let n = m.size();
    let root = m.is_root();
    let sync = mode;
    let mut buf = vec![m.rank().index() as u8; bytes];
    let mut all = if root && matches!(op, Op::Gather | Op::Scatter) {
        vec![7u8; bytes * n]
    } else {
        Vec::new()
    };
    let xor = |acc: &mut [u8], o: &[u8]| {
        for (a, b) in acc.iter_mut().zip(o) {
            *a ^= *b;
        }
    };
    back_to_back_member_with(m, cfg, |m| {
        m.with_sync(sync, |m| match op {
            Op::Broadcast | Op::AtomicBroadcast => m.broadcast_into(&mut buf),
            Op::Reduce => m.reduce_bytes(&mut buf, xor).map(|_| ()),
            // The typed call (a predefined operation, as MPI's and C's typed calls): the
            // ring runs only there (a caller's combine may not commute).
            Op::Allreduce => m.allreduce_bytes_op::<u8>(&mut buf, ReduceOp::BitXor),
            Op::Gather => m.gather_bytes(&buf, &mut all).map(|_| ()),
            Op::Scatter => m.scatter_bytes(&all, &mut buf),
            Op::Barrier | Op::TwoPhaseCommit => smelt_runtime::measure::run_once(op, m),
        })
    })
}

/// The tree a group runs beside a non-tree candidate when no tree is a candidate:
/// the binomial tree.
fn group_tree(c: &Costs, root: usize) -> Tree {
    c.tree(root, Topology::Knomial(2).children(c, root))
}

/// Median ns of `op` by `alg` (over `tree`, or for a non-tree algorithm over links
/// between all members beside it) with fragments of `segment` bytes.
fn measure_one(
    tree: &Tree,
    alg: Algorithm,
    op: Op,
    mode: SyncMode,
    bytes: u64,
    segment: Option<usize>,
    cfg: &MeasureConfig,
) -> Result<f64> {
    let mut cfg = cfg.clone();
    cfg.group.segment = segment;
    if alg.non_tree().is_some() {
        let table = AlgorithmTable::fixed(op, alg).map_err(|e| anyhow::anyhow!(e))?;
        cfg.group.algorithms = Some(std::sync::Arc::new(table));
    }
    if tree.len() > smelt_transport::allowed_cpus().map_or(1, |c| c.len()) {
        cfg.group.pinning = Pinning::Never;
    }
    let r = measure_back_to_back_with(tree, &cfg, |m| {
        member_loop(m, op, mode, bytes as usize, &cfg)
    })?;
    Ok(r.stats.median)
}

/// One configuration of a cell: a tree (index into the cell's trees) and a fragment
/// size (`None`: the runtime's default).
type Config = (usize, Option<usize>);

/// Measures `configs` in `passes` interleaved passes (every configuration once per
/// pass, so slow drifts of the machine hit all alike); a configuration's figure is
/// the median of its passes. `Ok(None)`: the time limit ran out. A configuration that
/// fails is warned about and left out (`None`).
fn measure_configs(
    cell: &Cell,
    trees: &[(Algorithm, Tree)],
    configs: &[Config],
    cfg: &MeasureConfig,
    passes: usize,
    progress: &smelt_probe::progress::Progress,
    over: &dyn Fn() -> bool,
) -> Result<Option<Vec<Option<f64>>>> {
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
    let mut failed = vec![false; configs.len()];
    for _ in 0..passes {
        for (i, &(ti, seg)) in configs.iter().enumerate() {
            if over() {
                return Ok(None);
            }
            if !failed[i] {
                let (t, tree) = &trees[ti];
                match measure_one(tree, *t, cell.op, cell.mode, cell.bytes, seg, cfg) {
                    Ok(v) => samples[i].push(v),
                    Err(e) => {
                        failed[i] = true;
                        crate::suite::warn(&format!(
                            "{} {}: {e:#}",
                            cell.label(),
                            config_name(*t, seg)
                        ));
                    }
                }
            }
            progress.inc();
        }
    }
    Ok(Some(
        samples
            .iter()
            .zip(&failed)
            // The plain median of the passes' figures (no outlier rejection: there are 3 or 5).
            .map(|(s, &f)| (!f && !s.is_empty()).then(|| crate::stats::median(s)))
            .collect(),
    ))
}

/// `tree` or `tree,segment=N`, as the candidates of a tuning file name them.
fn config_name(t: Algorithm, seg: Option<usize>) -> String {
    match seg {
        Some(s) => format!("{t},segment={s}"),
        None => t.to_string(),
    }
}

/// Measurement passes per configuration.
fn passes(quick: bool) -> usize {
    if quick {
        3
    } else {
        5
    }
}

/// Measures one cell: every distinct tree with the default fragment size, then the
/// best tree with each other fragment size (and the default again, interleaved with
/// them). `Ok(None)`: the time limit ran out.
fn tune_cell(
    cell: &Cell,
    plan: &Plan,
    cfg: &MeasureConfig,
    passes: usize,
    progress: &smelt_probe::progress::Progress,
    limit: Option<(Instant, Duration)>,
) -> Result<Option<Entry>> {
    let over = || limit.is_some_and(|(s, l)| s.elapsed() >= l);
    let trees = plan.trees(cell.group, cell.op);
    let configs: Vec<Config> = (0..trees.len()).map(|i| (i, None)).collect();
    let Some(first) = measure_configs(cell, trees, &configs, cfg, passes, progress, &over)? else {
        return Ok(None);
    };
    let mut cands = BTreeMap::new();
    let mut best: Option<(Config, f64)> = None;
    for (&c, v) in configs.iter().zip(&first) {
        if let Some(v) = *v {
            cands.insert(config_name(trees[c.0].0, c.1), v);
            if best.is_none_or(|b| v < b.1) {
                best = Some((c, v));
            }
        }
    }
    let Some(((bt, _), _)) = best else {
        bail!("every candidate failed");
    };
    // Fragment sizes are a tree's (a non-tree algorithm sends pieces of a link message).
    let segs = if trees[bt].0.tree().is_some() {
        plan.segments_for(cell)
    } else {
        Vec::new()
    };
    if !segs.is_empty() {
        let mut configs: Vec<Config> = vec![(bt, None)];
        configs.extend(segs.iter().map(|&s| (bt, Some(s))));
        let Some(second) = measure_configs(cell, trees, &configs, cfg, passes, progress, &over)?
        else {
            return Ok(None);
        };
        // The best tree's variants, measured side by side, decide the fragment size.
        best = None;
        for (&c, v) in configs.iter().zip(&second) {
            if let Some(v) = *v {
                cands.insert(config_name(trees[c.0].0, c.1), v);
                if best.is_none_or(|b| v < b.1) {
                    best = Some((c, v));
                }
            }
        }
    }
    let Some(((ti, segment), v)) = best else {
        bail!("every fragment size failed");
    };
    Ok(Some(Entry {
        bytes: cell.bytes,
        algo: trees[ti].0.to_string(),
        segment,
        median_ns: v,
        candidates: cands,
    }))
}

/// The choices of a tuning file, one line per cell.
pub fn table(f: &TuningFile) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "tuning of {} ({}, {} CPUs {}), smelt {}",
        f.host,
        match f.source {
            Source::Measured => "measured",
            Source::Predicted => "predicted",
        },
        smelt_model::parse_cpu_list(&f.cpus).map_or(0, |v| v.len()),
        f.cpus,
        f.smelt_version
    );
    let _ = writeln!(
        s,
        "{:<7} {:<10} {:>5} {:>8}  {:<26} {:>12}  {:>10}",
        "mode", "op", "n", "bytes", "choice", "median (ns)", "candidates"
    );
    for (mode, op, g, e) in f.cells() {
        let choice = match e.segment {
            Some(seg) => format!("{},segment={seg}", e.algo),
            None => e.algo.clone(),
        };
        let _ = writeln!(
            s,
            "{:<7} {:<10} {:>5} {:>8}  {:<26} {:>12.1}  {:>10}",
            mode.name(),
            op.name(),
            g,
            e.bytes,
            choice,
            e.median_ns,
            e.candidates.len()
        );
    }
    s
}

/// `smelt tune check`: re-measures every cell of `f` present in `model`'s groups, in a
/// fresh run: every distinct candidate tree with the default fragments, the file's
/// choice's tree with each fragment size (so the file's choice, as `auto` runs it, is
/// among them), interleaved; a cell passes when the choice is within 5 % of the best.
/// Returns the report: one line per cell and the share that passed.
pub fn check(
    f: &TuningFile,
    model: &Model,
    cands: &[Algorithm],
    segments: &[usize],
    quick: bool,
    limit: Option<Duration>,
) -> Result<String> {
    let groups = &tuning::default_groups(model);
    let cfg = &measure_config(quick);
    let passes = passes(quick);
    let cells: Vec<(SyncMode, Op, usize, Entry)> = f
        .cells()
        .filter(|(_, _, g, _)| groups.iter().any(|(_, m)| m.len() == *g))
        .map(|(m, o, g, e)| (m, o, g, e.clone()))
        .collect();
    if cells.is_empty() {
        bail!("the tuning file has no cell for this machine's groups");
    }
    let ops: Vec<Op> = {
        let mut v: Vec<Op> = cells.iter().map(|c| c.1).collect();
        v.sort();
        v.dedup();
        v
    };
    let plan = Plan::new(
        model,
        groups,
        &ops,
        &[8],
        &[SyncMode::Loose],
        cands,
        segments,
    )?;
    // Per cell: its trees (the candidates', plus the file's choice if it is not one)
    // and configurations; the index of the file's choice.
    let work = cells
        .iter()
        .map(|(mode, op, g, e)| check_cell(model, groups, &plan, (*mode, *op, *g), e))
        .collect::<Result<Vec<_>>>()?;
    let total: u64 = work.iter().map(|w| (w.2.len() * passes) as u64).sum();
    let progress = smelt_probe::progress::Progress::new(true, total, "measurements")
        .with_label("smelt tune check");
    let start = Instant::now();
    let over = || limit.is_some_and(|l| start.elapsed() >= l);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<7} {:<10} {:>5} {:>8}  {:<26} {:>11}  {:<26} {:>11}  {:>6}",
        "mode", "op", "n", "bytes", "choice", "choice ns", "best now", "best ns", "ratio"
    );
    let (mut pass, mut checked) = (0usize, 0usize);
    for (cell, trees, configs, choice, e) in &work {
        progress.step(cell.label());
        let Some(v) = measure_configs(cell, trees, configs, cfg, passes, &progress, &over)? else {
            break;
        };
        let Some(cv) = v[*choice] else {
            crate::suite::warn(&format!(
                "{}: the choice could not be measured",
                cell.label()
            ));
            continue;
        };
        let (bi, bv) = v
            .iter()
            .enumerate()
            .filter_map(|(i, x)| x.map(|x| (i, x)))
            .fold((*choice, cv), |b, x| if x.1 < b.1 { x } else { b });
        let ratio = cv / bv;
        checked += 1;
        if ratio <= 1.05 {
            pass += 1;
        }
        let name = |i: usize| config_name(trees[configs[i].0].0, configs[i].1);
        let _ = writeln!(
            out,
            "{:<7} {:<10} {:>5} {:>8}  {:<26} {:>11.1}  {:<26} {:>11.1}  {:>6.3}",
            cell.mode.name(),
            cell.op.name(),
            cell.group_size,
            e.bytes,
            name(*choice),
            cv,
            name(bi),
            bv,
            ratio
        );
    }
    progress.finish();
    if checked == 0 {
        bail!("no cell could be re-measured (time limit too short?)");
    }
    let _ = writeln!(
        out,
        "within 5 % of the best candidate: {pass} of {checked} cells ({:.1} %){}",
        100.0 * pass as f64 / checked as f64,
        if checked < cells.len() {
            format!("; {} cells not checked (time limit)", cells.len() - checked)
        } else {
            String::new()
        }
    );
    Ok(out)
}

/// One cell of `check`: its trees (the candidates', plus the file's choice if it is
/// not one), the configurations measured, and the index of the file's choice.
type CheckCell = (Cell, Vec<(Algorithm, Tree)>, Vec<Config>, usize, Entry);

/// The [`CheckCell`] of the file's entry `e` for `(mode, op, group size)`.
fn check_cell(
    model: &Model,
    groups: &[(String, Vec<usize>)],
    plan: &Plan,
    (mode, op, g): (SyncMode, Op, usize),
    e: &Entry,
) -> Result<CheckCell> {
    let gi = groups.iter().position(|(_, m)| m.len() == g).unwrap_or(0);
    let mut trees: Vec<(Algorithm, Tree)> = plan.trees(gi, op).to_vec();
    let chosen: Algorithm = e.algo.parse().map_err(|x: String| anyhow::anyhow!(x))?;
    let c = Costs::new(model, &groups[gi].1).map_err(|x| anyhow::anyhow!("{x}"))?;
    let root = c.default_root();
    let ti = match chosen {
        Algorithm::Tree(t) => {
            let shape = t.children(&c, root);
            match trees
                .iter()
                .position(|(a, t)| a.tree().is_some() && t.child_indices() == shape)
            {
                Some(i) => i,
                None => {
                    trees.push((chosen, c.tree(root, shape)));
                    trees.len() - 1
                }
            }
        }
        Algorithm::NonTree(_) => match trees.iter().position(|(a, _)| *a == chosen) {
            Some(i) => i,
            None => {
                let t = group_tree(&c, root);
                trees.push((chosen, t));
                trees.len() - 1
            }
        },
    };
    let cell = Cell {
        mode,
        op,
        group: gi,
        group_size: g,
        bytes: e.bytes,
    };
    let mut configs: Vec<Config> = (0..trees.len()).map(|i| (i, None)).collect();
    let mut segs = plan.segments_for(&cell);
    segs.extend(e.segment);
    for s in segs {
        if !configs.contains(&(ti, Some(s))) {
            configs.push((ti, Some(s)));
        }
    }
    let choice = configs
        .iter()
        .position(|&c| c == (ti, e.segment))
        .expect("the choice is one of the configurations");
    Ok((cell, trees, configs, choice, e.clone()))
}

/// `smelt tune compare`: cells of both files; how often `other`'s choice is `f`'s, and (where
/// `f` measured `other`'s choice) how far it is from `f`'s best.
pub fn compare(f: &TuningFile, other: &TuningFile) -> String {
    let (mut both, mut same, mut within, mut rated) = (0usize, 0usize, 0usize, 0usize);
    let mut s = String::new();
    for (mode, op, g, e) in f.cells() {
        let Some(o) = other.cell(mode, op, g, e.bytes) else {
            continue;
        };
        both += 1;
        if o.algo == e.algo {
            same += 1;
        }
        if let Some(v) = e.candidates.get(&o.algo) {
            let best = e
                .candidates
                .iter()
                .filter(|(k, _)| !k.contains(",segment="))
                .map(|(_, v)| *v)
                .fold(f64::INFINITY, f64::min);
            rated += 1;
            if *v <= best * 1.05 {
                within += 1;
            }
        }
        if o.algo != e.algo {
            let _ = writeln!(
                s,
                "{mode} {op} n={g} {} B: {} vs {}",
                e.bytes, e.algo, o.algo
            );
        }
    }
    let pct = |a: usize, b: usize| {
        if b == 0 {
            0.0
        } else {
            100.0 * a as f64 / b as f64
        }
    };
    let _ = writeln!(
        s,
        "cells in both files: {both}; same tree: {same} ({:.1} %); the other file's tree within 5 % of this file's best tree (default fragments): {within} of {rated} ({:.1} %)",
        pct(same, both),
        pct(within, rated)
    );
    s
}

/// Open MPI `tuned` collective id and algorithm (id, fan-in/out) of a smelt algorithm:
/// the nearest to a tree ([`ompi_algorithm`]); the dissemination barrier is Open
/// MPI's barrier 4 (bruck: the same rounds), recursive doubling its allreduce 3,
/// Rabenseifner its allreduce 6, the ring its allreduce 4.
pub fn ompi_for(op: Op, a: Algorithm, group: usize) -> Option<(u32, u32, u32)> {
    match a {
        Algorithm::Tree(t) => ompi_algorithm(op, t, group),
        Algorithm::NonTree(NonTree::Dissemination) => Some((6, 4, 0)),
        Algorithm::NonTree(NonTree::RecursiveDoubling) => Some((2, 3, 0)),
        Algorithm::NonTree(NonTree::Rabenseifner) => Some((2, 6, 0)),
        Algorithm::NonTree(NonTree::Ring) => Some((2, 4, 0)),
    }
}

/// Open MPI `tuned` collective id and the algorithm (id, fan-in/out) nearest to a
/// smelt tree, per operation (docs/tune.md has the table). `None`: no Open MPI
/// counterpart (2PC).
pub fn ompi_algorithm(op: Op, t: Topology, group: usize) -> Option<(u32, u32, u32)> {
    let radix = match t {
        Topology::Knomial(k) => Some(k),
        _ => None,
    };
    let seq = t == Topology::Sequential;
    Some(match op {
        // bcast (7): 1 basic_linear, 2 chain, 5 binary_tree, 6 binomial, 7 knomial.
        Op::Broadcast | Op::AtomicBroadcast => match (seq, radix) {
            (true, _) => (7, 1, 0),
            (_, Some(1)) => (7, 2, 1),
            (_, Some(2)) => (7, 6, 0),
            (_, Some(k)) => (7, 7, k),
            _ if t == Topology::Binary
                || matches!(t, Topology::Fibonacci | Topology::Mst | Topology::Cluster) =>
            {
                (7, 5, 0)
            }
            _ => (7, 6, 0),
        },
        // reduce (11): 1 linear, 2 chain, 4 binary, 5 binomial, 8 knomial.
        Op::Reduce => match (seq, radix) {
            (true, _) => (11, 1, 0),
            (_, Some(1)) => (11, 2, 1),
            (_, Some(2)) => (11, 5, 0),
            (_, Some(k)) => (11, 8, k),
            _ if matches!(
                t,
                Topology::Binary | Topology::Fibonacci | Topology::Mst | Topology::Cluster
            ) =>
            {
                (11, 4, 0)
            }
            _ => (11, 5, 0),
        },
        // allreduce (2): 1 basic_linear (reduce + bcast, linear), 2 nonoverlapping
        // (reduce then bcast, each by its own rules).
        Op::Allreduce => (2, if seq { 1 } else { 2 }, 0),
        // barrier (6): 1 linear, 5 two_proc, 6 tree.
        Op::Barrier => (
            6,
            if seq {
                1
            } else if group == 2 {
                5
            } else {
                6
            },
            0,
        ),
        // gather (9) and scatter (15): 1 basic_linear, 2 binomial.
        Op::Gather => (9, if seq { 1 } else { 2 }, 0),
        Op::Scatter => (15, if seq { 1 } else { 2 }, 0),
        Op::TwoPhaseCommit => return None,
    })
}

/// One Open MPI message size rule: from size, algorithm, fan-in/out, segment size.
type OmpiRule = (u64, u32, u32, usize);

/// The tuning file's loose rules (strict ones where it has no loose ones) as an Open
/// MPI classic dynamic rules file (`coll_tuned_dynamic_rules_filename`, format
/// version 1): collectives, communicator sizes, message sizes → algorithm, fan-in/out,
/// segment size. Message sizes are Open MPI's (gather: × communicator size); a rule
/// starts just above the geometric middle between two tuned sizes (the first at 0), so Open
/// MPI's "largest rule size not above the message" picks the nearest tuned size.
pub fn export_ompi(f: &TuningFile) -> Result<String> {
    let mode = if f.rules.contains_key("loose") {
        "loose"
    } else {
        "strict"
    };
    let Some(rules) = f.rules.get(mode) else {
        bail!("the tuning file has no rules");
    };
    // collective id → comm size → [(msg size, alg, faninout, segsize)]
    let mut out: BTreeMap<u32, BTreeMap<usize, Vec<OmpiRule>>> = BTreeMap::new();
    for (op, groups) in rules {
        let op: Op = op.parse().map_err(|e: String| anyhow::anyhow!(e))?;
        for (&g, entries) in groups {
            let mut list = Vec::new();
            let mut prev: Option<u64> = None;
            for e in entries {
                let a: Algorithm = e.algo.parse().map_err(|x: String| anyhow::anyhow!(x))?;
                let Some((coll, alg, fan)) = ompi_for(op, a, g) else {
                    continue;
                };
                let size = match op {
                    Op::Gather => e.bytes * g as u64,
                    _ => e.bytes,
                };
                let from = match prev {
                    None => 0,
                    Some(p) => (p.max(1) as f64 * size.max(1) as f64).sqrt().floor() as u64 + 1,
                };
                prev = Some(size);
                let seg = match op {
                    Op::Broadcast | Op::Reduce => e.segment.unwrap_or(0),
                    _ => 0,
                };
                // Merge equal neighbours.
                if list
                    .last()
                    .is_some_and(|l: &OmpiRule| (l.1, l.2, l.3) == (alg, fan, seg))
                {
                    continue;
                }
                debug_assert!(
                    coll == ompi_algorithm(op, Topology::Sequential, g).map_or(0, |x| x.0)
                );
                list.push((from, alg, fan, seg));
            }
            if let Some(coll) = ompi_algorithm(op, Topology::Sequential, g).map(|x| x.0) {
                if !list.is_empty() {
                    out.entry(coll).or_default().insert(g, list);
                }
            }
        }
    }
    out.retain(|_, v| !v.is_empty());
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}   # collectives (smelt tune of {}, {mode} rules; smelt {})",
        out.len(),
        f.host,
        f.smelt_version
    );
    for (coll, sizes) in &out {
        let _ = writeln!(s, "{coll}   # collective id");
        let _ = writeln!(s, "{}   # comm sizes", sizes.len());
        for (g, rules) in sizes {
            let _ = writeln!(s, "{g}   # comm size");
            let _ = writeln!(s, "{}   # message sizes", rules.len());
            for (from, alg, fan, seg) in rules {
                let _ = writeln!(s, "{from} {alg} {fan} {seg}");
            }
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses the classic rules format back: every count matches, rules ascend from 0.
    pub(crate) fn parse_ompi(text: &str) -> Vec<(u32, usize, Vec<[u64; 4]>)> {
        let mut nums = text
            .lines()
            .map(|l| l.split('#').next().unwrap().trim())
            .filter(|l| !l.is_empty());
        let mut next = || nums.next().expect("more lines");
        let n: usize = next().parse().unwrap();
        let mut out = Vec::new();
        for _ in 0..n {
            let coll: u32 = next().parse().unwrap();
            let sizes: usize = next().parse().unwrap();
            for _ in 0..sizes {
                let g: usize = next().parse().unwrap();
                let k: usize = next().parse().unwrap();
                let mut rules = Vec::new();
                for _ in 0..k {
                    let v: Vec<u64> = next()
                        .split_whitespace()
                        .map(|x| x.parse().unwrap())
                        .collect();
                    assert_eq!(v.len(), 4);
                    rules.push([v[0], v[1], v[2], v[3]]);
                }
                assert_eq!(rules[0][0], 0);
                assert!(rules.windows(2).all(|w| w[0][0] < w[1][0]));
                out.push((coll, g, rules));
            }
        }
        out
    }

    #[test]
    fn export_maps_trees_and_parses_back() {
        let mut f = TuningFile::new("h", "", &[0, 1, 2, 3, 4, 5, 6, 7], Source::Measured);
        let e = |bytes, algo: &str, segment| Entry {
            bytes,
            algo: algo.into(),
            segment,
            median_ns: 1.0,
            candidates: BTreeMap::new(),
        };
        f.insert(SyncMode::Loose, Op::Broadcast, 8, e(8, "knomial:4", None));
        f.insert(SyncMode::Loose, Op::Broadcast, 8, e(64, "knomial:4", None));
        f.insert(
            SyncMode::Loose,
            Op::Broadcast,
            8,
            e(4096, "knomial:1", Some(768)),
        );
        f.insert(SyncMode::Loose, Op::Reduce, 8, e(8, "sequential", None));
        f.insert(SyncMode::Loose, Op::Reduce, 4, e(8, "binary", None));
        f.insert(SyncMode::Loose, Op::TwoPhaseCommit, 8, e(0, "binary", None));
        f.insert(SyncMode::Loose, Op::Gather, 8, e(8, "adaptive", None));
        f.insert(SyncMode::Loose, Op::Gather, 8, e(64, "sequential", None));
        let text = export_ompi(&f).unwrap();
        let p = parse_ompi(&text);
        let get = |c: u32, g: usize| p.iter().find(|x| x.0 == c && x.1 == g).unwrap().2.clone();
        assert_eq!(get(7, 8), vec![[0, 7, 4, 0], [513, 2, 1, 768]]);
        assert_eq!(get(11, 8), vec![[0, 1, 0, 0]]);
        assert_eq!(get(11, 4), vec![[0, 4, 0, 0]]);
        assert_eq!(get(9, 8), vec![[0, 2, 0, 0], [182, 1, 0, 0]]);
        assert_eq!(p.len(), 4); // no 2PC
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_sizes(None, true).unwrap(), vec![8, 512, 8192, 65536]);
        assert_eq!(parse_sizes(None, false).unwrap().len(), 14);
        assert_eq!(
            parse_sizes(Some("64,8-32"), false).unwrap(),
            vec![8, 16, 32, 64]
        );
        assert!(parse_sizes(Some("0"), false).is_err());
        assert!(parse_sizes(Some("x"), false).is_err());
        assert!(parse_sizes(Some("1G"), false).is_err());
    }
}
