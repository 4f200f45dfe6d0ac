//! Oversubscribed barrier probe (tuning aid): members attached to threads that are
//! unpinned, pinned by pre-order chunks of the tree, or pinned round-robin.
use smelt_runtime::{Group, GroupConfig, Pinning};
use smelt_tree::Tree;
use std::time::{Duration, Instant};

fn kary(n: usize, k: usize) -> Tree {
    let children = (0..n)
        .map(|i| (1..=k).map(|j| k * i + j).filter(|&c| c < n).collect())
        .collect();
    Tree::new((0..n as u32).map(|i| 10_000 + i).collect(), 0, children).unwrap()
}

fn run(tree: &Tree, place: &dyn Fn(usize) -> Option<u32>, iters: usize) -> f64 {
    // SMELT_WAIT=spin,yield,park_us overrides the wait policy.
    let wait = std::env::var("SMELT_WAIT").ok().and_then(|w| {
        let v: Vec<u64> = w.split(',').filter_map(|x| x.parse().ok()).collect();
        (v.len() == 3).then(|| smelt_runtime::WaitPolicy {
            spin_polls: v[0] as u32,
            yield_polls: v[1] as u32,
            park_initial: Duration::from_micros(v[2]),
            park_max: Duration::from_millis(1),
        })
    });
    let cfg = GroupConfig {
        pinning: Pinning::Never,
        wait,
        ..Default::default()
    };
    let members = Group::with_config(std::slice::from_ref(tree), &cfg)
        .unwrap()
        .into_members();
    let times: Vec<f64> = std::thread::scope(|s| {
        let hs: Vec<_> = members
            .into_iter()
            .map(|mut m| {
                let cpu = place(m.rank());
                s.spawn(move || {
                    if let Some(c) = cpu {
                        smelt_transport::pin_current_thread(c).unwrap();
                    }
                    for _ in 0..50 {
                        m.barrier().unwrap();
                    }
                    let t0 = Instant::now();
                    for _ in 0..iters {
                        m.barrier().unwrap();
                    }
                    t0.elapsed().as_nanos() as f64 / iters as f64
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    times.into_iter().fold(0.0, f64::max)
}

fn main() {
    let allowed = smelt_transport::allowed_cpus().unwrap();
    let k = allowed.len();
    for n in [8usize, 16] {
        for (tn, tree) in [
            ("binary", kary(n, 2)),
            ("flat", kary(n, n - 1)),
            ("4-ary", kary(n, 4)),
        ] {
            let pre = tree.preorder();
            let chunk = |r: usize| {
                let pos = pre.iter().position(|&x| x == r).unwrap();
                Some(allowed[pos * k / n])
            };
            let none = |_r: usize| None;
            let mut line = format!("n={n:<2} {tn:<6}");
            for _ in 0..2 {
                for (name, f) in [
                    ("unpinned", &none as &dyn Fn(usize) -> Option<u32>),
                    ("chunks", &chunk),
                ] {
                    let t = run(&tree, f, 2000);
                    line += &format!(" {name} {:>7.0}", t);
                }
            }
            println!("{line}");
        }
    }
}
