//! Hierarchy inferred from measured costs.
//!
//! The OS tells which CPUs share a package, a NUMA node or a cache, but not what it
//! *costs* to talk across those boundaries, and it does not know about every boundary
//! that matters (AMD CCX/CCD, mesh quadrants, tiles). This module groups CPUs by what
//! the measurements say:
//!
//! 1. A symmetric distance per CPU pair: `d(i,j) = (send[i][j] + receive[i][j] +
//!    send[j][i] + receive[j][i]) / 2`, i.e. the mean cost of one message between
//!    the two, counted at both ends (see [`symmetric_cost`]).
//! 2. Average-linkage agglomerative clustering (UPGMA) on that distance. Pairs whose
//!    cost is unknown (NaN) are left out of the averages.
//! 3. A gap criterion decides which levels are real: the merge heights are sorted and
//!    the dendrogram is cut wherever the next merge is at least [`GAP_RATIO`] times as
//!    high as the previous one *and* the step is at least [`MIN_STEP`] of the highest
//!    merge. Each cut that leaves between 2 and n-1 groups becomes a level.
//!
//! Levels are named `Cluster1` (outermost, fewest groups) … `ClusterK` (innermost).
//! Because the dendrogram is monotone the levels nest. The result is deterministic
//! (ties are broken by position).

// Cost matrices are indexed by position pairs; index loops read best here.
#![allow(clippy::needless_range_loop)]

use crate::{format_cpu_list, Hierarchy, Level, Model};

/// A merge must be at least this many times as high as the previous one to start a
/// new level.
pub const GAP_RATIO: f64 = 1.3;
/// ... and higher by at least this fraction of the highest merge (so that jumps
/// between tiny costs, e.g. 2 ns → 3 ns, are not taken for structure).
pub const MIN_STEP: f64 = 0.04;

/// The symmetric cost the inference clusters on, by position: the mean of
/// `send[i][j] + receive[i][j]` and `send[j][i] + receive[j][i]`, 0 on the diagonal.
/// A direction with an unknown (NaN) term is left out; a pair with neither direction
/// known is NaN, which the clustering skips.
pub fn symmetric_cost(model: &Model) -> Vec<Vec<f64>> {
    let n = model.len();
    let mut d = vec![vec![0.0; n]; n];
    for i in 0..n {
        for j in 0..n {
            if i != j {
                let a = model.send[i][j] + model.receive[i][j];
                let b = model.send[j][i] + model.receive[j][i];
                d[i][j] = match (a.is_finite(), b.is_finite()) {
                    (true, true) => (a + b) / 2.0,
                    (true, false) => a,
                    (false, true) => b,
                    (false, false) => f64::NAN,
                };
            }
        }
    }
    d
}

/// One merge of the dendrogram: clusters (by their smallest member position) and the
/// average distance between them.
#[derive(Debug, Clone, PartialEq)]
pub struct Merge {
    /// Smallest position in the first cluster.
    pub a: usize,
    /// Smallest position in the second cluster.
    pub b: usize,
    /// Average-linkage distance at which they merged.
    pub height: f64,
}

/// Sum and count of the known distances between items (the start of every linkage).
fn known_sums(d: &[Vec<f64>]) -> (Vec<Vec<f64>>, Vec<Vec<u32>>) {
    let n = d.len();
    let mut sum = vec![vec![0.0f64; n]; n];
    let mut cnt = vec![vec![0u32; n]; n];
    for i in 0..n {
        for j in 0..n {
            if i != j {
                let v = if d[i][j].is_finite() && d[j][i].is_finite() {
                    (d[i][j] + d[j][i]) / 2.0
                } else if d[i][j].is_finite() {
                    d[i][j]
                } else {
                    d[j][i]
                };
                if v.is_finite() {
                    sum[i][j] = v;
                    cnt[i][j] = 1;
                }
            }
        }
    }
    (sum, cnt)
}

/// Average-linkage clustering (UPGMA) of `n` items with the symmetric distance `d`
/// (NaN = unknown, left out of the averages). Returns the merges sorted by height;
/// fewer than `n-1` when some clusters have no known distance between them.
///
/// Uses the nearest-neighbour-chain algorithm: O(n²) time, so thousands of CPUs
/// take well under a second. Average linkage is reducible, so with complete data
/// this yields exactly the merges of the greedy "merge the closest pair" algorithm.
pub fn average_linkage(d: &[Vec<f64>]) -> Vec<Merge> {
    let n = d.len();
    let (mut sum, mut cnt) = known_sums(d);
    // live: still a cluster; stuck: has no known distance to any other live cluster.
    let mut live = vec![true; n];
    let mut stuck = vec![false; n];
    let mut min_member: Vec<usize> = (0..n).collect();
    let mut merges = Vec::with_capacity(n.saturating_sub(1));
    let mut chain: Vec<usize> = Vec::new();
    let mut open = n; // live and not stuck
    while open > 1 {
        if chain.is_empty() {
            let first = (0..n).find(|&i| live[i] && !stuck[i]).expect("open > 1");
            chain.push(first);
        }
        let a = *chain.last().expect("non-empty chain");
        let prev = chain.len().checked_sub(2).map(|k| chain[k]);
        // Nearest known neighbour of a; ties go to the chain's previous element
        // (so the chain cannot cycle), then to the lowest index.
        let mut best: Option<(f64, usize)> = None;
        for k in 0..n {
            if k == a || !live[k] || stuck[k] || cnt[a][k] == 0 {
                continue;
            }
            let v = sum[a][k] / cnt[a][k] as f64;
            if best.is_none_or(|(b, _)| v < b) {
                best = Some((v, k));
            }
        }
        let Some((mut h, mut b)) = best else {
            // Nothing known around a: it stays a cluster of its own.
            stuck[a] = true;
            open -= 1;
            chain.clear();
            continue;
        };
        if let Some(p) = prev {
            if cnt[a][p] > 0 && sum[a][p] / cnt[a][p] as f64 <= h {
                h = sum[a][p] / cnt[a][p] as f64;
                b = p;
            }
        }
        if Some(b) != prev {
            chain.push(b);
            continue;
        }
        // a and b are reciprocal nearest neighbours: merge b into a.
        chain.truncate(chain.len() - 2);
        merges.push(Merge {
            a: min_member[a].min(min_member[b]),
            b: min_member[a].max(min_member[b]),
            height: h,
        });
        live[b] = false;
        open -= 1;
        min_member[a] = min_member[a].min(min_member[b]);
        for k in 0..n {
            if k != a && k != b && live[k] {
                let s = sum[a][k] + sum[b][k];
                let c = cnt[a][k] + cnt[b][k];
                sum[a][k] = s;
                sum[k][a] = s;
                cnt[a][k] = c;
                cnt[k][a] = c;
            }
        }
        // A cluster that merged may now know distances others lacked.
        for k in 0..n {
            if stuck[k] && live[k] && cnt[a][k] > 0 {
                stuck[k] = false;
                open += 1;
            }
        }
    }
    merges.sort_by(|x, y| x.height.total_cmp(&y.height));
    merges
}

/// Partition of positions `0..n` after applying the first `k` merges, as groups of
/// positions, each sorted, groups ordered by their smallest member.
fn partition_after(n: usize, merges: &[Merge], k: usize) -> Vec<Vec<usize>> {
    let mut parent: Vec<usize> = (0..n).collect();
    fn find(p: &mut [usize], mut x: usize) -> usize {
        while p[x] != x {
            p[x] = p[p[x]];
            x = p[x];
        }
        x
    }
    for m in &merges[..k] {
        let (ra, rb) = (find(&mut parent, m.a), find(&mut parent, m.b));
        if ra != rb {
            parent[ra.max(rb)] = ra.min(rb);
        }
    }
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut index = vec![usize::MAX; n];
    for x in 0..n {
        let r = find(&mut parent, x);
        if index[r] == usize::MAX {
            index[r] = groups.len();
            groups.push(Vec::new());
        }
        groups[index[r]].push(x);
    }
    groups
}

/// The numbers of merges (k) after which the dendrogram is cut, innermost first.
fn cut_points(merges: &[Merge], n: usize) -> Vec<usize> {
    let mut cuts = Vec::new();
    if merges.is_empty() {
        return cuts;
    }
    let hmax = merges.iter().map(|m| m.height).fold(0.0f64, f64::max);
    for k in 1..merges.len() {
        let (lo, hi) = (merges[k - 1].height, merges[k].height);
        let big_ratio = if lo > 0.0 {
            hi / lo >= GAP_RATIO
        } else {
            hi > 0.0
        };
        if big_ratio && hi - lo >= MIN_STEP * hmax {
            cuts.push(k);
        }
    }
    // A dendrogram that could not be completed (unknown distances between some
    // clusters) leaves several groups at the top: that is a level too.
    if merges.len() < n - 1 {
        cuts.push(merges.len());
    }
    cuts.retain(|&k| {
        let groups = n - k;
        groups >= 2 && groups < n
    });
    cuts
}

/// Infers a hierarchy from a symmetric distance matrix over `cpus` (same order).
/// NaN entries are unknown and skipped. Levels `Cluster1` (outermost) … .
pub fn infer_from_costs(cpus: &[u32], d: &[Vec<f64>]) -> Hierarchy {
    let n = cpus.len();
    let merges = average_linkage(d);
    let mut levels: Vec<Level> = cut_points(&merges, n)
        .into_iter()
        .rev()
        .map(|k| Level {
            name: String::new(),
            groups: partition_after(n, &merges, k)
                .into_iter()
                .map(|g| g.into_iter().map(|p| cpus[p]).collect())
                .collect(),
        })
        .collect();
    for (i, l) in levels.iter_mut().enumerate() {
        l.name = format!("Cluster{}", i + 1);
    }
    Hierarchy {
        source: "inferred".into(),
        levels,
    }
}

/// The hierarchy the model's costs show (see the module docs). Uses send + receive,
/// which every model has; a model with one CPU gets an empty hierarchy.
pub fn infer_hierarchy(model: &Model) -> Hierarchy {
    infer_from_costs(&model.cpus, &symmetric_cost(model))
}

/// True when two levels group the CPUs the same way (order of groups and of CPUs
/// within a group does not matter).
pub fn same_partition(a: &Level, b: &Level) -> bool {
    sorted_groups(a) == sorted_groups(b)
}

/// The groups of `l` with each group's CPUs sorted and the groups sorted: the same
/// for every level that groups the CPUs the same way.
fn sorted_groups(l: &Level) -> Vec<Vec<u32>> {
    let mut g: Vec<Vec<u32>> = l
        .groups
        .iter()
        .map(|g| {
            let mut g = g.clone();
            g.sort_unstable();
            g
        })
        .collect();
    g.sort();
    g
}

/// The levels of `h` with identical partitions folded into one, named by all their
/// names joined with ` = ` (e.g. `Package = NUMANode = L3Cache`), outermost first.
pub fn distinct_levels(h: &Hierarchy) -> Vec<Level> {
    let mut out: Vec<Level> = Vec::new();
    for l in &h.levels {
        match out.iter_mut().find(|o| same_partition(o, l)) {
            Some(o) => o.name = format!("{} = {}", o.name, l.name),
            None => out.push(l.clone()),
        }
    }
    out
}

/// Human-readable lines on where the OS hierarchy and the inferred one agree and
/// disagree: OS levels that the costs reproduce exactly, inferred levels that split
/// an OS group or merge several, and OS levels the costs do not show at all. OS
/// levels with identical groups are treated as one (`Package = NUMANode`). Levels
/// whose groups are all single CPUs (e.g. `Core` without SMT) and levels with a
/// single group are skipped: they carry no grouping to compare.
pub fn compare(os: &Hierarchy, inferred: &Hierarchy) -> Vec<String> {
    const MAX_LISTED: usize = 4;
    let interesting = |l: &Level| l.groups.len() > 1 && l.groups.iter().any(|g| g.len() > 1);
    let os_levels: Vec<Level> = distinct_levels(os)
        .into_iter()
        .filter(|l| interesting(l))
        .collect();
    let inf_levels: Vec<&Level> = inferred.levels.iter().collect();
    let mut out = Vec::new();
    if os_levels.is_empty() {
        out.push("the OS hierarchy has no grouping to compare with".to_string());
    }
    if inf_levels.is_empty() {
        out.push("the costs show no grouping: every pair costs about the same".to_string());
    }
    if os_levels.is_empty() || inf_levels.is_empty() {
        return out;
    }
    let mut matched_os = vec![false; os_levels.len()];
    for il in &inf_levels {
        if let Some(oi) = os_levels.iter().position(|ol| same_partition(ol, il)) {
            matched_os[oi] = true;
            out.push(format!(
                "{} matches {} ({} groups)",
                il.name,
                os_levels[oi].name,
                il.groups.len()
            ));
            continue;
        }
        // Compare with the OS level closest in group count.
        let ol = os_levels
            .iter()
            .min_by_key(|ol| (ol.groups.len() as i64 - il.groups.len() as i64).abs())
            .expect("non-empty");
        let owner = |lvl: &Level, c: u32| lvl.groups.iter().position(|g| g.contains(&c));
        let mut splits = Vec::new();
        for (gi, g) in ol.groups.iter().enumerate() {
            let mut parts: Vec<Vec<u32>> = Vec::new();
            let mut seen: Vec<Option<usize>> = Vec::new();
            for &c in g {
                let o = owner(il, c);
                match seen.iter().position(|&s| s == o) {
                    Some(p) => parts[p].push(c),
                    None => {
                        seen.push(o);
                        parts.push(vec![c]);
                    }
                }
            }
            if parts.len() > 1 {
                let text: Vec<String> = parts.iter().map(|p| format_cpu_list(p)).collect();
                splits.push(format!(
                    "{} splits {} {gi} (CPUs {}) into {}",
                    il.name,
                    ol.name,
                    format_cpu_list(g),
                    text.join(" | ")
                ));
            }
        }
        let mut merges = Vec::new();
        for (gi, g) in il.groups.iter().enumerate() {
            let mut owners: Vec<usize> = g.iter().filter_map(|&c| owner(ol, c)).collect();
            owners.sort_unstable();
            owners.dedup();
            if owners.len() > 1 {
                let text: Vec<String> = owners
                    .iter()
                    .map(|&o| format_cpu_list(&ol.groups[o]))
                    .collect();
                merges.push(format!(
                    "{} group {gi} (CPUs {}) merges {} groups {}",
                    il.name,
                    format_cpu_list(g),
                    ol.name,
                    text.join(" + ")
                ));
            }
        }
        for (what, list) in [("split", splits), ("merge", merges)] {
            let total = list.len();
            out.extend(list.into_iter().take(MAX_LISTED));
            if total > MAX_LISTED {
                out.push(format!(
                    "{}: ... and {} more {what}s like these",
                    il.name,
                    total - MAX_LISTED
                ));
            }
        }
    }
    for (oi, ol) in os_levels.iter().enumerate() {
        if !matched_os[oi] {
            out.push(format!(
                "{} ({} groups) does not show in the measured costs",
                ol.name,
                ol.groups.len()
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic;

    #[test]
    fn finds_sockets_of_a_synthetic_machine() {
        let m = synthetic(2, 4, 50.0, 100.0, 3.0);
        let h = infer_hierarchy(&m);
        assert_eq!(h.source, "inferred");
        assert_eq!(h.levels.len(), 1, "{h:?}");
        assert_eq!(h.levels[0].name, "Cluster1");
        assert_eq!(h.levels[0].groups, vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
        let lines = compare(&m.hierarchy, &h);
        assert!(lines[0].contains("Cluster1 matches Package"), "{lines:?}");
    }

    #[test]
    fn uniform_costs_give_no_level() {
        let m = synthetic(1, 6, 50.0, 100.0, 1.0);
        assert!(infer_hierarchy(&m).levels.is_empty());
        assert!(infer_hierarchy(&synthetic(1, 1, 1.0, 1.0, 1.0))
            .levels
            .is_empty());
    }

    /// Three levels: pairs (SMT), quads (CCX), halves (socket).
    fn three_level(n: usize) -> Vec<Vec<f64>> {
        crate::cost_matrix(n, |i, j| {
            if i / 2 == j / 2 {
                10.0
            } else if i / 4 == j / 4 {
                40.0 + ((i * 7 + j * 3) % 5) as f64
            } else if i / (n / 2) == j / (n / 2) {
                100.0 + ((i + j) % 7) as f64
            } else {
                300.0
            }
        })
    }

    #[test]
    fn finds_nested_levels() {
        let cpus: Vec<u32> = (0..16).collect();
        let h = infer_from_costs(&cpus, &three_level(16));
        let counts: Vec<usize> = h.levels.iter().map(|l| l.groups.len()).collect();
        assert_eq!(counts, vec![2, 4, 8], "{h:?}");
        assert_eq!(h.levels[2].groups[3], vec![6, 7]);
        assert_eq!(h.levels[0].groups[1], (8..16).collect::<Vec<u32>>());
    }

    /// Random machines (sockets × groups × SMT, costs ×2.5 per level with ±10 %
    /// noise, shuffled CPU ids): the inference finds exactly the real levels.
    /// `SMELT_STRESS` scales the number of machines.
    #[test]
    fn recovers_random_noisy_hierarchies() {
        let stress = smelt_settings::count(smelt_settings::STRESS)
            .unwrap()
            .unwrap_or(1) as usize;
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..20 * stress {
            let sockets = [1, 2, 4][(rnd() % 3) as usize];
            let per = [1, 2, 3, 4][(rnd() % 4) as usize];
            let smt = [1, 2][(rnd() % 2) as usize];
            let cores = 2 + (rnd() % 3) as usize;
            let n = sockets * per * cores * smt;
            // Position p: socket, group, core, thread (thread fastest).
            let key = |p: usize| {
                let c = (p / smt) % cores;
                let g = (p / smt / cores) % per;
                let s = p / smt / cores / per;
                (s, g, c)
            };
            let mut ids: Vec<u32> = (0..n as u32).collect();
            for i in (1..n).rev() {
                ids.swap(i, (rnd() % (i as u64 + 1)) as usize);
            }
            let mut d = vec![vec![0.0; n]; n];
            for i in 0..n {
                for j in (i + 1)..n {
                    let (a, b) = (key(i), key(j));
                    let base = if a.0 != b.0 {
                        390.0
                    } else if a.1 != b.1 {
                        156.0
                    } else if a.2 != b.2 {
                        62.5
                    } else {
                        25.0
                    };
                    let noise = 0.9 + 0.2 * (rnd() % 1000) as f64 / 1000.0;
                    d[i][j] = base * noise;
                    d[j][i] = d[i][j];
                }
            }
            let h = infer_from_costs(&ids, &d);
            // Expected levels: sockets, groups, cores (SMT pairs), when non-trivial
            // and distinct.
            let mut want: Vec<Vec<Vec<u32>>> = Vec::new();
            for depth in 0..3 {
                let mut groups: Vec<Vec<u32>> = Vec::new();
                let mut keys: Vec<(usize, usize, usize)> = Vec::new();
                for p in 0..n {
                    let k = key(p);
                    let k = match depth {
                        0 => (k.0, 0, 0),
                        1 => (k.0, k.1, 0),
                        _ => k,
                    };
                    match keys.iter().position(|x| *x == k) {
                        Some(g) => groups[g].push(ids[p]),
                        None => {
                            keys.push(k);
                            groups.push(vec![ids[p]]);
                        }
                    }
                }
                for g in &mut groups {
                    g.sort_unstable();
                }
                groups.sort();
                if groups.len() > 1 && groups.len() < n && !want.contains(&groups) {
                    want.push(groups);
                }
            }
            let got: Vec<Vec<Vec<u32>>> = h.levels.iter().map(sorted_groups).collect();
            assert_eq!(
                got, want,
                "sockets {sockets} groups {per} cores {cores} smt {smt}"
            );
        }
    }

    /// The textbook O(n³) greedy average linkage, as a reference.
    fn greedy_linkage(d: &[Vec<f64>]) -> Vec<Merge> {
        let n = d.len();
        let (mut sum, mut cnt) = known_sums(d);
        let mut alive = vec![true; n];
        let mut min_member: Vec<usize> = (0..n).collect();
        let mut merges = Vec::new();
        loop {
            let mut best: Option<(f64, usize, usize)> = None;
            for i in 0..n {
                for j in (i + 1)..n {
                    if alive[i] && alive[j] && cnt[i][j] > 0 {
                        let v = sum[i][j] / cnt[i][j] as f64;
                        if best.is_none_or(|(b, _, _)| v < b) {
                            best = Some((v, i, j));
                        }
                    }
                }
            }
            let Some((h, i, j)) = best else { break };
            merges.push(Merge {
                a: min_member[i].min(min_member[j]),
                b: min_member[i].max(min_member[j]),
                height: h,
            });
            alive[j] = false;
            min_member[i] = min_member[i].min(min_member[j]);
            for k in 0..n {
                if alive[k] && k != i {
                    sum[i][k] += sum[j][k];
                    sum[k][i] = sum[i][k];
                    cnt[i][k] += cnt[j][k];
                    cnt[k][i] = cnt[i][k];
                }
            }
        }
        merges
    }

    #[test]
    fn nn_chain_matches_greedy_linkage() {
        let mut seed = 12345u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % 10_000) as f64 / 100.0 + 1.0
        };
        for n in [2usize, 3, 5, 9, 17, 40] {
            let mut d = vec![vec![0.0; n]; n];
            for i in 0..n {
                for j in (i + 1)..n {
                    d[i][j] = rnd();
                    d[j][i] = d[i][j];
                }
            }
            let (fast, slow) = (average_linkage(&d), greedy_linkage(&d));
            assert_eq!(fast.len(), n - 1);
            for k in 0..n - 1 {
                assert!(
                    (fast[k].height - slow[k].height).abs() < 1e-9,
                    "n {n} merge {k}"
                );
                for m in 0..=k {
                    assert_eq!(
                        partition_after(n, &fast, m),
                        partition_after(n, &slow, m),
                        "n {n} after {m}"
                    );
                }
            }
        }
    }

    #[test]
    fn unknown_pairs_are_skipped() {
        let cpus: Vec<u32> = (0..16).collect();
        let mut d = three_level(16);
        for (i, j) in [(0, 1), (3, 9), (12, 5), (15, 14)] {
            d[i][j] = f64::NAN;
            d[j][i] = f64::NAN;
        }
        let h = infer_from_costs(&cpus, &d);
        assert_eq!(h.levels[0].groups.len(), 2, "{h:?}");
        assert_eq!(h.levels[0].groups[0], (0..8).collect::<Vec<u32>>());
    }

    #[test]
    fn disconnected_clusters_form_the_top_level() {
        let nan = f64::NAN;
        let d = vec![
            vec![0.0, 1.0, nan, nan],
            vec![1.0, 0.0, nan, nan],
            vec![nan, nan, 0.0, 1.0],
            vec![nan, nan, 1.0, 0.0],
        ];
        let h = infer_from_costs(&[0, 1, 2, 3], &d);
        assert_eq!(h.levels.len(), 1);
        assert_eq!(h.levels[0].groups, vec![vec![0, 1], vec![2, 3]]);
    }

    #[test]
    fn compare_reports_splits_and_merges() {
        let os = Hierarchy {
            source: "hwloc".into(),
            levels: vec![Level {
                name: "NUMANode".into(),
                groups: vec![vec![0, 1, 2, 3], vec![4, 5], vec![6, 7]],
            }],
        };
        let inf = Hierarchy {
            source: "inferred".into(),
            levels: vec![Level {
                name: "Cluster1".into(),
                groups: vec![vec![0, 1], vec![2, 3], vec![4, 5, 6, 7]],
            }],
        };
        let lines = compare(&os, &inf);
        assert!(
            lines
                .iter()
                .any(|l| l.contains("splits NUMANode 0 (CPUs 0-3) into 0-1 | 2-3")),
            "{lines:?}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.contains("merges NUMANode groups 4-5 + 6-7")),
            "{lines:?}"
        );
        assert!(
            lines.iter().any(|l| l.contains("does not show")),
            "{lines:?}"
        );
    }
}
