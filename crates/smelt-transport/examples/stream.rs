//! Raw queuepair figures between two pinned threads (CPUs 0 and 1), without any
//! harness: streaming `try_send_word` / `try_recv_word` (ns per word, 1024-slot ring)
//! and ping-pong one-way latency. Min and median of 7 trials.
//!
//! `cargo run --release -p smelt-transport --example stream [-- WORDS]` (default 5·10⁶)

use smelt_transport::{channel, pin_current_thread, queuepair};
use std::time::Instant;

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5_000_000);
    let (mut stream, mut oneway) = (Vec::new(), Vec::new());
    for _ in 0..7 {
        let (mut tx, mut rx) = channel(1024);
        let t = std::thread::spawn(move || {
            let _ = pin_current_thread(smelt_ids::CpuId(1));
            let mut sum = 0u64;
            for _ in 0..n {
                loop {
                    if let Ok(w) = rx.try_recv_word() {
                        sum = sum.wrapping_add(w);
                        break;
                    }
                    std::hint::spin_loop();
                }
            }
            sum
        });
        let _ = pin_current_thread(smelt_ids::CpuId(0));
        let t0 = Instant::now();
        for i in 0..n {
            while tx.try_send_word(i).is_err() {
                std::hint::spin_loop();
            }
        }
        assert_eq!(t.join().expect("receiver"), n * (n - 1) / 2);
        stream.push(t0.elapsed().as_nanos() as f64 / n as f64);

        let (a, b) = queuepair(64);
        let ((mut at, mut ar), (mut bt, mut br)) = (a.split(), b.split());
        let m = n / 20;
        let t = std::thread::spawn(move || {
            let _ = pin_current_thread(smelt_ids::CpuId(1));
            for _ in 0..m {
                let w = loop {
                    if let Ok(w) = br.try_recv_word() {
                        break w;
                    }
                };
                while bt.try_send_word(w).is_err() {}
            }
        });
        let t0 = Instant::now();
        for i in 0..m {
            while at.try_send_word(i).is_err() {}
            while ar.try_recv_word().is_err() {}
        }
        t.join().expect("echo");
        oneway.push(t0.elapsed().as_nanos() as f64 / m as f64 / 2.0);
    }
    for v in [&mut stream, &mut oneway] {
        v.sort_by(f64::total_cmp);
    }
    println!(
        "streaming: min {:.2} ns/word, median {:.2}; one-way: min {:.1} ns, median {:.1}",
        stream[0], stream[3], oneway[0], oneway[3]
    );
}
