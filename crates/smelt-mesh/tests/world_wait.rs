//! How a world's links wait by default (`World::wait_policy`): spinning
//! ([`WaitPolicy::DEDICATED`]) only where every member can have a CPU of its own.
//! Members given distinct but made-up CPU ids (more members than the machine has
//! CPUs, as `smelt bench processes` and oversubscribed launchers give them) share
//! CPUs: a member that spins there holds the CPU its peer needs, and processes were
//! 20-60x slower than threads at 8 members on 2 CPUs. And how a mesh receive from one
//! member between processes ends: a message, its timeout, an abort, the peer leaving.

use smelt_mesh::mesh::{Mesh, MeshError};
use smelt_mesh::world::{MeshSpec, World, WorldBuilder, WorldJob, WorldKind, WorldLink};
use smelt_mesh::{CpuId, Rank, WaitPolicy};
use std::time::{Duration, Instant};

/// More members than this machine has CPUs, each with a distinct (made-up) CPU id.
fn made_up(n: usize) -> WorldBuilder {
    WorldBuilder::new(n).cpus(&CpuId::list(0..n as u32))
}

#[test]
fn more_members_than_cpus_with_made_up_ids_do_not_spin() {
    let n = smelt_transport::online_cpus() + 2;
    for w in made_up(n).threads().unwrap() {
        assert_eq!(
            w.wait_policy(),
            WaitPolicy::OVERSUBSCRIBED,
            "rank {}",
            w.rank()
        );
    }
    // The same members as processes of a job (joined here, from the creator).
    let job = made_up(n).create_job(false).unwrap();
    for r in 0..n {
        let w = job.join(Rank(r)).unwrap();
        assert_eq!(w.wait_policy(), WaitPolicy::OVERSUBSCRIBED, "rank {r}");
    }
}

#[test]
fn members_with_cpus_of_their_own_spin() {
    // One member per allowed CPU (at most the online ones): DEDICATED as before.
    let cpus: Vec<u32> = smelt_transport::allowed_cpus().unwrap();
    let n = cpus.len().min(smelt_transport::online_cpus());
    let ids = CpuId::list(cpus[..n].iter().copied());
    for w in WorldBuilder::new(n).cpus(&ids).threads().unwrap() {
        assert_eq!(w.wait_policy(), WaitPolicy::DEDICATED);
    }
    let job = WorldBuilder::new(n).cpus(&ids).create_job(false).unwrap();
    assert_eq!(
        job.join(Rank(0)).unwrap().wait_policy(),
        WaitPolicy::DEDICATED
    );
}

/// Two members of a process job (joined here, one thread each: their links are rings
/// in the job's shared memory, as between processes), with an all-to-all mesh.
fn process_pair() -> (World, World, WorldJob) {
    let job = WorldBuilder::new(2).create_job(false).unwrap();
    let (a, b) = (job.join(Rank(0)).unwrap(), job.join(Rank(1)).unwrap());
    assert_eq!(a.kind(), WorldKind::Processes);
    (a, b, job)
}

fn meshes(a: &World, b: &World) -> (Mesh<WorldLink>, Mesh<WorldLink>) {
    std::thread::scope(|s| {
        let t = s.spawn(|| b.mesh(&MeshSpec::all_to_all()).unwrap());
        let ma = a.mesh(&MeshSpec::all_to_all()).unwrap();
        (ma, t.join().unwrap())
    })
}

/// A receive from one member between processes (parked: no doorbell across
/// processes): a message sent while it waits arrives, a wait with nothing sent ends at
/// its timeout, and an abort ends it long before.
#[test]
fn process_mesh_receive_from_one_member_ends_as_it_should() {
    let (a, b, _job) = process_pair();
    let (mut ma, mut mb) = meshes(&a, &b);
    let mut buf = [0u8; 64];
    // A message sent after the receiver has long been parked.
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(30));
            mb.send(Rank(0), 7, b"late", Duration::from_secs(5))
                .unwrap();
        });
        let (tag, n) = ma
            .recv_from(Rank(1), &mut buf, Duration::from_secs(20))
            .unwrap();
        assert_eq!((tag, &buf[..n]), (7, &b"late"[..]));
    });
    // Nothing sent: the timeout, reported as such.
    let t = Instant::now();
    match ma.recv_from(Rank(1), &mut buf, Duration::from_millis(40)) {
        Err(MeshError::Timeout { .. }) => {}
        r => panic!("expected a timeout, got {r:?}"),
    }
    assert!(t.elapsed() >= Duration::from_millis(40));
    // An abort raised while it waits ends the wait long before its timeout.
    let abort = ma.abort_handle();
    let t = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(30));
            abort.trigger();
        });
        match ma.recv_from(Rank(1), &mut buf, Duration::from_secs(20)) {
            Err(MeshError::Aborted { .. }) => {}
            r => panic!("expected the abort, got {r:?}"),
        }
    });
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
}

/// A member that leaves while the other waits for it: the wait ends with the peer gone
/// (its link closed), not at the timeout.
#[test]
fn process_mesh_receive_sees_the_peer_leave() {
    let (a, b, _job) = process_pair();
    let (mut ma, mb) = meshes(&a, &b);
    let mut buf = [0u8; 64];
    let t = Instant::now();
    std::thread::scope(|s| {
        s.spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            drop(mb);
        });
        match ma.recv_from(Rank(1), &mut buf, Duration::from_secs(20)) {
            Err(MeshError::PeerGone { .. }) => {}
            r => panic!("expected the peer gone, got {r:?}"),
        }
    });
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
}
