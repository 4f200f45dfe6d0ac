//! Two-party barriers between two pinned threads (CPUs 0 and 1), interleaved trials:
//! C-style episode flags (one line each way, what the C dissemination barrier peer
//! does), `Link::pair_barrier` on a queuepair (the mark lines), and an empty message
//! each way (what the two-member barrier did before). Median and min ns per barrier.
//!
//! `cargo run --release -p smelt-transport --example pair_barrier [-- BARRIERS [TRIALS]]`
//! (default 3·10⁵ barriers, 21 trials)

use smelt_ids::CpuId;
use smelt_transport::{pin_current_thread, queuepair, Link, QueuePairEnd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

#[repr(align(128))]
struct Flag(AtomicU64);

/// ns per barrier of `n` rounds of `step(end, round)` on both threads.
fn time_pair(n: u64, step: impl Fn(&mut QueuePairEnd, u64) + Send + Copy + 'static) -> f64 {
    let (mut a, mut b) = queuepair(64);
    let h = std::thread::spawn(move || {
        let _ = pin_current_thread(CpuId(1));
        (1..=n).for_each(|e| step(&mut b, e));
    });
    let t = Instant::now();
    (1..=n).for_each(|e| step(&mut a, e));
    let ns = t.elapsed().as_nanos() as f64 / n as f64;
    h.join().expect("the peer thread");
    ns
}

fn time_flags(n: u64) -> f64 {
    let flags = Arc::new([Flag(AtomicU64::new(0)), Flag(AtomicU64::new(0))]);
    let barrier = |f: &[Flag; 2], me: usize, e: u64| {
        f[1 - me].0.store(e, Ordering::Release);
        while f[me].0.load(Ordering::Acquire) < e {
            std::hint::spin_loop();
        }
    };
    let f2 = flags.clone();
    let h = std::thread::spawn(move || {
        let _ = pin_current_thread(CpuId(1));
        (1..=n).for_each(|e| barrier(&f2, 1, e));
    });
    let t = Instant::now();
    (1..=n).for_each(|e| barrier(&flags, 0, e));
    let ns = t.elapsed().as_nanos() as f64 / n as f64;
    h.join().expect("the peer thread");
    ns
}

fn main() {
    let mut args = std::env::args().skip(1).map(|s| s.parse().ok());
    let n: u64 = args.next().flatten().unwrap_or(300_000);
    let trials = args.next().flatten().unwrap_or(21) as usize;
    let _ = pin_current_thread(CpuId(0));
    let mut rows: [(&str, Vec<f64>); 3] = [
        ("flags (C peer's design)", vec![]),
        ("pair_barrier (marks)", vec![]),
        ("empty message each way", vec![]),
    ];
    for _ in 0..trials {
        rows[0].1.push(time_flags(n));
        rows[1].1.push(time_pair(n, |l, e| {
            assert_eq!(l.pair_barrier(e, None).expect("a barrier"), None);
        }));
        rows[2].1.push(time_pair(n, |l, e| {
            Link::send_empty(l, e, None).expect("a send");
            let (tag, _) = Link::recv(l, &mut [], None).expect("a receive");
            assert_eq!(tag, e);
        }));
    }
    for (name, mut v) in rows {
        v.sort_by(f64::total_cmp);
        println!(
            "{name:<26} median {:7.1} ns  min {:7.1} ns",
            v[v.len() / 2],
            v[0]
        );
    }
}
