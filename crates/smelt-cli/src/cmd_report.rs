//! `smelt report`: probe this machine and run every benchmark that applies to it within
//! a time limit (progress and an estimate of the time left on stderr), then write one
//! self-contained HTML page (inline SVG and PNG, inline CSS, no network) and the JSON it
//! was made from. Each step is the `smelt` command a user would run, started as a child
//! with its own time share and a hard bound; a step that cannot run here (no MPI, no
//! interposer library) or fails is named in the page with the reason.

use anyhow::{bail, Result};
use clap::Args;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

#[derive(Args)]
#[command(
    after_help = "Examples:\n  smelt report                         # about 10 minutes: smelt-report/report.html\n  \
                  smelt report --time-limit 120 --out r  # a short look\n  \
                  smelt report --model m.json --only machine,trees,collectives"
)]
pub struct ReportArgs {
    /// Directory for report.html, report.json and every step's output.
    #[arg(long, default_value = "smelt-report")]
    pub out: PathBuf,
    /// Seconds for the whole report: each step gets a share of what is left and is
    /// stopped at twice its share (plus 20 s), and at most 10 s after the limit; no
    /// step starts with less than 5 s left. A report cut short says so.
    #[arg(long, default_value = "600", value_parser = crate::common::seconds)]
    pub time_limit: f64,
    /// Use this model instead of probing the machine.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Only these sections (comma-separated): machine, trees, collectives, processes,
    /// mpi, am, aggregation, offload, tasks, large, tuning.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
}

/// One step: a section of the page and the `smelt` command that measures it.
struct Step {
    id: &'static str,
    title: &'static str,
    /// Relative share of the time budget.
    weight: f64,
    /// `smelt` arguments, split at spaces; `{model}`, `{json}` and `{secs}` are
    /// filled in.
    args: &'static str,
    /// Why the step cannot run here, if it cannot.
    unavailable: fn() -> Option<String>,
}

fn always() -> Option<String> {
    None
}

fn no_mpi() -> Option<String> {
    if smelt_peers::c::which("mpirun").is_none() {
        return Some("no mpirun on PATH (scripts/deps.sh installs Open MPI)".into());
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("libsmelt_mpi.so")));
    let lib = smelt_settings::path(smelt_settings::MPI_LIB).or(beside);
    match lib {
        Some(l) if l.is_file() => None,
        _ => Some(
            "no interposer library (cargo build --release -p smelt-mpi --features mpi, or SMELT_MPI_LIB)".into(),
        ),
    }
}

const STEPS: &[Step] = &[
    Step {
        id: "tuning",
        title: "The tuning table auto uses",
        weight: 2.0,
        args: "tune --quick --model {model} --time-limit {secs}",
        unavailable: always,
    },
    Step {
        id: "collectives",
        title: "Collectives against the peers (threads)",
        weight: 3.0,
        args: "bench --quick --model {model} --time-limit {secs} --json-out {json}",
        unavailable: always,
    },
    Step {
        id: "processes",
        title: "Collectives as processes",
        weight: 2.0,
        args: "bench processes --quick --model {model} --time-limit {secs} --json-out {json}",
        unavailable: always,
    },
    Step {
        id: "mpi",
        title: "The MPI interposer against Open MPI",
        weight: 2.0,
        args: "bench mpi --quick --json-out {json}",
        unavailable: no_mpi,
    },
    Step {
        id: "am",
        title: "Active messages (LogP)",
        weight: 1.0,
        args: "bench am --quick --json-out {json}",
        unavailable: always,
    },
    Step {
        id: "aggregation",
        title: "Aggregation",
        weight: 1.0,
        args: "bench aggregation --quick --json-out {json}",
        unavailable: always,
    },
    Step {
        id: "offload",
        title: "Offload",
        weight: 1.0,
        args: "bench offload --quick --json-out {json}",
        unavailable: always,
    },
    Step {
        id: "tasks",
        title: "Tasks (fork-join work stealing)",
        weight: 1.0,
        args: "bench tasks --quick --json-out {json}",
        unavailable: always,
    },
    Step {
        id: "large",
        title: "Large messages",
        weight: 1.0,
        args: "bench large --quick --model {model} --json-out {json}",
        unavailable: always,
    },
];

/// How long a step may go on after the deadline of `--time-limit` to finish its
/// report (a step that takes `--time-limit` stops starting figures at its share; one
/// that does not is stopped here).
const GRACE: f64 = 10.0;

/// A step is started only with at least this many seconds left before the deadline.
const MIN_STEP: f64 = 5.0;

/// The report's deadline: `--time-limit` seconds from its start.
struct Clock {
    start: Instant,
    limit: f64,
}

impl Clock {
    fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Seconds left before the deadline (negative past it).
    fn left(&self) -> f64 {
        self.limit - self.elapsed()
    }

    /// The hard bound of a child that wants `secs`: never more than [`GRACE`] past
    /// the deadline.
    fn bound(&self, secs: f64) -> Duration {
        Duration::from_secs_f64(secs.min(self.left().max(0.0) + GRACE).max(0.0))
    }
}

/// What became of a step.
fn outcome(id: &str, status: &str, secs: f64, why: Option<String>) -> Value {
    json!({ "id": id, "status": status, "seconds": (secs * 10.0).round() / 10.0, "why": why })
}

/// Runs `smelt args` bounded by `limit`: its standard output, or `Err(why)` when it
/// failed or ran out of time. Everything it printed is kept in `log`.
pub(crate) fn run_smelt(
    args: &[String],
    limit: Duration,
    log: &Path,
) -> std::result::Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find smelt: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.args(args);
    let ran = smelt_peers::c::run_bounded(cmd, limit).map_err(|e| e.to_string())?;
    let _ = std::fs::write(
        log,
        format!("{}\n--- stderr ---\n{}", ran.stdout, ran.stderr),
    );
    if ran.timed_out {
        return Err(format!(
            "stopped at its bound of {:.0} s",
            limit.as_secs_f64()
        ));
    }
    if !ran.ok {
        let last = ran.stderr.lines().rev().find(|l| !l.trim().is_empty());
        return Err(last.unwrap_or("failed").trim().to_string());
    }
    Ok(ran.stdout)
}

/// The steps asked for: every one, or those of `--only` (unknown names are an error).
fn chosen(a: &ReportArgs) -> Result<Vec<&'static str>> {
    let all: Vec<&'static str> = ["machine", "trees"]
        .into_iter()
        .chain(STEPS.iter().map(|s| s.id))
        .collect();
    if a.only.is_empty() {
        return Ok(all);
    }
    for o in &a.only {
        if !all.contains(&o.trim()) {
            bail!(
                "option --only: unknown section '{o}' (known: {})",
                all.join(", ")
            );
        }
    }
    Ok(all
        .into_iter()
        .filter(|s| a.only.iter().any(|o| o.trim() == *s))
        .collect())
}

/// One progress line: step, elapsed time and the estimate of what is left.
fn progress(i: usize, n: usize, what: &str, clock: &Clock) {
    eprintln!(
        "[{i}/{n}] {what} ({:.0} s elapsed, at most {:.0} s left)",
        clock.elapsed(),
        clock.left().max(0.0)
    );
}

pub fn run(a: ReportArgs) -> Result<()> {
    let wanted = chosen(&a)?;
    std::fs::create_dir_all(&a.out)
        .map_err(|e| anyhow::anyhow!("option --out: cannot create {}: {e}", a.out.display()))?;
    let html_path = a.out.join("report.html");
    let json_path = a.out.join("report.json");
    crate::common::check_output("--out", &html_path, &[])?;
    crate::common::check_output("--out", &json_path, &[])?;
    let clock = Clock {
        start: Instant::now(),
        limit: a.time_limit,
    };
    let steps: Vec<&Step> = STEPS.iter().filter(|s| wanted.contains(&s.id)).collect();
    let n = steps.len() + 1;
    let mut outcomes = Vec::new();
    let mut data = serde_json::Map::new();
    // The model: given, or probed (and kept as this host's cached model).
    progress(1, n, "the machine: probe", &clock);
    let model_path = the_model(&a, &clock, &mut outcomes)?;
    let model = smelt_model::Model::load(&model_path).map_err(|e| anyhow::anyhow!("{e}"))?;
    if wanted.contains(&"machine") || wanted.contains(&"trees") {
        let bound = |secs: f64| clock.bound(secs);
        data.insert(
            "machine".into(),
            crate::report_html::machine_data(&model, &model_path, &a.out, &bound),
        );
        data.insert(
            "trees".into(),
            crate::report_html::trees_data(&model_path, &a.out, &bound),
        );
    }
    // What the time limit left out: steps not started, steps stopped at the deadline.
    let mut cut = Vec::new();
    let mut weight_left: f64 = steps.iter().map(|s| s.weight).sum();
    for (i, s) in steps.iter().enumerate() {
        progress(i + 2, n, s.title, &clock);
        let left = clock.left();
        let share = (left * s.weight / weight_left).max(MIN_STEP);
        weight_left -= s.weight;
        if let Some(why) = (s.unavailable)() {
            outcomes.push(outcome(s.id, "skipped", 0.0, Some(why)));
            continue;
        }
        if left < MIN_STEP {
            let why = format!(
                "not started: the time limit of {} s was reached",
                clock.limit
            );
            outcomes.push(outcome(s.id, "skipped", 0.0, Some(why)));
            cut.push(format!("{} not started", s.id));
            continue;
        }
        let (o, stopped) = run_step(s, &a.out, &model_path, &model, share, &clock, &mut data)?;
        if stopped {
            cut.push(format!("{} stopped at the limit", s.id));
        }
        outcomes.push(o);
    }
    let warnings: Vec<String> = (!cut.is_empty())
        .then(|| {
            format!(
                "cut short by --time-limit {}: {}",
                clock.limit,
                cut.join(", ")
            )
        })
        .into_iter()
        .collect();
    let report = json!({
        "tool": format!("smelt {}", env!("CARGO_PKG_VERSION")),
        "host": model.provenance.host,
        "cpu_model": model.provenance.cpu_model,
        "cpus": smelt_model::format_cpu_list(&model.cpus),
        "model": model_path,
        "seconds": (clock.elapsed() * 10.0).round() / 10.0,
        "time_limit": clock.limit,
        "cut_short": !cut.is_empty(),
        "warnings": warnings,
        "sections": wanted,
        "steps": outcomes,
        "data": data,
    });
    smelt_model::write_atomic(
        &json_path,
        serde_json::to_string_pretty(&report)?.as_bytes(),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let html = crate::report_html::page(&report);
    smelt_model::write_atomic(&html_path, html.as_bytes()).map_err(|e| anyhow::anyhow!("{e}"))?;
    eprintln!(
        "wrote {} and {} in {:.0} s",
        html_path.display(),
        json_path.display(),
        clock.elapsed()
    );
    for w in &warnings {
        crate::common::warn(w);
    }
    Ok(())
}

/// The model file: `--model`, else a quick probe kept as `model.json` in the output
/// folder (and as this host's cached model); its outcome goes to `outcomes`. The probe
/// is bounded by the deadline too, but always gets its own time limit and [`GRACE`]:
/// there is no report without it.
fn the_model(a: &ReportArgs, clock: &Clock, outcomes: &mut Vec<Value>) -> Result<PathBuf> {
    if let Some(m) = &a.model {
        return Ok(m.clone());
    }
    let m = a.out.join("model.json");
    let secs = (clock.limit * 0.1).max(5.0);
    let args: Vec<String> = ["probe", "--quick", "--cache", "--quiet", "--time-limit"]
        .iter()
        .map(|s| s.to_string())
        .chain([format!("{secs:.0}"), "-o".into(), m.display().to_string()])
        .collect();
    let bound = (secs * 3.0 + 30.0).min(clock.left().max(secs) + GRACE);
    let t = Instant::now();
    let r = run_smelt(
        &args,
        Duration::from_secs_f64(bound),
        &a.out.join("probe.log"),
    );
    outcomes.push(outcome(
        "probe",
        if r.is_ok() { "ok" } else { "failed" },
        t.elapsed().as_secs_f64(),
        r.clone().err(),
    ));
    if let Err(e) = r {
        bail!(
            "the probe failed: {e} (see {})",
            a.out.join("probe.log").display()
        );
    }
    Ok(m)
}

/// Runs step `s` as a `smelt` command within twice its `share` of seconds (plus 20),
/// and never more than [`GRACE`] past the deadline of `clock`; its JSON (or the host's
/// tuning file) into `data`. Returns its outcome, and whether the deadline stopped it.
fn run_step(
    s: &Step,
    out: &Path,
    model_path: &Path,
    model: &smelt_model::Model,
    share: f64,
    clock: &Clock,
    data: &mut serde_json::Map<String, Value>,
) -> Result<(Value, bool)> {
    let json_file = out.join(format!("{}.json", s.id));
    let args: Vec<String> = s
        .args
        .split_whitespace()
        .map(|x| match x {
            "{model}" => model_path.display().to_string(),
            "{json}" => json_file.display().to_string(),
            "{secs}" => format!("{:.0}", share.max(MIN_STEP)),
            other => other.to_string(),
        })
        .collect();
    // Only what this run writes counts (not a previous report's file in `out`).
    let _ = std::fs::remove_file(&json_file);
    let t = Instant::now();
    let wanted = share * 2.0 + 20.0;
    let bound = clock.bound(wanted);
    let r = run_smelt(&args, bound, &out.join(format!("{}.log", s.id)));
    // Stopped at its bound, which the deadline had made shorter than its own.
    let stopped = r.is_err() && bound.as_secs_f64() < wanted && t.elapsed() >= bound;
    let r = r.map_err(|e| {
        if stopped {
            format!(
                "stopped {GRACE:.0} s after the time limit of {} s was reached",
                clock.limit
            )
        } else {
            e
        }
    });
    // A run that printed its report but lost some figures still wrote its JSON.
    let got = std::fs::read_to_string(&json_file)
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok());
    if s.id == "tuning" {
        if let Ok(Some((_, f))) = smelt_tree::tuning::host_file(model) {
            data.insert("tuning".into(), serde_json::from_str(&f.to_json_string())?);
        }
    } else if let Some(v) = got {
        data.insert(s.id.into(), v);
    }
    let status = match (&r, data.contains_key(s.id)) {
        (Ok(_), _) => "ok",
        (Err(_), true) => "partial",
        (Err(_), false) => "failed",
    };
    Ok((
        outcome(s.id, status, t.elapsed().as_secs_f64(), r.err()),
        stopped,
    ))
}
