//! Timed batches on pinned threads: the measurement loop shared by the probe, and by
//! the floor and the in-process peers of `smelt-peers`.
//!
//! One *batch* is `n` back-to-back operations on every participating thread; its time
//! is from the first thread's start to the last thread's end, divided by `n`. The
//! batch size doubles (this is also the warm-up) until a batch lasts at least
//! [`Budget::batch`]; then [`Budget::runs`] batches are recorded and summarised
//! robustly ([`crate::stats`]). Every wait checks a [`Deadline`]: a stuck operation
//! makes the measurement fail with [`Timeout`] instead of hanging.

use crate::error::ProbeError;
use crate::stats::{summarize, Summary};
use smelt_ids::CpuId;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A point in time after which every wait gives up.
#[derive(Debug, Clone, Copy)]
pub struct Deadline(pub Instant);

impl Deadline {
    /// A deadline `d` from now.
    pub fn after(d: Duration) -> Deadline {
        Deadline(Instant::now() + d)
    }

    /// True once the deadline has passed.
    #[inline]
    pub fn expired(&self) -> bool {
        Instant::now() >= self.0
    }

    /// Spins (then yields) until `cond` holds; `Err(Timeout)` once the deadline passes.
    /// The number of polls separated by a `spin_loop` hint before the first yield is
    /// the calling thread's [`spin_polls`]: in a [`run_team`] worker, smelt's own wait
    /// policy's (the C peers' `peer_spin_limit` is set to the same; see
    /// [`team_spin_polls`]), [`DEFAULT_SPIN_POLLS`] elsewhere.
    pub fn wait_until(&self, mut cond: impl FnMut() -> bool) -> Result<(), Timeout> {
        let limit = spin_polls();
        let mut spins = 0u32;
        while !cond() {
            spins += 1;
            if spins < limit {
                std::hint::spin_loop();
            } else {
                if spins.is_multiple_of(64) && self.expired() {
                    return Err(Timeout);
                }
                std::thread::yield_now();
            }
        }
        Ok(())
    }
}

/// Polls before [`Deadline::wait_until`] yields, outside a [`run_team`] worker.
pub const DEFAULT_SPIN_POLLS: u32 = 128;

thread_local! {
    static SPIN_POLLS: std::cell::Cell<u32> = const { std::cell::Cell::new(DEFAULT_SPIN_POLLS) };
}

/// The calling thread's polls before [`Deadline::wait_until`] yields.
pub fn spin_polls() -> u32 {
    SPIN_POLLS.with(|c| c.get())
}

/// Polls a waiter of a team spins before it yields: smelt's own
/// [`WaitPolicy`](smelt_transport::WaitPolicy) — `DEDICATED.spin_polls` when every
/// thread has a CPU of its own (`pinned`), `OVERSUBSCRIBED.spin_polls` otherwise — so
/// that the Rust peers, the floor and smelt's collectives wait alike. The C peers get
/// the same number (`SMELT_PEER_SPINS`, read by `peer.h`).
pub fn team_spin_polls(pinned: bool) -> u32 {
    if pinned {
        smelt_transport::WaitPolicy::DEDICATED.spin_polls
    } else {
        smelt_transport::WaitPolicy::OVERSUBSCRIBED.spin_polls
    }
}

/// A measurement ran past its deadline (an operation never completed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeout;

impl std::fmt::Display for Timeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("timed out")
    }
}

impl std::error::Error for Timeout {}

/// How long to measure.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Minimum duration of one timed batch (calibration target).
    pub batch: Duration,
    /// Number of timed batches.
    pub runs: usize,
    /// Give up (with [`Timeout`]) after this long in total.
    pub timeout: Duration,
}

impl Budget {
    /// A quick budget: 2 ms batches, 7 runs, 10 s timeout.
    pub fn quick() -> Budget {
        Budget {
            batch: Duration::from_millis(2),
            runs: 7,
            timeout: Duration::from_secs(10),
        }
    }

    /// A thorough budget: 20 ms batches, 15 runs, 60 s timeout.
    pub fn full() -> Budget {
        Budget {
            batch: Duration::from_millis(20),
            runs: 15,
            timeout: Duration::from_secs(60),
        }
    }
}

/// A short budget for the tests of this crate and of `smelt-peers`.
pub fn test_budget() -> Budget {
    Budget {
        batch: Duration::from_micros(300),
        runs: 3,
        timeout: Duration::from_secs(20),
    }
}

/// The work of one thread in a batch: run `n` operations, checking the deadline now
/// and then. Returns `Err(Timeout)` if a wait inside gave up.
pub type Worker<'a> = Box<dyn FnMut(u64, &Deadline) -> Result<(), Timeout> + Send + 'a>;

struct Ctl {
    seq: AtomicU64,
    n: AtomicU64,
    stop: AtomicBool,
    failed: AtomicBool,
    done: AtomicU64,
    /// Workers that reached the start line of the current batch.
    ready: AtomicU64,
    start: Vec<AtomicU64>,
    end: Vec<AtomicU64>,
}

/// Where to run thread `i` of `threads`: `cpus[i % len]`, pinned only when there are
/// no more threads than CPUs (otherwise the scheduler places them).
pub fn placement(cpus: &[CpuId], threads: usize, i: usize) -> Option<CpuId> {
    if cpus.is_empty() || threads > cpus.len() {
        None
    } else {
        Some(cpus[i % cpus.len()])
    }
}

/// Runs one worker per thread (thread `i` pinned by [`placement`]) in calibrated
/// batches and returns the summary of ns per operation. Fails on [`Timeout`]
/// ([`ProbeError::Failed`], "timed out after ...") or when a thread cannot be pinned
/// ([`ProbeError::Pin`]).
pub fn run_team(
    cpus: &[CpuId],
    budget: &Budget,
    workers: Vec<Worker<'_>>,
) -> Result<Summary, ProbeError> {
    let threads = workers.len();
    if threads == 0 {
        return Err(ProbeError::Failed("no thread to run".into()));
    }
    let deadline = Deadline::after(budget.timeout);
    let epoch = Instant::now();
    let ctl = Ctl {
        seq: AtomicU64::new(0),
        n: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        failed: AtomicBool::new(false),
        done: AtomicU64::new(0),
        ready: AtomicU64::new(0),
        start: (0..threads).map(|_| AtomicU64::new(0)).collect(),
        end: (0..threads).map(|_| AtomicU64::new(0)).collect(),
    };
    let now_ns = || epoch.elapsed().as_nanos() as u64;
    // The calling thread sleeps while a batch runs and is woken by the worker that
    // finishes it last: no periodic wake-up of a third thread that would take a CPU
    // from a measuring one (the C peers' controlling thread is their thread 0).
    let caller = std::thread::current();
    let finished = |ctl: &Ctl| {
        if ctl.done.fetch_add(1, Ordering::AcqRel) + 1 == threads as u64 {
            caller.unpark();
        }
    };
    std::thread::scope(|s| {
        let mut handles = Vec::new();
        for (i, mut w) in workers.into_iter().enumerate() {
            let ctl = &ctl;
            let cpu = placement(cpus, threads, i);
            handles.push(s.spawn(move || -> Result<(), ProbeError> {
                if let Some(c) = cpu {
                    crate::affinity::pin_current_thread(c)?;
                }
                SPIN_POLLS.with(|c| c.set(team_spin_polls(cpu.is_some())));
                let mut seen = 0;
                loop {
                    let r = deadline.wait_until(|| {
                        ctl.seq.load(Ordering::Acquire) != seen || ctl.stop.load(Ordering::Acquire)
                    });
                    if r.is_err() || ctl.stop.load(Ordering::Acquire) {
                        return Ok(());
                    }
                    seen = ctl.seq.load(Ordering::Acquire);
                    let n = ctl.n.load(Ordering::Acquire);
                    // Start line: nobody starts before every worker is awake, so a
                    // late wake-up is not counted as operation time.
                    ctl.ready.fetch_add(1, Ordering::AcqRel);
                    if deadline
                        .wait_until(|| ctl.ready.load(Ordering::Acquire) >= threads as u64)
                        .is_err()
                    {
                        ctl.failed.store(true, Ordering::Release);
                        finished(ctl);
                        continue;
                    }
                    ctl.start[i].store(now_ns(), Ordering::Relaxed);
                    if w(n, &deadline).is_err() {
                        ctl.failed.store(true, Ordering::Release);
                    }
                    ctl.end[i].store(now_ns(), Ordering::Relaxed);
                    finished(ctl);
                }
            }));
        }
        // One batch of n operations; ns per operation.
        let batch = |n: u64| -> Result<f64, String> {
            ctl.done.store(0, Ordering::Release);
            ctl.ready.store(0, Ordering::Release);
            ctl.n.store(n, Ordering::Release);
            ctl.seq.fetch_add(1, Ordering::AcqRel);
            while ctl.done.load(Ordering::Acquire) < threads as u64 {
                if deadline.expired() {
                    return Err(format!(
                        "timed out after {:.1} s",
                        budget.timeout.as_secs_f64()
                    ));
                }
                // Woken by the last worker (spurious returns re-check); the timeout
                // only bounds noticing the deadline.
                std::thread::park_timeout(Duration::from_millis(100));
            }
            if ctl.failed.load(Ordering::Acquire) {
                return Err(format!(
                    "timed out after {:.1} s",
                    budget.timeout.as_secs_f64()
                ));
            }
            let s = ctl
                .start
                .iter()
                .map(|a| a.load(Ordering::Relaxed))
                .min()
                .unwrap_or(0);
            let e = ctl
                .end
                .iter()
                .map(|a| a.load(Ordering::Relaxed))
                .max()
                .unwrap_or(0);
            Ok(e.saturating_sub(s) as f64 / n as f64)
        };
        let result = (|| {
            // Calibration (also the warm-up): double n until a batch lasts the target.
            // A preemption can make a tiny batch look long, so each size is tried
            // twice (the faster counts), and n is finally raised towards what the
            // fastest ns/op seen says the target needs (at most 4x).
            let target = budget.batch.as_nanos() as f64;
            let mut n = 1u64;
            let mut best = f64::INFINITY;
            loop {
                let per = batch(n)?.min(batch(n)?);
                best = best.min(per);
                if per * n as f64 >= target || n >= 1 << 40 {
                    break;
                }
                n *= 2;
            }
            if best > 0.0 && best.is_finite() {
                let want = (target / best).ceil() as u64;
                n = want.clamp(n, n.saturating_mul(4));
            }
            let mut v = Vec::with_capacity(budget.runs);
            for _ in 0..budget.runs.max(1) {
                v.push(batch(n)?);
            }
            summarize(&v).ok_or_else(|| "no valid sample".to_string())
        })();
        ctl.stop.store(true, Ordering::Release);
        let mut pin_err = None;
        for h in handles {
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => pin_err = Some(e),
                Err(_) => pin_err = Some(ProbeError::Failed("a measuring thread panicked".into())),
            }
        }
        match pin_err {
            Some(e) => Err(e),
            None => result.map_err(ProbeError::Failed),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn tiny() -> Budget {
        Budget {
            batch: Duration::from_micros(200),
            runs: 3,
            timeout: Duration::from_secs(20),
        }
    }

    #[test]
    fn counts_every_operation() {
        let count = AtomicUsize::new(0);
        let c = &count;
        let w: Vec<Worker> = (0..3)
            .map(|_| -> Worker {
                Box::new(move |n, _| {
                    for _ in 0..n {
                        c.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        let s = run_team(&[], &tiny(), w).unwrap();
        assert!(s.median > 0.0);
        assert_eq!(count.load(Ordering::Relaxed) % 3, 0);
        assert!(count.load(Ordering::Relaxed) >= 3 * 4);
    }

    #[test]
    fn a_stuck_worker_times_out() {
        let b = Budget {
            timeout: Duration::from_millis(300),
            ..tiny()
        };
        let w: Vec<Worker> = vec![Box::new(|_, d| d.wait_until(|| false))];
        let e = run_team(&[], &b, w).unwrap_err();
        assert!(
            matches!(&e, ProbeError::Failed(w) if w.contains("timed out")),
            "{e}"
        );
    }

    #[test]
    fn placement_pins_only_without_oversubscription() {
        let cpus = CpuId::list([4, 5]);
        assert_eq!(placement(&cpus, 2, 1), Some(CpuId(5)));
        assert_eq!(placement(&cpus, 3, 1), None);
        assert_eq!(placement(&[], 1, 0), None);
    }
}
