//! `smelt bench am`: the LogP parameters of active messages (the multi-protocol
//! Active Messages paper's table) for each transport, next to the peers a user would
//! compare with, in one run:
//!
//! * between two threads (queuepairs), and between two processes (queuepairs in
//!   shared memory, the peer a `smelt am-member` child);
//! * over MPI, under `mpirun`, with the `smelt-bench-mpi am` program (built with
//!   `cargo build --release -p smelt-bench --features mpi --bin smelt-bench-mpi`): every destination over MPI,
//!   the peer on another emulated node (multi-protocol, the network side), and the
//!   peer on the same node while the endpoint also polls the network (multi-protocol,
//!   the shared-memory side), with the polling policies compared;
//! * the smelt queuepair round trip and `crossbeam-channel`'s message rate, between
//!   the same two CPUs;
//! * UCX (`ucx_perftest`, `smelt_peers::ucx`): `ucp_am_lat`, `ucp_am_bw` and `ucp_get`
//!   between two processes pinned to the same two CPUs over shared memory, against
//!   smelt's processes row (one-way latency, message rate) and a global-array get of
//!   8 bytes inside a node (`smelt_bench::global`).

use super::{BenchReport, Common};
use crate::am::logp::{self, LogP, Opts};
use anyhow::{Context, Result};
use serde::Serialize;
use smelt_am::{threads, AmConfig, Endpoint};
use smelt_mesh::launch::Members;
use smelt_mesh::world::WorldBuilder;
use smelt_mesh::{Rank, World};
use smelt_probe::figure::Status;
use smelt_probe::Budget;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The responder of a LogP measurement in a member process: the body of the hidden
/// `smelt am-member` that [`measure`] starts (the current executable must answer
/// that subcommand), waiting at most `timeout_s` seconds for the measurer. The
/// launcher pins it (`smelt_mesh::launch::Members`).
pub fn member(timeout_s: f64) -> Result<()> {
    let world = World::from_env()?;
    let mut ep = Endpoint::from_world(&world, logp::State::default(), AmConfig::default())?;
    logp::register(&mut ep)?;
    logp::respond(&mut ep, Duration::from_secs_f64(timeout_s))?;
    Ok(())
}

/// LogP figures in a report, ns (G: ns per byte).
#[derive(Serialize, Clone, Copy)]
struct LogPRow {
    l_ns: f64,
    o_s_ns: f64,
    o_r_ns: f64,
    g_ns: f64,
    big_g_ns_per_byte: f64,
    bandwidth_mb_s: f64,
    half_power_bytes: f64,
    rtt_ns: f64,
}

impl From<LogP> for LogPRow {
    fn from(p: LogP) -> Self {
        LogPRow {
            l_ns: p.l,
            o_s_ns: p.o_s,
            o_r_ns: p.o_r,
            g_ns: p.g,
            big_g_ns_per_byte: p.big_g,
            bandwidth_mb_s: p.bandwidth_mb_s(),
            half_power_bytes: p.half_power_bytes(),
            rtt_ns: p.rtt,
        }
    }
}

/// One transport's figures, or why there are none.
#[derive(Serialize)]
struct TransportRow {
    transport: String,
    /// What it is.
    about: String,
    logp: Option<LogPRow>,
    error: Option<String>,
}

/// The peers' figures.
#[derive(Serialize, Default)]
struct Peers {
    /// smelt queuepair round trip (one word each way), ns.
    queuepair_rtt_ns: Option<f64>,
    /// `crossbeam-channel` (bounded) ns per message, one sender to one receiver.
    crossbeam_ns_per_msg: Option<f64>,
    /// Interleaved rounds the two figures above are the medians of (each round also
    /// measured the threads row).
    rounds: usize,
    errors: Vec<String>,
}

/// Ratios of the run.
#[derive(Serialize, Default)]
struct Ratios {
    /// Active-message round trip between threads / queuepair round trip (target ≤ 1.25).
    am_rtt_over_queuepair_rtt: Option<f64>,
    /// Active messages per second one to one (a request and its reply count as one)
    /// / crossbeam-channel messages per second (target ≥ 1.5).
    am_rate_over_crossbeam_rate: Option<f64>,
    /// The two ratios above, each round (they are the medians of these).
    rounds: Interleaved,
    /// Round trip between emulated nodes over MPI / between threads (target ≥ 7).
    mpi_nodes_rtt_over_threads_rtt: Option<f64>,
    /// Round trip inside a node with the network also polled (adaptively) / without
    /// (target ≤ 1.12).
    multi_protocol_shm_rtt_over_shm_only_rtt: Option<f64>,
    /// The same with the network polled at every poll, and every 8th.
    always_poll_shm_rtt_over_shm_only_rtt: Option<f64>,
    every8_poll_shm_rtt_over_shm_only_rtt: Option<f64>,
}

/// UCX's rows, and smelt against them.
#[derive(Serialize, Default)]
struct UcxSection {
    /// How the two `ucx_perftest` processes ran.
    placement: String,
    /// `ucx_am_lat` (one-way ns, 50th percentile), `ucx_am_bw` (ns per message of the
    /// overall rate), `ucx_get` (ns per get, 50th percentile): each the median over
    /// the runs, or why it is missing.
    rows: Vec<smelt_peers::PeerResult>,
    /// The final line of every run, per test, as `ucx_perftest` printed it (µs,
    /// MB/s, msg/s): the averages next to the 50th percentiles show how heavy the
    /// tail was (`ucp_get`'s 50th percentile comes out in steps of 10 ns).
    runs: Vec<serde_json::Value>,
    /// smelt against UCX, each with its target.
    comparisons: Vec<Comparison>,
}

/// One figure of smelt against UCX's.
#[derive(Serialize)]
struct Comparison {
    name: String,
    /// smelt's figure and UCX's, in `unit`.
    smelt: Option<f64>,
    ucx: Option<f64>,
    unit: String,
    /// smelt / UCX (for rates: smelt's rate / UCX's rate).
    ratio: Option<f64>,
    /// The target on `ratio`, e.g. `≤ 1`.
    target: String,
    /// Whether the target is met (none: a figure is missing).
    met: Option<bool>,
    /// What is compared with what, and why a figure is missing.
    note: String,
}

/// The report of `smelt bench am`.
#[derive(Serialize)]
pub struct AmReport {
    tool: String,
    host: String,
    cpus: Vec<u32>,
    transports: Vec<TransportRow>,
    peers: Peers,
    ratios: Ratios,
    /// UCX as a peer.
    ucx: UcxSection,
    /// The LogP lines of the `smelt-bench-mpi am` program, as it printed them.
    mpi: Vec<serde_json::Value>,
    warnings: Vec<String>,
}

fn opts(a: &Common) -> Opts {
    let mut o = Opts::quick();
    if !a.quick {
        o.rounds *= 5;
        o.stream *= 5;
        o.bulk_count *= 4;
        o.samples = 7;
    }
    if let Some(t) = a.timeout {
        o.timeout = Duration::from_secs_f64(t);
    }
    o
}

/// LogP between two threads pinned to `cpus`.
fn between_threads(o: &Opts, cpus: (Option<u32>, Option<u32>)) -> Result<LogP> {
    let mut eps = threads(2, AmConfig::default(), |_| logp::State::default())?;
    for ep in &mut eps {
        logp::register(ep)?;
    }
    let mut b = eps.pop().expect("two");
    let mut a = eps.pop().expect("two");
    let t = o.timeout;
    std::thread::scope(|s| {
        let responder = s.spawn(move || {
            if let Some(c) = cpus.1 {
                let _ = smelt_transport::pin_current_thread(smelt_mesh::CpuId(c));
            }
            logp::respond(&mut b, t)
        });
        let measurer = s.spawn(move || {
            if let Some(c) = cpus.0 {
                let _ = smelt_transport::pin_current_thread(smelt_mesh::CpuId(c));
            }
            logp::measure(&mut a, 1, o)
        });
        let p = measurer.join().expect("measurer thread");
        let r = responder.join().expect("responder thread");
        let p = p?;
        r?;
        Ok(p)
    })
}

/// LogP between this process and a `smelt am-member` child.
fn between_processes(o: &Opts, cpus: (Option<u32>, Option<u32>)) -> Result<LogP> {
    // The world is told the CPUs the two members are pinned to (as `smelt launch`
    // tells its members): each member then knows it has a CPU of its own and spins
    // before it yields, as the threads row's members do. Without them each saw one
    // allowed CPU for two members and waited as oversubscribed (yielding at once, its
    // CPU going to whatever else ran: round trips of 4-5 µs on a loaded machine).
    let mut world = WorldBuilder::new(2);
    if let (Some(a), Some(b)) = cpus {
        if a != b {
            world = world.cpus(&[smelt_mesh::CpuId(a), smelt_mesh::CpuId(b)]);
        }
    }
    let job = world.create_job(false)?;
    let exe = std::env::current_exe().context("cannot find the smelt executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg("am-member")
        .args(["--timeout", &o.timeout.as_secs_f64().to_string()])
        .envs(job.env(Rank(1)));
    // Started as `smelt launch` starts its members: pinned, dying with this process.
    let mut members = Members::new();
    members
        .spawn(&mut cmd, cpus.1.map(smelt_mesh::CpuId))
        .context("cannot start a member process")?;
    let r = std::thread::scope(|s| {
        s.spawn(|| -> Result<LogP> {
            if let Some(c) = cpus.0 {
                let _ = smelt_transport::pin_current_thread(smelt_mesh::CpuId(c));
            }
            let world = job.join(Rank(0))?;
            let mut ep = Endpoint::from_world(&world, logp::State::default(), AmConfig::default())?;
            logp::register(&mut ep)?;
            Ok(logp::measure(&mut ep, 1, o)?)
        })
        .join()
        .expect("measurer thread")
    });
    if r.is_err() {
        members.kill();
    }
    let status = members
        .take(Rank(0))
        .context("the member process is gone")?
        .wait()?;
    let p = r?;
    anyhow::ensure!(status.success(), "the member process failed ({status})");
    Ok(p)
}

/// The `smelt-bench-mpi am` program next to this executable, if built.
fn find_mpi_program() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.join("smelt-bench-mpi");
    p.is_file().then_some(p)
}

/// One LogP measurement under mpirun: `np` ranks, `env`, the pair and the polling
/// policy; the figures and the line `smelt-bench-mpi am` printed.
fn under_mpi(
    prog: &Path,
    np: usize,
    env: &[(&str, &str)],
    pair: (usize, usize),
    poll: &str,
    quick: bool,
    timeout: Duration,
) -> Result<(LogP, serde_json::Value)> {
    let mpirun = smelt_peers::c::which("mpirun").context("no mpirun (install Open MPI)")?;
    let mut c = Command::new(mpirun);
    c.args([
        "--oversubscribe",
        "--bind-to",
        "none",
        "-np",
        &np.to_string(),
    ])
    .arg(prog)
    .arg("am")
    .args([
        "logp",
        "--pair",
        &format!("{},{}", pair.0, pair.1),
        "--poll",
        poll,
    ])
    .args(if quick {
        &[
            "--rounds",
            "500",
            "--stream",
            "5000",
            "--samples",
            "3",
            "--bulk",
            "262144",
        ][..]
    } else {
        &[][..]
    })
    .envs(env.iter().copied())
    .envs(smelt_peers::c::MPI_ENV);
    let out = smelt_peers::c::run_bounded(c, timeout).context("cannot run mpirun")?;
    anyhow::ensure!(
        out.ok,
        "smelt-bench-mpi am under mpirun {}: {}",
        if out.timed_out { "timed out" } else { "failed" },
        out.stderr.trim()
    );
    let v: serde_json::Value = out
        .stdout
        .lines()
        .find_map(|l| {
            serde_json::from_str::<serde_json::Value>(l.trim())
                .ok()?
                .get("am_logp")
                .cloned()
        })
        .context("smelt-bench-mpi am printed no LogP line")?;
    // The driver writes an estimate it could not make (not finite: negative or
    // inconsistent parts) as null; that is a failed figure, said as such.
    let missing: Vec<&str> = v
        .as_object()
        .map(|o| {
            o.iter()
                .filter(|(_, x)| x.is_null())
                .map(|(k, _)| k.as_str())
                .collect()
        })
        .unwrap_or_default();
    anyhow::ensure!(
        missing.is_empty(),
        "smelt-bench-mpi am could not estimate {} (not finite: the measured parts were inconsistent under this load)",
        missing.join(", ")
    );
    let p: LogPIn = serde_json::from_value(v.clone()).context("smelt-bench-mpi am's LogP line")?;
    Ok((p.into(), v))
}

/// The MPI configurations: name, what it is, ranks, environment, pair, poll policy.
type MpiCase = (
    &'static str,
    &'static str,
    usize,
    &'static [(&'static str, &'static str)],
    (usize, usize),
    &'static str,
);

const MPI_CASES: &[MpiCase] = &[
    ("mpi", "every destination over MPI (2 ranks)", 2, &[("SMELT_AM_TRANSPORT", "mpi")], (0, 1), "always"),
    ("mpi-nodes", "multi-protocol: the peer on another emulated node (4 ranks, nodes of 2), adaptive polling", 4, &[("SMELT_RANKS_PER_NODE", "2")], (0, 2), "adaptive"),
    ("mpi-shm-only", "shared memory under MPI, all 4 ranks on one node: no network to poll (the baseline of the multi-protocol rows)", 4, &[("SMELT_RANKS_PER_NODE", "4")], (0, 1), "adaptive"),
    ("multi-protocol-shm", "multi-protocol: the peer on the same node, the network polled adaptively (4 ranks, nodes of 2)", 4, &[("SMELT_RANKS_PER_NODE", "2")], (0, 1), "adaptive"),
    ("multi-protocol-shm-every8", "as multi-protocol-shm, the network polled every 8th poll", 4, &[("SMELT_RANKS_PER_NODE", "2")], (0, 1), "every:8"),
    ("multi-protocol-shm-always", "as multi-protocol-shm, the network polled at every poll", 4, &[("SMELT_RANKS_PER_NODE", "2")], (0, 1), "always"),
];

/// The two CPUs of the measurements (the first two this process may use).
type Pair = (Option<u32>, Option<u32>);

/// Measures `smelt bench am`.
pub fn measure(a: &Common) -> Result<AmReport> {
    let o = opts(a);
    let allowed = smelt_probe::affinity::allowed_cpus();
    let pair: Pair = (allowed.first().copied(), allowed.get(1).copied());
    let mut warnings = Vec::new();
    if allowed.len() < 2 {
        warnings.push("fewer than 2 CPUs: both endpoints share one".into());
    }
    if cfg!(debug_assertions) {
        warnings.push("this smelt is a debug build: build with --release for figures".into());
    }
    let mut rows = Vec::new();
    // The threads row and the peers it is compared with (the queuepair round trip,
    // crossbeam-channel's rate) are measured in interleaved rounds and each ratio is
    // the median of its rounds' ratios: measured once each, one after the other, the
    // two ratios moved 1.2-1.3x and 1.2-3.6x from run to run on a shared 2-CPU VM,
    // with the machine's pace changing between the figures, not the figures.
    eprintln!("active messages between threads, interleaved with the peers (queuepair round trip, crossbeam-channel rate)...");
    let rounds = if a.quick { 5 } else { 7 };
    let mut thread_rounds = Vec::with_capacity(rounds);
    let mut peer_rounds = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        thread_rounds.push(transport_row(
            "threads",
            "queuepairs between two threads",
            between_threads(&o, pair),
        ));
        peer_rounds.push(peer_figures(a.quick, pair));
    }
    let (threads_row, peers, interleaved) = interleave(thread_rounds, peer_rounds);
    rows.push(threads_row);
    eprintln!("active messages between processes...");
    rows.push(transport_row(
        "processes",
        "queuepairs in shared memory between two processes",
        between_processes(&o, pair),
    ));
    let (ucx_opts, ucx_rows, ucx_runs) = ucx_peer(a, pair);
    eprintln!("global arrays: get of 8 bytes inside a node...");
    let global_get = global_get(a.quick, pair);
    let mpi_rows = mpi_rows(a.quick, &o, &mut rows, &mut warnings);
    let ratios = ratios(&rows, interleaved);
    let ucx = UcxSection {
        placement: smelt_peers::ucx::placement(&ucx_opts),
        comparisons: compare_with_ucx(logp_of(&rows, "processes"), &ucx_rows, &global_get),
        rows: ucx_rows,
        runs: ucx_runs,
    };
    let report = AmReport {
        tool: format!("smelt {}", env!("CARGO_PKG_VERSION")),
        host: smelt_model::host::host_name(),
        cpus: [pair.0, pair.1].into_iter().flatten().collect(),
        transports: rows,
        peers,
        ratios,
        ucx,
        mpi: mpi_rows,
        warnings,
    };
    Ok(report)
}

/// A transport's row from its measurement: a negative or inconsistent estimate is a
/// failed figure, never printed.
fn transport_row(transport: &str, about: &str, r: Result<LogP>) -> TransportRow {
    let (logp, error) = match r.and_then(|p| p.check().map(|()| p).map_err(anyhow::Error::from)) {
        Ok(p) => (Some(LogPRow::from(p)), None),
        Err(e) => (None, Some(format!("{e:#}"))),
    };
    TransportRow {
        transport: transport.into(),
        about: about.into(),
        logp,
        error,
    }
}

/// The LogP figures of transport `t`, if measured.
fn logp_of(rows: &[TransportRow], t: &str) -> Option<LogPRow> {
    rows.iter().find(|r| r.transport == t).and_then(|r| r.logp)
}

/// The queuepair round trip and crossbeam-channel's rate between the CPUs of `pair`.
fn peer_figures(quick: bool, pair: Pair) -> Peers {
    let budget = if quick {
        Budget::quick()
    } else {
        Budget::full()
    };
    let ca = pair.0.unwrap_or(0);
    let cb = pair.1.unwrap_or(ca);
    let (ca, cb) = (smelt_mesh::CpuId(ca), smelt_mesh::CpuId(cb));
    let qp = smelt_probe::transport::qp_latency(ca, cb, &budget);
    let cb_rate = smelt_peers::rust::crossbeam_throughput(ca, cb, &budget);
    let mut peers = Peers {
        queuepair_rtt_ns: qp.median().map(|l| 2.0 * l),
        crossbeam_ns_per_msg: cb_rate.median(),
        rounds: 1,
        errors: Vec::new(),
    };
    for p in [&qp, &cb_rate] {
        if let Status::Failed { reason } | Status::Skipped { reason } = &p.status {
            peers.errors.push(format!("{}: {reason}", p.name));
        }
    }
    peers
}

/// UCX's `ucx_perftest` between two processes on the CPUs of `pair`: how it ran, its
/// rows and every run's final line.
fn ucx_peer(
    a: &Common,
    pair: Pair,
) -> (
    smelt_peers::ucx::UcxOpts,
    Vec<smelt_peers::PeerResult>,
    Vec<serde_json::Value>,
) {
    eprintln!("peers: UCX ucx_perftest (ucp_am_lat, ucp_am_bw, ucp_get) between two processes...");
    let ucx_opts = {
        // The server answers, as smelt's member process does: on the second CPU.
        let cpus = (pair.1.map(smelt_mesh::CpuId), pair.0.map(smelt_mesh::CpuId));
        let mut u = if a.quick {
            smelt_peers::ucx::UcxOpts::quick(cpus)
        } else {
            smelt_peers::ucx::UcxOpts::full(cpus)
        };
        if let Some(t) = a.timeout {
            u.timeout = Duration::from_secs_f64(t);
        }
        u
    };
    let ucx_measured = smelt_peers::ucx::measure(&ucx_opts);
    let ucx_runs = ucx_measured
        .iter()
        .map(|m| {
            serde_json::json!({
                "test": m.test.name(),
                "runs": m.runs.iter().map(|f| serde_json::json!({
                    "iterations": f.iterations,
                    "latency_p50_us": f.latency_p50_us,
                    "latency_avg_us": f.latency_avg_us,
                    "latency_overall_us": f.latency_overall_us,
                    "bandwidth_avg_mb_s": f.bandwidth_avg_mb_s,
                    "bandwidth_overall_mb_s": f.bandwidth_overall_mb_s,
                    "msgrate_avg": f.msgrate_avg,
                    "msgrate_overall": f.msgrate_overall,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let ucx_rows = ucx_measured.into_iter().map(|m| m.row).collect();
    (ucx_opts, ucx_rows, ucx_runs)
}

/// smelt's global-array get of 8 bytes between the CPUs of `pair`, ns, or why not.
fn global_get(quick: bool, pair: Pair) -> Result<f64, String> {
    let mut g = if quick {
        crate::global::Opts::quick()
    } else {
        crate::global::Opts::full()
    };
    if let (Some(x), Some(y)) = pair {
        g.cpus = Some((x, y));
    }
    crate::global::measure(&g)
        .map(|r| r.get_8b_ns)
        .map_err(|e| format!("{e}"))
}

/// The rows of [`MPI_CASES`] under mpirun, with smelt-bench-mpi am when it is built
/// next to smelt, into `rows` (a missing program: a warning); the LogP lines the
/// program printed.
fn mpi_rows(
    quick: bool,
    o: &Opts,
    rows: &mut Vec<TransportRow>,
    warnings: &mut Vec<String>,
) -> Vec<serde_json::Value> {
    let mut mpi_rows = Vec::new();
    match find_mpi_program() {
        None => warnings.push(
            "no smelt-bench-mpi next to smelt: MPI rows skipped (build it with `cargo build --release -p smelt-bench --features mpi --bin smelt-bench-mpi`)"
                .into(),
        ),
        Some(prog) => {
            for &(name, about, np, env, pair, poll) in MPI_CASES {
                eprintln!("active messages under mpirun: {name}...");
                let r = under_mpi(&prog, np, env, pair, poll, quick, o.timeout * 4);
                let r = r.map(|(p, v)| {
                    mpi_rows.push(serde_json::json!({ "case": name, "am_logp": v }));
                    p
                });
                rows.push(transport_row(name, about, r));
            }
        }
    }
    mpi_rows
}

/// The ratios of the run, from the transports' rows and the peers.
/// The ratios of the threads row to the peers, round by round (none where a figure of
/// that round is missing).
#[derive(Serialize, Default, Clone)]
struct Interleaved {
    /// AM round trip / queuepair round trip, per round.
    am_rtt_over_queuepair_rtt: Vec<f64>,
    /// AM rate / crossbeam-channel's rate, per round.
    am_rate_over_crossbeam_rate: Vec<f64>,
}

/// The median of `v`, if any.
fn median_of(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| smelt_ids::stats::median(v))
}

/// From rounds of the threads row and of the peers: the threads row of the round with
/// the median round trip (one round's figures, so that they stay consistent with each
/// other), the peers' medians over the rounds, and each round's ratios.
fn interleave(threads: Vec<TransportRow>, peers: Vec<Peers>) -> (TransportRow, Peers, Interleaved) {
    let mut per = Interleaved::default();
    for (t, p) in threads.iter().zip(&peers) {
        let Some(l) = t.logp else { continue };
        if let Some(q) = p.queuepair_rtt_ns {
            per.am_rtt_over_queuepair_rtt.push(l.rtt_ns / q);
        }
        if let Some(c) = p.crossbeam_ns_per_msg {
            per.am_rate_over_crossbeam_rate.push(c / l.g_ns);
        }
    }
    let all = |f: fn(&Peers) -> Option<f64>| peers.iter().filter_map(f).collect::<Vec<_>>();
    let mut errors: Vec<String> = peers
        .iter()
        .flat_map(|p| p.errors.iter().cloned())
        .collect();
    errors.dedup();
    let merged = Peers {
        queuepair_rtt_ns: median_of(&all(|p| p.queuepair_rtt_ns)),
        crossbeam_ns_per_msg: median_of(&all(|p| p.crossbeam_ns_per_msg)),
        rounds: peers.len(),
        errors,
    };
    let mut measured: Vec<(f64, usize)> = threads
        .iter()
        .enumerate()
        .filter_map(|(i, t)| t.logp.map(|l| (l.rtt_ns, i)))
        .collect();
    measured.sort_by(|a, b| a.0.total_cmp(&b.0));
    // The median round, or (none measured) the last round's error.
    let pick = measured
        .get(measured.len() / 2)
        .map_or(threads.len().saturating_sub(1), |m| m.1);
    let row = threads.into_iter().nth(pick).expect("at least one round");
    (row, merged, per)
}

fn ratios(rows: &[TransportRow], interleaved: Interleaved) -> Ratios {
    let over_shm_only = |t: &str| {
        logp_of(rows, t)
            .zip(logp_of(rows, "mpi-shm-only"))
            .map(|(m, s)| m.rtt_ns / s.rtt_ns)
    };
    Ratios {
        am_rtt_over_queuepair_rtt: median_of(&interleaved.am_rtt_over_queuepair_rtt),
        am_rate_over_crossbeam_rate: median_of(&interleaved.am_rate_over_crossbeam_rate),
        rounds: interleaved,
        mpi_nodes_rtt_over_threads_rtt: logp_of(rows, "mpi-nodes")
            .zip(logp_of(rows, "threads"))
            .map(|(m, t)| m.rtt_ns / t.rtt_ns),
        multi_protocol_shm_rtt_over_shm_only_rtt: over_shm_only("multi-protocol-shm"),
        always_poll_shm_rtt_over_shm_only_rtt: over_shm_only("multi-protocol-shm-always"),
        every8_poll_shm_rtt_over_shm_only_rtt: over_shm_only("multi-protocol-shm-every8"),
    }
}

impl BenchReport for AmReport {
    fn table(&self) -> String {
        table(self)
    }

    fn failed(&self) -> Vec<String> {
        self.transports
            .iter()
            .filter_map(|r| r.error.as_ref().map(|e| format!("{}: {e}", r.transport)))
            .collect()
    }
}

/// UCX's figure of row `name`, ns, or why there is none.
fn ucx_ns(rows: &[smelt_peers::PeerResult], name: &str) -> Result<f64, String> {
    match rows.iter().find(|r| r.name == name).map(|r| &r.status) {
        Some(Status::Ok { ns }) => Ok(ns.median),
        Some(Status::Skipped { reason } | Status::Failed { reason }) => {
            Err(format!("UCX {name}: {reason}"))
        }
        None => Err(format!("no UCX row {name}")),
    }
}

/// A comparison from two figures (ns) or why one is missing. `rate`: the figures are
/// ns per message and the ratio is of rates (UCX's ns over smelt's); `at_most`: the
/// target is ratio ≤ `limit`, else ≥ `limit`.
#[allow(clippy::too_many_arguments)]
fn comparison(
    name: &str,
    smelt: Result<f64, String>,
    ucx: Result<f64, String>,
    rate: bool,
    at_most: bool,
    limit: f64,
    about: &str,
) -> Comparison {
    let missing: Vec<String> = [&smelt, &ucx]
        .iter()
        .filter_map(|r| r.as_ref().err().cloned())
        .collect();
    let (s, u) = (smelt.ok(), ucx.ok());
    let conv = |ns: f64| if rate { 1e3 / ns } else { ns };
    let ratio = s.zip(u).map(|(s, u)| if rate { u / s } else { s / u });
    let mut note = about.to_string();
    for m in missing {
        note.push_str("; missing: ");
        note.push_str(&m);
    }
    Comparison {
        name: name.into(),
        smelt: s.map(conv),
        ucx: u.map(conv),
        unit: if rate { "M msg/s" } else { "ns" }.into(),
        ratio,
        target: format!("{} {limit}", if at_most { "≤" } else { "≥" }),
        met: ratio.map(|r| if at_most { r <= limit } else { r >= limit }),
        note,
    }
}

/// smelt's processes row and global-array get against UCX's rows (targets of issue
/// 29: one-way latency ≤ UCX's median, rate ≥ 2× UCX's, get ≤ UCX's `ucp_get`).
fn compare_with_ucx(
    processes: Option<LogPRow>,
    ucx: &[smelt_peers::PeerResult],
    global_get: &Result<f64, String>,
) -> Vec<Comparison> {
    let no_row = || "smelt's processes row failed (see the transports)".to_string();
    vec![
        comparison(
            "one-way AM latency: smelt processes / UCX ucp_am_lat",
            processes.map(|p| p.rtt_ns / 2.0).ok_or_else(no_row),
            ucx_ns(ucx, "ucx_am_lat"),
            false,
            true,
            1.0,
            "smelt: half the request/reply round trip between two processes (median); \
             UCX: ucx_perftest's ping-pong latency (halved by ucx_perftest), 50th percentile, 8-byte messages",
        ),
        comparison(
            "AM rate: smelt processes / UCX ucp_am_bw",
            processes.map(|p| p.g_ns).ok_or_else(no_row),
            ucx_ns(ucx, "ucx_am_bw"),
            true,
            false,
            2.0,
            "smelt: 1/g, a request and its mandatory reply counted as one message; \
             UCX: overall rate of a one-way stream of 8-byte active messages (no replies)",
        ),
        comparison(
            "get of 8 B inside a node: smelt global array / UCX ucp_get",
            global_get.clone().map_err(|e| format!("smelt global get: {e}")),
            ucx_ns(ucx, "ucx_get"),
            false,
            true,
            1.0,
            "smelt: smelt_global get of one u64 owned by a peer thread (between two threads \
             of one process, the element's line last written by the peer); UCX: ucp_get of \
             8 bytes between two processes, 50th percentile of a stream of gets",
        ),
    ]
}

/// LogP as `smelt-bench-mpi am` prints it (the same field names as [`LogPRow`]).
#[derive(serde::Deserialize)]
struct LogPIn {
    l_ns: f64,
    o_s_ns: f64,
    o_r_ns: f64,
    g_ns: f64,
    big_g_ns_per_byte: f64,
    rtt_ns: f64,
}

impl From<LogPIn> for LogP {
    fn from(p: LogPIn) -> Self {
        LogP {
            l: p.l_ns,
            o_s: p.o_s_ns,
            o_r: p.o_r_ns,
            g: p.g_ns,
            big_g: p.big_g_ns_per_byte,
            rtt: p.rtt_ns,
        }
    }
}

fn us(ns: f64) -> String {
    format!("{:.3}", ns / 1e3)
}

fn table(r: &AmReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Active messages, LogP (µs; G in ns/byte), CPUs {:?}",
        r.cpus
    );
    let _ = writeln!(
        s,
        "{:<20} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>8}",
        "transport", "L", "o_s", "o_r", "g", "G", "MB/s", "n½ (B)", "RTT"
    );
    for t in &r.transports {
        match (&t.logp, &t.error) {
            (Some(p), _) => {
                let _ = writeln!(
                    s,
                    "{:<20} {:>8} {:>8} {:>8} {:>8} {:>9.4} {:>9.0} {:>9.0} {:>8}",
                    t.transport,
                    us(p.l_ns),
                    us(p.o_s_ns),
                    us(p.o_r_ns),
                    us(p.g_ns),
                    p.big_g_ns_per_byte,
                    p.bandwidth_mb_s,
                    p.half_power_bytes,
                    us(p.rtt_ns)
                );
            }
            (None, Some(e)) => {
                let _ = writeln!(s, "{:<20} failed: {e}", t.transport);
            }
            (None, None) => {}
        }
    }
    let _ = writeln!(
        s,
        "\nPeers, same CPUs (medians of {} rounds interleaved with the threads row):",
        r.peers.rounds
    );
    if let Some(q) = r.peers.queuepair_rtt_ns {
        let _ = writeln!(s, "  smelt queuepair round trip   {} µs", us(q));
    }
    if let Some(c) = r.peers.crossbeam_ns_per_msg {
        let _ = writeln!(s, "  crossbeam-channel            {:.1} ns per message", c);
    }
    for e in &r.peers.errors {
        let _ = writeln!(s, "  {e}");
    }
    let _ = writeln!(s, "\nRatios:");
    let rounds = |v: &[f64]| {
        let each: Vec<String> = v.iter().map(|x| format!("{x:.2}")).collect();
        format!(
            "; median of {} interleaved rounds ({})",
            v.len(),
            each.join(" ")
        )
    };
    let mut ratio = |name: &str, v: Option<f64>, target: &str, per: String| {
        if let Some(v) = v {
            let _ = writeln!(s, "  {name:<48} {v:>6.2}  (target {target}{per})");
        }
    };
    ratio(
        "AM round trip / queuepair round trip",
        r.ratios.am_rtt_over_queuepair_rtt,
        "≤ 1.25",
        rounds(&r.ratios.rounds.am_rtt_over_queuepair_rtt),
    );
    ratio(
        "AM rate / crossbeam-channel rate",
        r.ratios.am_rate_over_crossbeam_rate,
        "≥ 1.5",
        rounds(&r.ratios.rounds.am_rate_over_crossbeam_rate),
    );
    ratio(
        "RTT between emulated nodes (MPI) / threads",
        r.ratios.mpi_nodes_rtt_over_threads_rtt,
        "≥ 7",
        String::new(),
    );
    ratio(
        "RTT in a node, network polled adaptively / not",
        r.ratios.multi_protocol_shm_rtt_over_shm_only_rtt,
        "≤ 1.12",
        String::new(),
    );
    ratio(
        "RTT in a node, network polled always / not",
        r.ratios.always_poll_shm_rtt_over_shm_only_rtt,
        "-",
        String::new(),
    );
    ratio(
        "RTT in a node, network polled 1/8 / not",
        r.ratios.every8_poll_shm_rtt_over_shm_only_rtt,
        "-",
        String::new(),
    );
    let _ = writeln!(s, "\nUCX (ucx_perftest; {}):", r.ucx.placement);
    for row in &r.ucx.rows {
        match &row.status {
            Status::Ok { ns } => {
                let what = match row.name.as_str() {
                    "ucx_am_bw" => format!(
                        "{:.1} ns per message ({:.2} M msg/s)",
                        ns.median,
                        1e3 / ns.median
                    ),
                    _ => format!("{} µs", us(ns.median)),
                };
                let _ = writeln!(
                    s,
                    "  {:<12} {what}  (median of {} runs, p10–p90 {}–{} ns)",
                    row.name,
                    ns.n + ns.rejected,
                    ns.p10.round(),
                    ns.p90.round()
                );
            }
            Status::Skipped { reason } => {
                let _ = writeln!(s, "  {:<12} skipped: {reason}", row.name);
            }
            Status::Failed { reason } => {
                let _ = writeln!(s, "  {:<12} failed: {reason}", row.name);
            }
        }
    }
    let _ = writeln!(s, "\nsmelt against UCX:");
    for c in &r.ucx.comparisons {
        let fig = |v: Option<f64>| match (v, c.unit.as_str()) {
            (Some(v), "ns") => format!("{} µs", us(v)),
            (Some(v), u) => format!("{v:.2} {u}"),
            (None, _) => "-".into(),
        };
        let verdict = match (c.ratio, c.met) {
            (Some(x), Some(true)) => format!("{x:.2}  (target {}: met)", c.target),
            (Some(x), Some(false)) => format!("{x:.2}  (target {}: MISSED)", c.target),
            _ => format!("-  (target {}: not measured)", c.target),
        };
        let _ = writeln!(
            s,
            "  {:<58} smelt {:>14}  UCX {:>14}  ratio {verdict}",
            c.name,
            fig(c.smelt),
            fig(c.ucx)
        );
        if c.ratio.is_none() {
            let _ = writeln!(s, "    {}", c.note);
        }
    }
    for w in &r.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    s
}
