//! A member program for `smelt launch`: joins the world from its environment and makes
//! every kind of service in it — tree collectives (`auto`), a mesh, a shared region,
//! active messages, an aggregator and a global array — checking each result against a
//! sequential computation.
//!
//! `smelt launch -n 4 -- target/debug/examples/world_member [ROUNDS]`

use smelt_world::{agg, MeshSpec, Rank, Topology, World, WorldExt};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// What the active-message handlers keep: requests served, the reply received.
#[derive(Default)]
pub struct AmState {
    served: u32,
    got: Option<u64>,
}

const ADD: u8 = 1;
const SUM: u8 = 2;

/// Every service of `world`, made in the same order by every member, each checked.
/// Returns a line describing what was checked.
pub fn every_service(world: &World, rounds: u64) -> Result<String, Box<dyn std::error::Error>> {
    let (n, me) = (world.size() as u64, world.rank().index() as u64);
    let t = Duration::from_secs(30);

    // Tree collectives.
    let mut coll = world.collectives(Topology::Auto)?;
    for r in 0..rounds {
        coll.barrier()?;
        let s = coll.allreduce(me + r, |a, b| a + b)?;
        assert_eq!(s, n * (n - 1) / 2 + n * r);
        let b = coll.broadcast_word(if coll.is_root() { r + 1 } else { 0 })?;
        assert_eq!(b, r + 1);
    }

    // A mesh: each member sends its rank to the next one.
    let mut mesh = world.mesh(&MeshSpec::all_to_all())?;
    if n > 1 {
        let next = Rank(((me + 1) % n) as usize);
        let prev = Rank(((me + n - 1) % n) as usize);
        mesh.send_word(next, 1, me, t)?;
        let mut buf = [0u8; 8];
        mesh.recv_from(prev, &mut buf, t)?;
        assert_eq!(u64::from_le_bytes(buf), prev.index() as u64);
    }

    // A shared region: everyone adds rank + 1.
    let region = world.region(8)?;
    region.words()[0].fetch_add(me + 1, Ordering::AcqRel);
    coll.barrier()?;
    assert_eq!(region.words()[0].load(Ordering::Acquire), n * (n + 1) / 2);

    // Active messages: each member asks the next one to add (me, 100); the reply
    // carries the sum. Each serves exactly one request (from the previous member).
    let mut ep = world.endpoint(AmState::default())?;
    ep.register(ADD, |s: &mut AmState, ctx, m| {
        s.served += 1;
        ctx.reply(SUM, &[m.args[0] + m.args[1]]).unwrap();
    })?;
    ep.register(SUM, |s: &mut AmState, _, m| s.got = Some(m.args[0]))?;
    ep.request(((me + 1) % n) as usize, ADD, &[me, 100])?;
    ep.run_until(t, |s| s.served == 1 && s.got.is_some())?;
    assert_eq!(ep.state().got, Some(me + 100));
    coll.barrier()?;

    // Aggregation: one worker per member; every member sends 0..100 round the
    // workers, and each worker sums what it receives.
    let cfg = agg::AggConfig::new(agg::Scheme::WPs, 8).buffer_items(16);
    let mut workers = agg::from_world(
        world,
        1,
        cfg,
        |_| 0u64,
        |sum: &mut u64, item: &[u8], _| {
            *sum += u64::from_le_bytes(item.try_into().unwrap());
        },
    )?;
    let mut wk = workers.pop().expect("one worker");
    for i in 0..100u64 {
        wk.insert(&i.to_le_bytes(), (i % n) as usize)?;
    }
    wk.terminate(t)?;
    let total = coll.allreduce(*wk.state(), |a, b| a + b)?;
    assert_eq!(total, n * (0..100).sum::<u64>());

    // A global array: each member writes its block, then reads everyone's.
    let a = world.global_array::<u64>(4 * n)?;
    for k in 0..4 {
        a.put(me * 4 + k, &[me * 1000 + k])?;
    }
    a.barrier()?;
    for m in 0..n {
        for k in 0..4 {
            assert_eq!(a.get_one(m * 4 + k)?, m * 1000 + k);
        }
    }
    coll.barrier()?;
    Ok(format!(
        "ok: member {me} of {n} (CPU {}), {rounds} rounds; collectives, mesh, region, active messages, aggregation and a global array checked",
        world.cpu().map_or("-".into(), |c| c.to_string())
    ))
}

#[allow(dead_code)] // the tests include this file for `every_service`
fn main() {
    let rounds = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let r = World::from_env()
        .map_err(|e| e.into())
        .and_then(|w| every_service(&w, rounds));
    match r {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
}
