//! The 2-member barrier against the C peer's design in one Rust harness (issue 27):
//! C-style episode flags (one line each way) spinning with `pause` and without,
//! `Member::barrier` in a plain loop, and the same through `measure_back_to_back`
//! (with and without `barrier=dissemination` in the table), interleaved trials; then
//! the cost of one `pause`. Median and min ns per barrier.
//!
//! `cargo run --release -p smelt-runtime --example barrier_vs_flags [-- BARRIERS [TRIALS]]`
//! (default 3·10⁵ barriers, 15 trials). With `ONLY=1` it runs 2·10⁷ `Member::barrier`s
//! and nothing else, for a profiler: `ONLY=1 perf record -e cpu-clock -g
//! target/release/examples/barrier_vs_flags`.

use smelt_ids::CpuId;
use smelt_runtime::measure::{measure_back_to_back, MeasureConfig, Op};
use smelt_runtime::{Group, GroupConfig, GroupError};
use smelt_transport::pin_current_thread;
use smelt_tree::Tree;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

#[repr(align(128))]
struct Flag(AtomicU64);

/// ns per barrier of `n` flag barriers between threads pinned to CPUs 0 and 1.
fn time_flags(n: u64, pause: bool) -> f64 {
    let flags = Arc::new([Flag(AtomicU64::new(0)), Flag(AtomicU64::new(0))]);
    let barrier = move |f: &[Flag; 2], me: usize, e: u64| {
        f[1 - me].0.store(e, Ordering::Release);
        while f[me].0.load(Ordering::Acquire) < e {
            if pause {
                std::hint::spin_loop();
            }
        }
    };
    let run = |me: usize| {
        let f = flags.clone();
        std::thread::spawn(move || {
            let _ = pin_current_thread(CpuId(me as u32));
            let t = Instant::now();
            (1..=n).for_each(|e| barrier(&f, me, e));
            t.elapsed().as_nanos() as f64 / n as f64
        })
    };
    let (a, b) = (run(0), run(1));
    b.join().expect("the peer thread");
    a.join().expect("the measuring thread")
}

/// ns per barrier of `n` `Member::barrier`s in a plain loop (member 0's figure).
fn time_members(tree: &Tree, n: u64) -> f64 {
    let g = Group::with_config(std::slice::from_ref(tree), &GroupConfig::default())
        .expect("a group of two");
    let out = g
        .run(|m| {
            m.barrier()?;
            let t = Instant::now();
            for _ in 0..n {
                m.barrier()?;
            }
            Ok::<f64, GroupError>(t.elapsed().as_nanos() as f64 / n as f64)
        })
        .expect("the group ran");
    out.into_iter().next().expect("member 0").expect("barriers")
}

fn summary(name: &str, mut v: Vec<f64>) {
    v.sort_by(f64::total_cmp);
    println!(
        "{name:<40} median {:7.1} ns  min {:7.1} ns",
        v[v.len() / 2],
        v[0]
    );
}

fn main() {
    let tree = Tree::from_raw(vec![0, 1], 0, vec![vec![1], vec![]]).expect("a tree of two");
    if std::env::var_os("ONLY").is_some() {
        println!("{:.1} ns per barrier", time_members(&tree, 20_000_000));
        return;
    }
    let mut args = std::env::args().skip(1).map(|s| s.parse().ok());
    let n: u64 = args.next().flatten().unwrap_or(300_000);
    let trials = args.next().flatten().unwrap_or(15) as usize;
    let mut cfg = MeasureConfig::quick();
    let table = smelt_plan::AlgorithmTable::parse("barrier=dissemination").expect("a rule");
    let mut rows: [(&str, Vec<f64>); 5] = [
        ("flags (C peer's design), pause", vec![]),
        ("flags, no pause", vec![]),
        ("Member::barrier, plain loop", vec![]),
        ("measure_back_to_back", vec![]),
        ("measure_back_to_back, dissemination", vec![]),
    ];
    for _ in 0..trials {
        rows[0].1.push(time_flags(n, true));
        rows[1].1.push(time_flags(n, false));
        rows[2].1.push(time_members(&tree, n));
        cfg.group.algorithms = None;
        let m = measure_back_to_back(&tree, Op::Barrier, &cfg).expect("measured");
        rows[3].1.push(m.stats.median);
        cfg.group.algorithms = Some(Arc::new(table.clone()));
        let m = measure_back_to_back(&tree, Op::Barrier, &cfg).expect("measured");
        rows[4].1.push(m.stats.median);
    }
    for (name, v) in rows {
        summary(name, v);
    }
    let t = Instant::now();
    for _ in 0..1_000_000 {
        std::hint::spin_loop();
    }
    println!(
        "one pause (spin_loop hint): {:.1} ns",
        t.elapsed().as_nanos() as f64 / 1e6
    );
}
