//! Fortran on a world: `examples/fortran/world.F90` (with the module
//! `include/smelt.f90`) gets its world from `smelt launch`'s environment and, with the
//! `mpi` feature, from `MPI_COMM_WORLD` under `mpirun` (`smelt_world_from_mpi_f`), and
//! checks tree collectives made from it against plain arithmetic.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{compile_fortran, lib_dir, smelt_bin};

/// Compiles the module and the example with `compiler` (gfortran, mpif90) and `flags`
/// into `dir` (None, said why, without the compiler).
fn build(compiler: &str, flags: &[&str], dir: &Path) -> Option<PathBuf> {
    let found = Command::new(compiler)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        common::skip::tool_missing(compiler);
        return None;
    }
    let flags: Vec<&str> = ["-cpp", "-Wall"]
        .into_iter()
        .chain(flags.iter().copied())
        .collect();
    Some(compile_fortran(
        compiler,
        &flags,
        "world.F90",
        dir,
        "world_f",
    ))
}

/// The one "fortran world ok" line of `stdout`, for `n` members started as `how`.
fn check_ok(stdout: &str, stderr: &str, n: usize, how: &str, rounds: usize) {
    let oks: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("fortran world ok: "))
        .collect();
    assert_eq!(
        oks,
        [format!("fortran world ok: {n} members ({how}), {rounds} rounds").as_str()],
        "{stdout}\n{stderr}"
    );
}

/// `smelt launch -n 3 -- ./world_f env 50`.
#[test]
fn fortran_world_runs_collectives_under_smelt_launch() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build("gfortran", &["-std=f2008"], dir.path()) else {
        return;
    };
    let out = Command::new(smelt_bin())
        .args(["launch", "-n", "3", "--timeout", "60", "--"])
        .arg(&exe)
        .args(["env", "50"])
        .env("LD_LIBRARY_PATH", lib_dir())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
    check_ok(&stdout, &stderr, 3, "processes", 50);
}

#[cfg(feature = "mpi")]
#[path = "../../../tests/support/mpirun_job.rs"]
mod mpirun_job;

#[cfg(feature = "mpi")]
use common::skip;

/// `mpirun -n 4 ./world_f mpi 50` in one node of 4 ranks and in emulated nodes of 2.
#[cfg(feature = "mpi")]
#[test]
fn fortran_world_runs_collectives_under_mpirun() {
    use mpirun_job::{four_ranks, have_mpirun};
    if !have_mpirun("fortran_world_runs_collectives_under_mpirun") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build("mpif90", &["-DSMELT_EXAMPLE_MPI"], dir.path()) else {
        return;
    };
    for per_node in ["4", "2"] {
        let r = four_ranks(
            &exe,
            &["mpi", "50"],
            per_node,
            &lib_dir(),
            "smelt-capi-fworld",
        );
        assert!(r.ok(), "nodes of {per_node}: {}", r.show());
        check_ok(&r.stdout, &r.stderr, 4, "MPI ranks", 50);
    }
}

/// Without the `mpi` feature, what to run instead.
#[cfg(not(feature = "mpi"))]
#[test]
#[ignore = "needs the mpi feature: cargo test -p smelt-capi --features mpi --test fortran_world"]
fn fortran_world_runs_collectives_under_mpirun() {
    panic!(
        "built without the mpi feature: run cargo test -p smelt-capi --features mpi --test fortran_world"
    );
}
