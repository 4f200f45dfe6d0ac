//! Long messages with more members than CPUs (issue 28): the reduction
//! (`reduce_slice_op`, doubles, sum; the default), with `OP=broadcast` the broadcast
//! (`broadcast_into`) over several tree shapes, or with `OP=allreduce` Rabenseifner's
//! allreduce (`allreduce_slice_op` with `allreduce=rabenseifner` in the table; it runs
//! on the links beyond the tree, so only on the flat tree), each with loans between
//! threads (every message from 1 KiB lent), without them (fragments through the rings),
//! and with the default `lend_from` (which, oversubscribed, lends from
//! `OVERSUBSCRIBED_LEND_FROM`), interleaved pass by pass on the
//! same members, measured back to back as `smelt bench large` measures
//! (`measure_back_to_back_with`). Prints µs per call (median of the passes) and each
//! configuration's time over the first's.
//!
//! `[OP=broadcast|allreduce] cargo run --release -p smelt-runtime --example oversub_reduce [-- MEMBERS PASSES BYTES...]`
//!
//! Members run unpinned (made-up CPU ids), as `smelt bench large --threads 8` runs
//! them on 2 CPUs.

use smelt_ids::stats::median;
use smelt_runtime::measure::{back_to_back_member_with, measure_back_to_back_with, MeasureConfig};
use smelt_runtime::{GroupConfig, LinkConfig, Pinning, ReduceOp};
use smelt_tree::Tree;
use std::time::Duration;

/// A tree of `n` members in which member `i`'s parent is `parent(i)` (i ≥ 1).
fn tree_of(n: usize, parent: impl Fn(usize) -> usize) -> Tree {
    let mut children = vec![Vec::new(); n];
    for i in 1..n {
        children[parent(i)].push(i);
    }
    Tree::from_raw((0..n as u32).collect(), 0, children).expect("a valid tree")
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(8);
    let passes: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    let mut sizes: Vec<usize> = args.filter_map(|s| s.parse().ok()).collect();
    if sizes.is_empty() {
        sizes = vec![16 << 10, 64 << 10, 256 << 10, 1 << 20];
    }
    let shapes: Vec<(&str, Tree)> = vec![
        ("flat", tree_of(n, |_| 0)),
        // The root with half the members as children, each with at most one child:
        // two levels, as `adaptive-shuffled` builds 8 members on 2 CPUs.
        ("two-level", tree_of(n, |i| i.saturating_sub(n / 2))),
        ("binary", tree_of(n, |i| (i - 1) / 2)),
        ("binomial", tree_of(n, |i| i & (i - 1))),
        ("chain", tree_of(n, |i| i - 1)),
    ];
    let op = std::env::var("OP").unwrap_or_else(|_| "reduce".into());
    let op = match op.as_str() {
        "reduce" | "broadcast" | "allreduce" => op,
        other => panic!("OP={other}: reduce, broadcast or allreduce"),
    };
    // Rabenseifner runs beside the tree: one shape is enough.
    let shapes = if op == "allreduce" {
        &shapes[..1]
    } else {
        &shapes[..]
    };
    let table = (op == "allreduce").then(|| {
        std::sync::Arc::new(smelt_plan::AlgorithmTable::parse("allreduce=rabenseifner").unwrap())
    });
    // (name, tree index, lend_from)
    let mut configs: Vec<(String, usize, usize)> = Vec::new();
    for (k, (name, _)) in shapes.iter().enumerate() {
        configs.push((format!("{name}, loans"), k, 1 << 10));
        configs.push((format!("{name}, rings"), k, usize::MAX));
        configs.push((format!("{name}, default"), k, smelt_runtime::LEND_FROM));
    }
    println!("{n} members, unpinned, {passes} passes; µs per {op} (x the first configuration's)");
    for bytes in sizes {
        let mut t: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
        for _ in 0..passes {
            for (c, (_, k, lend)) in configs.iter().enumerate() {
                let group = GroupConfig {
                    link: LinkConfig::default()
                        .capacity(1024)
                        .timeout(Duration::from_secs(60)),
                    pinning: Pinning::Never,
                    lend_from: *lend,
                    algorithms: table.clone(),
                    ..GroupConfig::default()
                };
                let cfg = MeasureConfig {
                    rounds: 3,
                    warmup: 1,
                    batch: Duration::from_millis(20),
                    group,
                };
                let doubles = bytes / 8;
                let m = measure_back_to_back_with(&shapes[*k].1, &cfg, |m| {
                    let r = m.rank().index();
                    match op.as_str() {
                        "broadcast" => {
                            let mut b = vec![r as u8; bytes];
                            back_to_back_member_with(m, &cfg, |m| m.broadcast_into(&mut b))
                        }
                        "allreduce" => {
                            let mut v = vec![r as f64; doubles];
                            back_to_back_member_with(m, &cfg, |m| {
                                m.allreduce_slice_op(&mut v, ReduceOp::Sum)
                            })
                        }
                        _ => {
                            let mut v = vec![r as f64; doubles];
                            back_to_back_member_with(m, &cfg, |m| {
                                m.reduce_slice_op(&mut v, ReduceOp::Sum).map(drop)
                            })
                        }
                    }
                })
                .expect("measured");
                t[c].push(m.stats.median / 1e3);
            }
        }
        let meds: Vec<f64> = t.iter().map(|v| median(v)).collect();
        println!("{bytes} B:");
        for (c, (name, _, _)) in configs.iter().enumerate() {
            println!(
                "  {name:>16} {:>10.1} µs  {:>5.2}x",
                meds[c],
                meds[c] / meds[0]
            );
        }
    }
}
