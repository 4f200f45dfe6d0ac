//! `smelt-bench-mpi tasks`: fork-join tasks across MPI ranks (smelt-am's MPI endpoints; nodes
//! real or emulated with `SMELT_RANKS_PER_NODE`), run under `mpirun`. Rank 0 runs fib and
//! UTS roots, every rank serves; each result is checked against the sequential one and
//! rank 0 prints `tasks: PASS ...` (or `tasks: FAIL ...`), then the counters of every
//! rank (`steals` gathered). With `--panic`, a task panics: every rank must report it.
//!
//! usage: smelt-bench-mpi tasks [--fib N] [--cutoff C] [--uts DEPTH] [--workers W] [--panic]

use smelt_am::mpi::{Mpi, Options};
use smelt_tasks::apps::dist::{self as apps, functions, result_u64};
use smelt_tasks::apps::{fib_seq, Uts};
use smelt_tasks::dist::{comm_config, Member, TaskConfig};
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
    let mpi = match Options::from_env().and_then(Mpi::init) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("smelt-bench-mpi tasks: setting MPI up: {e}");
            return ExitCode::from(1);
        }
    };
    let rank = mpi.rank();
    let ok = run(&mpi, &a);
    if let Err(e) = mpi.finalize() {
        eprintln!("smelt-bench-mpi tasks: rank {rank}: {e}");
        return ExitCode::from(1);
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn run(mpi: &Mpi, a: &Args) -> bool {
    let rank = mpi.rank();
    let ep = match mpi.endpoint(Default::default(), comm_config(smelt_am::Config::default())) {
        Ok(ep) => ep,
        Err(e) => {
            eprintln!("smelt-bench-mpi tasks: rank {rank}: endpoint: {e}");
            return false;
        }
    };
    let mut m = Member::from_endpoint(ep);
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
    // 8 tasks of 20 ms from rank 0 (its workers cannot run them all at once): other
    // ranks, on its node first, steal some.
    {
        let root = (
            apps::FANOUT,
            [8u32.to_le_bytes(), 20u32.to_le_bytes()].concat(),
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
