//! `smelt evaluate --optimum`: the exhaustive optimum against smelt's trees.

use super::*;

/// Deterministic pseudo-random subsets of `k` of `members`.
fn subsets(members: &[usize], k: usize, count: usize) -> Vec<Vec<usize>> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..count)
        .map(|_| {
            let mut v = members.to_vec();
            for i in 0..k.min(v.len()) {
                let j = i + (next() % (v.len() - i) as u64) as usize;
                v.swap(i, j);
            }
            v.truncate(k);
            v.sort_unstable();
            v
        })
        .collect()
}

pub(super) fn evaluate_optimum(
    model: &Model,
    members: &[usize],
    root: Option<usize>,
    a: &EvaluateArgs,
) -> Result<()> {
    const MAX: usize = smelt_tree::optimum::MAX_MEMBERS;
    if !(2..=MAX).contains(&a.subset_size) {
        bail!("--subset-size must be between 2 and {MAX}");
    }
    let groups = match a.subsets {
        Some(0) => bail!("--subsets must be at least 1"),
        Some(k) => subsets(members, a.subset_size.min(members.len()), k),
        None => {
            if members.len() > MAX {
                bail!(
                    "--optimum searches at most {MAX} CPUs, the group has {}; pick some with --cpus or use --subsets N",
                    members.len()
                );
            }
            vec![members.to_vec()]
        }
    };
    let limit = Duration::try_from_secs_f64(a.time_limit)
        .map_err(|_| anyhow::anyhow!("--time-limit {} is out of range", a.time_limit))?;
    let results = groups
        .iter()
        .map(|g| search(model, g, root, limit))
        .collect::<Result<Vec<_>>>()?;
    if a.json {
        let mut means = Map::new();
        for k in KEYS {
            means.insert(k.into(), json!(mean_gap(&results, k)));
        }
        let out = json!({"units": units(model), "groups": results, "mean_gap_over_optimum": means});
        return emit(None, &(serde_json::to_string_pretty(&out)? + "\n"));
    }
    emit(None, &table(model, &results))
}

/// The trees compared with the optimum.
const KEYS: [&str; 5] = [
    "adaptive",
    "adaptive-sorted",
    "adaptive-shuffled",
    "optimized",
    "best_static",
];

/// The exhaustive optimum of group `g` (rooted at `root` where it is a member) within
/// `limit`, next to smelt's trees and the best static tree.
fn search(model: &Model, g: &[usize], root: Option<usize>, limit: Duration) -> Result<Value> {
    let c = Costs::new(model, g).map_err(|e| anyhow::anyhow!("{e}"))?;
    let r = match root.and_then(|p| g.iter().position(|&m| m == p)) {
        Some(r) => r,
        None => c.default_root(),
    };
    let lat = |t: Topology| broadcast_latency(&c, r, &t.children(&c, r));
    let opt_tree = Topology::Optimized.children(&c, r);
    let o = optimum(&c, r, limit, Some(&opt_tree)).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut cpus: Vec<u32> = g.iter().map(|&p| model.cpus[p]).collect();
    cpus.sort_unstable();
    let best_static = Topology::EVALUATED
        .iter()
        .filter(|t| t.is_static())
        .map(|&t| lat(t))
        .fold(f64::INFINITY, f64::min);
    Ok(json!({
        "cpus": format_cpu_list(&cpus),
        "root": model.cpus[g[r]],
        "optimum": o.latency,
        "proven_optimal": o.proven,
        "search_nodes": o.visited,
        "search_seconds": o.elapsed.as_secs_f64(),
        "adaptive": lat(Topology::Adaptive),
        "adaptive-sorted": lat(Topology::AdaptiveSorted),
        "adaptive-shuffled": lat(Topology::AdaptiveShuffled),
        "optimized": broadcast_latency(&c, r, &opt_tree),
        "best_static": best_static,
        "optimum_tree": c.tree(r, o.children.clone()).to_json(),
    }))
}

/// latency / optimum - 1; 0 when both are 0; undefined (NaN, printed "-") otherwise.
fn gap(v: &Value, k: &str) -> f64 {
    let (x, o) = (
        v[k].as_f64().unwrap_or(f64::NAN),
        v["optimum"].as_f64().unwrap_or(f64::NAN),
    );
    if o > 0.0 {
        x / o - 1.0
    } else if x == 0.0 && o == 0.0 {
        0.0
    } else {
        f64::NAN
    }
}

/// A gap as a signed percentage ("-" where undefined).
fn pct(g: f64, prec: usize) -> String {
    if g.is_finite() {
        format!("{:+.prec$}%", 100.0 * g)
    } else {
        "-".to_string()
    }
}

/// The mean over the groups of tree `k`'s gap (undefined gaps left out).
fn mean_gap(results: &[Value], k: &str) -> f64 {
    let g: Vec<f64> = results
        .iter()
        .map(|v| gap(v, k))
        .filter(|g| g.is_finite())
        .collect();
    if g.is_empty() {
        f64::NAN
    } else {
        g.iter().sum::<f64>() / g.len() as f64
    }
}

/// The table: per group, the optimum and each tree with its gap; the mean gaps.
fn table(model: &Model, results: &[Value]) -> String {
    let mut s = format!(
        "Broadcast latency ({}) vs the exhaustive optimum (gap = latency / optimum - 1)\n{:<26}{:>5}{:>11}{:>7}",
        units(model),
        "cpus",
        "root",
        "optimum",
        "proven"
    );
    for k in KEYS {
        let _ = write!(s, "{:>19}", k);
    }
    s.push('\n');
    for v in results {
        let _ = write!(
            s,
            "{:<26}{:>5}{:>11}{:>7}",
            v["cpus"].as_str().unwrap_or(""),
            v["root"],
            t1(v["optimum"].as_f64().unwrap_or(f64::NAN)),
            if v["proven_optimal"].as_bool() == Some(true) {
                "yes"
            } else {
                "no"
            }
        );
        for k in KEYS {
            let _ = write!(
                s,
                "{:>19}",
                format!(
                    "{} ({})",
                    t1(v[k].as_f64().unwrap_or(f64::NAN)),
                    pct(gap(v, k), 1)
                )
            );
        }
        s.push('\n');
    }
    let _ = write!(s, "{:<49}", "mean gap");
    for k in KEYS {
        let _ = write!(s, "{:>19}", pct(mean_gap(results, k), 2));
    }
    s.push('\n');
    s
}
