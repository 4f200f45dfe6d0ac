//! The pairwise probe (Smelt paper §3.2): for every ordered pair of CPUs, two pinned
//! threads exchange word messages over the runtime's own transport (a
//! `smelt_transport::queuepair`) and time
//!
//! * `t_send` — the sender's blocked time per message, averaged over batches of 8
//!   back-to-back sends while the receiver is polling;
//! * `t_receive` — the receiver's time to take one message that is already queued
//!   (the sender raises a flag after sending; the receiver times only the receive);
//! * round-trip time — a message there and one back, averaged over 8 round trips.
//!
//! Each figure is the median of `reps` samples after MAD outlier rejection
//! ([`crate::stats`]); the clock's own overhead is measured once and subtracted.
//! `--sample` measures a few representative pairs per *relationship class* (which
//! hierarchy levels the two CPUs share) and fills the others with the class median.

use crate::harness::Deadline;
use crate::link::{RecvWord, SendWord};
use crate::ProbeError;
use smelt_ids::CpuId;
use smelt_model::Hierarchy;
use smelt_transport::{Consumer, Producer};
use smelt_tree::stats::{median_sorted, summarize, Summary};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Messages per `t_send` batch and per round-trip sample.
pub const BATCH: usize = 8;
/// Slots of the probe's queuepair.
pub const CHANNEL_SLOTS: usize = 64;

/// What to probe and how hard.
#[derive(Debug, Clone)]
pub struct ProbeConfig {
    /// OS CPU ids to probe, in matrix order.
    pub cpus: Vec<u32>,
    /// Samples per figure per pair.
    pub reps: usize,
    /// Unrecorded warm-up samples per figure per pair.
    pub warmup: usize,
    /// Bound on the whole sweep: repetitions are scaled down to fit, and pairs not
    /// reached in time are filled in (and say so in the notes).
    pub time_limit: Option<Duration>,
    /// Measure at most this many representative pairs per relationship class of
    /// `hierarchy` and fill the rest (`None`: measure every pair).
    pub sample: Option<usize>,
    /// The OS hierarchy of `cpus` (used only to classify pairs for `sample`).
    pub hierarchy: Hierarchy,
    /// Show a progress bar on stderr (only when it is a terminal).
    pub progress: bool,
    /// Give up on one pair after this long (a stuck thread is reported, not waited for).
    pub pair_timeout: Duration,
}

impl ProbeConfig {
    /// Defaults for the given CPUs: 64 samples after 8 warm-up rounds, no sampling.
    pub fn new(cpus: Vec<u32>) -> ProbeConfig {
        ProbeConfig {
            cpus,
            reps: 64,
            warmup: 8,
            time_limit: None,
            sample: None,
            hierarchy: Hierarchy::default(),
            progress: false,
            pair_timeout: Duration::from_secs(20),
        }
    }

    /// The quick pass: 16 samples after 4 warm-up rounds.
    pub fn quick(cpus: Vec<u32>) -> ProbeConfig {
        ProbeConfig {
            reps: 16,
            warmup: 4,
            ..ProbeConfig::new(cpus)
        }
    }
}

/// The three figures of one ordered pair, ns.
#[derive(Debug, Clone, Copy)]
pub struct PairCosts {
    /// Sender's blocked time per message.
    pub send: Summary,
    /// Receiver's time to take one queued message.
    pub receive: Summary,
    /// Round-trip time.
    pub rtt: Summary,
}

/// The outcome of a sweep: n×n matrices (diagonal 0) indexed by position in
/// [`ProbeConfig::cpus`], and notes for the model's provenance.
#[derive(Debug, Clone)]
pub struct ProbeResult {
    /// OS CPU ids, matrix order.
    pub cpus: Vec<u32>,
    /// `t_send`, ns.
    pub send: Vec<Vec<f64>>,
    /// `t_receive`, ns.
    pub receive: Vec<Vec<f64>>,
    /// Round trip, ns.
    pub rtt: Vec<Vec<f64>>,
    /// Ordered pairs measured / in total.
    pub measured: usize,
    /// Ordered pairs in total (n·(n−1)).
    pub pairs: usize,
    /// Samples per figure actually used (after time-limit scaling).
    pub reps: usize,
    /// Wall time of the sweep.
    pub elapsed: Duration,
    /// Median over measured pairs of the relative spread (MAD / median) of send,
    /// receive and rtt samples.
    pub spread: [f64; 3],
    /// Mean wall time per measured pair.
    pub per_pair: Duration,
    /// Parameters and everything filled in, for `provenance.notes`.
    pub notes: Vec<String>,
}

impl ProbeResult {
    /// The model this probe measured: `skeleton` (the machine's host, CPUs and
    /// hierarchy, e.g. `smelt_model::topology::skeleton` of the CPUs probed) with the
    /// probe's costs and notes, `method` "probe", and the hierarchy inferred from the
    /// costs; validated. The one way every command turns a probe into a model.
    pub fn to_model(&self, skeleton: smelt_model::Model) -> Result<smelt_model::Model, ProbeError> {
        let mut m = skeleton;
        m.provenance.method = "probe".into();
        m.send = self.send.clone();
        m.receive = self.receive.clone();
        m.rtt = Some(self.rtt.clone());
        m.provenance.notes = self.notes.clone();
        if m.len() > 1 {
            m.inferred_hierarchy = Some(smelt_model::infer::infer_hierarchy(&m));
        }
        m.validate().map_err(ProbeError::Model)?;
        Ok(m)
    }
}

/// Median cost of reading the clock twice, ns (subtracted from every sample).
pub fn timer_overhead() -> f64 {
    let mut v: Vec<f64> = (0..2001)
        .map(|_| {
            let a = Instant::now();
            let b = Instant::now();
            (b - a).as_nanos() as f64
        })
        .collect();
    v.sort_by(f64::total_cmp);
    median_sorted(&v)
}

fn ns(d: Duration) -> f64 {
    d.as_nanos() as f64
}

/// One side of a pair measurement: its channel ends and the shared parameters.
struct Side {
    tx: Producer,
    rx: Consumer,
    flag: Arc<AtomicU64>,
    total: usize,
    warmup: usize,
    overhead: f64,
    deadline: Deadline,
    what: String,
}

/// The two sides of the ordered pair `s -> r`.
fn pair_sides(
    s: u32,
    r: u32,
    reps: usize,
    warmup: usize,
    overhead: f64,
    timeout: Duration,
) -> (Side, Side) {
    let (a, b) = smelt_transport::queuepair(CHANNEL_SLOTS);
    let (s_tx, s_rx) = a.split();
    let (r_tx, r_rx) = b.split();
    let flag = Arc::new(AtomicU64::new(0));
    let deadline = Deadline::after(timeout);
    let what = format!("pair CPU {s} -> CPU {r}");
    let side = |tx, rx| Side {
        tx,
        rx,
        flag: flag.clone(),
        total: warmup + reps.max(1),
        warmup,
        overhead,
        deadline,
        what: what.clone(),
    };
    (side(s_tx, s_rx), side(r_tx, r_rx))
}

/// The sender's part: `t_send` samples and round-trip samples.
fn sender_body(mut sd: Side) -> Result<(Vec<f64>, Vec<f64>), String> {
    let d = sd.deadline;
    let stuck = |_| format!("{}: timed out", sd.what);
    let (total, warmup, overhead) = (sd.total, sd.warmup, sd.overhead);
    let mut send = Vec::with_capacity(total);
    let mut rtt = Vec::with_capacity(total);
    // t_send: batches of 8 back-to-back sends; the receiver acks each batch.
    for it in 0..total {
        let t0 = Instant::now();
        for k in 0..BATCH {
            sd.tx.send_until(k as u64, &d).map_err(stuck)?;
        }
        let dt = ns(t0.elapsed());
        if it >= warmup {
            send.push(((dt - overhead) / BATCH as f64).max(0.0));
        }
        sd.rx.recv_until(&d).map_err(stuck)?;
    }
    // t_receive: one message queued, then the flag; the receiver acks.
    for it in 0..total {
        sd.tx.send_until(it as u64, &d).map_err(stuck)?;
        sd.flag.store(it as u64 + 1, Ordering::Release);
        sd.rx.recv_until(&d).map_err(stuck)?;
    }
    // Round trips.
    for it in 0..total {
        let t0 = Instant::now();
        for k in 0..BATCH {
            sd.tx.send_until(k as u64, &d).map_err(stuck)?;
            sd.rx.recv_until(&d).map_err(stuck)?;
        }
        let dt = ns(t0.elapsed());
        if it >= warmup {
            rtt.push(((dt - overhead) / BATCH as f64).max(0.0));
        }
    }
    Ok((send, rtt))
}

/// The receiver's part: `t_receive` samples.
fn receiver_body(mut sd: Side) -> Result<Vec<f64>, String> {
    let d = sd.deadline;
    let stuck = |_| format!("{}: timed out", sd.what);
    let (total, warmup, overhead) = (sd.total, sd.warmup, sd.overhead);
    let mut recv = Vec::with_capacity(total);
    for _ in 0..total {
        for _ in 0..BATCH {
            sd.rx.recv_until(&d).map_err(stuck)?;
        }
        sd.tx.send_until(0, &d).map_err(stuck)?;
    }
    for it in 0..total {
        let flag = &sd.flag;
        d.wait_until(|| flag.load(Ordering::Acquire) == it as u64 + 1)
            .map_err(stuck)?;
        let t0 = Instant::now();
        let got = sd.rx.try_recv_word();
        let dt = ns(t0.elapsed());
        if got.is_err() {
            // Cannot happen with a FIFO channel: the flag follows the send.
            sd.rx.recv_until(&d).map_err(stuck)?;
        } else if it >= warmup {
            recv.push((dt - overhead).max(0.0));
        }
        sd.tx.send_until(0, &d).map_err(stuck)?;
    }
    for _ in 0..total {
        for _ in 0..BATCH {
            let w = sd.rx.recv_until(&d).map_err(stuck)?;
            sd.tx.send_until(w, &d).map_err(stuck)?;
        }
    }
    Ok(recv)
}

type SenderResult = Result<(Vec<f64>, Vec<f64>), String>;
type ReceiverResult = Result<Vec<f64>, String>;

fn finish(
    s: u32,
    r: u32,
    sender: SenderResult,
    receiver: ReceiverResult,
) -> Result<PairCosts, String> {
    let (send, rtt) = sender?;
    let recv = receiver?;
    let sum = |v: &[f64], what: &str| {
        summarize(v).ok_or_else(|| format!("pair CPU {s} -> CPU {r}: no valid {what} sample"))
    };
    Ok(PairCosts {
        send: sum(&send, "send")?,
        receive: sum(&recv, "receive")?,
        rtt: sum(&rtt, "round-trip")?,
    })
}

/// Measures one ordered pair: the sender on OS CPU `s`, the receiver on `r`, on a
/// [`PinnedPool`] of those two CPUs (the sweep keeps one pool for all its pairs). A
/// pair needs two different CPUs.
pub fn measure_pair(
    s: u32,
    r: u32,
    reps: usize,
    warmup: usize,
    overhead: f64,
    timeout: Duration,
) -> Result<PairCosts, ProbeError> {
    if s == r {
        return Err(ProbeError::Failed(format!(
            "pair CPU {s} -> CPU {r}: a pair needs two different CPUs"
        )));
    }
    PinnedPool::new(&[CpuId(s), CpuId(r)])?.measure_pair(s, r, reps, warmup, overhead, timeout)
}

type Job = Box<dyn FnOnce() + Send + 'static>;

/// One thread pinned to each CPU, reused for every pair of a sweep (starting and
/// pinning two threads per pair would cost more than measuring it).
pub struct PinnedPool {
    workers: BTreeMap<u32, mpsc::Sender<Job>>,
    handles: Vec<std::thread::JoinHandle<()>>,
}

impl PinnedPool {
    /// Starts one thread per CPU; fails (naming the CPU) if one cannot be pinned.
    pub fn new(cpus: &[CpuId]) -> Result<PinnedPool, ProbeError> {
        let mut pool = PinnedPool {
            workers: BTreeMap::new(),
            handles: Vec::new(),
        };
        for &cpu in cpus {
            let c = cpu.0;
            let (tx, rx) = mpsc::channel::<Job>();
            let (ready_tx, ready_rx) = mpsc::channel::<Result<(), ProbeError>>();
            let h = std::thread::Builder::new()
                .name(format!("smelt-probe-{c}"))
                .spawn(move || {
                    let pinned = crate::affinity::pin_current_thread(cpu);
                    let ok = pinned.is_ok();
                    let _ = ready_tx.send(pinned);
                    if ok {
                        while let Ok(job) = rx.recv() {
                            job();
                        }
                    }
                })
                .map_err(|e| format!("cannot start a probe thread for CPU {c}: {e}"))?;
            pool.handles.push(h);
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(ProbeError::Failed(format!(
                        "the probe thread for CPU {c} died"
                    )))
                }
            }
            pool.workers.insert(c, tx);
        }
        Ok(pool)
    }

    /// Runs `f` on the thread pinned to `cpu`; its result arrives on the receiver.
    fn submit<T: Send + 'static>(
        &self,
        cpu: u32,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<mpsc::Receiver<T>, String> {
        let (tx, rx) = mpsc::channel();
        let w = self
            .workers
            .get(&cpu)
            .ok_or_else(|| format!("no probe thread for CPU {cpu}"))?;
        w.send(Box::new(move || {
            let _ = tx.send(f());
        }))
        .map_err(|_| format!("the probe thread for CPU {cpu} died"))?;
        Ok(rx)
    }

    /// Measures the ordered pair `s -> r` on the pool's threads.
    pub fn measure_pair(
        &self,
        s: u32,
        r: u32,
        reps: usize,
        warmup: usize,
        overhead: f64,
        timeout: Duration,
    ) -> Result<PairCosts, ProbeError> {
        self.pair_why(s, r, reps, warmup, overhead, timeout)
            .map_err(ProbeError::Failed)
    }

    fn pair_why(
        &self,
        s: u32,
        r: u32,
        reps: usize,
        warmup: usize,
        overhead: f64,
        timeout: Duration,
    ) -> Result<PairCosts, String> {
        let (ss, rs) = pair_sides(s, r, reps, warmup, overhead, timeout);
        let a = self.submit(s, move || sender_body(ss))?;
        let b = self.submit(r, move || receiver_body(rs))?;
        // The bodies give up at their own deadline; the margin covers scheduling.
        let wait = timeout + Duration::from_secs(5);
        let lost = |_| format!("pair CPU {s} -> CPU {r}: a probe thread did not answer");
        let sender = a.recv_timeout(wait).map_err(lost);
        let receiver = b.recv_timeout(wait).map_err(lost);
        finish(s, r, sender?, receiver?)
    }
}

impl Drop for PinnedPool {
    fn drop(&mut self) {
        self.workers.clear();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// The relationship class of positions `i`, `j`: for every level of `h`, whether the
/// two CPUs share a group.
pub fn pair_class(h: &Hierarchy, a: u32, b: u32) -> Vec<bool> {
    h.levels
        .iter()
        .map(|l| l.groups.iter().any(|g| g.contains(&a) && g.contains(&b)))
        .collect()
}

/// The relationship class of every ordered pair of positions.
pub type PairClasses = BTreeMap<(usize, usize), Vec<bool>>;

/// Chooses the ordered pairs to measure: all of them, or with `sample = Some(k)` at
/// most `k` per relationship class (evenly spread over the class). Returns the
/// pairs to measure and the class of every ordered pair.
pub fn plan_pairs(
    cpus: &[u32],
    h: &Hierarchy,
    sample: Option<usize>,
) -> (Vec<(usize, usize)>, PairClasses) {
    let n = cpus.len();
    let mut class_of = BTreeMap::new();
    let mut classes: BTreeMap<Vec<bool>, Vec<(usize, usize)>> = BTreeMap::new();
    for i in 0..n {
        for j in 0..n {
            if i != j {
                let c = pair_class(h, cpus[i], cpus[j]);
                classes.entry(c.clone()).or_default().push((i, j));
                class_of.insert((i, j), c);
            }
        }
    }
    let all: Vec<(usize, usize)> = class_of.keys().copied().collect();
    let Some(k) = sample else {
        return (all, class_of);
    };
    let k = k.max(1);
    let mut chosen = Vec::new();
    for members in classes.values() {
        if members.len() <= k {
            chosen.extend(members.iter().copied());
        } else {
            for t in 0..k {
                chosen.push(members[t * members.len() / k]);
            }
        }
    }
    chosen.sort_unstable();
    (chosen, class_of)
}

/// Runs the sweep. Errors: a CPU this process may not use, or a stuck pair.
pub fn probe(cfg: &ProbeConfig) -> Result<ProbeResult, ProbeError> {
    let start = Instant::now();
    let cpus = cfg.cpus.clone();
    let n = cpus.len();
    if n == 0 {
        return Err(ProbeError::Failed("no CPU to probe".into()));
    }
    let allowed = crate::affinity::allowed_cpus();
    if let Some(bad) = cpus.iter().find(|c| !allowed.contains(c)) {
        return Err(ProbeError::Failed(format!(
            "CPU {bad} is not available to this process (it may use CPUs {})",
            smelt_model::format_cpu_list(&allowed)
        )));
    }
    let mut notes = Vec::new();
    let useful = cfg
        .hierarchy
        .levels
        .iter()
        .any(|l| l.groups.len() > 1 && l.groups.len() < n);
    let sample = match cfg.sample {
        Some(_) if !useful => {
            notes.push(
                "--sample ignored: the hierarchy does not split the CPUs into classes, so every pair was measured".into(),
            );
            None
        }
        s => s,
    };
    let (plan, class_of) = plan_pairs(&cpus, &cfg.hierarchy, sample);
    let pairs = n * (n - 1);
    let overhead = timer_overhead();
    let mut reps = cfg.reps.max(1);
    let mut warmup = cfg.warmup;
    let pool = PinnedPool::new(&cpus.iter().map(|&c| CpuId(c)).collect::<Vec<_>>())?;
    let bar = crate::progress::Progress::new(cfg.progress, plan.len() as u64, "pairs")
        .with_label("smelt probe");
    let mut got: BTreeMap<(usize, usize), PairCosts> = BTreeMap::new();
    let mut stopped_at = None;
    let sweep = Instant::now();
    for (idx, &(i, j)) in plan.iter().enumerate() {
        if let Some(limit) = cfg.time_limit {
            let spent = start.elapsed();
            if idx > 0 && spent >= limit {
                stopped_at = Some(idx);
                break;
            }
            if idx == 1 {
                // Scale repetitions so that the remaining pairs fit the limit.
                let per_pair = spent.as_secs_f64();
                let left = limit.as_secs_f64() * 0.9 - spent.as_secs_f64();
                let need = per_pair * (plan.len() - 1) as f64;
                if need > left && left > 0.0 {
                    let f = left / need;
                    reps = ((reps as f64 * f) as usize).max(3);
                    warmup = ((warmup as f64 * f) as usize).max(1);
                    notes.push(format!(
                        "time limit {:.1} s: repetitions scaled from {} to {reps} after the first pair",
                        limit.as_secs_f64(),
                        cfg.reps
                    ));
                }
            }
        }
        let c = pool.measure_pair(cpus[i], cpus[j], reps, warmup, overhead, cfg.pair_timeout)?;
        got.insert((i, j), c);
        bar.inc();
    }
    bar.finish();
    let per_pair = if got.is_empty() {
        0.0
    } else {
        sweep.elapsed().as_secs_f64() / got.len() as f64
    };
    // Fill the matrices: measured pairs, else the median of their class, else the
    // median of everything measured.
    let mut by_class: BTreeMap<&Vec<bool>, [Vec<f64>; 3]> = BTreeMap::new();
    for (k, c) in &got {
        let e = by_class.entry(&class_of[k]).or_default();
        e[0].push(c.send.median);
        e[1].push(c.receive.median);
        e[2].push(c.rtt.median);
    }
    let med = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        median_sorted(&v)
    };
    let global: [f64; 3] = {
        let all = |f: fn(&PairCosts) -> f64| got.values().map(f).collect::<Vec<_>>();
        [
            med(&all(|c| c.send.median)),
            med(&all(|c| c.receive.median)),
            med(&all(|c| c.rtt.median)),
        ]
    };
    let mut m = [
        vec![vec![0.0; n]; n],
        vec![vec![0.0; n]; n],
        vec![vec![0.0; n]; n],
    ];
    let mut filled = 0;
    for (k, class) in &class_of {
        let vals = match got.get(k) {
            Some(c) => [c.send.median, c.receive.median, c.rtt.median],
            None => {
                filled += 1;
                match by_class.get(class) {
                    Some(v) => [med(&v[0]), med(&v[1]), med(&v[2])],
                    None => global,
                }
            }
        };
        for (t, v) in vals.iter().enumerate() {
            m[t][k.0][k.1] = if v.is_finite() { *v } else { 0.0 };
        }
    }
    let rel = |f: fn(&PairCosts) -> Summary| {
        let v: Vec<f64> = got
            .values()
            .map(f)
            .filter(|s| s.median > 0.0)
            .map(|s| s.mad / s.median)
            .collect();
        if v.is_empty() {
            0.0
        } else {
            med(&v)
        }
    };
    let spread = [rel(|c| c.send), rel(|c| c.receive), rel(|c| c.rtt)];
    notes.insert(
        0,
        format!(
            "probe: transport queuepair ({CHANNEL_SLOTS} slots, word messages); t_send = sender's time per message over batches of {BATCH}; t_receive = time to take one queued message; rtt over {BATCH} round trips; {reps} samples after {warmup} warm-up per figure; median after MAD outlier rejection (k = 3.5); clock overhead {overhead:.0} ns subtracted"
        ),
    );
    notes.push(format!(
        "measured {} of {pairs} ordered pairs in {:.3} s; median relative spread (MAD/median): send {:.0}%, receive {:.0}%, rtt {:.0}%",
        got.len(),
        start.elapsed().as_secs_f64(),
        spread[0] * 100.0,
        spread[1] * 100.0,
        spread[2] * 100.0
    ));
    notes.push(format!(
        "{:.2} ms per pair at {reps} samples: a full probe of 256 CPUs (65,280 pairs) would take about {:.0} s at this speed",
        per_pair * 1e3,
        per_pair * 65_280.0
    ));
    if let Some(k) = sample {
        notes.push(format!(
            "--sample {k}: at most {k} pairs measured per relationship class ({} classes by shared hierarchy levels); the other pairs were filled with their class median",
            by_class.len()
        ));
    }
    if let Some(at) = stopped_at {
        notes.push(format!(
            "time limit reached after {at} of {} planned pairs; {filled} pairs filled with class (or overall) medians",
            plan.len()
        ));
    } else if filled > 0 && sample.is_none() {
        notes.push(format!("{filled} pairs filled with class medians"));
    }
    let [send, receive, rtt] = m;
    Ok(ProbeResult {
        cpus,
        send,
        receive,
        rtt,
        measured: got.len(),
        pairs,
        reps,
        elapsed: start.elapsed(),
        spread,
        per_pair: Duration::from_secs_f64(per_pair),
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use smelt_model::Level;

    fn two_by_two() -> Hierarchy {
        Hierarchy {
            source: "test".into(),
            levels: vec![
                Level {
                    name: "Package".into(),
                    groups: vec![vec![0, 1], vec![2, 3]],
                },
                Level {
                    name: "Core".into(),
                    groups: vec![vec![0], vec![1], vec![2], vec![3]],
                },
            ],
        }
    }

    #[test]
    fn classes_follow_the_hierarchy() {
        let h = two_by_two();
        assert_eq!(pair_class(&h, 0, 1), vec![true, false]);
        assert_eq!(pair_class(&h, 1, 2), vec![false, false]);
        let (all, class_of) = plan_pairs(&[0, 1, 2, 3], &h, None);
        assert_eq!(all.len(), 12);
        assert_eq!(class_of.len(), 12);
        let (some, _) = plan_pairs(&[0, 1, 2, 3], &h, Some(1));
        assert_eq!(some.len(), 2, "{some:?}");
        assert_ne!(class_of[&some[0]], class_of[&some[1]]);
    }

    #[test]
    fn one_pair_gives_positive_costs() {
        let cpus = crate::affinity::allowed_cpus();
        let (a, b) = (cpus[0], *cpus.last().unwrap());
        let t = Duration::from_secs(20);
        let same = measure_pair(a, a, 5, 1, timer_overhead(), t).unwrap_err();
        assert!(same.to_string().contains("two different CPUs"), "{same}");
        if a == b {
            return; // a single CPU has no pair to measure
        }
        let c = measure_pair(a, b, 5, 1, timer_overhead(), t).unwrap();
        assert!(c.rtt.median > 0.0);
        assert!(c.send.median >= 0.0 && c.receive.median >= 0.0);
    }

    #[test]
    fn sweep_fills_every_off_diagonal_entry() {
        let cpus = crate::affinity::allowed_cpus();
        let mut cfg = ProbeConfig::quick(cpus.clone());
        cfg.reps = 4;
        cfg.warmup = 1;
        let r = probe(&cfg).unwrap();
        let n = cpus.len();
        assert_eq!(r.pairs, n * (n - 1));
        assert_eq!(r.measured, r.pairs);
        for i in 0..n {
            assert_eq!(r.rtt[i][i], 0.0);
            for j in 0..n {
                if i != j {
                    assert!(r.rtt[i][j] > 0.0);
                }
            }
        }
        assert!(r.notes[0].contains("queuepair"));
    }

    #[test]
    fn time_limit_fills_the_pairs_not_reached() {
        let cpus = crate::affinity::allowed_cpus();
        if cpus.len() < 2 {
            return; // one CPU: a single pair class with nothing to fill
        }
        let mut cfg = ProbeConfig::quick(cpus[..2].to_vec());
        cfg.reps = 3;
        cfg.time_limit = Some(Duration::from_nanos(1));
        let r = probe(&cfg).unwrap();
        assert_eq!(r.measured, 1);
        assert_eq!(r.pairs, 2);
        assert!(
            r.notes
                .iter()
                .any(|n| n.contains("time limit reached after 1 of 2")),
            "{:?}",
            r.notes
        );
        // The pair not reached gets the measured one's figures (same class).
        assert_eq!(r.rtt[0][1], r.rtt[1][0]);
        assert!(r.rtt[1][0] > 0.0);
    }

    #[test]
    fn refuses_a_cpu_it_may_not_use() {
        let e = probe(&ProbeConfig::quick(vec![100_000]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("CPU 100000"), "{e}");
    }
}
