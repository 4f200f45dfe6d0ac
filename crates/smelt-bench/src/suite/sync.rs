//! `smelt bench sync`: the experiment of seed 001 §3. Back-to-back reductions of
//! vectors of doubles (8 B to 64 KiB), loose and strict, over the flat tree
//! (sequential), k-nomial trees of radix 1 (chain), 2, 4, 8 and 16, and smelt's tree:
//! how much loose synchronization gains, and whether it changes which tree wins.

use super::smelt::oversubscribed_model;
use super::{BenchReport, Common};
use anyhow::Result;
use serde::Serialize;
use smelt_model::Model;
use smelt_runtime::measure::{measure_reduce_doubles, MeasureConfig};
use smelt_runtime::{GroupConfig, Pinning, SyncMode};
use smelt_tree::{Topology, Tree};
use std::fmt::Write as _;
use std::time::Duration;

/// The trees of the experiment.
fn default_trees() -> Vec<Topology> {
    let mut v = vec![Topology::Sequential];
    v.extend([1, 2, 4, 8, 16].map(Topology::Knomial));
    v.push(super::SMELT_TREE);
    v
}

/// Default sizes: powers of two from 8 B to 64 KiB (fewer with --quick).
fn default_sizes(quick: bool) -> Vec<usize> {
    if quick {
        vec![8, 64, 1024, 8192, 65536]
    } else {
        (3..=16).map(|k| 1usize << k).collect()
    }
}

/// One measured figure.
#[derive(Serialize)]
struct Row {
    tree: String,
    bytes: usize,
    mode: &'static str,
    /// Median ns per reduction, if measured.
    median_ns: Option<f64>,
    p10_ns: Option<f64>,
    p90_ns: Option<f64>,
    error: Option<String>,
}

/// Loose over strict for one tree and size.
#[derive(Serialize)]
struct Gain {
    tree: String,
    bytes: usize,
    /// Strict time / loose time (> 1: loose is faster).
    loose_speedup: f64,
}

/// The options of `smelt bench sync`.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Quick runs, the timeout per figure.
    pub common: Common,
    /// Message sizes in bytes, each a multiple of 8 (default 8 B to 64 KiB).
    pub sizes: Vec<usize>,
    /// Topology names (default: flat, k-nomial radix 1, 2, 4, 8, 16, smelt's tree).
    pub topologies: Vec<String>,
}

/// The report of `smelt bench sync`.
#[derive(Serialize)]
pub struct SyncReport {
    tool: String,
    host: String,
    members: usize,
    cpus: Vec<u32>,
    /// Fastest tree per size and mode.
    best: Vec<(usize, &'static str, String)>,
    gains: Vec<Gain>,
    rows: Vec<Row>,
    warnings: Vec<String>,
    #[serde(skip)]
    sizes: Vec<usize>,
    #[serde(skip)]
    built: Vec<(Topology, Tree)>,
}

/// Runs the experiment on `model`'s CPUs with `members` members.
pub fn measure(o: &Options, model: &Model, members: usize) -> Result<SyncReport> {
    let a = &o.common;
    let sizes = super::double_sizes(&o.sizes, default_sizes(a.quick))?;
    let trees: Vec<Topology> = if o.topologies.is_empty() {
        default_trees()
    } else {
        o.topologies
            .iter()
            .map(|s| {
                s.parse()
                    .map_err(|e| anyhow::anyhow!("option --topologies: {e}"))
            })
            .collect::<Result<_>>()?
    };
    let oversubscribed = members > model.len();
    let expanded;
    let m = if oversubscribed {
        expanded = oversubscribed_model(model, members);
        &expanded
    } else {
        model
    };
    let pos: Vec<usize> = (0..members).collect();
    let built: Vec<(Topology, Tree)> = trees
        .iter()
        .map(|&t| {
            t.generate(m, &pos, None)
                .map(|tree| (t, tree))
                .map_err(|e| anyhow::anyhow!("{t}: {e}"))
        })
        .collect::<Result<_>>()?;
    let timeout = Duration::from_secs_f64(a.timeout.unwrap_or(if a.quick { 20.0 } else { 60.0 }));
    let cfg = MeasureConfig {
        rounds: if a.quick { 5 } else { 11 },
        warmup: 1,
        batch: Duration::from_millis(if a.quick { 2 } else { 20 }),
        group: GroupConfig {
            link: smelt_runtime::LinkConfig::default().timeout(timeout),
            pinning: if oversubscribed {
                Pinning::Never
            } else {
                Pinning::Auto
            },
            ..GroupConfig::default()
        },
    };
    let total = (built.len() * sizes.len() * 2) as u64;
    let progress =
        smelt_probe::progress::Progress::new(true, total, "figures").with_label("smelt bench sync");
    let mut rows = Vec::new();
    for &bytes in &sizes {
        for (t, tree) in &built {
            for mode in [SyncMode::Loose, SyncMode::Strict] {
                progress.step(format!("{t} {bytes} B {mode}"));
                let r = measure_reduce_doubles(tree, bytes / 8, mode, &cfg);
                progress.inc();
                let stats = r.as_ref().ok().map(|m| &m.stats);
                rows.push(Row {
                    tree: t.to_string(),
                    bytes,
                    mode: mode.name(),
                    median_ns: stats.map(|s| s.median),
                    p10_ns: stats.map(|s| s.p10),
                    p90_ns: stats.map(|s| s.p90),
                    error: r.as_ref().err().map(|e| e.to_string()),
                });
            }
        }
    }
    progress.finish();
    let find = |tree: &str, bytes: usize, mode: &str| median_ns(&rows, tree, bytes, mode);
    let mut gains = Vec::new();
    let mut best = Vec::new();
    for &bytes in &sizes {
        for (t, _) in &built {
            let name = t.to_string();
            if let (Some(l), Some(s)) = (find(&name, bytes, "loose"), find(&name, bytes, "strict"))
            {
                if l > 0.0 {
                    gains.push(Gain {
                        tree: name,
                        bytes,
                        loose_speedup: s / l,
                    });
                }
            }
        }
        for mode in ["loose", "strict"] {
            if let Some(b) = rows
                .iter()
                .filter(|r| r.bytes == bytes && r.mode == mode && r.median_ns.is_some())
                .min_by(|x, y| x.median_ns.unwrap().total_cmp(&y.median_ns.unwrap()))
            {
                best.push((bytes, mode, b.tree.clone()));
            }
        }
    }
    let mut warnings = Vec::new();
    if oversubscribed {
        warnings.push(format!(
            "{members} members share {} CPUs: every tree level costs a scheduling round, so figures include scheduling",
            model.len()
        ));
    }
    if cfg!(debug_assertions) {
        warnings.push("this smelt is a debug build: build with --release for figures".into());
    }
    let report = SyncReport {
        tool: format!("smelt {}", env!("CARGO_PKG_VERSION")),
        host: smelt_model::host::host_name(),
        members,
        cpus: model.cpus.clone(),
        best,
        gains,
        rows,
        warnings,
        sizes,
        built,
    };
    Ok(report)
}

impl BenchReport for SyncReport {
    fn table(&self) -> String {
        table(self, &self.sizes, &self.built)
    }

    fn failed(&self) -> Vec<String> {
        self.rows
            .iter()
            .filter_map(|r| {
                r.error
                    .as_ref()
                    .map(|e| format!("{} {} B {} ({e})", r.tree, r.bytes, r.mode))
            })
            .collect()
    }
}

/// The median of `tree` at `bytes` in `mode`, if that figure was measured.
fn median_ns(rows: &[Row], tree: &str, bytes: usize, mode: &str) -> Option<f64> {
    rows.iter()
        .find(|r| r.tree == tree && r.bytes == bytes && r.mode == mode)
        .and_then(|r| r.median_ns)
}

fn table(r: &SyncReport, sizes: &[usize], built: &[(Topology, Tree)]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Back-to-back reduce of doubles (sum), {} members, ns per reduction (median): loose | strict | strict/loose",
        r.members
    );
    let _ = write!(s, "{:>8}", "bytes");
    for (t, _) in built {
        let _ = write!(s, " {:>26}", t.to_string());
    }
    s.push('\n');
    for &bytes in sizes {
        let _ = write!(s, "{bytes:>8}");
        for (t, _) in built {
            let name = t.to_string();
            let get = |mode: &str| median_ns(&r.rows, &name, bytes, mode);
            let cell = match (get("loose"), get("strict")) {
                (Some(l), Some(st)) => format!("{l:.0} | {st:.0} | {:.2}x", st / l),
                _ => "failed".into(),
            };
            let _ = write!(s, " {cell:>26}");
        }
        s.push('\n');
    }
    s.push_str("\nFastest tree per size: ");
    let mut first = true;
    for &bytes in sizes {
        let pick = |mode: &str| {
            r.best
                .iter()
                .find(|(b, m, _)| *b == bytes && *m == mode)
                .map(|x| x.2.clone())
                .unwrap_or("-".into())
        };
        if !first {
            s.push_str("; ");
        }
        first = false;
        let _ = write!(
            s,
            "{bytes} B loose {} strict {}",
            pick("loose"),
            pick("strict")
        );
    }
    s.push('\n');
    for w in &r.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    s
}
