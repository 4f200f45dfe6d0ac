//! `world.collectives(topology)` over threads and processes, next to the world's other
//! services, checked against sequential results.

use smelt_world::{
    CpuId, GroupConfig, MeshSpec, Rank, Topology, World, WorldBuilder, WorldExt, WorldKind,
};
use std::sync::atomic::Ordering;
use std::time::Duration;

#[path = "../../../tests/support/members.rs"]
mod members;

/// Collectives of `topo` and a region, checked.
fn check(w: &World, topo: Topology, rounds: u64) -> Result<(), smelt_world::Error> {
    let mut m = w.collectives(topo)?;
    let region = w.region(8)?;
    let (n, me) = (w.size() as u64, w.rank().index() as u64);
    assert_eq!(m.rank(), w.rank());
    for r in 0..rounds {
        let s = m.allreduce(me * r, |a, b| a + b)?;
        assert_eq!(s, r * n * (n - 1) / 2);
        let mut v = vec![me; 100];
        m.allreduce_slice(&mut v, |a, b| a.max(b))?;
        assert!(v.iter().all(|&x| x == n - 1));
        let g = m.gather_word(me + r)?;
        if let Some(g) = g {
            assert_eq!(g, (0..n).map(|k| k + r).collect::<Vec<_>>());
        }
    }
    region.words()[0].fetch_add(1, Ordering::AcqRel);
    m.barrier()?;
    assert_eq!(region.words()[0].load(Ordering::Acquire), n);
    Ok(())
}

#[test]
fn auto_collectives_of_pinned_threads() {
    // Two members on CPUs 0 and 1 (this machine has at least... whatever it has: the
    // default model is over the CPUs given, uniform where there is no probe).
    let cpus = CpuId::list([0, 1]);
    let ws = WorldBuilder::new(2).cpus(&cpus).threads().unwrap();
    let (tree, table) = ws[0].plan(Topology::Auto).unwrap();
    assert_eq!(tree.members, cpus, "ranks stay the world's");
    assert!(table.is_some());
    let out = World::run(ws, |w| check(&w, Topology::Auto, 30)).unwrap();
    assert!(out.iter().all(Result::is_ok), "{out:?}");
}

#[test]
fn threads_without_cpus_get_a_flat_tree_over_16() {
    let ws = World::threads(16).unwrap();
    let (tree, table) = ws[3].plan(Topology::Auto).unwrap();
    assert_eq!(tree.children[0].len(), 15);
    assert!(table.is_none());
    let out = World::run(ws, |w| {
        assert_eq!(w.kind(), WorldKind::Threads);
        check(&w, Topology::Auto, 10)
    })
    .unwrap();
    assert!(out.iter().all(Result::is_ok), "{out:?}");
}

#[test]
fn a_named_topology_over_given_cpus_keeps_world_ranks() {
    // CPU ids need not exist to build the tree (pinning fails softly).
    let cpus = CpuId::list([5, 3, 9, 1]);
    let ws = WorldBuilder::new(4).cpus(&cpus).threads().unwrap();
    let (tree, _) = ws[0].plan(Topology::Knomial(2)).unwrap();
    assert_eq!(tree.members, cpus);
    let out = World::run(ws, |w| {
        let mut m = w.collectives_with(Topology::Knomial(2), GroupConfig::default())?;
        let s = m.allreduce(w.rank().index() as u64, |a, b| a + b)?;
        let mut mesh = w.mesh(&MeshSpec::all_to_all())?;
        // Rank 0 greets everyone over the mesh made after the collectives.
        if w.rank() == Rank(0) {
            for p in 1..w.size() {
                mesh.send_word(Rank(p), 1, 42, Duration::from_secs(10))?;
            }
        } else {
            let mut b = [0u8; 8];
            mesh.recv_from(Rank(0), &mut b, Duration::from_secs(10))?;
            assert_eq!(u64::from_le_bytes(b), 42);
        }
        m.barrier()?;
        Ok::<u64, smelt_world::Error>(s)
    })
    .unwrap();
    assert!(out.into_iter().all(|s| s.unwrap() == 6));
}

#[test]
fn processes_make_collectives_from_the_environment() {
    let n = 3;
    let job = WorldBuilder::new(n).create_job(true).unwrap();
    let mut started = smelt_world::launch::Members::new();
    for r in 0..n {
        let mut cmd = members::member_command(job.env(Rank(r)), "TEST_SMELT_WORLD_ROLE", "member");
        started.spawn(&mut cmd, None).unwrap();
    }
    let children = (0..n).map(|r| started.take(Rank(r)).unwrap()).collect();
    for (r, (ok, text)) in members::wait_all(children, Duration::from_secs(60))
        .into_iter()
        .enumerate()
    {
        assert!(ok && text.contains("member ok"), "member {r}: {text}");
    }
}

/// The member processes' entry point (run by the test above, not on its own).
#[test]
#[ignore = "a member process of the other tests"]
fn member() {
    assert_eq!(
        std::env::var("TEST_SMELT_WORLD_ROLE").as_deref(),
        Ok("member")
    );
    let w = World::from_env().unwrap();
    check(&w, Topology::Auto, 20).unwrap();
    println!("member ok");
}
