//! smelt's own transport measured like the peers: queuepair one-way latency
//! (ping-pong, round trip / 2) and streaming ns per word message, with the same
//! harness and loop structure as the `rtrb` and raw cache-line figures so that their
//! ratios compare implementations, not harnesses.

use crate::floor::halve;
use crate::harness::{run_team, Budget, Deadline, Timeout, Worker};
use crate::peers::{Metric, PeerResult, Status};
use smelt_transport::{Consumer, Producer, TransportError};

/// Slots per channel (the same capacity as the rtrb and crossbeam peers use, in messages).
pub const SLOTS: usize = 1024;

fn send(tx: &mut Producer, w: u64, d: &Deadline) -> Result<(), Timeout> {
    let mut r = Ok(());
    d.wait_until(|| {
        r = tx.try_send_word(w);
        !matches!(r, Err(TransportError::Full))
    })?;
    r.map_err(|_| Timeout)
}

fn recv(rx: &mut Consumer, d: &Deadline) -> Result<u64, Timeout> {
    let mut r = Err(TransportError::Empty);
    d.wait_until(|| {
        r = rx.try_recv_word();
        !matches!(r, Err(TransportError::Empty))
    })?;
    r.map_err(|_| Timeout)
}

fn pair(a: u32, b: u32) -> Vec<u32> {
    if a == b {
        vec![a]
    } else {
        vec![a, b]
    }
}

fn result(metric: Metric, r: Result<crate::stats::Summary, String>) -> PeerResult {
    PeerResult {
        name: "smelt queuepair".into(),
        metric,
        threads: 2,
        status: match r {
            Ok(ns) => Status::Ok { ns },
            Err(reason) => Status::Failed { reason },
        },
    }
}

/// Queuepair one-way latency between OS CPUs `a` and `b`, ns.
pub fn qp_latency(a: u32, b: u32, budget: &Budget) -> PeerResult {
    let (x, y) = smelt_transport::queuepair(SLOTS);
    let (mut xt, mut xr) = x.split();
    let (mut yt, mut yr) = y.split();
    let w: Vec<Worker> = vec![
        Box::new(move |n, d| {
            for k in 0..n {
                send(&mut xt, k, d)?;
                recv(&mut xr, d)?;
            }
            Ok(())
        }),
        Box::new(move |n, d| {
            for _ in 0..n {
                let v = recv(&mut yr, d)?;
                send(&mut yt, v, d)?;
            }
            Ok(())
        }),
    ];
    result(Metric::Latency, run_team(&pair(a, b), budget, w).map(halve))
}

/// Queuepair streaming from `a` to `b`: ns per word message.
pub fn qp_throughput(a: u32, b: u32, budget: &Budget) -> PeerResult {
    let (mut tx, mut rx) = smelt_transport::channel(SLOTS);
    let w: Vec<Worker> = vec![
        Box::new(move |n, d| {
            for k in 0..n {
                send(&mut tx, k, d)?;
            }
            Ok(())
        }),
        Box::new(move |n, d| {
            for _ in 0..n {
                recv(&mut rx, d)?;
            }
            Ok(())
        }),
    ];
    result(Metric::Throughput, run_team(&pair(a, b), budget, w))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn queuepair_figures_are_positive() {
        let cpus = crate::affinity::allowed_cpus();
        let (a, b) = (cpus[0], *cpus.last().unwrap());
        let budget = Budget {
            batch: Duration::from_micros(300),
            runs: 3,
            timeout: Duration::from_secs(20),
        };
        for r in [qp_latency(a, b, &budget), qp_throughput(a, b, &budget)] {
            assert!(r.median().is_some_and(|m| m > 0.0), "{r:?}");
        }
    }
}
