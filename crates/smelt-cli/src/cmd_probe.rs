//! `smelt probe`: measure pairwise send/receive/round-trip costs between CPUs over
//! smelt's own transport and write a model (the Smelt paper's §3.2 micro-benchmarks).

use anyhow::{Context, Result};
use smelt_model::{format_cpu_list, parse_cpu_list, Model};
use smelt_probe::probe::{probe, ProbeConfig};
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `smelt probe`.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  smelt probe -o model.json\n  smelt probe --quick --cpus 0-7 -o model.json\n  \
                  smelt probe --cache   # for libsmelt_mpi: ~/.cache/smelt/model-<host>.json\n  \
                  smelt probe --sample --time-limit 120 -o big.json   # large machines\n\n\
                  Cost: one thread stays pinned on each CPU for the whole sweep, so a pair costs \
                  only its measurement: ~0.1 ms (--quick) to ~0.2 ms on a 2-CPU VM, a few \
                  times more across sockets. A full probe of n CPUs measures n*(n-1) pairs: \
                  256 CPUs = 65,280 pairs = ~10 s here, ~0.5-2 min on a 2-socket server (the \
                  model's notes give the per-pair time of every run). --sample measures only a \
                  few pairs per class of CPU relationship (same core / L2 / L3 / NUMA node / \
                  package / none): a few dozen pairs on any machine."
)]
pub struct ProbeArgs {
    /// CPUs to probe (e.g. `0-7,12`); default: every CPU this process may use.
    #[arg(long)]
    pub cpus: Option<String>,
    /// Write the model here (JSON); default: print it to stdout (unless --cache).
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// Also keep the model as this host's cached probe,
    /// `$XDG_CACHE_HOME/smelt/model-<host>.json` (else `~/.cache/smelt/...`), where the
    /// MPI interposer (libsmelt_mpi) finds it.
    #[arg(long)]
    pub cache: bool,
    /// Coarse pass: fewer repetitions per pair.
    #[arg(long)]
    pub quick: bool,
    /// Samples per figure per pair (default 64, or 16 with --quick; 1 to 100000).
    #[arg(long, value_parser = crate::common::count(1, 100_000))]
    pub reps: Option<usize>,
    /// Bound the total time (seconds): repetitions are scaled down to fit, and pairs not
    /// reached in time are filled with the median of their class (noted in provenance).
    #[arg(long, value_name = "SECS", value_parser = crate::common::seconds)]
    pub time_limit: Option<f64>,
    /// Measure only K representative pairs per relationship class of the hwloc
    /// hierarchy (default K = 3) and fill the rest; recorded in provenance.notes.
    #[arg(long, value_name = "K", num_args = 0..=1, default_missing_value = "3",
          value_parser = crate::common::count(1, 100_000))]
    pub sample: Option<usize>,
    /// No progress bar and no summary.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// Runs `smelt probe`.
pub fn run(a: ProbeArgs) -> Result<()> {
    let requested = match &a.cpus {
        Some(s) => Some(parse_cpu_list(s).with_context(|| "option --cpus".to_string())?),
        None => None,
    };
    // Before measuring: a probe must never be thrown away because -o cannot be written.
    if let Some(o) = &a.output {
        crate::common::check_output("-o", o, &[])?;
    }
    let cache = if a.cache {
        Some(smelt_model::host::cached_model_path().ok_or_else(|| {
            anyhow::anyhow!("option --cache: neither XDG_CACHE_HOME nor HOME names a directory")
        })?)
    } else {
        None
    };
    // The cache too, before measuring: its directory is made now and must take a file.
    if let Some(p) = &cache {
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir).map_err(|e| {
                anyhow::anyhow!(
                    "option --cache: cannot create {}: {}",
                    dir.display(),
                    smelt_model::files::os_reason(&e)
                )
            })?;
        }
        crate::common::check_output("--cache", p, &[])?;
    }
    let model = probe_model(&a, requested.as_deref())?;
    match &a.output {
        Some(p) => model.save(p).map_err(|e| anyhow::anyhow!("{e}"))?,
        None if cache.is_none() => println!("{}", model.to_json()),
        None => {}
    }
    if let Some(p) = &cache {
        model
            .save(p)
            .map_err(|e| anyhow::anyhow!("option --cache: {e}"))?;
        if !a.quiet {
            eprintln!(
                "cached as {}",
                smelt_model::text::escape_line(&p.display().to_string())
            );
        }
    }
    Ok(())
}

/// Discovers the topology, probes, and assembles the model.
fn probe_model(a: &ProbeArgs, requested: Option<&[u32]>) -> Result<Model> {
    let disc = smelt_model::topology::discover(requested)?;
    let mut cfg = if a.quick {
        ProbeConfig::quick(disc.cpus.clone())
    } else {
        ProbeConfig::new(disc.cpus.clone())
    };
    if let Some(r) = a.reps {
        cfg.reps = r;
    }
    cfg.time_limit = a.time_limit.map(Duration::from_secs_f64);
    cfg.sample = a.sample;
    cfg.hierarchy = disc.hierarchy.clone();
    cfg.progress = !a.quiet;
    let r = probe(&cfg).map_err(anyhow::Error::msg)?;
    let mut m = r
        .to_model(disc.to_model_skeleton())
        .map_err(anyhow::Error::msg)?;
    m.provenance.notes.push(format!(
        "parameters: cpus {}, {}reps {}{}{}",
        format_cpu_list(&r.cpus),
        if a.quick { "--quick, " } else { "" },
        r.reps,
        a.time_limit
            .map(|t| format!(", --time-limit {t}"))
            .unwrap_or_default(),
        a.sample
            .map(|k| format!(", --sample {k}"))
            .unwrap_or_default()
    ));
    if !a.quiet {
        summary(&m, &r);
    }
    Ok(m)
}

fn off_diagonal_median(m: &[Vec<f64>]) -> f64 {
    let mut v: Vec<f64> = m
        .iter()
        .enumerate()
        .flat_map(|(i, row)| {
            row.iter()
                .enumerate()
                .filter(move |(j, _)| *j != i)
                .map(|(_, x)| *x)
        })
        .collect();
    v.sort_by(f64::total_cmp);
    smelt_tree::stats::median_sorted(&v)
}

/// The human summary, on stderr (stdout may carry the model).
fn summary(m: &Model, r: &smelt_probe::probe::ProbeResult) {
    eprintln!(
        "probed {} CPUs ({}) on {}: {} of {} ordered pairs measured in {:.3} s ({} samples per figure)",
        m.len(),
        format_cpu_list(&m.cpus),
        smelt_model::text::escape_line(&m.provenance.host),
        r.measured,
        r.pairs,
        r.elapsed.as_secs_f64(),
        r.reps
    );
    if m.len() > 1 {
        eprintln!(
            "median over pairs: t_send {:.1} ns, t_receive {:.1} ns, round trip {:.1} ns (relative spread {:.0}% / {:.0}% / {:.0}%)",
            off_diagonal_median(&m.send),
            off_diagonal_median(&m.receive),
            off_diagonal_median(m.rtt.as_deref().unwrap_or(&[])),
            r.spread[0] * 100.0,
            r.spread[1] * 100.0,
            r.spread[2] * 100.0
        );
    }
    for n in &r.notes[1..] {
        eprintln!("note: {}", smelt_model::text::escape_line(n));
    }
}
