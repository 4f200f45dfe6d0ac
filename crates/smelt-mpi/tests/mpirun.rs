//! The interposer under `mpirun`: C programs (tests/c/) compiled with `mpicc`, run with
//! `LD_PRELOAD=libsmelt_mpi.so` on 2 and 4 ranks (oversubscribed), on emulated nodes
//! (`SMELT_RANKS_PER_NODE`), with smelt switched off, with set-up failing, with a small
//! cut-off, under MPI_THREAD_MULTIPLE, and with a rank killed or aborting mid-loop.
//! Results are checked against plain C arithmetic by the programs; these tests check
//! their verdict, that smelt actually took the calls (`SMELT_MPI_VERBOSE=1`'s summary),
//! that nothing hangs, and that no shared memory is left behind.
//!
//! Needs `mpicc` and `mpirun` (Open MPI or MPICH); run with
//! `cargo test -p smelt-mpi --features mpi`.
#![cfg(feature = "mpi")]

#[path = "../../../tests/support/mpirun_job.rs"]
mod mpirun_job;

#[path = "../../../tests/support/skip.rs"]
mod skip;

use mpirun_job::{Job, Run};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The interposer built with this test: `cargo test` links the library's rlib into the
/// test and leaves its cdylib beside it (target/<profile>/deps/); `cargo build` puts it
/// in target/<profile>/.
fn library() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let exe = std::env::current_exe().expect("test executable path");
        let deps = exe.parent().expect("target/<profile>/deps");
        let candidates = [deps.join("libsmelt_mpi.so"), deps.join("../libsmelt_mpi.so")];
        let lib = candidates
            .iter()
            .find(|p| p.exists())
            .unwrap_or_else(|| {
                panic!("libsmelt_mpi.so is missing: build it with `cargo build -p smelt-mpi --features mpi`")
            })
            .clone();
        // A build without the feature (e.g. `cargo build --workspace`) writes the same
        // file name; it defines no MPI symbol.
        let bytes = std::fs::read(&lib).expect("read libsmelt_mpi.so");
        assert!(
            bytes.windows(b"MPI_Allreduce".len()).any(|w| w == b"MPI_Allreduce"),
            "{} was built without the `mpi` feature",
            lib.display()
        );
        lib
    })
    .clone()
}

/// Compiles tests/c/<name>.c with mpicc (once per test run).
fn program(name: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let mut built = BUILT
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.get(name) {
        return p.clone();
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c")
        .join(format!("{name}.c"));
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("smelt-mpi-{name}"));
    let mpicc = std::env::var("MPICC").unwrap_or_else(|_| "mpicc".into());
    let st = Command::new(&mpicc)
        .args(["-O1", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {mpicc}: {e}"));
    assert!(st.success(), "{mpicc} {} failed", src.display());
    built.insert(name.into(), out.clone());
    out
}

/// What smelt-mpi's verbose summary says about a job.
trait Summary {
    /// `(taken, fell back)` of `call` in the verbose summary.
    fn counts(&self, call: &str) -> Option<(u64, u64)>;
    /// Calls of `call` that fell back for a reason containing `why`.
    fn fell_back(&self, call: &str, why: &str) -> u64;
    /// Calls of `call` the express lane ran (0 without its summary line).
    fn express(&self, call: &str) -> u64;
}

impl Summary for Run {
    fn counts(&self, call: &str) -> Option<(u64, u64)> {
        let prefix = format!("smelt-mpi: {call}: taken ");
        let line = self.stderr.lines().find(|l| l.starts_with(&prefix))?;
        let rest = &line[prefix.len()..];
        let (t, f) = rest.split_once(", fell back ")?;
        Some((t.trim().parse().ok()?, f.trim().parse().ok()?))
    }
    fn express(&self, call: &str) -> u64 {
        let prefix = format!("smelt-mpi: {call}: express ");
        self.stderr
            .lines()
            .find_map(|l| l.strip_prefix(&prefix)?.split(' ').next()?.parse().ok())
            .unwrap_or(0)
    }
    fn fell_back(&self, call: &str, why: &str) -> u64 {
        let prefix = format!("smelt-mpi: {call}: fell back ");
        self.stderr
            .lines()
            .filter(|l| l.starts_with(&prefix) && l.contains(why))
            .filter_map(|l| {
                l[prefix.len()..]
                    .split(':')
                    .next()?
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    }
}

/// Runs `prog args` on `np` ranks through the interposer with `env`, killing the whole
/// job after `limit`.
fn mpirun(np: usize, prog: &Path, args: &[&str], env: &[(&str, &str)], limit: Duration) -> Run {
    let mut vars: Vec<(String, String)> = vec![
        ("LD_PRELOAD".into(), library().display().to_string()),
        ("SMELT_MPI_VERBOSE".into(), "1".into()),
        // Past the default cut-offs, so that multi-fragment messages (3 KiB fragments)
        // run through smelt too; `two_ranks` runs with the defaults.
        ("SMELT_MPI_MAX_BYTES".into(), "16384".into()),
        // Every communicator set up at its first call, so that every call of the
        // programs' checks runs through smelt (the default, 5 calls through MPI first,
        // would leave the first calls on each communicator to MPI); the default is
        // tested by `two_ranks` and `comm_churn_*`.
        ("SMELT_MPI_SETUP_AFTER".into(), "0".into()),
        // Emulated nodes of 1-2 ranks go to MPI by default (the hierarchy only adds a
        // step there); forced, so that the multi-node paths run. The default is
        // tested by `nodes_of_two_go_to_mpi_unless_forced`.
        ("SMELT_MPI_FORCE".into(), "1".into()),
        // No measuring of smelt's path against MPI's (forcing implies it; the tests that
        // unset SMELT_MPI_FORCE check the layout's rules, not timings), so the counts of
        // what smelt took do not depend on this machine's speed; measuring is tested by
        // `measuring_decides_per_size_alike_on_every_rank`.
        ("SMELT_MPI_MEASURE".into(), "0".into()),
        // No cached probe of this host unless a test makes one (the user's own cache
        // would change the trees, not the results).
        ("XDG_CACHE_HOME".into(), empty_cache().display().to_string()),
    ];
    for (k, v) in env {
        vars.retain(|(x, _)| x != k);
        vars.push((k.to_string(), v.to_string()));
    }
    mpirun_job::run(Job {
        np,
        // Debian's Open MPI 4.1 saturates unsigned char/short sums in its AVX operation
        // code; the leaders' MPI reductions must compute what C computes.
        mpirun_args: &["--mca", "op", "^avx"],
        prog,
        args,
        vars,
        clear: &[],
        shm_prefix: "smelt-mpi-test",
        limit,
    })
}

const LIMIT: Duration = Duration::from_secs(120);

/// A cache directory with nothing in it.
fn empty_cache() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("smelt-mpi-empty-cache");
    let _ = std::fs::create_dir_all(&d);
    d
}

/// The collectives program passes, smelt took every kind of call, nothing is left in
/// shared memory.
fn collectives(np: usize, env: &[(&str, &str)]) -> Run {
    passes("collectives", &program("collectives"), np, env)
}

/// Program `prog` (named `what`) on `np` ranks with `env` succeeds, prints
/// "`what`: OK", and leaves nothing in shared memory.
fn passes(what: &str, prog: &Path, np: usize, env: &[(&str, &str)]) -> Run {
    passes_with(what, prog, np, &[], env)
}

/// [`passes`] with arguments for the program.
fn passes_with(what: &str, prog: &Path, np: usize, args: &[&str], env: &[(&str, &str)]) -> Run {
    let r = mpirun(np, prog, args, env, LIMIT);
    assert!(r.ok(), "{what} on {np} ranks {env:?}:\n{}", r.show());
    assert!(r.stdout.contains(&format!("{what}: OK")), "{}", r.show());
    assert!(
        r.leftovers.is_empty(),
        "left in shared memory: {:?}",
        r.leftovers
    );
    r
}

/// [`collectives`] on `np` ranks with `env`, smelt taking the calls ([`assert_taken`]).
fn taken(np: usize, env: &[(&str, &str)]) -> Run {
    let r = collectives(np, env);
    assert_taken(&r);
    r
}

/// The calls smelt takes.
const CALLS: [&str; 13] = [
    "MPI_Bcast",
    "MPI_Reduce",
    "MPI_Allreduce",
    "MPI_Barrier",
    "MPI_Gather",
    "MPI_Scatter",
    "MPI_Allgather",
    "MPI_Scan",
    "MPI_Exscan",
    "MPI_Reduce_scatter_block",
    "MPI_Reduce_scatter",
    "MPI_Alltoall",
    "MPI_Allgatherv",
];

/// The non-blocking collectives: smelt's where it takes the blocking ones.
const NON_BLOCKING: [&str; 3] = ["MPI_Ibarrier", "MPI_Ibcast", "MPI_Iallreduce"];

fn assert_taken(r: &Run) {
    for call in CALLS {
        let (taken, _) = r
            .counts(call)
            .unwrap_or_else(|| panic!("no summary line for {call}:\n{}", r.show()));
        assert!(
            taken > 50,
            "smelt took only {taken} {call} calls:\n{}",
            r.show()
        );
    }
    // The fallbacks the program exercises.
    assert!(
        r.fell_back("MPI_Allreduce", "user-defined operation") > 0,
        "{}",
        r.show()
    );
    assert!(r.fell_back("MPI_Allreduce", "MAXLOC") > 0, "{}", r.show());
    assert!(r.fell_back("MPI_Allreduce", "cut-off") > 0, "{}", r.show());
    // The non-blocking collectives run through smelt too (the program checks their
    // results).
    for call in NON_BLOCKING {
        let (taken, _) = r
            .counts(call)
            .unwrap_or_else(|| panic!("no summary line for {call}:\n{}", r.show()));
        assert!(taken > 0, "{call}:\n{}", r.show());
    }
}

/// On emulated nodes of 2 ranks (and of 2 and 1), smelt's hierarchy only adds a step
/// to MPI's: by default every call goes to MPI, said in the summary, and the results
/// stay right; on one node of 4 smelt takes them.
#[test]
fn nodes_of_two_go_to_mpi_unless_forced() {
    for (np, k) in [(4, "2"), (3, "2")] {
        let r = collectives(np, &[("SMELT_RANKS_PER_NODE", k), ("SMELT_MPI_FORCE", "")]);
        // MPI_COMM_WORLD spans the nodes; the reordered communicator too.
        assert!(
            r.fell_back("MPI_Allreduce", "nodes of 1-2 ranks") > 0,
            "{}",
            r.show()
        );
        assert!(!r.stderr.contains("2 node(s)"), "{}", r.show());
    }
    let r = collectives(4, &[("SMELT_RANKS_PER_NODE", "4"), ("SMELT_MPI_FORCE", "")]);
    assert_eq!(
        r.fell_back("MPI_Allreduce", "nodes of 1-2 ranks"),
        0,
        "{}",
        r.show()
    );
    if r.stderr.contains("oversubscribed wait") {
        // More ranks than CPUs: broadcasts go to MPI (smelt's flat tree is slower
        // there), every other call to smelt.
        assert!(
            r.fell_back("MPI_Bcast", "MPI's own is faster") > 0,
            "{}",
            r.show()
        );
        let (taken, _) = r.counts("MPI_Reduce").expect("summary");
        assert!(taken > 50, "{}", r.show());
    } else {
        assert_taken(&r);
    }
}

/// Measuring (`SMELT_MPI_MEASURE`, on by default): each call and size class that smelt
/// could take runs trial blocks of smelt's path and MPI's, then every rank picks the
/// same one (a rank that picked otherwise would deadlock or fail the program's checks).
/// On 2 and 4 ranks of one node and on uneven emulated nodes (3 + 1); the summary lists
/// the decisions; with 0 nothing is measured.
#[test]
fn measuring_decides_per_size_alike_on_every_rank() {
    for (np, env) in [
        (2, vec![]),
        (4, vec![]),
        (4, vec![("SMELT_RANKS_PER_NODE", "3")]),
    ] {
        let mut env = env;
        env.extend([("SMELT_MPI_FORCE", ""), ("SMELT_MPI_MEASURE", "1")]);
        let r = collectives(np, &env);
        let decided = r
            .stderr
            .lines()
            .filter(|l| l.starts_with("smelt-mpi: measured: "))
            .count();
        assert!(
            decided > 0,
            "{np} ranks {env:?}: no decision:\n{}",
            r.show()
        );
        assert!(
            r.stderr
                .contains(&format!("on a communicator of {np} ranks: smelt ")),
            "{}",
            r.show()
        );
        assert!(
            r.fell_back("MPI_Allreduce", "a trial call") > 0,
            "{}",
            r.show()
        );
        let (taken, _) = r.counts("MPI_Allreduce").expect("summary");
        assert!(taken > 0, "{}", r.show());
    }
    let r = collectives(2, &[("SMELT_MPI_FORCE", ""), ("SMELT_MPI_MEASURE", "0")]);
    assert!(!r.stderr.contains("smelt-mpi: measured: "), "{}", r.show());
    assert_eq!(
        r.fell_back("MPI_Allreduce", "a trial call"),
        0,
        "{}",
        r.show()
    );
    assert_taken(&r);
}

/// Forced tree shapes inside one node of 4 ranks (on 2 CPUs every node of 3 or more
/// ranks gets a flat tree unless one is named): a binary tree, a binomial one
/// (`knomial:2`) and the adaptive tree built from a held model file; every collective
/// (the new ones included) right and taken, the summary naming the tree.
#[test]
fn forced_tree_shapes_on_four_ranks() {
    let dir = tempfile_dir("forced-trees");
    let file = dir.join("host.json");
    let mut cpus = host_cpus();
    // A model of at least 4 CPUs: this host's (the ranks' CPUs, where they are each
    // bound to one) and made-up ones beyond.
    let mut extra = 10_000;
    while cpus.len() < 4 {
        cpus.push(extra);
        extra += 1;
    }
    write_host_model(&file, &cpus);
    let f = file.display().to_string();
    for (tree, shown) in [
        ("binary", "tree binary (SMELT_MPI_TREE)"),
        ("knomial:2", "tree knomial:2 (SMELT_MPI_TREE)"),
        ("adaptive", "tree adaptive (SMELT_MPI_TREE)"),
    ] {
        let r = taken(4, &[("SMELT_MPI_TREE", tree), ("SMELT_MPI_MODEL", &f)]);
        assert_stderr(&r, "1 node(s), 4 rank(s)");
        assert_stderr(&r, shown);
        // The model file is named, used where the 4 ranks are each bound to a CPU of
        // their own, else the uniform model (said).
        let line = model_line(&r);
        assert!(
            line.contains(&format!("SMELT_MPI_MODEL={f}")) || line.contains("not each bound"),
            "{}",
            r.show()
        );
    }
}

#[test]
fn two_ranks() {
    let r = taken(2, &[]);
    // The split communicators have one rank each: MPI's business.
    assert!(r.fell_back("MPI_Reduce", "one rank") > 0, "{}", r.show());
    // Small calls repeated on one communicator with one datatype (and operation) take
    // the express lane; the program checks their results as every other call's.
    assert_express(&r, true);
    // The default cut-offs and set-up threshold: the first 5 calls on each
    // communicator go to MPI, the rest (most) to smelt.
    let r = collectives(
        2,
        &[("SMELT_MPI_MAX_BYTES", ""), ("SMELT_MPI_SETUP_AFTER", "")],
    );
    assert_stderr(&r, "cut-offs 512/16777216/16777216/256/64 bytes");
    assert_stderr(
        &r,
        "128/0/256/0 (allgather/scan/reduce_scatter_block/alltoall",
    );
    // By default MPI_Scan, MPI_Exscan and MPI_Alltoall go to MPI (its own are faster
    // on 2 ranks), the other calls to smelt.
    for call in CALLS {
        let (taken, _) = r.counts(call).expect("summary");
        if matches!(call, "MPI_Scan" | "MPI_Exscan" | "MPI_Alltoall") {
            assert_eq!(taken, 0, "{call}:\n{}", r.show());
            assert!(r.fell_back(call, "MPI's own is faster") > 0, "{}", r.show());
        } else {
            assert!(taken > 50, "{call}:\n{}", r.show());
        }
    }
    assert!(r.fell_back("MPI_Bcast", "cut-off") > 0, "{}", r.show());
    let first: u64 = CALLS.iter().map(|c| r.fell_back(c, "first calls")).sum();
    // MPI_COMM_WORLD and the reordered communicator: 5 calls each (the split and its
    // dup have one rank each on 2 ranks: never set up, MPI's).
    assert_eq!(first, 10, "{}", r.show());
}

/// `auto`'s table reaches the node's jobs: with `SMELT_TUNE` picking them, barriers
/// run by dissemination and allreduces by recursive doubling between the ranks'
/// processes, and every result is still right.
#[test]
fn two_ranks_run_the_non_tree_algorithms_auto_picks() {
    let cache = empty_cache();
    let cache = cache.to_string_lossy();
    let r = taken(
        2,
        &[
            ("XDG_CACHE_HOME", &cache),
            (
                "SMELT_TUNE",
                "barrier=dissemination;allreduce=recursive-doubling",
            ),
        ],
    );
    assert_stderr(
        &r,
        "auto on rank 0's node: barrier by dissemination, 8-byte allreduce by recursive-doubling",
    );
}

#[test]
fn four_ranks_oversubscribed() {
    let r = taken(4, &[]);
    assert_stderr(&r, "1 node(s), 4 rank(s)");
    assert_express(&r, true);
}

/// The express lane's counts of MPI_Bcast, MPI_Reduce, MPI_Allreduce and MPI_Barrier
/// are among the calls taken, and (`must_run`) some of each ran on it. On emulated
/// nodes it runs only on the communicators inside one node.
fn assert_express(r: &Run, must_run: bool) {
    for call in ["MPI_Bcast", "MPI_Reduce", "MPI_Allreduce", "MPI_Barrier"] {
        let (taken, _) = r.counts(call).expect("summary");
        let x = r.express(call);
        assert!(x <= taken, "{call}: {x} of {taken}:\n{}", r.show());
        assert!(x > 0 || !must_run, "{call}: express {x}:\n{}", r.show());
    }
}

#[test]
fn four_ranks_as_two_emulated_nodes() {
    let r = taken(4, &[("SMELT_RANKS_PER_NODE", "2")]);
    assert_stderr(&r, "2 node(s), 2 rank(s)");
    assert_express(&r, false);
    // The reordered communicator: gather and scatter put the nodes' parts in order.
    assert_stderr(&r, "2 node(s) of ranks not in rank order");
}

#[test]
fn uneven_emulated_nodes() {
    // Nodes of 3 and 1 ranks on 4; of 2 and 1 on 3.
    let r = taken(4, &[("SMELT_RANKS_PER_NODE", "3")]);
    assert_stderr(&r, "2 node(s), 3 rank(s)");
    let r = taken(3, &[("SMELT_RANKS_PER_NODE", "2")]);
    assert_stderr(&r, "of ranks not in rank order");
}

#[test]
fn switched_off_everything_goes_to_mpi() {
    let r = collectives(2, &[("SMELT_MPI", "off")]);
    assert!(!r.stderr.contains("smelt-mpi:"), "{}", r.show());
}

#[test]
fn small_cut_off_falls_back_and_stays_correct() {
    let r = collectives(2, &[("SMELT_MPI_MAX_BYTES", "24")]);
    let (taken, fell) = r.counts("MPI_Allreduce").expect("summary");
    assert!(
        taken > 0 && fell > taken,
        "taken {taken}, fell back {fell}:\n{}",
        r.show()
    );
}

#[test]
fn set_up_failure_falls_back_on_every_rank() {
    // Too little shared memory for the job: every rank runs on MPI, correctly.
    let r = collectives(
        4,
        &[("SMELT_SHM_LIMIT", "4096"), ("SMELT_RANKS_PER_NODE", "2")],
    );
    assert!(
        r.fell_back("MPI_Allreduce", "set-up failed") > 0,
        "{}",
        r.show()
    );
    assert_eq!(
        r.counts("MPI_Allreduce").map(|c| c.0),
        Some(0),
        "{}",
        r.show()
    );
}

/// Under MPI_THREAD_MULTIPLE (mpi4py's default) smelt takes the calls as below it:
/// MPI requires a program to order the collectives on one communicator anyway.
#[test]
fn thread_multiple_is_taken() {
    let r = mpirun(2, &program("collectives"), &["1", "multiple"], &[], LIMIT);
    assert!(r.ok(), "{}", r.show());
    assert!(r.stdout.contains("collectives: OK"), "{}", r.show());
    assert_taken(&r);
    assert_eq!(
        r.fell_back("MPI_Allreduce", "another thread"),
        0,
        "{}",
        r.show()
    );
    // The express lane works under MPI_THREAD_MULTIPLE too (each thread's last
    // communicator, held by its busy flag).
    assert_express(&r, true);
}

/// Two threads of each rank run collectives at the same time, each on its own
/// communicator (a dup of MPI_COMM_WORLD each), under MPI_THREAD_MULTIPLE: every
/// result right, smelt takes the calls of both; on emulated nodes too.
#[test]
fn two_threads_on_two_communicators() {
    for (np, env) in [
        (2, vec![]),
        (4, vec![("SMELT_RANKS_PER_NODE", "2")]),
        (2, vec![("SMELT_MPI_SETUP_AFTER", "")]),
    ] {
        let r = passes("threads", &program("threads"), np, &env);
        for call in ["MPI_Bcast", "MPI_Allreduce", "MPI_Reduce", "MPI_Barrier"] {
            let (taken, _) = r.counts(call).expect("summary");
            assert!(taken > 2 * 290, "{call}: taken {taken}:\n{}", r.show());
        }
        assert_eq!(
            r.fell_back("MPI_Allreduce", "another thread"),
            0,
            "{}",
            r.show()
        );
    }
}

/// Two threads that do call collectives on one communicator at once (erroneous in
/// MPI, but it happens): rank 0's second thread calls MPI_Allreduce while its first
/// sits in a smelt MPI_Barrier on the same communicator that cannot complete before
/// that allreduce has (threads.c, `same`). The allreduce must go to MPI, not use the
/// state the barrier holds, SMELT_MPI_VERBOSE must say so, and the job must finish.
#[test]
fn two_threads_on_one_communicator_fall_through() {
    let r = mpirun(2, &program("threads"), &["same"], &[], LIMIT);
    assert!(r.ok(), "{}", r.show());
    assert!(r.stdout.contains("threads: OK"), "{}", r.show());
    assert!(
        r.fell_back("MPI_Allreduce", "another thread") > 0,
        "{}",
        r.show()
    );
    assert_stderr(
        &r,
        "two threads called collectives on one communicator at the same time",
    );
}

/// A rank that dies (killed, or MPI_Abort) mid-loop ends the job promptly, non-zero,
/// with nothing left in shared memory.
fn dies(np: usize, how: &str, env: &[(&str, &str)]) -> Run {
    // Only a hang reaches it: on a loaded machine the 2000 iterations before the death
    // took over 20 s once (4 oversubscribed ranks, every collective waits for all).
    let limit = Duration::from_secs(60);
    let r = mpirun(np, &program("dies"), &[how], env, limit);
    assert!(
        r.code.is_some(),
        "the job hung (killed after {limit:?}):\n{}",
        r.show()
    );
    assert!(
        !r.ok(),
        "the job succeeded although a rank died:\n{}",
        r.show()
    );
    assert!(
        r.leftovers.is_empty(),
        "left in shared memory: {:?}\n{}",
        r.leftovers,
        r.show()
    );
    r
}

#[test]
fn a_killed_rank_ends_the_job() {
    dies(2, "kill", &[]);
    dies(4, "kill", &[("SMELT_RANKS_PER_NODE", "2")]);
}

#[test]
fn an_aborting_rank_ends_the_job() {
    dies(4, "abort", &[]);
}

#[test]
fn a_wait_past_the_timeout_aborts_the_job() {
    // The last rank sleeps 60 s inside the loop; the others give up after 1 s. The job
    // ends long before that sleep would (start-up and the 2000 iterations before it
    // took over 4 s once on a loaded machine: the bound is not tight).
    let r = dies(2, "late", &[("SMELT_MPI_TIMEOUT", "1")]);
    assert_stderr(&r, "timed out");
    assert!(r.took < Duration::from_secs(30), "{}", r.show());
}

/// A valid model of this host's CPUs (made-up costs: CPUs farther apart cost more),
/// written to `path`.
fn write_host_model(path: &Path, cpus: &[u32]) {
    let n = cpus.len();
    let cost = |i: usize, j: usize| 100.0 + 10.0 * i.abs_diff(j) as f64;
    let mut m = smelt_model::Model::new(
        cpus.to_vec(),
        smelt_model::cost_matrix(n, cost),
        smelt_model::cost_matrix(n, cost),
    );
    m.provenance.method = "test".into();
    m.provenance.host = smelt_model::host::host_name();
    m.save(path).expect("write the model");
}

/// The CPUs this process may use (mpirun binds 2 ranks to 2 of them).
fn host_cpus() -> Vec<u32> {
    smelt_transport::allowed_cpus().unwrap_or_default()
}

/// The summary's line about rank 0's node's tree model.
fn model_line(r: &Run) -> String {
    r.stderr
        .lines()
        .find(|l| l.starts_with("smelt-mpi: tree model on rank 0's node: "))
        .unwrap_or_else(|| panic!("no tree model line:\n{}", r.show()))
        .to_string()
}

/// One pass of `collectives` on `np` ranks with `env`, which succeeds.
fn one_pass(np: usize, env: &[(&str, &str)]) -> Run {
    let r = mpirun(np, &program("collectives"), &["0"], env, LIMIT);
    assert!(r.ok(), "{}", r.show());
    r
}

/// `r`'s standard error says `what`.
fn assert_stderr(r: &Run, what: &str) {
    assert!(r.stderr.contains(what), "{}", r.show());
}

/// `r`'s tree model line says `what`.
fn assert_model(r: &Run, what: &str) {
    assert!(model_line(r).contains(what), "{}", r.show());
}

#[test]
fn model_file_builds_the_trees() {
    let dir = tempfile_dir("model");
    let file = dir.join("host.json");
    let cpus = host_cpus();
    write_host_model(&file, &cpus);
    let f = file.display().to_string();
    // 2 ranks, each bound to a CPU of its own by mpirun (2 CPUs or more).
    let r = taken(2, &[("SMELT_MPI_MODEL", &f)]);
    let line = model_line(&r);
    if cpus.len() >= 2 {
        assert!(
            line.contains(&format!("SMELT_MPI_MODEL={f}")) && line.contains("CPUs "),
            "{}",
            r.show()
        );
        assert!(!line.contains("uniform"), "{}", r.show());
    }
    // 4 ranks on as many CPUs or fewer are not each bound to one: uniform, and said so.
    if cpus.len() <= 4 {
        let r = one_pass(4, &[("SMELT_MPI_MODEL", &f)]);
        assert_model(&r, "uniform: the node's ranks are not each bound");
    }
    // A model without the ranks' CPUs: uniform, said as it happens, results right.
    let other = dir.join("other.json");
    write_host_model(&other, &[4000, 4001]);
    let o = other.display().to_string();
    let r = one_pass(2, &[("SMELT_MPI_MODEL", &o)]);
    if cpus.len() >= 2 {
        assert_model(&r, "does not fit the node's CPUs");
        assert_stderr(&r, "trees come from a uniform model");
    }
}

#[test]
fn malformed_model_file_falls_back_to_uniform() {
    let dir = tempfile_dir("bad-model");
    let file = dir.join("bad.json");
    std::fs::write(&file, "{\"format\": \"smelt-model\", \"cpus\": [0, ").unwrap();
    let f = file.display().to_string();
    let r = taken(2, &[("SMELT_MPI_MODEL", &f)]);
    let line = model_line(&r);
    assert!(
        line.contains("uniform: SMELT_MPI_MODEL=") && line.contains("could not be loaded"),
        "{}",
        r.show()
    );
    // Said as it happens (once per process), not only in the summary.
    assert!(
        r.stderr.contains("could not be loaded")
            && r.stderr.contains("trees come from a uniform model"),
        "{}",
        r.show()
    );
    // A missing file too.
    let r = one_pass(2, &[("SMELT_MPI_MODEL", "/nonexistent/m.json")]);
    assert_model(&r, "could not be loaded");
}

#[test]
fn cached_probe_builds_the_trees_and_no_model_is_uniform() {
    let dir = tempfile_dir("cache");
    let path = smelt_model::host::cached_model_path_in(
        Some(dir.as_os_str().into()),
        None,
        &smelt_model::host::host_name(),
    )
    .unwrap();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let cpus = host_cpus();
    write_host_model(&path, &cpus);
    let d = dir.display().to_string();
    let r = one_pass(2, &[("XDG_CACHE_HOME", &d)]);
    if cpus.len() >= 2 {
        assert_model(
            &r,
            &format!("the cached probe of this host {}", path.display()),
        );
    }
    // Without a model or a cached probe: uniform, as before.
    let r = one_pass(2, &[]);
    assert_model(&r, "uniform: no SMELT_MPI_MODEL, no cached probe");
}

/// The summary's line about the communicator (its tree and where the tree came from).
fn tree_line(r: &Run) -> String {
    r.stderr
        .lines()
        .find(|l| l.contains("communicator of 2 ranks"))
        .unwrap_or_else(|| panic!("no communicator line:\n{}", r.show()))
        .to_string()
}

/// `SMELT_MPI_TREE=auto` (the default): the host's tuning file in the per-host cache
/// (the path `smelt tune` writes) picks the node's tree; an explicit tree name wins; a
/// malformed file falls back to the default tree, said under SMELT_MPI_VERBOSE=1; no
/// file falls back silently.
#[test]
fn tuning_file_picks_the_node_tree() {
    use smelt_tree::tuning::{Entry, Source, SyncMode, TuningFile};
    use smelt_tree::Op;
    if host_cpus().len() < 2 {
        return; // 2 ranks would be oversubscribed: flat whatever the file says
    }
    let dir = tempfile_dir("tune");
    let host = smelt_model::host::host_name();
    let path =
        smelt_model::host::cached_tune_path_in(Some(dir.as_os_str().into()), None, &host).unwrap();
    let mut cpus = host_cpus();
    cpus.sort_unstable();
    let mut f = TuningFile::new(&host, "", &cpus, Source::Measured);
    f.insert(
        SyncMode::Loose,
        Op::Broadcast,
        2,
        Entry {
            bytes: 64,
            algo: "knomial:1".into(),
            segment: None,
            median_ns: 100.0,
            candidates: Default::default(),
        },
    );
    f.save(&path).unwrap();
    let d = dir.display().to_string();
    let r = one_pass(2, &[("XDG_CACHE_HOME", &d)]);
    let line = tree_line(&r);
    assert!(
        line.contains(&format!(
            "tree knomial:1 (auto: tuning file {}",
            path.display()
        )),
        "{}",
        r.show()
    );
    // Explicitly auto: the same.
    let r = one_pass(2, &[("XDG_CACHE_HOME", &d), ("SMELT_MPI_TREE", "auto")]);
    assert!(
        tree_line(&r).contains("tree knomial:1 (auto"),
        "{}",
        r.show()
    );
    // An explicit tree wins.
    let r = one_pass(2, &[("XDG_CACHE_HOME", &d), ("SMELT_MPI_TREE", "binary")]);
    assert!(
        tree_line(&r).contains("tree binary (SMELT_MPI_TREE)"),
        "{}",
        r.show()
    );
    // A malformed file: the default tree, and the reason said as it happens.
    std::fs::write(&path, "{ not json").unwrap();
    let r = one_pass(2, &[("XDG_CACHE_HOME", &d)]);
    assert!(
        tree_line(&r).contains("tree adaptive-sorted (auto: tuning file"),
        "{}",
        r.show()
    );
    assert_stderr(&r, "refused");
    // No file: the default tree, silently.
    let r = one_pass(2, &[]);
    assert!(
        tree_line(&r).contains("tree adaptive-sorted (auto: no tuning file"),
        "{}",
        r.show()
    );
    assert!(!r.stderr.contains("refused"), "{}", r.show());
}

/// A fresh directory under the target's temporary directory.
fn tempfile_dir(tag: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("smelt-mpi-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create a temporary directory");
    d
}

/// tests/fortran/collectives.f90 compiled with `mpifort` (once); `None` without it.
fn fortran_program() -> Option<PathBuf> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fortran/collectives.f90");
            let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("smelt-mpi-fortran-collectives");
            let mpifort = std::env::var("MPIFORT").unwrap_or_else(|_| "mpifort".into());
            let st = match Command::new(&mpifort)
                .args(["-O1", "-Wall", "-o"])
                .arg(&out)
                .arg(&src)
                .status()
            {
                Ok(st) => st,
                Err(e) => {
                    skip::tool_missing(&format!("{mpifort} ({e})"));
                    return None;
                }
            };
            assert!(st.success(), "{mpifort} {} failed", src.display());
            Some(out)
        })
        .clone()
}

#[test]
fn fortran_calls_are_taken() {
    let Some(prog) = fortran_program() else {
        return;
    };
    for (np, env) in [
        (2, vec![]),
        (4, vec![("SMELT_RANKS_PER_NODE", "2")]),
        (3, vec![("SMELT_RANKS_PER_NODE", "2")]),
    ] {
        let r = passes("fortran", &prog, np, &env);
        // MPI_FINALIZE from Fortran reached the interposer (the summary), and smelt
        // took every call (in place included: a misread MPI_IN_PLACE gives wrong sums):
        // the six calls with Fortran bindings of their own.
        for call in &CALLS[..6] {
            let (taken, fell) = r
                .counts(call)
                .unwrap_or_else(|| panic!("no summary line for {call}:\n{}", r.show()));
            assert!(
                taken >= 4 && fell == 0,
                "{call}: taken {taken}, fell back {fell}:\n{}",
                r.show()
            );
        }
    }
}

/// Communicator churn (issue 22): MPI_Comm_dup + MPI_Allreduce + MPI_Comm_free, as
/// libraries do it. With the default set-up threshold a communicator's first 5 calls go
/// to MPI, so the churn never sets anything up; one used longer is set up at its 6th
/// call and taken from there on. Every count is exact (comm_churn.c's calls on
/// rank 0), every result right, descriptors and the shared-memory directory flat
/// (checked by the program), nothing left behind.
#[test]
fn comm_churn_sets_communicators_up_lazily() {
    let prog = program("comm_churn");
    let iters = 200u64;
    let r = passes_with(
        "comm_churn",
        &prog,
        2,
        &["200", "1"],
        &[("SMELT_MPI_SETUP_AFTER", "")],
    );
    // Allreduces on duplicates: warm-up 2 (one call each), loop `iters` (one each),
    // set-up phase iters/4 duplicates of 12 calls (5 to MPI, 7 taken), the long-lived
    // duplicate 16 + 4 * iters calls (5 to MPI); on MPI_COMM_WORLD: 4 allreduces,
    // the first 3 after a barrier each (calls 2 and 4 to MPI, 6 and 7 taken).
    let first = 2 + iters + iters / 4 * 5 + 5 + 2;
    let taken = iters / 4 * 7 + (16 + 4 * iters - 5) + 2;
    assert_eq!(
        r.fell_back("MPI_Allreduce", "first calls"),
        first,
        "{}",
        r.show()
    );
    assert_eq!(
        r.counts("MPI_Allreduce"),
        Some((taken, first)),
        "{}",
        r.show()
    );
    // A threshold of its own: 12 calls per duplicate all go to MPI with 12.
    let r = passes_with(
        "comm_churn",
        &prog,
        2,
        &["40", "1"],
        &[("SMELT_MPI_SETUP_AFTER", "12")],
    );
    let first = 2 + 40 + 10 * 12 + 12 + 4;
    assert_eq!(
        r.fell_back("MPI_Allreduce", "first calls"),
        first,
        "{}",
        r.show()
    );
    // Set up at the first call: every duplicate is set up and released (shared
    // memory and communicators), on one node and on emulated nodes; nothing leaks.
    for (np, env) in [
        (2, vec![("SMELT_MPI_SETUP_AFTER", "0")]),
        (
            4,
            vec![
                ("SMELT_MPI_SETUP_AFTER", "0"),
                ("SMELT_RANKS_PER_NODE", "2"),
            ],
        ),
        (4, vec![("SMELT_RANKS_PER_NODE", "2")]),
    ] {
        let r = passes_with("comm_churn", &prog, np, &["40", "2"], &env);
        let (taken, _) = r.counts("MPI_Allreduce").expect("summary");
        assert!(taken > 160, "taken {taken}:\n{}", r.show());
        if env.contains(&("SMELT_MPI_SETUP_AFTER", "0")) {
            // MPI_COMM_WORLD and 2 + 40 + 10 + 1 duplicates, each set up; every
            // duplicate but the first reuses the tree the one before left.
            assert_stderr(
                &r,
                "communicators set up: 54 (52 reused the tree of a freed communicator of the same node)",
            );
        }
    }
}

/// A bad `SMELT_MPI_TREE` is ignored as said: the tree is chosen as with `auto`, and
/// the summary credits `auto`, not the variable, and repeats why it was ignored.
#[test]
fn bad_tree_name_is_ignored_and_not_credited() {
    let r = one_pass(2, &[("SMELT_MPI_TREE", "garbage")]);
    let line = tree_line(&r);
    assert!(!line.contains("SMELT_MPI_TREE"), "{}", r.show());
    assert!(
        line.contains("(auto") || line.contains("(more ranks than CPUs"),
        "{}",
        r.show()
    );
    assert_stderr(
        &r,
        "smelt-mpi: SMELT_MPI_TREE=\"garbage\" ignored: unknown topology",
    );
    // A good name is still credited to the variable.
    let r = one_pass(2, &[("SMELT_MPI_TREE", "binary")]);
    assert!(
        tree_line(&r).contains("tree binary (SMELT_MPI_TREE)"),
        "{}",
        r.show()
    );
}

/// Every line the interposer writes to standard error is one `write(2)`: the
/// program runs alone (MPI's singleton start) with standard error a datagram socket,
/// where each write arrives as one datagram; each must be exactly one whole line.
/// (Ranks writing at once to one pipe then never interleave within a line.)
#[test]
fn each_line_is_one_write() {
    use std::io::Read as _;
    use std::os::unix::net::UnixDatagram;
    let (mine, theirs) = UnixDatagram::pair().expect("socketpair");
    let shm = mpirun_job::ShmDir::new("smelt-mpi-test", "one-write");
    let mut child = Command::new(program("comm_churn"))
        .args(["20", "1"])
        .env("LD_PRELOAD", library())
        .env("SMELT_MPI_VERBOSE", "1")
        .env("SMELT_SHM_DIR", &shm.0)
        .env("XDG_CACHE_HOME", empty_cache())
        // Two settings that are ignored, said as the library starts.
        .env("SMELT_MPI_TREE", "garbage")
        .env("SMELT_MPI_TIMEOUT", "abc")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::from(std::os::fd::OwnedFd::from(
            theirs,
        )))
        .spawn()
        .expect("run comm_churn");
    // Reads datagrams until the summary's last line and a moment after it (or a
    // minute without one); the socket lives until the child is reaped, so a late
    // write never meets a closed socket.
    let reader = std::thread::spawn(move || {
        mine.set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut grams = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(n) = mine.recv(&mut buf) {
            grams.push(String::from_utf8_lossy(&buf[..n]).into_owned());
            if grams
                .last()
                .is_some_and(|g| g.contains("MPI_Scatter: taken"))
            {
                mine.set_read_timeout(Some(Duration::from_millis(500)))
                    .unwrap();
            }
        }
        (grams, mine)
    });
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let st = child.wait().unwrap();
    let (grams, _socket) = reader.join().unwrap();
    assert!(
        st.success() && out.contains("comm_churn: OK"),
        "{st:?} {out}"
    );
    let ours: Vec<&String> = grams.iter().filter(|g| g.contains("smelt-mpi")).collect();
    assert!(ours.len() >= 8, "too few lines: {grams:#?}");
    for g in &ours {
        assert!(
            g.starts_with("smelt-mpi: ") && g.ends_with('\n') && g.matches('\n').count() == 1,
            "not one whole line per write: {g:?} (all: {grams:#?})"
        );
    }
    for want in [
        "SMELT_MPI_TREE=\"garbage\" ignored",
        "SMELT_MPI_TIMEOUT=\"abc\" ignored",
        "summary of rank 0",
    ] {
        assert!(
            ours.iter().any(|g| g.contains(want)),
            "no {want:?}: {grams:#?}"
        );
    }
}

/// A tuning file that is a FIFO (or a link to a device) never stops a program: the
/// interposer refuses it without opening it for a blocking read, says why, and runs
/// on its default (issue 22: a FIFO used to hang the first collective).
#[test]
fn a_fifo_or_device_tuning_file_never_stops_the_program() {
    let d = tempfile_dir("fifo-tune");
    std::fs::create_dir_all(d.join("smelt")).unwrap();
    let host = smelt_model::host::host_name();
    let tune = d.join("smelt").join(format!("tune-{host}.json"));
    let cache = d.display().to_string();
    let fifo = |p: &Path| assert!(Command::new("mkfifo").arg(p).status().unwrap().success());
    let device = |p: &Path| std::os::unix::fs::symlink("/dev/zero", p).unwrap();
    type Maker<'a> = (&'a str, &'a dyn Fn(&Path));
    let makers: [Maker; 2] = [("FIFO", &fifo), ("character device", &device)];
    for (what, make) in makers {
        let _ = std::fs::remove_file(&tune);
        make(&tune);
        let r = one_pass(2, &[("XDG_CACHE_HOME", &cache)]);
        // one_pass: the program ran to its end and passed.
        assert_stderr(&r, what);
        assert_stderr(&r, "MPI_Reduce: taken 1");
    }
}

/// The non-blocking program ([`NON_BLOCKING`] through smelt, checked against plain C,
/// the NBX pattern among them) on `np` ranks with `env`; smelt took at least `min`
/// calls of each as rank 0 counts them.
fn nonblocking(np: usize, env: &[(&str, &str)], min: u64) -> Run {
    let r = passes("nonblocking", &program("nonblocking"), np, env);
    for call in NON_BLOCKING {
        let (taken, _) = r
            .counts(call)
            .unwrap_or_else(|| panic!("no summary line for {call}:\n{}", r.show()));
        assert!(
            taken >= min,
            "smelt took only {taken} {call} calls:\n{}",
            r.show()
        );
    }
    r
}

#[test]
fn nonblocking_two_ranks() {
    let r = nonblocking(2, &[], 50);
    assert_stderr(&r, "1 node(s), 2 rank(s)");
    // Past 4 KiB (2000 ints) MPI runs them, whatever the cut-offs.
    for call in ["MPI_Iallreduce", "MPI_Ibcast"] {
        assert!(r.fell_back(call, "past 4 KiB") > 0, "{}", r.show());
    }
    // The default cut-offs and set-up: non-blocking calls never set a communicator up
    // (the program's blocking barrier does), and larger messages go to MPI.
    let r = nonblocking(
        2,
        &[("SMELT_MPI_MAX_BYTES", ""), ("SMELT_MPI_SETUP_AFTER", "")],
        1,
    );
    assert!(
        r.fell_back("MPI_Iallreduce", "first calls") > 0,
        "{}",
        r.show()
    );
    assert!(r.fell_back("MPI_Ibcast", "cut-off") > 0, "{}", r.show());
}

#[test]
fn nonblocking_four_ranks() {
    let r = nonblocking(4, &[], 50);
    assert_stderr(&r, "1 node(s), 4 rank(s)");
    // A deeper tree than the flat one 4 ranks get on 2 CPUs: inner ranks forward.
    let r = nonblocking(4, &[("SMELT_MPI_TREE", "binary")], 50);
    assert_stderr(&r, "tree binary (SMELT_MPI_TREE)");
}

#[test]
fn nonblocking_emulated_nodes() {
    // Two nodes of 2 (the leaders' step through MPI's own non-blocking collectives),
    // and nodes of 3 and 1.
    let r = nonblocking(4, &[("SMELT_RANKS_PER_NODE", "2")], 50);
    assert_stderr(&r, "2 node(s), 2 rank(s)");
    let r = nonblocking(4, &[("SMELT_RANKS_PER_NODE", "3")], 50);
    assert_stderr(&r, "2 node(s), 3 rank(s)");
}

/// Under MPI_THREAD_MULTIPLE (mpi4py's default), also two threads per rank at once: one
/// polls its non-blocking calls with `MPI_Test` while the other runs blocking and
/// non-blocking calls on another communicator (a poll holds a communicator only for one
/// pass; a collective that meets one waits instead of falling back).
#[test]
fn nonblocking_thread_multiple() {
    for (np, env) in [(2, vec![]), (4, vec![("SMELT_RANKS_PER_NODE", "2")])] {
        let r = mpirun(np, &program("nonblocking"), &["1", "multiple"], &env, LIMIT);
        assert!(r.ok(), "{}", r.show());
        assert!(r.stdout.contains("nonblocking: OK"), "{}", r.show());
        for call in ["MPI_Allreduce", "MPI_Barrier"].iter().chain(&NON_BLOCKING) {
            assert_eq!(r.fell_back(call, "another thread"), 0, "{}", r.show());
        }
        for call in NON_BLOCKING {
            let (taken, _) = r.counts(call).expect("summary");
            assert!(taken >= 50, "{call}:\n{}", r.show());
        }
    }
}

#[test]
fn nonblocking_switched_off() {
    let r = mpirun(
        2,
        &program("nonblocking"),
        &[],
        &[("SMELT_MPI", "off")],
        LIMIT,
    );
    assert!(r.ok(), "{}", r.show());
    assert!(r.stdout.contains("nonblocking: OK"), "{}", r.show());
    assert!(!r.stderr.contains("smelt-mpi:"), "{}", r.show());
}
