//! Back-to-back barrier and allreduce: the group's tree against the non-tree
//! algorithms (dissemination barrier, recursive-doubling allreduce) on the same
//! members, 2 to 16 thread members (more members than CPUs run unpinned), configurations
//! interleaved over 5 passes, median of the passes' medians. Prints ns per operation
//! and tree / non-tree (> 1: the non-tree algorithm is faster).
//!
//! `cargo run --release -p smelt-runtime --example nontree [-- 2,4,8,16]`

use smelt_ids::stats::median;
use smelt_runtime::measure::{back_to_back_member_with, measure_back_to_back_with, MeasureConfig};
use smelt_runtime::{GroupConfig, Pinning};
use smelt_tree::tuning::AlgorithmTable;
use smelt_tree::{Costs, Topology, Tree};
use std::sync::Arc;
use std::time::Duration;

fn tree(n: usize, t: Topology) -> Tree {
    let cpus = smelt_transport::allowed_cpus().unwrap_or_default();
    let ids: Vec<u32> = if cpus.len() >= n {
        cpus[..n].to_vec()
    } else {
        (0..n as u32).map(|i| 9000 + i).collect()
    };
    let c = Costs::from_matrices(vec![1.0; n * n], vec![1.0; n * n], n).expect("costs");
    let ch = t.children(&c, 0);
    let mut t = c.tree(0, ch);
    t.members = smelt_ids::CpuId::list(ids);
    t
}

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .nth(1)
        .map(|s| s.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_else(|| vec![2, 4, 8, 16]);
    let cpus = smelt_transport::allowed_cpus().map_or(1, |c| c.len());
    println!("{cpus} CPUs; ns per operation, back to back (median of 5 interleaved passes)");
    println!(
        "{:>3} {:<10} {:>8} {:>12} {:>12} {:>10}",
        "n", "op", "bytes", "tree ns", "non-tree ns", "tree/non"
    );
    for n in sizes {
        let t = tree(n, Topology::Knomial(2));
        let cells: [(&str, usize, &str); 3] = [
            ("barrier", 0, "barrier=dissemination"),
            ("allreduce", 8, "allreduce=recursive-doubling"),
            ("allreduce", 1024, "allreduce=recursive-doubling"),
        ];
        for (op, bytes, rule) in cells {
            let mut res: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
            for _ in 0..5 {
                for (k, r) in res.iter_mut().enumerate() {
                    let cfg = MeasureConfig {
                        rounds: 7,
                        warmup: 2,
                        batch: Duration::from_millis(2),
                        group: GroupConfig {
                            pinning: if n > cpus {
                                Pinning::Never
                            } else {
                                Pinning::Auto
                            },
                            algorithms: (k == 1)
                                .then(|| Arc::new(AlgorithmTable::parse(rule).expect("rule"))),
                            ..GroupConfig::default()
                        },
                    };
                    let m = measure_back_to_back_with(&t, &cfg, |m| {
                        let mut buf = vec![m.rank().index() as u8; bytes];
                        back_to_back_member_with(m, &cfg, |m| {
                            if op == "barrier" {
                                m.barrier()
                            } else {
                                m.allreduce_bytes(&mut buf, |a, b| {
                                    for (x, y) in a.iter_mut().zip(b) {
                                        *x ^= *y;
                                    }
                                })
                            }
                        })
                    })
                    .expect("measure");
                    r.push(m.stats.median);
                }
            }
            let (a, b) = (median(&res[0]), median(&res[1]));
            println!(
                "{n:>3} {op:<10} {bytes:>8} {a:>12.1} {b:>12.1} {:>10.2}",
                a / b
            );
        }
    }
}
