//! Back-to-back barrier latency for one group size and tree shape, printed in the
//! peers' RESULT format so it can be interleaved with their programs.
//!
//! `barrier_bench N [binary|flat|kary4]` — N members; pinned when N <= CPUs, otherwise
//! unpinned on made-up CPU ids (oversubscribed), as the peers do.

use smelt_runtime::measure::{measure_back_to_back, MeasureConfig, Op};
use smelt_tree::Tree;
use std::time::Duration;

fn kary(cpus: Vec<u32>, k: usize) -> Tree {
    let n = cpus.len();
    let children = (0..n)
        .map(|i| (1..=k).map(|j| k * i + j).filter(|&c| c < n).collect())
        .collect();
    Tree::new(cpus, 0, children).expect("valid k-ary tree")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(2);
    let shape = args.get(2).map(String::as_str).unwrap_or("binary");
    let allowed = smelt_transport::allowed_cpus().unwrap_or_default();
    let cpus: Vec<u32> = if n <= allowed.len() {
        allowed[..n].to_vec()
    } else {
        (0..n as u32).map(|i| 100_000 + i).collect()
    };
    let tree = match shape {
        "flat" => kary(cpus, n.max(2) - 1),
        "kary4" => kary(cpus, 4),
        _ => kary(cpus, 2),
    };
    let cfg = MeasureConfig {
        rounds: 15,
        warmup: 2,
        batch: Duration::from_millis(50),
        ..Default::default()
    };
    let m = measure_back_to_back(&tree, Op::Barrier, &cfg).expect("barrier measurement");
    println!(
        "RESULT smelt_barrier({shape}) {n} {:.1} {:.1} {:.1} {},iters={}",
        m.stats.median_ns,
        m.stats.p10_ns,
        m.stats.p90_ns,
        if m.placement.pinned {
            "pinned"
        } else {
            "unpinned,oversubscribed"
        },
        m.ops_per_run
    );
}
