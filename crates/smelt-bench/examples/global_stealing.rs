//! The work-stealing counter over threads of this process:
//! `cargo run --release -p smelt-bench --example global_stealing [-- THREADS TASKS]`.

use smelt_bench::global::stealing::{run, Opts};
use smelt_global::{threads, GlobalConfig};

fn main() -> Result<(), smelt_global::GlobalError> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(8);
    let tasks: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let opts = Opts {
        tasks,
        work: 50,
        seed: 1,
    };
    let counters = threads::<u64>(n as u64, n, GlobalConfig::default())?;
    let results = threads::<u64>(tasks, n, GlobalConfig::default())?;
    let reports = std::thread::scope(|s| {
        let hs: Vec<_> = counters
            .iter()
            .zip(&results)
            .map(|(c, r)| s.spawn(move || run(c, r, &opts)))
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("a worker panicked"))
            .collect::<Result<Vec<_>, _>>()
    })?;
    for (i, r) in reports.iter().enumerate() {
        println!(
            "thread {i:2}: {:6} own, {:6} stolen, {} mismatches",
            r.own, r.stolen, r.mismatches
        );
    }
    let bad: u64 = reports.iter().map(|r| r.mismatches).sum();
    if bad > 0 {
        return Err(smelt_global::GlobalError::Invalid(format!(
            "{bad} mismatches"
        )));
    }
    println!("ok: {tasks} tasks over {n} threads match the sequential recomputation");
    Ok(())
}
