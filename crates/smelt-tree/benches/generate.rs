//! Tree generation time per topology and group size (`cargo bench -p smelt-tree`).
//!
//! Synthetic machines of realistic shape (16 = 4 nodes × 4, 64 = 8 × 8, 256 = 16 ×
//! 16, 1024 = 16 × 64 CPUs) with NUMA-distance-like costs and ±20 % deterministic
//! noise, plus the Smelt machine database's 2×10-core Xeon. Also: rebuilding a tree
//! for a subset of cores / another root (Costs extraction included).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use smelt_model::{Hierarchy, Level, Model};
use smelt_tree::{Costs, Topology};
use std::hint::black_box;
use std::path::Path;

fn machine(nodes: usize, per: usize) -> Model {
    let n = nodes * per;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut noise = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        0.8 + 0.4 * ((state >> 11) as f64 / (1u64 << 53) as f64)
    };
    let node = |i: usize| i / per;
    // Distance grows with the node index difference (rings of sockets).
    let dist = |a: usize, b: usize| {
        if a == b {
            1.0
        } else {
            2.0 + (node(a) as f64 - node(b) as f64).abs().min(4.0) * 0.5
        }
    };
    let mut send = vec![vec![0.0; n]; n];
    let mut recv = vec![vec![0.0; n]; n];
    for i in 0..n {
        for j in 0..n {
            if i != j {
                let d = dist(node(i), node(j));
                send[i][j] = 30.0 * d * noise();
                recv[i][j] = 110.0 * d * noise();
            }
        }
    }
    let mut m = Model::new((0..n as u32).collect(), send, recv);
    m.hierarchy = Hierarchy {
        source: "bench".into(),
        levels: vec![Level {
            name: "NUMANode".into(),
            groups: (0..nodes)
                .map(|g| ((g * per) as u32..((g + 1) * per) as u32).collect())
                .collect(),
        }],
    };
    m
}

fn bench(c: &mut Criterion) {
    let shapes = [(4, 4), (8, 8), (16, 16), (16, 64)];
    let mut g = c.benchmark_group("generate");
    g.sample_size(10);
    for (nodes, per) in shapes {
        let m = machine(nodes, per);
        let n = m.len();
        let all: Vec<usize> = (0..n).collect();
        let costs = Costs::new(&m, &all).unwrap();
        let root = costs.default_root();
        for t in Topology::EVALUATED {
            if t == Topology::Optimized && n > 256 {
                continue;
            }
            g.bench_with_input(BenchmarkId::new(t.to_string(), n), &n, |b, _| {
                b.iter(|| black_box(t.children(black_box(&costs), root)))
            });
        }
        g.bench_with_input(BenchmarkId::new("costs-extraction", n), &n, |b, _| {
            b.iter(|| black_box(Costs::new(&m, black_box(&all)).unwrap()))
        });
    }
    g.finish();

    // Rebuild for a subset / another root on 64 cores, including Costs extraction.
    let m = machine(8, 8);
    let subset: Vec<usize> = (0..64).filter(|i| i % 2 == 1).collect();
    let all: Vec<usize> = (0..64).collect();
    let mut g = c.benchmark_group("rebuild-64");
    for t in [
        Topology::Adaptive,
        Topology::AdaptiveSorted,
        Topology::AdaptiveShuffled,
    ] {
        g.bench_function(format!("{t}/subset-32"), |b| {
            b.iter(|| black_box(t.generate(&m, black_box(&subset), Some(17)).unwrap()))
        });
        g.bench_function(format!("{t}/root-42"), |b| {
            b.iter(|| black_box(t.generate(&m, black_box(&all), Some(42)).unwrap()))
        });
    }
    g.finish();

    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/machines/smelt-machinedb/intel_xeon_e5_v2_2x10");
    if let Ok(m) = smelt_model::import::import_machinedb(&dir, None) {
        let all: Vec<usize> = (0..m.len()).collect();
        let costs = Costs::new(&m, &all).unwrap();
        let root = costs.default_root();
        let mut g = c.benchmark_group("xeon-e5-v2-2x10");
        for t in Topology::EVALUATED {
            g.bench_function(t.to_string(), |b| {
                b.iter(|| black_box(t.children(black_box(&costs), root)))
            });
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
