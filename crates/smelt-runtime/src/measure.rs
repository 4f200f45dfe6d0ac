//! Measurement helpers behind `smelt bench`: collectives measured the way the Smelt
//! paper does (§5.1), and collectives measured back-to-back (the way MPI and OpenMP
//! barriers are usually measured). The transport's own figures (queuepair latency and
//! streaming, the cache-line floor) are measured by `smelt_probe`, with the same
//! harness as the peers they are compared with.
//!
//! All times are nanoseconds. Nothing here assumes synchronised clocks: only one
//! thread (the root) reads the clock for a sample.

use crate::{Group, GroupConfig, GroupError, Member, Placement};
use smelt_ids::{Pos, Rank};
use smelt_plan::Tree;
use smelt_transport::{try_channel, Consumer, Producer};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The operations measured: smelt's one vocabulary ([`smelt_plan::Op`]).
pub use smelt_plan::Op;

/// Runs one instance of `op` on `m` (context 0): one word per member (broadcast,
/// reduce and allreduce of a sum, gather and scatter of one word each), the barrier,
/// and two-phase commit (broadcast "prepare", reduce the votes with AND, broadcast
/// the decision). "ab" runs as the broadcast (the paper-style measurement of
/// [`measure`] adds the completion message). In a loop, use a [`Runner`]: it makes
/// the scatter's values once.
pub fn run_once<L: smelt_transport::Link>(op: Op, m: &mut Member<L>) -> Result<(), GroupError> {
    Runner::new(op, m).run(m)
}

/// One operation ready to run back to back on a member: what it sends is made once,
/// outside the timed loop.
pub struct Runner {
    op: Op,
    /// The root's scatter values (one per member); empty elsewhere and for other ops.
    values: Vec<u64>,
}

/// One instance of each word collective as the measurements run it (the same body
/// in [`Runner::run`] and in [`back_to_back_member`]'s monomorphic loops).
#[inline(always)]
fn broadcast_once<L: smelt_transport::Link>(m: &mut Member<L>) -> Result<(), GroupError> {
    m.broadcast_word(0x5eed).map(drop)
}
#[inline(always)]
fn reduce_once<L: smelt_transport::Link>(m: &mut Member<L>) -> Result<(), GroupError> {
    m.reduce(1u64, |a, b| a + b).map(drop)
}
#[inline(always)]
fn allreduce_once<L: smelt_transport::Link>(m: &mut Member<L>) -> Result<(), GroupError> {
    m.allreduce(1u64, |a, b| a + b).map(drop)
}
#[inline(always)]
fn barrier_once<L: smelt_transport::Link>(m: &mut Member<L>) -> Result<(), GroupError> {
    m.barrier()
}

impl Runner {
    /// Prepares `op` on `m`.
    pub fn new<L: smelt_transport::Link>(op: Op, m: &Member<L>) -> Runner {
        let root = Some(m.rank()) == m.root();
        let values = if op == Op::Scatter && root {
            (0..m.size() as u64).collect()
        } else {
            Vec::new()
        };
        Runner { op, values }
    }

    /// Runs one instance (see [`run_once`]).
    pub fn run<L: smelt_transport::Link>(&self, m: &mut Member<L>) -> Result<(), GroupError> {
        match self.op {
            Op::Broadcast | Op::AtomicBroadcast => broadcast_once(m),
            Op::Reduce => reduce_once(m),
            Op::Allreduce => allreduce_once(m),
            Op::Barrier => m.barrier(),
            Op::Gather => m.gather_word(m.rank().index() as u64).map(|_| ()),
            Op::Scatter => {
                let root = !self.values.is_empty();
                m.scatter_word(root.then_some(&self.values[..])).map(|_| ())
            }
            Op::TwoPhaseCommit => {
                m.broadcast_word(1)?;
                let all_yes = m.reduce(true, |a, b| a && b)?;
                m.broadcast_word(all_yes.map_or(0, |v| v as u64))?;
                Ok(())
            }
        }
    }
}

/// Summaries of samples (nanoseconds here): smelt's one statistics type, with the
/// probe's outlier rejection ([`smelt_ids::stats::summarize`]).
pub use smelt_ids::stats::Summary;

/// Summarises `samples` (ns) with [`smelt_ids::stats::summarize`] (outliers farther
/// than 3.5 scaled MADs from the median rejected); all zero for no samples.
pub fn summarize(samples: &[f64]) -> Summary {
    smelt_ids::stats::summarize(samples).unwrap_or_default()
}

/// How much to measure.
#[derive(Debug, Clone)]
pub struct MeasureConfig {
    /// Recorded rounds (paper-style) or runs (back-to-back).
    pub rounds: usize,
    /// Unrecorded rounds/runs first.
    pub warmup: usize,
    /// Back-to-back runs: the number of operations per run is doubled
    /// until one run takes at least this long (at most 2^24 operations).
    pub batch: Duration,
    /// The group's configuration (pinning, timeout, capacity).
    pub group: GroupConfig,
}

impl Default for MeasureConfig {
    fn default() -> Self {
        MeasureConfig {
            rounds: 200,
            warmup: 20,
            batch: Duration::from_millis(20),
            group: GroupConfig::default(),
        }
    }
}

impl MeasureConfig {
    /// A short configuration for smoke tests and `--quick`.
    pub fn quick() -> MeasureConfig {
        MeasureConfig {
            rounds: 30,
            warmup: 5,
            batch: Duration::from_millis(2),
            group: GroupConfig::default(),
        }
    }
}

/// A measurement and where it ran.
#[derive(Debug, Clone)]
pub struct Measurement {
    /// Nanoseconds per operation.
    pub stats: Summary,
    /// Operations per recorded run (back-to-back measurements; 1 for
    /// paper-style rounds).
    pub ops_per_run: usize,
    /// Whether threads were pinned, oversubscription, and why not pinned.
    pub placement: Placement,
}

fn ns(d: Duration) -> f64 {
    d.as_secs_f64() * 1e9
}

/// Measures `op` over `tree` as the Smelt paper does (§5.1): the root starts the
/// operation and, once a chosen leaf has completed it, that leaf sends a completion
/// message to the root on an extra channel; the root's time from start to that message
/// is the sample for that leaf. Every leaf takes its turn; a round's value is the
/// maximum over leaves. Rounds are separated by an untimed barrier.
///
/// With [`GroupConfig::flatten_oversubscribed`] in effect the leaves are those of the
/// flat tree that runs (every member but the root).
///
/// For [`Op::Reduce`] the root itself completes last, so a round is the root's time
/// from release to result (members start contributing when the separating barrier
/// releases them, so this includes the release's propagation).
pub fn measure(tree: &Tree, op: Op, cfg: &MeasureConfig) -> Result<Measurement, GroupError> {
    let group = Group::with_config(std::slice::from_ref(tree), &cfg.group)?;
    let placement = group.placement().clone();
    let abort = group.abort_handle();
    let n = tree.len();
    // One tree: its positions are the group's ranks.
    let rank_of = |p: Pos| Rank(p.index());
    let root = rank_of(tree.root);
    let leaves: Vec<Option<Rank>> = match op {
        Op::Reduce => vec![None],
        _ => {
            // The leaves of the tree that runs: flattened, every member but the root.
            let leaves: Vec<Rank> = if placement.flattened {
                (0..n).map(Rank).collect()
            } else {
                tree.leaves().into_iter().map(rank_of).collect()
            };
            let l: Vec<Option<Rank>> = leaves
                .into_iter()
                .filter(|&l| l != root)
                .map(Some)
                .collect();
            if l.is_empty() {
                vec![None]
            } else {
                l
            }
        }
    };
    let mut done_tx: Vec<Mutex<Option<Producer>>> = (0..n).map(|_| Mutex::new(None)).collect();
    let mut done_rx: Vec<Option<Consumer>> = Vec::new();
    for l in &leaves {
        match l {
            Some(l) => {
                let (tx, rx) = try_channel(4, Some(abort.clone()))?;
                done_tx[*l] = Mutex::new(Some(tx));
                done_rx.push(Some(rx));
            }
            None => done_rx.push(None),
        }
    }
    let done_rx = Mutex::new(Some(done_rx));
    let timeout = cfg.group.link.timeout;
    let total = cfg.warmup + cfg.rounds;
    let out = group.run(|m| -> Result<Vec<f64>, GroupError> {
        let rank = m.rank();
        let mut tx = done_tx[rank]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let mut rxs = if rank == root {
            done_rx
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        let mut samples = Vec::with_capacity(cfg.rounds);
        let runner = Runner::new(op, m);
        for round in 0..total {
            let mut worst = 0f64;
            for (li, leaf) in leaves.iter().enumerate() {
                m.barrier()?;
                let t0 = (rank == root).then(Instant::now);
                runner.run(m)?;
                if let Some(l) = *leaf {
                    if rank == l {
                        if let Some(tx) = tx.as_mut() {
                            tx.send_empty_timeout(timeout)?;
                        }
                    }
                    if rank == root {
                        if let Some(Some(rx)) = rxs.get_mut(li) {
                            rx.recv_word_timeout(timeout)?;
                        }
                    }
                }
                if let Some(t0) = t0 {
                    worst = worst.max(ns(t0.elapsed()));
                }
            }
            if rank == root && round >= cfg.warmup {
                samples.push(worst);
            }
        }
        Ok(samples)
    })?;
    let mut samples = Vec::new();
    for (rank, r) in out.into_iter().enumerate() {
        let s = r?;
        if Rank(rank) == root {
            samples = s;
        }
    }
    Ok(Measurement {
        stats: summarize(&samples),
        ops_per_run: 1,
        placement,
    })
}

/// Measures `op` back-to-back, as MPI and OpenMP benchmarks do: after a barrier every
/// member runs `ops_per_run` operations in a loop (calibrated by doubling until a run
/// takes `cfg.batch`); a run's value is the slowest member's loop time divided by the
/// number of operations. Rooted operations may pipeline, as they do in those
/// benchmarks.
pub fn measure_back_to_back(
    tree: &Tree,
    op: Op,
    cfg: &MeasureConfig,
) -> Result<Measurement, GroupError> {
    measure_back_to_back_with(tree, cfg, |m| back_to_back_member(m, op, cfg))
}

/// The timed loops of [`back_to_back_member_with`], with `$once` (a function's path or
/// a closure's name, called as `$once(m)`) written into them, in a function returning
/// `Result<(Vec<f64>, usize), GroupError>`. The word collectives' loops
/// ([`back_to_back_member`]) name their function here directly: passed to the generic
/// function, `broadcast_once` was called through `FnMut::call_mut` at every operation,
/// not inlined, and its `Result` came back through memory, read across the stores that
/// made it (the store buffer cannot forward that): 32 ns a back-to-back broadcast
/// between two threads against 16 ns for the same loop written out
/// (`examples/back_to_back.rs`).
macro_rules! back_to_back_loops {
    ($m:ident, $cfg:ident, $once:expr) => {{
        let batch = $cfg.batch;
        // Calibrate: the root decides, everyone follows its count.
        let mut iters = 1usize;
        loop {
            $m.barrier()?;
            let t0 = Instant::now();
            for _ in 0..iters {
                $once(&mut *$m)?;
            }
            let el = $m.allreduce(ns(t0.elapsed()), f64::max)?;
            if el >= ns(batch) || iters >= 1 << 24 {
                break;
            }
            iters *= 2;
        }
        let mut samples = Vec::new();
        for run in 0..$cfg.warmup + $cfg.rounds {
            $m.barrier()?;
            let t0 = Instant::now();
            for _ in 0..iters {
                $once(&mut *$m)?;
            }
            let el = $m.allreduce(ns(t0.elapsed()), f64::max)?;
            if run >= $cfg.warmup {
                samples.push(el / iters as f64);
            }
        }
        Ok((samples, iters))
    }};
}

/// One member's part of [`measure_back_to_back`]: calibrates the loop length (the
/// root's count, via the collectives), then returns the per-operation times of every
/// measured run (the slowest member's loop time / operations) and the operations per
/// run. Every member of the group, thread or process, calls it.
pub fn back_to_back_member<L: smelt_transport::Link>(
    m: &mut Member<L>,
    op: Op,
    cfg: &MeasureConfig,
) -> Result<(Vec<f64>, usize), GroupError> {
    // One loop per operation, each calling its collective directly (as a program's
    // loop, and the peers' C loops, do): a loop over `Runner::run`'s match would time
    // the dispatch too, and inlining every collective into one loop body costs the
    // word collectives registers (measured: 3-4 ns a broadcast between two threads).
    match op {
        Op::Broadcast | Op::AtomicBroadcast => back_to_back_loops!(m, cfg, broadcast_once),
        Op::Reduce => back_to_back_loops!(m, cfg, reduce_once),
        Op::Allreduce => back_to_back_loops!(m, cfg, allreduce_once),
        Op::Barrier => back_to_back_loops!(m, cfg, barrier_once),
        _ => {
            let runner = Runner::new(op, m);
            back_to_back_member_with(m, cfg, |m| runner.run(m))
        }
    }
}

/// [`back_to_back_member`] for any operation: `once` runs one instance of it on the
/// member (every member runs the same number, so it must be a collective or a fixed
/// sequence of them).
pub fn back_to_back_member_with<L: smelt_transport::Link>(
    m: &mut Member<L>,
    cfg: &MeasureConfig,
    mut once: impl FnMut(&mut Member<L>) -> Result<(), GroupError>,
) -> Result<(Vec<f64>, usize), GroupError> {
    back_to_back_loops!(m, cfg, once)
}

/// Back-to-back instances of any operation over `tree` with thread members:
/// `member(m)` runs on each member and returns what [`back_to_back_member_with`]
/// returns (set up its buffers, then call it); rank 0's figures are reported.
pub fn measure_back_to_back_with(
    tree: &Tree,
    cfg: &MeasureConfig,
    member: impl Fn(&mut Member) -> Result<(Vec<f64>, usize), GroupError> + Sync,
) -> Result<Measurement, GroupError> {
    let group = Group::with_config(std::slice::from_ref(tree), &cfg.group)?;
    let placement = group.placement().clone();
    let out = group.run(member)?;
    let (samples, iters) = out.into_iter().next().expect("a group has a member")?;
    Ok(Measurement {
        stats: summarize(&samples),
        ops_per_run: iters,
        placement,
    })
}

/// Back-to-back reductions of `doubles` doubles per member (sum) in `mode`: the
/// experiment of seed 001 §3 (loose reductions pipeline, strict ones do not).
pub fn measure_reduce_doubles(
    tree: &Tree,
    doubles: usize,
    mode: crate::SyncMode,
    cfg: &MeasureConfig,
) -> Result<Measurement, GroupError> {
    measure_back_to_back_with(tree, cfg, |m| {
        let mut v = vec![m.rank().index() as f64; doubles];
        back_to_back_member_with(m, cfg, |m| {
            m.with_sync(mode, |m| m.reduce_slice(&mut v, |a, b| a + b).map(|_| ()))
        })
    })
}

/// Back-to-back barriers (ns per barrier); see [`measure_back_to_back`].
pub fn measure_barrier(tree: &Tree, cfg: &MeasureConfig) -> Result<Measurement, GroupError> {
    measure_back_to_back(tree, Op::Barrier, cfg)
}

/// Back-to-back reductions (ns per reduction); see [`measure_back_to_back`].
pub fn measure_reduce(tree: &Tree, cfg: &MeasureConfig) -> Result<Measurement, GroupError> {
    measure_back_to_back(tree, Op::Reduce, cfg)
}
