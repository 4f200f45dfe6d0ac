//! C programs as processes of one job: `examples/c/launch_collectives.c` is compiled
//! against the libsmelt cargo built for this test and run through the real launcher,
//! `smelt launch -n N -- ./launch_collectives` (smelt_job_join, every collective,
//! smelt_job_leave), and without a launcher (a clear error, not a crash).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::{cc, compile, lib_dir, repo_root, smelt_bin};

/// Compiles `examples/c/launch_collectives.c` into `dir` (None without a C compiler).
fn build_example(dir: &Path) -> Option<PathBuf> {
    let cc = cc()?;
    let exe = dir.join("launch_collectives");
    let src = repo_root().join("examples/c/launch_collectives.c");
    let out = compile(&cc, &["-std=c11", "-Wall", "-Werror"], &src, &exe, &[]);
    assert!(
        out.status.success(),
        "{cc} failed on launch_collectives.c:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(exe)
}

/// `smelt launch -n <n> -- <exe> <args>`, with libsmelt.so on the library path and
/// `SMELT_TUNE` set to `tune` (the job's `auto` table: what runs the barrier, the
/// allreduce and every collective's agreement step).
fn launch(n: usize, exe: &Path, args: &[&str], tune: &str) -> Output {
    Command::new(smelt_bin())
        .args(["launch", "-n", &n.to_string(), "--timeout", "20", "--"])
        .arg(exe)
        .args(args)
        .env("LD_LIBRARY_PATH", lib_dir())
        .env("SMELT_TUNE", tune)
        .output()
        .unwrap()
}

/// Trees only, then the non-tree algorithms between the processes.
const TUNES: [&str; 2] = ["", "barrier=dissemination;allreduce=recursive-doubling"];

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn c_processes_run_every_collective_under_smelt_launch() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build_example(dir.path()) else {
        return;
    };
    for (n, tune) in [
        (4usize, TUNES[0]),
        (1, TUNES[0]),
        (4, TUNES[1]),
        (5, TUNES[1]),
    ] {
        let out = launch(n, &exe, &["100"], tune);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            out.status.success(),
            "n={n}: {}\n{stdout}\n{stderr}",
            out.status
        );
        let ok = format!("ok: {n} members, 100 rounds of barrier, broadcast, reduce, allreduce");
        assert_eq!(
            stdout.lines().filter(|l| l.starts_with("ok: ")).count(),
            1,
            "n={n}: only rank 0 prints ok:\n{stdout}"
        );
        assert!(
            stdout.lines().any(|l| l == ok),
            "n={n}:\n{stdout}\n{stderr}"
        );
    }
}

/// A member whose broadcast len differs fails the collective on every process with
/// the same status (SMELT_ERR_INVALID_ARGUMENT, also in the processes that did not
/// record it) and message.
#[test]
fn c_processes_fail_together() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build_example(dir.path()) else {
        return;
    };
    for tune in TUNES {
        fail_together(&exe, tune);
    }
}

fn fail_together(exe: &Path, tune: &str) {
    let out = launch(4, exe, &["1", "bad-len", "2"], tune);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
    let msgs: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.split_once(" failed together: ").map(|(_, m)| m))
        .collect();
    assert_eq!(msgs.len(), 4, "{stdout}\n{stderr}");
    assert!(msgs.iter().all(|m| *m == msgs[0]), "{stdout}");
    assert!(
        msgs[0].starts_with("member 2 ") && msgs[0].contains("smelt_broadcast: len 16"),
        "{tune}: {stdout}"
    );
}

#[test]
fn c_program_without_a_launcher_fails_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build_example(dir.path()) else {
        return;
    };
    let mut cmd = Command::new(&exe);
    for v in [
        "SMELT_JOB",
        "SMELT_JOB_KEY",
        "SMELT_RANK",
        "SMELT_SIZE",
        "SMELT_CPU",
    ] {
        cmd.env_remove(v);
    }
    let out = cmd.env("LD_LIBRARY_PATH", lib_dir()).output().unwrap();
    let stderr = text(&out.stderr);
    // Exit status 2 (the example's "cannot join"), not a signal.
    assert_eq!(out.status.code(), Some(2), "{}: {stderr}", out.status);
    assert!(stderr.contains("cannot join a job"), "{stderr}");
    assert!(stderr.contains("SMELT_JOB is not set"), "{stderr}");
    assert!(stderr.contains("smelt launch"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");

    // A stale job (its segment gone): also an error code and one line.
    let out = Command::new(&exe)
        .env("SMELT_JOB", dir.path().join("no-such-segment"))
        .env("SMELT_JOB_KEY", "0123456789abcdef0123456789abcdef")
        .env("SMELT_RANK", "0")
        .env("SMELT_SIZE", "1")
        .env("LD_LIBRARY_PATH", lib_dir())
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{}: {stderr}", out.status);
    assert!(
        stderr.contains("cannot join a job: smelt_job_join: "),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}
