//! What smelt took and what fell back to MPI, and why: counted per process, reported
//! by rank 0 at MPI_Finalize under `SMELT_MPI_VERBOSE=1`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// The calls the interposer takes over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Bcast = 0,
    Reduce = 1,
    Allreduce = 2,
    Barrier = 3,
    Gather = 4,
    Scatter = 5,
}

const CALLS: usize = 6;

impl Call {
    pub const ALL: [Call; CALLS] = [
        Call::Bcast,
        Call::Reduce,
        Call::Allreduce,
        Call::Barrier,
        Call::Gather,
        Call::Scatter,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Call::Bcast => "MPI_Bcast",
            Call::Reduce => "MPI_Reduce",
            Call::Allreduce => "MPI_Allreduce",
            Call::Barrier => "MPI_Barrier",
            Call::Gather => "MPI_Gather",
            Call::Scatter => "MPI_Scatter",
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
    ThreadMultiple,
    SetupFailed,
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
}

const WHYS: usize = Why::NoTree as usize + 1;
const ALL_WHY: [Why; WHYS] = [
    Why::Intercomm,
    Why::OneRank,
    Why::OneRankPerNode,
    Why::ThreadMultiple,
    Why::SetupFailed,
    Why::TooLarge,
    Why::Derived,
    Why::TypeNotSupported,
    Why::UserOp,
    Why::LocOp,
    Why::OtherOp,
    Why::OpNotForType,
    Why::BadArgs,
    Why::NoTree,
];

impl Why {
    pub fn describe(self) -> &'static str {
        match self {
            Why::Intercomm => "intercommunicator",
            Why::OneRank => "communicator of one rank",
            Why::OneRankPerNode => "one rank per node (nothing to share)",
            Why::ThreadMultiple => "MPI_THREAD_MULTIPLE",
            Why::SetupFailed => "smelt set-up failed",
            Why::TooLarge => "message larger than the cut-off (SMELT_MPI_MAX_BYTES)",
            Why::Derived => "derived datatype",
            Why::TypeNotSupported => "datatype smelt does not reduce",
            Why::UserOp => "user-defined operation",
            Why::LocOp => "MPI_MAXLOC/MPI_MINLOC",
            Why::OtherOp => "MPI_REPLACE/MPI_NO_OP/MPI_OP_NULL",
            Why::OpNotForType => "operation not defined for the datatype",
            Why::BadArgs => "invalid arguments (left to MPI to report)",
            Why::NoTree => "no tree for this root (the node's limit of trees)",
        }
    }
}

static TAKEN: [AtomicU64; CALLS] = [const { AtomicU64::new(0) }; CALLS];
static FELL: [[AtomicU64; WHYS]; CALLS] = [const { [const { AtomicU64::new(0) }; WHYS] }; CALLS];
static NOTES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Counts one more: a load and a store, not an atomic read-modify-write (a locked
/// instruction on every call). Calls are serialized below MPI_THREAD_MULTIPLE; there
/// a count may be lost, never memory.
#[inline(always)]
fn bump(c: &AtomicU64) {
    c.store(c.load(Relaxed).wrapping_add(1), Relaxed);
}

#[inline(always)]
pub fn taken(c: Call) {
    bump(&TAKEN[c as usize]);
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

/// The summary rank 0 prints at MPI_Finalize.
pub fn summary() -> String {
    let mut out = String::from("smelt-mpi: summary of rank 0\n");
    for line in NOTES.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        out.push_str(&format!("smelt-mpi: {line}\n"));
    }
    for c in Call::ALL {
        let t = TAKEN[c as usize].load(Relaxed);
        let f: u64 = FELL[c as usize].iter().map(|x| x.load(Relaxed)).sum();
        out.push_str(&format!(
            "smelt-mpi: {}: taken {t}, fell back {f}\n",
            c.name()
        ));
        for w in ALL_WHY {
            let n = FELL[c as usize][w as usize].load(Relaxed);
            if n > 0 {
                out.push_str(&format!(
                    "smelt-mpi: {}: fell back {n}: {}\n",
                    c.name(),
                    w.describe()
                ));
            }
        }
    }
    out
}
