//! `smelt bench aggregation`: the Bale-style benchmarks of message aggregation
//! (TramLib's section IV) over smelt's active messages, in one run:
//!
//! * histogram: random updates to a table spread over the workers, at three stream
//!   lengths per worker: 1 M, where full buffers dominate, and 128 K (with `--quick`
//!   128 K and 16 K, the same 8:1 ratio), the sizes; and N·t·g/4, so that each
//!   destination worker gets a quarter of a buffer from each worker: the regime the
//!   paper's 128 K per worker is in at its scale (thousands of destination workers),
//!   where WW's buffers never fill and its final flushes dominate;
//! * index-gather: random remote reads (a request to the owner, a reply back), with
//!   the latency from a request's insert to its reply's handling;
//!
//! each for the four schemes (WW, WPs, WsP, PP) and for no aggregation (every item
//! its own active message), in jobs of several "processes" (groups of worker threads
//! sharing one endpoint) in this process. Reported: items/s, messages sent per worker,
//! latency, the best scheme over no aggregation, and the paper's orderings.

use super::{BenchReport, Common};
use crate::agg::{self as apps, Run};
use anyhow::Result;
use serde::Serialize;
use smelt_agg::{Scheme, DEFAULT_BUFFER_ITEMS};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The name of the rows measured under mpirun.
const MPI_BENCH: &str = "stream-mpi";

/// Runs per figure (the best is kept).
const REPEATS: usize = 3;

#[derive(Serialize)]
struct Row {
    bench: &'static str,
    /// processes × workers per process.
    setup: String,
    processes: usize,
    workers_per_process: usize,
    scheme: String,
    /// The stream length per worker this row stands for.
    per_worker: u64,
    /// Items per worker actually sent (fewer for no aggregation: see the warnings).
    measured_per_worker: u64,
    items_per_s: Option<f64>,
    messages_per_worker: Option<f64>,
    max_messages_per_worker: Option<f64>,
    latency_mean_ns: Option<f64>,
    latency_median_ns: Option<f64>,
    seconds: Option<f64>,
    error: Option<String>,
}

#[derive(Serialize)]
struct Ratio {
    bench: &'static str,
    setup: String,
    per_worker: u64,
    best_scheme: String,
    best_items_per_s: f64,
    none_items_per_s: f64,
    best_over_none: f64,
}

#[derive(Serialize)]
struct Ordering {
    setup: String,
    what: String,
    holds: bool,
    figures: Vec<(String, f64)>,
}

/// The report of `smelt bench aggregation`.
#[derive(Serialize)]
pub struct AggReport {
    tool: String,
    host: String,
    cpus: usize,
    buffer_items: usize,
    rows: Vec<Row>,
    ratios: Vec<Ratio>,
    orderings: Vec<Ordering>,
    warnings: Vec<String>,
}

fn row(
    bench: &'static str,
    n: usize,
    t: usize,
    scheme: Scheme,
    per: u64,
    r: Result<Run, smelt_agg::AggError>,
) -> Row {
    let (run, error) = match r {
        Ok(r) => (Some(r), None),
        Err(e) => (None, Some(e.to_string())),
    };
    Row {
        bench,
        setup: format!("{n}x{t}"),
        processes: n,
        workers_per_process: t,
        scheme: scheme.name().into(),
        per_worker: per,
        measured_per_worker: per,
        items_per_s: run.as_ref().map(|r| r.items_per_s),
        messages_per_worker: run.as_ref().map(|r| r.messages_per_worker),
        max_messages_per_worker: run.as_ref().map(|r| r.max_messages_per_worker),
        latency_mean_ns: run.as_ref().and_then(|r| r.latency_mean_ns),
        latency_median_ns: run.as_ref().and_then(|r| r.latency_median_ns),
        seconds: run.as_ref().map(|r| r.seconds),
        error,
    }
}

/// Items per worker with which each destination worker gets a quarter of a buffer of
/// `g` from each worker, in a job of `n` processes of `t` workers.
fn flush_dominated(n: usize, t: usize, g: usize) -> u64 {
    (n * t * g / 4) as u64
}

/// The stream lengths per worker of a run.
struct Sizes {
    /// The histogram's long stream.
    long: u64,
    /// Its short stream (an eighth of the long one).
    short: u64,
    /// Index-gather's requests.
    ig: u64,
    /// The most items per worker no aggregation sends.
    direct_cap: u64,
}

impl Sizes {
    fn new(quick: bool) -> Sizes {
        let (long, short, ig, direct_cap) = if quick {
            (128 << 10, 16 << 10, 16 << 10, 16 << 10)
        } else {
            (1 << 20, 128 << 10, 128 << 10, 128 << 10)
        };
        Sizes {
            long,
            short,
            ig,
            direct_cap,
        }
    }

    /// The benchmarks and items per worker of a setup of `n` processes of `t`
    /// workers with buffers of `g`.
    fn benches(&self, n: usize, t: usize, g: usize) -> [(&'static str, u64); 4] {
        [
            ("histogram", self.long),
            ("histogram", self.short),
            ("histogram", flush_dominated(n, t, g)),
            ("index-gather", self.ig),
        ]
    }
}

/// The setups in this process: processes × workers per process.
const SETUPS: &[(usize, usize)] = &[(2, 4), (4, 4)];

/// Measures `smelt bench aggregation`.
pub fn measure(a: &Common) -> Result<AggReport> {
    let g = DEFAULT_BUFFER_ITEMS;
    let sizes = Sizes::new(a.quick);
    let cpus = std::thread::available_parallelism().map_or(1, |c| c.get());
    let mut warnings = Vec::new();
    if cfg!(debug_assertions) {
        warnings.push("this smelt is a debug build: build with --release for figures".into());
    }
    warnings.push(format!(
        "each figure is the best of {REPEATS} runs; no aggregation (none) sends at most {} items per worker (each its own \
         active message); its rate is compared per item",
        sizes.direct_cap
    ));
    let mut rows = Vec::new();
    for &(n, t) in SETUPS {
        for (bench, per) in sizes.benches(n, t, g) {
            for s in Scheme::ALL {
                rows.push(scheme_row(bench, n, t, s, g, per, sizes.direct_cap));
            }
        }
    }
    let mpi_items: u64 = if a.quick { 8 << 10 } else { 32 << 10 };
    mpi_rows(mpi_items, g, &mut rows, &mut warnings);
    let mut cases: Vec<(String, &'static str, u64)> = Vec::new();
    for &(n, t) in SETUPS {
        for (bench, per) in sizes.benches(n, t, g) {
            cases.push((format!("{n}x{t}"), bench, per));
        }
    }
    cases.push(("4x2".into(), MPI_BENCH, mpi_items));
    let mut ratios = Vec::new();
    let mut orderings = Vec::new();
    for (setup, bench, per) in cases {
        let of = |s: Scheme| {
            rows.iter().find(|r| {
                r.bench == bench && r.setup == setup && r.per_worker == per && r.scheme == s.name()
            })
        };
        ratios.extend(best_over_none(&of, bench, &setup, per));
        orderings.extend(paper_orderings(&of, bench, &setup, per, sizes.long));
    }
    let report = AggReport {
        tool: format!("smelt {}", env!("CARGO_PKG_VERSION")),
        host: smelt_model::host::host_name(),
        cpus,
        buffer_items: g,
        rows,
        ratios,
        orderings,
        warnings,
    };
    Ok(report)
}

/// One row: `bench` with scheme `s` in a setup of `n` processes of `t` workers,
/// buffers of `g`, standing for `per` items per worker (no aggregation sends at most
/// `direct_cap`): the best of [`REPEATS`] runs, or the first error.
fn scheme_row(
    bench: &'static str,
    n: usize,
    t: usize,
    s: Scheme,
    g: usize,
    per: u64,
    direct_cap: u64,
) -> Row {
    let measured = if s == Scheme::Direct {
        per.min(direct_cap)
    } else {
        per
    };
    eprintln!("{bench} {n}x{t} {s} ({measured} per worker)...");
    // The best of a few runs: the machine is shared, and noise only slows.
    let mut r: Option<Result<Run, smelt_agg::AggError>> = None;
    for _ in 0..REPEATS {
        let x = if bench == "histogram" {
            apps::histogram(s, n, t, g, measured)
        } else {
            apps::index_gather(s, n, t, g, measured)
        };
        r = Some(match (r, x) {
            (Some(Ok(a)), Ok(b)) => Ok(if b.items_per_s > a.items_per_s { b } else { a }),
            (Some(Err(e)), _) | (_, Err(e)) => Err(e),
            (None, x) => x,
        });
        if matches!(r, Some(Err(_))) {
            break;
        }
    }
    let r = r.expect("at least one run");
    let mut rw = row(bench, n, t, s, per, r);
    rw.measured_per_worker = measured;
    rw
}

/// The rows across MPI ranks on emulated nodes (`items` per worker, buffers of `g`),
/// with smelt-bench-mpi agg when it is built next to smelt, into `rows`; a failure is
/// a row of its own, a missing program a warning.
fn mpi_rows(items: u64, g: usize, rows: &mut Vec<Row>, warnings: &mut Vec<String>) {
    match find_mpi_program() {
        None => warnings.push(
            "no smelt-bench-mpi next to smelt: MPI rows skipped (build it with `cargo build --release -p smelt-bench --features mpi --bin smelt-bench-mpi`)"
                .into(),
        ),
        Some(prog) => {
            eprintln!("stream over MPI ranks (4 ranks, emulated nodes of 2, 2 workers each)...");
            match under_mpi(&prog, items, g) {
                Ok(mut r) => rows.append(&mut r),
                Err(e) => {
                    let mut r = row(MPI_BENCH, 4, 2, Scheme::Direct, items, Err(smelt_agg::AggError::Invalid(String::new())));
                    r.scheme = "all".into();
                    r.error = Some(format!("{e:#}"));
                    rows.push(r);
                }
            }
        }
    }
}

/// The best aggregating scheme over no aggregation in one case (`of`: its row of a
/// scheme), if both were measured.
fn best_over_none<'a>(
    of: &dyn Fn(Scheme) -> Option<&'a Row>,
    bench: &'static str,
    setup: &str,
    per: u64,
) -> Option<Ratio> {
    let none = of(Scheme::Direct).and_then(|r| r.items_per_s)?;
    let (bs, bv) = [Scheme::WW, Scheme::WPs, Scheme::WsP, Scheme::PP]
        .into_iter()
        .filter_map(|s| of(s).and_then(|r| r.items_per_s).map(|v| (s, v)))
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    Some(Ratio {
        bench,
        setup: setup.into(),
        per_worker: per,
        best_scheme: bs.name().into(),
        best_items_per_s: bv,
        none_items_per_s: none,
        best_over_none: bv / none,
    })
}

/// The paper's orderings that one case (`of`: its row of a scheme) can check: the
/// histogram's rates below the `long` stream, index-gather's latencies.
fn paper_orderings<'a>(
    of: &dyn Fn(Scheme) -> Option<&'a Row>,
    bench: &'static str,
    setup: &str,
    per: u64,
    long: u64,
) -> Option<Ordering> {
    if bench == "histogram" && per != long {
        let f = |s: Scheme| of(s).and_then(|r| r.items_per_s);
        let (ww, wps, pp) = (f(Scheme::WW)?, f(Scheme::WPs)?, f(Scheme::PP)?);
        return Some(Ordering {
            setup: setup.into(),
            what: format!("histogram at {per} per worker: WPs and PP beat WW (items/s)"),
            holds: wps > ww && pp > ww,
            figures: vec![("WW".into(), ww), ("WPs".into(), wps), ("PP".into(), pp)],
        });
    }
    if bench == "index-gather" {
        let f = |s: Scheme| of(s).and_then(|r| r.latency_mean_ns);
        let (ww, wps, pp) = (f(Scheme::WW)?, f(Scheme::WPs)?, f(Scheme::PP)?);
        return Some(Ordering {
            setup: setup.into(),
            what: "index-gather mean latency: PP <= WPs <= WW (ns)".into(),
            holds: pp <= wps && wps <= ww,
            figures: vec![("PP".into(), pp), ("WPs".into(), wps), ("WW".into(), ww)],
        });
    }
    None
}

impl BenchReport for AggReport {
    fn table(&self) -> String {
        table(self)
    }

    fn failed(&self) -> Vec<String> {
        self.rows
            .iter()
            .filter_map(|r| {
                r.error
                    .as_ref()
                    .map(|e| format!("{} {} {}: {e}", r.bench, r.setup, r.scheme))
            })
            .collect()
    }
}

fn opt(v: Option<f64>, scale: f64, prec: usize) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{:.*}", prec, v / scale))
}

fn table(r: &AggReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Message aggregation ({} CPUs, buffers of {} items); Mitems/s, messages per worker, latency µs",
        r.cpus, r.buffer_items
    );
    let _ = writeln!(
        s,
        "{:<13} {:<5} {:>8} {:<6} {:>8} {:>10} {:>12} {:>10} {:>10}",
        "bench",
        "setup",
        "per wkr",
        "scheme",
        "measured",
        "Mitems/s",
        "msgs/worker",
        "lat mean",
        "lat med"
    );
    for x in &r.rows {
        let _ = writeln!(
            s,
            "{:<13} {:<5} {:>8} {:<6} {:>8} {:>10} {:>12} {:>10} {:>10}{}",
            x.bench,
            x.setup,
            x.per_worker,
            x.scheme,
            x.measured_per_worker,
            opt(x.items_per_s, 1e6, 2),
            opt(x.messages_per_worker, 1.0, 1),
            opt(x.latency_mean_ns, 1e3, 1),
            opt(x.latency_median_ns, 1e3, 1),
            x.error
                .as_ref()
                .map_or(String::new(), |e| format!("  error: {e}"))
        );
    }
    let _ = writeln!(s, "\nBest scheme over no aggregation (items/s):");
    for x in &r.ratios {
        let _ = writeln!(
            s,
            "  {:<13} {:<5} {:>8}/worker: {:<4} {:>8.1}x",
            x.bench, x.setup, x.per_worker, x.best_scheme, x.best_over_none
        );
    }
    let _ = writeln!(s, "\nThe paper's orderings:");
    for o in &r.orderings {
        let figs: Vec<String> = o
            .figures
            .iter()
            .map(|(k, v)| format!("{k} {v:.0}"))
            .collect();
        let _ = writeln!(
            s,
            "  {} {}: {} ({})",
            o.setup,
            o.what,
            if o.holds { "holds" } else { "does not hold" },
            figs.join(", ")
        );
    }
    for w in &r.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    s
}

/// The `smelt-bench-mpi agg` program next to this executable, if built.
fn find_mpi_program() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.join("smelt-bench-mpi");
    p.is_file().then_some(p)
}

/// `smelt-bench-mpi agg` on 4 ranks in emulated nodes of 2, 2 workers per rank, `items`
/// random 8-byte items per worker for every scheme (checked by checksums at every
/// rank): one row per scheme.
fn under_mpi(prog: &Path, items: u64, g: usize) -> anyhow::Result<Vec<Row>> {
    use anyhow::Context;
    let mpirun = smelt_peers::c::which("mpirun").context("no mpirun (install Open MPI)")?;
    let mut c = Command::new(mpirun);
    c.args(["--oversubscribe", "--bind-to", "none", "-np", "4"])
        .arg(prog)
        .arg("agg")
        .args([
            "--workers",
            "2",
            "--items",
            &items.to_string(),
            "--g",
            &g.to_string(),
        ])
        .env("SMELT_RANKS_PER_NODE", "2")
        .envs(smelt_peers::c::MPI_ENV);
    let out =
        smelt_peers::c::run_bounded(c, Duration::from_secs(300)).context("cannot run mpirun")?;
    anyhow::ensure!(
        out.ok,
        "smelt-bench-mpi agg under mpirun {}: {} {}",
        if out.timed_out { "timed out" } else { "failed" },
        out.stdout
            .lines()
            .filter(|l| l.contains("FAIL"))
            .collect::<Vec<_>>()
            .join("; "),
        out.stderr.trim()
    );
    let field = |l: &str, k: &str| -> Option<String> {
        l.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{k}=")).map(str::to_string))
    };
    let mut rows = Vec::new();
    for l in out.stdout.lines().filter(|l| l.starts_with("agg: PASS ")) {
        let scheme: Scheme = field(l, "scheme").context("a scheme")?.parse()?;
        let workers: f64 = field(l, "workers")
            .and_then(|v| v.parse().ok())
            .context("workers")?;
        let msgs: f64 = field(l, "messages")
            .and_then(|v| v.parse().ok())
            .context("messages")?;
        let rate: f64 = field(l, "items_per_s")
            .and_then(|v| v.parse().ok())
            .context("rate")?;
        let mut r = row(
            MPI_BENCH,
            4,
            2,
            scheme,
            items,
            Err(smelt_agg::AggError::Invalid(String::new())),
        );
        r.error = None;
        r.items_per_s = Some(rate);
        r.messages_per_worker = Some(msgs / workers);
        rows.push(r);
    }
    anyhow::ensure!(
        rows.len() == Scheme::ALL.len(),
        "smelt-bench-mpi agg printed {} rows",
        rows.len()
    );
    Ok(rows)
}
