use smelt_runtime::Group;
use smelt_tree::Tree;
use std::hint::black_box;
use std::time::Instant;

#[inline(never)]
fn ballast(k: usize, seed: u64) {
    let mut x = seed;
    for i in 0..k {
        x = black_box(x.rotate_left(5) ^ i as u64);
    }
    black_box(x);
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000_000);
    let kr: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let kc: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let tree = Tree::from_raw(vec![0, 1], 0, vec![vec![1], vec![]]).expect("a valid tree");
    let mut bcast = Vec::new();
    for _ in 0..5 {
        let r = Group::new(&tree)
            .and_then(|g| {
                g.run(|m| -> Result<f64, smelt_runtime::GroupError> {
                    let k = if m.rank().index() == 0 { kr } else { kc };
                    m.barrier()?;
                    let t0 = Instant::now();
                    for i in 0..n {
                        m.broadcast_word(i as u64)?;
                        ballast(k, i as u64);
                    }
                    m.barrier()?;
                    Ok(t0.elapsed().as_nanos() as f64 / n as f64)
                })
            })
            .expect("group runs");
        bcast.push(r[0].clone().expect("ok"));
    }
    bcast.sort_by(f64::total_cmp);
    println!(
        "root {kr} stores, child {kc}: broadcast_word min {:.1} median {:.1} ns",
        bcast[0], bcast[2]
    );
}
