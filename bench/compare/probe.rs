//! The figures `scripts/bench-compare.sh` compares between two builds of smelt.
//!
//! Built once per revision against that revision's library crates (the script writes
//! a Cargo.toml with path dependencies into the revision's tree), so one source must
//! compile against every revision it is used with: it touches only API that has been
//! stable since `84cb409` (queuepairs, `Group::run` and the word collectives), and the
//! newer parts behind features the script turns on when the revision has them:
//!
//! * `from_raw`: `Tree::from_raw` (trees of bare numbers; before, `Tree::new` took them);
//! * `process`: `smelt_runtime::process` (members as processes) with `Rank`;
//! * `group_job`: `process::GroupJob` (the job of a group's processes; before, `process::Job`);
//! * `am`: `smelt_am` (active messages between threads).
//!
//! Output: one line per figure, `NAME<TAB>NS` (a median, nanoseconds, lower is better),
//! `NAME<TAB>missing<TAB>WHY` (this build cannot measure it) or `NAME<TAB>FAILED<TAB>WHY`.
//! Exit status 0 even when a figure failed (the script reports it); 2 on bad arguments.
//!
//! Usage: `probe [--scale F] [--reps N] [--figures a,b,...] [--cpus A,B] [--list]`
//! (default CPUs: the first two this process may use).

use std::time::Instant;

type Res<T> = Result<T, String>;

/// Every figure, in the order they are measured.
const FIGURES: &[&str] = &[
    "qp_latency",
    "qp_stream",
    "broadcast_threads",
    "reduce_threads",
    "allreduce_threads",
    "barrier_threads",
    "broadcast_processes",
    "reduce_processes",
    "allreduce_processes",
    "barrier_processes",
    "am_rtt_threads",
    "am_msg_threads",
];

struct Opts {
    /// Multiplies every loop count.
    scale: f64,
    /// Timed repetitions per figure (the median is printed).
    reps: usize,
    cpus: (u32, u32),
    /// `--wait`: the collectives' wait policy (`None`: the build's default choice).
    wait: Option<smelt_transport::WaitPolicy>,
}

/// The group configuration of the collectives' figures: the default, with `--wait`'s
/// policy if one was given (so that two builds that choose differently by default
/// can be compared at one policy).
fn group_config(o: &Opts) -> smelt_runtime::GroupConfig {
    #[allow(unused_mut)]
    let mut cfg = smelt_runtime::GroupConfig::default();
    if o.wait.is_some() {
        #[cfg(feature = "link_config")]
        {
            cfg.link.wait = o.wait;
        }
        #[cfg(not(feature = "link_config"))]
        {
            cfg.wait = o.wait;
        }
    }
    cfg
}

impl Opts {
    fn n(&self, base: usize) -> usize {
        ((base as f64 * self.scale) as usize).max(1)
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

fn pin(cpu: u32) {
    #[cfg(feature = "pin_cpu_id")]
    let cpu = smelt_runtime::CpuId(cpu);
    let _ = smelt_transport::pin_current_thread(cpu);
}

/// One-way latency: half a round trip of one word over a queuepair.
fn qp_latency(o: &Opts) -> Res<f64> {
    let n = o.n(200_000);
    let (mut a, mut b) = smelt_transport::queuepair(64);
    let (ca, cb) = o.cpus;
    let reps = o.reps;
    std::thread::scope(|s| {
        s.spawn(move || {
            pin(cb);
            for _ in 0..(reps + 1) * n {
                let w = b.rx.recv_word().expect("echo recv");
                b.tx.send_word(w).expect("echo send");
            }
        });
        pin(ca);
        let mut out = Vec::new();
        for r in 0..=reps {
            let t = Instant::now();
            for i in 0..n {
                a.tx.send_word(i as u64).map_err(|e| e.to_string())?;
                a.rx.recv_word().map_err(|e| e.to_string())?;
            }
            if r > 0 {
                out.push(t.elapsed().as_nanos() as f64 / (2 * n) as f64);
            }
        }
        Ok(median(out))
    })
}

/// Streaming: ns per word message, one producer, one consumer, timed by the
/// consumer from the first message to the last of a repetition.
fn qp_stream(o: &Opts) -> Res<f64> {
    let n = o.n(1_000_000);
    let (mut a, mut b) = smelt_transport::queuepair(64);
    let (ca, cb) = o.cpus;
    let reps = o.reps;
    std::thread::scope(|s| {
        s.spawn(move || {
            pin(ca);
            for r in 0..=reps {
                // Start together: wait for the consumer's go.
                let _ = a.rx.recv_word();
                for i in 0..n {
                    a.tx.send_word((r * n + i) as u64).expect("stream send");
                }
            }
        });
        pin(cb);
        let mut out = Vec::new();
        for r in 0..=reps {
            b.tx.send_word(0).map_err(|e| e.to_string())?;
            let t = Instant::now();
            for _ in 0..n {
                b.rx.recv_word().map_err(|e| e.to_string())?;
            }
            if r > 0 {
                out.push(t.elapsed().as_nanos() as f64 / n as f64);
            }
        }
        Ok(median(out))
    })
}

#[cfg(feature = "from_raw")]
fn pair_tree(a: u32, b: u32) -> Res<smelt_tree::Tree> {
    smelt_tree::Tree::from_raw(vec![a, b], 0, vec![vec![1], vec![]]).map_err(|e| e.to_string())
}

#[cfg(not(feature = "from_raw"))]
fn pair_tree(a: u32, b: u32) -> Res<smelt_tree::Tree> {
    smelt_tree::Tree::new(vec![a, b], 0, vec![vec![1], vec![]]).map_err(|e| e.to_string())
}

/// Loops per repetition of each collective (scaled by `--scale`).
fn coll_n(op: &str) -> usize {
    match op {
        "barrier" | "allreduce" => 100_000,
        _ => 200_000,
    }
}

/// The back-to-back loop of one member: `reps + 1` repetitions (the first is warm-up)
/// of `n` calls of `op`, each repetition started by a barrier; ns per call.
macro_rules! member_loop {
    ($m:expr, $op:expr, $n:expr, $reps:expr) => {{
        let m = $m;
        let mut out: Vec<f64> = Vec::new();
        let mut err: Option<String> = None;
        for r in 0..=$reps {
            if let Err(e) = m.barrier() {
                err = Some(e.to_string());
                break;
            }
            let t = Instant::now();
            // The operation is chosen outside the timed loops.
            let res = match $op {
                "broadcast" => (0..$n).try_for_each(|i| m.broadcast_word(i as u64).map(|_| ())),
                "reduce" => (0..$n).try_for_each(|i| {
                    m.reduce(i as u64, |a: u64, b: u64| a.wrapping_add(b)).map(|_| ())
                }),
                "allreduce" => (0..$n).try_for_each(|i| {
                    m.allreduce(i as u64, |a: u64, b: u64| a.wrapping_add(b)).map(|_| ())
                }),
                _ => (0..$n).try_for_each(|_| m.barrier()),
            };
            if let Err(e) = res {
                err = Some(e.to_string());
                break;
            }
            if r > 0 {
                out.push(t.elapsed().as_nanos() as f64 / $n as f64);
            }
        }
        match err {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }};
}

/// Per repetition the slowest member's time; the median over repetitions.
fn slowest(per_member: Vec<Vec<f64>>) -> Res<f64> {
    let reps = per_member.iter().map(|v| v.len()).min().unwrap_or(0);
    if reps == 0 {
        return Err("no repetition measured".into());
    }
    let worst: Vec<f64> = (0..reps)
        .map(|r| per_member.iter().map(|v| v[r]).fold(0.0, f64::max))
        .collect();
    Ok(median(worst))
}

fn coll_threads(op: &str, o: &Opts) -> Res<f64> {
    let tree = pair_tree(o.cpus.0, o.cpus.1)?;
    let n = o.n(coll_n(op));
    let reps = o.reps;
    let g = smelt_runtime::Group::with_config(&[tree], &group_config(o))
        .map_err(|e| e.to_string())?;
    let r = g
        .run(|m| -> Result<Vec<f64>, String> { member_loop!(m, op, n, reps) })
        .map_err(|e| e.to_string())?;
    slowest(r.into_iter().collect::<Res<Vec<_>>>()?)
}

#[cfg(feature = "process")]
fn coll_processes(op: &str, o: &Opts) -> Res<f64> {
    use smelt_runtime::Rank;
    let tree = pair_tree(o.cpus.0, o.cpus.1)?;
    let cfg = group_config(o);
    #[cfg(feature = "group_job")]
    use smelt_runtime::process::GroupJob as Job;
    #[cfg(not(feature = "group_job"))]
    use smelt_runtime::process::Job;
    let job = Job::create(&[tree], &cfg).map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let n = o.n(coll_n(op));
    let mut kids = Vec::new();
    for (r, cpu) in [o.cpus.0, o.cpus.1].into_iter().enumerate() {
        let mut c = std::process::Command::new(&exe);
        c.args([
            "--member",
            op,
            &n.to_string(),
            &o.reps.to_string(),
            &cpu.to_string(),
        ]);
        c.envs(job.env(Rank(r)));
        c.stdout(std::process::Stdio::piped());
        kids.push(c.spawn().map_err(|e| format!("starting a member: {e}"))?);
    }
    let mut per = Vec::new();
    let mut errs = Vec::new();
    for k in kids {
        let out = k.wait_with_output().map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        if !out.status.success() {
            errs.push(format!("a member failed ({}): {}", out.status, text.trim()));
            continue;
        }
        let v: Res<Vec<f64>> = text
            .split_whitespace()
            .map(|x| x.parse::<f64>().map_err(|e| e.to_string()))
            .collect();
        per.push(v?);
    }
    if !errs.is_empty() {
        return Err(errs.join("; "));
    }
    slowest(per)
}

/// The child side of [`coll_processes`]: prints the repetitions' ns per call.
#[cfg(feature = "process")]
fn member_main(args: &[String]) -> i32 {
    let (op, n, reps, cpu) = match args {
        [op, n, reps, cpu] => (
            op.as_str(),
            n.parse::<usize>().unwrap_or(1),
            reps.parse::<usize>().unwrap_or(1),
            cpu.parse::<u32>().unwrap_or(0),
        ),
        _ => {
            eprintln!("probe --member: OP N REPS CPU");
            return 2;
        }
    };
    pin(cpu);
    let mut m = match smelt_runtime::process::join_from_env() {
        Ok(m) => m,
        Err(e) => {
            println!("join: {e}");
            return 1;
        }
    };
    let r: Res<Vec<f64>> = member_loop!(&mut m, op, n, reps);
    match r {
        Ok(v) => {
            let s: Vec<String> = v.iter().map(|x| format!("{x:.3}")).collect();
            println!("{}", s.join(" "));
            0
        }
        Err(e) => {
            println!("{e}");
            1
        }
    }
}

#[cfg(feature = "am")]
mod am {
    use super::*;
    #[cfg(feature = "am_config")]
    use smelt_am::{threads, AmConfig as Config};
    #[cfg(not(feature = "am_config"))]
    use smelt_am::{threads, Config};
    use std::time::Duration;

    const PING: u8 = 1;
    const PONG: u8 = 2;
    const STOP: u8 = 3;

    #[derive(Default)]
    struct St {
        stop: bool,
    }

    /// `rtt`: one request and its reply at a time, ns per round trip; else a stream
    /// of requests (each answered), ns per request.
    pub fn measure(rtt: bool, o: &Opts) -> Res<f64> {
        let e = |e: smelt_am::AmError| e.to_string();
        let mut eps = threads(2, Config::default(), |_| St::default()).map_err(e)?;
        for ep in &mut eps {
            ep.register(PING, |_: &mut St, ctx, _| {
                let _ = ctx.reply(PONG, &[]);
            })
            .map_err(e)?;
            ep.register(PONG, |_: &mut St, _, _| {}).map_err(e)?;
            ep.register(STOP, |s: &mut St, ctx, _| {
                s.stop = true;
                let _ = ctx.reply(PONG, &[]);
            })
            .map_err(e)?;
        }
        let mut server = eps.pop().expect("two endpoints");
        let mut client = eps.pop().expect("two endpoints");
        let n = o.n(if rtt { 100_000 } else { 400_000 });
        let reps = o.reps;
        let (ca, cb) = o.cpus;
        let t = Duration::from_secs(60);
        std::thread::scope(|s| {
            s.spawn(move || {
                pin(cb);
                let _ = server.run_until(t, |st| st.stop);
            });
            pin(ca);
            let mut out = Vec::new();
            let run = |client: &mut smelt_am::Endpoint<St>| -> Result<(), smelt_am::AmError> {
                for i in 0..n {
                    client.request(1, PING, &[i as u64])?;
                    if rtt {
                        while client.outstanding(1) > 0 {
                            client.poll()?;
                        }
                    }
                }
                client.quiesce(t)
            };
            let mut res = Ok(());
            for r in 0..=reps {
                let start = Instant::now();
                res = run(&mut client);
                if res.is_err() {
                    break;
                }
                if r > 0 {
                    out.push(start.elapsed().as_nanos() as f64 / n as f64);
                }
            }
            let _ = client.request(1, STOP, &[]);
            let _ = client.quiesce(t);
            res.map_err(e)?;
            Ok(median(out))
        })
    }
}

fn measure(name: &str, o: &Opts) -> Res<Option<f64>> {
    let coll = |mode: &str| name.strip_suffix(mode).map(|op| op.to_string());
    if name == "qp_latency" {
        return qp_latency(o).map(Some);
    }
    if name == "qp_stream" {
        return qp_stream(o).map(Some);
    }
    if let Some(op) = coll("_threads").filter(|op| !op.starts_with("am_")) {
        return coll_threads(&op, o).map(Some);
    }
    if let Some(op) = coll("_processes") {
        #[cfg(feature = "process")]
        return coll_processes(&op, o).map(Some);
        #[cfg(not(feature = "process"))]
        {
            let _ = op;
            return Ok(None);
        }
    }
    if name.starts_with("am_") {
        #[cfg(feature = "am")]
        return am::measure(name == "am_rtt_threads", o).map(Some);
        #[cfg(not(feature = "am"))]
        return Ok(None);
    }
    Err(format!("unknown figure {name}"))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--member") {
        #[cfg(feature = "process")]
        std::process::exit(member_main(&args[1..]));
        #[cfg(not(feature = "process"))]
        std::process::exit(2);
    }
    let mut o = Opts {
        scale: 1.0,
        reps: 5,
        cpus: (0, 1),
        wait: None,
    };
    let mut figures: Vec<String> = FIGURES.iter().map(|s| s.to_string()).collect();
    let mut cpus_arg: Option<(u32, u32)> = None;
    let mut it = args.iter();
    let bad = |m: String| -> ! {
        eprintln!("probe: {m}");
        std::process::exit(2)
    };
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .cloned()
                .unwrap_or_else(|| bad(format!("{a} needs a value")))
        };
        match a.as_str() {
            "--scale" => {
                o.scale = val()
                    .parse()
                    .ok()
                    .filter(|s: &f64| *s > 0.0 && *s <= 1000.0)
                    .unwrap_or_else(|| bad("--scale takes a number in (0, 1000]".into()))
            }
            "--reps" => {
                o.reps = val()
                    .parse()
                    .ok()
                    .filter(|r| (1..=1000).contains(r))
                    .unwrap_or_else(|| bad("--reps takes 1 to 1000".into()))
            }
            "--figures" => {
                figures = val().split(',').map(|s| s.trim().to_string()).collect();
                for f in &figures {
                    if !FIGURES.contains(&f.as_str()) {
                        bad(format!("unknown figure {f} (known: {})", FIGURES.join(",")));
                    }
                }
            }
            "--cpus" => {
                let v = val();
                let p: Vec<u32> = v.split(',').filter_map(|x| x.trim().parse().ok()).collect();
                match p[..] {
                    [a, b] => cpus_arg = Some((a, b)),
                    _ => bad(format!("--cpus takes two CPU numbers A,B, not {v}")),
                }
            }
            "--wait" => {
                o.wait = match val().as_str() {
                    "dedicated" => Some(smelt_transport::WaitPolicy::DEDICATED),
                    "oversubscribed" => Some(smelt_transport::WaitPolicy::OVERSUBSCRIBED),
                    "default" => None,
                    w => bad(format!(
                        "--wait takes dedicated, oversubscribed or default, not {w}"
                    )),
                }
            }
            "--list" => {
                for f in FIGURES {
                    println!("{f}");
                }
                return;
            }
            other => bad(format!("unknown argument {other}")),
        }
    }
    let cpus = smelt_transport::allowed_cpus().unwrap_or_default();
    if let Some(c) = cpus_arg {
        o.cpus = c;
    } else if cpus.len() >= 2 {
        o.cpus = (cpus[0], cpus[1]);
    } else if let Some(&c) = cpus.first() {
        o.cpus = (c, c);
    }
    for f in &figures {
        match measure(f, &o) {
            Ok(Some(ns)) if ns.is_finite() && ns > 0.0 => println!("{f}\t{ns:.2}"),
            Ok(Some(ns)) => println!("{f}\tFAILED\tnot a time: {ns}"),
            Ok(None) => println!("{f}\tmissing\tnot in this build"),
            Err(e) => println!("{f}\tFAILED\t{}", e.replace(['\t', '\n'], " ")),
        }
    }
}
