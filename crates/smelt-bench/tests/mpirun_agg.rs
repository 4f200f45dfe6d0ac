//! Aggregation across MPI ranks: the `smelt-bench-mpi agg` program under
//! `mpirun --oversubscribe -np 4`, on emulated nodes of 2 ranks
//! (`SMELT_RANKS_PER_NODE=2`: shared memory inside a node, MPI between), 2 worker
//! threads per rank: every item inserted by the 8 workers arrives once, at its worker
//! (checksums over all ranks), for the four aggregation schemes and no aggregation,
//! with explicit and idle flushes; and with every message over MPI
//! (`SMELT_AM_TRANSPORT=mpi`).
//!
//! Needs `mpirun` and the `mpi` feature:
//! `cargo test -p smelt-bench --features mpi --test mpirun_agg`. Without the feature the
//! test here is ignored, naming the command; without `mpirun` each test says it
//! skips, except under `CI=true`, where it fails.

#[cfg(not(feature = "mpi"))]
#[test]
#[ignore = "needs the `mpi` feature: cargo test -p smelt-bench --features mpi --test mpirun_agg"]
fn needs_the_mpi_feature() {
    panic!(
        "built without the `mpi` feature: run cargo test -p smelt-bench --features mpi --test mpirun_agg"
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
    use super::mpirun_job::{self, have_mpirun};
    use std::path::PathBuf;
    use std::time::Duration;

    fn passes(flush: &str, var: (&str, &str), nodes: &str) {
        let prog = PathBuf::from(env!("CARGO_BIN_EXE_smelt-bench-mpi"));
        let r = mpirun_job::service(
            &prog,
            "agg",
            4,
            &["--workers", "2", "--items", "2000", "--flush", flush],
            &[var],
            Duration::from_secs(180),
        );
        assert_eq!(r.code, Some(0), "{}", r.show());
        for scheme in ["WW", "WPs", "WsP", "PP", "none"] {
            let p = format!("agg: PASS scheme={scheme} ");
            assert!(r.line(&p).starts_with(&p), "{}", r.show());
            assert_eq!(r.field(&p, "nodes"), nodes);
            assert_eq!(r.field(&p, "items"), "16000");
        }
        assert!(r.leftovers.is_empty(), "left behind: {:?}", r.leftovers);
    }

    #[test]
    fn checksums_across_emulated_nodes() {
        if have_mpirun("checksums_across_emulated_nodes") {
            passes("explicit", ("SMELT_RANKS_PER_NODE", "2"), "2");
        }
    }

    #[test]
    fn checksums_with_every_message_over_mpi() {
        if have_mpirun("checksums_with_every_message_over_mpi") {
            passes("explicit", ("SMELT_AM_TRANSPORT", "mpi"), "4");
        }
    }

    #[test]
    fn checksums_across_emulated_nodes_idle_flush() {
        if have_mpirun("checksums_across_emulated_nodes_idle_flush") {
            passes("idle", ("SMELT_RANKS_PER_NODE", "2"), "2");
        }
    }
}
