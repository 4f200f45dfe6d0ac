//! The store: operations on every protocol and tree, bad input, two-phase commit's
//! votes, retries applied once, linearizability of random runs (16 threads on 2
//! CPUs), identical logs, fail-stop replicas.

mod common;

use common::{check_run, crash_run, sets_ok_after};
use smelt_kvs::bench;
use smelt_kvs::history::{check_history, HistoryOp, OpKind};
use smelt_kvs::{KvsError, Protocol, Store, StoreConfig, StoreReport, TreeSpec};
use smelt_transport::stress_scale;
use smelt_tree::{Topology, Tree};
use std::sync::Arc;
use std::time::Duration;

fn trees() -> Vec<TreeSpec> {
    vec![
        TreeSpec::shaped(Topology::AdaptiveShuffled),
        TreeSpec::shaped(Topology::Sequential),
        TreeSpec::shaped(Topology::Binary),
        TreeSpec::shaped(Topology::Knomial(1)), // a chain: the deepest tree
    ]
}

const PROTOCOLS: [Protocol; 3] = [Protocol::OnePaxos, Protocol::TwoPc, Protocol::Broadcast];

#[test]
fn every_protocol_and_tree_serves_gets_and_sets() {
    for p in PROTOCOLS {
        for t in trees() {
            for r in [1, 2, 5] {
                let cfg = StoreConfig::new(r, 3).protocol(p).tree(t.clone());
                let mut s = Store::start(cfg).unwrap();
                let mut c = s.take_clients();
                assert!(s.take_clients().is_empty());
                let what = format!("{p} over {} with {r} replicas", t.name());
                assert_eq!(c[0].get(b"k").unwrap(), None, "{what}");
                c[0].set(b"k", b"v1").unwrap();
                c[1].set(b"k2", b"").unwrap();
                c[2].set(b"k", b"v2").unwrap();
                if p != Protocol::Broadcast {
                    // Linearizable: what one client set, every client then reads.
                    for cl in c.iter_mut() {
                        assert_eq!(cl.get(b"k").unwrap(), Some(b"v2".to_vec()), "{what}");
                        assert_eq!(cl.get(b"k2").unwrap(), Some(Vec::new()), "{what}");
                    }
                }
                // Longest key and value.
                c[1].set(&[7; 8], &[9; 16]).unwrap();
                assert_eq!(c[1].get(&[7; 8]).unwrap(), Some(vec![9; 16]));
                let rep = s.close().unwrap();
                rep.check_logs().unwrap();
                for x in rep.replicas.iter().flatten() {
                    assert_eq!((x.applied, x.keys), (4, 3), "{what}: replica {}", x.replica);
                }
                for cl in c.iter_mut() {
                    assert_eq!(cl.get(b"k"), Err(KvsError::Closed));
                    assert_eq!(cl.set(b"k", b"v"), Err(KvsError::Closed));
                }
            }
        }
    }
}

#[test]
fn bad_input_is_a_clear_error() {
    assert!(matches!(
        Store::start(StoreConfig::new(0, 1)),
        Err(KvsError::Config(m)) if m.contains("at least one replica")
    ));
    let mut cfg = StoreConfig::new(2, 1);
    cfg.leader = Some(5);
    assert!(matches!(Store::start(cfg), Err(KvsError::Config(m)) if m.contains("leader 5")));
    let mut cfg = StoreConfig::new(2, 2);
    cfg.homes = Some(vec![0, 2]);
    assert!(matches!(Store::start(cfg), Err(KvsError::Config(m)) if m.contains("home 2")));
    let mut cfg = StoreConfig::new(2, 1);
    cfg.key_len = 300;
    assert!(matches!(Store::start(cfg), Err(KvsError::Config(_))));
    let mut cfg = StoreConfig::new(2, 1);
    cfg.value_len = 100_000;
    let e = Store::start(cfg).unwrap_err();
    assert!(e.to_string().contains("raise the capacity"), "{e}");
    let mut cfg = StoreConfig::new(2, 1);
    cfg.veto = Some(Arc::new(|_, _, _| true));
    assert!(matches!(Store::start(cfg), Err(KvsError::Config(m)) if m.contains("2pc")));
    let cfg = StoreConfig::new(3, 1).tree(TreeSpec::Explicit(
        Tree::from_raw(vec![0, 1], 0, vec![vec![1], vec![]]).unwrap(),
    ));
    assert!(matches!(Store::start(cfg), Err(KvsError::Config(m)) if m.contains("2 members")));
    let mut s = Store::start(StoreConfig::new(2, 1)).unwrap();
    assert!(matches!(s.crash(7), Err(KvsError::Config(_))));
    let mut c = s.take_clients().pop().unwrap();
    assert_eq!(
        c.set(&[0; 9], b"v"),
        Err(KvsError::KeyTooLong { len: 9, max: 8 })
    );
    assert_eq!(c.get(&[0; 9]), Err(KvsError::KeyTooLong { len: 9, max: 8 }));
    assert_eq!(
        c.set(b"k", &[0; 17]),
        Err(KvsError::ValueTooLong { len: 17, max: 16 })
    );
    assert_eq!(c.get(b"never"), Ok(None));
    let e = c.set(&[0; 9], b"v").unwrap_err().to_string();
    assert!(e.contains("9 bytes") && e.contains("8-byte keys"), "{e}");
    drop(s); // dropping the store closes it
    assert_eq!(c.get(b"k"), Err(KvsError::Closed));
    // Bigger sizes, configured.
    let mut cfg = StoreConfig::new(3, 1);
    cfg.key_len = 64;
    cfg.value_len = 1000;
    let mut s = Store::start(cfg).unwrap();
    let mut c = s.take_clients().pop().unwrap();
    c.set(&[1; 64], &[2; 1000]).unwrap();
    assert_eq!(c.get(&[1; 64]).unwrap(), Some(vec![2; 1000]));
    s.close().unwrap().check_logs().unwrap();
}

#[test]
fn two_phase_commit_aborts_on_a_no_vote() {
    for t in [
        TreeSpec::shaped(Topology::Binary),
        TreeSpec::shaped(Topology::Sequential),
    ] {
        let mut cfg = StoreConfig::new(5, 2).protocol(Protocol::TwoPc).tree(t);
        cfg.keep_log = true;
        // Replica 3 refuses values starting with "x".
        cfg.veto = Some(Arc::new(|replica, _key, value| {
            !(replica == 3 && value.first() == Some(&b'x'))
        }));
        let mut s = Store::start(cfg).unwrap();
        let mut c = s.take_clients();
        c[0].set(b"a", b"1").unwrap();
        assert!(matches!(c[0].set(b"a", b"x2"), Err(KvsError::Rejected(_))));
        assert!(matches!(c[1].set(b"b", b"x"), Err(KvsError::Rejected(_))));
        c[1].set(b"a", b"3").unwrap();
        assert_eq!(c[0].get(b"a").unwrap(), Some(b"3".to_vec()));
        assert_eq!(c[0].get(b"b").unwrap(), None);
        let rep = s.close().unwrap();
        rep.check_logs().unwrap();
        for x in rep.replicas.iter().flatten() {
            assert_eq!(
                (x.applied, x.aborted, x.decided),
                (2, 2, 4),
                "replica {}",
                x.replica
            );
            let log = x.log.as_ref().unwrap();
            assert_eq!(log.len(), 2);
            assert_eq!(log[1].entry.value, b"3");
        }
    }
}

fn random_run(p: Protocol, tree: TreeSpec, replicas: usize, clients: usize, keys: u64) {
    let cfg = StoreConfig::new(replicas, clients).protocol(p).tree(tree);
    let res = common::seeded_random_run(cfg, keys, bench::run);
    check_run(&res, p != Protocol::Broadcast);
}

#[test]
fn random_runs_16_threads_are_linearizable() {
    // 16 threads (replicas + clients) on the machine's CPUs (2 here), few keys so
    // that operations on a key overlap.
    for p in [Protocol::OnePaxos, Protocol::TwoPc] {
        random_run(p, TreeSpec::shaped(Topology::AdaptiveShuffled), 4, 12, 3);
        random_run(p, TreeSpec::shaped(Topology::Sequential), 6, 10, 2);
        random_run(p, TreeSpec::shaped(Topology::Knomial(1)), 8, 8, 4);
    }
    // The plain broadcast: same order everywhere (not checked for linearizability).
    random_run(
        Protocol::Broadcast,
        TreeSpec::shaped(Topology::Binary),
        8,
        8,
        3,
    );
}

/// Clients that give up on an attempt almost at once retry the same request many
/// times: each request is still applied once, and the history is linearizable.
#[test]
fn retried_sets_are_applied_once() {
    for p in [Protocol::OnePaxos, Protocol::TwoPc] {
        let cfg = StoreConfig::new(4, 12)
            .protocol(p)
            .tree(TreeSpec::shaped(Topology::Binary));
        common::retried_sets_are_applied_once(cfg, bench::run, &p.to_string());
    }
}

/// Every acknowledged set is held by every survivor (applied, or delivered and not
/// yet decided when the store was stopped).
fn acked_sets_survive(hist: &[HistoryOp], rep: &StoreReport) {
    let acked: Vec<u64> = hist
        .iter()
        .filter(|h| h.op == OpKind::Set && h.ok)
        .map(|h| h.value.unwrap())
        .collect();
    assert!(!acked.is_empty());
    for r in rep
        .replicas
        .iter()
        .flatten()
        .filter(|r| r.exit != "crashed")
    {
        let vals = common::logged_values(r.log.iter().chain(r.undecided.iter()).flatten());
        for v in &acked {
            assert!(
                vals.contains(v),
                "replica {}: acknowledged {v} lost",
                r.replica
            );
        }
    }
}

/// Fail-stop without failover (2PC; 1Paxos with failover off): a replica crashes
/// mid-run. Nothing hangs; clients see successes or errors; every acknowledged set is
/// in the survivors' logs; what was answered is linearizable.
#[test]
fn a_crashed_replica_without_failover_fails_operations_but_hangs_nothing() {
    for (p, leader) in [
        (Protocol::OnePaxos, false), // a leaf
        (Protocol::OnePaxos, true),
        (Protocol::TwoPc, false),
    ] {
        let mut cfg = StoreConfig::new(5, 6)
            .protocol(p)
            .tree(TreeSpec::shaped(Topology::Binary));
        cfg.keep_log = true;
        cfg.failover = false;
        cfg.attempt_timeout = Duration::from_millis(200);
        cfg.attempts = 2;
        cfg.close_timeout = Duration::from_secs(2);
        let s = Store::start(cfg).unwrap();
        let victim = if leader {
            s.leader()
        } else {
            (0..5)
                .find(|&r| s.tree_children()[r].is_empty() && r != s.leader())
                .unwrap()
        };
        let (hist, rep, took) = crash_run(s, &[(150, victim)], Duration::from_millis(600));
        assert!(took < Duration::from_secs(20), "took {took:?}");
        assert_eq!(rep.replicas[victim].as_ref().unwrap().exit, "crashed");
        acked_sets_survive(&hist, &rep);
        assert!(
            hist.iter().any(|h| !h.ok),
            "{p}: no operation failed after the crash"
        );
        check_history(&hist).unwrap();
    }
}

/// 1Paxos failover: the acceptor, the leader, a leaf, and the acceptor twice in a row
/// stop mid-run; the survivors change view and go on. Sets succeed after the crash,
/// survivors end with the same log, no acknowledged set is lost, the history is
/// linearizable, nothing hangs.
#[test]
fn one_paxos_fails_over() {
    for (what, tree) in [
        ("acceptor", Topology::Binary),
        ("leader", Topology::AdaptiveShuffled),
        ("leaf", Topology::Binary),
        ("acceptor twice", Topology::Sequential),
        ("acceptor twice", Topology::Knomial(1)),
    ] {
        let s = failover_store(6, tree);
        let root = s.root();
        let victims: Vec<(u64, usize)> = match what {
            "acceptor" => vec![(200, root)],
            "leader" => vec![(200, s.leader())],
            "leaf" => vec![(
                200,
                (0..6)
                    .find(|&r| s.tree_children()[r].is_empty() && r != s.leader())
                    .unwrap(),
            )],
            _ => {
                // The backup acceptor is the lowest-numbered survivor.
                let next = (0..6).find(|&r| r != root).unwrap();
                vec![(200, root), (500, next)]
            }
        };
        let dead: Vec<usize> = victims.iter().map(|v| v.1).collect();
        let last = victims.last().unwrap().0;
        let (hist, rep, took) = crash_run(s, &victims, Duration::from_millis(last + 600));
        let setup = format!("{what} over {tree}");
        assert!(took < Duration::from_secs(30), "{setup}: took {took:?}");
        rep.check_logs().unwrap_or_else(|e| panic!("{setup}: {e}"));
        acked_sets_survive(&hist, &rep);
        check_history(&hist).unwrap_or_else(|e| panic!("{setup}: {e}"));
        // Sets by clients whose home survived succeed after the last crash.
        let ok_after = sets_ok_after(&hist, Duration::from_millis(last + 100));
        assert!(ok_after > 0, "{setup}: no set succeeded after the crash");
        for r in rep.replicas.iter().flatten() {
            if dead.contains(&r.replica) {
                assert_eq!(r.exit, "crashed");
            } else {
                assert!(
                    r.view_changes >= 1,
                    "{setup}: replica {} kept its view",
                    r.replica
                );
                assert!(
                    !dead.contains(&r.root),
                    "{setup}: replica {} kept a dead root",
                    r.replica
                );
            }
        }
        eprintln!(
            "{setup}: {} sets ok after the last crash, {} operations failed",
            ok_after,
            hist.iter().filter(|h| !h.ok).count()
        );
    }
}

/// Random crashes (one or two replicas, any role, at random times, on random trees):
/// every invariant of [`one_paxos_fails_over`] holds.
#[test]
fn one_paxos_survives_random_crashes() {
    let mut x = 0x2545f4914f6cdd1du64;
    let mut next = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let trees = [
        Topology::Binary,
        Topology::Sequential,
        Topology::Knomial(1),
        Topology::AdaptiveShuffled,
        Topology::Fibonacci,
    ];
    for round in 0..4 * stress_scale() {
        let r = 4 + next(4) as usize;
        let tree = trees[next(trees.len() as u64) as usize];
        let s = failover_store(r, tree);
        let first = next(r as u64) as usize;
        let mut victims = vec![(20 + next(300), first)];
        if next(2) == 0 {
            let second = (first + 1 + next(r as u64 - 1) as usize) % r;
            victims.push((victims[0].0 + next(200), second));
        }
        let last = victims.last().unwrap().0;
        let setup = format!("round {round}: {r} replicas over {tree}, crashes {victims:?}");
        let (hist, rep, took) = crash_run(s, &victims, Duration::from_millis(last + 400));
        assert!(took < Duration::from_secs(30), "{setup}: took {took:?}");
        rep.check_logs().unwrap_or_else(|e| panic!("{setup}: {e}"));
        acked_sets_survive(&hist, &rep);
        check_history(&hist).unwrap_or_else(|e| panic!("{setup}: {e}"));
        assert!(
            sets_ok_after(&hist, Duration::from_millis(last + 100)) > 0,
            "{setup}: no set succeeded after the crashes"
        );
    }
}

/// A 1Paxos store of `replicas` replicas over `tree` for the failover tests: short
/// attempts, many retries, logs kept.
fn failover_store(replicas: usize, tree: Topology) -> Store {
    let mut cfg = StoreConfig::new(replicas, 8)
        .protocol(Protocol::OnePaxos)
        .tree(TreeSpec::shaped(tree));
    cfg.keep_log = true;
    cfg.attempt_timeout = Duration::from_millis(150);
    cfg.attempts = 20;
    cfg.close_timeout = Duration::from_secs(5);
    Store::start(cfg).unwrap()
}
