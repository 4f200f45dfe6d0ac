//! `smelt bench offload`: what handing communication to dedicated threads costs and
//! buys (Endo and Taura's measurements, over smelt's active messages), in one run:
//!
//! * the round trip of a short active message (request, reply, completion seen by the
//!   application thread): direct (the application thread drives its endpoint), static
//!   offload (a communication thread always running) and dynamic offload (a
//!   communication thread that sleeps when idle and is woken through the queue's
//!   sleeping bit), as ratios to direct; and the dynamic round trip after an idle
//!   pause (the lane asleep: the wake-up's cost);
//! * the message rate against the number of queues and communication threads (1 to 6,
//!   one application thread and one serving endpoint per queue), with the CPU time the
//!   process and its communication threads used.
//!
//! The report's `global` field holds the global-array rows (`bench_global.rs`): get of
//! 8 bytes inside a node against a queuepair round trip, and across emulated nodes
//! against a plain `MPI_Get`.

use super::{target, BenchReport, Common, Target};
use anyhow::{Context, Result};
use serde::Serialize;
use smelt_am::{threads, AmConfig, AmError, Endpoint};
use smelt_offload::{Offload, OffloadConfig, OffloadMode};
use smelt_transport::{allowed_cpus, pin_current_thread, process_cpu_time, WaitPolicy};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PING: u8 = 1;
const PONG: u8 = 2;
/// Requests in flight per application thread in the rate test before it flushes.
const WINDOW: u64 = 64;

/// One round-trip figure.
#[derive(Serialize)]
struct RttRow {
    mode: &'static str,
    /// Median ns per round trip over the batches (None: failed).
    ns: Option<f64>,
    /// This mode's round trip over direct's.
    ratio_to_direct: Option<f64>,
    /// Round trips per batch and batches.
    per_batch: u64,
    batches: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// One message-rate figure.
#[derive(Serialize)]
struct RateRow {
    mode: &'static str,
    /// Queues = communication threads = application threads = serving endpoints.
    queues: usize,
    messages: u64,
    wall_s: f64,
    /// Requests answered per second, all queues together.
    msgs_per_s: f64,
    /// CPU seconds the whole process used per wall second (cores kept busy).
    process_cpu_cores: Option<f64>,
    /// CPU seconds the communication threads used (0 for direct).
    comm_cpu_s: Option<f64>,
    /// Times the communication threads slept and were woken by a producer.
    sleeps: u64,
    wakes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// The report of `smelt bench offload`.
#[derive(Serialize)]
pub struct OffloadReport {
    tool: String,
    host: String,
    /// CPUs used for the round trip: application, communication thread, server.
    rtt_cpus: Vec<u32>,
    cpus_available: usize,
    round_trip: Vec<RttRow>,
    /// Dynamic round trip after a 2 ms pause (the lane asleep), median ns.
    dynamic_after_idle_ns: Option<f64>,
    rate: Vec<RateRow>,
    targets: Vec<Target>,
    /// Global-array rows (get/put against a queuepair round trip and MPI_Get).
    #[serde(skip_serializing_if = "Option::is_none")]
    global: Option<serde_json::Value>,
    warnings: Vec<String>,
}

/// Threads that own their cores spin; threads that share them yield early.
fn policy(dedicated: bool) -> WaitPolicy {
    if dedicated {
        WaitPolicy::DEDICATED
    } else {
        WaitPolicy::OVERSUBSCRIBED
    }
}

fn am_config(dedicated: bool) -> AmConfig {
    let mut cfg = AmConfig::default();
    cfg.link = cfg
        .link
        .timeout(Duration::from_secs(20))
        .wait(policy(dedicated));
    cfg
}

/// A serving endpoint: answers PING with PONG until `stop`, on its own thread.
fn serve(
    mut ep: Endpoint<()>,
    cpu: Option<u32>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Result<(), AmError>> {
    std::thread::spawn(move || {
        if let Some(c) = cpu {
            let _ = pin_current_thread(smelt_mesh::CpuId(c));
        }
        ep.register(PING, |_, ctx, m| {
            let _ = ctx.reply(PONG, &[m.args[0]]);
        })?;
        while !stop.load(Ordering::Acquire) {
            match ep.wait(Duration::from_millis(5)) {
                Ok(_) | Err(AmError::Timeout { .. }) | Err(AmError::PeerGone { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    })
}

/// The median of `v` (the workspace's one, [`crate::stats::median`]); `None` when empty.
fn median(v: Vec<f64>) -> Option<f64> {
    (!v.is_empty()).then(|| crate::stats::median(&v))
}

/// Times `batches` batches of `per` calls of `op` after a warm-up; median ns per call.
fn time_batches(per: u64, batches: usize, mut op: impl FnMut(u64) -> Result<()>) -> Result<f64> {
    for i in 0..per.min(2000) {
        op(i)?;
    }
    let mut ns = Vec::new();
    for _ in 0..batches {
        let t0 = Instant::now();
        for i in 0..per {
            op(i)?;
        }
        ns.push(t0.elapsed().as_nanos() as f64 / per as f64);
    }
    median(ns).context("no batches")
}

/// The round trip in `mode`: the application thread on `cpus[0]`, the communication
/// thread on `cpus[1]`, the server on `cpus[2]` (where there are that many).
fn round_trip(mode: OffloadMode, cpus: &[Option<u32>; 3], per: u64, batches: usize) -> Result<f64> {
    with_server(cpus, |mut client| {
        std::thread::scope(|s| {
            s.spawn(move || -> Result<f64> {
                if let Some(c) = cpus[0] {
                    let _ = pin_current_thread(smelt_mesh::CpuId(c));
                }
                if mode == OffloadMode::Direct {
                    return time_batches(per, batches, |i| {
                        client.request(0, PING, &[i])?;
                        client.quiesce(Duration::from_secs(20))?;
                        Ok(())
                    });
                }
                let pool = Offload::start(vec![client], offload_config(mode, cpus))?;
                let t = time_batches(per, batches, |i| {
                    pool.request_ticket(0, 0, PING, &[i])?.wait()?;
                    Ok(())
                });
                pool.shutdown(Duration::from_secs(5))?;
                t
            })
            .join()
            .map_err(|_| anyhow::anyhow!("the measuring thread panicked"))?
        })
    })
}

/// Runs `f` with a client endpoint while a server endpoint answers its PINGs (on
/// `cpus[2]`, if any), then stops the server: `f`'s result, else the server's error.
fn with_server(
    cpus: &[Option<u32>; 3],
    f: impl FnOnce(Endpoint<()>) -> Result<f64>,
) -> Result<f64> {
    let mut eps = threads(2, am_config(cpus[0].is_some()), |_| ())?;
    let mut client = eps.pop().context("two endpoints")?;
    let server = eps.pop().context("two endpoints")?;
    client.register(PONG, |_, _, _| {})?;
    let stop = Arc::new(AtomicBool::new(false));
    let srv = serve(server, cpus[2], stop.clone());
    let r = f(client);
    stop.store(true, Ordering::Release);
    srv.join()
        .map_err(|_| anyhow::anyhow!("the server panicked"))??;
    r
}

/// The offload pool's configuration in `mode`: the communication thread on `cpus[1]`
/// (if any), spinning when the application thread has a CPU of its own (`cpus[0]`).
fn offload_config(mode: OffloadMode, cpus: &[Option<u32>; 3]) -> OffloadConfig {
    let mut cfg = OffloadConfig::new(mode);
    cfg.link.wait = Some(policy(cpus[0].is_some()));
    if let Some(c) = cpus[1] {
        cfg.cpus = vec![c];
    }
    cfg
}

/// The dynamic round trip when the lane has gone to sleep before each request.
fn dynamic_after_idle(cpus: &[Option<u32>; 3], n: u64) -> Result<f64> {
    let mut cfg = offload_config(OffloadMode::Dynamic, cpus);
    cfg.max_sleep = Duration::from_millis(50);
    with_server(cpus, |client| {
        let pool = Offload::start(vec![client], cfg)?;
        let mut ns = Vec::new();
        for i in 0..n {
            std::thread::sleep(Duration::from_millis(2));
            let t0 = Instant::now();
            pool.request_ticket(0, 0, PING, &[i])?.wait()?;
            ns.push(t0.elapsed().as_nanos() as f64);
        }
        let ends = pool.shutdown(Duration::from_secs(5))?;
        if ends[0].stats.wakes == 0 {
            anyhow::bail!("the lane never slept between requests: nothing measured");
        }
        median(ns).context("no samples")
    })
}

/// Runs `f(j, item j)` on a thread of its own for each of `items`, and the first error.
fn on_threads<T: Send>(items: Vec<T>, f: impl Fn(usize, T) -> Result<()> + Sync) -> Result<()> {
    std::thread::scope(|s| {
        let f = &f;
        let hs: Vec<_> = items
            .into_iter()
            .enumerate()
            .map(|(j, x)| s.spawn(move || f(j, x)))
            .collect();
        for h in hs {
            h.join()
                .map_err(|_| anyhow::anyhow!("an application thread panicked"))??;
        }
        Ok(())
    })
}

/// The message rate with `k` queues: `k` application threads, each sending `per`
/// requests (flushing every [`WINDOW`]) through its own lane to its own server.
/// Threads are not pinned; they spin only if there is a core for each (`dedicated`).
fn rate(mode: OffloadMode, k: usize, per: u64, dedicated: bool) -> Result<RateRow> {
    let mut eps = threads(2 * k, am_config(dedicated), |_| ())?;
    let clients: Vec<_> = eps.drain(k..).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let servers: Vec<_> = eps
        .into_iter()
        .map(|ep| serve(ep, None, stop.clone()))
        .collect();
    let r = (|| -> Result<RateRow> {
        let mut clients = clients;
        for c in &mut clients {
            c.register(PONG, |_, _, _| {})?;
        }
        let cpu0 = process_cpu_time();
        let t0 = Instant::now();
        let (comm_cpu, sleeps, wakes) = if mode == OffloadMode::Direct {
            on_threads(clients.iter_mut().collect(), |j, ep| {
                for i in 0..per {
                    ep.request(j, PING, &[i])?;
                    if i % WINDOW == WINDOW - 1 {
                        ep.quiesce(Duration::from_secs(20))?;
                    }
                }
                ep.quiesce(Duration::from_secs(20))?;
                Ok(())
            })?;
            (Some(0.0), 0, 0)
        } else {
            let mut cfg = OffloadConfig::new(mode);
            cfg.link.wait = Some(policy(dedicated));
            let pool = Offload::start(clients, cfg)?;
            on_threads(vec![(); k], |j, ()| {
                for i in 0..per {
                    pool.request(j, j, PING, &[i])?;
                    if i % WINDOW == WINDOW - 1 {
                        pool.flush(j)?.wait()?;
                    }
                }
                pool.flush(j)?.wait()?;
                Ok(())
            })?;
            let ends = pool.shutdown(Duration::from_secs(5))?;
            let cpu: Option<f64> = ends
                .iter()
                .map(|e| e.cpu_time.map(|d| d.as_secs_f64()))
                .sum();
            (
                cpu,
                ends.iter().map(|e| e.stats.sleeps).sum(),
                ends.iter().map(|e| e.stats.wakes).sum(),
            )
        };
        let wall = t0.elapsed().as_secs_f64();
        let cpu = process_cpu_time()
            .zip(cpu0)
            .map(|(b, a)| (b - a).as_secs_f64() / wall);
        let messages = per * k as u64;
        Ok(RateRow {
            mode: mode.name(),
            queues: k,
            messages,
            wall_s: wall,
            msgs_per_s: messages as f64 / wall,
            process_cpu_cores: cpu,
            comm_cpu_s: comm_cpu,
            sleeps,
            wakes,
            error: None,
        })
    })();
    stop.store(true, Ordering::Release);
    for s in servers {
        s.join()
            .map_err(|_| anyhow::anyhow!("a server panicked"))??;
    }
    r
}

/// Measures `smelt bench offload`.
pub fn measure(a: &Common) -> Result<OffloadReport> {
    let allowed = allowed_cpus().context("cannot read the allowed CPUs")?;
    let mut warnings = Vec::new();
    let cpus: [Option<u32>; 3] = if allowed.len() >= 3 {
        [Some(allowed[0]), Some(allowed[1]), Some(allowed[2])]
    } else {
        warnings.push(format!(
            "only {} CPUs: the application, communication and serving threads share them (offload needs a core of its own to pay off)",
            allowed.len()
        ));
        [None, None, None]
    };
    let (per, batches, rate_per) = if a.quick {
        (2_000u64, 7usize, 50_000u64)
    } else {
        (10_000, 15, 300_000)
    };
    let mut round = Vec::new();
    for mode in [
        OffloadMode::Direct,
        OffloadMode::Static,
        OffloadMode::Dynamic,
    ] {
        eprintln!("round trip, {}...", mode.name());
        let r = round_trip(mode, &cpus, per, batches);
        round.push(RttRow {
            mode: mode.name(),
            ns: r.as_ref().ok().copied(),
            ratio_to_direct: None,
            per_batch: per,
            batches,
            error: r.err().map(|e| format!("{e:#}")),
        });
    }
    let direct = round[0].ns;
    for r in &mut round {
        r.ratio_to_direct = r.ns.zip(direct).map(|(m, d)| m / d);
    }
    eprintln!("round trip, dynamic, after an idle pause...");
    let cold = match dynamic_after_idle(&cpus, if a.quick { 50 } else { 200 }) {
        Ok(ns) => Some(ns),
        Err(e) => {
            warnings.push(format!("dynamic round trip after idle: {e:#}"));
            None
        }
    };
    let mut rates = Vec::new();
    for mode in [
        OffloadMode::Direct,
        OffloadMode::Static,
        OffloadMode::Dynamic,
    ] {
        for k in 1..=6 {
            eprintln!("message rate, {}, {k} queues...", mode.name());
            rates.push(
                rate(mode, k, rate_per, 3 * k <= allowed.len()).unwrap_or_else(|e| RateRow {
                    mode: mode.name(),
                    queues: k,
                    messages: 0,
                    wall_s: 0.0,
                    msgs_per_s: 0.0,
                    process_cpu_cores: None,
                    comm_cpu_s: None,
                    sleeps: 0,
                    wakes: 0,
                    error: Some(format!("{e:#}")),
                }),
            );
        }
    }
    let rate_of = |m: &str, k: usize| {
        rates
            .iter()
            .find(|r| r.mode == m && r.queues == k && r.error.is_none())
            .map(|r| r.msgs_per_s)
    };
    let ratio = |m: &str| {
        round
            .iter()
            .find(|r| r.mode == m)
            .and_then(|r| r.ratio_to_direct)
    };
    let grows = |m: &str| rate_of(m, 6).zip(rate_of(m, 1)).map(|(b, a)| b / a);
    let targets = vec![
        target("dynamic round trip / direct", ratio("dynamic"), 1.3, true),
        target("static round trip / direct", ratio("static"), 1.2, true),
        target(
            "static rate, 6 queues / 1 queue",
            grows("static"),
            1.0,
            false,
        ),
        target(
            "dynamic rate, 6 queues / 1 queue",
            grows("dynamic"),
            1.0,
            false,
        ),
    ];
    let report = OffloadReport {
        tool: format!("smelt {}", env!("CARGO_PKG_VERSION")),
        host: smelt_model::host::host_name(),
        rtt_cpus: cpus.iter().flatten().copied().collect(),
        cpus_available: allowed.len(),
        round_trip: round,
        dynamic_after_idle_ns: cold,
        rate: rates,
        targets,
        global: Some(global_section(a)),
        warnings,
    };
    Ok(report)
}

impl BenchReport for OffloadReport {
    fn table(&self) -> String {
        table(self)
    }

    fn failed(&self) -> Vec<String> {
        let mut failed: Vec<String> = self
            .round_trip
            .iter()
            .filter_map(|r| {
                r.error
                    .as_ref()
                    .map(|e| format!("round trip {}: {e}", r.mode))
            })
            .collect();
        failed.extend(self.rate.iter().filter_map(|r| {
            r.error
                .as_ref()
                .map(|e| format!("rate {} {} queues: {e}", r.mode, r.queues))
        }));
        failed
    }
}

/// The global-array section, or what kept it from running.
fn global_section(a: &Common) -> serde_json::Value {
    eprintln!("global arrays: get inside a node and across emulated nodes...");
    super::global::measure(a).unwrap_or_else(|e| serde_json::json!({ "error": format!("{e:#}") }))
}

impl OffloadReport {
    /// Draws the message rate against queues, one line per mode, in `path` (.svg or
    /// .png).
    pub fn plot(&self, path: &std::path::Path) -> Result<()> {
        plot(self, path)
    }
}

/// Message rate against queues, one line per mode.
fn plot(r: &OffloadReport, path: &std::path::Path) -> Result<()> {
    let series = ["direct", "static", "dynamic"]
        .iter()
        .map(|m| {
            let ys = (1..=6)
                .map(|k| {
                    r.rate
                        .iter()
                        .find(|x| x.mode == *m && x.queues == k && x.error.is_none())
                        .map_or(f64::NAN, |x| x.msgs_per_s / 1e6)
                })
                .collect();
            (m.to_string(), ys)
        })
        .collect();
    let chart = smelt_tree::plot::LineChart {
        title: "Active-message rate against queues (= communication threads)".into(),
        x_label: "queues".into(),
        y_label: "million requests/s".into(),
        x: (1..=6).map(|k| k as f64).collect(),
        series,
    };
    smelt_tree::plot::render_lines(&chart, path)
        .map_err(|e| anyhow::anyhow!("option --plot: {e}"))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

fn table(r: &OffloadReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Offload: active-message round trip (µs), CPUs {:?}",
        r.rtt_cpus
    );
    for x in &r.round_trip {
        match (x.ns, &x.error) {
            (Some(ns), _) => {
                let _ = writeln!(
                    s,
                    "  {:<8} {:>8.3}  ×{:.2} direct",
                    x.mode,
                    ns / 1e3,
                    x.ratio_to_direct.unwrap_or(f64::NAN)
                );
            }
            (None, e) => {
                let _ = writeln!(s, "  {:<8} failed: {}", x.mode, e.as_deref().unwrap_or("?"));
            }
        }
    }
    if let Some(c) = r.dynamic_after_idle_ns {
        let _ = writeln!(
            s,
            "  dynamic after a 2 ms idle pause (wake-up): {:.3}",
            c / 1e3
        );
    }
    let _ = writeln!(
        s,
        "Message rate (million requests/s; process CPU cores; comm-thread CPU s)"
    );
    let _ = writeln!(
        s,
        "  {:<8} {:>6} {:>9} {:>7} {:>8} {:>8}",
        "mode", "queues", "Mmsg/s", "cores", "commCPU", "wakes"
    );
    for x in &r.rate {
        if let Some(e) = &x.error {
            let _ = writeln!(s, "  {:<8} {:>6} failed: {e}", x.mode, x.queues);
            continue;
        }
        let _ = writeln!(
            s,
            "  {:<8} {:>6} {:>9.3} {:>7.2} {:>8.3} {:>8}",
            x.mode,
            x.queues,
            x.msgs_per_s / 1e6,
            x.process_cpu_cores.unwrap_or(f64::NAN),
            x.comm_cpu_s.unwrap_or(f64::NAN),
            x.wakes
        );
    }
    let _ = writeln!(s, "Targets");
    for t in &r.targets {
        let _ = writeln!(
            s,
            "  {:<36} {:>7.3} {} {:<5} {}",
            t.name,
            t.value.unwrap_or(f64::NAN),
            t.sense,
            t.limit,
            match t.met {
                Some(true) => "met",
                Some(false) => "NOT met",
                None => "not measured",
            }
        );
    }
    if let Some(g) = &r.global {
        global_table(&mut s, g);
    }
    for w in &r.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    s
}

/// The global-array rows of the table (from the section's JSON).
fn global_table(s: &mut String, g: &serde_json::Value) {
    let _ = writeln!(s, "Global arrays");
    if let Some(e) = g.get("error") {
        let _ = writeln!(s, "  failed: {e}");
        return;
    }
    let num = |v: &serde_json::Value, k: &str| v.get(k).and_then(|x| x.as_f64());
    let inside = &g["inside_node"];
    let _ = writeln!(
        s,
        "  inside a node: get 8 B {:.1} ns, queuepair round trip {:.1} ns",
        num(inside, "get_8b_ns").unwrap_or(f64::NAN),
        num(inside, "queuepair_rtt_ns").unwrap_or(f64::NAN)
    );
    let across = &g["across_nodes"];
    match (across.get("skipped"), across.get("error")) {
        (Some(why), _) => {
            let _ = writeln!(s, "  across nodes: skipped: {}", why.as_str().unwrap_or(""));
        }
        (_, Some(e)) => {
            let _ = writeln!(s, "  across nodes: failed: {e}");
        }
        _ => {}
    }
    let ratios = &g["ratios"];
    for (k, limit) in [
        ("get_8b_over_queuepair_rtt", 1.5),
        ("get_across_nodes_over_mpi_get", 1.2),
    ] {
        match num(ratios, k) {
            Some(v) => {
                let verdict = if v <= limit { "met" } else { "NOT met" };
                let _ = writeln!(s, "  {k:<36} {v:>7.3} <= {limit:<5} {verdict}");
            }
            None => {
                let _ = writeln!(s, "  {k:<36} not measured");
            }
        }
    }
}
