//! In-process Rust peers: `rtrb` (a wait-free SPSC ring), `crossbeam-channel`
//! (bounded MPMC channel) and `std::sync::Barrier`, measured with the same harness as
//! smelt's own transport.

use super::{Metric, PeerResult, Status};
use crate::floor::halve;
use crate::harness::{run_team, Budget, Deadline, Timeout, Worker};
use std::sync::Barrier;

const CAP: usize = 1024;

fn result(
    name: &str,
    metric: Metric,
    threads: usize,
    r: Result<crate::stats::Summary, String>,
) -> PeerResult {
    PeerResult {
        name: name.into(),
        metric,
        threads,
        status: match r {
            Ok(ns) => Status::Ok { ns },
            Err(reason) => Status::Failed { reason },
        },
    }
}

fn rtrb_pop(c: &mut rtrb::Consumer<u64>, d: &Deadline) -> Result<u64, Timeout> {
    let mut v = None;
    d.wait_until(|| {
        v = c.pop().ok();
        v.is_some()
    })?;
    Ok(v.unwrap_or_default())
}

fn rtrb_push(p: &mut rtrb::Producer<u64>, x: u64, d: &Deadline) -> Result<(), Timeout> {
    d.wait_until(|| p.push(x).is_ok())
}

/// `rtrb` one-way latency (ping-pong over two rings, round trip / 2) between `a` and `b`.
pub fn rtrb_latency(a: u32, b: u32, budget: &Budget) -> PeerResult {
    let (mut p1, mut c1) = rtrb::RingBuffer::<u64>::new(CAP);
    let (mut p2, mut c2) = rtrb::RingBuffer::<u64>::new(CAP);
    let w: Vec<Worker> = vec![
        Box::new(move |n, d| {
            for k in 0..n {
                rtrb_push(&mut p1, k, d)?;
                rtrb_pop(&mut c2, d)?;
            }
            Ok(())
        }),
        Box::new(move |n, d| {
            for _ in 0..n {
                let v = rtrb_pop(&mut c1, d)?;
                rtrb_push(&mut p2, v, d)?;
            }
            Ok(())
        }),
    ];
    result(
        "rtrb",
        Metric::Latency,
        2,
        run_team(&pair(a, b), budget, w).map(halve),
    )
}

/// `rtrb` streaming: ns per 8-byte message from `a` to `b`.
pub fn rtrb_throughput(a: u32, b: u32, budget: &Budget) -> PeerResult {
    let (mut p, mut c) = rtrb::RingBuffer::<u64>::new(CAP);
    let w: Vec<Worker> = vec![
        Box::new(move |n, d| {
            for k in 0..n {
                rtrb_push(&mut p, k, d)?;
            }
            Ok(())
        }),
        Box::new(move |n, d| {
            for _ in 0..n {
                rtrb_pop(&mut c, d)?;
            }
            Ok(())
        }),
    ];
    result(
        "rtrb",
        Metric::Throughput,
        2,
        run_team(&pair(a, b), budget, w),
    )
}

fn cb_recv(r: &crossbeam_channel::Receiver<u64>, d: &Deadline) -> Result<u64, Timeout> {
    let left = d.0.saturating_duration_since(std::time::Instant::now());
    r.recv_timeout(left).map_err(|_| Timeout)
}

fn cb_send(s: &crossbeam_channel::Sender<u64>, x: u64, d: &Deadline) -> Result<(), Timeout> {
    let left = d.0.saturating_duration_since(std::time::Instant::now());
    s.send_timeout(x, left).map_err(|_| Timeout)
}

/// `crossbeam-channel` (bounded, blocking send/recv) one-way latency between `a` and `b`.
pub fn crossbeam_latency(a: u32, b: u32, budget: &Budget) -> PeerResult {
    let (s1, r1) = crossbeam_channel::bounded::<u64>(CAP);
    let (s2, r2) = crossbeam_channel::bounded::<u64>(CAP);
    let w: Vec<Worker> = vec![
        Box::new(move |n, d| {
            for k in 0..n {
                cb_send(&s1, k, d)?;
                cb_recv(&r2, d)?;
            }
            Ok(())
        }),
        Box::new(move |n, d| {
            for _ in 0..n {
                let v = cb_recv(&r1, d)?;
                cb_send(&s2, v, d)?;
            }
            Ok(())
        }),
    ];
    result(
        "crossbeam-channel",
        Metric::Latency,
        2,
        run_team(&pair(a, b), budget, w).map(halve),
    )
}

/// `crossbeam-channel` streaming: ns per 8-byte message from `a` to `b`.
pub fn crossbeam_throughput(a: u32, b: u32, budget: &Budget) -> PeerResult {
    let (s, r) = crossbeam_channel::bounded::<u64>(CAP);
    let w: Vec<Worker> = vec![
        Box::new(move |n, d| {
            for k in 0..n {
                cb_send(&s, k, d)?;
            }
            Ok(())
        }),
        Box::new(move |n, d| {
            for _ in 0..n {
                cb_recv(&r, d)?;
            }
            Ok(())
        }),
    ];
    result(
        "crossbeam-channel",
        Metric::Throughput,
        2,
        run_team(&pair(a, b), budget, w),
    )
}

/// `std::sync::Barrier` with `threads` threads placed on `cpus`.
pub fn std_barrier(cpus: &[u32], threads: usize, budget: &Budget) -> PeerResult {
    let bar = Barrier::new(threads);
    let b = &bar;
    let w: Vec<Worker> = (0..threads)
        .map(|_| -> Worker {
            Box::new(move |n, _| {
                for _ in 0..n {
                    b.wait();
                }
                Ok(())
            })
        })
        .collect();
    result(
        "std::sync::Barrier",
        Metric::Barrier,
        threads,
        run_team(cpus, budget, w),
    )
}

fn pair(a: u32, b: u32) -> Vec<u32> {
    if a == b {
        vec![a]
    } else {
        vec![a, b]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rust_peers_measure() {
        let cpus = crate::affinity::allowed_cpus();
        let (a, b) = (cpus[0], *cpus.last().unwrap());
        let budget = Budget {
            batch: Duration::from_micros(300),
            runs: 3,
            timeout: Duration::from_secs(20),
        };
        for r in [
            rtrb_latency(a, b, &budget),
            rtrb_throughput(a, b, &budget),
            crossbeam_latency(a, b, &budget),
            crossbeam_throughput(a, b, &budget),
            std_barrier(&cpus, 3, &budget),
        ] {
            assert!(r.median().is_some_and(|m| m > 0.0), "{r:?}");
        }
    }
}
