//! Replicas as processes (`Deployment::Processes`) linked by shared memory: the same
//! protocols, failover on `SIGKILL`, logs collected from the processes, nothing left
//! in /dev/shm. The replica program is this test program itself (the test
//! `replica_program`, which rebuilds smelt's trees with `smelt-tree`), and the crate's
//! own `smelt-kvs-replica` (rank-based trees only) where its trees are rank-based.

mod common;

use common::{crash_run, sets_ok_after};
use smelt_kvs::bench;
use smelt_kvs::history::{check_history, HistoryOp, OpKind};
use smelt_kvs::{Deployment, KvsError, Protocol, Store, StoreConfig, StoreReport, TreeSpec};
use smelt_tree::Topology;
use std::time::{Duration, Instant};

/// This test program as the store's replica program: a store starts it with the
/// replica's environment, and only the test `replica_program` runs.
fn processes() -> Deployment {
    Deployment::Processes {
        program: std::env::current_exe().expect("the test program's path"),
        args: ["replica_program", "--exact", "--nocapture", "-q"]
            .map(String::from)
            .to_vec(),
    }
}

/// A replica process of the stores of this file (a no-op test otherwise): a program
/// of your own as the replica program, with smelt's trees.
#[test]
fn replica_program() {
    if !smelt_kvs::process::is_replica_process() {
        return;
    }
    let code =
        match smelt_kvs::process::run_replica_from_env_with(&smelt_tree::shape::from_description) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("error: {e}");
                2
            }
        };
    // Nothing of the test harness after the report.
    std::process::exit(code);
}

/// A store whose replica processes the caller starts (`Deployment::Launched`): the
/// launcher gets each replica's world environment and CPU, starts them through the one
/// launcher (`smelt_mesh::launch::Members`) and hands them over; the store starts none
/// itself. A launcher that starts too few processes, or fails, is a clear error.
#[test]
fn the_caller_launches_the_replica_members() {
    use smelt_kvs::process::{ReplicaLaunch, ENV_REPLICA};
    use smelt_kvs::Launcher;
    use smelt_mesh::launch::Members;
    use std::process::{Command, Stdio};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let launch = move |l: &ReplicaLaunch| {
        seen.fetch_add(1, Ordering::SeqCst);
        let mut members = Members::new();
        for r in 0..l.replicas() {
            let env = l.env(r);
            assert!(env
                .iter()
                .any(|(k, v)| k == ENV_REPLICA && *v == r.to_string()));
            assert!(env
                .iter()
                .any(|(k, v)| k == "SMELT_RANK" && *v == r.to_string()));
            let Deployment::Processes { program, args } = processes() else {
                unreachable!()
            };
            let mut cmd = Command::new(program);
            cmd.args(args)
                .envs(env)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            members
                .spawn(&mut cmd, l.cpu(r).map(smelt_mesh::CpuId))
                .unwrap();
        }
        Ok(members)
    };
    let mut cfg = config(3, 2, Protocol::OnePaxos, Topology::AdaptiveShuffled);
    cfg.deployment = Deployment::Launched(Launcher::new(launch));
    let mut s = Store::start(cfg).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(s.replica_pid(2).is_some());
    let mut c = s.take_clients();
    c[0].set(b"k", b"v").unwrap();
    assert_eq!(c[1].get(b"k").unwrap(), Some(b"v".to_vec()));
    s.crash(s.root()).unwrap();
    c[1].set(b"k", b"w").unwrap();
    assert_eq!(c[0].get(b"k").unwrap(), Some(b"w".to_vec()));
    drop(c);
    let rep = s.close().unwrap();
    rep.check_logs().unwrap();

    let mut cfg = config(2, 1, Protocol::OnePaxos, Topology::Binary);
    cfg.deployment = Deployment::Launched(Launcher::new(|_| Ok(Members::new())));
    let e = Store::start(cfg).unwrap_err().to_string();
    assert!(e.contains("started 0 processes for 2 replicas"), "{e}");
    let mut cfg = config(2, 1, Protocol::OnePaxos, Topology::Binary);
    cfg.deployment = Deployment::Launched(Launcher::new(|_| {
        Err(KvsError::Replica {
            replica: 1,
            what: "no CPU for it".into(),
        })
    }));
    let e = Store::start(cfg).unwrap_err().to_string();
    assert!(e.contains("replica 1: no CPU for it"), "{e}");
}

/// A client process of the stores of `a_client_process_connects` (a no-op test
/// otherwise): it joins the store's world, connects as its client, sets its own key and
/// reads it back, and reads what the store's other client process set, if it is there.
#[test]
fn client_program() {
    if std::env::var_os("TEST_SMELT_KVS_CLIENT").is_none() {
        return;
    }
    let run = || -> Result<(), String> {
        let w = smelt_mesh::world::World::from_env().map_err(|e| e.to_string())?;
        let mut c = smelt_kvs::process::connect_client(&w).map_err(|e| e.to_string())?;
        let me = c.id();
        for i in 0..20u32 {
            let v = format!("{me}-{i}");
            c.set(format!("k{me}").as_bytes(), v.as_bytes())
                .map_err(|e| e.to_string())?;
            let got = c
                .get(format!("k{me}").as_bytes())
                .map_err(|e| e.to_string())?;
            if got.as_deref() != Some(v.as_bytes()) {
                return Err(format!("client {me} read {got:?} after setting {v}"));
            }
        }
        Ok(())
    };
    let code = match run() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e}");
            2
        }
    };
    std::process::exit(code);
}

/// Clients as processes (`StoreConfig::client_processes`): two client processes join
/// the store's world with `Store::client_env` and `process::connect_client`, each sets
/// and reads its own key 20 times; every replica applied the same 40 sets. A rank that
/// is not a client, a world that is not a store's and client processes of a store of
/// threads are clear errors.
#[test]
fn a_client_process_connects() {
    use std::process::{Command, Stdio};
    let mut cfg = config(3, 2, Protocol::OnePaxos, Topology::AdaptiveShuffled);
    cfg.client_processes = true;
    let mut s = Store::start(cfg).unwrap();
    assert!(s.take_clients().is_empty());
    assert!(s.client_env(2).is_none());
    let kids: Vec<_> = (0..2)
        .map(|c| {
            Command::new(std::env::current_exe().unwrap())
                .args(["client_program", "--exact", "--nocapture", "-q"])
                .envs(s.client_env(c).unwrap())
                .env("TEST_SMELT_KVS_CLIENT", "1")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for k in kids {
        let out = k.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let rep = s.close().unwrap();
    rep.check_logs().unwrap();
    for r in rep.replicas.iter().flatten() {
        assert_eq!(r.applied, 40, "{r:?}");
    }
    let w = smelt_mesh::world::World::threads(1).unwrap().remove(0);
    let e = smelt_kvs::process::connect_client(&w)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a store's"), "{e}");
    let mut cfg = StoreConfig::new(2, 1);
    cfg.client_processes = true;
    let e = Store::start(cfg).unwrap_err().to_string();
    assert!(e.contains("store of processes"), "{e}");
}

/// The crate's replica program runs the stores over rank-based trees, and refuses
/// others with a clear error.
#[test]
fn the_crate_replica_program_runs_rank_based_trees() {
    let bin = Deployment::processes(env!("CARGO_BIN_EXE_smelt-kvs-replica"));
    let mut cfg = config(3, 2, Protocol::OnePaxos, Topology::Binary);
    cfg.deployment = bin.clone();
    let mut s = Store::start(cfg).unwrap();
    let mut c = s.take_clients();
    c[0].set(b"k", b"v").unwrap();
    assert_eq!(c[1].get(b"k").unwrap(), Some(b"v".to_vec()));
    s.close().unwrap().check_logs().unwrap();
    let mut cfg = config(3, 1, Protocol::OnePaxos, Topology::AdaptiveShuffled);
    cfg.deployment = bin;
    // Each replica joins, reads the store's description and stops: the store fails to
    // start or reports the replicas' fault.
    let msg = match Store::start(cfg) {
        Err(e) => e.to_string(),
        Ok(s) => format!("{:?}", s.close().map(|r| r.replicas)),
    };
    assert!(msg.contains("rank-based trees only"), "{msg}");
}

fn config(replicas: usize, clients: usize, p: Protocol, tree: Topology) -> StoreConfig {
    let mut cfg = StoreConfig::new(replicas, clients)
        .protocol(p)
        .tree(TreeSpec::shaped(tree));
    cfg.deployment = processes();
    cfg.keep_log = true;
    cfg
}

/// Every replica applied the same log, every acknowledged set is in it, no request is
/// applied twice.
fn check_logs(rep: &StoreReport, hist: &[HistoryOp]) {
    rep.check_logs().unwrap();
    let live: Vec<_> = rep
        .replicas
        .iter()
        .flatten()
        .filter(|r| r.exit == "closed")
        .collect();
    assert!(!live.is_empty());
    for r in &live {
        let log = r.log.as_ref().expect("logs kept");
        common::assert_applied_once(log);
        let values = common::logged_values(log.iter().chain(r.undecided.iter().flatten()));
        common::assert_acked_sets_in(&values, hist, &format!("replica {}: ", r.replica));
    }
}

#[test]
fn replica_processes_serve_gets_and_sets() {
    for p in [Protocol::OnePaxos, Protocol::TwoPc, Protocol::Broadcast] {
        let mut s = Store::start(config(3, 2, p, Topology::Binary)).unwrap();
        let seg = s.segment().expect("a store of processes").to_path_buf();
        assert!(!seg.exists(), "{} left behind", seg.display());
        let pids: Vec<u32> = (0..3).map(|r| s.replica_pid(r).unwrap()).collect();
        assert!(pids.iter().all(|&x| x != std::process::id()));
        let mut c = s.take_clients();
        c[0].set(b"k", b"v1").unwrap();
        if p != Protocol::Broadcast {
            assert_eq!(c[1].get(b"k").unwrap(), Some(b"v1".to_vec()), "{p}");
        }
        assert_eq!(c[0].get(b"k").unwrap(), Some(b"v1".to_vec()), "{p}");
        assert_eq!(c[1].get(b"none").unwrap(), None);
        assert!(matches!(
            c[0].set(&[0; 9], b""),
            Err(KvsError::KeyTooLong { .. })
        ));
        let rep = s.close().unwrap();
        rep.check_logs().unwrap();
        for r in rep.replicas.iter().flatten() {
            assert_eq!(r.exit, "closed", "{p}: {r:?}");
            assert_eq!(r.applied, 1, "{p}");
            assert_eq!(r.log.as_ref().unwrap().len(), 1);
        }
        assert!(matches!(c[0].get(b"k"), Err(KvsError::Closed)));
        // Every replica process has exited.
        for pid in pids {
            assert!(
                !std::path::Path::new(&format!("/proc/{pid}")).exists()
                    || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                        .map(|s| s.contains(") Z"))
                        .unwrap_or(true),
                "replica process {pid} still runs"
            );
        }
    }
}

/// Mixed gets and sets from 8 client threads on 4 replica processes (16 members on the
/// 2 CPUs here): the history is linearizable and every replica applied the same log.
#[test]
fn random_run_over_processes_is_linearizable() {
    for p in [Protocol::OnePaxos, Protocol::TwoPc] {
        let cfg = config(4, 8, p, Topology::AdaptiveShuffled);
        let res = common::random_run(cfg, 3, 400, bench::run);
        check_logs(&res.report, &res.history);
        let s = check_history(&res.history).unwrap_or_else(|e| panic!("{p}: {e}"));
        assert!(s.ops > 0);
        eprintln!(
            "{p} over processes: {} sets, {} gets in {:?}",
            res.sets.ok, res.gets.ok, res.elapsed
        );
    }
}

/// 1Paxos failover with processes: the acceptor's process is killed (SIGKILL) mid-run,
/// then the backup acceptor's. The survivors change view and keep serving; no
/// acknowledged set is lost; the history is linearizable; nothing hangs.
#[test]
fn killed_acceptor_process_fails_over() {
    for (what, tree) in [
        ("acceptor", Topology::Binary),
        ("acceptor twice", Topology::AdaptiveShuffled),
    ] {
        let mut cfg = config(5, 6, Protocol::OnePaxos, tree);
        cfg.attempt_timeout = Duration::from_millis(150);
        cfg.attempts = 20;
        cfg.close_timeout = Duration::from_secs(5);
        let s = Store::start(cfg).unwrap();
        let seg = s.segment().unwrap().to_path_buf();
        let root = s.root();
        let mut victims = vec![(200, root)];
        if what == "acceptor twice" {
            victims.push((450, (0..5).find(|&r| r != root).unwrap()));
        }
        let dead: Vec<usize> = victims.iter().map(|v| v.1).collect();
        let last = victims.last().unwrap().0;
        let (hist, rep, took) = crash_run(s, &victims, Duration::from_millis(last + 500));
        let setup = format!("{what} over {tree}");
        assert!(took < Duration::from_secs(20), "{setup}: took {took:?}");
        rep.check_logs().unwrap_or_else(|e| panic!("{setup}: {e}"));
        check_logs(&rep, &hist);
        check_history(&hist).unwrap_or_else(|e| panic!("{setup}: {e}"));
        let ok_after = sets_ok_after(&hist, Duration::from_millis(last + 100));
        assert!(ok_after > 0, "{setup}: no set succeeded after the kill");
        for r in rep.replicas.iter().flatten() {
            if dead.contains(&r.replica) {
                assert_eq!(r.exit, "crashed", "{setup}");
            } else {
                assert_eq!(r.exit, "closed", "{setup}: {r:?}");
                assert!(
                    r.view_changes >= 1,
                    "{setup}: replica {} kept its view",
                    r.replica
                );
                assert!(!dead.contains(&r.root), "{setup}: a dead root");
            }
        }
        assert!(!seg.exists(), "{setup}: {} left behind", seg.display());
        eprintln!(
            "{setup}: {ok_after} sets ok after the last kill, {} operations failed",
            hist.iter().filter(|h| !h.ok).count()
        );
    }
}

/// A replica program that is not one, or does not exist: a clear error, nothing left.
#[test]
fn bad_replica_program_is_a_clear_error() {
    let mut cfg = StoreConfig::new(2, 1);
    cfg.deployment = Deployment::processes("/nonexistent/smelt-kvs-replica");
    let e = Store::start(cfg).unwrap_err();
    assert!(
        matches!(&e, KvsError::Replica { what, .. } if what.contains("cannot start")),
        "{e}"
    );
    let mut cfg = StoreConfig::new(2, 1);
    cfg.deployment = Deployment::processes("/bin/false");
    let e = Store::start(cfg).unwrap_err();
    assert!(e.to_string().contains("ended before joining"), "{e}");
    let mut cfg = StoreConfig::new(2, 1).protocol(Protocol::TwoPc);
    cfg.deployment = processes();
    cfg.veto = Some(std::sync::Arc::new(|_, _, _| true));
    assert!(matches!(Store::start(cfg), Err(KvsError::Config(_))));
    // Not started by a store.
    assert!(smelt_kvs::process::run_replica_from_env().is_err());
    // A member of a world that is not a store's.
    let w = smelt_mesh::world::World::threads(1).unwrap().remove(0);
    let e = smelt_kvs::process::run_replica(&w, &smelt_tree::shape::from_description)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a store's"), "{e}");
}

/// Client re-homing: the home replica of client 0 is killed, then its first backup;
/// the client moves on each time and keeps working (no operation fails), each set is
/// applied once, and the history is linearizable. Over threads and over processes.
#[test]
fn a_client_moves_to_a_backup_when_its_home_stops() {
    for procs in [false, true] {
        let mut cfg = StoreConfig::new(4, 4)
            .protocol(Protocol::OnePaxos)
            .tree(TreeSpec::shaped(Topology::Binary));
        if procs {
            cfg.deployment = processes();
        }
        cfg.keep_log = true;
        cfg.attempt_timeout = Duration::from_millis(300);
        cfg.attempts = 10;
        cfg.close_timeout = Duration::from_secs(5);
        let mut s = Store::start(cfg).unwrap();
        let mut clients = s.take_clients();
        let home = clients[0].home();
        let backup = (home + 1) % 4;
        let base = Instant::now();
        let mut hist = Vec::new();
        let mut n = 0u64;
        let mut op = |c: &mut smelt_kvs::Client, hist: &mut Vec<HistoryOp>| {
            n += 1;
            let t0 = base.elapsed().as_nanos() as u64;
            let (kind, r) = if n.is_multiple_of(2) {
                let v = bench::unique_value(c.id(), n);
                let mut value = [0u8; 16];
                value[..8].copy_from_slice(&v.to_le_bytes());
                (OpKind::Set, c.set(b"k", &value).map(|_| Some(v)))
            } else {
                (
                    OpKind::Get,
                    c.get(b"k")
                        .map(|x| x.map(|b| u64::from_le_bytes(b[..8].try_into().unwrap()))),
                )
            };
            let r = r.unwrap_or_else(|e| panic!("operation {n} at replica {}: {e}", c.home()));
            hist.push(HistoryOp {
                client: c.id(),
                op: kind,
                key: 0,
                value: r,
                call_ns: t0,
                return_ns: base.elapsed().as_nanos() as u64,
                ok: true,
            });
        };
        for _ in 0..20 {
            op(&mut clients[0], &mut hist);
        }
        s.crash(home).unwrap();
        for _ in 0..20 {
            op(&mut clients[0], &mut hist);
        }
        assert_eq!(clients[0].home(), backup, "threads={}", !procs);
        s.crash(backup).unwrap();
        for _ in 0..20 {
            op(&mut clients[0], &mut hist);
            // Another client keeps working too.
            op(&mut clients[2], &mut hist);
        }
        assert_eq!(clients[0].home(), (home + 2) % 4);
        drop(clients);
        let rep = s.close().unwrap();
        check_logs(&rep, &hist);
        check_history(&hist).unwrap();
    }
    // Without backups, the client of a stopped home gets HomeFailed.
    let mut cfg = StoreConfig::new(3, 3);
    cfg.client_backups = 0;
    cfg.attempt_timeout = Duration::from_millis(300);
    let mut s = Store::start(cfg).unwrap();
    let mut clients = s.take_clients();
    clients[1].set(b"k", b"v").unwrap();
    s.crash(clients[1].home()).unwrap();
    assert!(matches!(
        clients[1].get(b"k"),
        Err(KvsError::HomeFailed { .. })
    ));
    assert_eq!(clients[2].get(b"k").unwrap(), Some(b"v".to_vec()));
}

/// A replica process killed from outside the store (`kill -9`, not `Store::crash`):
/// found by its peers all the same, the survivors change view and serve, and its
/// report says it crashed.
#[test]
fn a_replica_process_killed_from_outside_is_a_crash() {
    let mut cfg = config(4, 2, Protocol::OnePaxos, Topology::Binary);
    cfg.attempt_timeout = Duration::from_millis(200);
    cfg.attempts = 20;
    cfg.close_timeout = Duration::from_secs(5);
    let mut s = Store::start(cfg).unwrap();
    let mut c = s.take_clients();
    c[0].set(b"a", b"1").unwrap();
    let root = s.root();
    let pid = s.replica_pid(root).unwrap();
    let st = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let t0 = Instant::now();
    for i in 0..20u8 {
        c[1].set(b"b", &[i]).unwrap();
        assert_eq!(c[0].get(b"b").unwrap(), Some(vec![i]));
    }
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert_eq!(c[0].get(b"a").unwrap(), Some(b"1".to_vec()));
    drop(c);
    let rep = s.close().unwrap();
    rep.check_logs().unwrap();
    let dead = rep.replicas[root].as_ref().unwrap();
    assert_eq!(dead.exit, "crashed", "{dead:?}");
    for r in rep.replicas.iter().flatten().filter(|r| r.replica != root) {
        assert_eq!((r.exit.as_str(), r.applied), ("closed", 21), "{r:?}");
        assert!(r.view_changes >= 1);
    }
}
