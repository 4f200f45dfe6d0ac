//! `smelt bench mpi`: what an unchanged MPI program gets from each implementation of
//! its collectives. `MPI_Bcast`, `MPI_Reduce`, `MPI_Allreduce` and `MPI_Barrier`
//! latency over message sizes, at several rank counts, for Open MPI's default
//! (`tuned`), its shared-memory component (`sm`), `han` (skipped on one host, where it
//! disqualifies itself) and smelt through the `LD_PRELOAD` interposer
//! (`libsmelt_mpi.so`), with and without emulated nodes: one run, one table per
//! operation, JSON, and a plot per operation and rank count.

use super::{BenchReport, Common};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use smelt_peers::c::{CPeers, MpiFigure, MpiSystem, MPI_OPS};
use smelt_probe::figure::Status;
use smelt_probe::Budget;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Default sizes: powers of two from 8 B to 64 KiB (every fourth with --quick).
fn default_sizes(quick: bool) -> Vec<usize> {
    let all: Vec<usize> = (3..=16).map(|k| 1usize << k).collect();
    if quick {
        vec![8, 64, 512, 4096, 32768, 65536]
    } else {
        all
    }
}

/// The interposer: `--lib`, else `$SMELT_MPI_LIB`, else `libsmelt_mpi.so` next to
/// this executable (a cargo build puts both in `target/<profile>/`).
fn find_lib(given: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = given {
        return Some(p.to_path_buf());
    }
    if let Some(p) = smelt_settings::path(smelt_settings::MPI_LIB) {
        return Some(p);
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    // Test binaries live one level down, in target/<profile>/deps.
    [dir.join("libsmelt_mpi.so"), dir.join("../libsmelt_mpi.so")]
        .into_iter()
        .find(|p| p.is_file())
}

/// One row of the JSON report.
#[derive(Serialize)]
struct Row {
    system: String,
    op: String,
    bytes: usize,
    ranks: usize,
    /// Ranks per emulated node (smelt only), if the run split the host.
    ranks_per_node: Option<usize>,
    #[serde(flatten)]
    status: Status,
}

/// The options of `smelt bench mpi`.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Quick runs, the timeout per mpirun.
    pub common: Common,
    /// Operations (bcast or broadcast, reduce, allreduce, barrier; default: all four).
    pub ops: Vec<String>,
    /// Message sizes in bytes (default powers of two from 8 to 65536; fewer quick).
    pub sizes: Vec<usize>,
    /// Rank counts (default 2, 8).
    pub ranks: Vec<usize>,
    /// Also run 2K ranks with smelt splitting them into emulated nodes of K (0: none).
    pub nodes_of: usize,
    /// The interposer library (default: `$SMELT_MPI_LIB`, else `libsmelt_mpi.so` next
    /// to the running executable).
    pub lib: Option<PathBuf>,
    /// CPUs to run on (default: every CPU this process may use).
    pub cpus: Option<Vec<u32>>,
}

/// The report of `smelt bench mpi`.
#[derive(Serialize)]
pub struct MpiReport {
    tool: String,
    date: String,
    cpus: Vec<u32>,
    sizes: Vec<usize>,
    interposer: Option<String>,
    rows: Vec<Row>,
    /// Open MPI (tuned) time over smelt's, per (op, bytes, ranks): above 1, smelt is
    /// faster.
    speedups: Vec<Speedup>,
    #[serde(skip)]
    figures: Vec<(Config, MpiFigure)>,
    #[serde(skip)]
    configs: Vec<Config>,
    #[serde(skip)]
    ops: Vec<&'static str>,
}

#[derive(Serialize)]
struct Speedup {
    op: String,
    bytes: usize,
    ranks: usize,
    ranks_per_node: Option<usize>,
    versus: String,
    /// The median of `rounds`.
    value: f64,
    /// The ratio of each round (one for a system run once).
    rounds: Vec<f64>,
}

fn median(s: &Status) -> Option<f64> {
    match s {
        Status::Ok { ns } => Some(ns.median),
        _ => None,
    }
}

/// A configuration of the run: ranks, and emulated nodes for smelt.
#[derive(Clone, Copy)]
struct Config {
    ranks: usize,
    nodes_of: Option<usize>,
}

/// Measures `smelt bench mpi`.
pub fn measure(o: &Options) -> Result<MpiReport> {
    let a = &o.common;
    let sizes = if o.sizes.is_empty() {
        default_sizes(a.quick)
    } else {
        o.sizes.clone()
    };
    let ops: Vec<&'static str> = if !o.ops.is_empty() {
        o.ops
            .iter()
            .map(|o| match o.trim().to_ascii_lowercase().as_str() {
                "broadcast" | "bcast" => Ok("bcast"),
                "reduce" => Ok("reduce"),
                "allreduce" => Ok("allreduce"),
                "barrier" => Ok("barrier"),
                other => bail!(
                    "option --ops: '{other}' is not an MPI collective smelt takes over (known: {})",
                    MPI_OPS.join(", ")
                ),
            })
            .collect::<Result<_>>()?
    } else {
        MPI_OPS.to_vec()
    };
    let ranks = if o.ranks.is_empty() {
        vec![2, 8]
    } else {
        o.ranks.clone()
    };
    let cpus: Vec<u32> = match &o.cpus {
        Some(c) => c.clone(),
        None => smelt_transport::allowed_cpus().unwrap_or_else(|_| vec![0]),
    };
    let lib = find_lib(o.lib.as_deref());
    if lib.is_none() {
        super::warn(
            "no libsmelt_mpi.so found (build it with `cargo build --release -p smelt-mpi --features mpi`, \
             or pass --lib PATH): smelt's rows are skipped",
        );
    }
    let mut configs: Vec<Config> = ranks
        .iter()
        .map(|&r| Config {
            ranks: r,
            nodes_of: None,
        })
        .collect();
    if o.nodes_of > 0 {
        configs.push(Config {
            ranks: 2 * o.nodes_of,
            nodes_of: Some(o.nodes_of),
        });
    }
    let timeout = Duration::from_secs_f64(a.timeout.unwrap_or(if a.quick { 60.0 } else { 180.0 }));
    let budget = Budget {
        batch: Duration::from_millis(if a.quick { 2 } else { 10 }),
        runs: if a.quick { 7 } else { 15 },
        timeout,
    };
    let peers = CPeers::new(smelt_peers::c::default_cache_dir());
    let mut rows = Vec::new();
    let mut figures: Vec<(Config, MpiFigure)> = Vec::new();
    let mut speedups = Vec::new();
    // Open MPI's default (tuned) and smelt run alternately, ROUNDS times each, and
    // each cell's tuned/smelt is the median of its rounds' ratios: one mpirun after
    // the other, a change of the machine's pace between them moved cells by 0.7-1.3x.
    // The other two systems run once, for reference.
    let total = configs.len() * (2 * ROUNDS + 2);
    let mut step = 0;
    for c in &configs {
        let smelt = MpiSystem::Smelt {
            lib: lib
                .clone()
                .unwrap_or_else(|| PathBuf::from("libsmelt_mpi.so")),
            ranks_per_node: c.nodes_of,
        };
        let mut once = Vec::new();
        let mut tuned_rounds = Vec::new();
        let mut smelt_rounds = Vec::new();
        for round in 0..ROUNDS {
            let mut systems = vec![MpiSystem::Tuned, smelt.clone()];
            if round == 0 {
                systems.extend([MpiSystem::Sm, MpiSystem::Han]);
            }
            for sys in systems {
                step += 1;
                eprintln!(
                    "[{step}/{total}] {} with {} ranks{}{}",
                    sys.label(),
                    c.ranks,
                    c.nodes_of
                        .map(|k| format!(" (smelt: nodes of {k})"))
                        .unwrap_or_default(),
                    match sys {
                        MpiSystem::Tuned | MpiSystem::Smelt { .. } =>
                            format!(", round {} of {ROUNDS}", round + 1),
                        _ => String::new(),
                    }
                );
                let ids = smelt_mesh::CpuId::list(cpus.iter().copied());
                let f = peers.mpi_sizes(&ids, c.ranks, &budget, &sizes, &ops, &sys);
                match sys {
                    MpiSystem::Tuned => tuned_rounds.push(f),
                    MpiSystem::Smelt { .. } => smelt_rounds.push(f),
                    _ => once.push(f),
                }
            }
        }
        speedups.extend(interleaved_speedups(*c, &tuned_rounds, &smelt_rounds));
        let [sm, han] = [once.remove(0), once.remove(0)];
        for f in [
            median_round(&tuned_rounds),
            sm,
            han,
            median_round(&smelt_rounds),
        ] {
            figures.extend(f.into_iter().map(|f| (*c, f)));
        }
        // smelt against the sm component: the figures of one run each.
        speedups.extend(speedups_versus(&figures, *c, "Open MPI (sm)"));
    }
    for (c, f) in &figures {
        rows.push(Row {
            system: f.system.clone(),
            op: f.op.clone(),
            bytes: f.bytes,
            ranks: f.ranks,
            ranks_per_node: c.nodes_of.filter(|_| f.system.starts_with("smelt")),
            status: f.status.clone(),
        });
    }
    let report = MpiReport {
        tool: format!("smelt {}", env!("CARGO_PKG_VERSION")),
        date: smelt_model::host::now_rfc3339(),
        cpus: cpus.clone(),
        sizes: sizes.clone(),
        interposer: lib.as_ref().map(|p| p.display().to_string()),
        rows,
        speedups,
        figures,
        configs,
        ops,
    };
    Ok(report)
}

impl BenchReport for MpiReport {
    fn table(&self) -> String {
        table(&self.figures, &self.speedups, &self.configs, &self.ops)
    }

    fn failed(&self) -> Vec<String> {
        self.figures
            .iter()
            .filter(|(_, f)| matches!(f.status, Status::Failed { .. }))
            .map(|(_, f)| format!("{} {} {} B x{}", f.system, f.op, f.bytes, f.ranks))
            .collect()
    }
}

impl MpiReport {
    /// Writes a latency-against-size plot per operation and configuration: `path`
    /// `x.svg` gives `x-bcast-2r.svg`, `x-reduce-4r-nodes2.svg`, ... (.svg or .png).
    pub fn plot(&self, path: &Path) -> Result<()> {
        plot(&self.figures, &self.configs, &self.ops, path)
    }
}

/// Rounds of tuned and of smelt alternated per configuration.
const ROUNDS: usize = 5;

/// Each (op, bytes) figure of the round whose median is the median of the rounds'
/// (the figures of one round stay together); a cell no round measured keeps the first
/// round's status (why it is missing).
fn median_round(rounds: &[Vec<MpiFigure>]) -> Vec<MpiFigure> {
    let Some(first) = rounds.first() else {
        return Vec::new();
    };
    first
        .iter()
        .map(|f0| {
            let mut ok: Vec<&MpiFigure> = rounds
                .iter()
                .filter_map(|r| r.iter().find(|f| f.op == f0.op && f.bytes == f0.bytes))
                .filter(|f| median(&f.status).is_some())
                .collect();
            ok.sort_by(|a, b| {
                median(&a.status)
                    .unwrap()
                    .total_cmp(&median(&b.status).unwrap())
            });
            ok.get(ok.len().saturating_sub(1) / 2)
                .map_or_else(|| f0.clone(), |f| (*f).clone())
        })
        .collect()
}

/// Open MPI (tuned) over smelt per cell of configuration `c`: the median of the
/// ratios of the rounds that measured both (round k's tuned against round k's smelt).
fn interleaved_speedups(
    c: Config,
    tuned: &[Vec<MpiFigure>],
    smelt: &[Vec<MpiFigure>],
) -> Vec<Speedup> {
    let mut out = Vec::new();
    let Some(first) = smelt.first() else {
        return out;
    };
    for s0 in first {
        let per: Vec<f64> = tuned
            .iter()
            .zip(smelt)
            .filter_map(|(t, m)| {
                let find = |v: &Vec<MpiFigure>| {
                    v.iter()
                        .find(|f| f.op == s0.op && f.bytes == s0.bytes)
                        .and_then(|f| median(&f.status))
                };
                Some(find(t)? / find(m)?)
            })
            .collect();
        if per.is_empty() {
            continue;
        }
        out.push(Speedup {
            op: s0.op.clone(),
            bytes: s0.bytes,
            ranks: s0.ranks,
            ranks_per_node: c.nodes_of,
            versus: "Open MPI (tuned)".into(),
            value: smelt_ids::stats::median(&per),
            rounds: per,
        });
    }
    out
}

/// `versus` (a system run once) over smelt per cell of configuration `c`, from the
/// figures kept.
fn speedups_versus(figures: &[(Config, MpiFigure)], c: Config, versus: &str) -> Vec<Speedup> {
    let mut out = Vec::new();
    let same = |c2: &Config| c2.ranks == c.ranks && c2.nodes_of == c.nodes_of;
    for (_, s) in figures
        .iter()
        .filter(|(c2, f)| same(c2) && f.system.starts_with("smelt"))
    {
        let Some(mine) = median(&s.status) else {
            continue;
        };
        let theirs = figures
            .iter()
            .find(|(c2, f)| same(c2) && f.system == versus && f.op == s.op && f.bytes == s.bytes);
        if let Some(t) = theirs.and_then(|(_, f)| median(&f.status)) {
            out.push(Speedup {
                op: s.op.clone(),
                bytes: s.bytes,
                ranks: s.ranks,
                ranks_per_node: c.nodes_of,
                versus: versus.into(),
                value: t / mine,
                rounds: vec![t / mine],
            });
        }
    }
    out
}

fn cell(s: &Status) -> String {
    match s {
        Status::Ok { ns } if ns.median >= 10_000.0 => format!("{:.1} µs", ns.median / 1000.0),
        Status::Ok { ns } => format!("{:.0} ns", ns.median),
        Status::Skipped { .. } => "skipped".into(),
        Status::Failed { .. } => "FAILED".into(),
    }
}

fn table(
    figures: &[(Config, MpiFigure)],
    speedups: &[Speedup],
    configs: &[Config],
    ops: &[&str],
) -> String {
    let mut t = String::new();
    let mut notes: Vec<String> = Vec::new();
    for c in configs {
        for op in ops {
            let mine: Vec<&MpiFigure> = figures
                .iter()
                .filter(|(c2, f)| c2.ranks == c.ranks && c2.nodes_of == c.nodes_of && f.op == *op)
                .map(|(_, f)| f)
                .collect();
            let mut systems: Vec<&str> = Vec::new();
            for f in &mine {
                if !systems.contains(&f.system.as_str()) {
                    systems.push(&f.system);
                }
            }
            let mut sizes: Vec<usize> = mine.iter().map(|f| f.bytes).collect();
            sizes.sort_unstable();
            sizes.dedup();
            t.push_str(&format!(
                "\nMPI_{} — {} ranks{}\n",
                op[..1].to_uppercase() + &op[1..],
                c.ranks,
                c.nodes_of
                    .map(|k| format!(", smelt with emulated nodes of {k}"))
                    .unwrap_or_default()
            ));
            let w: Vec<usize> = systems.iter().map(|s| s.chars().count().max(9)).collect();
            t.push_str(&format!("{:>9}", "bytes"));
            for s in &systems {
                t.push_str(&format!("  {s:>9}"));
            }
            t.push_str(&format!(
                "  tuned/smelt (median of {ROUNDS} alternated rounds)\n"
            ));
            for b in sizes {
                t.push_str(&format!("{b:>9}"));
                for (s, w) in systems.iter().zip(&w) {
                    let f = mine.iter().find(|f| f.system == *s && f.bytes == b);
                    let st = f.map(|f| &f.status);
                    t.push_str(&format!("  {:>w$}", st.map(cell).unwrap_or_default()));
                    if let Some(Status::Skipped { reason } | Status::Failed { reason }) = st {
                        let n = format!("{s}: {reason}");
                        if !notes.contains(&n) {
                            notes.push(n);
                        }
                    }
                }
                let ratio = speedups.iter().find(|x| {
                    x.versus == "Open MPI (tuned)"
                        && x.op == *op
                        && x.bytes == b
                        && x.ranks == c.ranks
                        && x.ranks_per_node == c.nodes_of
                });
                match ratio {
                    Some(x) => {
                        let each: Vec<String> =
                            x.rounds.iter().map(|r| format!("{r:.2}")).collect();
                        t.push_str(&format!("  {:>10.2}×  ({})\n", x.value, each.join(" ")))
                    }
                    None => t.push_str(&format!("  {:>11}\n", "—")),
                }
            }
        }
    }
    for n in notes {
        t.push_str(&format!("note: {n}\n"));
    }
    t
}

/// One plot per operation and configuration: latency against log2(bytes), one line
/// per system. `path` `x.svg` gives `x-bcast-2r.svg`, `x-reduce-4r-nodes2.svg`, ...
fn plot(
    figures: &[(Config, MpiFigure)],
    configs: &[Config],
    ops: &[&str],
    path: &Path,
) -> Result<()> {
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .context("option --plot: no file name")?;
    let ext = path.extension().and_then(|s| s.to_str()).unwrap_or("svg");
    for c in configs {
        for op in ops.iter().filter(|o| **o != "barrier") {
            let mine: Vec<&MpiFigure> = figures
                .iter()
                .filter(|(c2, f)| c2.ranks == c.ranks && c2.nodes_of == c.nodes_of && f.op == *op)
                .map(|(_, f)| f)
                .collect();
            let mut sizes: Vec<usize> = mine.iter().map(|f| f.bytes).collect();
            sizes.sort_unstable();
            sizes.dedup();
            let mut series: Vec<(String, Vec<f64>)> = Vec::new();
            for f in &mine {
                if series.iter().any(|(s, _)| *s == f.system) {
                    continue;
                }
                let ys = sizes
                    .iter()
                    .map(|b| {
                        mine.iter()
                            .find(|g| g.system == f.system && g.bytes == *b)
                            .and_then(|g| median(&g.status))
                            .map_or(f64::NAN, |ns| ns / 1000.0)
                    })
                    .collect::<Vec<_>>();
                if ys.iter().any(|y| y.is_finite()) {
                    series.push((f.system.clone(), ys));
                }
            }
            if series.is_empty() {
                continue;
            }
            let name = format!(
                "{stem}-{op}-{}r{}.{ext}",
                c.ranks,
                c.nodes_of.map(|k| format!("-nodes{k}")).unwrap_or_default()
            );
            let out = path.with_file_name(name);
            let chart = smelt_tree::plot::LineChart {
                title: format!("MPI_{op}, {} ranks", c.ranks),
                x_label: "log2(message bytes)".into(),
                y_label: "µs per call".into(),
                x: sizes.iter().map(|&b| (b as f64).log2()).collect(),
                series,
            };
            smelt_tree::plot::render_lines(&chart, &out)
                .map_err(|e| anyhow::anyhow!("option --plot: {e}"))?;
            eprintln!("wrote {}", out.display());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_sizes_run_from_8_bytes_to_64_kib() {
        let s = default_sizes(false);
        assert_eq!((s[0], *s.last().unwrap(), s.len()), (8, 65536, 14));
        assert!(default_sizes(true).len() < s.len());
    }

    #[test]
    fn speedup_is_the_median_of_the_alternated_rounds_ratios() {
        let summary = |m: f64| smelt_tree::stats::summarize(&[m]).unwrap();
        let f = |system: &str, m: f64| MpiFigure {
            system: system.into(),
            op: "bcast".into(),
            bytes: 8,
            ranks: 2,
            status: Status::Ok { ns: summary(m) },
        };
        let failed = |system: &str| MpiFigure {
            status: Status::Failed {
                reason: "timed out".into(),
            },
            ..f(system, 1.0)
        };
        let c = Config {
            ranks: 2,
            nodes_of: None,
        };
        let tuned = |m: f64| vec![f("Open MPI (tuned)", m)];
        let smelt = |m: f64| vec![f("smelt (interposer)", m)];
        // Round by round 3.0, 1.5 and 3.3: the median is 3.0, though the medians of
        // each system's rounds (300 and 100) would say 3.0 too only by chance; a
        // round that failed does not count.
        let t = vec![
            tuned(300.0),
            tuned(150.0),
            tuned(330.0),
            vec![failed("Open MPI (tuned)")],
        ];
        let m = vec![smelt(100.0), smelt(100.0), smelt(100.0), smelt(100.0)];
        let s = interleaved_speedups(c, &t, &m);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].rounds.len(), 3, "{:?}", s[0].rounds);
        assert!((s[0].value - 3.0).abs() < 1e-9 && s[0].versus == "Open MPI (tuned)");
        // The kept figure is the median round's.
        let kept = median_round(&t);
        assert_eq!(median(&kept[0].status), Some(300.0));
        assert!(matches!(
            median_round(&[vec![failed("x")]])[0].status,
            Status::Failed { .. }
        ));
        let mut figs: Vec<(Config, MpiFigure)> = kept.into_iter().map(|f| (c, f)).collect();
        figs.push((c, f("Open MPI (sm)", 200.0)));
        figs.push((c, f("smelt (interposer)", 100.0)));
        let mut all = s;
        all.extend(speedups_versus(&figs, c, "Open MPI (sm)"));
        assert!((all[1].value - 2.0).abs() < 1e-9 && all[1].versus == "Open MPI (sm)");
        let table = table(&figs, &all, &[c], &["bcast"]);
        assert!(table.contains("3.00×  (3.00 1.50 3.30)"), "{table}");
    }
}
