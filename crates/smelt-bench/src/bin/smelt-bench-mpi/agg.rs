//! `smelt-bench-mpi agg`: message aggregation across MPI ranks, under mpirun.
//!
//! Every rank runs `--workers` worker threads over its endpoint; for every scheme
//! (and no aggregation) each worker inserts `--items` 8-byte items for workers
//! anywhere, then all terminate; each rank sums the checksums (count, sum and xor of
//! the items' mixes, items at the wrong worker) of what its workers sent and received,
//! and rank 0 compares the sums over all ranks. Prints
//! `agg: PASS scheme=WW ranks=4 nodes=2 workers=8 items=... messages=... items_per_s=...`
//! or `agg: FAIL ...` per scheme; exits 1 if any check failed at any rank, 2 for a
//! bad argument.
//!
//! ```sh
//! cargo build --release -p smelt-bench --features mpi --bin smelt-bench-mpi
//! mpirun --oversubscribe -np 4 -x SMELT_RANKS_PER_NODE=2 target/release/smelt-bench-mpi agg
//! ```

use crate::job::Job;
use smelt_agg::tally::{self, Tally, Totals};
use smelt_agg::{AggConfig, FlushPolicy, Scheme};
use smelt_am::mpi::Options;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(60);

struct Args {
    schemes: Vec<Scheme>,
    workers: usize,
    items: u64,
    g: usize,
    flush: FlushPolicy,
}

fn usage(e: &str) -> ! {
    eprintln!("smelt-bench-mpi agg: {e}\nusage: smelt-bench-mpi agg [--schemes ww,wps,wsp,pp,none] [--workers T] [--items Z] [--g ITEMS_PER_BUFFER] [--flush explicit|idle|timeout]");
    std::process::exit(2)
}

fn args() -> Args {
    let mut a = Args {
        schemes: Scheme::ALL.to_vec(),
        workers: 2,
        items: 2000,
        g: 64,
        flush: FlushPolicy::EXPLICIT,
    };
    let mut it = std::env::args().skip(2);
    while let Some(k) = it.next() {
        let v = it
            .next()
            .unwrap_or_else(|| usage(&format!("{k} needs a value")));
        match k.as_str() {
            "--workers" => a.workers = v.parse().unwrap_or_else(|_| usage("bad --workers")),
            "--schemes" => {
                a.schemes = v
                    .split(',')
                    .map(|x| {
                        x.parse()
                            .unwrap_or_else(|e: smelt_agg::AggError| usage(&e.to_string()))
                    })
                    .collect()
            }
            "--g" => a.g = v.parse().unwrap_or_else(|_| usage("bad --g")),
            "--items" => a.items = v.parse().unwrap_or_else(|_| usage("bad --items")),
            "--flush" => {
                a.flush = match v.as_str() {
                    "explicit" => FlushPolicy::EXPLICIT,
                    "idle" => FlushPolicy::IDLE,
                    "timeout" => FlushPolicy::after(Duration::from_micros(500)),
                    _ => usage("bad --flush"),
                }
            }
            _ => usage(&format!("unknown option {k}")),
        }
    }
    if a.workers == 0 || a.workers > 64 {
        usage("--workers must be 1 to 64");
    }
    a
}

pub fn main() {
    let a = args();
    let opts = Options::from_env().unwrap_or_else(|e| usage(&e.to_string()));
    let mpi = match Job::init(opts.nodes, opts.timeout) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("smelt-bench-mpi agg: {e}");
            std::process::exit(1);
        }
    };
    let (rank, size) = (mpi.rank(), mpi.size());
    let mut all_ok = true;
    for &scheme in &a.schemes {
        let mut cfg = AggConfig::new(scheme, 8).buffer_items(a.g).flush(a.flush);
        cfg.am.link.timeout = LIMIT;
        // This rank's workers' totals and the time they took.
        let r = smelt_agg::from_world(
            mpi.world(),
            a.workers,
            cfg,
            |_| Tally::default(),
            tally::receive,
        )
        .and_then(|ws| {
            let start = Instant::now();
            let t = tally::run(ws, a.items, LIMIT)?;
            Ok((t, start.elapsed().as_secs_f64()))
        })
        .map_err(|e| e.to_string());
        let (ok, line) = match &r {
            Ok(_) => (true, String::new()),
            Err(e) => (false, format!("rank {rank}: {e}")),
        };
        let (
            Totals {
                sent,
                received: got,
                messages: msgs,
            },
            secs,
        ) = r.unwrap_or_default();
        // Every rank's sums, to every rank.
        let mut sums = [0u64; 9];
        let mut parts = Vec::new();
        for v in sent.words().iter().chain(&got.words()).chain([msgs].iter()) {
            match mpi.gather(*v) {
                Ok(g) => parts.push(g),
                Err(e) => {
                    eprintln!("smelt-bench-mpi agg: {e}");
                    std::process::exit(1);
                }
            }
        }
        let mut all_sent = Tally::default();
        let mut all_got = Tally::default();
        (0..size).for_each(|r| {
            let at = |k: usize| parts[k][r];
            all_sent.merge(&Tally::from_words([at(0), at(1), at(2), at(3)]));
            all_got.merge(&Tally::from_words([at(4), at(5), at(6), at(7)]));
            sums[8] += at(8);
        });
        let expected = a.items * (size * a.workers) as u64;
        let good = ok && tally::verify(&all_sent, &all_got, expected).is_ok();
        let good = mpi.all(good).unwrap_or(false);
        all_ok &= good;
        if rank == 0 {
            if good {
                println!(
                    "agg: PASS scheme={scheme} ranks={size} nodes={} workers={} items={} messages={} items_per_s={:.0}",
                    mpi.nodes(),
                    size * a.workers,
                    all_got.items,
                    sums[8],
                    expected as f64 / secs.max(1e-9)
                );
            } else {
                println!(
                    "agg: FAIL scheme={scheme} sent={:?} got={:?} expected={expected} {line}",
                    all_sent.words(),
                    all_got.words()
                );
            }
        } else if !line.is_empty() {
            eprintln!("agg: FAIL scheme={scheme} {line}");
        }
    }
    let _ = mpi.barrier();
    mpi.finalize();
    std::process::exit(if all_ok { 0 } else { 1 });
}
