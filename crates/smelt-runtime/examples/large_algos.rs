//! The allreduce of long vectors by each algorithm, interleaved, on the same members:
//! the tree (reduce then broadcast) and Rabenseifner, each with loans between threads
//! (the default) and without (`lend_from` past every size: every byte through the
//! rings, as between processes, whose rings cannot lend). Doubles, sum, through
//! `allreduce_slice_op`; GB/s = bytes per member / time, the median of the passes, and
//! each algorithm's time over the tree's (with loans) in the same pass.
//!
//! `cargo run --release -p smelt-runtime --example large_algos [-- MEMBERS PASSES [YIELDS]]`
//!
//! YIELDS: polls with `yield_now` before a waiter parks (default: the group's
//! policy, 128 with more members than CPUs).
//!
//! More members than CPUs run unpinned.

use smelt_ids::stats::median;
use smelt_runtime::{Group, GroupConfig, GroupError, Pinning, ReduceOp};
use smelt_tree::tuning::AlgorithmTable;
use smelt_tree::Tree;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() {
    let mut args = std::env::args().skip(1);
    let members: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(2);
    let passes: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    let yields: Option<u32> = args.next().and_then(|s| s.parse().ok());
    let cpus = smelt_transport::allowed_cpus().unwrap_or_else(|_| vec![0]);
    let over = members > cpus.len();
    // More members than CPUs: distinct made-up CPU ids (a tree names each CPU once),
    // the members unpinned.
    let ids: Vec<u32> = (0..members)
        .map(|i| if over { i as u32 } else { cpus[i] as u32 })
        .collect();
    // A flat tree: what groups with more members than CPUs run, and with two members
    // the only tree.
    let children = (0..members)
        .map(|i| {
            if i == 0 {
                (1..members).collect()
            } else {
                vec![]
            }
        })
        .collect();
    let tree = Tree::from_raw(ids, 0, children).expect("a valid tree");
    let configs: [(&str, &str, bool); 4] = [
        ("tree", "allreduce=sequential", true),
        ("rabenseifner", "allreduce=rabenseifner", true),
        ("tree, no loans", "allreduce=sequential", false),
        ("rabenseifner, no loans", "allreduce=rabenseifner", false),
    ];
    println!(
        "{members} members{}, {passes} passes; GB/s (time / the tree's with loans, same pass)",
        if over {
            " (more than CPUs, unpinned)"
        } else {
            ""
        }
    );
    print!("{:>9}", "bytes");
    for (name, _, _) in &configs {
        print!(" | {name:>24}");
    }
    println!();
    for size in [
        4usize << 10,
        16 << 10,
        40 << 10,
        63 << 10,
        64 << 10,
        256 << 10,
        1 << 20,
        4 << 20,
        16 << 20,
    ] {
        let reps = ((32usize << 20) / size).clamp(4, 2048) / if over { 4 } else { 1 };
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
        for _ in 0..passes {
            for (k, (_, rules, lend)) in configs.iter().enumerate() {
                let cfg = GroupConfig {
                    algorithms: Some(Arc::new(AlgorithmTable::parse(rules).expect("rules"))),
                    lend_from: if *lend {
                        smelt_runtime::LEND_FROM
                    } else {
                        usize::MAX
                    },
                    pinning: if over { Pinning::Never } else { Pinning::Auto },
                    link: smelt_runtime::LinkConfig {
                        timeout: Duration::from_secs(120),
                        wait: yields.map(|y| smelt_runtime::WaitPolicy {
                            yield_polls: y,
                            ..smelt_runtime::WaitPolicy::OVERSUBSCRIBED
                        }),
                        ..Default::default()
                    },
                    ..GroupConfig::default()
                };
                let r = Group::with_config(std::slice::from_ref(&tree), &cfg)
                    .and_then(|g| {
                        g.run(|m| -> Result<f64, GroupError> {
                            let mut v = vec![m.rank().index() as f64; size / 8];
                            m.allreduce_slice_op(&mut v, ReduceOp::Sum)?;
                            m.barrier()?;
                            let t0 = Instant::now();
                            for _ in 0..reps.max(1) {
                                m.allreduce_slice_op(&mut v, ReduceOp::Sum)?;
                            }
                            m.barrier()?;
                            Ok(t0.elapsed().as_secs_f64() / reps.max(1) as f64)
                        })
                    })
                    .expect("group runs");
                let worst = r
                    .into_iter()
                    .map(|x| x.expect("every member succeeds"))
                    .fold(0.0, f64::max);
                times[k].push(worst);
            }
        }
        print!("{size:>9}");
        for t in &times {
            let ratios: Vec<f64> = t.iter().zip(&times[0]).map(|(a, b)| a / b).collect();
            print!(
                " | {:>6.2} GB/s ({:>5.2}x)",
                size as f64 / median(t) / 1e9,
                median(&ratios)
            );
        }
        println!();
    }
}
