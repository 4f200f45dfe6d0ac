//! `smelt bench collectives` (and `smelt bench processes`): smelt's collectives over
//! every topology on this machine, next to the simulator's predictions, smelt's
//! transport, and the peers a user would pick instead (pthread, OpenMP, a dissemination
//! barrier, a UMP ring, rtrb, crossbeam, Open MPI), all in one run and each figure
//! paired with a raw cache-line floor taken right before and after it, so that ratios
//! stay meaningful on a machine whose core-to-core latency drifts.

use super::report::{Collective, Figure, FloorInfo, Ratio, Report};
use super::smelt;
use super::{Common, SMELT_TREE};
use anyhow::{bail, Result};
use smelt_model::{format_cpu_list, Model};
use smelt_peers::{c::CPeers, rust as rpeers};
use smelt_probe::figure::{Metric, PeerResult, Status};
use smelt_probe::Budget;
use smelt_tree::{Op, Topology, Tree};
use std::path::PathBuf;
use std::time::Duration;

/// The options of `smelt bench collectives`.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Quick runs, the timeout per figure, the bound on the whole run.
    pub common: Common,
    /// Members of the collective groups (default: one per CPU of the model).
    pub threads: Option<usize>,
    /// Operations ([`parse_ops`]; empty: broadcast, reduce, barrier, 2pc).
    pub ops: Vec<Op>,
    /// Topologies ([`parse_topologies`]; empty: every static tree and smelt's).
    pub topologies: Vec<Topology>,
    /// Tree files to measure too (from `smelt tree --format json`).
    pub trees: Vec<PathBuf>,
    /// Rounds per collective figure (default 1000, 200 quick).
    pub rounds: Option<usize>,
    /// Thread counts of the comparison with the peers (default 2, 8, 16; 2, 8 quick).
    pub peer_threads: Vec<usize>,
    /// Leave the peers out.
    pub no_peers: bool,
    /// Also smelt's collectives with members as processes.
    pub processes: bool,
    /// Say on stderr what `auto` picked for each headline row.
    pub verbose: bool,
    /// When the run began, for the time limit (default: when [`measure`] is called;
    /// the CLI starts it before loading, or probing, the model).
    pub started: Option<std::time::Instant>,
}

/// The operations of `--ops`: smelt's one vocabulary; "ab" is the broadcast (measured
/// the paper's way it already ends with the completion message). Empty: broadcast,
/// reduce, barrier, 2pc.
pub fn parse_ops(names: &[String]) -> Result<Vec<Op>> {
    if names.is_empty() {
        return Ok(vec![
            Op::Broadcast,
            Op::Reduce,
            Op::Barrier,
            Op::TwoPhaseCommit,
        ]);
    }
    names.iter().map(|s| parse_op(s)).collect()
}

/// The topologies of `--topologies` (`smelt tree --algo` names). Empty: every static
/// tree and smelt's.
pub fn parse_topologies(names: &[String]) -> Result<Vec<Topology>> {
    if names.is_empty() {
        return Ok(default_topologies());
    }
    names
        .iter()
        .map(|s| {
            s.parse::<Topology>()
                .map_err(|e| anyhow::anyhow!("option --topologies: {e}"))
        })
        .collect()
}

/// An `--ops` name (smelt's one vocabulary). "ab" is the broadcast: measured the
/// paper's way it already ends with the completion message.
fn parse_op(s: &str) -> Result<Op> {
    match s.parse::<Op>() {
        Ok(Op::AtomicBroadcast) => Ok(Op::Broadcast),
        Ok(op) => Ok(op),
        Err(e) => bail!("option --ops: {e}"),
    }
}

/// Default topologies: the static trees and smelt's.
fn default_topologies() -> Vec<Topology> {
    Topology::EVALUATED.to_vec()
}

/// Floors measured during the run.
struct Floors {
    a: u32,
    b: u32,
    budget: Budget,
    all: Vec<f64>,
    /// Progress on stderr: one step per figure group.
    progress: smelt_probe::progress::Progress,
    /// When the run's --time-limit is reached.
    deadline: std::time::Instant,
}

impl Floors {
    /// The run's time budget is spent: measure nothing more.
    fn over(&self) -> bool {
        std::time::Instant::now() >= self.deadline
    }

    fn take(&mut self) -> Option<f64> {
        let (a, b) = (smelt_mesh::CpuId(self.a), smelt_mesh::CpuId(self.b));
        let s = smelt_peers::floor::pingpong(a, b, &self.budget).ok()?;
        self.all.push(s.median);
        Some(s.median)
    }

    /// Runs `f` between two floor measurements; returns its result and the mean floor.
    fn around<T>(&mut self, f: impl FnOnce() -> T) -> (T, Option<f64>) {
        let f0 = self.take();
        let r = f();
        let f1 = self.take();
        self.progress.inc();
        let floor = match (f0, f1) {
            (Some(x), Some(y)) => Some((x + y) / 2.0),
            (x, y) => x.or(y),
        };
        (r, floor)
    }

    /// One figure, or none once the time budget is spent.
    fn figure(&mut self, f: impl FnOnce() -> PeerResult) -> Option<Figure> {
        self.figures(|| vec![f()]).pop()
    }

    /// The figures of one run, or none once the time budget is spent.
    fn figures(&mut self, f: impl FnOnce() -> Vec<PeerResult>) -> Vec<Figure> {
        if self.over() {
            self.progress.inc();
            return Vec::new();
        }
        let (peers, floor) = self.around(f);
        if let Some(p) = peers.first() {
            self.progress
                .step(format!("{} ({} threads)", p.name, p.threads));
        }
        peers
            .into_iter()
            .map(|peer| Figure {
                vs_floor: vs_floor(peer.median(), floor),
                peer,
                floor_ns: floor,
                flattened: false,
                mode: "threads",
                auto: None,
            })
            .collect()
    }

    /// smelt's figure with members as processes (see
    /// [`smelt::Smelt::process_figure`]).
    fn process_figure(&mut self, sm: &smelt::Smelt, procs: usize, op: Op) -> Option<Figure> {
        let mut pick = None;
        let mut f = self.figure(|| {
            let (r, p) = sm.process_figure(procs, op);
            pick = p;
            r
        })?;
        f.flattened = f.peer.name.contains("flattened");
        f.mode = "processes";
        f.auto = pick;
        Some(f)
    }

    /// smelt's figure for the peer comparison: the default, `auto` (see
    /// [`smelt::Smelt::peer_figure`]).
    fn smelt_figure(&mut self, sm: &smelt::Smelt, threads: usize, op: Op) -> Option<Figure> {
        let mut flattened = false;
        let mut pick = None;
        let mut f = self.figure(|| {
            let (r, fl, p) = sm.peer_figure(threads, op);
            flattened = fl;
            pick = p;
            r
        })?;
        f.flattened = flattened;
        f.auto = pick;
        Some(f)
    }
}

/// A figure as a multiple of its floor.
fn vs_floor(median: Option<f64>, floor: Option<f64>) -> Option<f64> {
    match (median, floor) {
        (Some(m), Some(fl)) if fl > 0.0 => Some(m / fl),
        _ => None,
    }
}

/// Measures `smelt bench collectives` on `model` (restricted to the CPUs to use;
/// `model_src` says where it came from).
pub fn measure(o: &Options, model: &Model, model_src: String) -> Result<Report> {
    let a = &o.common;
    let started = o.started.unwrap_or_else(std::time::Instant::now);
    let ops = if o.ops.is_empty() {
        parse_ops(&[])?
    } else {
        o.ops.clone()
    };
    let topologies = if o.topologies.is_empty() {
        default_topologies()
    } else {
        o.topologies.clone()
    };
    let timeout_s = a.timeout.unwrap_or(if a.quick { 20.0 } else { 60.0 });
    let limit_s = a.time_limit.unwrap_or(if a.quick { 300.0 } else { 900.0 });
    let file_trees = load_tree_files(&o.trees, model)?;
    let cpus = model.cpus.clone();
    let members = o.threads.unwrap_or(cpus.len());
    let rounds = o.rounds.unwrap_or(if a.quick { 200 } else { 1000 });
    let timeout = Duration::from_secs_f64(timeout_s);
    let budget = Budget {
        batch: Duration::from_millis(if a.quick { 2 } else { 20 }),
        runs: if a.quick { 5 } else { 11 },
        timeout,
    };
    let peer_threads = if o.peer_threads.is_empty() {
        if a.quick {
            vec![2, 8]
        } else {
            vec![2, 8, 16]
        }
    } else {
        o.peer_threads.clone()
    };
    let (fa, fb) = (cpus[0], *cpus.get(1).unwrap_or(&cpus[0]));
    let mut floors = Floors {
        a: fa,
        b: fb,
        budget: Budget {
            batch: Duration::from_micros(500),
            runs: 5,
            timeout,
        },
        all: Vec::new(),
        progress: smelt_probe::progress::Progress::new(
            true,
            ((topologies.len() + file_trees.len()) * ops.len() + 10 + 7 * (peer_threads.len() + 1))
                as u64,
            "figures",
        )
        .with_label("smelt bench"),
        deadline: started + Duration::from_secs_f64(limit_s),
    };
    let sm = smelt::Smelt {
        model,
        rounds,
        runs: budget.runs,
        batch: budget.batch,
        timeout,
    };

    // 1. smelt's collectives over every topology, the trees as given.
    let runs = tree_runs(&sm, &topologies, &file_trees, &ops, members);
    let collectives = measure_collectives(&sm, &mut floors, runs, &ops, limit_s);

    // 2. Transport and 3. collectives vs the peers.
    let cpeers = CPeers::new(smelt_peers::c::default_cache_dir());
    let transport = measure_transport(&cpeers, &mut floors, &budget, fa, fb, o.no_peers);
    let peers = measure_peers(&sm, &cpeers, &mut floors, &cpus, &peer_threads, &budget, o);

    floors.progress.finish();
    if o.verbose {
        say_auto(&peers);
    }
    let ratios = ratios(&collectives, &transport, &peers, members);
    let cut_short = floors.over();
    let warnings = warnings(&peers, members, cpus.len(), cut_short.then_some(limit_s));
    let mut all = floors.all.clone();
    all.sort_by(f64::total_cmp);
    let floor = FloorInfo {
        cpus: [fa, fb],
        median_ns: smelt_tree::stats::median_sorted(&all),
        min_ns: all.first().copied().unwrap_or(f64::NAN),
        max_ns: all.last().copied().unwrap_or(f64::NAN),
        probes: all.len(),
    };
    let report = Report {
        tool: format!("smelt {}", env!("CARGO_PKG_VERSION")),
        date: smelt_model::host::now_rfc3339(),
        host: smelt_model::host::host_name(),
        cpu_model: smelt_model::host::cpu_model_from_proc().unwrap_or_else(|| "unknown".into()),
        model: model_src,
        cpus,
        members,
        rounds,
        quick: a.quick,
        floor,
        collectives,
        transport,
        peers,
        ratios,
        warnings,
        cut_short,
    };
    Ok(report)
}

/// The trees of the topology table: every topology as given; with more members than
/// CPUs, also smelt's tree run flattened (`flatten_oversubscribed`), the configuration
/// to use there (the simulator does not model that, so no prediction); the tree files;
/// the non-tree algorithms, as rows of their own for the operations they run.
fn tree_runs(
    sm: &smelt::Smelt,
    topologies: &[Topology],
    file_trees: &[(PathBuf, Tree)],
    ops: &[Op],
    members: usize,
) -> Vec<TreeRun> {
    let mut runs: Vec<TreeRun> = topologies
        .iter()
        .map(|&t| TreeRun::generated(sm, t, members, false))
        .collect();
    if members > sm.model.cpus.len() {
        runs.push(TreeRun::generated(sm, SMELT_TREE, members, true));
    }
    for (path, tree) in file_trees {
        runs.push(TreeRun::file(sm, path, tree.clone()));
    }
    for (label, plan) in sm.non_tree_plans(ops, members) {
        runs.push(TreeRun {
            label,
            plan,
            flatten: false,
            members,
        });
    }
    runs
}

/// `--verbose`: what `auto` picked for each headline row, on stderr.
fn say_auto(peers: &[Figure]) {
    for f in peers {
        if let Some(p) = &f.auto {
            eprintln!(
                "smelt bench: auto for {} with {} {}: {} (from {})",
                metric_label(f.peer.metric),
                f.peer.threads,
                f.mode,
                p.algorithm,
                p.origin
            );
        }
    }
}

/// The run's warnings: cut short by the time limit (`cut_short`: the limit, seconds),
/// a tuning file `auto` refused, two members, a debug build, oversubscription.
fn warnings(peers: &[Figure], members: usize, ncpus: usize, cut_short: Option<f64>) -> Vec<String> {
    let mut warnings = Vec::new();
    if let Some(limit_s) = cut_short {
        warnings.push(format!(
            "cut short by --time-limit {limit_s} s: the figures not measured by then are left out (collectives marked 'not measured'); raise --time-limit to measure everything"
        ));
    }
    // A tuning file auto refused (once, however many rows it touched).
    for w in peers
        .iter()
        .filter_map(|f| f.auto.as_ref()?.warning.as_ref())
    {
        if !warnings.contains(w) {
            warnings.push(w.clone());
        }
    }
    if members <= 2 {
        warnings.push(format!(
            "with {members} members every topology is the same tree: the per-topology figures differ only by noise, so no topology ratio is given; use a machine with more CPUs, or `smelt evaluate` for predictions"
        ));
    }
    if cfg!(debug_assertions) {
        warnings.push(
            "this smelt is a debug build: the Rust figures (smelt, rtrb, crossbeam) are not representative; build with --release".into(),
        );
    }
    if members > ncpus {
        warnings.push(format!(
            "{members} members share {ncpus} CPUs: waiting threads yield, so figures include scheduling"
        ));
    }
    warnings
}

impl super::BenchReport for Report {
    fn table(&self) -> String {
        self.to_table()
    }

    fn failed(&self) -> Vec<String> {
        failed_figures(self)
    }
}

/// One tree to measure in the topology table.
struct TreeRun {
    /// The row's name before any "(flattened ...)" suffix.
    label: String,
    plan: Result<smelt::Plan, crate::BenchError>,
    flatten: bool,
    members: usize,
}

impl TreeRun {
    fn generated(sm: &smelt::Smelt, t: Topology, members: usize, flatten: bool) -> TreeRun {
        TreeRun {
            label: t.to_string(),
            plan: sm.plan(t, members).map(|mut p| {
                p.flatten = flatten;
                p
            }),
            flatten,
            members,
        }
    }

    fn file(sm: &smelt::Smelt, path: &std::path::Path, tree: Tree) -> TreeRun {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        TreeRun {
            label: format!("file:{name}"),
            members: tree.len(),
            plan: Ok(sm.plan_tree(tree)),
            flatten: false,
        }
    }
}

/// Reads the `--tree` files; every member must be a CPU of the model.
fn load_tree_files(paths: &[PathBuf], model: &Model) -> Result<Vec<(PathBuf, Tree)>> {
    paths
        .iter()
        .map(|p| {
            let t = Tree::load(p).map_err(|e| anyhow::anyhow!("option --tree: {e}"))?;
            if let Some(c) = t.members.iter().find(|c| !model.cpus.contains(&c.get())) {
                bail!(
                    "option --tree: {}: CPU {c} is not one of the CPUs benchmarked ({}); pick them with --cpus or --model",
                    p.display(),
                    format_cpu_list(&model.cpus)
                );
            }
            Ok((p.clone(), t))
        })
        .collect()
}

/// smelt's collectives over every tree of `runs`, each operation measured the
/// paper's way between two floor measurements.
fn measure_collectives(
    sm: &smelt::Smelt,
    floors: &mut Floors,
    runs: Vec<TreeRun>,
    ops: &[Op],
    limit_s: f64,
) -> Vec<Collective> {
    let mut collectives = Vec::new();
    for run in runs {
        let label = |flattened: bool| {
            if flattened {
                format!("{} (flattened: oversubscribed)", run.label)
            } else {
                run.label.clone()
            }
        };
        let members = run.members;
        for &op in ops {
            if run.plan.as_ref().is_ok_and(|p| !p.runs(op)) {
                continue;
            }
            if floors.over() {
                floors.progress.inc();
                collectives.push(Collective {
                    topology: label(run.flatten),
                    op: op_name(op).into(),
                    members,
                    flattened: run.flatten,
                    status: Status::Skipped {
                        reason: format!("not measured: --time-limit {limit_s} s reached"),
                    },
                    predicted_ns: None,
                    floor_ns: None,
                    vs_floor: None,
                });
                continue;
            }
            let (res, floor) = floors.around(|| match &run.plan {
                Ok(p) => sm.measure(p, op).map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            });
            let flattened = res.as_ref().map_or(run.flatten, |r| r.1);
            let topology = label(flattened);
            floors.progress.step(format!("{topology} {}", op.name()));
            let predicted = run
                .plan
                .as_ref()
                .ok()
                .filter(|_| !flattened)
                .and_then(|p| p.prediction)
                .map(|p| p.get(predicted_op(op)));
            let status = match res {
                Ok((ns, _)) => Status::Ok { ns },
                Err(reason) => Status::Failed { reason },
            };
            let vs = match &status {
                Status::Ok { ns } => vs_floor(Some(ns.median), floor),
                _ => None,
            };
            collectives.push(Collective {
                topology,
                op: op_name(op).into(),
                members,
                flattened,
                status,
                predicted_ns: predicted,
                floor_ns: floor,
                vs_floor: vs,
            });
        }
    }
    collectives
}

/// The transport's figures: latency and streaming, smelt's queuepair vs the floor and
/// the peers.
fn measure_transport(
    cpeers: &CPeers,
    floors: &mut Floors,
    budget: &Budget,
    fa: u32,
    fb: u32,
    no_peers: bool,
) -> Vec<Figure> {
    let (fa, fb) = (smelt_mesh::CpuId(fa), smelt_mesh::CpuId(fb));
    let mut transport = Vec::new();
    transport.extend(floors.figure(|| {
        let r = smelt_peers::floor::pingpong(fa, fb, budget);
        PeerResult::measured("raw cache line (atomics)", Metric::Latency, 2, r)
    }));
    transport.extend(floors.figure(|| smelt_probe::transport::qp_latency(fa, fb, budget)));
    if !no_peers {
        transport.extend(floors.figure(|| rpeers::rtrb_latency(fa, fb, budget)));
        transport.extend(floors.figure(|| rpeers::crossbeam_latency(fa, fb, budget)));
    }
    let mut ump = if no_peers {
        vec![]
    } else {
        floors.figures(|| cpeers.ump(fa, fb, budget))
    };
    if let Some(i) = ump.iter().position(|f| f.peer.metric == Metric::Latency) {
        transport.push(ump.remove(i));
    }
    transport.extend(floors.figure(|| smelt_probe::transport::qp_throughput(fa, fb, budget)));
    transport.extend(ump);
    if !no_peers {
        transport.extend(floors.figure(|| rpeers::rtrb_throughput(fa, fb, budget)));
        transport.extend(floors.figure(|| rpeers::crossbeam_throughput(fa, fb, budget)));
    }
    transport
}

/// Collectives vs the peers: barriers at several thread counts, broadcast and reduce
/// at each, smelt with its own tree (flattened when there are more threads than CPUs).
fn measure_peers(
    sm: &smelt::Smelt,
    cpeers: &CPeers,
    floors: &mut Floors,
    cpus: &[u32],
    peer_threads: &[usize],
    budget: &Budget,
    o: &Options,
) -> Vec<Figure> {
    let ids = smelt_mesh::CpuId::list(cpus.iter().copied());
    let mut peers = Vec::new();
    // The OpenMP and MPI programs measure barrier and reduction (and MPI broadcast) in
    // one run: run each once per thread count, keep the barrier figures here and the
    // broadcast/reduce figures (at every thread count, beside smelt's) below.
    let two = 2usize;
    let mut rooted: Vec<Figure> = Vec::new();
    let mut thread_counts = peer_threads.to_vec();
    if !thread_counts.contains(&two) {
        thread_counts.push(two);
    }
    for &t in &thread_counts {
        let barrier_row = peer_threads.contains(&t);
        if barrier_row {
            peers.extend(floors.smelt_figure(sm, t, Op::Barrier));
            if o.processes {
                peers.extend(floors.process_figure(sm, t, Op::Barrier));
            }
        }
        if o.no_peers {
            continue;
        }
        let mut combined = floors.figures(|| cpeers.openmp(&ids, t, budget));
        combined.extend(
            floors
                .figures(|| cpeers.mpi(&ids, t, budget))
                .into_iter()
                .map(|mut f| {
                    f.mode = "processes";
                    f
                }),
        );
        if barrier_row {
            peers.extend(floors.figure(|| rpeers::std_barrier(&ids, t, budget)));
            peers.extend(floors.figures(|| cpeers.barriers(&ids, t, budget)));
        }
        for f in combined {
            if f.peer.metric == Metric::Barrier {
                if barrier_row {
                    peers.push(f);
                }
            } else {
                rooted.push(f);
            }
        }
    }
    for &t in &thread_counts {
        for op in [Op::Broadcast, Op::Reduce] {
            peers.extend(floors.smelt_figure(sm, t, op));
            if o.processes {
                peers.extend(floors.process_figure(sm, t, op));
            }
        }
    }
    peers.extend(rooted);
    peers.sort_by_key(|f| (metric_order(f.peer.metric), f.peer.threads));
    peers
}

/// Every figure of the report that failed, named with its reason.
fn failed_figures(r: &Report) -> Vec<String> {
    let mut v = Vec::new();
    for c in &r.collectives {
        if let Status::Failed { reason } = &c.status {
            v.push(format!("{} {} ({reason})", c.topology, c.op));
        }
    }
    for f in r.transport.iter().chain(&r.peers) {
        if let Status::Failed { reason } = &f.peer.status {
            v.push(format!(
                "{} {} with {} threads ({reason})",
                f.peer.name,
                metric_label(f.peer.metric),
                f.peer.threads
            ));
        }
    }
    v
}

/// The simulator's operation matching a paper-style measurement: the broadcast is
/// measured up to the last leaf's completion message at the root, which is the
/// simulator's (and the machine database's) "ab".
fn predicted_op(op: Op) -> Op {
    match op {
        Op::Broadcast => Op::AtomicBroadcast,
        other => other,
    }
}

fn op_name(op: Op) -> &'static str {
    op.name()
}

fn metric_order(m: Metric) -> u8 {
    match m {
        Metric::Barrier => 0,
        Metric::Broadcast => 1,
        Metric::Reduce => 2,
        Metric::Latency => 3,
        Metric::Throughput => 4,
    }
}

fn is_smelt(f: &Figure) -> bool {
    f.peer.name.starts_with("smelt")
}

/// `a / b` where both figures were divided by the floor measured around them.
fn per_floor(a: (f64, Option<f64>), b: (f64, Option<f64>)) -> Option<f64> {
    match (a.1, b.1) {
        (Some(fa), Some(fb)) if fa > 0.0 && fb > 0.0 => Some((a.0 / fa) / (b.0 / fb)),
        _ => None,
    }
}

/// The comparisons the run exists for. Each ratio is given raw (medians) and per
/// floor (each median divided by the cache-line floor taken around it first).
fn ratios(
    col: &[Collective],
    transport: &[Figure],
    peers: &[Figure],
    members: usize,
) -> Vec<Ratio> {
    let mut out = transport_ratios(transport);
    out.extend(peer_ratios(peers));
    // Smelt's trees vs the best static tree, per operation (with two members every
    // topology is the same tree, so the comparison would only show noise).
    if members > 2 {
        out.extend(topology_ratios(col));
    }
    out
}

/// A figure's median and the floor measured around it.
fn fig(f: &Figure) -> Option<(f64, Option<f64>)> {
    f.peer.median().map(|v| (v, f.floor_ns))
}

/// The queuepair against the floor and the channel peers: latency and throughput.
fn transport_ratios(transport: &[Figure]) -> Vec<Ratio> {
    let mut out = Vec::new();
    let find = |figs: &[Figure], name: &str, m: Metric| {
        figs.iter()
            .find(|f| f.peer.name == name && f.peer.metric == m)
            .and_then(fig)
    };
    if let Some(q) = find(transport, "smelt queuepair", Metric::Latency) {
        if let Some(fl) = q.1 {
            out.push(Ratio {
                what: "queuepair latency / floor".into(),
                value: q.0 / fl,
                per_floor: None,
                detail: format!("{:.1} ns vs {fl:.1} ns", q.0),
            });
        }
        for other in ["rtrb", "crossbeam-channel", "UMP ring (C)"] {
            if let Some(o) = find(transport, other, Metric::Latency) {
                out.push(Ratio {
                    what: format!("queuepair latency / {other} latency"),
                    value: q.0 / o.0,
                    per_floor: per_floor(q, o),
                    detail: format!("{:.1} ns vs {:.1} ns", q.0, o.0),
                });
            }
        }
    }
    if let Some(q) = find(transport, "smelt queuepair", Metric::Throughput) {
        for other in ["UMP ring (C)", "rtrb", "crossbeam-channel"] {
            if let Some(o) = find(transport, other, Metric::Throughput) {
                out.push(Ratio {
                    what: format!("queuepair throughput / {other} throughput"),
                    value: o.0 / q.0,
                    per_floor: per_floor(o, q),
                    detail: format!("{:.1} vs {:.1} Mmsg/s", 1000.0 / q.0, 1000.0 / o.0),
                });
            }
        }
    }
    out
}

/// smelt's default against the best peer, per metric and thread (process) count.
fn peer_ratios(peers: &[Figure]) -> Vec<Ratio> {
    let mut out = Vec::new();
    let mut keys: Vec<(Metric, usize)> = peers
        .iter()
        .map(|f| (f.peer.metric, f.peer.threads))
        .collect();
    keys.dedup();
    for (m, t) in keys {
        let group: Vec<&Figure> = peers
            .iter()
            .filter(|f| f.peer.metric == m && f.peer.threads == t)
            .collect();
        let best = group
            .iter()
            .filter(|f| !is_smelt(f))
            .filter_map(|f| fig(f).map(|v| (v, &f.peer.name)))
            .min_by(|a, b| a.0 .0.total_cmp(&b.0 .0));
        let Some((b, name)) = best else {
            continue;
        };
        // smelt's default as threads, then as processes (`--processes`), each against
        // the best peer of the same count.
        for who in ["threads", "processes"] {
            let Some((sf, s)) = group
                .iter()
                .find(|f| is_smelt(f) && f.mode == who)
                .and_then(|f| Some((*f, fig(f)?)))
            else {
                continue;
            };
            let (label, unit) = if who == "threads" {
                ("smelt", "threads")
            } else {
                ("smelt processes", "processes")
            };
            out.push(Ratio {
                what: format!(
                    "{label} {} speedup over best peer, {t} {unit}",
                    metric_label(m)
                ),
                value: b.0 / s.0,
                per_floor: per_floor(b, s),
                detail: format!(
                    "{} {:.2} µs vs {name} {:.2} µs",
                    sf.peer.name,
                    s.0 / 1000.0,
                    b.0 / 1000.0
                ),
            });
        }
    }
    out
}

/// The best static tree against smelt's best tree, per operation.
fn topology_ratios(col: &[Collective]) -> Vec<Ratio> {
    let mut out = Vec::new();
    let mut ops: Vec<&str> = Vec::new();
    for c in col {
        if !ops.contains(&c.op.as_str()) {
            ops.push(&c.op);
        }
    }
    for op in ops {
        let best = |smelt_side: bool| {
            col.iter()
                .filter(|c| c.op == op)
                .filter(|c| {
                    let t: Option<Topology> = c.topology.parse().ok();
                    t.is_some_and(|t| t.is_static() != smelt_side)
                })
                .filter_map(|c| match &c.status {
                    Status::Ok { ns } => Some(((ns.median, c.floor_ns), c.topology.clone())),
                    _ => None,
                })
                .min_by(|a, b| a.0 .0.total_cmp(&b.0 .0))
        };
        if let (Some((s, st)), Some((b, bt))) = (best(true), best(false)) {
            out.push(Ratio {
                what: format!("{op}: best static tree / best smelt tree"),
                value: b.0 / s.0,
                per_floor: per_floor(b, s),
                detail: format!("{bt} {:.2} µs vs {st} {:.2} µs", b.0 / 1000.0, s.0 / 1000.0),
            });
        }
    }
    out
}

fn metric_label(m: Metric) -> &'static str {
    match m {
        Metric::Barrier => "barrier",
        Metric::Broadcast => "broadcast",
        Metric::Reduce => "reduce",
        Metric::Latency => "latency",
        Metric::Throughput => "throughput",
    }
}
