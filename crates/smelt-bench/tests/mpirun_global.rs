//! Global arrays across MPI ranks: the `smelt-bench-mpi global` program under
//! `mpirun --oversubscribe`, on emulated nodes of 2 ranks and of 1 rank
//! (`SMELT_RANKS_PER_NODE`), every rank its own node (`SMELT_AM_TRANSPORT=mpi`) and
//! one real node (shared memory only, accumulates as CPU atomics). Each run checks the
//! program's verdicts: every write seen after barriers for every element type, writes
//! fenced then flagged seen after the invalidate fence, accumulates (sum, min, max,
//! fetch-and-add tickets, replace) across nodes, out-of-range indices refused, and the
//! work-stealing example against its sequential recomputation. The benchmark prints
//! its figures (never checked against a time). Nothing is left in shared memory.
//!
//! Needs `mpirun` and the `mpi` feature:
//! `cargo test -p smelt-bench --features mpi --test mpirun_global`. Without the feature the
//! test here is ignored, naming the command; without `mpirun` each test says it
//! skips, except under `CI=true`, where it fails.

#[cfg(not(feature = "mpi"))]
#[test]
#[ignore = "needs the `mpi` feature: cargo test -p smelt-bench --features mpi --test mpirun_global"]
fn needs_the_mpi_feature() {
    panic!("built without the `mpi` feature: run cargo test -p smelt-bench --features mpi --test mpirun_global");
}

#[cfg(feature = "mpi")]
#[path = "../../../tests/support/mpirun_job.rs"]
mod mpirun_job;

#[cfg(feature = "mpi")]
#[path = "../../../tests/support/skip.rs"]
mod skip;

#[cfg(feature = "mpi")]
mod with_mpi {
    use super::mpirun_job::{self, have_mpirun, Run};
    use std::path::PathBuf;
    use std::time::Duration;

    const LIMIT: Duration = Duration::from_secs(180);

    fn mpirun(np: usize, args: &[&str], env: &[(&str, &str)]) -> Run {
        let prog = PathBuf::from(env!("CARGO_BIN_EXE_smelt-bench-mpi"));
        let r = mpirun_job::service(&prog, "global", np, args, env, LIMIT);
        assert!(
            r.leftovers.is_empty(),
            "left in shared memory: {:?}",
            r.leftovers
        );
        r
    }

    const CHECKS: [&str; 6] = [
        "ok cache: a cached line is kept until the invalidate fence, then read afresh",
        "ok mismatch: ranks making arrays of different element types all refused",
        "ok drf: every write seen after barriers",
        "ok fences: writes fenced then flagged seen after the invalidate fence",
        "ok accumulates:",
        "ok errors: out-of-range indices refused",
    ];

    fn check_and_steal(np: usize, env: &[(&str, &str)], nodes: usize) {
        let r = mpirun(np, &["check"], env);
        assert!(r.ok(), "{env:?}:\n{}", r.show());
        for c in CHECKS {
            assert!(r.stdout.contains(c), "{env:?}: no {c:?}:\n{}", r.show());
        }
        assert!(
            r.line("layout ").contains(&format!("{nodes} node")),
            "{}",
            r.show()
        );
        let r = mpirun(np, &["stealing"], env);
        assert!(r.ok(), "{env:?}:\n{}", r.show());
        assert!(
            r.line("ok stealing: ")
                .contains(&format!("on {nodes} nodes")),
            "{}",
            r.show()
        );
    }

    #[test]
    fn emulated_nodes_of_two_ranks() {
        if have_mpirun("emulated_nodes_of_two_ranks") {
            check_and_steal(4, &[("SMELT_RANKS_PER_NODE", "2")], 2);
        }
    }

    #[test]
    fn every_rank_its_own_node() {
        if have_mpirun("every_rank_its_own_node") {
            check_and_steal(3, &[("SMELT_AM_TRANSPORT", "mpi")], 3);
        }
    }

    #[test]
    fn one_node_in_shared_memory() {
        if have_mpirun("one_node_in_shared_memory") {
            check_and_steal(3, &[], 1);
        }
    }

    #[test]
    fn the_benchmark_prints_its_figures() {
        if !have_mpirun("the_benchmark_prints_its_figures") {
            return;
        }
        let r = mpirun(4, &["bench", "--quick"], &[("SMELT_RANKS_PER_NODE", "2")]);
        assert!(r.ok(), "{}", r.show());
        let line = r.line("bench {");
        for key in [
            "\"get_8b_across_nodes_ns\":",
            "\"mpi_get_8b_ns\":",
            "\"mpi_get_8b_win_allocate_ns\":",
            "\"get_8b_same_node_ns\":",
            "\"get_8b_across_nodes_cached_ns\":",
            "\"get_across_over_mpi_get\":",
        ] {
            assert!(line.contains(key), "{key} missing: {line}");
        }
        assert!(!line.contains("null"), "{line}");
    }

    #[test]
    fn a_bad_mode_fails_without_starting_mpi() {
        if have_mpirun("a_bad_mode_fails_without_starting_mpi") {
            let r = mpirun(2, &["nonsense"], &[]);
            assert!(!r.ok());
            assert!(r.stderr.contains("usage:"), "{}", r.show());
        }
    }
}
