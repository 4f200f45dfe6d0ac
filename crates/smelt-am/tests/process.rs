//! Active messages between processes of this host, members of one world (queuepairs in
//! the job's segment): floods
//! through tiny queues, and a member killed with SIGKILL. (The histogram application
//! across member processes is smelt-bench's `am_histogram` test.)

#[path = "../../../tests/support/members.rs"]
mod members;

use smelt_am::{AmConfig, AmError, Endpoint, LinkConfig};
use smelt_mesh::world::{WorldBuilder, WorldJob};
use smelt_mesh::{Rank, World};
use std::process::Child;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);
const ROLE: &str = "TEST_SMELT_AM_ROLE";

fn cfg(capacity: usize) -> AmConfig {
    AmConfig {
        link: LinkConfig::default().capacity(capacity).timeout(T),
        ..AmConfig::default()
    }
}

fn spawn(job: &WorldJob, rank: usize, role: &str) -> Child {
    members::spawn_entry(job.env(Rank(rank)), ROLE, role)
}

/// The member processes' side (does nothing when run as a test of its own).
#[test]
fn member_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    match role.as_str() {
        "sleeper" => {
            // Joins, then waits to be killed.
            let _ep = Endpoint::from_world(&World::from_env().unwrap(), (), cfg(2)).unwrap();
            std::thread::sleep(T);
        }
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn a_killed_member_is_reported_and_sends_to_it_fail() {
    let job = WorldBuilder::new(2).create_job(false).unwrap();
    let mut child = spawn(&job, 1, "sleeper");
    let mut ep = Endpoint::from_world(&job.join(Rank(0)).unwrap(), 0u32, cfg(2)).unwrap();
    ep.register(2, |n: &mut u32, _, _| *n += 1).unwrap();
    // Fill its queue (it never polls), then kill it mid-flood.
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        child.kill().unwrap();
        child.wait().unwrap();
    });
    let mut err = None;
    for _ in 0..10_000_000 {
        if let Err(e) = ep.request(1, 1, &[1]) {
            err = Some(e);
            break;
        }
    }
    killer.join().unwrap();
    assert_eq!(err, Some(AmError::PeerGone { dest: 1 }));
    assert_eq!(ep.request(1, 1, &[]), Err(AmError::PeerGone { dest: 1 }));
}
