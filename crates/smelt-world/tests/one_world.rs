//! One world, every service: tree collectives, a mesh, a region, active messages, an
//! aggregator and a global array made in the same job (the example `world_member`'s
//! `every_service`, each result checked against a sequential computation), over
//! threads (4, and 8 on this machine's few CPUs) and over processes started through
//! the launcher library. (`smelt launch` runs the same example: smelt-cli's
//! tests/launch_world.rs.)

#[path = "../examples/world_member.rs"]
mod world_member;

use smelt_world::{Rank, World, WorldBuilder};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn threads_make_every_service_in_one_world() {
    for n in [4, 8] {
        let out = World::run(World::threads(n).unwrap(), |w| {
            world_member::every_service(&w, 10).map_err(|e| e.to_string())
        })
        .unwrap();
        for (r, line) in out.into_iter().enumerate() {
            let line = line.unwrap_or_else(|e| panic!("member {r} of {n}: {e}"));
            assert!(line.contains("global array checked"), "{line}");
        }
    }
}

#[test]
fn processes_make_every_service_in_one_world() {
    let n = 3;
    let job = WorldBuilder::new(n).create_job(true).unwrap();
    let path = job.path().to_path_buf();
    let mut members = smelt_world::launch::Members::new();
    for r in 0..n {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "member",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .envs(job.env(Rank(r)))
        .env("TEST_SMELT_ONE_WORLD", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        members.spawn(&mut cmd, None).unwrap();
    }
    let start = Instant::now();
    let mut children: Vec<_> = (0..n).map(|r| members.take(Rank(r)).unwrap()).collect();
    for (r, c) in children.iter_mut().enumerate() {
        while c.try_wait().unwrap().is_none() {
            assert!(
                start.elapsed() < Duration::from_secs(90),
                "member {r} hangs"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    for (r, c) in children.into_iter().enumerate() {
        let o = c.wait_with_output().unwrap();
        let text =
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.success() && text.contains("global array checked"),
            "member {r}: {text}"
        );
    }
    assert!(!path.exists());
}

/// The member processes' entry point (run by the test above, not on its own).
#[test]
#[ignore = "a member process of the other tests"]
fn member() {
    assert_eq!(std::env::var("TEST_SMELT_ONE_WORLD").as_deref(), Ok("1"));
    let w = World::from_env().unwrap();
    println!("{}", world_member::every_service(&w, 10).unwrap());
}
