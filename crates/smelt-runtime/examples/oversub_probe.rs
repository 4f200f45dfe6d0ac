//! Oversubscribed barrier probe: compares wait policies (tuning aid).
use smelt_runtime::measure::{measure_back_to_back, MeasureConfig, Op};
use smelt_runtime::WaitPolicy;
use smelt_tree::Tree;
use std::time::Duration;
fn binary(n: u32) -> Tree {
    let n = n as usize;
    let children = (0..n)
        .map(|i| {
            [2 * i + 1, 2 * i + 2]
                .into_iter()
                .filter(|&c| c < n)
                .collect()
        })
        .collect();
    Tree::new((0..n as u32).map(|i| 10_000 + i).collect(), 0, children).unwrap()
}
fn flat(n: u32) -> Tree {
    let n = n as usize;
    let mut children = vec![Vec::new(); n];
    children[0] = (1..n).collect();
    Tree::new((0..n as u32).map(|i| 10_000 + i).collect(), 0, children).unwrap()
}
fn main() {
    let w = |s: u32, y: u32| WaitPolicy {
        spin_polls: s,
        yield_polls: y,
        park_initial: Duration::from_micros(50),
        park_max: Duration::from_millis(1),
    };
    let pols: Vec<(&str, WaitPolicy)> = vec![
        ("default", WaitPolicy::OVERSUBSCRIBED),
        ("s4y64", w(4, 64)),
        ("s4y256", w(4, 256)),
        ("s0y1e6", w(0, 1_000_000)),
        ("s4y16", w(4, 16)),
    ];
    for n in [8, 16, 8] {
        for (tn, tree) in [("binary", binary(n)), ("flat", flat(n))] {
            for (name, p) in &pols {
                let mut cfg = MeasureConfig {
                    rounds: 7,
                    warmup: 1,
                    batch: Duration::from_millis(30),
                    ..Default::default()
                };
                cfg.group.wait = Some(*p);
                let m = measure_back_to_back(&tree, Op::Barrier, &cfg).unwrap();
                println!(
                    "n={n} {tn:<6} {name:<14} barrier {:>10.0} ns  (p10 {:.0} p90 {:.0})",
                    m.stats.median_ns, m.stats.p10_ns, m.stats.p90_ns
                );
            }
        }
    }
}
