//! The physical floor: one cache line bounced between two pinned threads with plain
//! atomics. Every message-passing figure is reported as a ratio to this floor taken in
//! the same run, because core-to-core latency on a virtual machine drifts with the
//! host's placement of virtual CPUs.

use crate::PeerError;
use smelt_probe::harness::{run_team, Budget, Worker};
use smelt_probe::stats::{halve, Summary};
use smelt_probe::CpuId;
use std::sync::atomic::{AtomicU64, Ordering};

#[repr(align(128))]
struct Line(AtomicU64);

/// One-way cache-line latency between OS CPUs `a` and `b` in ns (round trip / 2).
/// With a single CPU (`a == b`) both threads share it and the figure measures a
/// thread switch rather than a cache-line transfer.
pub fn pingpong(a: CpuId, b: CpuId, budget: &Budget) -> Result<Summary, PeerError> {
    let ping = Line(AtomicU64::new(0));
    let pong = Line(AtomicU64::new(0));
    let (pi, po) = (&ping, &pong);
    let w: Vec<Worker> = vec![
        Box::new(move |n, d| {
            let base = pi.0.load(Ordering::Relaxed);
            for k in 1..=n {
                pi.0.store(base + k, Ordering::Release);
                d.wait_until(|| po.0.load(Ordering::Acquire) == base + k)?;
            }
            Ok(())
        }),
        Box::new(move |n, d| {
            let base = po.0.load(Ordering::Relaxed);
            for k in 1..=n {
                d.wait_until(|| pi.0.load(Ordering::Acquire) == base + k)?;
                po.0.store(base + k, Ordering::Release);
            }
            Ok(())
        }),
    ];
    let s = run_team(&smelt_probe::link::pair(a, b), budget, w)?;
    Ok(halve(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_is_positive_on_the_first_cpus() {
        let (a, c) = smelt_probe::link::test_pair();
        let s = pingpong(a, c, &smelt_probe::harness::test_budget()).unwrap();
        assert!(s.median > 0.0 && s.median.is_finite());
        assert!(s.p10 <= s.p90);
    }
}
