//! `smelt bench --large`: bandwidth of large broadcasts, reductions and allreductions
//! (64 KiB to 16 MiB by default) against `memcpy` of the same size on one core and
//! against Open MPI's `MPI_Bcast`, `MPI_Reduce` and `MPI_Allreduce` with as many
//! ranks, in one run. Reductions are sums of doubles, as in the MPI program.

use super::BenchArgs;
use anyhow::{bail, Result};
use serde::Serialize;
use smelt_model::Model;
use smelt_peers::c::{CPeers, MpiSystem};
use smelt_probe::figure::Status;
use smelt_probe::Budget;
use smelt_runtime::measure::{back_to_back_member_with, measure_back_to_back_with, MeasureConfig};
use smelt_runtime::{GroupConfig, Pinning};
use smelt_tree::{Op, Tree};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// The operations measured, with the MPI program's names.
const OPS: [(Op, &str); 3] = [
    (Op::Broadcast, "bcast"),
    (Op::Reduce, "reduce"),
    (Op::Allreduce, "allreduce"),
];

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
    smelt_gbs: Option<f64>,
    smelt_error: Option<String>,
    open_mpi_gbs: Option<f64>,
    open_mpi_note: Option<String>,
    /// smelt / memcpy bandwidth.
    vs_memcpy: Option<f64>,
    /// smelt / Open MPI bandwidth (> 1: smelt is faster).
    vs_open_mpi: Option<f64>,
}

#[derive(Serialize)]
struct LargeReport {
    tool: String,
    host: String,
    members: usize,
    tree: String,
    capacity: usize,
    segment: usize,
    rows: Vec<Row>,
    warnings: Vec<String>,
}

/// `memcpy` bandwidth of `bytes` on this core (GB/s): median of 7 timed batches
/// after a warm-up copy.
fn memcpy_gbs(bytes: usize) -> f64 {
    let src = vec![0x5au8; bytes];
    let mut dst = vec![0u8; bytes];
    dst.copy_from_slice(&src);
    let reps = ((256 << 20) / bytes.max(1)).clamp(2, 4096);
    let mut t: Vec<f64> = (0..7)
        .map(|_| {
            let t0 = Instant::now();
            for _ in 0..reps {
                dst.copy_from_slice(std::hint::black_box(&src));
                std::hint::black_box(&mut dst);
            }
            t0.elapsed().as_secs_f64() / reps as f64
        })
        .collect();
    t.sort_by(f64::total_cmp);
    bytes as f64 / t[3] / 1e9
}

/// smelt's ns per operation for `bytes` bytes per member over `tree`.
fn smelt_ns(tree: &Tree, op: Op, bytes: usize, cfg: &MeasureConfig) -> Result<f64, String> {
    let doubles = bytes / 8;
    let m = measure_back_to_back_with(tree, cfg, |m| {
        let mut buf = vec![0x11u8; bytes];
        let mut v = vec![m.rank().index() as f64; doubles];
        back_to_back_member_with(m, cfg, |m| match op {
            Op::Broadcast => m.broadcast_into(&mut buf),
            Op::Reduce => m.reduce_slice(&mut v, |a, b| a + b).map(|_| ()),
            _ => m.allreduce_slice(&mut v, |a, b| a + b),
        })
    })
    .map_err(|e| e.to_string())?;
    Ok(m.stats.median)
}

/// Runs the comparison on `model`'s CPUs.
pub fn run(a: &BenchArgs, model: &Model) -> Result<()> {
    let sizes = super::double_sizes(a, default_sizes(a.quick))?;
    let members = a.threads.unwrap_or(2).min(model.len()).max(1);
    if a.threads.is_some_and(|t| t > model.len()) {
        bail!(
            "option --threads: --large runs one member per CPU ({} CPUs here)",
            model.len()
        );
    }
    let pos: Vec<usize> = (0..members).collect();
    let tree = super::SMELT_TREE
        .generate(model, &pos, None)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let group = GroupConfig {
        capacity: a.capacity,
        timeout: Duration::from_secs_f64(a.timeout.unwrap_or(60.0)),
        pinning: Pinning::Auto,
        ..GroupConfig::default()
    };
    let segment = group.segment_bytes();
    let cfg = MeasureConfig {
        rounds: if a.quick { 5 } else { 9 },
        warmup: 1,
        batch: Duration::from_millis(if a.quick { 20 } else { 50 }),
        group,
    };
    let cpus: Vec<u32> = tree.members.iter().map(|c| c.get()).collect();
    let budget = Budget {
        batch: Duration::from_millis(if a.quick { 20 } else { 50 }),
        runs: if a.quick { 5 } else { 9 },
        timeout: Duration::from_secs_f64(a.timeout.unwrap_or(120.0)),
    };
    let mut warnings = Vec::new();
    // Open MPI: one mpirun for every size and operation.
    let ompi = if a.no_peers {
        Vec::new()
    } else {
        let names: Vec<&str> = OPS.iter().map(|o| o.1).collect();
        CPeers::new(smelt_peers::c::default_cache_dir()).mpi_sizes(
            &cpus,
            members,
            &budget,
            &sizes,
            &names,
            &MpiSystem::Tuned,
        )
    };
    let progress = smelt_probe::progress::Progress::new(true, (sizes.len() * 4) as u64, "figures")
        .with_label("smelt bench --large");
    let mut rows = Vec::new();
    for &bytes in &sizes {
        progress.step(format!("memcpy {bytes} B"));
        let mc = memcpy_gbs(bytes);
        progress.inc();
        let mut ops = Vec::new();
        for (op, mpi_name) in OPS {
            progress.step(format!("{} {bytes} B", op.name()));
            let gbs = |ns: f64| bytes as f64 / ns;
            let s = smelt_ns(&tree, op, bytes, &cfg);
            progress.inc();
            let o = ompi.iter().find(|f| f.op == mpi_name && f.bytes == bytes);
            let (o_gbs, o_note) = match o.map(|f| &f.status) {
                Some(Status::Ok { ns }) => (Some(gbs(ns.median)), None),
                Some(Status::Skipped { reason }) | Some(Status::Failed { reason }) => {
                    (None, Some(reason.clone()))
                }
                None if a.no_peers => (None, Some("--no-peers".into())),
                None => (None, Some("not measured".into())),
            };
            let s_gbs = s.as_ref().ok().map(|&ns| gbs(ns));
            ops.push(OpRow {
                op: op.name(),
                smelt_gbs: s_gbs,
                smelt_error: s.err(),
                open_mpi_gbs: o_gbs,
                open_mpi_note: o_note,
                vs_memcpy: s_gbs.map(|x| x / mc),
                vs_open_mpi: s_gbs.zip(o_gbs).map(|(x, y)| x / y),
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
        tree: super::SMELT_TREE.to_string(),
        capacity: a.capacity,
        segment,
        rows,
        warnings,
    };
    super::emit_report(a, &report, || table(&report))?;
    let failed: Vec<String> = report
        .rows
        .iter()
        .flat_map(|r| {
            r.ops.iter().filter_map(move |o| {
                o.smelt_error
                    .as_ref()
                    .map(|e| format!("{} {} B ({e})", o.op, r.bytes))
            })
        })
        .collect();
    super::fail_if_any(failed)
}

fn table(r: &LargeReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Large messages, {} members ({} tree), channels of {} slots, fragments of {} B; GB/s = bytes per member / time",
        r.members, r.tree, r.capacity, r.segment
    );
    let _ = write!(s, "{:>10} {:>8}", "bytes", "memcpy");
    for (op, _) in OPS {
        let _ = write!(
            s,
            " {:>34}",
            format!("{op}: smelt (x memcpy, x OMPI) | OMPI")
        );
    }
    s.push('\n');
    let f = |x: Option<f64>, p: usize| x.map_or("-".to_string(), |v| format!("{v:.p$}"));
    for row in &r.rows {
        let _ = write!(s, "{:>10} {:>8}", row.bytes, f(row.memcpy_gbs, 2));
        for o in &row.ops {
            let cell = format!(
                "{} ({}x, {}x) | {}",
                f(o.smelt_gbs, 2),
                f(o.vs_memcpy, 2),
                f(o.vs_open_mpi, 2),
                f(o.open_mpi_gbs, 2)
            );
            let _ = write!(s, " {cell:>34}");
        }
        s.push('\n');
    }
    for w in &r.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    s
}
