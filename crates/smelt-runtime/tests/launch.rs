//! The library launcher (`smelt_runtime::launch`) and guarded jobs: members pinned, in
//! one process group, signalled (also one that left the group), killed and reaped on
//! drop; a guarded segment's name gone when its creator is killed by SIGKILL; the key
//! never in the name.
//!
//! The SIGKILL test re-runs this binary as the creator (`TEST_SMELT_TEST_CREATOR=1`).

use smelt_runtime::launch::{spawn_member, Members};
use smelt_runtime::process::GroupJob;
use smelt_runtime::{CpuId, GroupConfig, Rank};
use smelt_transport::members::process_group_of;
use smelt_tree::Tree;
use std::io::{BufRead as _, BufReader};
use std::os::unix::process::ExitStatusExt as _;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

fn sleeper() -> Command {
    let mut c = Command::new("sleep");
    c.arg("60").stdout(Stdio::null());
    c
}

/// Polls `members` until every member ended (at most 20 s), by rank.
fn wait_all(members: &mut Members) -> Vec<ExitStatus> {
    let mut out = vec![None; members.len()];
    let t = Instant::now();
    while members.running() > 0 {
        for (r, st) in members.poll() {
            out[r] = Some(st);
        }
        assert!(t.elapsed() < Duration::from_secs(20), "members still run");
        std::thread::sleep(Duration::from_millis(5));
    }
    out.into_iter().map(|s| s.expect("reaped")).collect()
}

fn two_member_tree() -> Tree {
    Tree::from_raw(vec![0, 1], 0, vec![vec![1], vec![]]).unwrap()
}

#[test]
fn members_share_one_process_group_led_by_the_first_and_die_by_kill() {
    let mut members = Members::new();
    for _ in 0..3 {
        members.spawn(&mut sleeper(), None).unwrap();
    }
    let leader = members.pid(Rank(0)).unwrap();
    assert_eq!(members.group(), Some(leader));
    for r in 0..3 {
        assert_eq!(
            process_group_of(members.pid(Rank(r)).unwrap()),
            Some(leader)
        );
    }
    // Not the test's own group: signalling the members never reaches the caller.
    assert_ne!(process_group_of(std::process::id()), Some(leader));
    members.kill();
    for st in wait_all(&mut members) {
        assert_eq!(st.signal(), Some(9), "{st:?}");
    }
}

#[test]
fn a_member_that_left_the_group_still_gets_the_signal() {
    let mut members = Members::new();
    members.spawn(&mut sleeper(), None).unwrap();
    // Member 1 is no group leader, so setsid runs sleep in a session of its own.
    let mut c = Command::new("setsid");
    c.args(["sleep", "60"]);
    members.spawn(&mut c, None).unwrap();
    let pid = members.pid(Rank(1)).unwrap();
    let t = Instant::now();
    while process_group_of(pid) != Some(pid) {
        assert!(t.elapsed() < Duration::from_secs(20), "setsid did not run");
        std::thread::sleep(Duration::from_millis(5));
    }
    members.signal(15);
    for st in wait_all(&mut members) {
        assert_eq!(st.signal(), Some(15), "{st:?}");
    }
}

#[test]
fn dropping_members_kills_and_reaps_them() {
    let mut members = Members::new();
    members.spawn(&mut sleeper(), None).unwrap();
    members.spawn(&mut sleeper(), None).unwrap();
    let pids: Vec<u32> = (0..2).map(|r| members.pid(Rank(r)).unwrap()).collect();
    drop(members);
    for p in pids {
        // Reaped, not even a zombie (the pid is not reused this fast).
        assert!(!PathBuf::from(format!("/proc/{p}")).exists(), "member {p}");
    }
}

#[test]
fn a_member_is_pinned_to_its_cpu() {
    let cpus = smelt_transport::allowed_cpus().unwrap();
    let cpu = *cpus.last().unwrap();
    let mut c = Command::new("grep");
    c.args(["Cpus_allowed_list", "/proc/self/status"]);
    c.stdout(Stdio::piped());
    let out = spawn_member(&mut c, Some(CpuId(cpu)), None)
        .unwrap()
        .wait_with_output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        s.split_whitespace().nth(1),
        Some(cpu.to_string().as_str()),
        "{s}"
    );
}

#[test]
fn the_key_is_not_in_the_segment_name() {
    for guarded in [false, true] {
        let cfg = GroupConfig::default();
        let tree = two_member_tree();
        let job = if guarded {
            GroupJob::create_guarded(&[tree], &cfg).unwrap()
        } else {
            GroupJob::create(&[tree], &cfg).unwrap()
        };
        let name = job
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(name.starts_with("smelt-"), "{name}");
        assert!(!name.contains(&job.key()), "{name} carries the key");
        let path = job.path().to_path_buf();
        assert!(path.exists());
        drop(job);
        assert!(!path.exists());
    }
}

/// The creator side of the SIGKILL test: makes a guarded job, prints its path, waits
/// to be killed (does nothing in a normal run).
#[test]
fn creator_entry() {
    if std::env::var_os("TEST_SMELT_TEST_CREATOR").is_none() {
        return;
    }
    let job = GroupJob::create_guarded(&[two_member_tree()], &GroupConfig::default()).unwrap();
    println!("\nsegment: {}", job.path().display());
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn a_guarded_segment_is_removed_when_its_creator_is_killed() {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "creator_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TEST_SMELT_TEST_CREATOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut path = None;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        // libtest may print "test creator_entry ... " before it on the line.
        if let Some((_, p)) = line.split_once("segment: ") {
            path = Some(PathBuf::from(p));
            break;
        }
    }
    let Some(path) = path else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the creator printed no path");
    };
    assert!(path.exists(), "{}", path.display());
    child.kill().unwrap();
    child.wait().unwrap();
    let t = Instant::now();
    while path.exists() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let left = path.exists();
    let _ = std::fs::remove_file(&path);
    assert!(!left, "{} outlived its creator", path.display());
}
