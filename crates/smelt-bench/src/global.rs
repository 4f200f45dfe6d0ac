//! Global arrays' workloads (moved here from `smelt-global`, which keeps only its
//! API): the benchmark below, and [`stealing`], the work-stealing task counter.
//!
//! The global-view benchmark inside a node: a `get` of 8 bytes against a smelt
//! queuepair round trip between the same two threads, in one run.
//!
//! Rows (nanoseconds, the median of `samples` samples, each the mean of `rounds`
//! operations):
//! * `queuepair_rtt`: a word sent over a queuepair and echoed back by the peer thread;
//! * `get_8b`: one `get` of one `u64` owned by the peer thread (the element's cache
//!   line was last written by the peer before the loop);
//! * `array_rtt`: a round trip through the array: this thread puts a sequence number
//!   into an element of the peer's block, the peer gets it until it changes and puts
//!   it back into an element of this thread's block (two puts and the gets that wait:
//!   the cache lines move both ways, as a queuepair's do).
//!
//! Ratios: `get_8b / queuepair_rtt` (the target: at most 1.5) and
//! `array_rtt / queuepair_rtt`.
//!
//! Across nodes, `smelt-bench-mpi global bench` (feature `mpi`) measures a `get` of
//! 8 bytes from a rank on another (emulated) node against a plain `MPI_Get` of 8
//! bytes with `MPI_Win_flush` in the same run.

pub mod stealing;

use smelt_global::{threads, GlobalConfig, GlobalError};
use smelt_transport::{queuepair, Backoff};
use std::time::{Duration, Instant};

/// How long to measure.
#[derive(Debug, Clone, Copy)]
pub struct Opts {
    /// Operations per sample.
    pub rounds: usize,
    /// Samples (the median is reported).
    pub samples: usize,
    /// CPUs to pin the two threads to (none: not pinned).
    pub cpus: Option<(u32, u32)>,
}

impl Opts {
    /// A short run (about a second on a quiet machine).
    pub fn quick() -> Opts {
        Opts {
            rounds: 2_000,
            samples: 5,
            cpus: default_cpus(),
        }
    }

    /// The full run.
    pub fn full() -> Opts {
        Opts {
            rounds: 20_000,
            samples: 11,
            cpus: default_cpus(),
        }
    }
}

fn default_cpus() -> Option<(u32, u32)> {
    let cpus = smelt_transport::allowed_cpus().ok()?;
    match cpus.as_slice() {
        [a, b, ..] => Some((*a, *b)),
        _ => None,
    }
}

/// The measured figures (nanoseconds) and ratios.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Report {
    /// Queuepair round trip of a word.
    pub queuepair_rtt_ns: f64,
    /// One get of 8 bytes owned by the peer thread.
    pub get_8b_ns: f64,
    /// A round trip through the array (put, get until seen, put back, get until seen).
    pub array_rtt_ns: f64,
    /// The CPUs the two threads ran on, if pinned.
    pub cpus: Option<(u32, u32)>,
}

impl Report {
    /// get_8b / queuepair_rtt.
    pub fn get_over_queuepair(&self) -> f64 {
        self.get_8b_ns / self.queuepair_rtt_ns
    }

    /// array_rtt / queuepair_rtt.
    pub fn array_rtt_over_queuepair(&self) -> f64 {
        self.array_rtt_ns / self.queuepair_rtt_ns
    }
}

use smelt_ids::stats::median;

const LIMIT: Duration = Duration::from_secs(30);

fn pin(cpu: Option<u32>) {
    if let Some(c) = cpu {
        // Not pinned is still a valid measurement (recorded as the CPUs asked for).
        let _ = smelt_transport::pin_current_thread(smelt_mesh::CpuId(c));
    }
}

/// Waits until `cond` holds, spinning then yielding; an error after [`LIMIT`].
fn spin_until(mut cond: impl FnMut() -> Result<bool, GlobalError>) -> Result<(), GlobalError> {
    let mut b = Backoff::new();
    let start = Instant::now();
    while !cond()? {
        if b.is_completed() {
            if start.elapsed() > LIMIT {
                return Err(GlobalError::Timeout {
                    what: "benchmark peer".into(),
                    after: LIMIT,
                });
            }
            std::thread::yield_now();
        } else {
            b.snooze();
        }
    }
    Ok(())
}

/// Measures the three rows between two threads of this process.
pub fn measure(opts: &Opts) -> Result<Report, GlobalError> {
    let rounds = opts.rounds.max(1);
    let samples = opts.samples.max(1);
    let (cpu_a, cpu_b) = match opts.cpus {
        Some((a, b)) => (Some(a), Some(b)),
        None => (None, None),
    };
    // Queuepair round trips.
    let (mut a, mut b) = queuepair(64);
    let qp = std::thread::scope(|s| -> Result<Vec<f64>, GlobalError> {
        let echo = s.spawn(move || {
            pin(cpu_b);
            while let Ok(w) = b.recv_word() {
                if w == u64::MAX || b.send_word(w).is_err() {
                    break;
                }
            }
        });
        pin(cpu_a);
        let tr = |e: smelt_transport::TransportError| GlobalError::Invalid(e.to_string());
        let mut out = Vec::new();
        for _ in 0..samples {
            let t = Instant::now();
            for i in 0..rounds as u64 {
                a.send_word(i).map_err(tr)?;
                let r = a.recv_word().map_err(tr)?;
                if r != i {
                    return Err(GlobalError::Invalid(format!("echo {r} for {i}")));
                }
            }
            out.push(t.elapsed().as_nanos() as f64 / rounds as f64);
        }
        a.send_word(u64::MAX).map_err(tr)?;
        echo.join()
            .map_err(|_| GlobalError::Invalid("echo thread panicked".into()))?;
        Ok(out)
    })?;
    // Gets and round trips through the array: element 0 in member 0's block, element
    // 64 (another cache line) in member 1's.
    let arrays = threads::<u64>(128, 2, GlobalConfig::default())?;
    let (me, peer) = (&arrays[0], &arrays[1]);
    let (gets, rtts) = std::thread::scope(|s| -> Result<(Vec<f64>, Vec<f64>), GlobalError> {
        let echo = s.spawn(move || -> Result<(), GlobalError> {
            pin(cpu_b);
            peer.put(64, &[7])?;
            peer.put(65, &[1])?; // ready
            let mut last = 0;
            loop {
                let mut seen = 0;
                spin_until(|| {
                    seen = peer.get_one(0)?;
                    Ok(seen != last)
                })?;
                if seen == u64::MAX {
                    return Ok(());
                }
                last = seen;
                peer.put(96, &[seen])?;
            }
        });
        pin(cpu_a);
        spin_until(|| Ok(me.get_one(65)? == 1))?;
        let mut gets = Vec::new();
        let mut sink = 0u64;
        for _ in 0..samples {
            let t = Instant::now();
            for _ in 0..rounds {
                let mut v = [0u64];
                me.get(64, &mut v)?;
                sink = sink.wrapping_add(std::hint::black_box(v[0]));
            }
            gets.push(t.elapsed().as_nanos() as f64 / rounds as f64);
        }
        if sink != 7 * (rounds * samples) as u64 {
            return Err(GlobalError::Invalid("get read a wrong value".into()));
        }
        let mut rtts = Vec::new();
        let mut seq = 0u64;
        for _ in 0..samples {
            let t = Instant::now();
            for _ in 0..rounds {
                seq += 1;
                me.put(0, &[seq])?;
                spin_until(|| Ok(me.get_one(96)? == seq))?;
            }
            rtts.push(t.elapsed().as_nanos() as f64 / rounds as f64);
        }
        me.put(0, &[u64::MAX])?;
        echo.join()
            .map_err(|_| GlobalError::Invalid("array echo thread panicked".into()))??;
        Ok((gets, rtts))
    })?;
    Ok(Report {
        queuepair_rtt_ns: median(&qp),
        get_8b_ns: median(&gets),
        array_rtt_ns: median(&rtts),
        cpus: opts.cpus,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_run_measures_every_row() {
        let r = measure(&Opts {
            rounds: 200,
            samples: 1,
            cpus: None,
        })
        .unwrap();
        for v in [r.queuepair_rtt_ns, r.get_8b_ns, r.array_rtt_ns] {
            assert!(v.is_finite() && v > 0.0, "{r:?}");
        }
        assert!(r.get_over_queuepair() > 0.0);
    }
}
