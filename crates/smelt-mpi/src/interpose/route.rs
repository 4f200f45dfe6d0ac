//! Whether smelt's path or MPI's runs a call, decided per communicator, call and size
//! class by measuring the communicator's own first calls (`SMELT_MPI_MEASURE`).
//!
//! The cut-offs ([`super::config::DEFAULT_MAX_BYTES`]) were measured on one machine;
//! on another, or on a communicator whose ranks lie differently (nodes, more ranks than
//! CPUs), smelt's path can lose where they say it wins. So the first calls of each
//! (call, size class) that smelt could take go in blocks of [`BLOCK`] calls, smelt's
//! path and MPI's block by block, `trials` blocks each. A block's sample is the mean
//! time of its calls but the first [`UNTIMED`] (from entering the call to leaving it:
//! what the program does between calls is not counted; the first call is left out
//! because it inherits the other path's skew between the ranks). Short blocks keep
//! the trials short (80 calls a class by default, half through MPI). Blocks of 32 (8
//! untimed) were tried: they measured a back-to-back 128-byte reduction in its steady
//! state (its ring full) and routed it to MPI, where blocks of 4 keep smelt at 1.8x
//! MPI's time; but `latency.c`'s 2000 calls a size then ran a third of their calls as
//! trials, half of them through MPI: 16-32 byte bcast and reduce 1.25-1.3x slower in
//! `mpi_ab.sh`. At the
//! next such call every rank sends its two medians to every other (one `MPI_Allgather`
//! of two words through PMPI), and all pick smelt unless its medians sum to more than
//! [`MARGIN`] times MPI's (the cut-offs' choice stands unless the measurement clearly
//! says otherwise). From there on that class goes the picked way without timing: one
//! table lookup a call.
//!
//! Every rank makes the same collective calls on a communicator in the same order with
//! matching sizes (MPI's rule), so every rank counts the same calls per class, reaches
//! the decision at the same call, and gets the same sums: the decision is the same on
//! every rank. A block of smelt's path during which a tree for a new root was made is
//! not kept (the making is a one-off cost, not the path's), which changes only the
//! samples, never when the decision is made.

use super::ffi::{MpiErr, P};
use super::stats::{self, Call, CALLS};
use mpi_sys::MPI_Comm;
use std::time::Instant;

/// Calls per trial block (the first [`UNTIMED`] not timed).
pub const BLOCK: usize = 4;
/// The calls at the start of a block that are not timed: they inherit the other
/// path's state (the skew between the ranks).
pub const UNTIMED: usize = 1;
/// Smelt keeps a class unless its medians sum to more than this times MPI's.
const MARGIN: f64 = 1.05;

/// Size classes: 0 bytes, then `[2^(c-1), 2^c)` for class `c`; the last holds the rest.
const CLASSES: usize = 34;

/// The size class of `bytes`.
fn class(bytes: usize) -> usize {
    ((usize::BITS - bytes.leading_zeros()) as usize).min(CLASSES - 1)
}

/// The bytes class `c` starts at and ends before (for the summary).
fn class_range(c: usize) -> (usize, usize) {
    match c {
        0 => (0, 1),
        _ => (1 << (c - 1), 1 << c),
    }
}

/// Where a class stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Cell {
    /// Trials running: calls made so far, the samples (ns a call) of each path, the
    /// running block's time so far (ns), and whether the block is not to be kept.
    Open {
        calls: usize,
        smelt: Vec<u64>,
        mpi: Vec<u64>,
        acc: u128,
        spoilt: bool,
    },
    Smelt,
    Mpi,
}

/// Which path runs a call, and whether it is a timed trial.
#[derive(Debug)]
pub enum Go {
    Smelt(Option<Trial>),
    Mpi(Option<Trial>),
}

/// A call of a trial block.
#[derive(Debug)]
pub struct Trial {
    cell: usize,
    smelt: bool,
    /// Its place in the block.
    pos: usize,
    /// When it started (not the block's first call).
    start: Option<Instant>,
}

/// A communicator's decisions.
#[derive(Debug)]
pub struct Routes {
    /// Trial calls per path; 0: never measures (smelt takes whatever the cut-offs let it).
    trials: usize,
    comm: MPI_Comm,
    ranks: usize,
    /// By `call × CLASSES + class`: [`OPEN`], [`SMELT`] or [`MPI`] (the fast path's
    /// one load a call).
    way: Box<[u8; CALLS * CLASSES]>,
    /// By `call × CLASSES + class`, while open; `None`: no call of that class yet.
    cells: Vec<Option<Cell>>,
}

/// A class still measuring (or not called yet).
const OPEN: u8 = 0;
/// A class smelt runs.
const SMELT: u8 = 1;
/// A class MPI runs.
const MPI: u8 = 2;

impl Routes {
    /// The routes of `comm` (`ranks` ranks), measuring `trials` calls of each path per
    /// class.
    pub fn new(comm: MPI_Comm, ranks: usize, trials: usize) -> Routes {
        Routes {
            trials,
            comm,
            ranks,
            way: Box::new([if trials == 0 { SMELT } else { OPEN }; CALLS * CLASSES]),
            cells: vec![None; CALLS * CLASSES],
        }
    }

    /// The path of a call of `call` with `bytes` (per rank, or the whole result: what
    /// the call's cut-off compares, the same on every rank). A decision takes one
    /// PMPI allgather on the communicator (hence the error).
    #[inline(always)]
    pub fn pick(&mut self, call: Call, bytes: usize) -> Result<Go, MpiErr> {
        match self.decided(call, bytes) {
            Some(true) => Ok(Go::Smelt(None)),
            Some(false) => Ok(Go::Mpi(None)),
            None => self.trial(call as usize * CLASSES + class(bytes)),
        }
    }

    /// The path the class of `bytes` is decided for: `Some(true)` smelt's (measured,
    /// or never measured), `Some(false)` MPI's, `None` still measuring (as
    /// [`pick`](Routes::pick) would say `Go::Smelt(None)`, `Go::Mpi(None)`, or a trial).
    /// Reads only.
    #[inline(always)]
    pub fn decided(&self, call: Call, bytes: usize) -> Option<bool> {
        match self.way[call as usize * CLASSES + class(bytes)] {
            SMELT => Some(true),
            MPI => Some(false),
            _ => None,
        }
    }

    /// [`pick`](Routes::pick) of a class still measuring.
    #[inline(never)]
    fn trial(&mut self, at: usize) -> Result<Go, MpiErr> {
        let trials = self.trials;
        let cell = self.cells[at].get_or_insert_with(|| Cell::Open {
            calls: 0,
            smelt: Vec::with_capacity(trials),
            mpi: Vec::with_capacity(trials),
            acc: 0,
            spoilt: false,
        });
        let calls = match cell {
            Cell::Smelt => return Ok(Go::Smelt(None)),
            Cell::Mpi => return Ok(Go::Mpi(None)),
            Cell::Open { calls, .. } => calls,
        };
        if *calls >= 2 * trials * BLOCK {
            return self.decide(at);
        }
        // Smelt's block first, then MPI's, alternately.
        let (block, pos) = (*calls / BLOCK, *calls % BLOCK);
        *calls += 1;
        let t = Trial {
            cell: at,
            smelt: block % 2 == 0,
            pos,
            start: (pos >= UNTIMED).then(Instant::now),
        };
        let smelt = t.smelt;
        Ok(if smelt {
            Go::Smelt(Some(t))
        } else {
            Go::Mpi(Some(t))
        })
    }

    /// Ends a call of a trial block (`None`: not one); `keep` false: the block's
    /// sample is not kept.
    #[inline]
    pub fn done(&mut self, trial: Option<Trial>, keep: bool) {
        let Some(t) = trial else { return };
        let Some(Cell::Open {
            smelt,
            mpi,
            acc,
            spoilt,
            ..
        }) = &mut self.cells[t.cell]
        else {
            return;
        };
        let Some(start) = t.start else {
            if t.pos == 0 {
                *acc = 0;
                *spoilt = false;
            }
            return;
        };
        *acc += start.elapsed().as_nanos();
        *spoilt |= !keep;
        if t.pos + 1 == BLOCK && !*spoilt {
            let ns = *acc / (BLOCK - UNTIMED) as u128;
            if t.smelt { smelt } else { mpi }.push(ns.min(u64::MAX as u128) as u64);
        }
    }

    /// Every rank's medians summed; the class's path from now on (and this call's).
    #[cold]
    fn decide(&mut self, at: usize) -> Result<Go, MpiErr> {
        let Some(Cell::Open { smelt, mpi, .. }) = &self.cells[at] else {
            unreachable!("decided only while open")
        };
        let mine = [median(smelt), median(mpi)];
        let all = smelt_mesh::mpi::allgather_words::<P>(self.comm, &mine, None)?;
        let (s, m, by_smelt) = choose(&all);
        self.cells[at] = Some(if by_smelt { Cell::Smelt } else { Cell::Mpi });
        self.way[at] = if by_smelt { SMELT } else { MPI };
        let call = Call::ALL[at / CLASSES];
        let (lo, hi) = class_range(at % CLASSES);
        let per = |t: u128| t as f64 / self.ranks.max(1) as f64 / 1e3;
        stats::decided(format!(
            "{} of {lo}-{} B on a communicator of {} ranks: smelt {:.3} µs, MPI {:.3} µs a call (median of {} blocks of {BLOCK} calls each, mean over ranks): {}",
            call.name(),
            hi - 1,
            self.ranks,
            per(s),
            per(m),
            self.trials,
            if by_smelt { "smelt" } else { "MPI" }
        ));
        Ok(if by_smelt {
            Go::Smelt(None)
        } else {
            Go::Mpi(None)
        })
    }
}

/// From every rank's two medians (smelt's, MPI's; the ranks' pairs back to back):
/// the two sums, and whether smelt keeps the class (unless it is slower by more than
/// [`MARGIN`]).
fn choose(all: &[u64]) -> (u128, u128, bool) {
    let sum = |k: usize| -> u128 { all.iter().skip(k).step_by(2).map(|&v| v as u128).sum() };
    let (s, m) = (sum(0), sum(1));
    (s, m, s as f64 <= m as f64 * MARGIN)
}

/// The median of `v` (the lower of the middle two), or `u32::MAX` ns where there is
/// none (every trial of the path was dropped): the other path wins.
fn median(v: &[u64]) -> u64 {
    if v.is_empty() {
        return u32::MAX as u64;
    }
    let mut s = v.to_vec();
    s.sort_unstable();
    s[(s.len() - 1) / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_split_at_powers_of_two() {
        assert_eq!(class(0), 0);
        assert_eq!(class(1), 1);
        assert_eq!(class(7), 3);
        assert_eq!(class(8), 4);
        assert_eq!(class(usize::MAX), CLASSES - 1);
        for c in 1..20 {
            let (lo, hi) = class_range(c);
            assert_eq!(class(lo), c);
            assert_eq!(class(hi - 1), c);
            assert_eq!(class(hi), c + 1);
        }
    }

    #[test]
    fn smelt_keeps_a_class_unless_clearly_slower() {
        // Two ranks: (smelt, MPI) each.
        assert_eq!(choose(&[100, 200, 120, 180]), (220, 380, true));
        assert!(choose(&[104, 100, 104, 100]).2, "within the margin");
        assert!(!choose(&[130, 100, 120, 100]).2);
        // A path with no sample (u32::MAX) loses.
        assert!(!choose(&[u32::MAX as u64, 100, 90, 100]).2);
        assert!(choose(&[90, u32::MAX as u64]).2);
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[]), u32::MAX as u64);
        assert_eq!(median(&[5]), 5);
        assert_eq!(median(&[9, 1, 5]), 5);
        assert_eq!(median(&[9, 1, 5, 7]), 5);
    }

    /// The path of each of `n` calls of `call` with `bytes`, each ended with `keep`.
    fn ways(r: &mut Routes, call: Call, bytes: usize, n: usize, keep: bool) -> String {
        (0..n)
            .map(|_| match r.pick(call, bytes).unwrap() {
                Go::Smelt(t) => {
                    assert!(t.is_some());
                    r.done(t, keep);
                    's'
                }
                Go::Mpi(t) => {
                    assert!(t.is_some());
                    r.done(t, keep);
                    'm'
                }
            })
            .collect()
    }

    fn open(r: &Routes, call: Call, bytes: usize) -> (usize, usize, usize) {
        match &r.cells[call as usize * CLASSES + class(bytes)] {
            Some(Cell::Open {
                calls, smelt, mpi, ..
            }) => (*calls, smelt.len(), mpi.len()),
            other => panic!("not open: {other:?}"),
        }
    }

    #[test]
    fn trials_go_in_blocks_alternately() {
        let mut r = Routes::new(super::super::ffi::comm_null(), 2, 3);
        let want = "s".repeat(BLOCK) + &"m".repeat(BLOCK);
        assert_eq!(ways(&mut r, Call::Bcast, 8, 2 * BLOCK, true), want);
        assert_eq!(open(&r, Call::Bcast, 8), (2 * BLOCK, 1, 1));
        // Another class, and another call, start their own trials.
        assert!(matches!(
            r.pick(Call::Bcast, 4096).unwrap(),
            Go::Smelt(Some(_))
        ));
        assert!(matches!(
            r.pick(Call::Reduce, 8).unwrap(),
            Go::Smelt(Some(_))
        ));
        // A block with one timed call not kept keeps no sample; the calls still count.
        let mut r = Routes::new(super::super::ffi::comm_null(), 2, 3);
        let s = |n: usize| "s".repeat(n);
        assert_eq!(
            ways(&mut r, Call::Barrier, 0, UNTIMED + 1, true),
            s(UNTIMED + 1)
        );
        assert_eq!(ways(&mut r, Call::Barrier, 0, 1, false), "s");
        let rest = BLOCK - UNTIMED - 2;
        assert_eq!(ways(&mut r, Call::Barrier, 0, rest, true), s(rest));
        assert_eq!(open(&r, Call::Barrier, 0), (BLOCK, 0, 0));
        // The next block of smelt's is kept again.
        ways(&mut r, Call::Barrier, 0, 2 * BLOCK, true);
        assert_eq!(open(&r, Call::Barrier, 0), (3 * BLOCK, 1, 1));
        // A call not kept among the untimed ones spoils nothing (its cost is not in
        // the sample).
        let mut r = Routes::new(super::super::ffi::comm_null(), 2, 3);
        assert_eq!(ways(&mut r, Call::Barrier, 0, 1, false), "s");
        assert_eq!(
            ways(&mut r, Call::Barrier, 0, BLOCK - 1, true),
            s(BLOCK - 1)
        );
        assert_eq!(open(&r, Call::Barrier, 0), (BLOCK, 1, 0));
        let mut off = Routes::new(super::super::ffi::comm_null(), 2, 0);
        assert!(matches!(off.pick(Call::Bcast, 8).unwrap(), Go::Smelt(None)));
    }
}
