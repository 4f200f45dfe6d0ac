//! What the tests that start copies of their own binary as a job's member processes
//! share: the member's command (this binary running its ignored test `member` alone)
//! and the wait for every member, bounded. Included by each with
//! `#[path = ...] mod members;`.

#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// This test binary running its ignored test `member` alone, with `env` and
/// `role_var=role` (what the member does), its output piped.
pub fn member_command(env: Vec<(String, String)>, role_var: &str, role: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "member",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .envs(env)
    .env(role_var, role)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    cmd
}

/// Waits for every child, failing the test ("members hang") if they take over
/// `limit` in all; returns each one's (success, stdout then stderr), in order.
pub fn wait_all(mut children: Vec<Child>, limit: Duration) -> Vec<(bool, String)> {
    let start = Instant::now();
    let mut done = vec![None; children.len()];
    while done.iter().any(Option::is_none) {
        assert!(start.elapsed() < limit, "members hang");
        for (r, c) in children.iter_mut().enumerate() {
            if done[r].is_none() {
                done[r] = c.try_wait().unwrap().map(|s| s.success());
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    children
        .into_iter()
        .zip(done)
        .map(|(c, ok)| {
            let o = c.wait_with_output().unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            (ok.unwrap(), text)
        })
        .collect()
}

/// Starts this test binary running its test `member_entry` alone (a test that does
/// nothing unless `role_var` is set), with `env` and `role_var=role`, its output
/// inherited.
pub fn spawn_entry(env: Vec<(String, String)>, role_var: &str, role: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "member_entry", "--nocapture", "--test-threads=1"])
        .envs(env)
        .env(role_var, role)
        .spawn()
        .unwrap()
}
