//! Comparisons of topologies under a model: every topology × every operation, the
//! best static tree per operation and the speedups over it (the paper's Figure 9),
//! group-size scaling (Figure 10), and rank correlation with measured times
//! (`ab-bench.csv` of the Smelt machine database).

use crate::costs::Costs;
use crate::sim::{predict_local, Op, Payload, Prediction};
use crate::stats::spearman;
use crate::topology::Topology;
use crate::tree::{Tree, TreeError};
use crate::Error;
use serde::Serialize;
use smelt_model::Model;
use std::path::Path;

/// Where a compared tree comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TreeSource {
    /// A generator of the registry.
    Generated(Topology),
    /// A tree file (its name as shown).
    File(String),
}

impl TreeSource {
    /// A static generated tree (a file's tree is never "the best static tree").
    pub fn is_static(&self) -> bool {
        matches!(self, TreeSource::Generated(t) if t.is_static())
    }
}

impl std::fmt::Display for TreeSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TreeSource::Generated(t) => write!(f, "{t}"),
            TreeSource::File(name) => write!(f, "file:{name}"),
        }
    }
}

/// One topology's tree and predicted times over a group.
#[derive(Debug, Clone)]
pub struct Row {
    /// The topology, or the tree file.
    pub topology: TreeSource,
    /// Its tree over the group.
    pub tree: Tree,
    /// Predicted time of every operation.
    pub prediction: Prediction,
}

/// Builds every topology in `topologies` over `members` (model positions) and
/// predicts every operation. `root`: a model position, or the default root.
pub fn evaluate_group(
    model: &Model,
    members: &[usize],
    root: Option<usize>,
    topologies: &[Topology],
    pl: Payload,
) -> Result<Vec<Row>, TreeError> {
    let c = Costs::new(model, members)?;
    let r = match root {
        None => c.default_root(),
        Some(p) => members.iter().position(|&m| m == p).ok_or_else(|| {
            TreeError::Invalid(format!(
                "the root CPU {} is not in the group",
                model.cpus.get(p).copied().unwrap_or(u32::MAX)
            ))
        })?,
    };
    Ok(topologies
        .iter()
        .map(|&t| {
            let ch = t.children(&c, r);
            let prediction = predict_local(&c, r, &ch, pl);
            Row {
                topology: TreeSource::Generated(t),
                tree: c.tree(r, ch),
                prediction,
            }
        })
        .collect())
}

/// A given tree's row (a tree file named `name`): its predicted times under `model`.
pub fn evaluate_tree(
    model: &Model,
    tree: &Tree,
    name: &str,
    pl: Payload,
) -> Result<Row, TreeError> {
    Ok(Row {
        topology: TreeSource::File(name.to_string()),
        tree: tree.clone(),
        prediction: crate::sim::predict(model, tree, pl)?,
    })
}

/// The static topology with the lowest predicted time for `op` (first on ties).
pub fn best_static(rows: &[Row], op: Op) -> Option<&Row> {
    rows.iter()
        .filter(|r| r.topology.is_static())
        .min_by(|a, b| a.prediction.get(op).total_cmp(&b.prediction.get(op)))
}

/// Speedup of `row` over the best static tree for `op` (> 1: faster).
pub fn speedup(rows: &[Row], row: &Row, op: Op) -> Option<f64> {
    let best = best_static(rows, op)?.prediction.get(op);
    let t = row.prediction.get(op);
    (t > 0.0).then(|| best / t)
}

/// Groups of 2..=n members placed round-robin over the nodes (first member of
/// every node, then the second, ...), as in the paper's Figure 10. Positions.
pub fn round_robin_groups(model: &Model, members: &[usize]) -> Vec<Vec<usize>> {
    let ids = model.node_ids();
    let mut nodes: Vec<(usize, Vec<usize>)> = Vec::new();
    for &p in members {
        match nodes.iter_mut().find(|(g, _)| *g == ids[p]) {
            Some((_, v)) => v.push(p),
            None => nodes.push((ids[p], vec![p])),
        }
    }
    let mut order = Vec::with_capacity(members.len());
    let mut k = 0;
    while order.len() < members.len() {
        for (_, v) in &nodes {
            if let Some(&p) = v.get(k) {
                order.push(p);
            }
        }
        k += 1;
    }
    (2..=order.len()).map(|s| order[..s].to_vec()).collect()
}

/// Measured times from a machine database `ab-bench.csv`: one row per operation
/// (`barriers`, `reduction`, `ab`, `agreement`), one column per topology (with
/// `_stderr` columns), ×1000 cycles.
#[derive(Debug, Clone, PartialEq)]
pub struct AbBench {
    /// Topology column names as in the file (`bintree`, ..., `AT`).
    pub columns: Vec<String>,
    /// (operation name, value per column).
    pub rows: Vec<(String, Vec<f64>)>,
}

/// The topology a column of `ab-bench.csv` names (`AT` is the adaptive tree).
pub fn ab_bench_topology(column: &str) -> Option<Topology> {
    match column {
        "AT" => Some(Topology::Adaptive),
        other => other.parse().ok(),
    }
}

/// The simulator operation an `ab-bench.csv` row measures.
pub fn ab_bench_op(row: &str) -> Option<Op> {
    match row {
        "barriers" | "barrier" => Some(Op::Barrier),
        "reduction" | "reduce" => Some(Op::Reduce),
        "ab" => Some(Op::AtomicBroadcast),
        "agreement" | "2pc" => Some(Op::TwoPhaseCommit),
        "broadcast" => Some(Op::Broadcast),
        _ => None,
    }
}

/// Reads an `ab-bench.csv`. Errors name the file and line.
pub fn read_ab_bench(path: &Path) -> Result<AbBench, Error> {
    read_ab_bench_why(path).map_err(Error::Input)
}

fn read_ab_bench_why(path: &Path) -> Result<AbBench, String> {
    let text = smelt_model::files::read_input_text(path).map_err(|e| e.to_string())?;
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, head) = lines
        .next()
        .ok_or_else(|| format!("{}: the file is empty", path.display()))?;
    let head: Vec<&str> = head.split(',').map(str::trim).collect();
    let keep: Vec<usize> = (1..head.len())
        .filter(|&i| !head[i].ends_with("_stderr"))
        .collect();
    if keep.is_empty() {
        return Err(format!(
            "{}:1: no topology columns in the header",
            path.display()
        ));
    }
    let mut rows = Vec::new();
    for (ln, line) in lines {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() != head.len() {
            return Err(format!(
                "{}:{}: {} fields, the header has {}",
                path.display(),
                ln + 1,
                f.len(),
                head.len()
            ));
        }
        let vals = keep
            .iter()
            .map(|&i| {
                f[i].parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite())
                    .ok_or_else(|| {
                        format!("{}:{}: '{}' is not a number", path.display(), ln + 1, f[i])
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        rows.push((f[0].to_string(), vals));
    }
    Ok(AbBench {
        columns: keep.iter().map(|&i| head[i].to_string()).collect(),
        rows,
    })
}

/// Rank correlation of predicted and measured times for one operation.
#[derive(Debug, Clone, Serialize)]
pub struct Correlation {
    /// Row name in the file.
    pub operation: String,
    /// Simulator operation compared.
    pub op: &'static str,
    /// (column, measured, predicted) per topology.
    pub pairs: Vec<(String, f64, f64)>,
    /// Spearman's rho (None if undefined).
    pub spearman: Option<f64>,
    /// The column measured fastest.
    pub best_measured: Option<String>,
    /// The column predicted fastest: what choosing by prediction would pick.
    pub best_predicted: Option<String>,
}

impl Correlation {
    /// True if choosing by prediction picks the measured fastest tree.
    pub fn best_agrees(&self) -> bool {
        self.best_measured.is_some() && self.best_measured == self.best_predicted
    }
}

/// Spearman correlation between `predict(topology)` and the measured times, per
/// row of `bench` the simulator knows. Columns naming no topology are skipped.
pub fn correlate(
    bench: &AbBench,
    mut predict: impl FnMut(Topology) -> Prediction,
) -> Vec<Correlation> {
    let cols: Vec<(usize, Topology)> = bench
        .columns
        .iter()
        .enumerate()
        .filter_map(|(i, c)| ab_bench_topology(c).map(|t| (i, t)))
        .collect();
    let preds: Vec<Prediction> = cols.iter().map(|&(_, t)| predict(t)).collect();
    bench
        .rows
        .iter()
        .filter_map(|(name, vals)| {
            let op = ab_bench_op(name)?;
            let pairs: Vec<(String, f64, f64)> = cols
                .iter()
                .zip(&preds)
                .map(|(&(i, _), p)| (bench.columns[i].clone(), vals[i], p.get(op)))
                .collect();
            let m: Vec<f64> = pairs.iter().map(|p| p.1).collect();
            let q: Vec<f64> = pairs.iter().map(|p| p.2).collect();
            let best = |k: fn(&(String, f64, f64)) -> f64| {
                pairs
                    .iter()
                    .filter(|p| k(p).is_finite())
                    .min_by(|a, b| k(a).total_cmp(&k(b)))
                    .map(|p| p.0.clone())
            };
            Some(Correlation {
                operation: name.clone(),
                op: op.name(),
                spearman: spearman(&m, &q),
                best_measured: best(|p| p.1),
                best_predicted: best(|p| p.2),
                pairs,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_alternates_nodes() {
        let m = smelt_model::synthetic(2, 3, 1.0, 1.0, 2.0);
        let g = round_robin_groups(&m, &(0..6).collect::<Vec<_>>());
        assert_eq!(g.len(), 5);
        assert_eq!(g[0], vec![0, 3]);
        assert_eq!(g[4], vec![0, 3, 1, 4, 2, 5]);
    }

    #[test]
    fn ab_bench_parses_and_rejects() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ab.csv");
        std::fs::write(
            &p,
            "algorithm,bintree,bintree_stderr,AT,AT_stderr\nab,3,0.1,2,0.1\n",
        )
        .unwrap();
        let b = read_ab_bench(&p).unwrap();
        assert_eq!(b.columns, vec!["bintree", "AT"]);
        assert_eq!(b.rows, vec![("ab".to_string(), vec![3.0, 2.0])]);
        std::fs::write(&p, "algorithm,bintree\nab,x\n").unwrap();
        assert!(read_ab_bench(&p)
            .unwrap_err()
            .to_string()
            .contains("ab.csv:2"));
        std::fs::write(&p, "algorithm,bintree\nab,1,2\n").unwrap();
        assert!(read_ab_bench(&p)
            .unwrap_err()
            .to_string()
            .contains("fields"));
    }
}
