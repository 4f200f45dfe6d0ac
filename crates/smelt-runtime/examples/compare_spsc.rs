//! In-process comparison of the queuepair with the cache-line floor and with `rtrb`
//! (same run, interleaved, so the VM's drifting core-to-core latency affects all
//! alike): one-way latency (RTT/2) and streaming throughput of 8-byte messages.
//!
//! `cargo run --release -p smelt-runtime --example compare_spsc [reps]`

use smelt_runtime::measure::{
    cacheline_pingpong, pingpong_latency, stream_throughput, MeasureConfig, Stats,
};
use std::time::{Duration, Instant};

fn pin(cpu: u32) {
    let _ = smelt_transport::pin_current_thread(cpu);
}

/// The floor of any two-ring design: two arrays of 64 cache lines, one per direction,
/// each line holding just a sequence number (no payload, no flow control); one-way ns.
fn bare_rings_latency(cpus: (u32, u32), iters: u64) -> f64 {
    use std::sync::atomic::{AtomicU64, Ordering::*};
    #[repr(align(64))]
    struct Line(AtomicU64);
    const SLOTS: usize = 64;
    let ab: Vec<Line> = (0..SLOTS).map(|_| Line(AtomicU64::new(0))).collect();
    let ba: Vec<Line> = (0..SLOTS).map(|_| Line(AtomicU64::new(0))).collect();
    let (ab, ba) = (&ab, &ba);
    std::thread::scope(|s| {
        s.spawn(move || {
            pin(cpus.1);
            for i in 1..=iters {
                let k = i as usize % SLOTS;
                while ab[k].0.load(Acquire) != i {
                    std::hint::spin_loop();
                }
                ba[k].0.store(i, Release);
            }
        });
        s.spawn(move || {
            pin(cpus.0);
            let t0 = Instant::now();
            for i in 1..=iters {
                let k = i as usize % SLOTS;
                ab[k].0.store(i, Release);
                while ba[k].0.load(Acquire) != i {
                    std::hint::spin_loop();
                }
            }
            t0.elapsed().as_nanos() as f64 / iters as f64 / 2.0
        })
        .join()
        .unwrap()
    })
}

/// rtrb ping-pong, spinning on try_pop with a pause hint; one-way ns.
fn rtrb_latency(cpus: (u32, u32), iters: u64) -> f64 {
    let (mut p_ab, mut c_ab) = rtrb::RingBuffer::<u64>::new(1024);
    let (mut p_ba, mut c_ba) = rtrb::RingBuffer::<u64>::new(1024);
    std::thread::scope(|s| {
        s.spawn(move || {
            pin(cpus.1);
            for _ in 0..iters {
                let v = loop {
                    match c_ab.pop() {
                        Ok(v) => break v,
                        Err(_) => std::hint::spin_loop(),
                    }
                };
                while p_ba.push(v).is_err() {
                    std::hint::spin_loop();
                }
            }
        });
        // Not on the main thread: its CPU mask must stay whole for the other tests.
        s.spawn(move || {
            pin(cpus.0);
            let t0 = Instant::now();
            for i in 0..iters {
                while p_ab.push(i).is_err() {
                    std::hint::spin_loop();
                }
                while c_ba.pop().is_err() {
                    std::hint::spin_loop();
                }
            }
            t0.elapsed().as_nanos() as f64 / iters as f64 / 2.0
        })
        .join()
        .unwrap()
    })
}

/// rtrb streaming, ns per message.
fn rtrb_throughput(cpus: (u32, u32), msgs: u64) -> f64 {
    let (mut p, mut c) = rtrb::RingBuffer::<u64>::new(1024);
    std::thread::scope(|s| {
        let h = s.spawn(move || {
            pin(cpus.1);
            for i in 0..msgs {
                let v = loop {
                    match c.pop() {
                        Ok(v) => break v,
                        Err(_) => std::hint::spin_loop(),
                    }
                };
                assert_eq!(v, i);
            }
            Instant::now()
        });
        let t0 = s
            .spawn(move || {
                pin(cpus.0);
                let t0 = Instant::now();
                for i in 0..msgs {
                    while p.push(i).is_err() {
                        std::hint::spin_loop();
                    }
                }
                t0
            })
            .join()
            .unwrap();
        let end = h.join().unwrap();
        (end - t0).as_nanos() as f64 / msgs as f64
    })
}

fn main() {
    let reps: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(7);
    let cpus = smelt_transport::allowed_cpus().unwrap();
    let pair = (cpus[0], *cpus.get(1).unwrap_or(&cpus[0]));
    let cfg = MeasureConfig {
        rounds: 3,
        warmup: 1,
        batch: Duration::from_millis(20),
        ..Default::default()
    };
    let (mut lr, mut lrr, mut tr, mut ttr, mut lb) = (vec![], vec![], vec![], vec![], vec![]);
    println!(
        "{:>8} {:>8} {:>8} {:>8} {:>7} {:>7} {:>7} | {:>8} {:>8} {:>7}",
        "floor",
        "2rings",
        "qp_lat",
        "rtrb_lat",
        "qp/fl",
        "qp/2rng",
        "qp/rtrb",
        "qp_ns/m",
        "rtrb_ns/m",
        "qp M/s"
    );
    for _ in 0..reps {
        let f = cacheline_pingpong(pair, &cfg).stats.median_ns;
        let b = bare_rings_latency(pair, 400_000);
        let q = pingpong_latency(pair, &cfg).unwrap().stats.median_ns;
        let r = rtrb_latency(pair, 400_000);
        let qt = stream_throughput(pair, 1024, &cfg).unwrap().stats.median_ns;
        let rt = rtrb_throughput(pair, 4_000_000);
        println!(
            "{f:>8.1} {b:>8.1} {q:>8.1} {r:>8.1} {:>7.2} {:>7.2} {:>7.2} | {qt:>8.2} {rt:>8.2} {:>7.1}",
            q / f,
            q / b,
            q / r,
            1e3 / qt
        );
        lr.push(q / f);
        lb.push(q / b);
        lrr.push(q / r);
        tr.push(qt);
        ttr.push(rt);
    }
    let med = |v: &[f64]| Stats::from_samples(v).median_ns;
    println!(
        "median: qp/floor {:.2}, qp/bare-two-rings {:.2}, qp/rtrb latency {:.2}, qp {:.1} M msg/s, rtrb {:.1} M msg/s",
        med(&lr),
        med(&lb),
        med(&lrr),
        1e3 / med(&tr),
        1e3 / med(&ttr)
    );
}
