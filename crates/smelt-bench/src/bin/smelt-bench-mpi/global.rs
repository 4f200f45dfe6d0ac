//! Global arrays across MPI ranks (run under `mpirun`): the tests' checks, the
//! work-stealing example and the benchmark across (emulated) nodes.
//!
//! ```text
//! mpirun -np 4 smelt-bench-mpi global check      # DRF writes, fences, accumulates, errors
//! mpirun -np 4 smelt-bench-mpi global stealing   # the work-stealing counter
//! mpirun -np 4 smelt-bench-mpi global bench [--quick]
//! ```
//! With `SMELT_RANKS_PER_NODE=k` the ranks form emulated nodes of `k`. Rank 0 prints
//! one line per verdict (`ok <what>`) or figure (`bench {json}`); any failure exits
//! non-zero at the rank that saw it. The arrays are made from one world of the ranks
//! (`GlobalArray::from_world`).

use crate::job::Job;
use smelt_am::mpi::Options;
use smelt_bench::global::stealing::{self, Opts};
use smelt_global::{AccumulateOp, Element, GlobalArray, GlobalConfig, GlobalError};
use std::time::{Duration, Instant};

fn cfg() -> GlobalConfig {
    GlobalConfig {
        link: smelt_global::LinkConfig::default().timeout(Duration::from_secs(120)),
        ..GlobalConfig::default()
    }
}

/// With a cache of 4 lines of other nodes' elements.
fn cached() -> GlobalConfig {
    GlobalConfig {
        cache_lines: 4,
        ..cfg()
    }
}

fn value<T: Element>(round: u64, i: u64) -> T {
    T::from_word(match T::TYPE {
        smelt_global::ElemType::F64 => ((round * 1000 + i) as f64 * 0.25).to_bits(),
        smelt_global::ElemType::U32 | smelt_global::ElemType::I32 => {
            (round * 1000 + i) & 0x7FFF_FFFF
        }
        _ => (round << 40) | i,
    })
}

/// A collective call: an array of `len` elements over the world's ranks.
fn array<T: Element>(w: &Job, len: u64, cfg: GlobalConfig) -> Result<GlobalArray<T>, GlobalError> {
    GlobalArray::from_world(w.world(), len, cfg)
}

fn fail(what: String) -> GlobalError {
    GlobalError::Invalid(what)
}

/// Each round every rank writes the block of a rank `round + 1` further on (another
/// node, with nodes of fewer ranks than that), then everyone reads everything.
fn drf<T: Element>(w: &Job, len: u64, cfg: GlobalConfig) -> Result<(), GlobalError> {
    let a: GlobalArray<T> = array(w, len, cfg)?;
    let n = w.size();
    let mut all = vec![T::from_word(0); len as usize];
    for round in 0..4u64 {
        let b = a.layout().block((w.rank() + round as usize + 1) % n);
        let data: Vec<T> = b.clone().map(|i| value::<T>(round, i)).collect();
        a.put(b.start, &data)?;
        a.barrier()?;
        a.get(0, &mut all)?;
        for (i, v) in all.iter().enumerate() {
            if *v != value::<T>(round, i as u64) {
                return Err(fail(format!(
                    "{} round {round}: element {i} is {v:?}",
                    T::TYPE
                )));
            }
        }
        a.barrier()?;
    }
    Ok(())
}

/// Rank r writes data for rank r+1 (on another node when nodes hold one or two
/// ranks), write-back fence, raises a flag by an accumulate; the reader waits for the
/// flag, invalidate fence, reads.
fn flags(w: &Job, cfg: GlobalConfig) -> Result<(), GlobalError> {
    let n = w.size();
    let chunk = 64u64;
    let a: GlobalArray<u64> = array(w, chunk * n as u64 + n as u64, cfg)?;
    let me = w.rank();
    let to = (me + 1) % n;
    let flag_of = |r: usize| chunk * n as u64 + r as u64;
    for round in 1..=20u64 {
        // Write into the reader's region, which is not in the writer's block.
        let data: Vec<u64> = (0..chunk).map(|i| round << 20 | i).collect();
        a.put(to as u64 * chunk, &data)?;
        a.fence_writeback()?;
        a.accumulate(flag_of(to), &[1], AccumulateOp::Sum)?;
        let t = Instant::now();
        while a.fetch_accumulate(flag_of(me), 0, AccumulateOp::Sum)? < round {
            if t.elapsed() > Duration::from_secs(60) {
                return Err(fail(format!("rank {me}: no flag in round {round}")));
            }
            std::thread::yield_now();
        }
        a.fence_invalidate()?;
        let mut got = vec![0u64; chunk as usize];
        a.get(me as u64 * chunk, &mut got)?;
        if got
            .iter()
            .enumerate()
            .any(|(i, v)| *v != round << 20 | i as u64)
        {
            return Err(fail(format!("rank {me} round {round}: stale data {got:?}")));
        }
        a.barrier()?; // before the next round overwrites
    }
    Ok(())
}

/// With a cache: rank 0 reads an element of the last rank's block (on another node
/// when there are several), which the last rank then overwrites and announces with a
/// flag in another array. Rank 0 sees the flag, still reads its cached line (no
/// invalidate fence yet), and the new value after `fence_invalidate`.
fn si_fence(w: &Job) -> Result<(), GlobalError> {
    let n = w.size();
    if n < 2 {
        return Ok(());
    }
    let last = n - 1;
    let a: GlobalArray<u64> = array(w, n as u64 * 8, cached())?;
    let flag: GlobalArray<u64> = array(w, n as u64, cfg())?;
    let x = last as u64 * 8;
    a.put(x, &[1])?;
    a.barrier()?;
    let remote = w.node_of(0) != w.node_of(last);
    let wait_flag = |v: u64| -> Result<(), GlobalError> {
        let t = Instant::now();
        while flag.fetch_accumulate(0, 0, AccumulateOp::Sum)? < v {
            if t.elapsed() > Duration::from_secs(60) {
                return Err(fail(format!("rank {}: flag {v} never came", w.rank())));
            }
            std::thread::yield_now();
        }
        Ok(())
    };
    if w.rank() == 0 {
        let before = a.get_one(x)?;
        flag.accumulate(0, &[1], AccumulateOp::Sum)?;
        wait_flag(2)?;
        let stale = a.get_one(x)?;
        a.fence_invalidate()?;
        let fresh = a.get_one(x)?;
        let s = a.cache_stats();
        let ok = if remote {
            before == 1 && stale == 1 && fresh == 2 && s.hits >= 1 && s.misses >= 2
        } else {
            before == 1 && fresh == 2 && s == Default::default()
        };
        if !ok {
            return Err(fail(format!(
                "cache: before {before}, without the fence {stale}, after {fresh}, {s:?}"
            )));
        }
    } else if w.rank() == last {
        wait_flag(1)?;
        a.put(x, &[2])?;
        a.fence_writeback()?;
        flag.accumulate(0, &[1], AccumulateOp::Sum)?;
    }
    a.barrier()?;
    flag.barrier()
}

fn accumulates(w: &Job) -> Result<(), GlobalError> {
    let n = w.size() as u64;
    let len = 50u64;
    let a: GlobalArray<u64> = array(w, len, cfg())?;
    let f: GlobalArray<f64> = array(w, len, cfg())?;
    let s: GlobalArray<i32> = array(w, len, cfg())?;
    let k = 20u64;
    for _ in 0..k {
        // The last element is left for the tickets.
        a.accumulate(0, &vec![1; len as usize - 1], AccumulateOp::Sum)?;
        f.accumulate(0, &vec![0.5; len as usize], AccumulateOp::Sum)?;
        s.accumulate(3, &[-(w.rank() as i32) - 1; 10], AccumulateOp::Min)?;
        s.accumulate(20, &[w.rank() as i32 + 1; 10], AccumulateOp::Max)?;
    }
    let tickets = a.fetch_accumulate(len - 1, 1, AccumulateOp::Sum)?;
    a.barrier()?;
    f.barrier()?;
    s.barrier()?;
    let tickets = w.gather(tickets)?;
    let mut sorted = tickets.clone();
    sorted.sort_unstable();
    if sorted != (0..n).collect::<Vec<_>>() {
        return Err(fail(format!("fetch-and-add tickets {tickets:?}")));
    }
    let mut got = vec![0u64; len as usize];
    a.get(0, &mut got)?;
    if got[..len as usize - 1].iter().any(|v| *v != n * k) || got[len as usize - 1] != n {
        return Err(fail(format!("sums {got:?}")));
    }
    let mut fg = vec![0f64; len as usize];
    f.get(0, &mut fg)?;
    if fg.iter().any(|v| *v != (n * k) as f64 * 0.5) {
        return Err(fail(format!("f64 sums {fg:?}")));
    }
    let mut sg = vec![0i32; len as usize];
    s.get(0, &mut sg)?;
    if sg[3..13].iter().any(|v| *v != -(n as i32)) || sg[20..30].iter().any(|v| *v != n as i32) {
        return Err(fail(format!("i32 min/max {sg:?}")));
    }
    // Replace across nodes returns the old value (after every rank read the sums).
    a.barrier()?;
    if w.rank() == 0 {
        let old = a.fetch_accumulate(len - 2, 7, AccumulateOp::Replace)?;
        if old != n * k || a.get_one(len - 2)? != 7 {
            return Err(fail(format!("replace: old {old}")));
        }
    }
    a.barrier()?;
    Ok(())
}

fn errors(w: &Job) -> Result<(), GlobalError> {
    let a: GlobalArray<u32> = array(w, 10, cfg())?;
    match a.get_one(10) {
        Err(GlobalError::OutOfRange { .. }) => {}
        r => return Err(fail(format!("get_one(10) of 10 elements: {r:?}"))),
    }
    if a.put(u64::MAX, &[1]).is_ok() {
        return Err(fail("put at u64::MAX accepted".into()));
    }
    a.barrier()
}

/// Rank 0 makes a `u64` array, the others an `f64` one: every rank must refuse.
fn mismatch(w: &Job) -> Result<(), GlobalError> {
    let r = if w.rank() == 0 {
        array::<u64>(w, 16, cfg()).map(drop)
    } else {
        array::<f64>(w, 16, cfg()).map(drop)
    };
    match r {
        Err(GlobalError::WrongType { .. }) => {}
        r => return Err(fail(format!("mismatched element types: {r:?}"))),
    }
    // The ranks still work together afterwards.
    let a: GlobalArray<u64> = array(w, 16, cfg())?;
    a.barrier()?;
    if w.rank() == 0 {
        println!("ok mismatch: ranks making arrays of different element types all refused");
    }
    Ok(())
}

fn check(w: &Job) -> Result<(), GlobalError> {
    let say = |what: &str| {
        if w.rank() == 0 {
            println!("ok {what}");
        }
    };
    drf::<u64>(w, 1000, cfg())?;
    drf::<i64>(w, 77, cfg())?;
    drf::<f64>(w, 129, cfg())?;
    drf::<u32>(w, 64, cfg())?;
    drf::<i32>(w, 5, cfg())?;
    drf::<u64>(w, 1000, cached())?;
    drf::<i32>(w, 300, cached())?;
    say("drf: every write seen after barriers (u64, i64, f64, u32, i32; cached too)");
    flags(w, cfg())?;
    flags(w, cached())?;
    say("fences: writes fenced then flagged seen after the invalidate fence (cached too)");
    si_fence(w)?;
    say("cache: a cached line is kept until the invalidate fence, then read afresh");
    accumulates(w)?;
    say("accumulates: sums, min, max, fetch-and-add tickets, replace");
    errors(w)?;
    say("errors: out-of-range indices refused");
    mismatch(w)?;
    Ok(())
}

fn steal(w: &Job) -> Result<(), GlobalError> {
    let opts = Opts {
        tasks: 2000,
        work: 20,
        seed: 3,
    };
    let c: GlobalArray<u64> = array(w, w.size() as u64, cfg())?;
    let r: GlobalArray<u64> = array(w, opts.tasks, cfg())?;
    let rep = stealing::run(&c, &r, &opts)?;
    if rep.mismatches != 0 {
        return Err(fail(format!("{} mismatches", rep.mismatches)));
    }
    let ran = w.gather(rep.own + rep.stolen)?;
    let stolen = w.gather(rep.stolen)?;
    if ran.iter().sum::<u64>() != opts.tasks {
        return Err(fail(format!("tasks run per rank {ran:?}")));
    }
    if w.rank() == 0 {
        println!(
            "ok stealing: {} tasks over {} ranks on {} nodes match the sequential recomputation (ran {ran:?}, stolen {stolen:?})",
            opts.tasks,
            w.size(),
            w.nodes()
        );
    }
    Ok(())
}

fn bench(w: &Job, quick: bool) -> Result<(), GlobalError> {
    let (rounds, samples) = if quick { (500, 5) } else { (5000, 11) };
    let n = w.size();
    let me = w.rank();
    // A target on another node, and one on this node, for rank 0.
    let other = (1..n).find(|r| w.node_of(*r) != w.node_of(0));
    let same = (1..n).find(|r| w.node_of(*r) == w.node_of(0));
    let a: GlobalArray<u64> = array(w, n as u64 * 8, cfg())?;
    let c: GlobalArray<u64> = array(w, n as u64 * 8, cached())?;
    a.put(me as u64 * 8, &[me as u64 + 100; 8])?;
    c.put(me as u64 * 8, &[me as u64 + 100; 8])?;
    a.barrier()?;
    c.barrier()?;
    let row = |a: &GlobalArray<u64>, target: Option<usize>| -> Result<Option<f64>, GlobalError> {
        let mut times = Vec::new();
        if let (0, Some(t)) = (me, target) {
            let mut v = [0u64];
            for _ in 0..samples {
                let s = Instant::now();
                for _ in 0..rounds {
                    a.get(t as u64 * 8, &mut v)?;
                }
                times.push(s.elapsed().as_nanos() as f64 / rounds as f64);
                if v[0] != t as u64 + 100 {
                    return Err(fail(format!("get read {}", v[0])));
                }
            }
        }
        // The other ranks serve MPI (passive target progress) at this barrier.
        a.barrier()?;
        Ok((!times.is_empty()).then(|| smelt_ids::stats::median(&times)))
    };
    let get_remote = row(&a, other)?;
    let get_node = row(&a, same)?;
    let get_cached = row(&c, other)?;
    let (plain, plain_alloc) = match other {
        Some(t) => (
            Some(smelt_global::mpi::plain_get_ns(
                w.world(),
                0,
                t,
                rounds,
                samples,
                false,
            )?),
            Some(smelt_global::mpi::plain_get_ns(
                w.world(),
                0,
                t,
                rounds,
                samples,
                true,
            )?),
        ),
        None => (None, None),
    };
    if me == 0 {
        let f = |v: Option<f64>| v.map_or("null".to_string(), |x| format!("{x:.1}"));
        let ratio = match (get_remote, plain) {
            (Some(g), Some(p)) => format!("{:.3}", g / p),
            _ => "null".into(),
        };
        println!(
            "bench {{\"ranks\":{n},\"nodes\":{},\"rounds\":{rounds},\"samples\":{samples},\"get_8b_across_nodes_ns\":{},\"mpi_get_8b_ns\":{},\"mpi_get_8b_win_allocate_ns\":{},\"get_8b_same_node_ns\":{},\"get_8b_across_nodes_cached_ns\":{},\"get_across_over_mpi_get\":{ratio}}}",
            w.nodes(),
            f(get_remote),
            f(plain),
            f(plain_alloc),
            f(get_node),
            f(get_cached)
        );
    }
    Ok(())
}

pub fn main() {
    let args: Vec<String> = std::env::args().skip(2).collect();
    let mode = args.first().map(String::as_str).unwrap_or("");
    if !matches!(mode, "check" | "stealing" | "bench") {
        eprintln!("usage: mpirun -np N smelt-bench-mpi global check|stealing|bench [--quick]");
        std::process::exit(2);
    }
    let quick = args.iter().any(|a| a == "--quick");
    let w = match Options::from_env()
        .map_err(|e| e.to_string())
        .and_then(|o| Job::init(o.nodes, o.timeout))
    {
        Ok(w) => w,
        Err(e) => {
            eprintln!("smelt-bench-mpi global: {e}");
            std::process::exit(1);
        }
    };
    if w.rank() == 0 {
        println!("layout {}", w.describe());
    }
    let r = match mode {
        "check" => check(&w),
        "stealing" => steal(&w),
        _ => bench(&w, quick),
    };
    if let Err(e) = r {
        eprintln!("smelt-bench-mpi global: rank {}: {e}", w.rank());
        std::process::exit(1);
    }
    w.finalize();
}
