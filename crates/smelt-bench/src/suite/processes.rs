//! `smelt bench processes`: smelt's collectives with members as processes (children
//! of `smelt bench`, joined over shared memory), measured back-to-back exactly as the
//! thread members are (`smelt_runtime::measure::back_to_back_member` runs in both).

use anyhow::{bail, Context as _, Result};
use smelt_probe::figure::{Metric, PeerResult};
use smelt_runtime::launch::Members;
use smelt_runtime::measure::{back_to_back_member, MeasureConfig, Op};
use smelt_runtime::process::{join_from_env, GroupJob};
use smelt_runtime::{GroupConfig, Rank};
use smelt_tree::Tree;
use std::process::{Command, Stdio};
use std::time::Duration;

/// One member process, the body of the hidden `smelt bench-member` that
/// [`measure_processes`] starts (the current executable must answer that subcommand):
/// measures `op` (a runtime op name) back-to-back; rank 0 prints
/// `{"samples": [...], "iters": n}`.
pub fn member(op: &str, rounds: usize, warmup: usize, batch_ns: u64) -> Result<()> {
    let op = Op::from_name(op).with_context(|| format!("unknown op {op}"))?;
    let mut m = join_from_env()?;
    let cfg = MeasureConfig {
        rounds,
        warmup,
        batch: Duration::from_nanos(batch_ns),
        group: GroupConfig::default(),
    };
    let (samples, iters) = back_to_back_member(&mut m, op, &cfg)?;
    if m.rank() == Rank(0) {
        println!(
            "{}",
            serde_json::json!({ "samples": samples, "iters": iters })
        );
    }
    Ok(())
}

/// Measures `op` back-to-back over `tree` with one process per member, member `r`
/// pinned to `pins[r]` (None: unpinned); returns the per-operation samples.
pub fn measure_processes(
    tree: &Tree,
    pins: &[Option<u32>],
    op: Op,
    cfg: &MeasureConfig,
) -> Result<Vec<f64>> {
    let job = GroupJob::create_guarded(std::slice::from_ref(tree), &cfg.group)?;
    let exe = std::env::current_exe().context("cannot find the smelt executable")?;
    // Started as `smelt launch` starts its members: they die with this process.
    let mut members = Members::new();
    for (rank, pin) in pins.iter().enumerate() {
        let mut cmd = Command::new(&exe);
        cmd.arg("bench-member")
            .args(["--op", op.name()])
            .args(["--rounds", &cfg.rounds.to_string()])
            .args(["--warmup", &cfg.warmup.to_string()])
            .args(["--batch-ns", &(cfg.batch.as_nanos() as u64).to_string()])
            .envs(job.env(Rank(rank)))
            .stdout(if rank == 0 {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stderr(Stdio::piped());
        if let Err(e) = members.spawn(&mut cmd, pin.map(smelt_mesh::CpuId)) {
            job.fail(Rank(rank), "could not be started");
            drop(members); // kills and reaps the members already started
            bail!("cannot start a member process: {e}");
        }
    }
    let mut first = None;
    let mut failure = None;
    for rank in 0..members.len() {
        let c = members.take(Rank(rank)).expect("each member is taken once");
        let out = c.wait_with_output()?;
        if !out.status.success() && failure.is_none() {
            job.fail(Rank(rank), "failed");
            failure = Some(format!(
                "member process {rank}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        if rank == 0 {
            first = Some(out.stdout);
        }
    }
    if let Some(f) = failure {
        bail!("{f}");
    }
    let v: serde_json::Value = serde_json::from_slice(&first.unwrap_or_default())
        .context("member 0 reported no figure")?;
    let samples: Vec<f64> = v["samples"]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
        .unwrap_or_default();
    if samples.is_empty() {
        bail!("member 0 reported no samples");
    }
    Ok(samples)
}

/// The metric a runtime op is reported under.
pub fn metric_of(op: Op) -> Metric {
    match op {
        Op::Broadcast => Metric::Broadcast,
        Op::Reduce => Metric::Reduce,
        _ => Metric::Barrier,
    }
}

/// Wraps a measurement as the peer table's row.
pub fn result(name: String, op: Op, procs: usize, r: Result<Vec<f64>, String>) -> PeerResult {
    PeerResult::measured(
        name,
        metric_of(op),
        procs,
        r.map(|s| smelt_runtime::measure::summarize(&s)),
    )
}
