//! Latency probe (tuning aid): cache-line floor vs queuepair ping-pong of words and of
//! empty messages, interleaved.
use smelt_runtime::measure::{cacheline_pingpong, MeasureConfig};
use smelt_transport::{pin_current_thread, queuepair};
use std::time::Instant;

fn qp(empty: bool, n: u64) -> f64 {
    let (mut a, mut b) = queuepair(64);
    std::thread::scope(|s| {
        s.spawn(move || {
            let _ = pin_current_thread(1);
            for _ in 0..n {
                let w = b.recv_word().unwrap();
                if empty {
                    b.tx.send_empty().unwrap();
                } else {
                    b.send_word(w).unwrap();
                }
            }
        });
        s.spawn(move || {
            let _ = pin_current_thread(0);
            let t0 = Instant::now();
            for i in 0..n {
                if empty {
                    a.tx.send_empty().unwrap();
                } else {
                    a.send_word(i).unwrap();
                }
                a.recv_word().unwrap();
            }
            t0.elapsed().as_nanos() as f64 / n as f64 / 2.0
        })
        .join()
        .unwrap()
    })
}

fn main() {
    let cfg = MeasureConfig {
        rounds: 3,
        warmup: 1,
        batch: std::time::Duration::from_millis(20),
        ..Default::default()
    };
    for _ in 0..6 {
        let f = cacheline_pingpong((0, 1), &cfg).stats.median_ns;
        let w = qp(false, 300_000);
        let e = qp(true, 300_000);
        println!(
            "floor {f:.1} word {w:.1} empty {e:.1}  ratios {:.2} {:.2}",
            w / f,
            e / f
        );
    }
}
