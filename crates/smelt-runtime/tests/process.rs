//! Groups of processes: the test binary re-runs itself as each member
//! (`TEST_SMELT_TEST_MEMBER=<scenario>` plus the job's variables), so every test crosses
//! real process boundaries over real shared memory.

mod common;

use common::{all_collectives, random_tree};
use smelt_runtime::process::{join_from_env, GroupJob};
use smelt_runtime::{GroupConfig, GroupError, Rank};
use smelt_tree::Tree;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

fn scale() -> u64 {
    smelt_transport::stress_scale()
}

fn spawn(job: &GroupJob, scenario: &str) -> Vec<Child> {
    (0..job.size())
        .map(|r| {
            Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "member_entry", "--nocapture", "--test-threads=1"])
                .stdout(std::process::Stdio::null())
                .envs(job.env(Rank(r)))
                .env("TEST_SMELT_TEST_MEMBER", scenario)
                .spawn()
                .unwrap()
        })
        .collect()
}

fn wait_all(children: Vec<Child>) -> Vec<bool> {
    children
        .into_iter()
        .map(|mut c| c.wait().unwrap().success())
        .collect()
}

/// The member side of every test (does nothing in a normal run).
#[test]
fn member_entry() {
    let Ok(scenario) = std::env::var("TEST_SMELT_TEST_MEMBER") else {
        return;
    };
    let mut m = join_from_env().expect("joins");
    let parts: Vec<&str> = scenario.split(',').collect();
    match parts[0] {
        "collectives" => {
            let rounds: u64 = parts[1].parse().unwrap();
            all_collectives(&mut m, rounds).unwrap();
        }
        "die" => {
            // Member `victim` dies (SIGKILL to itself) in the middle of the rounds;
            // every other member must see an error, not hang.
            let victim: Rank = parts[1].parse().unwrap();
            let how = parts[2];
            for r in 0..1000u64 {
                if m.rank() == victim && r == 50 {
                    if how == "kill" {
                        unsafe_free_kill_self();
                    } else {
                        std::process::exit(0);
                    }
                }
                match m.allreduce(1u64, |a, b| a + b) {
                    Ok(v) => assert_eq!(v, m.size() as u64),
                    Err(e) => {
                        assert!(
                            matches!(e, GroupError::PeerFailed { rank, .. } if rank == victim),
                            "member {}: {e}",
                            m.rank()
                        );
                        std::process::exit(3);
                    }
                }
            }
            panic!("member {} never saw the death", m.rank());
        }
        "mismatch" => {
            // Member 1 calls reduce where the others call broadcast.
            let r = if m.rank() == Rank(1) {
                m.reduce(1u64, |a, b| a + b).map(|_| ())
            } else {
                m.broadcast_word(5).map(|_| ())
            };
            let r = r.and_then(|()| m.barrier());
            let e = r.expect_err("a mismatch is detected");
            assert!(
                matches!(
                    e,
                    GroupError::Mismatch { .. } | GroupError::PeerFailed { .. }
                ),
                "{e}"
            );
            std::process::exit(4);
        }
        "nontree" => {
            // The creator's algorithm table reached this member: the non-tree
            // algorithms run over the job's extra rings, tuned fragments apply.
            let rounds: u64 = parts[1].parse().unwrap();
            let n = m.size();
            let c = m.context(0).unwrap();
            let want = (n > 1).then_some(smelt_tree::NonTree::Dissemination);
            assert_eq!(c.non_tree_for(smelt_tree::Op::Barrier, 0), want);
            let want = (n > 1).then_some(smelt_tree::NonTree::RecursiveDoubling);
            assert_eq!(c.non_tree_for(smelt_tree::Op::Allreduce, 8), want);
            assert_eq!(c.fragment_bytes(smelt_tree::Op::Reduce, 5000), 96);
            let me = m.rank().index() as u64;
            for k in 0..rounds {
                let max = m.barrier_agree(me * 10 + k, u64::max).unwrap();
                assert_eq!(max, (n as u64 - 1) * 10 + k);
            }
            all_collectives(&mut m, rounds).unwrap();
        }
        other => panic!("unknown scenario {other}"),
    }
}

/// Kills the calling process with SIGKILL (no destructors, no unwinding).
fn unsafe_free_kill_self() -> ! {
    let _ = Command::new("kill")
        .args(["-9", &std::process::id().to_string()])
        .status();
    std::thread::sleep(Duration::from_secs(60));
    unreachable!("SIGKILL")
}

#[test]
fn random_trees_of_1_to_16_processes_match_sequential_results() {
    let rounds = 2000 * scale();
    for (i, n) in [1usize, 2, 3, 5, 8, 16].into_iter().enumerate() {
        let tree = random_tree(n, 1000 + i as u64);
        let job = GroupJob::create(&[tree], &GroupConfig::default()).unwrap();
        let ok = wait_all(spawn(&job, &format!("collectives,{rounds}")));
        assert!(ok.iter().all(|&b| b), "n = {n}: {ok:?}");
        // Every member really joined (a child that ran no test would also exit 0).
        assert_eq!(job.joined(), n, "n = {n}");
    }
}

/// A job created with an algorithm table hands it to its members, with the rings its
/// non-tree algorithms need: dissemination barriers, recursive-doubling allreduces
/// and tuned fragment sizes run between processes, results checked.
#[test]
fn process_jobs_run_the_non_tree_algorithms_of_their_table() {
    let rules = "barrier=dissemination;allreduce=recursive-doubling;reduce=binary,segment=96";
    let table = smelt_tree::tuning::AlgorithmTable::parse(rules).unwrap();
    let cfg = GroupConfig {
        algorithms: Some(std::sync::Arc::new(table)),
        ..GroupConfig::default()
    };
    for (i, n) in [1usize, 2, 3, 5, 8].into_iter().enumerate() {
        let tree = random_tree(n, 2000 + i as u64);
        let job = GroupJob::create(&[tree], &cfg).unwrap();
        let ok = wait_all(spawn(&job, &format!("nontree,{}", 200 * scale())));
        assert!(ok.iter().all(|&b| b), "n = {n}: {ok:?}");
        assert_eq!(job.joined(), n, "n = {n}");
    }
}

fn assert_no_segments_of(job_path: &std::path::Path) {
    assert!(!job_path.exists(), "{} left behind", job_path.display());
}

#[test]
fn a_member_killed_mid_collective_fails_the_others_promptly() {
    for how in ["kill", "exit"] {
        let tree = random_tree(4, 7);
        let job = GroupJob::create(&[tree], &GroupConfig::default()).unwrap();
        let path = job.path().to_path_buf();
        let t = Instant::now();
        let children = spawn(&job, &format!("die,2,{how}"));
        let codes: Vec<Option<i32>> = children
            .into_iter()
            .map(|mut c| c.wait().unwrap().code())
            .collect();
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "took {:?}",
            t.elapsed()
        );
        for (r, c) in codes.iter().enumerate() {
            if r == 2 {
                continue;
            }
            assert_eq!(*c, Some(3), "member {r} ({how}): {codes:?}");
        }
        drop(job);
        assert_no_segments_of(&path);
    }
}

#[test]
fn members_calling_different_collectives_all_fail() {
    let tree = Tree::from_raw(vec![0, 1, 2], 0, vec![vec![1, 2], vec![], vec![]]).unwrap();
    let job = GroupJob::create(&[tree], &GroupConfig::default()).unwrap();
    let codes: Vec<Option<i32>> = spawn(&job, "mismatch")
        .into_iter()
        .map(|mut c| c.wait().unwrap().code())
        .collect();
    assert_eq!(codes, vec![Some(4); 3]);
}

#[test]
fn joining_without_a_job_is_a_clear_error() {
    if smelt_settings::is_set(smelt_settings::JOB) {
        return;
    }
    let e = join_from_env().unwrap_err();
    assert!(e.to_string().contains("smelt launch"), "{e}");
}
