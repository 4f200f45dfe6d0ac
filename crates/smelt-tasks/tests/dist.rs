//! Tasks across members: threads standing for processes, and processes of this host
//! (shared-memory active messages), with sequential checks, a panicking task and a
//! killed member.

#[path = "../../../tests/support/members.rs"]
mod members;

use smelt_mesh::world::{WorldBuilder, WorldJob};
use smelt_mesh::{Rank, World};
use smelt_tasks::apps::dist::{self as apps, functions, result_u64};
use smelt_tasks::apps::{fib_seq, Uts};
use smelt_tasks::dist::{Member, Report, TaskConfig};
use smelt_tasks::TaskError;
use std::process::Child;
use std::time::{Duration, Instant};

const ROLE: &str = "TEST_SMELT_TASKS_ROLE";

fn am_cfg() -> smelt_am::AmConfig {
    let mut cfg = smelt_am::AmConfig::default();
    cfg.link.timeout = Duration::from_secs(30);
    cfg
}

/// Runs every member of a threads job, member 0 with `root`.
fn run_threads(n: usize, workers: usize, root: (u32, Vec<u8>)) -> Vec<Result<Report, TaskError>> {
    let members = Member::threads(n, am_cfg()).unwrap();
    let f = functions();
    std::thread::scope(|s| {
        let hs: Vec<_> = members
            .into_iter()
            .map(|mut m| {
                let (f, root) = (&f, root.clone());
                s.spawn(move || {
                    let r = (m.rank() == 0).then_some(root);
                    m.run(f, &TaskConfig::new(workers), r)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn fib_across_thread_members_matches_the_sequential_result() {
    for (n, workers) in [(1, 1), (2, 1), (4, 2), (8, 1)] {
        let out = run_threads(n, workers, (apps::FIB, apps::fib_payload(24, 12)));
        let r0 = out[0].as_ref().unwrap();
        assert_eq!(
            result_u64(r0.result.as_ref().unwrap()).unwrap(),
            fib_seq(24)
        );
        let steals: u64 = out.iter().map(|r| r.as_ref().unwrap().steals).sum();
        let stolen: u64 = out.iter().map(|r| r.as_ref().unwrap().stolen_from).sum();
        assert_eq!(steals, stolen);
        for r in &out[1..] {
            assert_eq!(r.as_ref().unwrap().result, None);
        }
        let run: u64 = out.iter().map(|r| r.as_ref().unwrap().tasks_run).sum();
        let spawned: u64 = out.iter().map(|r| r.as_ref().unwrap().spawned).sum();
        // Every task ran once (the root is not spawned).
        assert_eq!(run, spawned + 1);
    }
}

#[test]
fn idle_members_steal_queued_tasks() {
    // Member 0 (1 worker) cannot run 12 tasks of 25 ms at once: the others steal from
    // its queue.
    let out = run_threads(
        4,
        1,
        (
            apps::FANOUT,
            [12u32.to_le_bytes(), 25u32.to_le_bytes()].concat(),
        ),
    );
    assert!(out.iter().all(|r| r.is_ok()), "{out:?}");
    let r0 = out[0].as_ref().unwrap();
    let mask = result_u64(r0.result.as_ref().unwrap()).unwrap();
    assert_eq!(mask & 1, 1, "member 0 ran some: {mask:b}");
    // Usually all four; at least one other even on loaded CPUs.
    assert!(
        mask.count_ones() >= 2,
        "tasks ran on members {mask:b}: {out:?}"
    );
    assert!(r0.stolen_from >= 1, "{r0:?}");
    let steals: u64 = out.iter().map(|r| r.as_ref().unwrap().steals).sum();
    let stolen: u64 = out.iter().map(|r| r.as_ref().unwrap().stolen_from).sum();
    assert_eq!(steals, stolen);
}

#[test]
fn members_run_computations_one_after_the_other_and_not_after_a_failure() {
    let mut members = Member::threads(3, am_cfg()).unwrap();
    let f = functions();
    let roots = [
        (apps::FIB, apps::fib_payload(20, 8)),
        (apps::UTS, apps::uts_payload(&Uts::t1_like(6), 3)),
        (apps::FIB, apps::fib_payload(18, 6)),
        (apps::PANIC, b"third".to_vec()),
    ];
    let out: Vec<Vec<Result<Report, TaskError>>> = std::thread::scope(|s| {
        let hs: Vec<_> = members
            .iter_mut()
            .map(|m| {
                let (f, roots) = (&f, roots.clone());
                s.spawn(move || {
                    let mut rs: Vec<_> = roots
                        .into_iter()
                        .map(|root| m.run(f, &TaskConfig::new(1), (m.rank() == 0).then_some(root)))
                        .collect();
                    // After the failure: refused, at once.
                    rs.push(m.run(f, &TaskConfig::new(1), (m.rank() == 0).then(roots_first)));
                    rs
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let r0 = &out[0];
    let val = |i: usize| result_u64(r0[i].as_ref().unwrap().result.as_ref().unwrap()).unwrap();
    assert_eq!(val(0), fib_seq(20));
    assert_eq!(val(1), Uts::t1_like(6).count_seq());
    assert_eq!(val(2), fib_seq(18));
    for (m, rs) in out.iter().enumerate() {
        assert!(rs[..3].iter().all(|r| r.is_ok()), "member {m}: {rs:?}");
        assert!(
            rs[3].as_ref().unwrap_err().to_string().contains("third"),
            "member {m}: {rs:?}"
        );
        assert!(
            rs[4]
                .as_ref()
                .unwrap_err()
                .to_string()
                .contains("cannot run again"),
            "{rs:?}"
        );
    }
}

fn roots_first() -> (u32, Vec<u8>) {
    (apps::FIB, apps::fib_payload(10, 2))
}

#[test]
fn uts_across_thread_members_counts_the_sequential_tree() {
    let t = Uts::t1_like(8);
    let out = run_threads(4, 2, (apps::UTS, apps::uts_payload(&t, 4)));
    let r0 = out[0].as_ref().unwrap();
    assert_eq!(
        result_u64(r0.result.as_ref().unwrap()).unwrap(),
        t.count_seq()
    );
}

#[test]
fn a_panicking_task_fails_every_member_with_its_message() {
    let t0 = Instant::now();
    // The root spawns slow tasks, then panics while they run elsewhere.
    let out = run_threads(3, 1, (apps::PANIC, b"task failed here".to_vec()));
    for (i, r) in out.iter().enumerate() {
        let e = r.as_ref().unwrap_err();
        assert!(
            e.to_string().contains("task failed here"),
            "member {i}: {e}"
        );
    }
    assert_eq!(
        out[0].as_ref().unwrap_err(),
        &TaskError::Panicked("task failed here".into()),
        "{out:?}"
    );
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[test]
fn bad_runs_are_errors() {
    let mut ms = Member::threads(2, am_cfg()).unwrap();
    let mut m1 = ms.pop().unwrap();
    let mut m0 = ms.pop().unwrap();
    let f = functions();
    let e = m1
        .run(&f, &TaskConfig::new(1), Some((apps::FIB, vec![])))
        .unwrap_err();
    assert!(matches!(e, TaskError::Invalid(_)), "{e}");
    let e = m0
        .run(&f, &TaskConfig::new(0), Some((apps::FIB, vec![])))
        .unwrap_err();
    assert!(matches!(e, TaskError::Invalid(_)), "{e}");
    // A malformed payload and an unknown function fail the computation, with a message.
    let out = run_threads(1, 1, (apps::FIB, vec![1, 2, 3]));
    assert!(out[0]
        .as_ref()
        .unwrap_err()
        .to_string()
        .contains("malformed fib payload"));
    let out = run_threads(2, 1, (99, vec![]));
    assert_eq!(
        out[0].as_ref().unwrap_err(),
        &TaskError::UnknownFunction(99)
    );
    let mut f = functions();
    assert!(f.register(apps::FIB, |_, _| Ok(vec![])).is_err());
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
    let mut m = Member::from_world(&World::from_env().unwrap(), am_cfg()).unwrap();
    let r = m.run(&functions(), &TaskConfig::new(2), None);
    match role.as_str() {
        "serve" => {
            // Two computations, one after the other.
            let r = r.unwrap();
            assert_eq!(r.result, None);
            let r = m.run(&functions(), &TaskConfig::new(1), None).unwrap();
            assert_eq!(r.result, None);
        }
        "fail" => {
            let e = r.unwrap_err();
            eprintln!("member failed as expected: {e}");
        }
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn fib_and_uts_across_processes_match_the_sequential_results() {
    let n = 3;
    for (root, want) in [
        ((apps::FIB, apps::fib_payload(25, 13)), fib_seq(25)),
        (
            (apps::UTS, apps::uts_payload(&Uts::t1_like(8), 4)),
            Uts::t1_like(8).count_seq(),
        ),
    ] {
        let job = WorldBuilder::new(n).create_job(false).unwrap();
        let children: Vec<Child> = (1..n).map(|r| spawn(&job, r, "serve")).collect();
        let mut m = Member::from_world(&job.join(Rank(0)).unwrap(), am_cfg()).unwrap();
        // Two computations, one after the other (the members run two too).
        for workers in [2, 1] {
            let r = m
                .run(&functions(), &TaskConfig::new(workers), Some(root.clone()))
                .unwrap();
            assert_eq!(result_u64(r.result.as_ref().unwrap()).unwrap(), want);
        }
        for mut c in children {
            assert!(c.wait().unwrap().success());
        }
    }
}

#[test]
fn a_killed_process_fails_the_others_within_a_second() {
    let n = 3;
    let job = WorldBuilder::new(n).create_job(false).unwrap();
    let mut children: Vec<Child> = (1..n).map(|r| spawn(&job, r, "fail")).collect();
    let mut m = Member::from_world(&job.join(Rank(0)).unwrap(), am_cfg()).unwrap();
    let mut victim = children.pop().unwrap();
    let killed = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        victim.kill().unwrap();
        let t = Instant::now();
        victim.wait().unwrap();
        t
    });
    // 30 s of work if nothing fails.
    let e = m
        .run(
            &functions(),
            &TaskConfig::new(2),
            Some((apps::SLOW, 30_000u64.to_le_bytes().to_vec())),
        )
        .unwrap_err();
    let failed_at = Instant::now();
    let killed_at = killed.join().unwrap();
    assert!(
        failed_at.duration_since(killed_at) < Duration::from_secs(1),
        "failed {:?} after the kill: {e}",
        failed_at.duration_since(killed_at)
    );
    assert!(
        matches!(e, TaskError::PeerGone { .. } | TaskError::Remote { .. }),
        "{e}"
    );
    for mut c in children {
        // The survivor returns (with an error) by itself.
        let t = Instant::now();
        c.wait().unwrap();
        assert!(t.elapsed() < Duration::from_secs(5));
    }
}
