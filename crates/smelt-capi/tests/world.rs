//! C worlds: `examples/c/world.c` makes, from one `smelt_world` per member, tree
//! collectives, an active-message endpoint, an offload lane, an aggregator and a global
//! array, and checks each against sequential arithmetic, in each deployment: threads
//! (`smelt_world_run`), processes of `smelt launch` (`smelt_world_from_env`) and, with
//! the `mpi` feature, MPI ranks under `mpirun` (`smelt_world_from_mpi`, one node and
//! emulated nodes of 2). `tests/c/world_misuse.c`: mistakes are errors, not crashes or
//! hangs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::{build_and_run_file, cc, compile, lib_dir, repo_root, smelt_bin};

/// Compiles the C file `src` with `compiler` and `flags` into `dir` (None without a C
/// compiler).
fn build(compiler: Option<String>, flags: &[&str], src: &Path, dir: &Path) -> Option<PathBuf> {
    let compiler = compiler?;
    let exe = dir.join(src.file_stem().unwrap());
    let mut all = vec!["-std=c11", "-Wall", "-Werror"];
    all.extend_from_slice(flags);
    let out = compile(&compiler, &all, src, &exe, &["-lpthread"]);
    assert!(
        out.status.success(),
        "{compiler} failed on {}:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(exe)
}

fn world_c() -> PathBuf {
    repo_root().join("examples/c/world.c")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `smelt launch -n <n> -- <exe> <args>` with libsmelt.so on the library path.
fn launch(n: usize, exe: &Path, args: &[&str]) -> Output {
    Command::new(smelt_bin())
        .args(["launch", "-n", &n.to_string(), "--timeout", "60", "--"])
        .arg(exe)
        .args(args)
        .env("LD_LIBRARY_PATH", lib_dir())
        .env_remove("SMELT_JOB")
        .output()
        .unwrap()
}

/// The one "world ok" line of a run's stdout (member 0's), which must say `n` members
/// started as `how`.
fn check_ok(stdout: &str, stderr: &str, n: usize, how: &str) {
    let oks: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("world ok: "))
        .collect();
    assert_eq!(oks.len(), 1, "one member prints ok:\n{stdout}\n{stderr}");
    assert!(
        oks[0].starts_with(&format!("world ok: {n} members ({how}), ")),
        "{}",
        oks[0]
    );
}

/// Threads: 1, 2, 4 and 16 members (more threads than CPUs: 16 members of 2
/// aggregation workers each).
#[test]
fn c_world_runs_every_service_as_threads() {
    for n in ["1", "2", "4", "16"] {
        if let Some(out) = build_and_run_file(&world_c(), &["threads", n, "3"]) {
            check_ok(&out, "", n.parse().unwrap(), "threads");
        }
    }
}

/// Processes: `smelt launch -n 2` and `-n 4`.
#[test]
fn c_world_runs_every_service_under_smelt_launch() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build(cc(), &[], &world_c(), dir.path()) else {
        return;
    };
    for n in [2usize, 4] {
        let out = launch(n, &exe, &["env", "5"]);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            out.status.success(),
            "n={n}: {}\n{stdout}\n{stderr}",
            out.status
        );
        check_ok(&stdout, &stderr, n, "processes");
    }
}

/// Mistakes: no launcher, garbage environment, NULLs, bad sizes, freed and wrong-kind
/// handles, a member that makes another service than the others, bad tree names,
/// members released the wrong way; services outlive their world's handle.
#[test]
fn c_world_misuse_is_an_error() {
    let src = repo_root().join("crates/smelt-capi/tests/c/world_misuse.c");
    if let Some(out) = build_and_run_file(&src, &[]) {
        assert!(out.contains("world misuse ok"), "{out}");
    }
}

/// Two processes that make different services at the same place of the world: the
/// one that comes second fails at once naming the mismatch (never gets memory the
/// other uses for something else), and the job ends (no hang).
#[test]
fn c_world_processes_that_make_different_services_fail() {
    let dir = tempfile::tempdir().unwrap();
    let src = repo_root().join("crates/smelt-capi/tests/c/world_misuse.c");
    let Some(exe) = build(cc(), &[], &src, dir.path()) else {
        return;
    };
    let start = std::time::Instant::now();
    let out = launch(2, &exe, &["mismatch"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        start.elapsed() < std::time::Duration::from_secs(30),
        "took {:?}",
        start.elapsed()
    );
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("mismatch: "))
        .collect();
    assert_eq!(lines.len(), 2, "{stdout}\n{stderr}");
    assert!(
        lines.iter().any(|l| l.starts_with("mismatch: 1 ")
            && l.contains("every member must make the same services in the same order")),
        "{stdout}"
    );
}

#[cfg(feature = "mpi")]
use common::skip;

#[cfg(feature = "mpi")]
#[path = "../../../tests/support/mpirun_job.rs"]
mod mpirun_job;

/// `mpicc` (None, said why, without it).
#[cfg(feature = "mpi")]
fn mpicc() -> Option<String> {
    let found = Command::new("mpicc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        skip::tool_missing("mpicc");
    }
    found.then(|| "mpicc".to_string())
}

/// Builds world.c with mpicc (None, said why, without mpirun or mpicc).
#[cfg(feature = "mpi")]
fn mpi_exe(dir: &Path) -> Option<PathBuf> {
    if !mpirun_job::have_mpirun("c_world_under_mpirun") {
        return None;
    }
    build(mpicc(), &["-DSMELT_EXAMPLE_MPI"], &world_c(), dir)
}

/// 4 MPI ranks in nodes of `per_node` (SMELT_RANKS_PER_NODE): every service, checked.
#[cfg(feature = "mpi")]
fn under_mpirun(per_node: &str) {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = mpi_exe(dir.path()) else {
        return;
    };
    let r = mpirun_job::four_ranks(
        &exe,
        &["mpi", "3"],
        per_node,
        &lib_dir(),
        "smelt-capi-world",
    );
    assert!(r.ok(), "{}", r.show());
    check_ok(&r.stdout, &r.stderr, 4, "MPI ranks");
}

/// `mpirun -n 4`, one node of 4 ranks.
#[cfg(feature = "mpi")]
#[test]
fn c_world_runs_every_service_under_mpirun_on_one_node() {
    under_mpirun("4");
}

/// `mpirun -n 4`, emulated nodes of 2 ranks: collectives (a tree in each node, MPI
/// between them), active messages, aggregation and global arrays reach the other node
/// over MPI.
#[cfg(feature = "mpi")]
#[test]
fn c_world_runs_every_service_under_mpirun_in_nodes_of_2() {
    under_mpirun("2");
}

/// `mpirun -n 4` in one node and in emulated nodes of 2: member 1 broadcasts 16 bytes
/// where the others broadcast 8; every member fails with SMELT_ERR_INVALID_ARGUMENT and
/// the same message, within the job's limit.
#[cfg(feature = "mpi")]
#[test]
fn c_world_mpi_members_that_disagree_fail_together() {
    use mpirun_job::{four_ranks, have_mpirun};
    if !have_mpirun("c_world_mpi_members_that_disagree_fail_together") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = repo_root().join("crates/smelt-capi/tests/c/world_misuse.c");
    let Some(exe) = build(mpicc(), &["-DSMELT_TEST_MPI"], &src, dir.path()) else {
        return;
    };
    for per_node in ["4", "2"] {
        let r = four_ranks(
            &exe,
            &["mpi-bad-len"],
            per_node,
            &lib_dir(),
            "smelt-capi-world-bad",
        );
        assert!(r.ok(), "nodes of {per_node}: {}", r.show());
        let lines: Vec<&str> = r
            .stdout
            .lines()
            .filter(|l| l.starts_with("bad len: "))
            .collect();
        assert_eq!(lines.len(), 4, "{}", r.show());
        assert!(
            lines.iter().all(|l| *l == lines[0]) && lines[0].starts_with("bad len: 1 "),
            "nodes of {per_node}: {}",
            r.show()
        );
        assert!(lines[0].contains("16"), "{}", lines[0]);
    }
}

/// With `<mpi.h>` included first, smelt.h declares `smelt_world_from_mpi(MPI_Comm, ...)`:
/// a program builds as C99 (`-pedantic`) and as C++ and gets a world of one rank from
/// `MPI_COMM_WORLD` (a singleton MPI job, no mpirun).
#[cfg(feature = "mpi")]
#[test]
fn c_world_header_declares_from_mpi_after_mpi_h() {
    let src = r#"
#include <mpi.h>
#include <smelt.h>
int main(int argc, char **argv) {
    smelt_world *w = 0;
    size_t n = 0;
    int rc;
    MPI_Init(&argc, &argv);
    rc = smelt_world_from_mpi(MPI_COMM_WORLD, &w);
    if (rc == SMELT_OK) {
        smelt_world_size(w, &n);
        smelt_world_free(w);
    }
    MPI_Finalize();
    return rc == SMELT_OK && n == 1 ? 0 : 1;
}
"#;
    let dir = tempfile::tempdir().unwrap();
    let mut built = 0;
    for (compiler, file, flags) in [
        (
            "mpicc",
            "t.c",
            vec!["-std=c99", "-pedantic", "-Wall", "-Werror"],
        ),
        ("mpicxx", "t.cpp", vec!["-Wall", "-Werror"]),
    ] {
        let found = Command::new(compiler)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            continue;
        }
        let path = dir.path().join(file);
        std::fs::write(&path, src).unwrap();
        let exe = dir.path().join(format!("{file}.exe"));
        let out = compile(compiler, &flags, &path, &exe, &[]);
        assert!(out.status.success(), "{compiler}: {}", text(&out.stderr));
        let run = Command::new(&exe)
            .env("LD_LIBRARY_PATH", lib_dir())
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .output()
            .unwrap();
        assert!(
            run.status.success(),
            "{file}: {}\n{}{}",
            run.status,
            text(&run.stdout),
            text(&run.stderr)
        );
        built += 1;
    }
    if built == 0 {
        skip::tool_missing("mpicc or mpicxx");
    }
}

/// Without the `mpi` feature, what to run instead.
#[cfg(not(feature = "mpi"))]
#[test]
#[ignore = "needs the mpi feature: cargo test -p smelt-capi --features mpi --test world"]
fn c_world_runs_every_service_under_mpirun() {
    panic!(
        "built without the mpi feature: run cargo test -p smelt-capi --features mpi --test world"
    );
}
