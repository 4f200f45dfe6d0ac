//! One-way queuepair latency between two threads of one process and between two
//! processes over shared memory, interleaved in one run (half a round trip of words,
//! median of the trials). Cross-process target: at most 1.1x in-process.
//!
//! `cargo run --release -p smelt-transport --example shm_latency [ROUND_TRIPS] [TRIALS]`

use smelt_ids::stats::median;
use smelt_transport::shm::{RingSpec, ShmJob, ShmMember};
use smelt_transport::{pin_current_thread, queuepair, Consumer, Producer};
use std::time::{Duration, Instant};

fn ping(tx: &mut Producer, rx: &mut Consumer, n: u64) -> f64 {
    for i in 0..1000 {
        tx.send_word(i).unwrap();
        rx.recv_word().unwrap();
    }
    let t = Instant::now();
    for i in 0..n {
        tx.send_word(i).unwrap();
        assert_eq!(rx.recv_word().unwrap(), i);
    }
    t.elapsed().as_nanos() as f64 / n as f64 / 2.0
}

fn pong(tx: &mut Producer, rx: &mut Consumer, n: u64) {
    for _ in 0..n + 1000 {
        let w = rx.recv_word().unwrap();
        tx.send_word(w).unwrap();
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        let n: u64 = args[4].parse().unwrap();
        let _ = pin_current_thread(smelt_ids::CpuId(args[5].parse().unwrap()));
        let m = ShmMember::attach(args[2].as_ref(), &args[3], 1).unwrap();
        let (mut rx, mut tx) = (m.consumer(0).unwrap(), m.producer(1).unwrap());
        pong(&mut tx, &mut rx, n);
        return;
    }
    let n: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(200_000);
    let trials: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5);
    let cpus = smelt_transport::allowed_cpus().unwrap_or_default();
    let (c0, c1) = (cpus[0], *cpus.get(1).unwrap_or(&cpus[0]));
    let (mut threads, mut procs) = (Vec::new(), Vec::new());
    for _ in 0..trials {
        // Threads.
        let (mut a, mut b) = queuepair(64);
        let t = std::thread::spawn(move || {
            let _ = pin_current_thread(smelt_ids::CpuId(c1));
            pong(&mut b.tx, &mut b.rx, n);
        });
        let _ = pin_current_thread(smelt_ids::CpuId(c0));
        threads.push(ping(&mut a.tx, &mut a.rx, n));
        t.join().unwrap();
        // Processes.
        let rings = RingSpec::both_ways(0, 1, 64);
        let job = ShmJob::create(2, &rings, b"").unwrap();
        let me = ShmMember::attach(job.path(), &job.key(), 0).unwrap();
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--child",
                &job.path().display().to_string(),
                &job.key(),
                &n.to_string(),
                &c1.to_string(),
            ])
            .spawn()
            .unwrap();
        let (mut tx, mut rx) = (me.producer(0).unwrap(), me.consumer(1).unwrap());
        procs.push(ping(&mut tx, &mut rx, n));
        assert!(child.wait().unwrap().success());
        std::thread::sleep(Duration::from_millis(10));
    }
    let (t, p) = (median(&threads), median(&procs));
    println!(
        "one-way queuepair latency, CPUs {c0} <-> {c1}, {n} round trips x {trials} trials (median)"
    );
    println!("  in-process (threads):       {t:8.1} ns   trials {threads:.1?}");
    println!("  cross-process (shared mem): {p:8.1} ns   trials {procs:.1?}");
    println!(
        "  ratio cross/in:             {:8.3}   (target <= 1.1)",
        p / t
    );
}
