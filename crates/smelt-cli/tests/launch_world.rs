//! `smelt launch` starts a world: a program written against `World::from_env` (the
//! example `world_member` of smelt-world) makes tree collectives (`auto`), a mesh, a
//! shared region, active messages, an aggregator and a global array in the launched
//! job, each checked against a sequential result, on the CPUs the launcher pinned it
//! to; nothing is left in the segment directory.

use std::path::PathBuf;
use std::process::Command;

fn world_member() -> PathBuf {
    // Integration tests live in target/<profile>/deps; examples are built beside.
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let st = Command::new(env!("CARGO"))
        .args(["build", "-p", "smelt-world", "--example", "world_member"])
        .status()
        .unwrap();
    assert!(st.success());
    let p = dir.join("examples").join("world_member");
    assert!(p.exists(), "{}", p.display());
    p
}

#[test]
fn launched_members_join_a_world_and_make_services() {
    let program = world_member();
    let dir = tempfile::tempdir().unwrap();
    for n in [1usize, 3, 6] {
        let out = Command::new(env!("CARGO_BIN_EXE_smelt"))
            .args(["launch", "-n", &n.to_string(), "--"])
            .arg(&program)
            .arg("30")
            .env("SMELT_SHM_DIR", dir.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "n={n}: {stdout} {stderr}");
        for r in 0..n {
            let line = stdout
                .lines()
                .find(|l| l.starts_with(&format!("ok: member {r} of {n} (CPU ")));
            assert!(
                line.is_some_and(|l| l.ends_with("aggregation and a global array checked")),
                "n={n}: {stdout} {stderr}"
            );
        }
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "nothing left in the segment directory"
        );
    }
}

#[test]
fn a_world_member_without_a_launcher_names_the_variable() {
    let out = Command::new(world_member())
        .env_remove("SMELT_JOB")
        .env_remove("SMELT_JOB_KEY")
        .env_remove("SMELT_RANK")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("SMELT_JOB is not set"), "{stderr}");
    assert!(stderr.contains("smelt launch"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}
