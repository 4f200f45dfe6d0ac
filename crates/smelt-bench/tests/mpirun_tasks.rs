//! Tasks across MPI ranks: the `smelt-bench-mpi tasks` program under `mpirun --oversubscribe
//! -np 4`, on emulated nodes of 2 ranks (`SMELT_RANKS_PER_NODE=2`), with every message
//! over MPI (`SMELT_AM_TRANSPORT=mpi`) and on one real node. Each run checks fib and
//! UTS against the sequential results and that other ranks stole tasks of rank 0; a
//! panicking task fails every rank with its message, without hanging; nothing is left
//! in shared memory.
//!
//! Needs `mpirun` and the `mpi` feature: `cargo test -p smelt-tasks --features mpi
//! --test mpirun`. Without the feature the test here is ignored, naming the command;
//! without `mpirun` each test says it skips, except under `CI=true`, where it fails.

#[cfg(not(feature = "mpi"))]
#[test]
#[ignore = "needs the `mpi` feature: cargo test -p smelt-bench --features mpi --test mpirun_tasks"]
fn needs_the_mpi_feature() {
    panic!("built without the `mpi` feature: run cargo test -p smelt-bench --features mpi --test mpirun_tasks");
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

    const LIMIT: Duration = Duration::from_secs(120);

    fn mpirun(args: &[&str], env: &[(&str, &str)]) -> Run {
        let prog = PathBuf::from(env!("CARGO_BIN_EXE_smelt-bench-mpi"));
        mpirun_job::service(&prog, "tasks", 4, args, env, LIMIT)
    }

    fn passes(env: &[(&str, &str)], nodes: usize) {
        let r = mpirun(&["--fib", "27", "--cutoff", "14", "--uts", "8"], env);
        assert_eq!(r.code, Some(0), "{env:?}:\n{}", r.show());
        assert!(
            r.line("smelt-bench-mpi tasks: ")
                .contains(&format!("4 ranks, {nodes} nodes")),
            "{}",
            r.show()
        );
        assert!(r.line("tasks: ").starts_with("tasks: PASS"), "{}", r.show());
        for job in ["fanout", "fib", "uts"] {
            assert!(
                r.show().contains(&format!("tasks: PASS {job}")),
                "{job}: {}",
                r.show()
            );
        }
        assert_eq!(r.field("tasks: PASS fib", "result"), "Some(196418)");
        assert!(!r.show().contains("FAIL"), "{}", r.show());
        assert!(r.leftovers.is_empty(), "left behind: {:?}", r.leftovers);
    }

    #[test]
    fn emulated_nodes_of_two_ranks() {
        if !have_mpirun("emulated_nodes_of_two_ranks") {
            return;
        }
        passes(&[("SMELT_RANKS_PER_NODE", "2")], 2);
    }

    #[test]
    fn every_message_over_mpi() {
        if !have_mpirun("every_message_over_mpi") {
            return;
        }
        passes(
            &[("SMELT_AM_TRANSPORT", "mpi"), ("SMELT_RANKS_PER_NODE", "2")],
            4,
        );
    }

    #[test]
    fn one_real_node() {
        if !have_mpirun("one_real_node") {
            return;
        }
        passes(&[], 1);
    }

    #[test]
    fn a_panicking_task_fails_every_rank_with_its_message() {
        if !have_mpirun("a_panicking_task_fails_every_rank_with_its_message") {
            return;
        }
        let r = mpirun(&["--panic"], &[("SMELT_RANKS_PER_NODE", "2")]);
        let out = r.show();
        for rank in 0..4 {
            assert!(
                out.contains(&format!("panic: rank {rank} PASS")),
                "rank {rank}:\n{out}"
            );
        }
        assert!(r.leftovers.is_empty(), "left behind: {:?}", r.leftovers);
    }
}
