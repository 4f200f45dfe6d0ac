//! Back-to-back `broadcast_word` and `reduce` between two pinned threads (CPUs 0 and 1):
//! the loop behind the "threads before and after" figures in docs/results.md, without
//! the bench harness. Prints min and median ns per operation over 7 groups.
//!
//! `cargo run --release -p smelt-runtime --example back_to_back [-- OPS]` (default 2·10⁶)

use smelt_runtime::Group;
use smelt_tree::Tree;
use std::time::Instant;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000_000);
    let tree = Tree::from_raw(vec![0, 1], 0, vec![vec![1], vec![]]).expect("a valid tree");
    let (mut bcast, mut reduce) = (Vec::new(), Vec::new());
    for _ in 0..7 {
        let r = Group::new(&tree)
            .and_then(|g| {
                g.run(|m| -> Result<(f64, f64), smelt_runtime::GroupError> {
                    m.barrier()?;
                    let t0 = Instant::now();
                    for i in 0..n {
                        m.broadcast_word(i as u64)?;
                    }
                    m.barrier()?;
                    let b = t0.elapsed().as_nanos() as f64 / n as f64;
                    let t0 = Instant::now();
                    for i in 0..n {
                        m.reduce(i as u64, |a, b| a + b)?;
                    }
                    m.barrier()?;
                    Ok((b, t0.elapsed().as_nanos() as f64 / n as f64))
                })
            })
            .expect("group runs");
        let (b, r) = r[0].clone().expect("member 0 succeeds");
        bcast.push(b);
        reduce.push(r);
    }
    for v in [&mut bcast, &mut reduce] {
        v.sort_by(f64::total_cmp);
    }
    println!(
        "broadcast_word: min {:.1} ns, median {:.1} ns; reduce: min {:.1} ns, median {:.1} ns",
        bcast[0], bcast[3], reduce[0], reduce[3]
    );
}
