//! Test helpers: a Model from the Smelt machine database files (in cycles), random
//! numbers, an independent recursive latency formula.
#![allow(dead_code)]

use smelt_model::{Hierarchy, Level, Model};
use std::path::PathBuf;

pub fn machinedb_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/machines/smelt-machinedb/intel_xeon_e5_v2_2x10")
}

fn read_pairs(name: &str, n: usize) -> Vec<Vec<f64>> {
    let path = machinedb_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut m = vec![vec![0.0; n]; n];
    for (i, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f.len(), 4, "{}:{}", path.display(), i + 1);
        let (s, d): (usize, usize) = (f[0].parse().unwrap(), f[1].parse().unwrap());
        m[s][d] = f[2].parse().unwrap();
    }
    m
}

/// The 2×10-core Xeon E5 v2 of the machine database, costs in cycles, NUMA nodes
/// {0-9} and {10-19}.
pub fn xeon() -> Model {
    let n = 20;
    let mut m = Model::new(
        (0..n as u32).collect(),
        read_pairs("pairwise-nsend_send", n),
        read_pairs("pairwise-nsend_receive", n),
    );
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
    let mut mat = |base: f64| -> Vec<Vec<f64>> {
        (0..n)
            .map(|i| {
                (0..n)
                    .map(|j| {
                        if i == j {
                            0.0
                        } else {
                            let f = if node(i) == node(j) { 1.0 } else { 3.0 };
                            base * f * (0.5 + rng.unit())
                        }
                    })
                    .collect()
            })
            .collect()
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
    fn go(model: &Model, t: &smelt_tree::Tree, v: usize, at: f64, out: &mut f64) {
        let pv = model.position(t.members[v]).unwrap();
        let mut acc = at;
        for &c in &t.children[v] {
            let pc = model.position(t.members[c]).unwrap();
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
    std::env::var("SMELT_STRESS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1)
}
