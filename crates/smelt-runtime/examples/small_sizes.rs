//! Back-to-back `broadcast_into`, `reduce_bytes` and `allreduce_bytes` of small byte
//! buffers between two threads, size by size: the loops behind the MPI interposer's
//! small-message cells (it calls these for more than 8 bytes), without MPI. Prints the
//! median ns per operation over 7 groups for each size.
//!
//! `cargo run --release -p smelt-runtime --example small_sizes [-- OPS [SIZES]]`
//! (default 10⁶ operations, sizes 8,16,32,48,64,96,128,256). As two processes:
//! `smelt launch -n 2 -- target/release/examples/small_sizes [OPS [SIZES]]` (each
//! member joins the launcher's job; member 0 prints one run per size).

use smelt_runtime::{Group, GroupError, Member};
use smelt_tree::Tree;
use std::time::Instant;

fn add_u64(acc: &mut [u8], x: &[u8]) {
    for (a, b) in acc.chunks_exact_mut(8).zip(x.chunks_exact(8)) {
        let s = u64::from_ne_bytes(a.try_into().unwrap())
            .wrapping_add(u64::from_ne_bytes(b.try_into().unwrap()));
        a.copy_from_slice(&s.to_ne_bytes());
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let sizes: Vec<usize> = args
        .next()
        .map(|s| s.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_else(|| vec![8, 16, 32, 48, 64, 96, 128, 256]);
    if std::env::var_os(smelt_runtime::process::ENV_JOB).is_some() {
        let mut m = smelt_runtime::process::join_from_env().expect("joins the launcher's job");
        if m.rank().index() == 0 {
            println!(
                "{:>6} {:>12} {:>12} {:>12}",
                "bytes", "bcast ns", "reduce ns", "allreduce ns"
            );
        }
        for &len in &sizes {
            let f = run(&mut m, len, n).expect("the member runs");
            if m.rank().index() == 0 {
                println!("{len:>6} {:>12.1} {:>12.1} {:>12.1}", f[0], f[1], f[2]);
            }
        }
        return;
    }
    let tree = Tree::from_raw(vec![0, 1], 0, vec![vec![1], vec![]]).expect("a valid tree");
    println!(
        "{:>6} {:>12} {:>12} {:>12}",
        "bytes", "bcast ns", "reduce ns", "allreduce ns"
    );
    for &len in &sizes {
        let mut figs: [Vec<f64>; 3] = Default::default();
        for _ in 0..7 {
            let r = Group::new(&tree)
                .and_then(|g| g.run(|m| run(m, len, n)))
                .expect("group runs");
            let f = r[0].clone().expect("member 0 succeeds");
            for k in 0..3 {
                figs[k].push(f[k]);
            }
        }
        for v in figs.iter_mut() {
            v.sort_by(f64::total_cmp);
        }
        println!(
            "{len:>6} {:>12.1} {:>12.1} {:>12.1}",
            figs[0][3], figs[1][3], figs[2][3]
        );
    }
}

/// One member's loops: `n` back-to-back broadcasts, reductions and allreductions of
/// `len` bytes; ns per operation of each.
fn run<L: smelt_transport::Link>(
    m: &mut Member<L>,
    len: usize,
    n: usize,
) -> Result<[f64; 3], GroupError> {
    let mut buf = vec![1u8; len];
    let mut out = [0.0; 3];
    for (k, o) in out.iter_mut().enumerate() {
        m.barrier()?;
        let t0 = Instant::now();
        for _ in 0..n {
            match k {
                0 => m.broadcast_into(&mut buf)?,
                1 => {
                    m.reduce_bytes(&mut buf, add_u64)?;
                }
                _ => m.allreduce_bytes(&mut buf, add_u64)?,
            }
        }
        m.barrier()?;
        *o = t0.elapsed().as_nanos() as f64 / n as f64;
    }
    Ok(out)
}
