//! smelt's own transport measured like the peers: queuepair one-way latency
//! (ping-pong, round trip / 2) and streaming ns per word message, with the same
//! harness and loop structure as the `rtrb` and raw cache-line figures so that their
//! ratios compare implementations, not harnesses.

use crate::figure::{Metric, PeerResult};
use crate::harness::{Budget, Deadline, Timeout};
use crate::link::{self, RecvWord, SendWord};
use smelt_ids::CpuId;
use smelt_transport::{Consumer, Producer, TransportError};

/// Slots per channel (the same capacity as the rtrb and crossbeam peers use, in messages).
pub const SLOTS: usize = 1024;

impl SendWord for Producer {
    fn send_until(&mut self, w: u64, d: &Deadline) -> Result<(), Timeout> {
        let mut r = Ok(());
        d.wait_until(|| {
            r = self.try_send_word(w);
            !matches!(r, Err(TransportError::Full))
        })?;
        r.map_err(|_| Timeout)
    }
}

impl RecvWord for Consumer {
    fn recv_until(&mut self, d: &Deadline) -> Result<u64, Timeout> {
        let mut r = Err(TransportError::Empty);
        d.wait_until(|| {
            r = self.try_recv_word();
            !matches!(r, Err(TransportError::Empty))
        })?;
        r.map_err(|_| Timeout)
    }
}

const NAME: &str = "smelt queuepair";

/// Queuepair one-way latency between OS CPUs `a` and `b`, ns.
pub fn qp_latency(a: CpuId, b: CpuId, budget: &Budget) -> PeerResult {
    let (x, y) = smelt_transport::queuepair(SLOTS);
    let (xt, xr) = x.split();
    let (yt, yr) = y.split();
    let r = link::latency(a, b, budget, (xt, yr), (yt, xr));
    PeerResult::measured(NAME, Metric::Latency, 2, r)
}

/// Queuepair streaming from `a` to `b`: ns per word message.
pub fn qp_throughput(a: CpuId, b: CpuId, budget: &Budget) -> PeerResult {
    let r = link::throughput(a, b, budget, smelt_transport::channel(SLOTS));
    PeerResult::measured(NAME, Metric::Throughput, 2, r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queuepair_figures_are_positive() {
        let (a, b) = crate::link::test_pair();
        let budget = crate::harness::test_budget();
        for r in [qp_latency(a, b, &budget), qp_throughput(a, b, &budget)] {
            assert!(r.median().is_some_and(|m| m > 0.0), "{r:?}");
        }
    }
}
