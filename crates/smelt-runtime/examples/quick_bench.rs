//! Quick figures for the collectives on this machine (a pinned pair, paper-style and
//! back-to-back). The transport's figures and the peers are in `smelt bench`.
//!
//! `cargo run --release -p smelt-runtime --example quick_bench [--quick]`

use smelt_runtime::measure::{measure, measure_back_to_back, MeasureConfig, Measurement, Op};
use smelt_tree::Tree;

fn show(name: &str, threads: usize, m: &Measurement) {
    let s = &m.stats;
    println!(
        "{name:<44} {threads:>3} {:>12.1} {:>12.1} {:>12.1}  {}{}",
        s.median,
        s.p10,
        s.p90,
        if m.placement.pinned {
            "pinned"
        } else {
            "unpinned"
        },
        if m.placement.oversubscribed {
            ",oversubscribed"
        } else {
            ""
        },
    );
}

/// A binary tree over `cpus` rooted at the first.
fn binary(cpus: Vec<u32>) -> Tree {
    let n = cpus.len();
    let children = (0..n)
        .map(|i| {
            [2 * i + 1, 2 * i + 2]
                .into_iter()
                .filter(|&c| c < n)
                .collect()
        })
        .collect();
    Tree::from_raw(cpus, 0, children).expect("valid binary tree")
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let quick = std::env::args().any(|a| a == "--quick");
    let mut cfg = if quick {
        MeasureConfig::quick()
    } else {
        MeasureConfig {
            rounds: 15,
            warmup: 2,
            batch: std::time::Duration::from_millis(100),
            ..Default::default()
        }
    };
    // SMELT_WAIT=spin,yield,park_us overrides the wait policy (for tuning).
    if let Some(w) = smelt_settings::text(smelt_settings::WAIT)? {
        let v: Vec<u64> = w.split(',').filter_map(|x| x.parse().ok()).collect();
        if v.len() == 3 {
            cfg.group.link.wait = Some(smelt_runtime::WaitPolicy {
                spin_polls: v[0] as u32,
                yield_polls: v[1] as u32,
                park_initial: std::time::Duration::from_micros(v[2]),
                park_max: std::time::Duration::from_millis(1),
            });
        }
    }
    let cpus = smelt_transport::allowed_cpus()?;
    let pair = (cpus[0], *cpus.get(1).unwrap_or(&cpus[0]));
    println!(
        "{:<44} {:>3} {:>12} {:>12} {:>12}  note",
        "name", "thr", "median_ns", "p10_ns", "p90_ns"
    );
    let two = binary(vec![pair.0, pair.1]);
    show(
        "smelt_barrier(b2b)",
        2,
        &measure_back_to_back(&two, Op::Barrier, &cfg)?,
    );
    show(
        "smelt_reduce(b2b)",
        2,
        &measure_back_to_back(&two, Op::Reduce, &cfg)?,
    );
    show(
        "smelt_broadcast(b2b)",
        2,
        &measure_back_to_back(&two, Op::Broadcast, &cfg)?,
    );
    let paper = MeasureConfig {
        rounds: if quick { 50 } else { 1000 },
        warmup: 20,
        ..cfg.clone()
    };
    for op in Op::RUN {
        show(
            &format!("smelt_{op}(paper, leaf completion)"),
            2,
            &measure(&two, op, &paper)?,
        );
    }
    for n in [8u32, 16] {
        // More members than CPUs: made-up CPU ids, so the group runs unpinned.
        let tree = binary((0..n).map(|i| 10_000 + i).collect());
        show(
            "smelt_barrier(b2b)",
            n as usize,
            &measure_back_to_back(&tree, Op::Barrier, &cfg)?,
        );
        show(
            "smelt_reduce(b2b)",
            n as usize,
            &measure_back_to_back(&tree, Op::Reduce, &cfg)?,
        );
        show(
            "smelt_broadcast(b2b)",
            n as usize,
            &measure_back_to_back(&tree, Op::Broadcast, &cfg)?,
        );
        let paper = MeasureConfig {
            rounds: if quick { 10 } else { 100 },
            warmup: 3,
            ..cfg.clone()
        };
        show(
            "smelt_barrier(paper)",
            n as usize,
            &measure(&tree, Op::Barrier, &paper)?,
        );
    }
    Ok(())
}
