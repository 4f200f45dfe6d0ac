//! `smelt`: measure this machine, build broadcast trees tuned to it, and run collectives.
//!
//! Every subcommand prints human output by default; those that produce data take
//! `--json`. A user mistake (bad file, unknown CPU, ...) prints one `error:` line and
//! exits with status 2, writing nothing; a run that printed its results but could
//! not obtain all of them (a failed `smelt bench` figure) exits with status 1.

#![forbid(unsafe_code)]

mod cmd_bench;
mod cmd_evaluate;
mod cmd_info;
mod cmd_kvs;
mod cmd_kvs_sim;
mod cmd_launch;
mod cmd_model;
mod cmd_probe;
mod cmd_report;
mod cmd_run;
mod cmd_tree;
mod cmd_tune;
mod common;
mod report_html;

use clap::{ArgMatches, CommandFactory, FromArgMatches as _, Parser, Subcommand};

/// The ids of every option or argument that names a file or folder smelt *writes*
/// (`-o/--output`, `--json-out`, `--plot`, `--history`, `smelt tune export`'s RULES, `smelt
/// run --out`). Every other path on the command line is an input: see
/// [`declare_command_line_inputs`].
const OUTPUT_ARGS: &[&str] = &[
    "output",
    "out",
    "json_out",
    "plot",
    "history",
    "export_ompi",
];

/// Declares every path named on the command line that is not an output
/// ([`OUTPUT_ARGS`]) and exists as an input ([`smelt_model::files::declare_inputs`]),
/// so that no output of any subcommand — an option's file, the tuning file, the
/// host's cached model — can overwrite one, whichever option names it and through
/// whichever link. One check for every subcommand, made before any work.
fn declare_command_line_inputs(m: &ArgMatches) {
    let mut m = m;
    loop {
        for id in m.ids() {
            let id = id.as_str();
            if OUTPUT_ARGS.contains(&id) {
                continue;
            }
            let Ok(Some(values)) = m.try_get_raw(id) else {
                continue;
            };
            let paths = values
                .map(std::path::Path::new)
                .filter(|p| std::fs::symlink_metadata(p).is_ok())
                .map(|p| p.to_path_buf());
            smelt_model::files::declare_inputs(paths);
        }
        match m.subcommand() {
            Some((_, sub)) => m = sub,
            None => break,
        }
    }
}

#[derive(Parser)]
#[command(
    name = "smelt",
    version,
    about = "Machine-aware broadcast trees and collectives for multicores",
    long_about = "smelt measures the machine it runs on (pairwise send/receive costs between \
                  CPUs), builds broadcast trees tuned to it (Smelt's adaptive tree and the \
                  classic static trees), predicts their latency, and runs broadcast, reduce \
                  and barrier over cache-line message channels.\n\n\
                  Typical flow:\n  smelt probe -o model.json\n  smelt model show model.json\n  \
                  smelt tree --model model.json --format svg > tree.svg\n  \
                  smelt evaluate --model model.json\n  smelt bench --model model.json"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Probe this machine, build its trees, benchmark the collectives against the
    /// peers, print the comparison (the main job).
    Run(cmd_run::RunArgs),
    /// Measure pairwise send/receive/round-trip costs between CPUs and write a model.
    Probe(cmd_probe::ProbeArgs),
    /// Import another tool's measurements (Smelt machine database, core-to-core-latency CSV).
    Import(cmd_model::ImportArgs),
    /// Inspect a model file.
    #[command(subcommand)]
    Model(cmd_model::ModelCmd),
    /// Build a broadcast tree from a model and print or draw it.
    Tree(cmd_tree::TreeArgs),
    /// Predict every topology's time for every operation from a model.
    Evaluate(cmd_evaluate::EvaluateArgs),
    /// Measure collectives on this machine over every topology, next to the peers.
    Bench(cmd_bench::BenchArgs),
    /// Find the fastest tree per operation, message size and group on this machine
    /// (or predict it from a model): the tuning file that `auto` uses.
    Tune(cmd_tune::TuneArgs),
    /// Start N processes as one job on this host (like mpirun for one machine).
    Launch(cmd_launch::LaunchArgs),
    /// Probe this machine and run every benchmark that applies, within a time limit;
    /// write one self-contained HTML page and the JSON it was made from.
    Report(cmd_report::ReportArgs),
    /// What this smelt is and would use: the build, every SMELT_* setting with its
    /// value and origin, the default model, the tuning file, the MPI interposer.
    Info(cmd_info::InfoArgs),
    /// Run the replicated key-value store (1Paxos / 2PC over smelt's tree) under load.
    Kvs(cmd_kvs::KvsArgs),
    /// One member process of `smelt bench processes` (internal).
    #[command(hide = true)]
    BenchMember(cmd_bench::BenchMemberArgs),
    /// The responding endpoint of `smelt bench am` between processes (internal).
    #[command(hide = true)]
    AmMember(cmd_bench::AmMemberArgs),
    /// One replica process of `smelt kvs --processes` (internal).
    #[command(hide = true)]
    KvsReplica,
    /// One member process of `smelt bench tasks` (internal).
    #[command(hide = true)]
    TasksMember(cmd_bench::TasksMemberArgs),
}

fn main() {
    let parsed = Cli::command()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m).map(|c| (c, m)));
    let cli = match parsed {
        Ok((c, m)) => {
            declare_command_line_inputs(&m);
            c
        }
        Err(e) => {
            use clap::error::ErrorKind;
            match e.kind() {
                // --help and --version: clap's own output, exit 0.
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                    let _ = e.print();
                    std::process::exit(0);
                }
                // `smelt` or `smelt model` alone: name the subcommands.
                ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                    let (path, cmd) = command_path();
                    let subs: Vec<&str> = cmd.get_subcommands().map(|c| c.get_name()).collect();
                    common::fail(&format!(
                        "'{path}' needs a subcommand: {}; try '{path} --help'",
                        subs.join(", ")
                    ))
                }
                // Every usage mistake: one line and a hint, exit 2.
                _ => {
                    let path = command_path().0;
                    let line = common::usage_line(&e.render().to_string(), &path);
                    common::fail(&match renamed(&e, &path) {
                        Some(now) => line.replacen("; try '", &format!(" ({now}); try '"), 1),
                        None => line,
                    })
                }
            }
        }
    };
    let res = match cli.cmd {
        Cmd::Run(a) => cmd_run::run(a),
        Cmd::Probe(a) => cmd_probe::run(a),
        Cmd::Import(a) => cmd_model::import(a),
        Cmd::Model(c) => cmd_model::run(c),
        Cmd::Tree(a) => cmd_tree::tree(a),
        Cmd::Evaluate(a) => cmd_evaluate::evaluate(a),
        Cmd::Bench(a) => cmd_bench::run(a),
        Cmd::Tune(a) => cmd_tune::run(a),
        Cmd::Launch(a) => cmd_launch::run(a),
        Cmd::Kvs(a) => cmd_kvs::run(a),
        Cmd::Info(a) => cmd_info::run(a),
        Cmd::Report(a) => cmd_report::run(a),
        Cmd::BenchMember(a) => cmd_bench::bench_member(a),
        Cmd::AmMember(a) => cmd_bench::am_member(a),
        Cmd::KvsReplica => cmd_kvs::replica_process(),
        Cmd::TasksMember(a) => cmd_bench::tasks_member(a),
    };
    if let Err(e) = res {
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        // One line, no backtrace: these are user-facing errors.
        let msg = format!("{e:#}");
        if let Some(inc) = e.downcast_ref::<common::Incomplete>() {
            eprintln!(
                "error: {}",
                smelt_model::text::escape_line(&inc.0.replace('\n', " "))
            );
            std::process::exit(common::EXIT_INCOMPLETE);
        }
        common::fail(&msg);
    }
}

/// Where an option that became a subcommand went (`smelt bench --mpi` is `smelt bench
/// mpi`, `smelt tune --check` is `smelt tune check`), for the usage error of a user
/// who typed the old form.
fn renamed(e: &clap::Error, path: &str) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let arg = arg.split('=').next().unwrap_or(arg);
    let now = match (path, arg) {
        ("smelt bench", "--processes" | "--mpi" | "--large" | "--sync" | "--am")
        | ("smelt bench", "--aggregation" | "--offload" | "--tasks") => {
            format!("smelt bench {}", &arg[2..])
        }
        ("smelt bench", "--mpi-ranks" | "--mpi-nodes-of" | "--mpi-lib") => {
            format!("smelt bench mpi --{}", &arg[6..])
        }
        ("smelt tune", "--check" | "--predict" | "--compare") => {
            format!("smelt tune {}", &arg[2..])
        }
        ("smelt tune", "--export-ompi") => "smelt tune export RULES".to_string(),
        _ => return None,
    };
    Some(format!("it is '{now}' now"))
}

/// The subcommand the user typed (`smelt model show`) and its clap command, from the
/// command line: for the hint of a usage error.
fn command_path() -> (String, clap::Command) {
    let mut cmd = Cli::command();
    let mut path = vec!["smelt".to_string()];
    for a in std::env::args_os().skip(1) {
        let Some(a) = a.to_str() else { break };
        if a.starts_with('-') {
            continue;
        }
        match cmd.find_subcommand(a).cloned() {
            Some(sub) => {
                path.push(sub.get_name().to_string());
                cmd = sub;
            }
            None => break,
        }
    }
    (path.join(" "), cmd)
}
