//! Summaries of a model: group counts per hierarchy level and cost statistics per
//! level (what `smelt model show` prints).

// Cost matrices are indexed by position pairs; index loops read best here.
#![allow(clippy::needless_range_loop)]

use crate::infer::{compare, distinct_levels};
use crate::{format_cpu_list, Hierarchy, Model, Provenance};
use serde::Serialize;

/// min / median / max of a set of costs, ns.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MinMedMax {
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

impl MinMedMax {
    /// Of the finite values; `None` when there is none.
    pub fn of(values: &[f64]) -> Option<MinMedMax> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        // median() sorts v.
        let median = median(&mut v);
        Some(MinMedMax {
            min: v[0],
            median,
            max: v[v.len() - 1],
        })
    }
}

/// The median of `v`, the mean of the two middle values for an even count
/// ([`smelt_ids::stats::median_sorted`], the workspace's one median). Sorts `v` (NaN
/// last, see [`f64::total_cmp`]). Panics when `v` is empty.
pub fn median(v: &mut [f64]) -> f64 {
    assert!(!v.is_empty(), "the median of no value");
    v.sort_by(f64::total_cmp);
    smelt_ids::stats::median_sorted(v)
}

/// Costs of the ordered CPU pairs whose innermost shared group is at one level.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LevelCosts {
    /// The level name (`A = B` for levels with identical groups), or `(machine)` for
    /// pairs that share no group at all.
    pub level: String,
    /// Number of ordered pairs.
    pub pairs: usize,
    pub send: Option<MinMedMax>,
    pub receive: Option<MinMedMax>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtt: Option<MinMedMax>,
}

/// For each level of `h` (outermost first) the costs of the ordered pairs whose
/// innermost common group is at that level, preceded by `(machine)` for pairs in no
/// common group. Levels with identical groups count as one, named `A = B`. Levels
/// with no such pair are left out.
pub fn level_costs(model: &Model, h: &Hierarchy) -> Vec<LevelCosts> {
    let n = model.len();
    let levels = distinct_levels(h);
    let ids: Vec<Vec<usize>> = levels.iter().map(|l| model.group_ids_of(l)).collect();
    let nl = ids.len();
    // bucket 0 = (none), bucket k+1 = level k.
    let mut buckets: Vec<[Vec<f64>; 3]> = vec![Default::default(); nl + 1];
    for i in 0..n {
        for j in 0..n {
            if i == j {
                continue;
            }
            let inner = (0..nl).rev().find(|&k| ids[k][i] == ids[k][j]);
            let b = inner.map_or(0, |k| k + 1);
            buckets[b][0].push(model.send[i][j]);
            buckets[b][1].push(model.receive[i][j]);
            if let Some(r) = &model.rtt {
                buckets[b][2].push(r[i][j]);
            }
        }
    }
    buckets
        .into_iter()
        .enumerate()
        .filter(|(_, b)| !b[0].is_empty())
        .map(|(k, b)| LevelCosts {
            level: if k == 0 {
                "(machine)".into()
            } else {
                levels[k - 1].name.clone()
            },
            pairs: b[0].len(),
            send: MinMedMax::of(&b[0]),
            receive: MinMedMax::of(&b[1]),
            rtt: MinMedMax::of(&b[2]),
        })
        .collect()
}

/// One level of a hierarchy, summarized.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LevelSummary {
    pub name: String,
    /// Number of groups.
    pub groups: usize,
    /// Group sizes, in group order.
    pub sizes: Vec<usize>,
    /// Each group's CPUs in list syntax (`0-9`).
    pub members: Vec<String>,
}

/// A hierarchy, summarized, with its per-level costs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HierarchySummary {
    pub source: String,
    pub levels: Vec<LevelSummary>,
    pub costs: Vec<LevelCosts>,
}

/// Everything `smelt model show` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelSummary {
    pub provenance: Provenance,
    /// CPUs in list syntax.
    pub cpus: String,
    pub cpu_count: usize,
    pub has_rtt: bool,
    pub hierarchy: HierarchySummary,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inferred_hierarchy: Option<HierarchySummary>,
    /// Where the OS and inferred hierarchies agree and disagree (see
    /// [`crate::infer::compare`]).
    pub comparison: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub numa_distances: Option<Vec<Vec<f64>>>,
}

fn summarize_h(model: &Model, h: &Hierarchy) -> HierarchySummary {
    HierarchySummary {
        source: h.source.clone(),
        levels: h
            .levels
            .iter()
            .map(|l| LevelSummary {
                name: l.name.clone(),
                groups: l.groups.len(),
                sizes: l.groups.iter().map(Vec::len).collect(),
                members: l.groups.iter().map(|g| format_cpu_list(g)).collect(),
            })
            .collect(),
        costs: level_costs(model, h),
    }
}

/// The summary of a model. Uses the stored inferred hierarchy, or infers one when
/// the model has none.
pub fn summarize_model(model: &Model) -> ModelSummary {
    let inferred = model
        .inferred_hierarchy
        .clone()
        .unwrap_or_else(|| crate::infer::infer_hierarchy(model));
    ModelSummary {
        provenance: model.provenance.clone(),
        cpus: format_cpu_list(&model.cpus),
        cpu_count: model.len(),
        has_rtt: model.rtt.is_some(),
        hierarchy: summarize_h(model, &model.hierarchy),
        comparison: compare(&model.hierarchy, &inferred),
        inferred_hierarchy: Some(summarize_h(model, &inferred)),
        numa_distances: model.numa_distances.clone(),
    }
}

/// Short text for group sizes: `2 x 10` when all equal, else the list.
pub fn sizes_text(sizes: &[usize]) -> String {
    match sizes.first() {
        Some(&s) if sizes.iter().all(|&x| x == s) => format!("{} x {s}", sizes.len()),
        _ => sizes
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(","),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic;

    #[test]
    fn per_level_costs_of_a_synthetic_machine() {
        let m = synthetic(2, 3, 10.0, 30.0, 4.0);
        let c = level_costs(&m, &m.hierarchy);
        assert_eq!(c.len(), 2, "{c:?}");
        assert_eq!(c[0].level, "(machine)");
        assert_eq!(c[0].pairs, 18);
        assert_eq!(c[0].send.unwrap().median, 40.0);
        assert_eq!(c[1].level, "Package");
        assert_eq!(c[1].pairs, 12);
        assert_eq!(c[1].receive.unwrap().max, 30.0);
        let s = summarize_model(&m);
        assert_eq!(s.cpus, "0-5");
        assert_eq!(s.hierarchy.levels[0].sizes, vec![3, 3]);
        assert!(
            s.comparison[0].contains("matches Package"),
            "{:?}",
            s.comparison
        );
        assert_eq!(sizes_text(&[3, 3]), "2 x 3");
        assert_eq!(sizes_text(&[3, 1]), "3,1");
    }

    #[test]
    fn min_med_max() {
        let s = MinMedMax::of(&[4.0, 1.0, f64::NAN, 3.0, 2.0]).unwrap();
        assert_eq!((s.min, s.median, s.max), (1.0, 2.5, 4.0));
        assert!(MinMedMax::of(&[]).is_none());
        let mut odd = [5.0, 1.0, 3.0];
        assert_eq!(median(&mut odd), 3.0);
        assert_eq!(odd, [1.0, 3.0, 5.0]);
        assert_eq!(median(&mut [2.0]), 2.0);
        assert_eq!(median(&mut [7.0, 1.0]), 4.0);
    }
}
