//! One world, every service: tree collectives, a mesh, a region, active messages, an
//! aggregator and a global array made in the same job (the example `world_member`'s
//! `every_service`, each result checked against a sequential computation), over
//! threads (4, and 8 on this machine's few CPUs) and over processes started through
//! the launcher library. (`smelt launch` runs the same example: smelt-cli's
//! tests/launch_world.rs.)

#[path = "../../../tests/support/members.rs"]
mod members;
#[path = "../examples/world_member.rs"]
mod world_member;

use smelt_world::{Rank, World, WorldBuilder};
use std::time::Duration;

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
    let mut started = smelt_world::launch::Members::new();
    for r in 0..n {
        let mut cmd = members::member_command(job.env(Rank(r)), "TEST_SMELT_ONE_WORLD", "1");
        started.spawn(&mut cmd, None).unwrap();
    }
    let children = (0..n).map(|r| started.take(Rank(r)).unwrap()).collect();
    for (r, (ok, text)) in members::wait_all(children, Duration::from_secs(90))
        .into_iter()
        .enumerate()
    {
        assert!(
            ok && text.contains("global array checked"),
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
