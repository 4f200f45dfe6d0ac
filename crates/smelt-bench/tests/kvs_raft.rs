//! The Raft peer (`RaftStore`, raft-rs in memory): gets and sets, bad input, a closed
//! store, random runs with 16 threads on 2 CPUs checked for linearizability,
//! identical logs, retries applied once, the leader stopped mid-run. (Moved here from
//! `smelt-kvs` with the baseline; the checks are the store's own tests' helpers.)

#[path = "../../smelt-kvs/tests/common/mod.rs"]
mod common;

use common::check_run;
use smelt_bench::kvs::{self as bench, BenchConfig, RaftStore, Victim};
use smelt_kvs::{KvsError, StoreConfig};
use smelt_transport::stress_scale;
use std::time::{Duration, Instant};

#[test]
fn raft_store_serves_gets_and_sets() {
    for r in [1, 2, 3, 5] {
        let mut s = RaftStore::start(StoreConfig::new(r, 3)).unwrap();
        assert_eq!(s.replicas(), r);
        let mut c = s.take_clients();
        assert!(s.take_clients().is_empty());
        assert_eq!(
            c.iter().map(|x| x.home()).collect::<Vec<_>>(),
            (0..3).map(|x| x % r).collect::<Vec<_>>()
        );
        assert_eq!(c[0].get(b"k").unwrap(), None, "{r} replicas");
        c[0].set(b"k", b"v1").unwrap();
        c[1].set(b"k2", b"").unwrap();
        c[2].set(b"k", b"v2").unwrap();
        // Linearizable: what one client set, every client then reads at its home.
        for cl in c.iter_mut() {
            assert_eq!(cl.get(b"k").unwrap(), Some(b"v2".to_vec()), "{r} replicas");
            assert_eq!(cl.get(b"k2").unwrap(), Some(Vec::new()), "{r} replicas");
        }
        // Longest key and value.
        c[1].set(&[7; 8], &[9; 16]).unwrap();
        assert_eq!(c[1].get(&[7; 8]).unwrap(), Some(vec![9; 16]));
        let rep = s.close().unwrap();
        rep.check_logs().unwrap();
        assert_eq!(rep.replicas.iter().flatten().count(), r);
        for x in rep.replicas.iter().flatten() {
            assert_eq!(
                (x.applied, x.keys),
                (4, 3),
                "{r} replicas: replica {}",
                x.replica
            );
            assert_eq!(x.exit, "closed");
        }
    }
}

#[test]
fn bad_input_is_a_clear_error() {
    assert!(matches!(
        RaftStore::start(StoreConfig::new(0, 1)),
        Err(KvsError::Config(m)) if m.contains("at least one replica")
    ));
    let mut cfg = StoreConfig::new(2, 2);
    cfg.homes = Some(vec![0, 2]);
    assert!(matches!(RaftStore::start(cfg), Err(KvsError::Config(m)) if m.contains("home 2")));
    let mut cfg = StoreConfig::new(2, 2);
    cfg.homes = Some(vec![0]);
    assert!(matches!(RaftStore::start(cfg), Err(KvsError::Config(m)) if m.contains("1 homes")));
    let mut cfg = StoreConfig::new(2, 1);
    cfg.key_len = 300;
    assert!(matches!(RaftStore::start(cfg), Err(KvsError::Config(m)) if m.contains("255")));
    let mut cfg = StoreConfig::new(2, 1);
    cfg.attempts = 0;
    assert!(matches!(RaftStore::start(cfg), Err(KvsError::Config(_))));
    let mut cfg = StoreConfig::new(2, 1);
    cfg.attempt_timeout = Duration::ZERO;
    assert!(matches!(RaftStore::start(cfg), Err(KvsError::Config(_))));
    let mut cfg = StoreConfig::new(2, 1);
    cfg.replica_cpus = Some(vec![0]);
    assert!(matches!(RaftStore::start(cfg), Err(KvsError::Config(_))));

    let mut s = RaftStore::start(StoreConfig::new(3, 1)).unwrap();
    assert!(matches!(s.crash(3), Err(KvsError::Config(m)) if m.contains("replica 3")));
    let mut c = s.take_clients().remove(0);
    assert_eq!(
        c.set(&[0; 9], b"v"),
        Err(KvsError::KeyTooLong { len: 9, max: 8 })
    );
    assert_eq!(
        c.set(b"k", &[0; 17]),
        Err(KvsError::ValueTooLong { len: 17, max: 16 })
    );
    assert_eq!(c.get(&[0; 9]), Err(KvsError::KeyTooLong { len: 9, max: 8 }));
    // Nothing was sent: the store is fine and empty.
    assert_eq!(c.get(b"k").unwrap(), None);
    let rep = s.close().unwrap();
    rep.check_logs().unwrap();
    assert!(rep.replicas.iter().flatten().all(|r| r.applied == 0));

    // The benchmark's own checks.
    let mut b = BenchConfig::new(StoreConfig::new(2, 2));
    b.get_ratio = 1.5;
    assert!(matches!(bench::run_raft(&b), Err(KvsError::Config(_))));
    let mut b = BenchConfig::new(StoreConfig::new(2, 2));
    b.keys = 0;
    assert!(matches!(bench::run_raft(&b), Err(KvsError::Config(_))));
}

#[test]
fn a_closed_store_errors_and_nothing_hangs() {
    let mut s = RaftStore::start(StoreConfig::new(3, 2)).unwrap();
    let mut c = s.take_clients();
    c[0].set(b"a", b"1").unwrap();
    let t0 = Instant::now();
    let rep = s.close().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(5));
    rep.check_logs().unwrap();
    for cl in c.iter_mut() {
        assert_eq!(cl.get(b"a"), Err(KvsError::Closed));
        assert_eq!(cl.set(b"a", b"2"), Err(KvsError::Closed));
    }
    // Dropped without close: the replicas stop too.
    let mut s = RaftStore::start(StoreConfig::new(3, 1)).unwrap();
    let mut c = s.take_clients().remove(0);
    c.set(b"a", b"1").unwrap();
    let t0 = Instant::now();
    drop(s);
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_eq!(c.get(b"a"), Err(KvsError::Closed));
}

fn random_run(replicas: usize, clients: usize, keys: u64) {
    let res = common::seeded_random_run(StoreConfig::new(replicas, clients), keys, bench::run_raft);
    check_run(&res, true);
}

#[test]
fn random_runs_16_threads_are_linearizable() {
    // 16 threads (replicas + clients) on the machine's CPUs (2 here), few keys so
    // that operations on a key overlap.
    random_run(4, 12, 3);
    random_run(6, 10, 2);
    random_run(8, 8, 4);
}

/// Clients that give up on an attempt almost at once retry the same request many
/// times (proposed again each time): each request is still applied once, and the
/// history is linearizable.
#[test]
fn retried_sets_are_applied_once() {
    common::retried_sets_are_applied_once(StoreConfig::new(4, 12), bench::run_raft, "raft");
}

/// The leader stops mid-run: the others elect a new one and go on; only the stopped
/// replica's clients fail; logs identical, history linearizable.
#[test]
fn the_leader_stops_and_raft_fails_over() {
    let mut cfg = StoreConfig::new(5, 10);
    cfg.keep_log = true;
    let mut b = BenchConfig::new(cfg);
    b.duration = Duration::from_millis(1500 * stress_scale());
    b.keys = 3;
    b.get_ratio = 0.5;
    b.history = true;
    b.crashes = vec![(Duration::from_millis(300), Victim::Leader)];
    let res = bench::run_raft(&b).unwrap();
    assert_eq!(res.crashed.len(), 1);
    let (at, victim) = res.crashed[0];
    assert_eq!(
        res.report.replicas[victim].as_ref().unwrap().exit,
        "crashed"
    );
    // Sets completed after the crash (a new leader was elected).
    let after = common::sets_ok_after(&res.history, at);
    assert!(after > 0, "no set completed after the leader stopped");
    assert_ne!(res.report.leader, victim);
    // Only the stopped replica's clients failed.
    for h in res.history.iter().filter(|h| !h.ok) {
        assert_eq!(h.client % 5, victim, "{h:?}");
    }
    check_run(&res, true);
}
