//! Active messages across MPI ranks: the `smelt-bench-mpi am` program under
//! `mpirun --oversubscribe -np 4`, on emulated nodes of 2 ranks
//! (`SMELT_RANKS_PER_NODE=2`), with every message over MPI (`SMELT_AM_TRANSPORT=mpi`)
//! and on one real node (shared memory only). Each run checks the program's verdicts:
//! floods through 2-slot queues and a 2-send MPI window deliver every request and reply
//! once, in order, with their checksums and data blocks; requests with a wrong tag and
//! to an unknown handler come back to their senders' handler 0 (across nodes too); the
//! histogram's blocks add up to every update; LogP prints its figures (never checked
//! against a time). Also: a bad argument fails at every rank without hanging, and
//! nothing is left in shared memory.
//!
//! Needs `mpirun` (Open MPI or MPICH) and the `mpi` feature:
//! `cargo test -p smelt-bench --features mpi --test mpirun_am`. Without the feature the
//! test here is ignored, naming the command; without `mpirun` each test says it
//! skips, except under `CI=true`, where it fails.

#[cfg(not(feature = "mpi"))]
#[test]
#[ignore = "needs the `mpi` feature: cargo test -p smelt-bench --features mpi --test mpirun_am"]
fn needs_the_mpi_feature() {
    panic!(
        "built without the `mpi` feature: run cargo test -p smelt-bench --features mpi --test mpirun_am"
    );
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
    use std::process::Command;
    use std::time::Duration;

    const LIMIT: Duration = Duration::from_secs(180);

    fn program() -> PathBuf {
        PathBuf::from(env!("CARGO_BIN_EXE_smelt-bench-mpi"))
    }

    /// Runs the program on `np` ranks with `args` and `env`, killing the whole job
    /// after `limit`.
    fn mpirun(np: usize, args: &[&str], env: &[(&str, &str)], limit: Duration) -> Run {
        mpirun_job::service(&program(), "am", np, args, env, limit)
    }

    /// Small sizes: 4 ranks share 2 CPUs.
    const ALL: &[&str] = &[
        "all",
        "--count",
        "300",
        "--bulk-every",
        "7",
        "--rounds",
        "20",
        "--stream",
        "200",
        "--samples",
        "1",
        "--bulk",
        "20000",
        "--updates",
        "2000",
        "--per-message",
        "3",
        "--timeout",
        "60",
    ];

    /// Flood, LogP and histogram pass on 4 ranks with `env`; returns the run.
    fn passes(env: &[(&str, &str)], nodes: usize, transport: &str) -> Run {
        let r = mpirun(4, ALL, env, LIMIT);
        assert_eq!(r.code, Some(0), "{env:?}:\n{}", r.show());
        // The flood: every request and reply once, in order, checksums and data
        // blocks intact (checked at every rank); the wrong-tag request and the one to
        // an unknown handler came back once from each other rank.
        assert!(r.line("flood: ").starts_with("flood: PASS"), "{}", r.show());
        assert_eq!(r.field("flood: PASS", "nodes"), nodes.to_string());
        assert_eq!(r.field("flood: PASS", "transport"), transport);
        assert_eq!(r.field("flood: PASS", "returned_per_rank"), "6");
        assert_eq!(r.field("flood: PASS", "requests_per_pair"), "300");
        // Rank 0's endpoint reaches the others over MPI as the layout says.
        let remote = match nodes {
            1 => 0,
            2 => 2,
            _ => 3,
        };
        assert_eq!(
            r.field("flood: PASS", "remote_peers_of_rank0"),
            remote.to_string()
        );
        // LogP: one JSON object with every figure's key.
        let j = r.line("{\"am_logp\":");
        for key in [
            "\"rtt_ns\":",
            "\"l_ns\":",
            "\"o_s_ns\":",
            "\"o_r_ns\":",
            "\"g_ns\":",
            "\"big_g_ns_per_byte\":",
        ] {
            assert!(j.contains(key), "{key} missing from {j}");
        }
        assert!(j.contains(&format!("\"remote\":{}", nodes > 1)), "{j}");
        assert!(r.line("logp: ").starts_with("logp: PASS"), "{}", r.show());
        // The histogram: every block holds what the updates put in it, and the
        // blocks add up to every update.
        assert!(
            r.line("histogram: ").starts_with("histogram: PASS"),
            "{}",
            r.show()
        );
        assert_eq!(
            r.field("histogram: PASS", "checksum"),
            r.field("histogram: PASS", "expected")
        );
        assert_eq!(r.field("histogram: PASS", "checksum"), "8000");
        assert!(r.leftovers.is_empty(), "left behind: {:?}", r.leftovers);
        r
    }

    #[test]
    fn emulated_nodes_of_two_ranks() {
        if !have_mpirun("emulated_nodes_of_two_ranks") {
            return;
        }
        passes(&[("SMELT_RANKS_PER_NODE", "2")], 2, "emulated-nodes:2");
    }

    #[test]
    fn every_message_over_mpi() {
        if !have_mpirun("every_message_over_mpi") {
            return;
        }
        // Emulated nodes are overridden: every rank is its own node.
        passes(
            &[("SMELT_AM_TRANSPORT", "mpi"), ("SMELT_RANKS_PER_NODE", "2")],
            4,
            "mpi",
        );
    }

    #[test]
    fn one_real_node() {
        if !have_mpirun("one_real_node") {
            return;
        }
        passes(&[], 1, "shm");
    }

    #[test]
    fn a_window_of_one_send_in_flight() {
        if !have_mpirun("a_window_of_one_send_in_flight") {
            return;
        }
        let r = mpirun(
            4,
            &[
                "flood",
                "--count",
                "200",
                "--in-flight",
                "1",
                "--capacity",
                "2",
            ],
            &[("SMELT_AM_TRANSPORT", "mpi")],
            LIMIT,
        );
        assert_eq!(r.code, Some(0), "{}", r.show());
        assert!(r.line("flood: ").starts_with("flood: PASS"), "{}", r.show());
    }

    #[test]
    fn a_bad_argument_fails_at_every_rank_without_hanging() {
        if !have_mpirun("a_bad_argument_fails_at_every_rank_without_hanging") {
            return;
        }
        // A LogP pair with a rank that does not exist: every rank says FAIL.
        let r = mpirun(
            4,
            &["logp", "--pair", "0,9", "--timeout", "20"],
            &[("SMELT_RANKS_PER_NODE", "2")],
            LIMIT,
        );
        assert_ne!(r.code, Some(0), "{}", r.show());
        assert!(r.code.is_some(), "killed after the limit:\n{}", r.show());
        assert!(r.line("logp: ").starts_with("logp: FAIL"), "{}", r.show());
        assert!(r.leftovers.is_empty(), "left behind: {:?}", r.leftovers);
        // A transport that does not exist: refused before MPI is set up.
        let r = mpirun(
            2,
            &["flood"],
            &[("SMELT_AM_TRANSPORT", "carrier-pigeon")],
            LIMIT,
        );
        assert_ne!(r.code, Some(0), "{}", r.show());
        assert!(r.code.is_some(), "killed after the limit:\n{}", r.show());
        assert!(
            r.stderr.contains("SMELT_AM_TRANSPORT"),
            "no word of the variable:\n{}",
            r.show()
        );
    }

    #[test]
    fn usage_errors_without_mpirun() {
        let out = Command::new(program())
            .args(["am", "--frobnicate"])
            .output()
            .expect("run smelt-bench-mpi am");
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("usage: smelt-bench-mpi am"));
        // The driver itself: no service, or one it does not know, is its usage line.
        for args in [&[][..], &["carrier-pigeon"][..]] {
            let out = Command::new(program())
                .args(args)
                .output()
                .expect("run smelt-bench-mpi");
            assert_eq!(out.status.code(), Some(2), "{args:?}");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("usage: mpirun -np N smelt-bench-mpi am|agg|global|tasks"),
                "{err}"
            );
        }
    }
}
