//! The two loops every channel is measured with, whatever the channel: a ping-pong
//! over two one-way links (one-way latency = round trip / 2) and a stream over one
//! link (ns per message). smelt's queuepair and the Rust channel peers plug their
//! send and receive into [`SendWord`] / [`RecvWord`], so their figures differ by the
//! channel only, never by the harness.

use crate::error::ProbeError;
use crate::harness::{run_team, Budget, Deadline, Timeout, Worker};
use smelt_ids::CpuId;
use smelt_tree::stats::{halve, Summary};

/// The sending end of a one-way link carrying words.
pub trait SendWord: Send {
    /// Sends `w`, waiting (until `d`) while the link is full.
    fn send_until(&mut self, w: u64, d: &Deadline) -> Result<(), Timeout>;
}

/// The receiving end of a one-way link carrying words.
pub trait RecvWord: Send {
    /// Receives the next word, waiting (until `d`) while the link is empty.
    fn recv_until(&mut self, d: &Deadline) -> Result<u64, Timeout>;
}

/// The CPUs of a two-thread team on OS CPUs `a` and `b` (one CPU when they are equal).
pub fn pair(a: CpuId, b: CpuId) -> Vec<CpuId> {
    if a == b {
        vec![a]
    } else {
        vec![a, b]
    }
}

/// One-way latency between `a` and `b`, ns: the thread on `a` sends `k` on `ab_tx`
/// and waits for the answer on `ba_rx`; the thread on `b` answers every word it
/// receives on `ab_rx` with the same word on `ba_tx`. Round trip / 2.
pub fn latency(
    a: CpuId,
    b: CpuId,
    budget: &Budget,
    (mut ab_tx, mut ab_rx): (impl SendWord, impl RecvWord),
    (mut ba_tx, mut ba_rx): (impl SendWord, impl RecvWord),
) -> Result<Summary, ProbeError> {
    let w: Vec<Worker> = vec![
        Box::new(move |n, d| {
            for k in 0..n {
                ab_tx.send_until(k, d)?;
                ba_rx.recv_until(d)?;
            }
            Ok(())
        }),
        Box::new(move |n, d| {
            for _ in 0..n {
                let v = ab_rx.recv_until(d)?;
                ba_tx.send_until(v, d)?;
            }
            Ok(())
        }),
    ];
    run_team(&pair(a, b), budget, w).map(halve)
}

/// Streaming from `a` to `b` over one link: ns per word message.
pub fn throughput(
    a: CpuId,
    b: CpuId,
    budget: &Budget,
    (mut tx, mut rx): (impl SendWord, impl RecvWord),
) -> Result<Summary, ProbeError> {
    let w: Vec<Worker> = vec![
        Box::new(move |n, d| {
            for k in 0..n {
                tx.send_until(k, d)?;
            }
            Ok(())
        }),
        Box::new(move |n, d| {
            for _ in 0..n {
                rx.recv_until(d)?;
            }
            Ok(())
        }),
    ];
    run_team(&pair(a, b), budget, w)
}

/// The first and the last CPU this process may use: where the tests of this crate and
/// of `smelt-peers` measure.
pub fn test_pair() -> (CpuId, CpuId) {
    let cpus = crate::affinity::allowed_cpus();
    (CpuId(cpus[0]), CpuId(*cpus.last().unwrap()))
}
