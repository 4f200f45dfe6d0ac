//! The in-process scheduler: results against sequential computations, more workers than
//! CPUs, panics, pinning, idle CPU time.

use smelt_ids::CpuId;
use smelt_tasks::apps::{cilksort, fib, fib_seq, random_keys, Uts};
use smelt_tasks::{join, parallel_for, reduce, scope, Pool, PoolConfig, TaskError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn stress() -> usize {
    smelt_transport::stress_scale() as usize
}

fn cpus2() -> Vec<CpuId> {
    let mut c = smelt_transport::allowed_cpus().unwrap_or_else(|_| vec![0]);
    c.truncate(2);
    c.into_iter().map(CpuId).collect()
}

#[test]
fn fib_matches_the_sequential_recursion_on_1_2_and_16_workers() {
    for workers in [1, 2, 16] {
        let pool = Pool::new(PoolConfig::new(workers)).unwrap();
        let n = 20 + stress().min(8) as u32;
        assert_eq!(
            pool.install(|| fib(n)).unwrap(),
            fib_seq(n),
            "{workers} workers"
        );
        let s = pool.stats();
        assert!(s.spawned >= smelt_tasks::apps::fib_tasks(n), "{s:?}");
    }
}

#[test]
fn sixteen_workers_pinned_on_two_cpus_compute_everything() {
    let pool = Pool::new(PoolConfig::new(16).pinned(cpus2())).unwrap();
    assert_eq!(pool.workers(), 16);
    let t = Uts::t1_like(6 + stress().min(4) as u32);
    assert_eq!(pool.install(|| t.count()).unwrap(), t.count_seq());
    let mut v = random_keys(50_000 * stress(), 7);
    let mut w = v.clone();
    w.sort_unstable();
    pool.install(|| cilksort(&mut v)).unwrap();
    assert_eq!(v, w);
    assert_eq!(pool.install(|| fib(22)).unwrap(), fib_seq(22));
}

#[test]
fn uts_counts_the_same_tree_on_any_number_of_workers() {
    let t = Uts::t1_like(7);
    let seq = t.count_seq();
    // The tree is unbalanced and not trivial (T1-like, mean 4 children).
    assert!(seq > 1000, "{seq}");
    for workers in [1, 3, 8] {
        let pool = Pool::new(PoolConfig::new(workers)).unwrap();
        assert_eq!(
            pool.install(|| t.count()).unwrap(),
            seq,
            "{workers} workers"
        );
    }
    // Another seed is another tree.
    let u = Uts { seed: 20, ..t };
    assert_ne!(u.count_seq(), seq);
    // Outside a pool: sequential, same count.
    assert_eq!(t.count(), seq);
}

#[test]
fn cilksort_sorts_like_the_standard_sort() {
    let pool = Pool::new(PoolConfig::new(4)).unwrap();
    for n in [0, 1, 2, 2047, 2048, 2049, 10_000, 100_003 * stress()] {
        let mut v = random_keys(n, n as u64);
        // Duplicates too.
        for x in v.iter_mut().step_by(3) {
            *x %= 17;
        }
        let mut w = v.clone();
        w.sort_unstable();
        pool.install(|| cilksort(&mut v)).unwrap();
        assert_eq!(v, w, "n = {n}");
    }
}

#[test]
fn parallel_for_visits_each_index_once_and_reduce_sums() {
    let pool = Pool::new(PoolConfig::new(3)).unwrap();
    let n = 100_000;
    let hits: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
    pool.install(|| {
        parallel_for(0..n, 100, |i| {
            hits[i].fetch_add(1, Ordering::Relaxed);
        })
    })
    .unwrap();
    assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
    // Grain 0: automatic.
    let total = AtomicU64::new(0);
    pool.install(|| {
        parallel_for(5..1005, 0, |i| {
            total.fetch_add(i as u64, Ordering::Relaxed);
        })
    })
    .unwrap();
    assert_eq!(total.into_inner(), (5..1005u64).sum::<u64>());
    let s = pool
        .install(|| reduce(0..n, 64, || 0u64, |i| (i as u64) * 3, |a, b| a + b))
        .unwrap();
    assert_eq!(s, 3 * (n as u64 - 1) * n as u64 / 2);
    // A non-commutative combine keeps the order of the range.
    let cat = pool
        .install(|| reduce(0..200, 7, String::new, |i| format!("{i},"), |a, b| a + &b))
        .unwrap();
    let want: String = (0..200).map(|i| format!("{i},")).collect();
    assert_eq!(cat, want);
    // Empty range: the identity.
    assert_eq!(reduce(3..3, 4, || 42u64, |_| 0, |a, b| a + b), 42);
}

#[test]
fn scope_spawns_borrowing_tasks_and_nests() {
    let pool = Pool::new(PoolConfig::new(4)).unwrap();
    let mut out = vec![0u64; 64];
    pool.install(|| {
        scope(|s| {
            for (i, o) in out.chunks_mut(8).enumerate() {
                s.spawn(move |s2| {
                    // Nested spawns into the same scope.
                    for (j, x) in o.iter_mut().enumerate() {
                        let _ = s2;
                        *x = fib((i + j) as u32 % 15);
                    }
                });
            }
        })
    })
    .unwrap();
    for (k, x) in out.iter().enumerate() {
        assert_eq!(*x, fib_seq(((k / 8) + (k % 8)) as u32 % 15));
    }
    // Spawning from spawned tasks (a binary tree of 2^10 leaves).
    let leaves = AtomicU64::new(0);
    fn tree<'a>(s: &smelt_tasks::Scope<'a>, d: u32, leaves: &'a AtomicU64) {
        if d == 0 {
            leaves.fetch_add(1, Ordering::Relaxed);
        } else {
            s.spawn(move |s| tree(s, d - 1, leaves));
            s.spawn(move |s| tree(s, d - 1, leaves));
        }
    }
    pool.install(|| scope(|s| tree(s, 10, &leaves))).unwrap();
    assert_eq!(leaves.into_inner(), 1024);
    // Outside a pool: the tasks run at once, in order.
    let mut order = Vec::new();
    let order_ref = std::sync::Mutex::new(&mut order);
    scope(|s| {
        for i in 0..4 {
            let o = &order_ref;
            s.spawn(move |_| o.lock().unwrap().push(i));
        }
    });
    assert_eq!(order, vec![0, 1, 2, 3]);
}

#[test]
fn a_panicking_task_fails_the_computation_with_its_message() {
    let pool = Pool::new(PoolConfig::new(16).pinned(cpus2())).unwrap();
    let start = Instant::now();
    // Deep in a big computation, on whichever worker runs it.
    fn bad(n: u32) -> u64 {
        if n == 3 {
            panic!("task fib(3) failed");
        }
        if n < 2 {
            return n as u64;
        }
        let (a, b) = join(|| bad(n - 1), || bad(n - 2));
        a + b
    }
    let e = pool.install(|| bad(25)).unwrap_err();
    assert_eq!(e, TaskError::Panicked("task fib(3) failed".into()));
    // In the stolen half of a join, and in a scope's task.
    let e = pool
        .install(|| join(|| fib(18), || -> u64 { panic!("second half") }))
        .unwrap_err();
    assert_eq!(e, TaskError::Panicked("second half".into()));
    let e = pool
        .install(|| {
            scope(|s| {
                for i in 0..32 {
                    s.spawn(move |_| {
                        if i == 17 {
                            panic!("spawned task {i}");
                        }
                        fib(15);
                    });
                }
            })
        })
        .unwrap_err();
    assert_eq!(e, TaskError::Panicked("spawned task 17".into()));
    let e = pool
        .install(|| parallel_for(0..1000, 1, |i| assert!(i != 999, "index {i}")))
        .unwrap_err();
    assert_eq!(e, TaskError::Panicked("index 999".into()));
    assert!(start.elapsed() < Duration::from_secs(20));
    // The pool goes on working after a failed computation.
    assert_eq!(pool.install(|| fib(20)).unwrap(), fib_seq(20));
}

#[test]
fn bad_configurations_are_errors() {
    assert!(matches!(
        Pool::new(PoolConfig::new(0)),
        Err(TaskError::Invalid(_))
    ));
    assert!(matches!(
        Pool::new(PoolConfig::new(2).pinned(vec![])),
        Err(TaskError::Invalid(_))
    ));
    let e = Pool::new(PoolConfig::new(2).pinned(vec![CpuId(100_000)])).unwrap_err();
    assert!(
        matches!(
            e,
            TaskError::Pin {
                cpu: CpuId(100_000),
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("CPU 100000"), "{e}");
}

#[test]
fn install_from_many_threads_and_nested_install() {
    let pool = Pool::new(PoolConfig::new(2)).unwrap();
    std::thread::scope(|s| {
        for k in 0..4u32 {
            let p = &pool;
            s.spawn(move || {
                for n in 10..16 {
                    assert_eq!(p.install(|| fib(n + k)).unwrap(), fib_seq(n + k));
                }
            });
        }
    });
    // install from inside the pool runs in place.
    let r = pool.install(|| pool.install(|| fib(10)).unwrap()).unwrap();
    assert_eq!(r, 55);
}

/// CPU time (ns) of this process's threads whose name starts with `prefix`.
fn threads_cpu_ns(prefix: &str) -> (usize, u64) {
    let mut n = 0;
    let mut total = 0;
    for e in std::fs::read_dir("/proc/self/task").unwrap() {
        let p = e.unwrap().path();
        let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        if !comm.trim_end().starts_with(prefix) {
            continue;
        }
        n += 1;
        // schedstat: time on CPU in ns; else stat's utime + stime in clock ticks.
        if let Ok(s) = std::fs::read_to_string(p.join("schedstat")) {
            total += s.split_whitespace().next().unwrap().parse::<u64>().unwrap();
        } else {
            let s = std::fs::read_to_string(p.join("stat")).unwrap();
            let rest = &s[s.rfind(')').unwrap() + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ticks = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
            total += ticks * 10_000_000;
        }
    }
    (n, total)
}

#[test]
fn idle_workers_burn_almost_no_cpu() {
    let workers = 4;
    // Named apart from the other tests' pools (they run in this process too).
    let pool = Pool::new(PoolConfig {
        name: "idle-test".into(),
        ..PoolConfig::new(workers)
    })
    .unwrap();
    // Work first, so every worker has been awake.
    assert_eq!(pool.install(|| fib(22)).unwrap(), fib_seq(22));
    // Past spinning and yielding.
    std::thread::sleep(Duration::from_millis(200));
    let (n0, c0) = threads_cpu_ns("idle-test-");
    assert_eq!(n0, workers);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_millis(1000));
    let (_, c1) = threads_cpu_ns("idle-test-");
    let wall = t0.elapsed().as_nanos() as f64;
    let per_worker = (c1 - c0) as f64 / wall / workers as f64;
    eprintln!("idle workers: {:.3} % of a CPU each", per_worker * 100.0);
    assert!(
        per_worker < 0.05,
        "idle workers used {:.2} % of a CPU each",
        per_worker * 100.0
    );
    // Asleep, not spinning (on loaded CPUs a worker may still be yielding).
    assert!(pool.stats().sleeps >= 1);
    // And wake up for new work at once.
    let t = Instant::now();
    assert_eq!(pool.install(|| fib(15)).unwrap(), fib_seq(15));
    assert!(t.elapsed() < Duration::from_secs(1));
}

#[test]
fn task_groups_spawn_static_tasks_and_wait() {
    use smelt_tasks::TaskGroup;
    use std::sync::Arc;
    let pool = Pool::new(PoolConfig::new(4)).unwrap();
    // A recursive fib over groups (as the C API's spawn/sync use them).
    fn gfib(n: u32, out: Arc<AtomicU64>) {
        if n < 2 {
            out.fetch_add(n as u64, Ordering::Relaxed);
            return;
        }
        let g = TaskGroup::new();
        let o = out.clone();
        g.spawn(move || gfib(n - 1, o));
        gfib(n - 2, out);
        g.wait().unwrap();
    }
    let out = Arc::new(AtomicU64::new(0));
    let o = out.clone();
    pool.install(move || gfib(20, o)).unwrap();
    assert_eq!(out.load(Ordering::Relaxed), fib_seq(20));
    // A panic in a group's task comes back from wait and fails the computation.
    let e = pool
        .install(|| {
            let g = TaskGroup::new();
            for i in 0..8 {
                g.spawn(move || assert!(i != 5, "group task {i}"));
            }
            let r = g.wait();
            assert_eq!(g.pending(), 0);
            r
        })
        .unwrap();
    assert_eq!(e, Err(TaskError::Panicked("group task 5".into())));
    // Outside a pool, spawn runs at once.
    let g = TaskGroup::new();
    let hits = Arc::new(AtomicU64::new(0));
    let h = hits.clone();
    g.spawn(move || {
        h.fetch_add(1, Ordering::Relaxed);
    });
    assert_eq!(hits.load(Ordering::Relaxed), 1);
    assert_eq!(g.wait(), Ok(()));
}
