//! Settings from the environment, read once per process.

use smelt_tree::Topology;
use std::str::FromStr;
use std::sync::OnceLock;
use std::time::Duration;

/// Default cut-offs: the largest message (bytes per rank) smelt takes, for MPI_Bcast,
/// MPI_Reduce, MPI_Allreduce, MPI_Gather and MPI_Scatter. Measured (docs/mpi.md):
/// past these, on 2 ranks with a core each, Open MPI's shared-memory transport (one
/// copy in, one copy out) beats smelt's cache-line slots, which copy 48 bytes per
/// 64-byte line. Reductions from 512 B go through the links' staging buffers (one
/// copy, combined straight from the buffer: `smelt_transport::shm::Stage`) and beat
/// Open MPI from 512 B to 16 MiB, the largest size measured: their cut-off is 16 MiB.
///
/// Then, for the calls built on smelt's allreduce, the largest whole result (bytes,
/// all ranks together): MPI_Allgather, MPI_Scan/MPI_Exscan, MPI_Reduce_scatter_block,
/// MPI_Alltoall. Measured on 2 ranks (docs/mpi.md); 0 (never by default) for
/// MPI_Scan (on 2 ranks MPI's scan is one message, 2.5-3× faster than smelt's
/// allreduce of every input) and MPI_Alltoall (even at 8 bytes no faster than MPI's).
pub const DEFAULT_MAX_BYTES: [usize; CUT_OFFS] = [512, 16 << 20, 16 << 20, 256, 64, 128, 0, 256, 0];
/// Cut-offs per communicator (see [`DEFAULT_MAX_BYTES`]).
pub const CUT_OFFS: usize = 9;
/// Default number of collective calls on a communicator that go to MPI before smelt
/// sets the communicator up (see [`InterposeConfig::setup_after`]); MPICH's shared-memory
/// collectives wait as many (`MPIR_CVAR_POSIX_NUM_COLLS_THRESHOLD`).
pub const DEFAULT_SETUP_AFTER: u64 = 5;
/// Default longest wait for a peer inside a node (see [`InterposeConfig::link`]).
pub const DEFAULT_TIMEOUT_S: u64 = 3600;
/// Default trial calls per path before a communicator picks smelt's or MPI's for a
/// call and size class (see [`InterposeConfig::measure`]).
pub const DEFAULT_MEASURE: usize = 10;

/// The interposer's settings.
#[derive(Debug, Clone)]
pub struct InterposeConfig {
    /// `SMELT_MPI=off` (or 0, no, false): every call goes straight to PMPI.
    pub off: bool,
    /// `SMELT_MPI_VERBOSE=1`: rank 0 reports at MPI_Finalize what smelt took and what
    /// fell back (and why); set-up problems are reported as they happen.
    pub verbose: bool,
    /// Largest message smelt takes for MPI_Bcast, MPI_Reduce, MPI_Allreduce,
    /// MPI_Gather and MPI_Scatter: `SMELT_MPI_MAX_BYTES` for all, else
    /// [`DEFAULT_MAX_BYTES`]. Every rank uses the smallest values any rank of the
    /// communicator has.
    pub max_bytes: [usize; CUT_OFFS],
    /// `SMELT_RANKS_PER_NODE=k`: split each host into emulated nodes of `k` ranks.
    pub ranks_per_node: usize,
    /// The shared link settings of the nodes' groups: `timeout` is `SMELT_MPI_TIMEOUT`
    /// (seconds): longest a rank waits for a peer of its node inside a smelt collective
    /// before the job is aborted (default [`DEFAULT_TIMEOUT_S`]). A dead peer is
    /// noticed within milliseconds regardless; this only bounds waiting on a live but
    /// absent peer. `capacity` is the shared default; `wait` is unset (dedicated, or
    /// oversubscribed when a node has more ranks than CPUs).
    pub link: smelt_runtime::LinkConfig,
    /// `SMELT_MPI_TREE`: the tree inside a node (a `smelt tree --algo` name:
    /// `Some`), or `auto` (`None`, the default; also what a name that is not a tree
    /// gives, said once): this host's tuning file's choice (`smelt tune`), else
    /// `adaptive-sorted`; `sequential` (flat) when the host has more ranks than CPUs
    /// and no explicit tree is named.
    pub tree: Option<Topology>,
    /// `SMELT_MPI_SETUP_AFTER=n`: the first `n` collective calls on a communicator go
    /// to MPI; smelt sets the communicator up at call `n + 1` (every rank counts the
    /// same calls, so every rank sets up at the same one). Set-up costs a few
    /// collectives and a shared-memory segment; a communicator that is duplicated,
    /// used once and freed (as libraries do) never pays it. 0: set up at the first call.
    pub setup_after: u64,
    /// `SMELT_MPI_MODEL`: a smelt model file (`smelt probe -o`, `smelt model import`)
    /// the nodes' trees are built from; default: this host's cached probe
    /// (`smelt probe --cache`) if there is one, else a uniform model.
    pub model: Option<String>,
    /// `SMELT_MPI_FORCE=1`: take every call smelt can, also on communicators whose
    /// nodes hold 1-2 ranks each, where the hierarchy only adds a step (by default
    /// those go to MPI: [`super::stats::Why::NoGain`]). The tests use it to run the
    /// multi-node paths on emulated nodes.
    pub force: bool,
    /// `SMELT_MPI_MEASURE=n`: on each communicator, the first `2n` blocks of calls
    /// (`super::route::BLOCK` each) of each call and size class (powers of two) that
    /// smelt could take alternate between smelt's path and MPI's, timed; then every rank agrees on the faster and sends the class
    /// that way (`super::route`). Default [`DEFAULT_MEASURE`]; 0 (and
    /// `SMELT_MPI_FORCE=1`): no measuring, the cut-offs alone decide.
    pub measure: usize,
}

fn warn(var: &str, val: &str, why: &str) {
    super::stats::say(&format!("{var}={val:?} ignored: {why}"));
}

/// `SMELT_MPI_TREE`'s value: `None` for `auto` (or `tuned`), a tree's name, or a
/// name that is not a tree: ignored (said, and noted for the summary), so `auto`.
fn tree(v: Option<String>) -> Option<Topology> {
    let v = v?;
    if matches!(v.trim().to_ascii_lowercase().as_str(), "auto" | "tuned") {
        return None;
    }
    match Topology::from_str(v.trim()) {
        Ok(t) => Some(t),
        Err(e) => {
            let why = format!("{e}; the tree is chosen as with auto");
            warn("SMELT_MPI_TREE", &v, &why);
            super::stats::note(format!("SMELT_MPI_TREE={v:?} ignored: {why}"));
            None
        }
    }
}

fn parse() -> InterposeConfig {
    // Every variable through the one settings list; a value that is not text is
    // garbage like any other (warned about, the default used).
    let get = |k: &str| match smelt_settings::text(k) {
        Ok(v) => v,
        Err(e) => {
            warn(k, &e.value, "expected UTF-8 text");
            None
        }
    };
    let flag = |k: &str, default: bool| match get(k) {
        None => default,
        Some(v) => match v.trim().to_ascii_lowercase().as_str() {
            "1" | "on" | "yes" | "true" => true,
            "0" | "off" | "no" | "false" => false,
            _ => {
                warn(k, &v, "expected on/off, 1/0, yes/no or true/false");
                default
            }
        },
    };
    let number = |k: &str, default: u64, max: u64| match get(k) {
        None => default,
        Some(v) => match v.trim().parse::<u64>() {
            Ok(n) if n <= max => n,
            _ => {
                warn(k, &v, &format!("expected a whole number from 0 to {max}"));
                default
            }
        },
    };
    InterposeConfig {
        off: !flag("SMELT_MPI", true),
        verbose: flag("SMELT_MPI_VERBOSE", false),
        max_bytes: match get("SMELT_MPI_MAX_BYTES").map(|v| (v.trim().parse::<usize>(), v)) {
            None => DEFAULT_MAX_BYTES,
            Some((Ok(n), _)) if n <= 1 << 30 => [n; CUT_OFFS],
            Some((_, v)) => {
                warn(
                    "SMELT_MPI_MAX_BYTES",
                    &v,
                    "expected a number of bytes from 0 to 2^30",
                );
                DEFAULT_MAX_BYTES
            }
        },
        ranks_per_node: number("SMELT_RANKS_PER_NODE", 0, 1 << 20) as usize,
        // An hour, not the shared 30 s: an MPI program's ranks may compute apart for
        // long between collectives, and a rank waiting on a live peer must not abort
        // the job (a dead one is noticed at once anyway).
        link: smelt_runtime::LinkConfig::default().timeout(Duration::from_secs(
            number("SMELT_MPI_TIMEOUT", DEFAULT_TIMEOUT_S, 1 << 32).max(1),
        )),
        tree: tree(get("SMELT_MPI_TREE")),
        setup_after: number("SMELT_MPI_SETUP_AFTER", DEFAULT_SETUP_AFTER, 1 << 32),
        model: get("SMELT_MPI_MODEL"),
        force: flag("SMELT_MPI_FORCE", false),
        measure: number("SMELT_MPI_MEASURE", DEFAULT_MEASURE as u64, 1024) as usize,
    }
}

/// The process's settings.
pub fn config() -> &'static InterposeConfig {
    static C: OnceLock<InterposeConfig> = OnceLock::new();
    C.get_or_init(parse)
}
