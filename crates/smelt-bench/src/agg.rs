//! Aggregation's workloads (moved here from `smelt-agg`, which keeps only its API): the
//! Bale-style benchmarks over an aggregator, with their checks: a distributed
//! histogram (random updates to a table spread over the workers) and index-gather
//! (random remote reads: a request to the owner, a reply back).
//!
//! Both run every worker of a job of `processes × workers` threads
//! ([`smelt_agg::threads`]), check every result, and report the rate, the
//! messages each worker sent and (index-gather) the latency from a request's insert to
//! its reply's handling.

use smelt_agg::{threads, AggConfig, AggError, Scheme, Worker};
use smelt_ids::rng::SplitMix64;
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Table entries per worker.
pub const TABLE: u64 = 4096;

/// How long a benchmark's termination may take.
const LIMIT: Duration = Duration::from_secs(120);

/// A mixing function (SplitMix64's output function, [`smelt_ids::rng::mix`]): the
/// values of the tables and the checksums.
pub use smelt_ids::rng::mix;

/// One run's figures.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Run {
    /// The scheme (its name, `WW`, `WPs`, `WsP`, `PP` or `none`, in JSON).
    #[serde(serialize_with = "scheme_name")]
    pub scheme: Scheme,
    /// Processes.
    pub processes: usize,
    /// Workers per process.
    pub workers: usize,
    /// Items (updates, or requests) per worker.
    pub per_worker: u64,
    /// From the start of the inserts to the end of termination (the slowest worker).
    pub seconds: f64,
    /// Items (updates, or requests) per second, all workers together.
    pub items_per_s: f64,
    /// Messages sent per worker, the mean (requests and replies for index-gather).
    pub messages_per_worker: f64,
    /// The most messages one worker sent (for PP: the process's messages over its
    /// workers).
    pub max_messages_per_worker: f64,
    /// Index-gather: mean latency from a request's insert to its reply's handling.
    pub latency_mean_ns: Option<f64>,
    /// Index-gather: median of that latency (over a sample of every 8th request).
    pub latency_median_ns: Option<f64>,
}

fn scheme_name<S: serde::Serializer>(s: &Scheme, out: S) -> Result<S::Ok, S::Error> {
    out.collect_str(s)
}

/// The mean and the largest messages sent per worker of the workers `rs` (of
/// processes of `t` workers each, in worker order).
fn per_worker_messages<R, S>(rs: &[Ran<R, S>], scheme: Scheme, t: usize) -> (f64, f64) {
    let ws: Vec<u64> = rs.iter().map(|r| r.3.stats().messages).collect();
    let n = ws.len().max(1);
    let mean = ws.iter().sum::<u64>() as f64 / n as f64;
    let max = if scheme == Scheme::PP {
        // The process's shared buffers: whichever worker shipped them.
        let procs = n / t;
        (0..procs)
            .map(|p| ws[p * t..(p + 1) * t].iter().sum::<u64>() as f64 / t as f64)
            .fold(0.0, f64::max)
    } else {
        ws.iter().map(|&w| w as f64).fold(0.0, f64::max)
    };
    (mean, max)
}

/// A worker's start, end, result and the worker.
type Ran<R, S> = (Instant, Instant, R, Worker<S>);

/// Runs `body` on every worker in its own thread, all starting together: each
/// worker's (start, end, result).
fn run_all<S: Send, R: Send>(
    workers: Vec<Worker<S>>,
    body: impl Fn(&mut Worker<S>) -> Result<R, AggError> + Sync,
) -> Result<Vec<Ran<R, S>>, AggError> {
    let barrier = Barrier::new(workers.len());
    std::thread::scope(|s| {
        let hs: Vec<_> = workers
            .into_iter()
            .map(|mut w| {
                let body = &body;
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    let r = body(&mut w);
                    r.map(|r| (start, Instant::now(), r, w))
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| AggError::Invalid("a benchmark worker panicked".into()))?
            })
            .collect()
    })
}

fn span<A, B>(rs: &[(Instant, Instant, A, B)]) -> f64 {
    let s = rs.iter().map(|r| r.0).min();
    let e = rs.iter().map(|r| r.1).max();
    match (s, e) {
        (Some(s), Some(e)) => e.duration_since(s).as_secs_f64(),
        _ => 0.0,
    }
}

/// The histogram: every worker makes `updates` random increments to a table of
/// [`TABLE`] bins per worker (an 8-byte item each: the bin, sent to its owner), then
/// terminates. Checked: the bins' weighted sum over the whole table equals the
/// senders' (every update arrived once, at the right bin).
pub fn histogram(
    scheme: Scheme,
    processes: usize,
    workers: usize,
    g: usize,
    updates: u64,
) -> Result<Run, AggError> {
    let cfg = AggConfig::new(scheme, 8).buffer_items(g);
    let ws = threads(
        processes,
        workers,
        cfg,
        |_| vec![0u64; TABLE as usize],
        |t: &mut Vec<u64>, item: &[u8], _| {
            let b = u64::from_le_bytes(item.try_into().expect("8-byte items"));
            if let Some(c) = t.get_mut(b as usize) {
                *c += 1;
            }
        },
    )?;
    let total = (processes * workers) as u64;
    let rs = run_all(ws, |w| {
        let mut rng = SplitMix64::new(w.id() as u64 * 0x1234_5678 + 1);
        let mut sum = 0u64;
        for _ in 0..updates {
            let r = rng.next_u64();
            let dest = (r % total) as usize;
            let bin = (r >> 32) % TABLE;
            sum = sum.wrapping_add(mix(dest as u64 * TABLE + bin));
            w.insert_u64(bin, dest)?;
        }
        w.terminate(LIMIT)?;
        Ok(sum)
    })?;
    let seconds = span(&rs);
    let mut sent = 0u64;
    let mut got = 0u64;
    let mut count = 0u64;
    for (_, _, s, w) in &rs {
        sent = sent.wrapping_add(*s);
        for (b, &c) in w.state().iter().enumerate() {
            got = got.wrapping_add(c.wrapping_mul(mix(w.id() as u64 * TABLE + b as u64)));
            count += c;
        }
    }
    if count != updates * total || got != sent {
        return Err(AggError::Invalid(format!(
            "histogram ({scheme}) checksum mismatch: {count} updates arrived of {}",
            updates * total
        )));
    }
    let (mean, max) = per_worker_messages(&rs, scheme, workers);
    Ok(Run {
        scheme,
        processes,
        workers,
        per_worker: updates,
        seconds,
        items_per_s: (updates * total) as f64 / seconds.max(1e-9),
        messages_per_worker: mean,
        max_messages_per_worker: max,
        latency_mean_ns: None,
        latency_median_ns: None,
    })
}

/// What an index-gather worker keeps.
struct Ig {
    /// Per request: the insert time (ns since the start) and the expected value.
    pending: Vec<(u64, u64)>,
    replies: u64,
    wrong: u64,
    latency_sum: u128,
    samples: Vec<u64>,
}

/// Index-gather: every worker reads `requests` random entries of a table of [`TABLE`]
/// entries per worker: a 16-byte request (requester, sequence; index) to the owner,
/// whose handler inserts a 16-byte reply (requester, sequence; value) back. Checked:
/// every reply arrives once with the owner's value.
pub fn index_gather(
    scheme: Scheme,
    processes: usize,
    workers: usize,
    g: usize,
    requests: u64,
) -> Result<Run, AggError> {
    const REPLY: u64 = 1 << 63;
    let cfg = AggConfig::new(scheme, 16).buffer_items(g);
    let base = Instant::now();
    let ws = threads(
        processes,
        workers,
        cfg,
        |_| Ig {
            pending: Vec::with_capacity(requests as usize),
            replies: 0,
            wrong: 0,
            latency_sum: 0,
            samples: Vec::new(),
        },
        move |s: &mut Ig, item: &[u8], out| {
            let a = u64::from_le_bytes(item[..8].try_into().expect("16-byte items"));
            let b = u64::from_le_bytes(item[8..].try_into().expect("16-byte items"));
            if a & REPLY == 0 {
                // A request: read the table, reply to the requester.
                let value = mix(out.me() as u64 * TABLE + b % TABLE);
                let mut r = [0u8; 16];
                r[..8].copy_from_slice(&(a | REPLY).to_le_bytes());
                r[8..].copy_from_slice(&value.to_le_bytes());
                if out.insert(&r, (a & 0xF_FFFF) as usize).is_err() {
                    s.wrong += 1;
                }
            } else {
                let seq = ((a & !REPLY) >> 20) as usize;
                match s.pending.get_mut(seq) {
                    Some(p) if p.1 == b && p.0 != u64::MAX => {
                        let now = base.elapsed().as_nanos() as u64;
                        let l = now.saturating_sub(p.0);
                        p.0 = u64::MAX;
                        s.latency_sum += l as u128;
                        if seq.is_multiple_of(8) {
                            s.samples.push(l);
                        }
                        s.replies += 1;
                    }
                    _ => s.wrong += 1,
                }
            }
        },
    )?;
    let total = (processes * workers) as u64;
    let rs = run_all(ws, |w| {
        let me = w.id() as u64;
        let mut rng = SplitMix64::new(me * 0x9876_5431 + 7);
        for seq in 0..requests {
            let r = rng.next_u64();
            let dest = r % total;
            let idx = (r >> 32) % TABLE;
            let t0 = base.elapsed().as_nanos() as u64;
            w.state_mut().pending.push((t0, mix(dest * TABLE + idx)));
            let mut q = [0u8; 16];
            q[..8].copy_from_slice(&((seq << 20) | me).to_le_bytes());
            q[8..].copy_from_slice(&idx.to_le_bytes());
            w.insert(&q, dest as usize)?;
        }
        w.terminate(LIMIT)?;
        Ok(())
    })?;
    let seconds = span(&rs);
    let mut lat_sum = 0u128;
    let mut samples = Vec::new();
    for (_, _, _, w) in &rs {
        let s = w.state();
        if s.replies != requests || s.wrong != 0 {
            return Err(AggError::Invalid(format!(
                "index-gather ({scheme}): worker {} got {} good replies of {requests}, {} wrong",
                w.id(),
                s.replies,
                s.wrong
            )));
        }
        lat_sum += s.latency_sum;
        samples.extend_from_slice(&s.samples);
    }
    samples.sort_unstable();
    let median = samples.get(samples.len() / 2).map(|&m| m as f64);
    let (mean, max) = per_worker_messages(&rs, scheme, workers);
    Ok(Run {
        scheme,
        processes,
        workers,
        per_worker: requests,
        seconds,
        items_per_s: (requests * total) as f64 / seconds.max(1e-9),
        messages_per_worker: mean,
        max_messages_per_worker: max,
        latency_mean_ns: Some(lat_sum as f64 / (requests * total).max(1) as f64),
        latency_median_ns: median,
    })
}
