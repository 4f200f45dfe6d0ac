//! Builds the Fortran module `include/smelt.f90` and the OpenMP example
//! `examples/fortran/omp_barrier.f90` with gfortran against the libsmelt that cargo
//! built for this test (found next to the test executable, as in `c_examples.rs`),
//! runs it, and checks its output. Skipped (with a note on stderr) without gfortran.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::{compile_fortran, lib_dir};

fn have_gfortran() -> bool {
    let found = Command::new("gfortran")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        common::skip::tool_missing("gfortran");
    }
    found
}

/// Compiles the module and the example into `dir/omp_barrier` (the module's .mod file
/// goes to `dir` too) and returns the executable's path.
fn build(dir: &Path) -> PathBuf {
    compile_fortran(
        "gfortran",
        &["-fopenmp", "-std=f2008", "-Wall"],
        "omp_barrier.f90",
        dir,
        "omp_barrier",
    )
}

/// Runs the example with `n` OpenMP threads (= members) and `args`.
fn run(exe: &Path, n: usize, args: &[&str]) -> Output {
    Command::new(exe)
        .args(args)
        .env("LD_LIBRARY_PATH", lib_dir())
        .env("OMP_NUM_THREADS", n.to_string())
        .output()
        .unwrap()
}

/// Builds and runs the example with `n` members and `args`, asserts that it succeeded
/// and printed the OK line for `n` members, `rounds` barriers and the sum 1 + ... + n.
fn check_example(n: usize, args: &[&str], rounds: usize) {
    if !have_gfortran() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path());
    let out = run(&exe, n, args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "omp_barrier with {n} members failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let sum = n * (n + 1) / 2;
    let ok = format!("fortran: {n} members, {rounds} barriers, allreduce sum = {sum}, OK");
    assert!(stdout.contains(&ok), "expected `{ok}` in:\n{stdout}");
    assert!(
        stdout.contains(&format!("{n} members, root CPU ")),
        "{stdout}"
    );
}

#[test]
fn fortran_example_2_members() {
    check_example(2, &[], 200);
}

/// More OpenMP threads than this machine's CPUs: the members run unpinned.
#[test]
fn fortran_example_8_members() {
    check_example(8, &[], 200);
}

/// A model file (2 sockets x 6 cores): the tree spans its first 4 CPUs, passed to
/// smelt_tree_build as an explicit list.
#[test]
fn fortran_example_with_a_model_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.json");
    smelt_model::synthetic(2, 6, 40.0, 60.0, 3.0)
        .save(&path)
        .unwrap();
    check_example(4, &[path.to_str().unwrap(), "50"], 50);
}

/// A failing call ends the program non-zero, with smelt_last_error's message (through
/// the module's smelt_error_message) on stderr.
#[test]
fn fortran_example_reports_a_missing_model_file() {
    if !have_gfortran() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path());
    let out = run(&exe, 2, &["/nonexistent/model.json"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("smelt_model_load"), "{err}");
    assert!(
        err.contains("/nonexistent/model.json: No such file"),
        "{err}"
    );
}
