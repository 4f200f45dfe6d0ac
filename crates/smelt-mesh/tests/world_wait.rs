//! How a world's links wait by default (`World::wait_policy`): spinning
//! ([`WaitPolicy::DEDICATED`]) only where every member can have a CPU of its own.
//! Members given distinct but made-up CPU ids (more members than the machine has
//! CPUs, as `smelt bench processes` and oversubscribed launchers give them) share
//! CPUs: a member that spins there holds the CPU its peer needs, and processes were
//! 20-60x slower than threads at 8 members on 2 CPUs.

use smelt_mesh::world::WorldBuilder;
use smelt_mesh::{CpuId, Rank, WaitPolicy};

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
