//! Test helpers: a Model from the Smelt machine database files (in cycles), random
//! numbers, an independent recursive latency formula.
#![allow(dead_code)]

use smelt_model::import::{import, Format, ImportOptions};
use smelt_model::{cost_matrix, Hierarchy, Level, Model};
use std::path::PathBuf;

pub fn machinedb_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/machines/smelt-machinedb/intel_xeon_e5_v2_2x10")
}

/// The 2×10-core Xeon E5 v2 of the machine database, costs in cycles (imported at
/// 1 GHz, so one "ns" is one cycle), NUMA nodes {0-9} and {10-19} as the only level.
/// Send and receive costs only: no rtt, no inferred hierarchy.
pub fn xeon() -> Model {
    let opts = ImportOptions {
        format: Some(Format::MachineDb),
        ghz: Some(1.0),
    };
    let imported = import(&machinedb_dir(), &opts).unwrap();
    assert_eq!(imported.cpus, (0..20).collect::<Vec<u32>>());
    let mut m = Model::new(imported.cpus, imported.send, imported.receive);
    m.provenance.units = "cycles".into();
    m.hierarchy = Hierarchy {
        source: "test".into(),
        levels: vec![Level {
            name: "NUMANode".into(),
            groups: vec![(0..10).collect(), (10..20).collect()],
        }],
    };
    m.validate().unwrap();
    m
}

/// Deterministic xorshift generator.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// A random subset (random order) of 0..n of size k.
    pub fn subset(&mut self, n: usize, k: usize) -> Vec<usize> {
        let mut all: Vec<usize> = (0..n).collect();
        for i in 0..k {
            let j = i + self.below(n - i);
            all.swap(i, j);
        }
        all.truncate(k);
        all
    }
}

/// A model with random asymmetric costs and `nodes` NUMA nodes.
pub fn random_model(rng: &mut Rng, n: usize, nodes: usize) -> Model {
    let node = |i: usize| i * nodes / n;
    let mut mat = |base: f64| {
        cost_matrix(n, |i, j| {
            let f = if node(i) == node(j) { 1.0 } else { 3.0 };
            base * f * (0.5 + rng.unit())
        })
    };
    let send = mat(50.0);
    let recv = mat(200.0);
    let mut m = Model::new((0..n as u32).map(|c| c * 2 + 1).collect(), send, recv);
    m.hierarchy = Hierarchy {
        source: "test".into(),
        levels: vec![Level {
            name: "NUMANode".into(),
            groups: (0..nodes)
                .map(|g| {
                    (0..n)
                        .filter(|&i| node(i) == g)
                        .map(|i| m.cpus[i])
                        .collect()
                })
                .collect(),
        }],
    };
    m.validate().unwrap();
    m
}

/// The paper's recursive formula for lat(T, v), written independently of the
/// simulator: child c of p, k-th in send order, holds the message at lat(p) +
/// sum_{i<=k} send(p, c_i) + receive(p, c).
pub fn recursive_lat(model: &Model, tree: &smelt_tree::Tree) -> f64 {
    fn go(model: &Model, t: &smelt_tree::Tree, v: smelt_tree::Pos, at: f64, out: &mut f64) {
        let pv = model.position(t.members[v].get()).unwrap();
        let mut acc = at;
        for &c in &t.children[v] {
            let pc = model.position(t.members[c].get()).unwrap();
            acc += model.send(pv, pc);
            let a = acc + model.receive(pv, pc);
            *out = out.max(a);
            go(model, t, c, a, out);
        }
    }
    let mut out = 0.0;
    go(model, tree, tree.root, 0.0, &mut out);
    out
}

/// Stress multiplier from SMELT_STRESS (default 1).
pub fn stress() -> usize {
    smelt_settings::count(smelt_settings::STRESS)
        .unwrap()
        .unwrap_or(1) as usize
}
