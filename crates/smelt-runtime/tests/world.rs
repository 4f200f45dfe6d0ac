//! Tree collectives from a world (`Member::from_world`), next to other services made
//! from the same world: threads (2 and 16 members, more than this machine's CPUs) and
//! processes (this test binary run again as each member, through the launcher
//! library), every collective checked against the sequential result; a killed member
//! is an error for the others.

mod common;
#[path = "../../../tests/support/members.rs"]
mod members;

use common::{all_collectives, random_tree};
use smelt_mesh::launch::Members;
use smelt_mesh::world::{MeshSpec, World, WorldBuilder};
use smelt_runtime::process::GroupJob;
use smelt_runtime::{GroupConfig, GroupError, Member, Rank};
use smelt_tree::tuning::AlgorithmTable;
use smelt_tree::Tree;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(20);

/// Collectives, a mesh and a region of one world, each checked: the collectives
/// against their sequential results, the region's total (everyone adds `rank + 1`)
/// by an allreduce of what each member saw after a barrier.
fn services(w: &World, tree: &Tree, cfg: &GroupConfig, rounds: u64) -> Result<(), GroupError> {
    let mut m = Member::from_world(w, std::slice::from_ref(tree), cfg)?;
    let mut mesh = w.mesh(&MeshSpec::all_to_all().capacity(4))?;
    let region = w.region(8)?;
    assert_eq!(m.rank(), w.rank());
    all_collectives(&mut m, rounds)?;
    region.words()[0].fetch_add(w.rank().index() as u64 + 1, Ordering::AcqRel);
    m.barrier()?;
    let n = w.size() as u64;
    let seen = region.words()[0].load(Ordering::Acquire);
    assert_eq!(seen, n * (n + 1) / 2);
    // A ring of messages on the mesh: each member sends its rank to the next.
    let next = Rank((w.rank().index() + 1) % w.size());
    let prev = Rank((w.rank().index() + w.size() - 1) % w.size());
    if w.size() > 1 {
        mesh.send_word(next, 5, w.rank().index() as u64, T)
            .map_err(|e| m.fail(&e.to_string()))?;
        let mut b = [0u8; 8];
        let (tag, _) = mesh
            .recv_from(prev, &mut b, T)
            .map_err(|e| m.fail(&e.to_string()))?;
        assert_eq!((tag, u64::from_le_bytes(b)), (5, prev.index() as u64));
    }
    // No member leaves (closing its links) before every member received.
    m.barrier()?;
    Ok(())
}

fn nontree() -> GroupConfig {
    GroupConfig {
        algorithms: Some(Arc::new(
            AlgorithmTable::parse("barrier=dissemination;allreduce=recursive-doubling").unwrap(),
        )),
        ..GroupConfig::default()
    }
}

fn threads(n: usize, cfg: GroupConfig) {
    let tree = random_tree(n, n as u64);
    let out = World::run(World::threads(n).unwrap(), |w| {
        services(&w, &tree, &cfg, 20)
    })
    .unwrap();
    assert!(out.iter().all(Result::is_ok), "{out:?}");
}

#[test]
fn threads_world_of_2_runs_collectives_beside_a_mesh_and_a_region() {
    threads(2, GroupConfig::default());
}

#[test]
fn threads_world_of_16_on_few_cpus() {
    threads(16, GroupConfig::default());
    threads(16, nontree());
}

#[test]
fn a_tree_of_another_size_is_refused() {
    let out = World::run(World::threads(3).unwrap(), |w| {
        Member::from_world(&w, &[random_tree(4, 1)], &GroupConfig::default()).map(|_| ())
    })
    .unwrap();
    assert!(out
        .iter()
        .all(|r| matches!(r, Err(GroupError::Invalid(m)) if m.contains("world of 3"))));
}

/// Starts this test binary as every member of `env_of`'s job, doing `scenario`;
/// returns (success, output) by rank, failing the test if they take over `limit`.
fn run_members(
    n: usize,
    env_of: impl Fn(Rank) -> Vec<(String, String)>,
    scenario: &str,
    limit: Duration,
) -> Vec<(bool, String)> {
    let mut started = Members::new();
    for r in 0..n {
        let mut cmd = members::member_command(env_of(Rank(r)), "TEST_SMELT_WORLD_MEMBER", scenario);
        started.spawn(&mut cmd, None).unwrap();
    }
    let children = (0..n).map(|r| started.take(Rank(r)).unwrap()).collect();
    members::wait_all(children, limit)
}

#[test]
fn processes_run_collectives_beside_a_mesh_and_a_region() {
    for (n, scenario) in [(3, "services"), (4, "services-nontree")] {
        let job = WorldBuilder::new(n).create_job(true).unwrap();
        let path = job.path().to_path_buf();
        let out = run_members(n, |r| job.env(r), scenario, Duration::from_secs(60));
        for (r, (ok, text)) in out.iter().enumerate() {
            assert!(ok, "member {r} of {n}: {text}");
            assert!(text.contains("services ok"), "member {r}: {text}");
        }
        assert!(!path.exists(), "nothing left in the segment directory");
    }
}

#[test]
fn a_launched_job_gives_its_group_and_other_services() {
    // What `smelt launch` makes: the group in the world's description.
    let n = 3;
    let tree = random_tree(n, 9);
    let job =
        GroupJob::create_guarded(std::slice::from_ref(&tree), &GroupConfig::default()).unwrap();
    let out = run_members(n, |r| job.env(r), "launched", Duration::from_secs(60));
    for (r, (ok, text)) in out.iter().enumerate() {
        assert!(*ok && text.contains("launched ok"), "member {r}: {text}");
    }
}

#[test]
fn a_killed_member_fails_the_others_collectives() {
    let n = 3;
    let job = WorldBuilder::new(n).create_job(true).unwrap();
    let start = Instant::now();
    let out = run_members(n, |r| job.env(r), "die", Duration::from_secs(60));
    assert!(!out[1].0, "the victim dies");
    for r in [0, 2] {
        assert!(out[r].0, "member {r}: {}", out[r].1);
        assert!(
            out[r].1.contains("collective failed:"),
            "member {r}: {}",
            out[r].1
        );
    }
    assert!(start.elapsed() < Duration::from_secs(30));
}

/// The member processes' entry point (run by the tests above, not on its own).
#[test]
#[ignore = "a member process of the other tests"]
fn member() {
    let scenario = std::env::var("TEST_SMELT_WORLD_MEMBER").unwrap_or_default();
    let w = World::from_env().unwrap();
    let n = w.size();
    let tree = random_tree(n, 3);
    match scenario.as_str() {
        "services" => {
            services(&w, &tree, &GroupConfig::default(), 40).unwrap();
            println!("services ok");
        }
        "services-nontree" => {
            services(&w, &tree, &nontree(), 40).unwrap();
            println!("services ok");
        }
        "launched" => {
            let mut m = Member::from_launched_world(&w).unwrap();
            let region = w.region(8).unwrap();
            all_collectives(&mut m, 10).unwrap();
            region.words()[0].fetch_add(1, Ordering::AcqRel);
            m.barrier().unwrap();
            assert_eq!(region.words()[0].load(Ordering::Acquire), n as u64);
            println!("launched ok");
        }
        "die" => {
            let cfg = GroupConfig {
                link: smelt_runtime::LinkConfig::default().timeout(Duration::from_secs(20)),
                ..GroupConfig::default()
            };
            let mut m = Member::from_world(&w, &[tree], &cfg).unwrap();
            for round in 0..1000u64 {
                if w.rank() == Rank(1) && round == 20 {
                    std::process::abort();
                }
                if let Err(e) = m.allreduce(round, |a, b| a + b) {
                    println!("collective failed: {e}");
                    return;
                }
            }
            panic!("the collectives went on without member 1");
        }
        other => panic!("unknown scenario {other:?}"),
    }
}
