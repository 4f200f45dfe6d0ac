//! A member program for `smelt launch`: joins the world from its environment, makes
//! tree collectives (`auto`), a mesh and a shared region in it, and checks each result
//! against a sequential computation.
//!
//! `smelt launch -n 4 -- target/debug/examples/world_member [ROUNDS]`

use smelt_world::{MeshSpec, Rank, Topology, World, WorldExt};
use std::sync::atomic::Ordering;
use std::time::Duration;

fn run(rounds: u64) -> Result<String, smelt_world::Error> {
    let world = World::from_env()?;
    let (n, me) = (world.size() as u64, world.rank().index() as u64);
    // Every member makes the same services in the same order.
    let mut coll = world.collectives(Topology::Auto)?;
    let mut mesh = world.mesh(&MeshSpec::all_to_all())?;
    let region = world.region(8)?;
    for r in 0..rounds {
        coll.barrier()?;
        let s = coll.allreduce(me + r, |a, b| a + b)?;
        assert_eq!(s, n * (n - 1) / 2 + n * r);
        let b = coll.broadcast_word(if coll.is_root() { r + 1 } else { 0 })?;
        assert_eq!(b, r + 1);
    }
    region.words()[0].fetch_add(me + 1, Ordering::AcqRel);
    coll.barrier()?;
    assert_eq!(region.words()[0].load(Ordering::Acquire), n * (n + 1) / 2);
    let t = Duration::from_secs(30);
    if n > 1 {
        let next = Rank(((me + 1) % n) as usize);
        let prev = Rank(((me + n - 1) % n) as usize);
        mesh.send_word(next, 1, me, t)?;
        let mut buf = [0u8; 8];
        mesh.recv_from(prev, &mut buf, t)?;
        assert_eq!(u64::from_le_bytes(buf), prev.index() as u64);
    }
    coll.barrier()?;
    Ok(format!(
        "ok: member {me} of {n} (CPU {}), {rounds} rounds, mesh and region checked",
        world.cpu().map_or("-".into(), |c| c.to_string())
    ))
}

fn main() {
    let rounds = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    match run(rounds) {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
}
