//! What smelt took and what fell back to MPI, and why: counted per process, reported
//! by rank 0 at MPI_Finalize under `SMELT_MPI_VERBOSE=1`.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Writes `smelt-mpi: <line>` and a newline to standard error with one `write(2)`
/// call, so that the lines of ranks sharing a terminal or pipe never interleave
/// within a line (`eprintln!` writes a formatted line in pieces).
pub fn say(line: &str) {
    let mut buf = Vec::with_capacity(line.len() + 12);
    buf.extend_from_slice(b"smelt-mpi: ");
    buf.extend_from_slice(line.as_bytes());
    buf.push(b'\n');
    // Standard error is unbuffered: one write_all of the whole line is one write(2)
    // (a pipe writes up to PIPE_BUF bytes atomically). Nothing to do if it fails.
    let _ = std::io::stderr().lock().write_all(&buf);
}

/// The calls the interposer takes over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Bcast = 0,
    Reduce = 1,
    Allreduce = 2,
    Barrier = 3,
    Gather = 4,
    Scatter = 5,
    Allgather = 6,
    Scan = 7,
    Exscan = 8,
    ReduceScatterBlock = 9,
    Alltoall = 10,
    Ibarrier = 11,
    Ibcast = 12,
    Iallreduce = 13,
    Allgatherv = 14,
    ReduceScatter = 15,
}

pub const CALLS: usize = 16;

impl Call {
    pub const ALL: [Call; CALLS] = [
        Call::Bcast,
        Call::Reduce,
        Call::Allreduce,
        Call::Barrier,
        Call::Gather,
        Call::Scatter,
        Call::Allgather,
        Call::Scan,
        Call::Exscan,
        Call::ReduceScatterBlock,
        Call::Alltoall,
        Call::Ibarrier,
        Call::Ibcast,
        Call::Iallreduce,
        Call::Allgatherv,
        Call::ReduceScatter,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Call::Bcast => "MPI_Bcast",
            Call::Reduce => "MPI_Reduce",
            Call::Allreduce => "MPI_Allreduce",
            Call::Barrier => "MPI_Barrier",
            Call::Gather => "MPI_Gather",
            Call::Scatter => "MPI_Scatter",
            Call::Allgather => "MPI_Allgather",
            Call::Scan => "MPI_Scan",
            Call::Exscan => "MPI_Exscan",
            Call::ReduceScatterBlock => "MPI_Reduce_scatter_block",
            Call::Alltoall => "MPI_Alltoall",
            Call::Ibarrier => "MPI_Ibarrier",
            Call::Ibcast => "MPI_Ibcast",
            Call::Iallreduce => "MPI_Iallreduce",
            Call::Allgatherv => "MPI_Allgatherv",
            Call::ReduceScatter => "MPI_Reduce_scatter",
        }
    }
}

/// Why a call went to MPI instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    // The communicator as a whole.
    Intercomm = 0,
    OneRank,
    OneRankPerNode,
    SetupFailed,
    Warmup,
    // This call.
    TooLarge,
    Derived,
    TypeNotSupported,
    UserOp,
    LocOp,
    OtherOp,
    OpNotForType,
    BadArgs,
    NoTree,
    Concurrent,
    NoGain,
    MpiFaster,
    NonBlockingLarge,
    Measuring,
    MeasuredFaster,
}

const WHYS: usize = Why::MeasuredFaster as usize + 1;
const ALL_WHY: [Why; WHYS] = [
    Why::Intercomm,
    Why::OneRank,
    Why::OneRankPerNode,
    Why::SetupFailed,
    Why::Warmup,
    Why::TooLarge,
    Why::Derived,
    Why::TypeNotSupported,
    Why::UserOp,
    Why::LocOp,
    Why::OtherOp,
    Why::OpNotForType,
    Why::BadArgs,
    Why::NoTree,
    Why::Concurrent,
    Why::NoGain,
    Why::MpiFaster,
    Why::NonBlockingLarge,
    Why::Measuring,
    Why::MeasuredFaster,
];

impl Why {
    pub fn describe(self) -> &'static str {
        match self {
            Why::Intercomm => "intercommunicator",
            Why::OneRank => "communicator of one rank",
            Why::OneRankPerNode => "one rank per node (nothing to share)",
            Why::SetupFailed => "smelt set-up failed",
            Why::Warmup => {
                "a communicator's first calls, before smelt sets it up (SMELT_MPI_SETUP_AFTER)"
            }
            Why::TooLarge => "message larger than the cut-off (SMELT_MPI_MAX_BYTES)",
            Why::Derived => "derived datatype",
            Why::TypeNotSupported => "datatype smelt does not reduce",
            Why::UserOp => "user-defined operation",
            Why::LocOp => "MPI_MAXLOC/MPI_MINLOC",
            Why::OtherOp => "MPI_REPLACE/MPI_NO_OP/MPI_OP_NULL",
            Why::OpNotForType => "operation not defined for the datatype",
            Why::BadArgs => "invalid arguments (left to MPI to report)",
            Why::NoTree => "no tree for this root (the node's limit of trees)",
            Why::Concurrent => {
                "another thread was in a collective on the same communicator (MPI requires them ordered)"
            }
            Why::NoGain => {
                "nodes of 1-2 ranks: the hierarchy adds a step and saves none (SMELT_MPI_FORCE=1 takes them)"
            }
            Why::NonBlockingLarge => {
                "non-blocking call past 4 KiB: MPI's own is faster there (smelt's non-blocking path copies through its rings; docs/mpi.md)"
            }
            Why::Measuring => {
                "a trial call: this communicator times MPI's path against smelt's for the call and size (SMELT_MPI_MEASURE)"
            }
            Why::MeasuredFaster => {
                "MPI measured faster on this communicator for the call and size (SMELT_MPI_MEASURE; the decisions are listed above)"
            }
            Why::MpiFaster => {
                "MPI's own is faster (measured: docs/mpi.md; SMELT_MPI_MAX_BYTES takes it)"
            }
        }
    }
}

static TAKEN: [AtomicU64; CALLS] = [const { AtomicU64::new(0) }; CALLS];
/// Of the calls taken, those the express lane ran (`super::express`).
static EXPRESS: [AtomicU64; CALLS] = [const { AtomicU64::new(0) }; CALLS];
static FELL: [[AtomicU64; WHYS]; CALLS] = [const { [const { AtomicU64::new(0) }; WHYS] }; CALLS];
static NOTES: Mutex<Vec<String>> = Mutex::new(Vec::new());
static DECIDED: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// At most this many decisions are listed (the rest are counted).
const DECIDED_LISTED: usize = 64;
static DECIDED_MORE: AtomicU64 = AtomicU64::new(0);
/// Communicators set up (smelt's trees made or reused), and of those, how many reused
/// a freed communicator's tree.
static SETUPS: AtomicU64 = AtomicU64::new(0);
static REUSED: AtomicU64 = AtomicU64::new(0);

/// Counts a communicator set up; `reused`: its node's tree was a freed communicator's.
pub fn set_up(reused: bool) {
    SETUPS.fetch_add(1, Relaxed);
    if reused {
        REUSED.fetch_add(1, Relaxed);
    }
}

/// Set (once, before any count) when MPI runs with MPI_THREAD_MULTIPLE: counts are
/// then atomic read-modify-writes.
static THREADED: AtomicBool = AtomicBool::new(false);

/// Counts from here on are made by several threads at once.
pub fn threaded() {
    THREADED.store(true, Relaxed);
}

/// Counts one more: below MPI_THREAD_MULTIPLE (calls serialized) a load and a store,
/// not a locked read-modify-write on every call; under it, an atomic add.
#[inline(always)]
fn bump(c: &AtomicU64) {
    if THREADED.load(Relaxed) {
        c.fetch_add(1, Relaxed);
    } else {
        c.store(c.load(Relaxed).wrapping_add(1), Relaxed);
    }
}

#[inline(always)]
pub fn taken(c: Call) {
    bump(&TAKEN[c as usize]);
}

/// Counts a call taken by the express lane (also counted by [`taken`]).
#[inline(always)]
pub fn express(c: Call) {
    bump(&EXPRESS[c as usize]);
}

#[inline]
pub fn fell_back(c: Call, why: Why) {
    bump(&FELL[c as usize][why as usize]);
}

/// Remembers a line for the summary (set-up details and failures); at most a few.
pub fn note(line: String) {
    let mut n = NOTES.lock().unwrap_or_else(|e| e.into_inner());
    if n.len() < 16 && !n.contains(&line) {
        n.push(line);
    }
}

/// Remembers a communicator's measured decision for the summary ([`super::route`]).
pub fn decided(line: String) {
    let mut d = DECIDED.lock().unwrap_or_else(|e| e.into_inner());
    if d.len() < DECIDED_LISTED {
        d.push(line);
    } else {
        DECIDED_MORE.fetch_add(1, Relaxed);
    }
}

/// The summary rank 0 prints at MPI_Finalize, a line each (without the `smelt-mpi: `
/// prefix [`say`] adds).
pub fn summary() -> Vec<String> {
    let mut out = vec!["summary of rank 0".to_string()];
    out.extend(
        NOTES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned(),
    );
    let (n, r) = (SETUPS.load(Relaxed), REUSED.load(Relaxed));
    if n > 0 {
        out.push(format!(
            "communicators set up: {n} ({r} reused the tree of a freed communicator of the same node)"
        ));
    }
    {
        let d = DECIDED.lock().unwrap_or_else(|e| e.into_inner());
        out.extend(d.iter().map(|l| format!("measured: {l}")));
        let more = DECIDED_MORE.load(Relaxed);
        if more > 0 {
            out.push(format!("measured: {more} more decisions"));
        }
    }
    for c in Call::ALL {
        let t = TAKEN[c as usize].load(Relaxed);
        let f: u64 = FELL[c as usize].iter().map(|x| x.load(Relaxed)).sum();
        // The calls smelt has taken since its first version always; the others where
        // the program made them.
        if c as usize > Call::Scatter as usize && t + f == 0 {
            continue;
        }
        out.push(format!("{}: taken {t}, fell back {f}", c.name()));
        let x = EXPRESS[c as usize].load(Relaxed);
        if x > 0 {
            out.push(format!(
                "{}: express {x} of those taken: small calls repeated on the communicator last used, past the general path's layers",
                c.name()
            ));
        }
        for w in ALL_WHY {
            let n = FELL[c as usize][w as usize].load(Relaxed);
            if n > 0 {
                out.push(format!("{}: fell back {n}: {}", c.name(), w.describe()));
            }
        }
    }
    out
}
