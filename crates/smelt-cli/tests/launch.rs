//! `smelt launch`: a Rust member program through every collective, a member that fails,
//! signals (and members that ignore them), members that never join, a launcher killed
//! by SIGKILL, escaped names, and nothing left in shared memory.

use std::io::Read as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
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

/// Segments in `dir`.
fn segments(dir: &Path) -> usize {
    std::fs::read_dir(dir)
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
    // A directory of its own: other tests' jobs come and go in /dev/shm meanwhile.
    let shm = PathBuf::from(format!("/dev/shm/launch-test-{}-fail", std::process::id()));
    std::fs::create_dir_all(&shm).unwrap();
    let t = Instant::now();
    let out = smelt()
        .env("SMELT_SHM_DIR", &shm)
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
    assert_eq!(segments(&shm), 0, "a segment was left in {}", shm.display());
    let _ = std::fs::remove_dir_all(&shm);
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
    // A notice about the model (none cached for this host) may come first.
    let lines: Vec<&str> = err
        .trim()
        .lines()
        .filter(|l| !l.starts_with("notice:"))
        .collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].starts_with("error:"), "{err}");
}

#[test]
fn joining_by_hand_without_a_launcher_says_how() {
    let out = Command::new(member_program()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("smelt launch"));
}

/// A fresh empty directory for one test.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("smelt-launch-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Waits for `child` at most `limit`; None (after killing it) if it did not end.
fn wait_bounded(child: &mut std::process::Child, limit: Duration) -> Option<ExitStatus> {
    let t = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return Some(st);
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The lines each member wrote to `dir/m.RANK` (`pid [more]`), once all `n` did.
fn member_reports(dir: &Path, n: usize) -> Vec<(u32, String)> {
    let t = Instant::now();
    loop {
        let got: Vec<Option<(u32, String)>> = (0..n)
            .map(|r| {
                let s = std::fs::read_to_string(dir.join(format!("m.{r}"))).ok()?;
                let line = s.lines().next()?;
                let (pid, rest) = line.split_once(' ').unwrap_or((line, ""));
                Some((pid.parse().ok()?, rest.to_string()))
            })
            .collect();
        if got.iter().all(Option::is_some) {
            return got.into_iter().flatten().collect();
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the members did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// True once process `pid` is gone (a zombie whose parent died counts as gone: it
/// runs nothing, and an init that does not reap is not the launcher's fault).
fn is_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

/// Polls `done` for at most `limit`.
fn eventually(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}

fn kill_all(pids: &[u32]) {
    for p in pids {
        let _ = Command::new("kill")
            .args(["-KILL", &p.to_string()])
            .status();
    }
}

/// Cleans up after a launcher that failed a test: its members and its segment.
fn clean_up(reports: &[(u32, String)]) {
    kill_all(&reports.iter().map(|m| m.0).collect::<Vec<_>>());
    for (_, segment) in reports {
        let _ = std::fs::remove_file(segment);
    }
}

fn signal(pid: u32, sig: &str) {
    Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .unwrap();
}

/// A member that ignores TERM, INT and HUP (as does the `sleep` it becomes) and
/// reports its pid and the job's segment in `dir/m.RANK`.
fn stubborn_member(dir: &Path) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!(
            "trap '' TERM INT HUP; echo \"$$ $SMELT_JOB\" > {}/m.$SMELT_RANK; exec sleep 60",
            dir.display()
        ),
    ]
}

/// `smelt launch -n 2 --grace GRACE` of two [`stubborn_member`]s, once both run: the
/// launcher, the members' reports and their pids.
fn launch_stubborn(
    dir: &Path,
    grace: &str,
    stderr: Stdio,
) -> (std::process::Child, Vec<(u32, String)>, Vec<u32>) {
    let child = smelt()
        .args(["launch", "-n", "2", "--grace", grace, "--"])
        .args(stubborn_member(dir))
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let reports = member_reports(dir, 2);
    let pids = reports.iter().map(|m| m.0).collect();
    (child, reports, pids)
}

#[test]
fn members_that_ignore_the_forwarded_signal_are_killed_after_grace() {
    let dir = scratch("grace");
    let (mut child, reports, pids) = launch_stubborn(&dir, "1", Stdio::piped());
    let t = Instant::now();
    signal(child.id(), "INT");
    let st = wait_bounded(&mut child, Duration::from_secs(25));
    let elapsed = t.elapsed();
    if st.is_none() {
        clean_up(&reports);
        panic!("the launcher kept waiting for members that ignore the signal");
    }
    assert!(!st.unwrap().success());
    assert!(
        elapsed >= Duration::from_millis(900),
        "{elapsed:?}: no grace"
    );
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(err.contains("killing the 2 member(s)"), "{err}");
    assert!(
        eventually(Duration::from_secs(10), || pids.iter().all(|&p| is_gone(p))),
        "members still run"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_second_interrupt_kills_the_members_at_once() {
    let dir = scratch("second");
    let (mut child, reports, pids) = launch_stubborn(&dir, "120", Stdio::null());
    let t = Instant::now();
    // Interrupts until the launcher ends (two are enough; more only guard against
    // two arriving at the same turn of its loop on a loaded machine).
    let st = loop {
        signal(child.id(), "INT");
        if let Some(st) = wait_bounded_quiet(&mut child, Duration::from_millis(300)) {
            break Some(st);
        }
        if t.elapsed() > Duration::from_secs(25) {
            break None;
        }
    };
    if st.is_none() {
        let _ = child.kill();
        let _ = child.wait();
        clean_up(&reports);
        panic!("a second interrupt did not end the job");
    }
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    assert!(
        eventually(Duration::from_secs(10), || pids.iter().all(|&p| is_gone(p))),
        "members still run"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// As [`wait_bounded`], leaving the child running when it did not end.
fn wait_bounded_quiet(child: &mut std::process::Child, limit: Duration) -> Option<ExitStatus> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if let Some(st) = child.try_wait().unwrap() {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

#[test]
fn kill_9_of_the_launcher_ends_the_members_and_removes_the_segment() {
    let dir = scratch("kill9");
    let mut child = smelt()
        .args(["launch", "-n", "2", "--", "sh", "-c"])
        .arg(format!(
            "echo \"$$ $SMELT_JOB\" > {}/m.$SMELT_RANK; exec sleep 60",
            dir.display()
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let reports = member_reports(&dir, 2);
    let pids: Vec<u32> = reports.iter().map(|m| m.0).collect();
    let segment = PathBuf::from(&reports[0].1);
    // The members never join: the segment's name is still there.
    assert!(segment.exists(), "{}", segment.display());
    child.kill().unwrap();
    child.wait().unwrap();
    let members_gone = eventually(Duration::from_secs(10), || pids.iter().all(|&p| is_gone(p)));
    let segment_gone = eventually(Duration::from_secs(10), || !segment.exists());
    kill_all(&pids);
    let _ = std::fs::remove_file(&segment);
    assert!(members_gone, "members outlived their launcher");
    assert!(segment_gone, "{} outlived its launcher", segment.display());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_member_that_exits_0_before_joining_fails_the_job_at_once() {
    let t = Instant::now();
    let out = smelt()
        .args(["launch", "-n", "3", "--timeout", "40", "--", "sh", "-c"])
        .arg(format!(
            "if [ \"$SMELT_RANK\" = 1 ]; then exit 0; fi; exec {} 50",
            member_program().display()
        ))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "{:?}: {err}",
        t.elapsed()
    );
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("smelt launch: member 1 (sh) exited with status 0 before joining the job"),
        "{err}"
    );
}

#[test]
fn members_that_never_join_may_all_succeed() {
    // A program that is no smelt member (nobody joins) is fine, as under mpirun.
    let out = smelt()
        .args(["launch", "-n", "3", "--", "true"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn control_characters_in_the_program_name_are_escaped() {
    let dir = scratch("escape");
    let prog = dir.join("mem\x1bber");
    std::fs::write(&prog, "#!/bin/sh\nexit 3\n").unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = smelt()
        .args(["launch", "-n", "2", "--"])
        .arg(&prog)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(!err.contains('\x1b'), "a raw escape character: {err:?}");
    assert!(err.contains("mem\\x1bber) exited with status 3"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_fifo_model_is_one_reason_once() {
    let dir = scratch("fifo");
    let fifo = dir.join("model.json");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let mut child = smelt()
        .args(["launch", "-n", "1", "--model"])
        .arg(&fifo)
        .args(["--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let st = wait_bounded(&mut child, Duration::from_secs(20)).expect("a FIFO model hangs");
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(st.code(), Some(2), "{err}");
    assert_eq!(err.matches("FIFO").count(), 1, "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_job_key_is_not_in_the_segment_name() {
    let out = smelt()
        .args([
            "launch",
            "-n",
            "1",
            "--",
            "sh",
            "-c",
            "echo \"$SMELT_JOB $SMELT_JOB_KEY\"",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let s = String::from_utf8_lossy(&out.stdout);
    let (path, key) = s.trim().split_once(' ').unwrap();
    assert_eq!(key.len(), 32, "{s}");
    assert!(key.bytes().all(|b| b.is_ascii_hexdigit()), "{s}");
    assert!(path.contains("/smelt-"), "{s}");
    assert!(!path.contains(key), "the key is readable in the name: {s}");
}
