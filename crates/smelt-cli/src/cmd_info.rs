//! `smelt info`: what this smelt is and what it would use, like `ompi_info --all` or
//! `ucx_info -c`: the build, every `SMELT_*` setting with its value and where that
//! came from, the model a command given none would use, the tuning file `auto`
//! reads, and the MPI interposer library.

use anyhow::Result;
use clap::Args;
use serde_json::{json, Value};
use smelt_settings::{Audience, Origin};
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(Args)]
#[command(after_help = "Examples:\n  smelt info\n  smelt info --all --json\n  \
                  SMELT_MPI_TREE=binary smelt info | grep MPI_TREE")]
pub struct InfoArgs {
    /// Also list the variables smelt's launchers set for the processes they start
    /// (SMELT_JOB, SMELT_RANK, ...) and those of tests.
    #[arg(long)]
    pub all: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The file beside the `smelt` executable, if there.
fn beside_exe(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.join(name);
    p.is_file().then_some(p)
}

/// The tuning file `auto` reads on this host and what became of it.
fn tuning(model: &smelt_model::Model) -> Value {
    let path = smelt_tree::tuning::cached_path(&model.provenance.host);
    match smelt_tree::tuning::host_file(model) {
        Ok(Some((p, f))) => json!({
            "path": p, "state": "in use",
            "source": format!("{:?}", f.source).to_lowercase(),
        }),
        Ok(None) => json!({ "path": path, "state": "absent: auto predicts (smelt tune measures)" }),
        Err(e) => json!({ "path": path, "state": format!("refused: {e}") }),
    }
}

pub fn run(a: InfoArgs) -> Result<()> {
    let report = info(a.all)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    crate::common::print_text(&text(&report));
    Ok(())
}

/// What `smelt info --json` prints: the build, the host's model and tuning file, and
/// the settings (`all`: every one, else those a user sets or has set).
fn info(all: bool) -> Result<Value> {
    let settings: Vec<Value> = smelt_settings::report()
        .into_iter()
        .filter(|c| all || c.setting.audience == Audience::User || c.value.is_some())
        .map(|c| {
            json!({
                "name": c.setting.name,
                "value": c.value,
                "default": c.setting.default,
                "origin": match c.origin { Origin::Environment => "environment", Origin::Default => "default" },
                "kind": c.setting.kind.describe(),
                "area": c.setting.area,
                "doc": c.setting.doc,
                "problem": c.problem,
            })
        })
        .collect();
    // The model a command given none uses, without the notice it would print.
    let (model, source) = smelt_model::default_model::resolve(None, None)?;
    let mpi_lib = smelt_settings::path(smelt_settings::MPI_LIB)
        .map(|p| (p, "SMELT_MPI_LIB"))
        .or_else(|| beside_exe("libsmelt_mpi.so").map(|p| (p, "beside smelt")));
    let report = json!({
        "version": env!("CARGO_PKG_VERSION"),
        "build": {
            "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
            "target": format!("{}-{}", std::env::consts::ARCH, std::env::consts::OS),
            "c_library": beside_exe("libsmelt.so"),
            "mpi_interposer": mpi_lib.as_ref().map(|(p, from)| json!({ "path": p, "found": from })),
        },
        "host": smelt_model::host::host_name(),
        "model": {
            "source": source.kind(),
            "what": source.to_string(),
            "cpus": smelt_model::format_cpu_list(&model.cpus),
            "cache": smelt_model::host::cached_model_path(),
        },
        "tuning_file": tuning(&model),
        "settings": settings,
    });
    Ok(report)
}

/// The human form of [`info`]'s report.
fn text(report: &Value) -> String {
    let mut s = String::new();
    let b = &report["build"];
    let _ = writeln!(
        s,
        "smelt {} ({} build, {})",
        report["version"].as_str().unwrap_or(""),
        b["profile"].as_str().unwrap_or(""),
        b["target"].as_str().unwrap_or("")
    );
    let path_or = |v: &Value, none: &str| {
        v.as_str()
            .map(str::to_string)
            .unwrap_or_else(|| none.to_string())
    };
    let _ = writeln!(
        s,
        "  C library (libsmelt.so):      {}",
        path_or(
            &b["c_library"],
            "not beside smelt (cargo build -p smelt-capi)"
        )
    );
    let _ = writeln!(
        s,
        "  MPI interposer:               {}",
        match b["mpi_interposer"].as_object() {
            Some(o) => format!(
                "{} ({})",
                o["path"].as_str().unwrap_or(""),
                o["found"].as_str().unwrap_or("")
            ),
            None => "not found (cargo build --release -p smelt-mpi --features mpi)".into(),
        }
    );
    let _ = writeln!(s, "host: {}", report["host"].as_str().unwrap_or(""));
    let _ = writeln!(
        s,
        "  model used when none is given: {} (CPUs {})",
        report["model"]["what"].as_str().unwrap_or(""),
        report["model"]["cpus"].as_str().unwrap_or("")
    );
    let _ = writeln!(
        s,
        "  host model cache:              {}",
        path_or(
            &report["model"]["cache"],
            "none (no XDG_CACHE_HOME or HOME)"
        )
    );
    let _ = writeln!(
        s,
        "  tuning file:                   {} ({})",
        path_or(&report["tuning_file"]["path"], "none"),
        report["tuning_file"]["state"].as_str().unwrap_or("")
    );
    let _ = writeln!(s, "settings (environment variables):");
    for v in report["settings"].as_array().into_iter().flatten() {
        let value = match v["value"].as_str() {
            Some(x) => format!("{x}  [environment]"),
            None => match v["default"].as_str() {
                Some("") | None => "unset".to_string(),
                Some(d) => format!("{d}  [default]"),
            },
        };
        let _ = writeln!(s, "  {:<24} {value}", v["name"].as_str().unwrap_or(""));
        let _ = writeln!(
            s,
            "  {:<24}   {} ({})",
            "",
            v["doc"].as_str().unwrap_or(""),
            v["kind"].as_str().unwrap_or("")
        );
        if let Some(p) = v["problem"].as_str() {
            let _ = writeln!(s, "  {:<24}   REFUSED: {p}", "");
        }
    }
    s
}
