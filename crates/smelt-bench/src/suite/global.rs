//! The global-arrays section of `smelt bench offload`: a `get` of 8 bytes inside a
//! node against a smelt queuepair round trip between the same two threads
//! (`smelt_bench::global`), and, when the `smelt-bench-mpi global` program sits next to
//! `smelt` (`cargo build --release -p smelt-bench --features mpi --bin smelt-bench-mpi`), a `get` of 8 bytes
//! across emulated nodes against a plain `MPI_Get` + `MPI_Win_flush` of 8 bytes, in
//! the same mpirun job (4 ranks, nodes of 2).
//!
//! Targets (issue 15): get inside a node ≤ 1.5× a queuepair round trip; get across
//! nodes ≤ 1.2× a plain `MPI_Get`. The plain `MPI_Get` is measured on a window of
//! the same kind as the arrays' (`MPI_Win_create` over process memory); the one on an
//! `MPI_Win_allocate` window is reported too (on one host Open MPI may serve it with
//! its shared-memory component, which no window over a real network can use).

use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// The `smelt-bench-mpi global` program next to this executable, if built.
fn find_mpi_program() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.join("smelt-bench-mpi");
    p.is_file().then_some(p)
}

fn across_nodes(quick: bool) -> Result<Value> {
    let Some(prog) = find_mpi_program() else {
        return Ok(json!({
            "skipped": "no smelt-bench-mpi next to smelt (build it with `cargo build --release -p smelt-bench --features mpi --bin smelt-bench-mpi`)"
        }));
    };
    let mpirun = smelt_peers::c::which("mpirun").context("no mpirun (install Open MPI)")?;
    let mut c = Command::new(mpirun);
    c.args(["--oversubscribe", "--bind-to", "none", "-np", "4"])
        .arg(&prog)
        .arg("global")
        .arg("bench")
        .args(if quick { &["--quick"][..] } else { &[][..] })
        .env("SMELT_RANKS_PER_NODE", "2")
        .envs(smelt_peers::c::MPI_ENV);
    let out = smelt_peers::c::run_bounded(c, Duration::from_secs(if quick { 60 } else { 300 }))
        .context("cannot run mpirun")?;
    anyhow::ensure!(
        out.ok,
        "smelt-bench-mpi global under mpirun {}: {}",
        if out.timed_out { "timed out" } else { "failed" },
        out.stderr.trim()
    );
    let line = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("bench "))
        .context("smelt-bench-mpi global printed no bench line")?;
    serde_json::from_str(line).context("smelt-bench-mpi global's bench line")
}

/// Measures the section: rows and ratios as JSON. (Called by the offload benchmark,
/// which puts it in its report's `global` field.)
pub fn measure(a: &super::Common) -> Result<Value> {
    let opts = if a.quick {
        crate::global::Opts::quick()
    } else {
        crate::global::Opts::full()
    };
    let r = crate::global::measure(&opts).context("global arrays inside a node")?;
    let across = match across_nodes(a.quick) {
        Ok(v) => v,
        Err(e) => json!({ "error": format!("{e:#}") }),
    };
    Ok(json!({
        "inside_node": {
            "cpus": r.cpus.map(|(x, y)| vec![x, y]),
            "queuepair_rtt_ns": r.queuepair_rtt_ns,
            "get_8b_ns": r.get_8b_ns,
            "array_rtt_ns": r.array_rtt_ns,
        },
        "across_nodes": across,
        "ratios": {
            "get_8b_over_queuepair_rtt": r.get_over_queuepair(),
            "array_rtt_over_queuepair_rtt": r.array_rtt_over_queuepair(),
            "get_across_nodes_over_mpi_get": across.get("get_across_over_mpi_get").cloned().unwrap_or(Value::Null),
        },
        "targets": {
            "get_8b_over_queuepair_rtt": 1.5,
            "get_across_nodes_over_mpi_get": 1.2,
        },
    }))
}
