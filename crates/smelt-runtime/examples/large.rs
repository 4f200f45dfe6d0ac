//! Bandwidth of large broadcasts, reductions and allreductions between two pinned
//! threads (CPUs 0 and 1) against `memcpy` of the same size: the loop behind the large
//! message figures, without the bench harness.
//!
//! `cargo run --release -p smelt-runtime --example large [-- CAPACITY SEGMENT]`

use smelt_runtime::{Group, GroupConfig};
use smelt_tree::Tree;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let capacity: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(64);
    let segment: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let tree = Tree::from_raw(vec![0, 1], 0, vec![vec![1], vec![]]).expect("a valid tree");
    let cfg = GroupConfig {
        link: smelt_runtime::LinkConfig::default().capacity(capacity),
        segment: (segment > 0).then_some(segment),
        ..GroupConfig::default()
    };
    println!("capacity {capacity} slots, segment {segment} (0 = auto)");
    for size in [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20] {
        let reps = ((64 << 20) / size).clamp(4, 256);
        let src = vec![7u8; size];
        let mut dst = vec![0u8; size];
        let t0 = Instant::now();
        for _ in 0..reps {
            dst.copy_from_slice(std::hint::black_box(&src));
        }
        let memcpy = t0.elapsed().as_secs_f64() / reps as f64;
        let r = Group::with_config(std::slice::from_ref(&tree), &cfg)
            .and_then(|g| {
                g.run(|m| -> Result<[f64; 3], smelt_runtime::GroupError> {
                    let mut buf = vec![m.rank().index() as u8; size];
                    let mut out = [0.0; 3];
                    for (k, o) in out.iter_mut().enumerate() {
                        m.barrier()?;
                        let t0 = Instant::now();
                        for _ in 0..reps {
                            match k {
                                0 => m.broadcast_into(&mut buf)?,
                                1 => {
                                    m.reduce_bytes(&mut buf, |a, b| {
                                        for (x, y) in a.iter_mut().zip(b) {
                                            *x = x.wrapping_add(*y);
                                        }
                                    })?;
                                }
                                _ => m.allreduce_bytes(&mut buf, |a, b| {
                                    for (x, y) in a.iter_mut().zip(b) {
                                        *x = x.wrapping_add(*y);
                                    }
                                })?,
                            }
                        }
                        m.barrier()?;
                        *o = t0.elapsed().as_secs_f64() / reps as f64;
                    }
                    Ok(out)
                })
            })
            .expect("group runs");
        let t = r[0].clone().expect("member 0 succeeds");
        let gbs = |s: f64| size as f64 / s / 1e9;
        println!(
            "{:>9} B: memcpy {:6.2} GB/s | bcast {:6.2} GB/s ({:.2}x) | reduce {:6.2} GB/s ({:.2}x) | allreduce {:6.2} GB/s ({:.2}x)",
            size,
            gbs(memcpy),
            gbs(t[0]),
            memcpy / t[0],
            gbs(t[1]),
            memcpy / t[1],
            gbs(t[2]),
            memcpy / t[2]
        );
    }
}
