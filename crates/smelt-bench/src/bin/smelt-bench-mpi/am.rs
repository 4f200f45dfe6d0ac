//! Active messages across MPI ranks: a correctness flood, the LogP parameters of a pair
//! of ranks, and the distributed histogram. Run under `mpirun`:
//!
//! ```text
//! mpirun -np 4 -x SMELT_RANKS_PER_NODE=2 smelt-bench-mpi am all
//! ```
//!
//! Commands: `flood`, `logp`, `histogram`, `all` (the three in turn; the default).
//! Nodes come from the environment (`SMELT_AM_TRANSPORT=mpi`: every rank its own node;
//! `SMELT_RANKS_PER_NODE=k`: emulated nodes of k ranks; else the ranks that share
//! memory). Options:
//!
//! * `--count N`: requests each rank sends each other rank in the flood (default 2000)
//! * `--capacity C`: slots per shared-memory link (default 2 in the flood)
//! * `--in-flight W`: MPI sends in flight per endpoint (default 64; 2 in the flood
//!   unless given)
//! * `--bulk-every K`: every K-th flood request carries a data block (default 16)
//! * `--pair A,B`: the ranks LogP is measured between (default 0 and the last)
//! * `--rounds N`, `--stream N`, `--samples N`, `--bulk BYTES`: LogP's sizes
//!   (default: `logp::Opts::quick()`)
//! * `--updates N`, `--bins N`, `--per-message K`: the histogram (defaults 20000,
//!   65536, 4)
//! * `--poll POLICY`: when endpoints with both shared memory and MPI poll MPI
//!   (`always`, `every:N`, `adaptive`, `adaptive:MAX:MIN`; default adaptive)
//! * `--timeout SECS`: longest wait of any step (default 60)
//!
//! Each part prints one line at rank 0: `flood: PASS ...`/`flood: FAIL ...`, the LogP
//! figures as one JSON object (`{"am_logp": ...}`), `histogram: PASS ...`/`FAIL`. The
//! exit status is 1 if any part failed at any rank, 2 for bad arguments.

use crate::job::Job;
use smelt_am::mpi::{self as am_mpi, Nodes, Options};
use smelt_am::{AmConfig, AmError, Endpoint, PollPolicy, Reason, Returned};
use smelt_bench::am::{histogram, logp};
use smelt_mesh::world::WorldLink;
use std::process::ExitCode;
use std::time::Duration;

const REQ: u8 = 1;
const REP: u8 = 2;
/// A handler index nobody registers.
const NOBODY: u8 = 77;
/// First argument of the wrong-tag requests.
const WRONG: u64 = u64::MAX;

#[derive(Debug, Clone)]
struct Args {
    cmd: String,
    count: u64,
    capacity: Option<usize>,
    in_flight: Option<usize>,
    bulk_every: u64,
    pair: Option<(usize, usize)>,
    rounds: Option<usize>,
    stream: Option<usize>,
    samples: Option<usize>,
    bulk: Option<usize>,
    updates: u64,
    bins: u64,
    per_message: usize,
    timeout: Duration,
    poll: PollPolicy,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        cmd: "all".into(),
        count: 2000,
        capacity: None,
        in_flight: None,
        bulk_every: 16,
        pair: None,
        rounds: None,
        stream: None,
        samples: None,
        bulk: None,
        updates: 20_000,
        bins: 1 << 16,
        per_message: 4,
        timeout: Duration::from_secs(60),
        poll: PollPolicy::default(),
    };
    let mut it = std::env::args().skip(2);
    let mut cmd_seen = false;
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        let num = |name: &str, v: String| {
            v.parse::<u64>()
                .map_err(|_| format!("{name} {v:?} is not a count"))
        };
        match arg.as_str() {
            "flood" | "logp" | "histogram" | "all" if !cmd_seen => {
                a.cmd = arg.clone();
                cmd_seen = true;
            }
            "--count" => a.count = num("--count", value("--count")?)?,
            "--capacity" => a.capacity = Some(num("--capacity", value("--capacity")?)? as usize),
            "--in-flight" => {
                a.in_flight = Some(num("--in-flight", value("--in-flight")?)? as usize)
            }
            "--bulk-every" => a.bulk_every = num("--bulk-every", value("--bulk-every")?)?,
            "--pair" => {
                let v = value("--pair")?;
                let (x, y) = v
                    .split_once(',')
                    .ok_or_else(|| format!("--pair {v:?}: two ranks A,B"))?;
                a.pair = Some((
                    num("--pair", x.to_string())? as usize,
                    num("--pair", y.to_string())? as usize,
                ));
            }
            "--rounds" => a.rounds = Some(num("--rounds", value("--rounds")?)? as usize),
            "--stream" => a.stream = Some(num("--stream", value("--stream")?)? as usize),
            "--samples" => a.samples = Some(num("--samples", value("--samples")?)? as usize),
            "--bulk" => a.bulk = Some(num("--bulk", value("--bulk")?)? as usize),
            "--updates" => a.updates = num("--updates", value("--updates")?)?,
            "--bins" => a.bins = num("--bins", value("--bins")?)?,
            "--per-message" => {
                a.per_message = num("--per-message", value("--per-message")?)? as usize
            }
            "--timeout" => {
                a.timeout = Duration::from_secs(num("--timeout", value("--timeout")?)?.max(1))
            }
            "--poll" => {
                a.poll = value("--poll")?
                    .parse()
                    .map_err(|e: AmError| e.to_string())?
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(a)
}

const USAGE: &str = "usage: smelt-bench-mpi am [flood|logp|histogram|all] [--count N] [--capacity C] \
[--in-flight W] [--bulk-every K] [--pair A,B] [--rounds N] [--stream N] [--samples N] [--bulk BYTES] \
[--updates N] [--bins N] [--per-message K] [--poll always|every:N|adaptive[:MAX:MIN]] [--timeout SECS]   (run under mpirun)";

pub fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("smelt-bench-mpi am: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let opts = match Options::from_env() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("smelt-bench-mpi am: {e}");
            return ExitCode::from(2);
        }
    };
    let mpi = match Job::init(opts.nodes, args.timeout) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("smelt-bench-mpi am: setting MPI up: {e}");
            return ExitCode::from(1);
        }
    };
    if mpi.rank() == 0 {
        println!(
            "smelt-bench-mpi am: {} ({})",
            mpi.describe(),
            transport(&mpi)
        );
    }
    let mut ok = true;
    if matches!(args.cmd.as_str(), "flood" | "all") {
        ok &= part(&mpi, "flood", flood(&mpi, &args));
    }
    if matches!(args.cmd.as_str(), "logp" | "all") {
        ok &= part(&mpi, "logp", run_logp(&mpi, &args));
    }
    if matches!(args.cmd.as_str(), "histogram" | "all") {
        ok &= part(&mpi, "histogram", run_histogram(&mpi, &args));
    }
    mpi.finalize();
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Agrees on a part's verdict across the ranks; rank 0 prints it.
fn part(mpi: &Job, name: &str, r: Result<String, String>) -> bool {
    let mine = match &r {
        Ok(_) => true,
        Err(e) => {
            eprintln!("smelt-bench-mpi am: rank {}: {name}: {e}", mpi.rank());
            false
        }
    };
    let all = mpi.all(mine).unwrap_or(false);
    if mpi.rank() == 0 {
        match (&r, all) {
            (Ok(line), true) => println!("{name}: PASS {line}"),
            (Ok(_), false) => println!("{name}: FAIL at another rank (see its errors)"),
            (Err(e), _) => println!("{name}: FAIL {e}"),
        }
    }
    all
}

fn transport(mpi: &Job) -> String {
    match mpi.grouping() {
        Nodes::MpiOnly => "mpi".into(),
        Nodes::Emulated(k) => format!("emulated-nodes:{k}"),
        Nodes::Shared if mpi.nodes() == 1 => "shm".into(),
        Nodes::Shared => "shm+mpi".into(),
    }
}

fn mix(a: usize, b: usize, k: u64) -> u64 {
    smelt_ids::rng::finalize(
        (a as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ (b as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9)
            ^ k.wrapping_mul(0x94D0_49BB_1331_11EB),
    )
}

fn data_len(k: u64) -> usize {
    100 + (k as usize * 37) % 3000
}

fn data_byte(from: usize, k: u64, i: usize) -> u8 {
    (from as u64 ^ k.wrapping_mul(31) ^ i as u64) as u8
}

/// The flood's state at one rank.
#[derive(Debug, Default)]
struct Flood {
    me: usize,
    /// Per sender: the next request number expected (order check) and requests got.
    next_from: Vec<u64>,
    got: Vec<u64>,
    /// Per destination: the next reply expected and replies got.
    next_reply: Vec<u64>,
    replies: Vec<u64>,
    bulk_got: u64,
    returned: Vec<Returned>,
    errors: Vec<String>,
}

impl Flood {
    fn error(&mut self, e: String) {
        if self.errors.len() < 10 {
            self.errors.push(e);
        }
    }

    /// Checks message `k` of a sender's numbered requests (or replies): its checksum
    /// against `want`, and that it is the next one from `from`.
    fn check(&mut self, what: &str, from: usize, args: &[u64], want: u64, reply: bool) {
        let (k, sum) = (
            args.first().copied().unwrap_or(0),
            args.get(1).copied().unwrap_or(0),
        );
        if args.len() != 2 || sum != want {
            self.error(format!("{what} {k} from {from}: bad checksum"));
        }
        let next = if reply {
            &mut self.next_reply[from]
        } else {
            &mut self.next_from[from]
        };
        let expected = std::mem::replace(next, k + 1);
        if expected != k {
            self.error(format!(
                "{what} {k} from {from} out of order (expected {expected})"
            ));
        }
    }
}

fn register_flood(ep: &mut Endpoint<Flood, WorldLink>) -> Result<(), AmError> {
    ep.register(REQ, |s: &mut Flood, ctx, m| {
        let (from, me) = (m.from, s.me);
        let k = m.args.first().copied().unwrap_or(0);
        s.check("request", from, m.args, mix(from, me, k), false);
        s.got[from] += 1;
        if !m.data.is_empty() {
            s.bulk_got += 1;
            let good = m.data.len() == data_len(k)
                && m.data
                    .iter()
                    .enumerate()
                    .all(|(i, &b)| b == data_byte(from, k, i));
            if !good {
                s.error(format!("request {k} from {from}: bad data block"));
            }
        }
        if let Err(e) = ctx.reply(REP, &[k, mix(me, from, k)]) {
            s.error(format!("reply to {from}: {e}"));
        }
    })?;
    ep.register(REP, |s: &mut Flood, _, m| {
        let (from, me) = (m.from, s.me);
        let k = m.args.first().copied().unwrap_or(0);
        // The responder's checksum: mix(responder, requester, k).
        s.check("reply", from, m.args, mix(from, me, k), true);
        s.replies[from] += 1;
    })?;
    ep.on_returned(|s: &mut Flood, r| s.returned.push(r.clone()));
    Ok(())
}

/// The endpoint's configuration from the arguments: `--capacity` (else `capacity`)
/// messages per queue, `--timeout`, `--poll`.
fn am_config(a: &Args, capacity: usize) -> AmConfig {
    AmConfig {
        link: AmConfig::default()
            .link
            .capacity(a.capacity.unwrap_or(capacity))
            .timeout(a.timeout),
        poll: a.poll,
        ..AmConfig::default()
    }
}

/// All to all requests with checksums through tiny queues, then a request with a
/// wrong tag and one to an unknown handler to every other rank.
fn flood(mpi: &Job, a: &Args) -> Result<String, String> {
    let n = mpi.size();
    let me = mpi.rank();
    let cfg = am_config(a, 2);
    let state = Flood {
        me,
        next_from: vec![0; n],
        got: vec![0; n],
        next_reply: vec![0; n],
        replies: vec![0; n],
        ..Flood::default()
    };
    let mut ep = endpoint_with_window(mpi, state, cfg, a.in_flight.or(Some(2)))?;
    register_flood(&mut ep).map_err(|e| e.to_string())?;
    let others: Vec<usize> = (1..n).map(|i| (me + i) % n).collect();
    let bulk = |k: u64| a.bulk_every > 0 && k % a.bulk_every == a.bulk_every - 1;
    let mut data = Vec::new();
    let r = (|| -> Result<(), AmError> {
        for k in 0..a.count {
            for &d in &others {
                let args = [k, mix(me, d, k)];
                if bulk(k) {
                    data.clear();
                    data.extend((0..data_len(k)).map(|i| data_byte(me, k, i)));
                    ep.request_bulk(d, REQ, &args, &data)?;
                } else {
                    ep.request(d, REQ, &args)?;
                }
            }
        }
        for &d in &others {
            let good = ep.dest_tag(d).unwrap_or(0);
            ep.set_dest_tag(d, good ^ 0x5eed_0bad_f00d)?;
            ep.request(d, REQ, &[WRONG, 0])?;
            ep.set_dest_tag(d, good)?;
            ep.request(d, NOBODY, &[WRONG])?;
        }
        am_mpi::finish(mpi.world(), &mut ep, a.timeout)
    })();
    if let Err(e) = r {
        return Err(format!("{e}"));
    }
    let s = ep.state();
    let mut errors = s.errors.clone();
    let bulk_each = (0..a.count).filter(|&k| bulk(k)).count() as u64;
    for &d in &others {
        if s.got[d] != a.count {
            errors.push(format!(
                "{} requests from rank {d}, not {}",
                s.got[d], a.count
            ));
        }
        if s.replies[d] != a.count {
            errors.push(format!(
                "{} replies from rank {d}, not {}",
                s.replies[d], a.count
            ));
        }
        let back = |reason: Reason, handler: u8| {
            s.returned
                .iter()
                .filter(|r| {
                    r.by == d
                        && r.reason == reason
                        && r.handler == handler
                        && r.was_request
                        && r.args.first() == Some(&WRONG)
                })
                .count()
        };
        if back(Reason::WrongTag, REQ) != 1 {
            errors.push(format!(
                "the request with a wrong tag to rank {d} came back {} times, not once",
                back(Reason::WrongTag, REQ)
            ));
        }
        if back(Reason::UnknownHandler, NOBODY) != 1 {
            errors.push(format!(
                "the request to an unknown handler of rank {d} came back {} times, not once",
                back(Reason::UnknownHandler, NOBODY)
            ));
        }
    }
    if s.returned.len() != 2 * others.len() {
        errors.push(format!(
            "{} messages came back, not {}: {:?}",
            s.returned.len(),
            2 * others.len(),
            s.returned
        ));
    }
    let want_bulk = bulk_each * others.len() as u64;
    if s.bulk_got != want_bulk {
        errors.push(format!("{} bulk requests, not {want_bulk}", s.bulk_got));
    }
    if !errors.is_empty() {
        return Err(errors.join("; "));
    }
    let st = ep.stats();
    let remote = others.iter().filter(|&&d| ep.is_remote(d)).count();
    Ok(format!(
        "ranks={n} nodes={} transport={} capacity={} requests_per_pair={} bulk_per_pair={bulk_each} remote_peers_of_rank0={remote} returned_per_rank={} handled_at_rank0={} remote_polls_at_rank0={}",
        mpi.nodes(),
        transport(mpi),
        a.capacity.unwrap_or(2),
        a.count,
        2 * others.len(),
        st.handled,
        st.remote_polls,
    ))
}

/// An endpoint whose MPI channel keeps at most `window` sends in flight.
fn endpoint_with_window<S>(
    mpi: &Job,
    state: S,
    cfg: AmConfig,
    window: Option<usize>,
) -> Result<Endpoint<S, WorldLink>, String> {
    match window {
        Some(w) => am_mpi::endpoint_with(mpi.world(), state, cfg, w),
        None => Endpoint::from_world(mpi.world(), state, cfg),
    }
    .map_err(|e| format!("making the endpoint: {e}"))
}

fn json_num(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.3}")
    } else {
        "null".into()
    }
}

fn run_logp(mpi: &Job, a: &Args) -> Result<String, String> {
    let n = mpi.size();
    let me = mpi.rank();
    let (x, y) = a.pair.unwrap_or((0, n.saturating_sub(1)));
    if n < 2 {
        return Err("LogP needs 2 ranks".into());
    }
    if x >= n || y >= n || x == y {
        return Err(format!("--pair {x},{y}: two different ranks below {n}"));
    }
    let cfg = am_config(a, AmConfig::default().link.capacity);
    let mut ep = endpoint_with_window(mpi, logp::State::default(), cfg, a.in_flight)?;
    logp::register(&mut ep).map_err(|e| e.to_string())?;
    let q = logp::Opts::quick();
    let o = logp::Opts {
        rounds: a.rounds.unwrap_or(q.rounds),
        stream: a.stream.unwrap_or(q.stream),
        samples: a.samples.unwrap_or(q.samples),
        bulk: a.bulk.unwrap_or(q.bulk),
        timeout: a.timeout,
        ..q
    };
    let mut line = String::new();
    let r = if me == x {
        logp::measure(&mut ep, y, &o).map(|p| {
            line = format!(
                "{{\"am_logp\":{{\"transport\":\"{}\",\"ranks\":{n},\"nodes\":{},\"pair\":[{x},{y}],\"remote\":{},\"rtt_ns\":{},\"l_ns\":{},\"o_s_ns\":{},\"o_r_ns\":{},\"g_ns\":{},\"big_g_ns_per_byte\":{},\"bandwidth_mb_s\":{},\"half_power_bytes\":{}}}}}",
                transport(mpi),
                mpi.nodes(),
                ep.is_remote(y),
                json_num(p.rtt),
                json_num(p.l),
                json_num(p.o_s),
                json_num(p.o_r),
                json_num(p.g),
                json_num(p.big_g),
                json_num(p.bandwidth_mb_s()),
                json_num(p.half_power_bytes()),
            );
        })
    } else if me == y {
        logp::respond(&mut ep, a.timeout)
    } else {
        Ok(())
    };
    let r = r.and_then(|()| am_mpi::finish(mpi.world(), &mut ep, a.timeout));
    r.map_err(|e| e.to_string())?;
    // The measurer's line goes to rank 0 through its output: print it here.
    if !line.is_empty() {
        println!("{line}");
    }
    Ok(format!("pair={x},{y}"))
}

fn run_histogram(mpi: &Job, a: &Args) -> Result<String, String> {
    let n = mpi.size();
    let me = mpi.rank();
    let o = histogram::Opts {
        bins: a.bins,
        updates: a.updates,
        per_message: a.per_message,
        seed: 7,
        timeout: a.timeout,
    };
    let cfg = am_config(a, AmConfig::default().link.capacity);
    let mut ep = endpoint_with_window(mpi, histogram::state(&o, n, me), cfg, a.in_flight)?;
    histogram::register(&mut ep).map_err(|e| e.to_string())?;
    let rep = histogram::run(&mut ep, &o).map_err(|e| e.to_string())?;
    let _ = am_mpi::finish(mpi.world(), &mut ep, a.timeout);
    drop(ep);
    // Every increment lands in exactly one block: the blocks' sums add up to all the
    // updates.
    let sums = mpi.gather(rep.block_sum).map_err(|e| e.to_string())?;
    let total: u64 = sums.iter().sum();
    let want = n as u64 * a.updates;
    if !rep.ok {
        return Err(format!(
            "rank {me}'s block does not hold what the updates put in it (sum {})",
            rep.block_sum
        ));
    }
    if total != want {
        return Err(format!(
            "the blocks hold {total} increments, not {want} ({sums:?})"
        ));
    }
    Ok(format!(
        "ranks={n} nodes={} transport={} bins={} updates_per_rank={} checksum={total} expected={want} seconds_at_rank0={:.3}",
        mpi.nodes(),
        transport(mpi),
        a.bins,
        a.updates,
        rep.seconds
    ))
}
