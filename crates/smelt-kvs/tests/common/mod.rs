//! Helpers shared by the store tests (`store.rs`, `processes.rs`, and smelt-bench's
//! `kvs_raft.rs`): the checks on a run's logs and history, random and retrying
//! benchmark runs, and a run of clients while replicas crash.

#![allow(dead_code)] // each test file uses a part

use smelt_kvs::bench::{self, BenchConfig, BenchResult};
use smelt_kvs::history::{check_history, HistoryOp, OpKind};
use smelt_kvs::{Applied, KvsError, Store, StoreConfig, StoreReport};
use smelt_transport::stress_scale;
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// A benchmark entry point: `bench::run` or `bench::run_raft`.
pub type Runner = fn(&BenchConfig) -> Result<BenchResult, KvsError>;

/// No request in `log` is applied twice.
pub fn assert_applied_once(log: &[Applied]) {
    let mut seen = HashSet::new();
    for a in log {
        assert!(
            seen.insert((a.entry.client, a.entry.seq)),
            "request {}/{} applied twice",
            a.entry.client,
            a.entry.seq
        );
    }
}

/// The values (their first 8 bytes, as written by the benchmark) of `entries`.
pub fn logged_values<'a>(entries: impl IntoIterator<Item = &'a Applied>) -> HashSet<u64> {
    entries
        .into_iter()
        .map(|a| u64::from_le_bytes(a.entry.value[..8].try_into().unwrap()))
        .collect()
}

/// Every acknowledged set of `hist` is among `values`; `who` starts the message.
pub fn assert_acked_sets_in(values: &HashSet<u64>, hist: &[HistoryOp], who: &str) {
    for h in hist.iter().filter(|h| h.op == OpKind::Set && h.ok) {
        assert!(
            values.contains(&h.value.unwrap()),
            "{who}acknowledged set {h:?} is not in the log"
        );
    }
}

/// Every live replica applied the same log, every acknowledged set is in it, no
/// request is applied twice, and (if `linearizable`) the history is linearizable.
pub fn check_run(res: &BenchResult, linearizable: bool) {
    let rep: &StoreReport = &res.report;
    rep.check_logs().unwrap();
    let live = rep.replicas.iter().flatten().find(|r| r.exit == "closed");
    let log = live
        .and_then(|r| r.log.as_ref())
        .expect("a live replica's log");
    assert_applied_once(log);
    assert_acked_sets_in(&logged_values(log), &res.history, "");
    if linearizable {
        let s = check_history(&res.history).unwrap_or_else(|e| panic!("{}: {e}", res.setup));
        assert!(s.ops > 0);
    }
}

/// Both sets and gets succeeded, and none failed.
pub fn assert_all_ok(res: &BenchResult) {
    assert!(
        res.sets.ok > 0 && res.gets.ok > 0,
        "{}: {:?} {:?}",
        res.setup,
        res.sets,
        res.gets
    );
    assert_eq!(
        res.sets.failed + res.gets.failed,
        0,
        "{}: {:?}",
        res.setup,
        res.first_error
    );
}

/// Mixed gets and sets (half each) on `keys` keys for `millis` ms with the history
/// kept, run by `run` within 30 s; every operation succeeds.
pub fn random_run(cfg: StoreConfig, keys: u64, millis: u64, run: Runner) -> BenchResult {
    let mut b = BenchConfig::new(cfg);
    b.duration = Duration::from_millis(millis);
    b.keys = keys;
    b.get_ratio = 0.5;
    b.history = true;
    random_bench(&b, run)
}

/// [`random_run`] with logs kept, for `400 * stress_scale()` ms, seeded from the
/// numbers of replicas and clients.
pub fn seeded_random_run(mut cfg: StoreConfig, keys: u64, run: Runner) -> BenchResult {
    cfg.keep_log = true;
    let seed = cfg.replicas as u64 * 31 + cfg.clients as u64;
    let mut b = BenchConfig::new(cfg);
    b.duration = Duration::from_millis(400 * stress_scale());
    b.keys = keys;
    b.get_ratio = 0.5;
    b.history = true;
    b.seed = seed;
    random_bench(&b, run)
}

fn random_bench(b: &BenchConfig, run: Runner) -> BenchResult {
    let t0 = Instant::now();
    let res = run(b).unwrap();
    assert!(t0.elapsed() < Duration::from_secs(30));
    assert_all_ok(&res);
    res
}

/// Clients that give up on an attempt almost at once retry the same request many
/// times: retries happen, each request is still applied once, and the history is
/// linearizable. `what` names the store in the printed figures.
pub fn retried_sets_are_applied_once(mut cfg: StoreConfig, run: Runner, what: &str) {
    cfg.keep_log = true;
    cfg.attempt_timeout = Duration::from_micros(300);
    cfg.attempts = 10_000;
    let mut b = BenchConfig::new(cfg);
    b.duration = Duration::from_millis(300 * stress_scale());
    b.keys = 3;
    b.get_ratio = 0.3;
    b.history = true;
    let res = run(&b).unwrap();
    assert!(res.retries > 0, "no retries happened: {:?}", res.sets);
    let dups: u64 = res
        .report
        .replicas
        .iter()
        .flatten()
        .map(|r| r.duplicates)
        .max()
        .unwrap();
    eprintln!(
        "{what}: {} sets, {} retries, {dups} duplicate copies skipped",
        res.sets.ok, res.retries
    );
    check_run(&res, true);
}

/// Clients alternate sets and gets on two keys for `run_for` while `victims` crash
/// (`Store::crash`) at the given times (ms); a client whose home replica stopped
/// stops. Returns the history (ok or not), the store's report and the time taken.
pub fn crash_run(
    mut s: Store,
    victims: &[(u64, usize)],
    run_for: Duration,
) -> (Vec<HistoryOp>, StoreReport, Duration) {
    let clients = s.take_clients();
    let base = Instant::now();
    let stop = base + run_for;
    let hist = std::thread::scope(|sc| {
        let hs: Vec<_> = clients
            .into_iter()
            .map(|mut c| {
                sc.spawn(move || {
                    let mut h = Vec::new();
                    let mut n = 0;
                    while Instant::now() < stop {
                        n += 1;
                        let key = n % 2;
                        let v = bench::unique_value(c.id(), n);
                        let t0 = base.elapsed().as_nanos() as u64;
                        let (op, r) = if n % 2 == 0 {
                            let mut value = [0u8; 16];
                            value[..8].copy_from_slice(&v.to_le_bytes());
                            (
                                OpKind::Set,
                                c.set(&key.to_le_bytes(), &value).map(|_| Some(v)),
                            )
                        } else {
                            (
                                OpKind::Get,
                                c.get(&key.to_le_bytes()).map(|x| {
                                    x.map(|b| u64::from_le_bytes(b[..8].try_into().unwrap()))
                                }),
                            )
                        };
                        let home_failed = matches!(r, Err(KvsError::HomeFailed { .. }));
                        h.push(HistoryOp {
                            client: c.id(),
                            op,
                            key,
                            value: match (&r, op) {
                                (Ok(x), _) => *x,
                                (Err(_), OpKind::Set) => Some(v),
                                (Err(_), OpKind::Get) => None,
                            },
                            call_ns: t0,
                            return_ns: base.elapsed().as_nanos() as u64,
                            ok: r.is_ok(),
                        });
                        // A client whose home replica stopped has nowhere to go.
                        if home_failed {
                            break;
                        }
                    }
                    h
                })
            })
            .collect();
        for &(at_ms, victim) in victims {
            let at = base + Duration::from_millis(at_ms);
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
            s.crash(victim).unwrap();
        }
        hs.into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    let rep = s.close().unwrap();
    (hist, rep, base.elapsed())
}

/// Sets by any client called later than `after` into the run that succeeded.
pub fn sets_ok_after(hist: &[HistoryOp], after: Duration) -> usize {
    let after = after.as_nanos() as u64;
    hist.iter()
        .filter(|h| h.op == OpKind::Set && h.ok && h.call_ns > after)
        .count()
}
