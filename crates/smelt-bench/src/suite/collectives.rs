//! `smelt bench collectives` (and `smelt bench processes`): smelt's collectives over
//! every topology on this machine, next to the simulator's predictions, smelt's
//! transport, and the peers a user would pick instead (pthread, OpenMP, a dissemination
//! barrier, a UMP ring, rtrb, crossbeam, Open MPI), all in one run. The figures that are
//! compared with each other (the transport's, and each thread count's collectives
//! against the peers) are measured *interleaved*: several short rounds, each measuring
//! every figure of the set once (smelt, peer, smelt, peer, ...), so that both sides of
//! a ratio see the same machine state; a figure is the median of its rounds, and a
//! ratio the median of the per-round ratios. Every round, and every figure of the
//! topology table, is paired with a raw cache-line floor taken right before and after
//! it, so that ratios stay meaningful on a machine whose core-to-core latency drifts.

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
    /// Rounds of each interleaved set ([`Floors::interleaved`]).
    rounds: usize,
}

/// One measurement of an interleaved set: its figure(s), measured once (the floor
/// fields are filled in by [`Floors::interleaved`]).
type Item<'a> = Box<dyn FnMut() -> Vec<Figure> + 'a>;

/// Figures of a set, before the interleaved measurement fills in their floors.
fn plain(peers: Vec<PeerResult>) -> Vec<Figure> {
    peers
        .into_iter()
        .map(|peer| Figure {
            peer,
            floor_ns: None,
            vs_floor: None,
            flattened: false,
            mode: "threads",
            auto: None,
            rounds: Vec::new(),
        })
        .collect()
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

    /// Measures `items` interleaved: `rounds` rounds, each a floor, every item once
    /// (round `r` starts at item `r mod k`, so that no item always runs first, right
    /// after the floor), and a floor again. Each figure is the robust summary
    /// of its rounds' medians (kept in [`Figure::rounds`], in round order), its floor
    /// the median of the rounds' floors (each the mean of the two around the round),
    /// `vs_floor` the median of the per-round ratios. A figure that failed (or was
    /// skipped) in any round is that round's status. Once the time budget is spent, no
    /// further round starts (none at all: no figures).
    fn interleaved(&mut self, mut items: Vec<Item<'_>>) -> Vec<Figure> {
        let k = items.len();
        let mut got: Vec<Vec<Vec<Figure>>> = vec![Vec::new(); k];
        let mut round_floors: Vec<Option<f64>> = Vec::new();
        for r in 0..self.rounds.max(1) {
            if self.over() {
                break;
            }
            let f0 = self.take();
            for j in 0..k {
                let i = (r + j) % k;
                let figs = items[i]();
                if r == 0 {
                    if let Some(f) = figs.first() {
                        self.progress
                            .step(format!("{} ({} threads)", f.peer.name, f.peer.threads));
                    }
                    self.progress.inc();
                }
                got[i].push(figs);
            }
            let f1 = self.take();
            round_floors.push(match (f0, f1) {
                (Some(x), Some(y)) => Some((x + y) / 2.0),
                (x, y) => x.or(y),
            });
        }
        if round_floors.is_empty() {
            for _ in 0..k {
                self.progress.inc();
            }
            return Vec::new();
        }
        got.into_iter()
            .flat_map(|per_round| combine_rounds(per_round, &round_floors))
            .collect()
    }
}

/// The figures of one item over its rounds (`per_round[r]`: what round `r` measured),
/// matched by position (every round measures the same figures, in the same order).
fn combine_rounds(per_round: Vec<Vec<Figure>>, floors: &[Option<f64>]) -> Vec<Figure> {
    let mut rounds = per_round.into_iter();
    let Some(first) = rounds.next() else {
        return Vec::new();
    };
    let rest: Vec<Vec<Figure>> = rounds.collect();
    first
        .into_iter()
        .enumerate()
        .map(|(j, mut f)| {
            let all: Vec<&Figure> = std::iter::once(&f)
                .chain(rest.iter().filter_map(|r| r.get(j)))
                .collect();
            let bad = all.iter().enumerate().find(|(_, g)| {
                !matches!(g.peer.status, Status::Ok { .. }) || g.peer.name != f.peer.name
            });
            let status = match bad {
                Some((r, g)) => match &g.peer.status {
                    Status::Failed { reason } if all.len() > 1 => Status::Failed {
                        reason: format!("round {} of {}: {reason}", r + 1, all.len()),
                    },
                    Status::Ok { .. } => Status::Failed {
                        reason: format!("round {} measured {} instead", r + 1, g.peer.name),
                    },
                    other => other.clone(),
                },
                None => {
                    let v: Vec<f64> = all.iter().filter_map(|g| g.peer.median()).collect();
                    f.rounds = v.clone();
                    let ratios: Vec<f64> = v
                        .iter()
                        .zip(floors)
                        .filter_map(|(x, fl)| fl.filter(|&fl| fl > 0.0).map(|fl| x / fl))
                        .collect();
                    let fls: Vec<f64> = floors.iter().flatten().copied().collect();
                    f.floor_ns = (!fls.is_empty()).then(|| smelt_tree::stats::median(&fls));
                    f.vs_floor = (!ratios.is_empty()).then(|| smelt_tree::stats::median(&ratios));
                    match smelt_tree::stats::summarize(&v) {
                        Some(mut ns) => {
                            // The figure is the median of its rounds (the ratios' rounds
                            // too), outliers or not.
                            ns.median = smelt_tree::stats::median(&v);
                            Status::Ok { ns }
                        }
                        None => Status::Failed {
                            reason: "no valid round".into(),
                        },
                    }
                }
            };
            f.peer.status = status;
            f
        })
        .collect()
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
    // The compared figures are measured interleaved (see the module docs):
    // `interleave_rounds` rounds of `runs` batches each.
    let interleave_rounds = if a.quick { 5 } else { 9 };
    let budget = Budget {
        batch: Duration::from_millis(if a.quick { 2 } else { 20 }),
        runs: if a.quick { 3 } else { 5 },
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
        rounds: interleave_rounds,
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
/// the peers, measured interleaved ([`Floors::interleaved`]): the raw cache line,
/// smelt's queuepair, the C UMP ring (latency and streaming in one program), rtrb and
/// crossbeam-channel, round after round.
fn measure_transport(
    cpeers: &CPeers,
    floors: &mut Floors,
    budget: &Budget,
    fa: u32,
    fb: u32,
    no_peers: bool,
) -> Vec<Figure> {
    let (fa, fb) = (smelt_mesh::CpuId(fa), smelt_mesh::CpuId(fb));
    let one = |r: PeerResult| plain(vec![r]);
    let mut items: Vec<Item> = vec![
        Box::new(move || {
            let r = smelt_peers::floor::pingpong(fa, fb, budget);
            one(PeerResult::measured(
                "raw cache line (atomics)",
                Metric::Latency,
                2,
                r,
            ))
        }),
        Box::new(move || one(smelt_probe::transport::qp_latency(fa, fb, budget))),
        Box::new(move || one(smelt_probe::transport::qp_throughput(fa, fb, budget))),
    ];
    if !no_peers {
        items.push(Box::new(move || plain(cpeers.ump(fa, fb, budget))));
        items.push(Box::new(move || one(rpeers::rtrb_latency(fa, fb, budget))));
        items.push(Box::new(move || {
            one(rpeers::rtrb_throughput(fa, fb, budget))
        }));
        items.push(Box::new(move || {
            one(rpeers::crossbeam_latency(fa, fb, budget))
        }));
        items.push(Box::new(move || {
            one(rpeers::crossbeam_throughput(fa, fb, budget))
        }));
    }
    let mut transport = floors.interleaved(items);
    // Latency rows first (the floor, smelt, then the peers), then streaming.
    let rank = |f: &Figure| {
        let who = match f.peer.name.as_str() {
            "raw cache line (atomics)" => 0,
            "smelt queuepair" => 1,
            "UMP ring (C)" => 2,
            "rtrb" => 3,
            _ => 4,
        };
        (metric_order(f.peer.metric), who)
    };
    transport.sort_by_key(rank);
    transport
}

/// smelt's figure for the peer comparison: the default, `auto` (see
/// [`smelt::Smelt::peer_figure`]).
fn smelt_figure(sm: &smelt::Smelt, threads: usize, op: Op) -> Vec<Figure> {
    let (peer, flattened, auto) = sm.peer_figure(threads, op);
    let mut f = plain(vec![peer]);
    f[0].flattened = flattened;
    f[0].auto = auto;
    f
}

/// smelt's figure with members as processes (see [`smelt::Smelt::process_figure`]).
fn process_figure(sm: &smelt::Smelt, procs: usize, op: Op) -> Vec<Figure> {
    let (peer, auto) = sm.process_figure(procs, op);
    let mut f = plain(vec![peer]);
    f[0].flattened = f[0].peer.name.contains("flattened");
    f[0].mode = "processes";
    f[0].auto = auto;
    f
}

/// Collectives vs the peers: barriers at several thread counts, broadcast and reduce
/// at each, smelt as a program gets it by default (flattened when there are more
/// threads than CPUs). Each thread count's figures (smelt's and every peer's) are one
/// interleaved set ([`Floors::interleaved`]).
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
    let ids = &ids[..];
    let mut peers = Vec::new();
    // The OpenMP and MPI programs measure barrier and reduction (and MPI broadcast) in
    // one run: they run once per round and thread count; their barrier figures count
    // at the barrier rows' thread counts, their broadcast and reduce figures at every
    // thread count, beside smelt's.
    let two = 2usize;
    let mut thread_counts = peer_threads.to_vec();
    if !thread_counts.contains(&two) {
        thread_counts.push(two);
    }
    for &t in &thread_counts {
        let barrier_row = peer_threads.contains(&t);
        let mut items: Vec<Item> = Vec::new();
        let ops: &[Op] = if barrier_row {
            &[Op::Barrier, Op::Broadcast, Op::Reduce]
        } else {
            &[Op::Broadcast, Op::Reduce]
        };
        for &op in ops {
            items.push(Box::new(move || smelt_figure(sm, t, op)));
            if o.processes {
                items.push(Box::new(move || process_figure(sm, t, op)));
            }
        }
        if !o.no_peers {
            if barrier_row {
                items.push(Box::new(move || {
                    plain(vec![rpeers::std_barrier(ids, t, budget)])
                }));
                items.push(Box::new(move || plain(cpeers.barriers(ids, t, budget))));
            }
            items.push(Box::new(move || plain(cpeers.openmp(ids, t, budget))));
            items.push(Box::new(move || {
                let mut v = plain(cpeers.mpi(ids, t, budget));
                for f in &mut v {
                    f.mode = "processes";
                }
                v
            }));
        }
        peers.extend(
            floors
                .interleaved(items)
                .into_iter()
                .filter(|f| barrier_row || f.peer.metric != Metric::Barrier),
        );
    }
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

/// `a / b` from the same rounds of an interleaved set: the median of the per-round
/// ratios, and the text that names them; `None` unless both figures have the same
/// number of rounds (figures of one set).
fn same_rounds(a: &Figure, b: &Figure) -> Option<(f64, String)> {
    if a.rounds.is_empty() || a.rounds.len() != b.rounds.len() {
        return None;
    }
    let r: Vec<f64> = a.rounds.iter().zip(&b.rounds).map(|(x, y)| x / y).collect();
    let list: Vec<String> = r.iter().map(|x| format!("{x:.2}")).collect();
    Some((
        smelt_tree::stats::median(&r),
        format!(
            "; median of {} interleaved rounds ({})",
            r.len(),
            list.join(" ")
        ),
    ))
}

/// The queuepair against the floor and the channel peers: latency and throughput.
fn transport_ratios(transport: &[Figure]) -> Vec<Ratio> {
    let mut out = Vec::new();
    let find = |name: &str, m: Metric| {
        transport
            .iter()
            .find(|f| f.peer.name == name && f.peer.metric == m)
            .and_then(|f| Some((f, fig(f)?)))
    };
    if let Some((qf, q)) = find("smelt queuepair", Metric::Latency) {
        if let Some(fl) = q.1 {
            // Against the raw cache line of the same rounds where there is one (the
            // floor taken around the rounds otherwise).
            let raw = find("raw cache line (atomics)", Metric::Latency);
            let (value, rounds, vs) = match raw.and_then(|(rf, r)| Some((same_rounds(qf, rf)?, r)))
            {
                Some(((v, text), r)) => (v, text, r.0),
                None => (q.0 / fl, String::new(), fl),
            };
            out.push(Ratio {
                what: "queuepair latency / floor".into(),
                value,
                per_floor: None,
                detail: format!("{:.1} ns vs {vs:.1} ns{rounds}", q.0),
            });
        }
        for other in ["UMP ring (C)", "rtrb", "crossbeam-channel"] {
            if let Some((of, o)) = find(other, Metric::Latency) {
                let (value, rounds) = same_rounds(qf, of).unwrap_or((q.0 / o.0, String::new()));
                out.push(Ratio {
                    what: format!("queuepair latency / {other} latency"),
                    value,
                    per_floor: per_floor(q, o),
                    detail: format!("{:.1} ns vs {:.1} ns{rounds}", q.0, o.0),
                });
            }
        }
    }
    if let Some((qf, q)) = find("smelt queuepair", Metric::Throughput) {
        for other in ["UMP ring (C)", "rtrb", "crossbeam-channel"] {
            if let Some((of, o)) = find(other, Metric::Throughput) {
                let (value, rounds) = same_rounds(of, qf).unwrap_or((o.0 / q.0, String::new()));
                out.push(Ratio {
                    what: format!("queuepair throughput / {other} throughput"),
                    value,
                    per_floor: per_floor(o, q),
                    detail: format!("{:.1} vs {:.1} Mmsg/s{rounds}", 1000.0 / q.0, 1000.0 / o.0),
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
            .filter_map(|f| fig(f).map(|v| (v, *f)))
            .min_by(|a, b| a.0 .0.total_cmp(&b.0 .0));
        let Some((b, bf)) = best else {
            continue;
        };
        let name = &bf.peer.name;
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
            // The best peer is the one with the lowest median; the ratio is taken
            // round by round against it (the same rounds: the same machine state).
            let (value, rounds) = same_rounds(bf, sf).unwrap_or((b.0 / s.0, String::new()));
            out.push(Ratio {
                what: format!(
                    "{label} {} speedup over best peer, {t} {unit}",
                    metric_label(m)
                ),
                value,
                per_floor: per_floor(b, s),
                detail: format!(
                    "{} {:.2} µs vs {name} {:.2} µs{rounds}",
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(name: &str, metric: Metric, ns: f64) -> Figure {
        let s = smelt_tree::stats::summarize(&[ns]).unwrap();
        plain(vec![PeerResult::measured::<String>(name, metric, 2, Ok(s))]).remove(0)
    }

    /// Rounds of one set: each figure is the median of its rounds, and a ratio the
    /// median of the per-round ratios (not the ratio of the medians).
    #[test]
    fn interleaved_figures_and_ratios_come_from_the_same_rounds() {
        let floors = [Some(10.0), Some(20.0), Some(40.0)];
        let qp = [50.0, 100.0, 400.0];
        let ump = [40.0, 125.0, 200.0];
        let set = |name: &str, v: &[f64]| {
            v.iter()
                .map(|&x| vec![ok(name, Metric::Latency, x)])
                .collect::<Vec<_>>()
        };
        let q = combine_rounds(set("smelt queuepair", &qp), &floors).remove(0);
        let u = combine_rounds(set("UMP ring (C)", &ump), &floors).remove(0);
        assert_eq!(q.rounds, qp);
        assert_eq!(q.peer.median(), Some(100.0));
        assert_eq!(u.peer.median(), Some(125.0));
        assert_eq!(q.floor_ns, Some(20.0));
        // Per-round figure / floor: 5, 5, 10.
        assert_eq!(q.vs_floor, Some(5.0));
        // Per-round ratios 1.25, 0.8, 2: the median is 1.25 (the medians give 0.8).
        let r = transport_ratios(&[q.clone(), u]);
        let lat = r
            .iter()
            .find(|r| r.what == "queuepair latency / UMP ring (C) latency")
            .unwrap();
        assert_eq!(lat.value, 1.25);
        assert!(
            lat.detail
                .contains("median of 3 interleaved rounds (1.25 0.80 2.00)"),
            "{}",
            lat.detail
        );
        // A figure measured once (no rounds) is compared by its median.
        let once = ok("rtrb", Metric::Latency, 50.0);
        let r = transport_ratios(&[q, once]);
        let rt = r
            .iter()
            .find(|r| r.what == "queuepair latency / rtrb latency")
            .unwrap();
        assert_eq!(rt.value, 2.0);
    }

    /// The speedup over the best peer is taken round by round against the peer with
    /// the lowest median.
    #[test]
    fn the_speedup_over_the_best_peer_is_the_median_of_its_rounds() {
        let floors = [Some(10.0); 3];
        let fig = |name: &str, v: &[f64]| {
            combine_rounds(
                v.iter()
                    .map(|&x| vec![ok(name, Metric::Barrier, x)])
                    .collect(),
                &floors,
            )
            .remove(0)
        };
        let peers = [
            fig("smelt (auto: sequential)", &[100.0, 50.0, 80.0]),
            fig("dissemination_barrier", &[90.0, 60.0, 100.0]),
            fig("pthread_barrier", &[1000.0, 900.0, 800.0]),
        ];
        let r = peer_ratios(&peers);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].what, "smelt barrier speedup over best peer, 2 threads");
        // 0.9, 1.2, 1.25.
        assert_eq!(r[0].value, 1.2);
        assert!(
            r[0].detail.contains("dissemination_barrier"),
            "{}",
            r[0].detail
        );
    }

    /// A figure that failed in any round is that failure, naming the round; one that
    /// was skipped stays skipped.
    #[test]
    fn a_round_that_failed_fails_the_figure() {
        let floors = [Some(10.0); 3];
        let mut bad = ok("rtrb", Metric::Latency, 1.0);
        bad.peer.status = Status::Failed {
            reason: "timed out".into(),
        };
        let rounds = vec![
            vec![ok("rtrb", Metric::Latency, 50.0)],
            vec![bad],
            vec![ok("rtrb", Metric::Latency, 60.0)],
        ];
        let f = combine_rounds(rounds, &floors).remove(0);
        assert_eq!(
            f.peer.status,
            Status::Failed {
                reason: "round 2 of 3: timed out".into()
            }
        );
        assert!(f.rounds.is_empty());
        let mut skipped = ok("omp_barrier (GOMP)", Metric::Barrier, 1.0);
        skipped.peer.status = Status::Skipped {
            reason: "no gcc".into(),
        };
        let f = combine_rounds(vec![vec![skipped.clone()], vec![skipped]], &floors).remove(0);
        assert!(matches!(f.peer.status, Status::Skipped { .. }));
    }
}
