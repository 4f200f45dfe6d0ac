//! `smelt bench tasks`: fork-join tasks with work stealing (`smelt-tasks`) against
//! rayon's `join` and the plain sequential program, in one run:
//!
//! * fib(n) with a task per call (the DSM paper's benchmark), on 1 and 2 workers (and
//!   every allowed CPU), against rayon on as many threads and the sequential recursion;
//! * UTS, a T1-like unbalanced tree (geometric, mean 4 children, fixed seed): node count;
//! * cilksort (parallel merge sort) of random keys;
//! * fib across members (threads standing for processes, tasks stolen through active
//!   messages) with a sequential cutoff.
//!
//! Each figure is the median of alternated repetitions (smelt, rayon, sequential in turn);
//! every result is checked against the sequential one. Reported: time, tasks/s, steals,
//! and the per-task overhead ((time on 1 worker - sequential time) / tasks).

use super::{target, BenchReport, Common, Target};
use anyhow::{Context, Result};
use serde::Serialize;
use smelt_tasks::apps::{self, cilksort, fib, fib_seq, random_keys, Uts};
use smelt_tasks::dist::{Member, TaskConfig};
use smelt_tasks::{Pool, PoolConfig};
use smelt_transport::allowed_cpus;
use std::fmt::Write as _;
use std::time::Instant;

/// One measured configuration.
#[derive(Serialize, Clone)]
struct Row {
    workload: String,
    /// "sequential", "smelt-tasks", "rayon", "smelt-tasks members (threads, AM)".
    runtime: &'static str,
    workers: usize,
    /// Median wall time, ms (None: failed).
    ms: Option<f64>,
    /// Tasks made stealable per run (joins and spawns; 0 for sequential; rayon's are
    /// counted as smelt's, the same program).
    tasks: u64,
    tasks_per_s: Option<f64>,
    /// Tasks stolen per run (median run; smelt only).
    steals: Option<u64>,
    /// This row's time over the same runtime on 1 worker.
    speedup: Option<f64>,
    /// (time - sequential time) / tasks, ns (1-worker rows).
    overhead_ns_per_task: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

impl Row {
    /// A row with no figures yet (and no error).
    fn empty(workload: &str, runtime: &'static str, workers: usize) -> Row {
        Row {
            workload: workload.into(),
            runtime,
            workers,
            ms: None,
            tasks: 0,
            tasks_per_s: None,
            steals: None,
            speedup: None,
            overhead_ns_per_task: None,
            error: None,
        }
    }
}

/// The report of `smelt bench tasks`.
#[derive(Serialize)]
pub struct TasksReport {
    tool: String,
    host: String,
    cpus_available: usize,
    repetitions: usize,
    rows: Vec<Row>,
    targets: Vec<Target>,
    warnings: Vec<String>,
}

fn rayon_fib(n: u32) -> u64 {
    if n < 2 {
        return n as u64;
    }
    let (a, b) = rayon::join(|| rayon_fib(n - 1), || rayon_fib(n - 2));
    a + b
}

fn rayon_uts(t: &Uts) -> u64 {
    fn node(t: &Uts, s: u64, d: u32) -> u64 {
        1 + kids(t, s, d, 0, t.children(s, d))
    }
    fn kids(t: &Uts, s: u64, d: u32, lo: u64, hi: u64) -> u64 {
        match hi - lo {
            0 => 0,
            1 => node(t, Uts::child(s, lo), d + 1),
            n => {
                let mid = lo + n / 2;
                let (a, b) = rayon::join(|| kids(t, s, d, lo, mid), || kids(t, s, d, mid, hi));
                a + b
            }
        }
    }
    node(t, t.root_state(), 0)
}

fn rayon_cilksort(v: &mut [u64]) {
    // The same algorithm as smelt_tasks::apps::cilksort, over rayon::join.
    fn sort(v: &mut [u64], tmp: &mut [u64]) {
        if v.len() <= apps::CILKSORT_CUTOFF {
            v.sort_unstable();
            return;
        }
        let mid = v.len() / 2;
        {
            let (vl, vr) = v.split_at_mut(mid);
            let (tl, tr) = tmp.split_at_mut(mid);
            rayon::join(|| sort(vl, tl), || sort(vr, tr));
        }
        {
            let (a, b) = v.split_at(mid);
            merge(a, b, tmp);
        }
        copy(tmp, v);
    }
    fn copy(from: &[u64], to: &mut [u64]) {
        if from.len() <= 4 * apps::CILKSORT_CUTOFF {
            to.copy_from_slice(from);
        } else {
            let mid = from.len() / 2;
            let (fl, fr) = from.split_at(mid);
            let (tl, tr) = to.split_at_mut(mid);
            rayon::join(|| copy(fl, tl), || copy(fr, tr));
        }
    }
    fn merge(a: &[u64], b: &[u64], out: &mut [u64]) {
        if a.len() + b.len() <= apps::CILKSORT_CUTOFF {
            apps::merge_seq(a, b, out);
            return;
        }
        let (a, b) = if a.len() >= b.len() { (a, b) } else { (b, a) };
        let ma = a.len() / 2;
        let mb = b.partition_point(|&x| x < a[ma]);
        let (ol, or) = out.split_at_mut(ma + mb);
        rayon::join(
            || merge(&a[..ma], &b[..mb], ol),
            || merge(&a[ma..], &b[mb..], or),
        );
    }
    let mut tmp = vec![0u64; v.len()];
    sort(v, &mut tmp);
}

/// What one run of a workload did: its checked result and the tasks it made.
struct Run {
    secs: f64,
    ok: bool,
    steals: u64,
    tasks: u64,
}

/// A workload: how to run it sequentially, on a smelt pool and on a rayon pool.
struct Workload {
    name: String,
    seq: Box<dyn Fn() -> Run>,
    smelt: Box<dyn Fn(&Pool) -> Run>,
    rayon: Box<dyn Fn(&rayon::ThreadPool) -> Run>,
}

fn timed<T>(f: impl FnOnce() -> T) -> (f64, T) {
    let t = Instant::now();
    let r = std::hint::black_box(f());
    (t.elapsed().as_secs_f64(), r)
}

fn on_pool(pool: &Pool, f: impl FnOnce() -> bool + Send) -> Run {
    let before = pool.stats();
    let (secs, r) = timed(|| pool.install(f));
    let after = pool.stats();
    Run {
        secs,
        ok: r.unwrap_or(false),
        steals: after.steals - before.steals,
        tasks: after.spawned - before.spawned,
    }
}

fn workloads(quick: bool) -> Vec<Workload> {
    let mut w = Vec::new();
    for n in if quick { [27u32, 30] } else { [30, 35] } {
        let want = fib_seq(n);
        w.push(Workload {
            name: format!("fib({n})"),
            seq: Box::new(move || {
                let (secs, r) = timed(|| fib_seq(std::hint::black_box(n)));
                Run {
                    secs,
                    ok: r == want,
                    steals: 0,
                    tasks: 0,
                }
            }),
            smelt: Box::new(move |p| on_pool(p, move || fib(std::hint::black_box(n)) == want)),
            rayon: Box::new(move |p| {
                let (secs, r) = timed(|| p.install(|| rayon_fib(std::hint::black_box(n))));
                Run {
                    secs,
                    ok: r == want,
                    steals: 0,
                    tasks: apps::fib_tasks(n),
                }
            }),
        });
    }
    let t = Uts::t1_like(if quick { 8 } else { 10 });
    let nodes = t.count_seq();
    w.push(Workload {
        name: format!("UTS T1-like depth {} ({nodes} nodes)", t.depth),
        seq: Box::new(move || {
            let (secs, r) = timed(|| t.count_seq());
            Run {
                secs,
                ok: r == nodes,
                steals: 0,
                tasks: 0,
            }
        }),
        smelt: Box::new(move |p| on_pool(p, move || t.count() == nodes)),
        rayon: Box::new(move |p| {
            let (secs, r) = timed(|| p.install(|| rayon_uts(&t)));
            Run {
                secs,
                ok: r == nodes,
                steals: 0,
                tasks: 0,
            }
        }),
    });
    let n = if quick { 1 << 20 } else { 1 << 22 };
    let keys = std::sync::Arc::new(random_keys(n, 42));
    let sorted = {
        let mut s = (*keys).clone();
        s.sort_unstable();
        std::sync::Arc::new(s)
    };
    let (k1, s1, k2, s2, k3, s3) = (
        keys.clone(),
        sorted.clone(),
        keys.clone(),
        sorted.clone(),
        keys,
        sorted,
    );
    w.push(Workload {
        name: format!("cilksort {n} keys"),
        seq: Box::new(move || {
            let mut v = (*k1).clone();
            // The same merge sort without tasks (outside a pool, join runs in order).
            let (secs, ()) = timed(|| cilksort(&mut v));
            Run {
                secs,
                ok: v == *s1,
                steals: 0,
                tasks: 0,
            }
        }),
        smelt: Box::new(move |p| {
            let mut v = (*k2).clone();
            let before = p.stats();
            let (secs, r) = timed(|| p.install(|| cilksort(&mut v)));
            let after = p.stats();
            Run {
                secs,
                ok: r.is_ok() && v == *s2,
                steals: after.steals - before.steals,
                tasks: after.spawned - before.spawned,
            }
        }),
        rayon: Box::new(move |p| {
            let mut v = (*k3).clone();
            let (secs, ()) = timed(|| p.install(|| rayon_cilksort(&mut v)));
            Run {
                secs,
                ok: v == *s3,
                steals: 0,
                tasks: 0,
            }
        }),
    });
    w
}

fn row(workload: &str, runtime: &'static str, workers: usize, runs: &[Run]) -> Row {
    if let Some(i) = runs.iter().position(|r| !r.ok) {
        let mut row = Row::empty(workload, runtime, workers);
        row.error = Some(format!("run {} gave a wrong result", i + 1));
        return row;
    }
    let ms = crate::stats::median(&runs.iter().map(|r| r.secs * 1e3).collect::<Vec<_>>());
    let tasks = runs.iter().map(|r| r.tasks).max().unwrap_or(0);
    let mut steals: Vec<u64> = runs.iter().map(|r| r.steals).collect();
    steals.sort_unstable();
    Row {
        workload: workload.into(),
        runtime,
        workers,
        ms: Some(ms),
        tasks,
        tasks_per_s: (tasks > 0).then(|| tasks as f64 / (ms / 1e3)),
        steals: (runtime == "smelt-tasks").then(|| steals[steals.len() / 2]),
        speedup: None,
        overhead_ns_per_task: None,
        error: None,
    }
}

/// fib across `members` thread members of `workers` workers each (active messages).
fn members_fib(members: usize, workers: usize, n: u32, cutoff: u32) -> Result<(f64, u64, u64)> {
    let ms = Member::threads(members, smelt_am::AmConfig::default())?;
    let f = apps::dist::functions();
    let t = Instant::now();
    let out: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = ms
            .into_iter()
            .map(|mut m| {
                let f = &f;
                s.spawn(move || {
                    let root = (m.rank() == 0)
                        .then(|| (apps::dist::FIB, apps::dist::fib_payload(n, cutoff)));
                    m.run(f, &TaskConfig::new(workers), root)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(smelt_tasks::TaskError::Panicked(
                        "a member thread panicked".into(),
                    ))
                })
            })
            .collect()
    });
    let secs = t.elapsed().as_secs_f64();
    let mut steals = 0;
    let mut spawned = 0;
    let mut result = None;
    for r in out {
        let r = r?;
        steals += r.steals;
        spawned += r.spawned;
        if let Some(b) = r.result {
            result = Some(apps::dist::result_u64(&b)?);
        }
    }
    if result != Some(fib_seq(n)) {
        anyhow::bail!("fib({n}) across members gave {result:?}");
    }
    Ok((secs, steals, spawned))
}

/// A member process of the process rows, the body of the hidden `smelt tasks-member`
/// that [`measure`] starts (the current executable must answer that subcommand): joins
/// the job of its environment and serves `runs` computations on `workers` workers.
pub fn member(workers: usize, runs: usize) -> Result<()> {
    let mut m = Member::from_world(
        &smelt_mesh::World::from_env()?,
        smelt_am::AmConfig::default(),
    )?;
    let f = apps::dist::functions();
    for _ in 0..runs {
        m.run(&f, &TaskConfig::new(workers), None)?;
    }
    Ok(())
}

/// fib across `n` member processes of `workers` workers each: `runs` timed computations
/// after one warm-up; (seconds per computation, steals, tasks spawned) of each.
fn processes_fib(
    n: usize,
    workers: usize,
    fib_n: u32,
    cutoff: u32,
    runs: usize,
) -> Result<Vec<(f64, u64, u64)>> {
    use smelt_runtime::launch::Members;
    let cfg = smelt_am::AmConfig::default();
    let job = smelt_mesh::world::WorldBuilder::new(n).create_job(false)?;
    let exe = std::env::current_exe().context("cannot find the smelt executable")?;
    // Started as `smelt launch` starts its members: they die with this process.
    let mut members = Members::new();
    for rank in 1..n {
        let mut cmd = std::process::Command::new(&exe);
        cmd.arg("tasks-member")
            .args(["--workers", &workers.to_string()])
            .args(["--runs", &(runs + 1).to_string()])
            .envs(job.env(smelt_mesh::Rank(rank)))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        members
            .spawn(&mut cmd, None)
            .context("cannot start a member process")?;
    }
    let mut m = Member::from_world(&job.join(smelt_mesh::Rank(0))?, cfg)?;
    let f = apps::dist::functions();
    let root = (apps::dist::FIB, apps::dist::fib_payload(fib_n, cutoff));
    let mut out = Vec::new();
    for i in 0..=runs {
        let t = Instant::now();
        let r = m.run(&f, &TaskConfig::new(workers), Some(root.clone()))?;
        let secs = t.elapsed().as_secs_f64();
        let got = apps::dist::result_u64(r.result.as_deref().unwrap_or_default())?;
        if got != fib_seq(fib_n) {
            anyhow::bail!("fib({fib_n}) across processes gave {got}");
        }
        if i > 0 {
            out.push((secs, r.steals + r.stolen_from, r.spawned));
        }
    }
    for rank in 1..n {
        if let Some(c) = members.take(smelt_mesh::Rank(rank - 1)) {
            let o = c.wait_with_output()?;
            if !o.status.success() {
                anyhow::bail!(
                    "member process {rank}: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
            }
        }
    }
    Ok(out)
}

/// Measures `smelt bench tasks`.
pub fn measure(a: &Common) -> Result<TasksReport> {
    let allowed = allowed_cpus().context("cannot read the allowed CPUs")?;
    let reps = if a.quick { 3 } else { 7 };
    let mut warnings = Vec::new();
    let mut counts = vec![1, 2];
    if allowed.len() > 2 {
        counts.push(allowed.len());
    }
    if allowed.len() < 2 {
        warnings.push("one CPU: 2 workers share it, no speedup to expect".to_string());
    }
    let mut rows = Vec::new();
    for w in workloads(a.quick) {
        rows.extend(pool_rows(&w, &counts, reps)?);
    }
    rows.extend(member_rows(a.quick, reps));
    let processes = process_rows(a.quick, reps);
    rows.extend(processes.rows);
    mpi_rows(a.quick, &mut rows, &mut warnings);
    let targets = targets(&rows, a.quick, &processes.name, processes.runtime);
    if a.quick {
        warnings.push(
            "--quick: fib(27) stands for fib(30) and fib(30) for fib(35) in the targets".into(),
        );
    }
    warnings.extend(load_warning(allowed.len()));
    let report = TasksReport {
        tool: format!("smelt {}", env!("CARGO_PKG_VERSION")),
        host: smelt_model::host::host_name(),
        cpus_available: allowed.len(),
        repetitions: reps,
        rows,
        targets,
        warnings,
    };
    Ok(report)
}

/// Workload `w` on smelt's pool and rayon's of each of `counts` workers, `reps`
/// alternated runs each after a warm-up (and the sequential program alongside the
/// 1-worker runs): its sequential row, then a smelt and a rayon row per count.
fn pool_rows(w: &Workload, counts: &[usize], reps: usize) -> Result<Vec<Row>> {
    eprintln!("{}...", w.name);
    let mut seq = Vec::new();
    let mut per: Vec<(usize, Vec<Run>, Vec<Run>)> = Vec::new();
    for &k in counts {
        let pool = Pool::new(PoolConfig::new(k)).context("starting the smelt-tasks pool")?;
        let rp = rayon::ThreadPoolBuilder::new()
            .num_threads(k)
            .build()
            .context("starting the rayon pool")?;
        // Warm up both (threads started, caches and pages touched).
        let _ = (w.smelt)(&pool);
        let _ = (w.rayon)(&rp);
        let (mut s, mut r) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            s.push((w.smelt)(&pool));
            r.push((w.rayon)(&rp));
            if k == 1 {
                seq.push((w.seq)());
            }
        }
        per.push((k, s, r));
    }
    let mut rows = Vec::new();
    let seq_row = row(&w.name, "sequential", 1, &seq);
    let seq_ms = seq_row.ms;
    rows.push(seq_row);
    let mut one: [Option<f64>; 2] = [None, None];
    for (k, s, r) in &per {
        for (i, (runtime, runs)) in [("smelt-tasks", s), ("rayon", r)].into_iter().enumerate() {
            let mut x = row(&w.name, runtime, *k, runs);
            if *k == 1 {
                one[i] = x.ms;
                // Not printed where the pool ran faster than the sequential
                // program (no overhead to measure: noise, or a better schedule).
                x.overhead_ns_per_task = match (x.ms, seq_ms) {
                    (Some(t), Some(q)) if x.tasks > 0 && t >= q => {
                        Some((t - q) * 1e6 / x.tasks as f64)
                    }
                    _ => None,
                };
            }
            x.speedup = one[i].zip(x.ms).map(|(o, t)| o / t);
            rows.push(x);
        }
    }
    Ok(rows)
}

/// fib across 1 and 2 members (threads standing for processes, 1 worker each, tasks
/// stolen through active messages), `reps` runs each: a row per member count.
fn member_rows(quick: bool, reps: usize) -> Vec<Row> {
    let (n, cutoff) = if quick { (27, 12) } else { (32, 14) };
    let name = format!("fib({n}) cutoff {cutoff}");
    eprintln!("{name} across members...");
    let mut one_member = None;
    let mut rows = Vec::new();
    for members in [1, 2] {
        let mut runs = Vec::new();
        let mut err = None;
        for _ in 0..reps {
            match members_fib(members, 1, n, cutoff) {
                Ok(r) => runs.push(r),
                Err(e) => {
                    err = Some(format!("{e:#}"));
                    break;
                }
            }
        }
        let runtime = "smelt-tasks members (threads, AM)";
        let x = spread_row(
            &name,
            runtime,
            members,
            err.map_or(Ok(runs), Err),
            1,
            &mut one_member,
        );
        rows.push(x);
    }
    rows
}

/// The process rows and the workload and runtime they are named by (a target's).
struct ProcessRows {
    rows: Vec<Row>,
    name: String,
    runtime: &'static str,
}

/// fib across 1 and 2 processes of this host (shared-memory active messages, 1
/// worker each), `reps` runs each: a row per process count.
fn process_rows(quick: bool, reps: usize) -> ProcessRows {
    let (n, cutoff) = if quick { (30, 16) } else { (35, 20) };
    let name = format!("fib({n}) cutoff {cutoff}");
    eprintln!("{name} across processes...");
    let runtime = "smelt-tasks processes (AM, shared memory)";
    let mut one_process = None;
    let mut rows = Vec::new();
    for procs in [1, 2] {
        // Steals are counted at both ends: halved.
        let runs = processes_fib(procs, 1, n, cutoff, reps).map_err(|e| format!("{e:#}"));
        let x = spread_row(&name, runtime, procs, runs, 2, &mut one_process);
        rows.push(x);
    }
    ProcessRows {
        rows,
        name,
        runtime,
    }
}

/// The rows across MPI ranks on emulated nodes, with smelt-bench-mpi tasks when it is
/// built next to smelt (each result checked against the sequential one by the
/// program), into `rows`; why there are none into `warnings`.
fn mpi_rows(quick: bool, rows: &mut Vec<Row>, warnings: &mut Vec<String>) {
    match find_mpi_program() {
        None => warnings.push(
            "no smelt-bench-mpi next to smelt: MPI rows skipped (build it with `cargo build --release -p smelt-bench --features mpi --bin smelt-bench-mpi`)"
                .into(),
        ),
        Some(prog) => {
            let (n, cutoff, depth) = if quick { (27, 15, 8) } else { (30, 18, 10) };
            eprintln!("fib({n}) and UTS under mpirun (4 ranks, nodes of 2)...");
            match under_mpi(&prog, n, cutoff, depth) {
                Ok(r) => rows.extend(r),
                Err(e) => warnings.push(format!("MPI rows: {e:#}")),
            }
        }
    }
}

/// The targets, from `rows` (`process`, `runtime`: the process rows' names).
fn targets(rows: &[Row], quick: bool, process: &str, runtime: &str) -> Vec<Target> {
    let find = |w: &str, rt: &str, k: usize| {
        rows.iter()
            .find(|r| r.workload == w && r.runtime == rt && r.workers == k)
            .and_then(|r| r.ms)
    };
    let (small, big) = if quick {
        ("fib(27)", "fib(30)")
    } else {
        ("fib(30)", "fib(35)")
    };
    let ratio = |x: Option<f64>, y: Option<f64>| x.zip(y).map(|(x, y)| x / y);
    vec![
        target(
            "fib(30) 1 worker / rayon 1 thread",
            ratio(find(small, "smelt-tasks", 1), find(small, "rayon", 1)),
            1.5,
            true,
        ),
        target(
            "fib(30) 1 worker / sequential",
            ratio(find(small, "smelt-tasks", 1), find(small, "sequential", 1)),
            10.0,
            true,
        ),
        target(
            "fib(35) 2 workers: speedup over 1",
            ratio(find(big, "smelt-tasks", 1), find(big, "smelt-tasks", 2)),
            1.8,
            false,
        ),
        target(
            "fib(35) 2 processes: speedup over 1",
            ratio(find(process, runtime, 1), find(process, runtime, 2)),
            1.6,
            false,
        ),
    ]
}

/// A warning when the load average before the run shows other programs competing for
/// the `cpus` CPUs.
fn load_warning(cpus: usize) -> Option<String> {
    let l = std::fs::read_to_string("/proc/loadavg").ok()?;
    let load: f64 = l
        .split_whitespace()
        .next()
        .and_then(|x| x.parse().ok())
        .unwrap_or(0.0);
    (load > cpus as f64 * 0.75).then(|| {
        format!(
            "load average {load:.1} on {cpus} CPUs before the run: other programs compete for the CPUs, speedups are low"
        )
    })
}

impl BenchReport for TasksReport {
    fn table(&self) -> String {
        table(self)
    }

    fn failed(&self) -> Vec<String> {
        self.rows
            .iter()
            .filter_map(|r| {
                r.error
                    .as_ref()
                    .map(|e| format!("{} {} {} workers: {e}", r.workload, r.runtime, r.workers))
            })
            .collect()
    }
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "-".into(), f)
}

fn table(r: &TasksReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Tasks: fork-join work stealing, median of {} runs, {} CPUs",
        r.repetitions, r.cpus_available
    );
    let _ = writeln!(
        s,
        "{:<40} {:<34} {:>7} {:>10} {:>12} {:>10} {:>8} {:>8} {:>10}",
        "workload", "runtime", "workers", "ms", "tasks", "Mtasks/s", "steals", "speedup", "ns/task"
    );
    for x in &r.rows {
        if let Some(e) = &x.error {
            let _ = writeln!(
                s,
                "{:<40} {:<34} {:>7} FAILED: {e}",
                x.workload, x.runtime, x.workers
            );
            continue;
        }
        let _ = writeln!(
            s,
            "{:<40} {:<34} {:>7} {:>10} {:>12} {:>10} {:>8} {:>8} {:>10}",
            x.workload,
            x.runtime,
            x.workers,
            opt(x.ms, |v| format!("{v:.2}")),
            if x.tasks > 0 {
                x.tasks.to_string()
            } else {
                "-".into()
            },
            opt(x.tasks_per_s, |v| format!("{:.1}", v / 1e6)),
            x.steals.map_or("-".into(), |v| v.to_string()),
            opt(x.speedup, |v| format!("{v:.2}x")),
            opt(x.overhead_ns_per_task, |v| format!("{v:.2}")),
        );
    }
    let _ = writeln!(s, "\nTargets:");
    for t in &r.targets {
        let _ = writeln!(
            s,
            "  {:<40} {} {} {}: {}",
            t.name,
            opt(t.value, |v| format!("{v:.2}")),
            t.sense,
            t.limit,
            match t.met {
                Some(true) => "met",
                Some(false) => "MISSED",
                None => "not measured",
            }
        );
    }
    for w in &r.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    s
}

/// The `smelt-bench-mpi tasks` program next to this executable, if built.
fn find_mpi_program() -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.join("smelt-bench-mpi");
    p.is_file().then_some(p)
}

/// `smelt-bench-mpi tasks` on 4 ranks in emulated nodes of 2, one worker each: the fib and
/// UTS rows (the program checks each result against the sequential one and prints
/// `tasks: PASS NAME ... ms=T`).
fn under_mpi(prog: &std::path::Path, n: u32, cutoff: u32, depth: u32) -> Result<Vec<Row>> {
    let mpirun = smelt_peers::c::which("mpirun").context("no mpirun (install Open MPI)")?;
    let mut c = std::process::Command::new(mpirun);
    c.args(["--oversubscribe", "--bind-to", "none", "-np", "4"])
        .arg(prog)
        .arg("tasks")
        .args(["--fib", &n.to_string(), "--cutoff", &cutoff.to_string()])
        .args(["--uts", &depth.to_string(), "--workers", "1"])
        .env("SMELT_RANKS_PER_NODE", "2")
        .envs(smelt_peers::c::MPI_ENV);
    let out = smelt_peers::c::run_bounded(c, std::time::Duration::from_secs(300))
        .context("cannot run mpirun")?;
    anyhow::ensure!(
        out.ok,
        "smelt-bench-mpi tasks under mpirun {}: {} {}",
        if out.timed_out { "timed out" } else { "failed" },
        out.stdout
            .lines()
            .filter(|l| l.contains("FAIL"))
            .collect::<Vec<_>>()
            .join("; "),
        out.stderr.trim()
    );
    let runtime = "smelt-tasks MPI ranks (4, nodes of 2)";
    let mut rows = Vec::new();
    for (key, workload) in [
        ("fib", format!("fib({n}) cutoff {cutoff}")),
        ("uts", format!("UTS depth {depth}")),
    ] {
        let line = out
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("tasks: PASS {key} ")))
            .with_context(|| format!("smelt-bench-mpi tasks printed no {key} line"))?;
        let ms: f64 = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("ms="))
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("no time in {line:?}"))?;
        let mut r = spread_row(&workload, runtime, 4, Err(String::new()), 1, &mut None);
        r.error = None;
        r.ms = Some(ms);
        rows.push(r);
    }
    Ok(rows)
}

/// The row of a computation spread over `workers` members or processes: the median
/// time and steals (divided by `steal_div`) of `runs` (seconds, steals, tasks each),
/// its speedup over the 1-worker row (`one`, set when `workers` is 1), or the error.
fn spread_row(
    name: &str,
    runtime: &'static str,
    workers: usize,
    runs: std::result::Result<Vec<(f64, u64, u64)>, String>,
    steal_div: u64,
    one: &mut Option<f64>,
) -> Row {
    let mut row = Row::empty(name, runtime, workers);
    let runs = match runs {
        Ok(r) if !r.is_empty() => r,
        Ok(_) => {
            row.error = Some("no run".into());
            return row;
        }
        Err(e) => {
            row.error = Some(e);
            return row;
        }
    };
    let ms = crate::stats::median(&runs.iter().map(|r| r.0 * 1e3).collect::<Vec<_>>());
    let mut st: Vec<u64> = runs.iter().map(|r| r.1).collect();
    st.sort_unstable();
    if workers == 1 {
        *one = Some(ms);
    }
    row.ms = Some(ms);
    row.tasks = runs[0].2;
    row.tasks_per_s = Some(row.tasks as f64 / (ms / 1e3));
    row.steals = Some(st[st.len() / 2] / steal_div);
    row.speedup = one.map(|o| o / ms);
    row
}
