//! `smelt launch`: a Rust member program through every collective, a member that fails,
//! signals, and nothing left in shared memory.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

fn member_program() -> PathBuf {
    // Integration tests live in target/<profile>/deps; cargo builds examples beside.
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let p = dir.join("examples").join("launch_member");
    if !p.exists() {
        // `cargo test` with a target filter does not build examples.
        let st = Command::new(env!("CARGO"))
            .args(["build", "-p", "smelt-cli", "--example", "launch_member"])
            .status()
            .unwrap();
        assert!(st.success());
    }
    assert!(p.exists(), "{}", p.display());
    p
}

fn smelt() -> Command {
    Command::new(env!("CARGO_BIN_EXE_smelt"))
}

fn segments() -> usize {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("smelt-"))
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn launch_runs_every_collective_in_processes() {
    for n in [1usize, 2, 5, 8] {
        let out = smelt()
            .args(["launch", "-n", &n.to_string(), "--"])
            .arg(member_program())
            .arg("50")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "n={n}: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains(&format!("ok: {n} members")), "{stdout}");
    }
}

#[test]
fn a_failing_member_tears_the_job_down_with_its_status() {
    let before = segments();
    let t = Instant::now();
    let out = smelt()
        .args(["launch", "-n", "4", "--"])
        .arg(member_program())
        .args(["100000", "fail-at", "2", "10"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("member 2"), "{err}");
    assert!(t.elapsed() < Duration::from_secs(20));
    assert!(segments() <= before, "a segment was left in /dev/shm");
}

#[test]
fn sigterm_is_forwarded_to_every_member() {
    let mut child = smelt()
        .args(["launch", "-n", "3", "--", "sleep", "30"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let st = child.wait().unwrap();
    assert!(t.elapsed() < Duration::from_secs(10));
    assert!(!st.success());
}

#[test]
fn a_program_that_cannot_start_is_one_error_line() {
    let out = smelt()
        .args(["launch", "-n", "2", "--", "/nonexistent/program"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.starts_with("error:"), "{err}");
}

#[test]
fn joining_by_hand_without_a_launcher_says_how() {
    let out = Command::new(member_program()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("smelt launch"));
}
