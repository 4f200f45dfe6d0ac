//! The store's simulated mode (`smelt_bench::kvs::sim`) on every machine file in
//! `testdata/machines/` (the real measurements of `../shared/machines/`) and on
//! synthetic machines: properties, not numbers tuned to one file.
//!
//! `SMELT_SIM_MACHINES=dir1:dir2` adds machine files (model JSON, machine database
//! directories, core-to-core-latency CSVs) from other directories.

use smelt_bench::kvs::sim::{
    compare, default_replica_counts, placement, simulate, Comparison, SimConfig,
};
use smelt_kvs::{KvsError, Protocol};
use smelt_model::import::{import, ImportOptions};
use smelt_model::Model;
use smelt_tree::Topology;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

fn machine_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/machines");
    let mut dirs = vec![
        root.join("core-to-core-latency"),
        root.join("smelt-machinedb"),
    ];
    if let Some(extra) = smelt_settings::text(smelt_settings::SIM_MACHINES).unwrap() {
        dirs.extend(
            extra
                .split(':')
                .filter(|s| !s.is_empty())
                .map(PathBuf::from),
        );
    }
    let mut files = Vec::new();
    for d in dirs {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut v: Vec<PathBuf> = rd.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        v.sort();
        files.extend(v);
    }
    files
}

/// Every machine smelt can load (imported, or a model file), with its name.
fn machines() -> &'static [(String, Model)] {
    static M: OnceLock<Vec<(String, Model)>> = OnceLock::new();
    M.get_or_init(|| {
        let mut v = Vec::new();
        for f in machine_files() {
            let m = if f.extension().is_some_and(|e| e == "json") {
                Model::load(&f).ok()
            } else {
                import(&f, &ImportOptions::default()).ok()
            };
            if let Some(m) = m {
                let name = f.file_name().unwrap().to_string_lossy().into_owned();
                v.push((name, m));
            }
        }
        assert!(v.len() >= 10, "only {} machine files loaded", v.len());
        v
    })
}

/// A short run: enough sets for stable means, few enough for a debug build.
fn quick(replicas: usize, clients: usize) -> SimConfig {
    let mut c = SimConfig::new(replicas, clients);
    c.warmup_sets = 60;
    c.sets = 240;
    c
}

/// Every machine at its default replica counts, four clients (the paper's Figure 12
/// load: a fixed number of load generators).
fn fixed_load() -> &'static [(String, usize, Vec<Comparison>)] {
    static R: OnceLock<Vec<(String, usize, Vec<Comparison>)>> = OnceLock::new();
    R.get_or_init(|| {
        machines()
            .iter()
            .map(|(name, m)| {
                let rows = default_replica_counts(m)
                    .into_iter()
                    .map(|r| {
                        compare(m, &quick(r, 4)).unwrap_or_else(|e| panic!("{name}, {r}: {e}"))
                    })
                    .collect();
                (name.clone(), m.len(), rows)
            })
            .collect()
    })
}

#[test]
fn every_machine_gives_finite_positive_predictions() {
    for (name, _, rows) in fixed_load() {
        for c in rows {
            assert_eq!(c.rows.len(), 3);
            for (setup, r) in &c.rows {
                let what = format!("{name}, {} replicas, {setup}", c.replicas);
                for (k, v) in [
                    ("sets/s", r.set_per_sec),
                    ("gets/s", r.get_per_sec),
                    ("set mean", r.set_mean_ns),
                    ("set p50", r.set_p50_ns),
                    ("set p99", r.set_p99_ns),
                    ("get mean", r.get_mean_ns),
                ] {
                    assert!(v.is_finite() && v > 0.0, "{what}: {k} = {v}");
                }
                assert!(r.set_p99_ns >= r.set_p50_ns, "{what}");
                assert_eq!(r.sets, 240, "{what}");
                assert_eq!(r.replica_cpus.len(), c.replicas);
                // Gets are answered locally: faster than sets.
                assert!(r.get_mean_ns < r.set_mean_ns, "{what}");
            }
            assert!(c.throughput_ratio.is_finite() && c.response_ratio.is_finite());
        }
    }
}

#[test]
fn sequential_grows_linearly_tree_sub_linearly() {
    for (name, cpus, rows) in fixed_load() {
        if rows.len() < 2 {
            continue;
        }
        let seq: Vec<(f64, f64)> = rows
            .iter()
            .map(|c| (c.replicas as f64, c.rows[1].1.set_mean_ns))
            .collect();
        let tree: Vec<(f64, f64)> = rows
            .iter()
            .map(|c| (c.replicas as f64, c.rows[0].1.set_mean_ns))
            .collect();
        let (first, last) = (seq[0], seq[seq.len() - 1]);
        let overall = (last.1 - first.1) / (last.0 - first.0);
        assert!(overall > 0.0, "{name}: sequential {seq:?}");
        // Roughly linear: every step's slope within a factor 3 of the overall slope,
        // and the growth at least half proportional to the replicas.
        for w in seq.windows(2) {
            let slope = (w[1].1 - w[0].1) / (w[1].0 - w[0].0);
            assert!(
                slope > overall / 3.0 && slope < overall * 3.0,
                "{name}: sequential {seq:?}"
            );
        }
        let n_growth = last.0 / first.0;
        assert!(
            last.1 / first.1 > 0.5 * n_growth,
            "{name}: sequential {seq:?}"
        );
        // The tree grows more slowly than sequential sending, and, from 4 to at
        // least 16 replicas, clearly less than proportionally.
        let t_growth = tree[tree.len() - 1].1 / tree[0].1;
        assert!(
            t_growth < last.1 / first.1,
            "{name}: tree {tree:?}, sequential {seq:?}"
        );
        if *cpus >= 16 {
            assert!(t_growth < 0.75 * n_growth, "{name}: tree {tree:?}");
        }
    }
}

#[test]
fn tree_beats_sequential_on_large_machines() {
    let mut large = 0;
    for (name, cpus, rows) in fixed_load() {
        if *cpus < 32 {
            continue;
        }
        large += 1;
        for c in rows.iter().filter(|c| c.replicas >= 8) {
            let what = format!("{name}, {} replicas, 4 clients", c.replicas);
            assert!(c.throughput_ratio > 1.0, "{what}: {}", c.throughput_ratio);
            assert!(c.response_ratio < 1.0, "{what}: {}", c.response_ratio);
            if c.replicas >= 32 {
                assert!(c.throughput_ratio >= 2.0, "{what}: {}", c.throughput_ratio);
                assert!(c.response_ratio <= 0.5, "{what}: {}", c.response_ratio);
            }
        }
    }
    assert!(large >= 5, "{large} large machines");
}

#[test]
fn tree_beats_sequential_under_the_cli_default_load() {
    // Two clients per replica (`smelt kvs`'s default), 8 and 32 replicas.
    for (name, m) in machines().iter().filter(|(_, m)| m.len() >= 32) {
        for r in [8, 32] {
            let c = compare(m, &quick(r, 2 * r)).unwrap();
            let what = format!("{name}, {r} replicas");
            assert!(c.throughput_ratio > 1.0, "{what}: {}", c.throughput_ratio);
            assert!(c.response_ratio < 1.0, "{what}: {}", c.response_ratio);
            // The plain broadcast (no agreement round) is the fastest of the three.
            let b = &c.rows[2].1;
            assert!(b.set_mean_ns < c.rows[0].1.set_mean_ns, "{what}");
        }
    }
}

#[test]
fn deterministic() {
    let (_, m) = machines()
        .iter()
        .find(|(_, m)| m.len() >= 16)
        .expect("a machine with 16 CPUs");
    let mut cfg = quick(8, 16);
    cfg.get_ratio = 0.5;
    let a = serde_json::to_string(&simulate(m, &cfg).unwrap()).unwrap();
    let b = serde_json::to_string(&simulate(m, &cfg).unwrap()).unwrap();
    assert_eq!(a, b);
    let a = serde_json::to_string(&compare(m, &cfg).unwrap()).unwrap();
    let b = serde_json::to_string(&compare(m, &cfg).unwrap()).unwrap();
    assert_eq!(a, b);
}

#[test]
fn exact_on_a_trivial_machine() {
    // One replica, one client on another CPU, sets only: the client sends (s), the
    // replica takes it (r), orders and applies it, answers (s), the client takes the
    // answer (r). Every protocol.
    let (s, r) = (10.0, 30.0);
    let m = smelt_model::synthetic(1, 2, s, r, 1.0);
    for p in [Protocol::OnePaxos, Protocol::TwoPc, Protocol::Broadcast] {
        let mut cfg = quick(1, 1);
        cfg.protocol = p;
        cfg.get_ratio = 0.0;
        let x = simulate(&m, &cfg).unwrap();
        assert!((x.set_mean_ns - 2.0 * (s + r)).abs() < 1e-6, "{p}: {x:?}");
        assert!(
            (x.set_per_sec - 1e9 / (2.0 * (s + r))).abs() < 1.0,
            "{p}: {x:?}"
        );
    }
}

#[test]
fn one_client_is_no_faster_than_the_tree_broadcast() {
    // Alone, a set takes at least the broadcast down the tree (smelt's tree simulator)
    // plus the hops to the acceptor and back.
    for (name, m) in machines().iter().filter(|(_, m)| m.len() >= 16).take(4) {
        for topo in [Topology::AdaptiveShuffled, Topology::Sequential] {
            let mut cfg = quick(16, 1);
            cfg.topology = topo;
            cfg.get_ratio = 0.0;
            let x = simulate(m, &cfg).unwrap();
            let pos = m.positions(&x.replica_cpus).unwrap();
            let tree = topo.generate(m, &pos, None).unwrap();
            let bc = smelt_tree::predict(m, &tree, smelt_tree::Payload::default())
                .unwrap()
                .broadcast;
            assert!(x.set_p50_ns > bc, "{name} {topo}: {} vs {bc}", x.set_p50_ns);
        }
    }
}

#[test]
fn placement_is_one_replica_per_node_first() {
    for (name, m) in machines() {
        let nodes = {
            let mut n = m.node_ids();
            n.sort_unstable();
            n.dedup();
            n.len()
        };
        let r = nodes.min(m.len());
        let (rep, cli) = placement(m, r, 2 * r);
        let ids = m.node_ids();
        let node_of = |c: u32| ids[m.position(c).unwrap()];
        let mut seen: Vec<usize> = rep.iter().map(|&c| node_of(c)).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), r, "{name}: replicas {rep:?}");
        for (i, &c) in cli.iter().enumerate() {
            assert_eq!(node_of(c), node_of(rep[i % r]), "{name}: client {i}");
        }
    }
}

#[test]
fn bad_input_is_an_error() {
    let m = smelt_model::synthetic(2, 4, 10.0, 20.0, 2.0);
    let err = |cfg: SimConfig| match simulate(&m, &cfg) {
        Err(KvsError::Config(s)) => s,
        other => panic!("{other:?}"),
    };
    assert!(err(quick(9, 4)).contains("8 CPUs"));
    assert!(err(quick(0, 4)).contains("replica"));
    assert!(err(quick(4, 0)).contains("client"));
    let mut c = quick(4, 4);
    c.get_ratio = 1.0;
    assert!(err(c).contains("get ratio"));
    let mut c = quick(4, 4);
    c.sets = 0;
    assert!(err(c).contains("set"));
    let mut c = quick(4, 4);
    c.extra_line_factor = f64::NAN;
    assert!(err(c).contains("line factor"));
    let mut c = quick(4, 4);
    c.keys = 0;
    assert!(err(c).contains("key"));
    // A machine whose messages cost nothing has no throughput to predict.
    let free = smelt_model::synthetic(1, 4, 0.0, 0.0, 1.0);
    match simulate(&free, &quick(2, 2)) {
        Err(KvsError::Config(s)) => assert!(s.contains("costs"), "{s}"),
        other => panic!("{other:?}"),
    }
    // Every replica count the machine has CPUs for works, up to all of them.
    assert!(simulate(&m, &quick(8, 3)).is_ok());
    assert_eq!(default_replica_counts(&m), [4, 8]);
}
