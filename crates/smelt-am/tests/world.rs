//! Endpoints made from a world: names and tags every member agrees on, several sets of
//! endpoints in one world, and the collective call's failures: members that make
//! different endpoints, a member that never makes its endpoint (a timeout), one that
//! dies first (gone), each an error and never a hang.

#[path = "../../../tests/support/members.rs"]
mod members;

use smelt_am::{AmConfig, AmError, Endpoint, LinkConfig, Name};
use smelt_mesh::world::{WorldBuilder, WorldJob};
use smelt_mesh::{Rank, World, WorldError};
use std::process::Child;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(30);
const ROLE: &str = "TEST_SMELT_AM_WORLD_ROLE";

fn cfg(capacity: usize, timeout: Duration) -> AmConfig {
    AmConfig {
        link: LinkConfig::default().capacity(capacity).timeout(timeout),
        ..AmConfig::default()
    }
}

const PING: u8 = 1;
const PONG: u8 = 2;

/// Registers a handler that answers with the receiver's rank, and one that sums the
/// answers.
fn register(ep: &mut Endpoint<u64>) {
    ep.register(PING, |_, ctx, _| {
        let me = ctx.me() as u64;
        ctx.reply(PONG, &[me]).unwrap()
    })
    .unwrap();
    ep.register(PONG, |s: &mut u64, _, m| *s += m.args[0] + 1)
        .unwrap();
}

/// Pings every other member and serves until each was answered and each pinged it
/// (the other members run the same); the sum of their ranks + 1.
fn ping_all(ep: &mut Endpoint<u64>) -> u64 {
    let (n, me) = (ep.size(), ep.me());
    for p in (0..n).filter(|&p| p != me) {
        ep.request(p, PING, &[]).unwrap();
    }
    // Until every ping was answered and every other member's ping handled (requests
    // and replies count as handled). A member that is done leaves: reported once each,
    // after its last message.
    let t0 = Instant::now();
    while ep.outstanding_total() > 0 || ep.stats().handled < 2 * (n as u64 - 1) {
        match ep.wait(T) {
            Ok(_) | Err(AmError::PeerGone { .. }) => {}
            Err(e) => panic!("member {me}: {e}"),
        }
        assert!(t0.elapsed() < T);
    }
    *ep.state()
}

#[test]
fn threads_agree_on_names_and_tags_and_hold_several_sets() {
    let n = 5;
    let out = World::run(World::threads(n).unwrap(), |w| {
        let mut a = Endpoint::from_world(&w, 0u64, cfg(4, T)).unwrap();
        let mut b = Endpoint::from_world(&w, 0u64, cfg(8, T)).unwrap();
        let me = w.rank().index();
        assert_eq!((a.me(), a.size()), (me, n));
        assert_eq!(
            a.name(me),
            Some(Name {
                node: 0,
                process: 0,
                endpoint: me as u32
            })
        );
        assert_ne!(a.tag(), b.tag());
        register(&mut a);
        register(&mut b);
        let expect: u64 = (0..n as u64)
            .filter(|&p| p != me as u64)
            .map(|p| p + 1)
            .sum();
        assert_eq!(ping_all(&mut a), expect);
        assert_eq!(ping_all(&mut b), expect);
        (
            a.tag(),
            (0..n).map(|d| b.dest_tag(d).unwrap()).collect::<Vec<_>>(),
            b.tag(),
        )
    })
    .unwrap();
    // Every member knows every other's tag (set b).
    for (r, (_, known, _)) in out.iter().enumerate() {
        for (d, t) in known.iter().enumerate() {
            assert_eq!(*t, out[d].2, "member {r}'s tag of {d}");
        }
    }
}

#[test]
fn members_that_make_different_endpoints_get_an_error() {
    let out = World::run(World::threads(2).unwrap(), |w| {
        let capacity = if w.rank() == Rank(0) { 4 } else { 8 };
        Endpoint::from_world(&w, (), cfg(capacity, T)).map(|_| ())
    })
    .unwrap();
    // The member that came second sees the mismatch (the first cannot know).
    assert!(
        out.iter()
            .any(|r| matches!(r, Err(AmError::World(WorldError::Mismatch(_))))),
        "{out:?}"
    );
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
    let w = World::from_env().unwrap();
    match role.as_str() {
        "ping" => {
            let mut ep = Endpoint::from_world(&w, 0u64, cfg(4, T)).unwrap();
            register(&mut ep);
            let n = w.size() as u64;
            let me = w.rank().index() as u64;
            assert_eq!(ping_all(&mut ep), n * (n + 1) / 2 - (me + 1));
        }
        // Joins the world, makes no endpoint, waits to be killed or to time out.
        "idle" => std::thread::sleep(Duration::from_secs(5)),
        "dies" => std::process::exit(7),
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn processes_of_a_world_agree_on_names_and_answer_each_other() {
    let n = 3;
    let job = WorldBuilder::new(n).create_job(false).unwrap();
    let kids: Vec<Child> = (1..n).map(|r| spawn(&job, r, "ping")).collect();
    let w = job.join(Rank(0)).unwrap();
    let mut ep = Endpoint::from_world(&w, 0u64, cfg(4, T)).unwrap();
    assert_eq!(
        ep.name(2),
        Some(Name {
            node: 0,
            process: 2,
            endpoint: 0
        })
    );
    register(&mut ep);
    assert_eq!(ping_all(&mut ep), 2 + 3);
    for mut k in kids {
        assert!(k.wait().unwrap().success());
    }
}

#[test]
fn a_member_that_never_makes_its_endpoint_is_a_timeout() {
    let job = WorldBuilder::new(2).create_job(false).unwrap();
    let mut kid = spawn(&job, 1, "idle");
    let w = job.join(Rank(0)).unwrap();
    let t0 = Instant::now();
    let r = Endpoint::from_world(&w, (), cfg(4, Duration::from_millis(300)));
    assert!(matches!(r, Err(AmError::Timeout { .. })), "{r:?}");
    assert!(t0.elapsed() < Duration::from_secs(5));
    kid.kill().unwrap();
    kid.wait().unwrap();
}

#[test]
fn a_member_that_dies_before_its_endpoint_is_gone() {
    let job = WorldBuilder::new(2).create_job(false).unwrap();
    let mut kid = spawn(&job, 1, "dies");
    assert_eq!(kid.wait().unwrap().code(), Some(7));
    let w = job.join(Rank(0)).unwrap();
    let t0 = Instant::now();
    let r = Endpoint::from_world(&w, (), cfg(4, T));
    assert_eq!(r.map(|_| ()), Err(AmError::PeerGone { dest: 1 }));
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[test]
fn nodes_a_world_declares_name_the_endpoints_and_every_member_is_reached() {
    let ws = WorldBuilder::new(4).nodes(&[0, 0, 1, 1]).threads().unwrap();
    let out = World::run(ws, |w| {
        let mut ep = Endpoint::from_world(&w, 0u64, cfg(4, T)).unwrap();
        register(&mut ep);
        let me = w.rank().index() as u64;
        assert_eq!(ping_all(&mut ep), 10 - (me + 1));
        (0..4).map(|d| ep.name(d).unwrap()).collect::<Vec<_>>()
    })
    .unwrap();
    let name = |node, endpoint| Name {
        node,
        process: 0,
        endpoint,
    };
    for names in out {
        assert_eq!(names, [name(0, 0), name(0, 1), name(1, 0), name(1, 1)]);
    }
}
