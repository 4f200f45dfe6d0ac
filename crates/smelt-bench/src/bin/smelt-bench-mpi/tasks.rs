//! `smelt-bench-mpi tasks`: fork-join tasks across MPI ranks (`Member::from_world` over a world of MPI ranks; nodes
//! real or emulated with `SMELT_RANKS_PER_NODE`), run under `mpirun`. Rank 0 runs fib and
//! UTS roots, every rank serves; each result is checked against the sequential one and
//! rank 0 prints `tasks: PASS ...` (or `tasks: FAIL ...`), then the counters of every
//! rank (`steals` gathered). With `--panic`, a task panics: every rank must report it.
//!
//! usage: smelt-bench-mpi tasks [--fib N] [--cutoff C] [--uts DEPTH] [--workers W] [--panic]

use crate::job::Job;
use smelt_am::mpi::Options;
use smelt_tasks::apps::dist::{self as apps, functions, result_u64};
use smelt_tasks::apps::{fib_seq, Uts};
use smelt_tasks::dist::{Member, TaskConfig};
use std::process::ExitCode;
use std::time::{Duration, Instant};

struct Args {
    fib: u32,
    cutoff: u32,
    uts: u32,
    workers: usize,
    panic: bool,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        fib: 27,
        cutoff: 15,
        uts: 8,
        workers: 1,
        panic: false,
    };
    let mut it = std::env::args().skip(2);
    while let Some(k) = it.next() {
        let mut num = |what: &str| -> Result<u64, String> {
            let v = it.next().ok_or_else(|| format!("{what} needs a value"))?;
            v.parse::<u64>()
                .map_err(|_| format!("{what} {v:?} is not a whole number"))
        };
        match k.as_str() {
            "--fib" => a.fib = num("--fib")?.min(60) as u32,
            "--cutoff" => a.cutoff = num("--cutoff")?.min(60) as u32,
            "--uts" => a.uts = num("--uts")?.min(16) as u32,
            "--workers" => a.workers = num("--workers")?.clamp(1, 256) as usize,
            "--panic" => a.panic = true,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(a)
}

pub fn main() -> ExitCode {
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("smelt-bench-mpi tasks: {e}\nusage: smelt-bench-mpi tasks [--fib N] [--cutoff C] [--uts DEPTH] [--workers W] [--panic]");
            return ExitCode::from(2);
        }
    };
    let mpi = match Options::from_env()
        .map_err(|e| e.to_string())
        .and_then(|o| Job::init(o.nodes, o.timeout))
    {
        Ok(m) => m,
        Err(e) => {
            eprintln!("smelt-bench-mpi tasks: setting MPI up: {e}");
            return ExitCode::from(1);
        }
    };
    let ok = run(&mpi, &a);
    mpi.finalize();
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn run(mpi: &Job, a: &Args) -> bool {
    let rank = mpi.rank();
    let mut m = match Member::from_world(mpi.world(), smelt_am::AmConfig::default()) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("smelt-bench-mpi tasks: rank {rank}: endpoint: {e}");
            return false;
        }
    };
    let f = functions();
    let cfg = TaskConfig::new(a.workers);
    if rank == 0 {
        println!(
            "smelt-bench-mpi tasks: {} ranks, {} nodes",
            mpi.size(),
            mpi.nodes()
        );
    }
    let mut ok = true;
    if a.panic {
        let root = (rank == 0).then(|| (apps::PANIC, b"a task failed on purpose".to_vec()));
        let r = m.run(&f, &cfg, root);
        let seen = matches!(&r, Err(e) if e.to_string().contains("a task failed on purpose"));
        println!(
            "panic: rank {rank} {} ({})",
            if seen { "PASS" } else { "FAIL" },
            r.err()
                .map(|e| e.to_string())
                .unwrap_or_else(|| "no error".into())
        );
        // Every rank leaves: the failure ended the member (no barrier: a failed peer
        // may be gone).
        return seen;
    }
    let t = Uts::t1_like(a.uts);
    let jobs = [
        (
            "fib",
            (apps::FIB, apps::fib_payload(a.fib, a.cutoff)),
            fib_seq(a.fib),
        ),
        (
            "uts",
            (apps::UTS, apps::uts_payload(&t, a.uts / 2)),
            t.count_seq(),
        ),
    ];
    let mut steals = 0;
    // 12 tasks of 100 ms from rank 0 (its workers cannot run them all at once): other
    // ranks, on its node first, steal some. A wide window: on loaded CPUs (more ranks
    // and threads than CPUs) a steal's round trip over MPI can take tens of ms, and 8
    // tasks of 20 ms were once all run by rank 0 before a thief got one.
    {
        let root = (
            apps::FANOUT,
            [12u32.to_le_bytes(), 100u32.to_le_bytes()].concat(),
        );
        match m.run(&f, &cfg, (rank == 0).then_some(root)) {
            Ok(rep) => {
                steals += rep.steals;
                if rank == 0 {
                    let mask = rep.result.as_deref().map(result_u64);
                    let pass = matches!(mask, Some(Ok(v)) if v & 1 == 1 && v.count_ones() >= 2);
                    ok &= pass;
                    println!(
                        "tasks: {} fanout ranks={}",
                        if pass { "PASS" } else { "FAIL" },
                        mask.and_then(|v| v.ok())
                            .map_or("?".into(), |v| format!("{v:b}"))
                    );
                }
            }
            Err(e) => {
                println!("tasks: FAIL fanout rank={rank} error={e}");
                return false;
            }
        }
    }
    for (name, root, want) in jobs {
        let start = Instant::now();
        let r = m.run(&f, &cfg, (rank == 0).then_some(root));
        match r {
            Ok(rep) => {
                steals += rep.steals;
                if rank == 0 {
                    let got = rep.result.as_deref().map(result_u64);
                    let pass = matches!(got, Some(Ok(v)) if v == want);
                    ok &= pass;
                    println!(
                        "tasks: {} {name} result={:?} expected={want} ms={:.2}",
                        if pass { "PASS" } else { "FAIL" },
                        got.and_then(|g| g.ok()),
                        start.elapsed().as_secs_f64() * 1e3
                    );
                }
            }
            Err(e) => {
                println!("tasks: FAIL {name} rank={rank} error={e}");
                return false;
            }
        }
    }
    // Gather the counters (also keeps every endpoint until all ranks are done).
    match mpi.gather(steals) {
        Ok(v) if rank == 0 => println!("steals: per-rank={:?} total={}", v, v.iter().sum::<u64>()),
        Ok(_) => {}
        Err(e) => {
            eprintln!("smelt-bench-mpi tasks: rank {rank}: gather: {e}");
            ok = false;
        }
    }
    let _ = mpi.barrier();
    drop(m);
    std::thread::sleep(Duration::from_millis(1));
    ok
}
