//! In-process Rust peers: `rtrb` (a wait-free SPSC ring), `crossbeam-channel`
//! (bounded MPMC channel) and `std::sync::Barrier`, measured with the same harness as
//! smelt's own transport.

use crate::{Metric, PeerResult};
use smelt_probe::harness::{run_team, Budget, Deadline, Timeout, Worker};
use smelt_probe::link::{self, RecvWord, SendWord};
use smelt_probe::CpuId;
use std::sync::Barrier;

const CAP: usize = 1024;

// The link traits belong to smelt-probe and the channels to their own crates, so each
// end is wrapped in a local type to plug it into the harness.

/// The sending end of an `rtrb` ring.
struct RtrbTx(rtrb::Producer<u64>);
/// The receiving end of an `rtrb` ring.
struct RtrbRx(rtrb::Consumer<u64>);
/// The sending end of a bounded `crossbeam-channel`.
struct CrossbeamTx(crossbeam_channel::Sender<u64>);
/// The receiving end of a bounded `crossbeam-channel`.
struct CrossbeamRx(crossbeam_channel::Receiver<u64>);

/// An `rtrb` ring of `CAP` words.
fn rtrb_ring() -> (RtrbTx, RtrbRx) {
    let (tx, rx) = rtrb::RingBuffer::<u64>::new(CAP);
    (RtrbTx(tx), RtrbRx(rx))
}

/// A bounded `crossbeam-channel` of `CAP` words.
fn crossbeam_bounded() -> (CrossbeamTx, CrossbeamRx) {
    let (tx, rx) = crossbeam_channel::bounded::<u64>(CAP);
    (CrossbeamTx(tx), CrossbeamRx(rx))
}

impl SendWord for RtrbTx {
    fn send_until(&mut self, w: u64, d: &Deadline) -> Result<(), Timeout> {
        d.wait_until(|| self.0.push(w).is_ok())
    }
}

impl RecvWord for RtrbRx {
    fn recv_until(&mut self, d: &Deadline) -> Result<u64, Timeout> {
        let mut v = None;
        d.wait_until(|| {
            v = self.0.pop().ok();
            v.is_some()
        })?;
        Ok(v.unwrap_or_default())
    }
}

impl SendWord for CrossbeamTx {
    fn send_until(&mut self, w: u64, d: &Deadline) -> Result<(), Timeout> {
        let left = d.0.saturating_duration_since(std::time::Instant::now());
        self.0.send_timeout(w, left).map_err(|_| Timeout)
    }
}

impl RecvWord for CrossbeamRx {
    fn recv_until(&mut self, d: &Deadline) -> Result<u64, Timeout> {
        let left = d.0.saturating_duration_since(std::time::Instant::now());
        self.0.recv_timeout(left).map_err(|_| Timeout)
    }
}

const RTRB: &str = "rtrb";
const CROSSBEAM: &str = "crossbeam-channel";

/// `rtrb` one-way latency (ping-pong over two rings, round trip / 2) between `a` and `b`.
pub fn rtrb_latency(a: CpuId, b: CpuId, budget: &Budget) -> PeerResult {
    let r = link::latency(a, b, budget, rtrb_ring(), rtrb_ring());
    PeerResult::measured(RTRB, Metric::Latency, 2, r)
}

/// `rtrb` streaming: ns per 8-byte message from `a` to `b`.
pub fn rtrb_throughput(a: CpuId, b: CpuId, budget: &Budget) -> PeerResult {
    let r = link::throughput(a, b, budget, rtrb_ring());
    PeerResult::measured(RTRB, Metric::Throughput, 2, r)
}

/// `crossbeam-channel` (bounded, blocking send/recv) one-way latency between `a` and `b`.
pub fn crossbeam_latency(a: CpuId, b: CpuId, budget: &Budget) -> PeerResult {
    let r = link::latency(a, b, budget, crossbeam_bounded(), crossbeam_bounded());
    PeerResult::measured(CROSSBEAM, Metric::Latency, 2, r)
}

/// `crossbeam-channel` streaming: ns per 8-byte message from `a` to `b`.
pub fn crossbeam_throughput(a: CpuId, b: CpuId, budget: &Budget) -> PeerResult {
    let r = link::throughput(a, b, budget, crossbeam_bounded());
    PeerResult::measured(CROSSBEAM, Metric::Throughput, 2, r)
}

/// `std::sync::Barrier` with `threads` threads placed on `cpus`.
pub fn std_barrier(cpus: &[CpuId], threads: usize, budget: &Budget) -> PeerResult {
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
    PeerResult::measured(
        "std::sync::Barrier",
        Metric::Barrier,
        threads,
        run_team(cpus, budget, w),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_peers_measure() {
        let cpus = CpuId::list(smelt_probe::affinity::allowed_cpus());
        let (a, b) = smelt_probe::link::test_pair();
        let budget = smelt_probe::harness::test_budget();
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
