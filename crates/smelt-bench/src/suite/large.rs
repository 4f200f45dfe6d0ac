//! `smelt bench large`: bandwidth of large broadcasts, reductions and allreductions
//! (64 KiB to 16 MiB by default) against `memcpy` of the same size on one core and
//! against Open MPI's `MPI_Bcast`, `MPI_Reduce` and `MPI_Allreduce` with as many
//! ranks, in one run. Reductions are sums of doubles, as in the MPI program, through
//! the typed reductions (`reduce_slice_op`, `allreduce_slice_op`); the allreduce has
//! a row per algorithm (the tree, recursive doubling, Rabenseifner, the ring). A first section
//! times the combine alone (the f64 sum kernel, a plain `for` loop, `memcpy`).

use super::{BenchReport, Common};
use anyhow::{bail, Result};
use serde::Serialize;
use smelt_model::Model;
use smelt_peers::c::{CPeers, MpiSystem};
use smelt_probe::figure::Status;
use smelt_probe::Budget;
use smelt_runtime::combine::combine_f64_sum;
use smelt_runtime::measure::{back_to_back_member_with, measure_back_to_back_with, MeasureConfig};
use smelt_runtime::{GroupConfig, Pinning, ReduceOp};
use smelt_tree::tuning::AlgorithmTable;
use smelt_tree::{NonTree, Op, Tree};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The figures measured: operation, smelt's algorithm (`None`: the tree), the MPI
/// program's name.
const OPS: [(Op, Option<NonTree>, &str); 6] = [
    (Op::Broadcast, None, "bcast"),
    (Op::Reduce, None, "reduce"),
    (Op::Allreduce, None, "allreduce"),
    (Op::Allreduce, Some(NonTree::RecursiveDoubling), "allreduce"),
    (Op::Allreduce, Some(NonTree::Rabenseifner), "allreduce"),
    (Op::Allreduce, Some(NonTree::Ring), "allreduce"),
];

fn algorithm_name(a: Option<NonTree>) -> &'static str {
    a.map_or("tree", |a| a.name())
}

fn default_sizes(quick: bool) -> Vec<usize> {
    if quick {
        vec![64 << 10, 1 << 20, 16 << 20]
    } else {
        vec![64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20]
    }
}

/// One size's figures.
#[derive(Serialize)]
struct Row {
    bytes: usize,
    /// `memcpy` of `bytes` on one core, GB/s.
    memcpy_gbs: Option<f64>,
    /// Per operation: smelt's and Open MPI's GB/s (bytes per member / time).
    ops: Vec<OpRow>,
}

#[derive(Serialize)]
struct OpRow {
    op: &'static str,
    /// smelt's algorithm: `tree`, `recursive-doubling`, `rabenseifner`, `ring`.
    algorithm: &'static str,
    smelt_gbs: Option<f64>,
    smelt_error: Option<String>,
    open_mpi_gbs: Option<f64>,
    open_mpi_note: Option<String>,
    /// smelt / memcpy bandwidth.
    vs_memcpy: Option<f64>,
    /// smelt / Open MPI bandwidth (> 1: smelt is faster).
    vs_open_mpi: Option<f64>,
    /// This row's algorithm is the one `auto` (this machine's tuning file, else the
    /// prediction) picks for the operation at this size: what a program with the
    /// `auto` table gets (allreduce rows; the one-algorithm operations always).
    auto: bool,
}

/// The combine alone on one core: `acc[i] += other[i]` over `bytes` of doubles.
#[derive(Serialize)]
struct CombineRow {
    bytes: usize,
    /// smelt's kernel (`combine_f64_sum`), GB/s of one vector per second.
    kernel_gbs: f64,
    /// A plain `for` loop over the two slices, GB/s.
    plain_loop_gbs: f64,
    /// `memcpy` of `bytes`, GB/s.
    memcpy_gbs: f64,
    /// kernel / memcpy.
    kernel_vs_memcpy: f64,
}

/// The options of `smelt bench large`.
#[derive(Clone, Debug)]
pub struct Options {
    /// Quick runs, the timeout per figure.
    pub common: Common,
    /// Members (default 2, at most 64 per CPU).
    pub threads: Option<usize>,
    /// Message sizes in bytes, each a multiple of 8 (default 64 KiB to 16 MiB).
    pub sizes: Vec<usize>,
    /// Slots per channel (each 48 payload bytes).
    pub capacity: usize,
    /// Leave Open MPI out.
    pub no_peers: bool,
}

/// The report of `smelt bench large`.
#[derive(Serialize)]
pub struct LargeReport {
    tool: String,
    host: String,
    members: usize,
    /// More members than CPUs: the group runs unpinned, members round-robin.
    oversubscribed: bool,
    combine: Vec<CombineRow>,
    tree: String,
    capacity: usize,
    segment: usize,
    rows: Vec<Row>,
    warnings: Vec<String>,
}

/// GB/s of `bytes` per call of `f`: median of 7 timed batches after a warm-up call.
fn gbs_of(bytes: usize, mut f: impl FnMut()) -> f64 {
    f();
    let reps = ((256 << 20) / bytes.max(1)).clamp(2, 4096);
    let mut t: Vec<f64> = (0..7)
        .map(|_| {
            let t0 = Instant::now();
            for _ in 0..reps {
                f();
            }
            t0.elapsed().as_secs_f64() / reps as f64
        })
        .collect();
    t.sort_by(f64::total_cmp);
    bytes as f64 / t[3] / 1e9
}

/// `memcpy` bandwidth of `bytes` on this core (GB/s).
fn memcpy_gbs(bytes: usize) -> f64 {
    let src = vec![0x5au8; bytes];
    let mut dst = vec![0u8; bytes];
    gbs_of(bytes, || {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
    })
}

/// The combine alone over `bytes` of doubles: smelt's kernel, a plain loop, memcpy.
fn combine_row(bytes: usize) -> CombineRow {
    let n = bytes / 8;
    let other: Vec<f64> = (0..n).map(|i| i as f64 * 0.5).collect();
    let mut acc = vec![1.0f64; n];
    let kernel_gbs = gbs_of(bytes, || {
        combine_f64_sum(std::hint::black_box(&mut acc), std::hint::black_box(&other));
    });
    let plain_loop_gbs = gbs_of(bytes, || {
        let (a, o) = (std::hint::black_box(&mut acc), std::hint::black_box(&other));
        for i in 0..a.len().min(o.len()) {
            a[i] += o[i];
        }
    });
    let memcpy_gbs = memcpy_gbs(bytes);
    CombineRow {
        bytes,
        kernel_gbs,
        plain_loop_gbs,
        memcpy_gbs,
        kernel_vs_memcpy: kernel_gbs / memcpy_gbs,
    }
}

/// smelt's ns per operation for `bytes` bytes per member over `tree`, running
/// `algorithm` for the allreduce (`None`: the tree).
fn smelt_ns(
    tree: &Tree,
    op: Op,
    algorithm: Option<NonTree>,
    bytes: usize,
    cfg: &MeasureConfig,
) -> Result<f64, String> {
    let doubles = bytes / 8;
    let mut cfg = cfg.clone();
    if let Some(a) = algorithm {
        let table = AlgorithmTable::parse(&format!("allreduce={}", a.name()))?;
        cfg.group.algorithms = Some(Arc::new(table));
    }
    let cfg = &cfg;
    let m = measure_back_to_back_with(tree, cfg, |m| {
        let mut buf = vec![0x11u8; bytes];
        let mut v = vec![m.rank().index() as f64; doubles];
        back_to_back_member_with(m, cfg, |m| match op {
            Op::Broadcast => m.broadcast_into(&mut buf),
            Op::Reduce => m.reduce_slice_op(&mut v, ReduceOp::Sum).map(|_| ()),
            _ => m.allreduce_slice_op(&mut v, ReduceOp::Sum),
        })
    })
    .map_err(|e| e.to_string())?;
    Ok(m.stats.median)
}

/// Runs the comparison on `model`'s CPUs.
pub fn measure(o: &Options, model: &Model) -> Result<LargeReport> {
    let a = &o.common;
    let sizes = super::double_sizes(&o.sizes, default_sizes(a.quick))?;
    let members = o.threads.unwrap_or(2.min(model.len())).max(1);
    if o.threads.is_some_and(|t| t > 64 * model.len()) {
        bail!(
            "option --threads: at most 64 members per CPU ({} CPUs here)",
            model.len()
        );
    }
    // More members than CPUs: members round-robin on the CPUs, unpinned.
    let oversubscribed = members > model.len();
    let expanded;
    let tree_model = if oversubscribed {
        expanded = super::smelt::oversubscribed_model(model, members);
        &expanded
    } else {
        model
    };
    let pos: Vec<usize> = (0..members).collect();
    let tree = super::SMELT_TREE
        .generate(tree_model, &pos, None)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let group = GroupConfig {
        link: smelt_runtime::LinkConfig::default()
            .capacity(o.capacity)
            .timeout(Duration::from_secs_f64(a.timeout.unwrap_or(60.0))),
        pinning: if oversubscribed {
            Pinning::Never
        } else {
            Pinning::Auto
        },
        ..GroupConfig::default()
    };
    let segment = group.segment_bytes();
    let cfg = MeasureConfig {
        rounds: if a.quick { 5 } else { 9 },
        warmup: 1,
        batch: Duration::from_millis(if a.quick { 20 } else { 50 }),
        group,
    };
    let cpus: Vec<u32> = if oversubscribed {
        (0..members).map(|i| model.cpus[i % model.len()]).collect()
    } else {
        tree.members.iter().map(|c| c.get()).collect()
    };
    let budget = Budget {
        batch: Duration::from_millis(if a.quick { 20 } else { 50 }),
        runs: if a.quick { 5 } else { 9 },
        timeout: Duration::from_secs_f64(a.timeout.unwrap_or(120.0)),
    };
    let mut warnings = Vec::new();
    // Open MPI: one mpirun for every size and operation.
    let ompi = if o.no_peers {
        Vec::new()
    } else {
        let names: Vec<&str> = ["bcast", "reduce", "allreduce"].to_vec();
        CPeers::new(smelt_peers::c::default_cache_dir()).mpi_sizes(
            &smelt_mesh::CpuId::list(cpus.iter().copied()),
            members,
            &budget,
            &sizes,
            &names,
            &MpiSystem::Tuned,
        )
    };
    let progress = smelt_probe::progress::Progress::new(
        true,
        (sizes.len() * (OPS.len() + 2)) as u64,
        "figures",
    )
    .with_label("smelt bench large");
    let mut combine = Vec::new();
    for &bytes in &sizes {
        progress.step(format!("combine {bytes} B"));
        combine.push(combine_row(bytes));
        progress.inc();
    }
    // What `auto` picks for the allreduce per size (None: the tree, or no table).
    let auto = smelt_tree::tuning::auto_table(tree_model, &pos)
        .ok()
        .map(|(t, _)| t);
    let auto_pick = |bytes: usize| {
        auto.as_ref()
            .and_then(|t| t.non_tree(smelt_runtime::SyncMode::Loose, Op::Allreduce, bytes as u64))
    };
    let mut rows = Vec::new();
    for &bytes in &sizes {
        progress.step(format!("memcpy {bytes} B"));
        let mc = memcpy_gbs(bytes);
        progress.inc();
        let mut ops = Vec::new();
        for (op, algorithm, mpi_name) in OPS {
            progress.step(format!(
                "{} ({}) {bytes} B",
                op.name(),
                algorithm_name(algorithm)
            ));
            let gbs = |ns: f64| bytes as f64 / ns;
            let s = smelt_ns(&tree, op, algorithm, bytes, &cfg);
            progress.inc();
            let fig = ompi.iter().find(|f| f.op == mpi_name && f.bytes == bytes);
            let (o_gbs, o_note) = match fig.map(|f| &f.status) {
                Some(Status::Ok { ns }) => (Some(gbs(ns.median)), None),
                Some(Status::Skipped { reason }) | Some(Status::Failed { reason }) => {
                    (None, Some(reason.clone()))
                }
                None if o.no_peers => (None, Some("--no-peers".into())),
                None => (None, Some("not measured".into())),
            };
            let s_gbs = s.as_ref().ok().map(|&ns| gbs(ns));
            ops.push(OpRow {
                op: op.name(),
                algorithm: algorithm_name(algorithm),
                smelt_gbs: s_gbs,
                smelt_error: s.err(),
                open_mpi_gbs: o_gbs,
                open_mpi_note: o_note,
                vs_memcpy: s_gbs.map(|x| x / mc),
                vs_open_mpi: s_gbs.zip(o_gbs).map(|(x, y)| x / y),
                auto: op != Op::Allreduce || algorithm == auto_pick(bytes),
            });
        }
        rows.push(Row {
            bytes,
            memcpy_gbs: Some(mc),
            ops,
        });
    }
    progress.finish();
    if cfg!(debug_assertions) {
        warnings.push("this smelt is a debug build: build with --release for figures".into());
    }
    let report = LargeReport {
        tool: format!("smelt {}", env!("CARGO_PKG_VERSION")),
        host: smelt_model::host::host_name(),
        members,
        oversubscribed,
        combine,
        tree: super::SMELT_TREE.to_string(),
        capacity: o.capacity,
        segment,
        rows,
        warnings,
    };
    Ok(report)
}

impl BenchReport for LargeReport {
    fn table(&self) -> String {
        table(self)
    }

    fn failed(&self) -> Vec<String> {
        self.rows
            .iter()
            .flat_map(|r| {
                r.ops.iter().filter_map(move |o| {
                    o.smelt_error
                        .as_ref()
                        .map(|e| format!("{} ({}) {} B ({e})", o.op, o.algorithm, r.bytes))
                })
            })
            .collect()
    }
}

fn table(r: &LargeReport) -> String {
    let mut s = String::new();
    let f = |x: Option<f64>, p: usize| x.map_or("-".to_string(), |v| format!("{v:.p$}"));
    let _ = writeln!(
        s,
        "Combine alone, one core (acc[i] += other[i], doubles; GB/s = bytes of one vector / time)"
    );
    let _ = writeln!(
        s,
        "{:>10} {:>10} {:>10} {:>10} {:>12}",
        "bytes", "kernel", "plain loop", "memcpy", "x memcpy"
    );
    for c in &r.combine {
        let _ = writeln!(
            s,
            "{:>10} {:>10.2} {:>10.2} {:>10.2} {:>11.2}x",
            c.bytes, c.kernel_gbs, c.plain_loop_gbs, c.memcpy_gbs, c.kernel_vs_memcpy
        );
    }
    s.push('\n');
    let _ = writeln!(
        s,
        "Large messages, {} members{} ({} tree), channels of {} slots, fragments of {} B; GB/s = bytes per member / time",
        r.members,
        if r.oversubscribed { " (more than CPUs, unpinned)" } else { "" },
        r.tree,
        r.capacity,
        r.segment
    );
    let _ = writeln!(
        s,
        "{:>10} {:>8} {:>10} {:>19} {:>11} {:>9} {:>9} {:>9}",
        "bytes", "memcpy", "op", "algorithm", "smelt GB/s", "x memcpy", "OMPI GB/s", "x OMPI"
    );
    for row in &r.rows {
        for o in &row.ops {
            let _ = writeln!(
                s,
                "{:>10} {:>8} {:>10} {:>19} {:>11} {:>9} {:>9} {:>9}",
                row.bytes,
                f(row.memcpy_gbs, 2),
                o.op,
                if o.auto && o.op == "allreduce" {
                    format!("{} (auto)", o.algorithm)
                } else {
                    o.algorithm.to_string()
                },
                f(o.smelt_gbs, 2),
                f(o.vs_memcpy, 2),
                f(o.open_mpi_gbs, 2),
                f(o.vs_open_mpi, 2)
            );
        }
    }
    let _ = writeln!(
        s,
        "(auto): the allreduce `auto` picks at that size (this machine's tuning file, else the prediction)"
    );
    for w in &r.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    s
}
