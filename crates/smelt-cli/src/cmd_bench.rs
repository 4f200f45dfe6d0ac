//! `smelt bench`: the benchmarks of `smelt_bench::suite`, one subcommand each
//! (`smelt bench collectives|processes|mpi|large|sync|am|aggregation|offload|tasks`;
//! plain `smelt bench` is `smelt bench collectives`). Each handler turns its arguments
//! into the library's options, calls the measurement, and prints (or writes) the
//! typed report it returns.

use crate::common::{count, seconds};
use anyhow::{Context, Result};
use smelt_bench::suite::{self, BenchReport, Common};
use std::path::{Path, PathBuf};

/// Most members / threads `smelt bench` runs (groups beyond the CPUs share them).
const MAX_THREADS: usize = 1024;

/// Arguments of `smelt bench`: a benchmark, or the collectives benchmark's own
/// arguments (plain `smelt bench` is `smelt bench collectives`).
#[derive(clap::Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_value_name = "BENCHMARK",
    subcommand_help_heading = "Benchmarks",
    after_help = "Without a benchmark, `smelt bench [OPTIONS]` runs `smelt bench collectives [OPTIONS]`.\n\n\
                  Examples:\n  smelt bench --quick\n  smelt bench collectives --model model.json --ops barrier,reduce --json\n  \
                  smelt bench processes --quick\n  smelt bench mpi --quick --plot mpi.svg\n  \
                  smelt bench large --threads 4\n  smelt bench sync --quick\n  smelt bench am --quick\n  \
                  smelt bench aggregation --quick\n  smelt bench offload --quick\n  smelt bench tasks --quick\n\n\
                  `smelt bench BENCHMARK --help` gives each benchmark's options and examples."
)]
pub struct BenchArgs {
    /// The benchmark to run (default: collectives).
    #[command(subcommand)]
    pub cmd: Option<BenchCmd>,
    #[command(flatten)]
    pub collectives: CollectivesArgs,
}

/// The benchmarks of `smelt bench`.
#[derive(clap::Subcommand)]
pub enum BenchCmd {
    /// smelt's collectives over every topology and against the peers (the default).
    ///
    /// smelt's collectives over every topology, next to the simulator's predictions,
    /// smelt's transport and the peers (pthread, OpenMP, MPI, rtrb, crossbeam), each
    /// figure paired with a cache-line floor (the default benchmark).
    #[command(after_help = COLLECTIVES_HELP)]
    Collectives(CollectivesArgs),
    /// The collectives benchmark, smelt's members also as processes.
    ///
    /// The collectives benchmark with smelt's members also as processes (children of
    /// this command, over shared memory), next to thread members and Open MPI with the
    /// same number of ranks on the same CPUs; rows carry "mode": "threads" or
    /// "processes".
    #[command(after_help = PROCESSES_HELP)]
    Processes(CollectivesArgs),
    /// An MPI program's collectives: Open MPI against smelt's interposer.
    ///
    /// An unchanged MPI program's MPI_Bcast, MPI_Reduce, MPI_Allreduce and MPI_Barrier
    /// over message sizes, on Open MPI's default (tuned), its sm component, han, and
    /// smelt through libsmelt_mpi.so (LD_PRELOAD), in one run (mpirun is started by
    /// smelt).
    #[command(after_help = MPI_HELP)]
    Mpi(MpiArgs),
    /// Bandwidth of large messages against memcpy and Open MPI.
    ///
    /// Large messages: broadcast, reduce and allreduce (doubles, sum) of 64 KiB to
    /// 16 MiB, bandwidth against memcpy and Open MPI in one run.
    #[command(after_help = LARGE_HELP)]
    Large(LargeArgs),
    /// Loose against strict synchronization of back-to-back reductions.
    ///
    /// The loose/strict experiment (seed 001 §3): back-to-back reduce of doubles over
    /// message sizes, loose and strict, over the flat tree, k-nomial radix 1, 2, 4, 8,
    /// 16 and smelt's tree.
    #[command(after_help = SYNC_HELP)]
    Sync(SyncArgs),
    /// Active messages: LogP per transport, against the peers and UCX.
    ///
    /// Active messages: the LogP parameters (L, o_s, o_r, g, G) between threads,
    /// between processes and (with smelt-bench-mpi built) over MPI and between emulated
    /// nodes, next to the queuepair round trip, crossbeam-channel's rate and UCX.
    #[command(after_help = AM_HELP)]
    Am(AmArgs),
    /// Message aggregation: histogram and index-gather per scheme.
    ///
    /// Message aggregation (Bale-style histogram and index-gather): the four schemes
    /// (WW, WPs, WsP, PP) and no aggregation; items/s, messages per worker and
    /// index-gather latency.
    #[command(after_help = AGGREGATION_HELP)]
    Aggregation(QuickArgs),
    /// Offload threads: round trip and message rate; global arrays.
    ///
    /// Offload: round trip direct vs static vs dynamic communication threads, message
    /// rate against queues and threads (1 to 6) with CPU time, and global-array get/put
    /// against a queuepair round trip and MPI_Get.
    #[command(after_help = OFFLOAD_HELP)]
    Offload(OffloadArgs),
    /// Fork-join tasks against rayon and the sequential program.
    ///
    /// Fork-join tasks (smelt-tasks' work stealing): fib, UTS and cilksort on 1, 2 and
    /// all workers against rayon's join and the sequential program, and fib across
    /// members stealing through active messages.
    #[command(after_help = TASKS_HELP)]
    Tasks(QuickArgs),
}

const COLLECTIVES_HELP: &str = "Examples:\n  smelt bench collectives --quick\n  \
    smelt bench collectives --model model.json --ops barrier,reduce --json\n  \
    smelt bench collectives --quick --csv > ab-bench.csv\n  \
    smelt bench collectives --topologies binary,adaptive-shuffled --rounds 2000\n\n\
    Every figure is paired with a raw cache-line ping-pong (the floor) measured right \
    before and after it; compare figures through their ratios, which survive the drift \
    of core-to-core latency on virtual machines. C peers are compiled on first use into \
    $SMELT_PEERS_DIR (default ~/.cache/smelt/peers); a missing compiler shows the peer \
    as skipped.";
const PROCESSES_HELP: &str = "Examples:\n  smelt bench processes --quick\n  \
    smelt bench processes --peer-threads 2,4 --json-out processes.json\n\n\
    The options are the collectives benchmark's (smelt bench collectives --help).";
const MPI_HELP: &str = "Examples:\n  smelt bench mpi --quick\n  \
    smelt bench mpi --ranks 2,4 --sizes 8,4096 --plot mpi.svg\n  \
    smelt bench mpi --lib target/release/libsmelt_mpi.so --nodes-of 0 --json\n\n\
    smelt's rows need libsmelt_mpi.so (cargo build --release -p smelt-mpi --features mpi).";
const LARGE_HELP: &str = "Examples:\n  smelt bench large --quick\n  \
    smelt bench large --threads 4 --sizes 1048576,16777216\n  \
    smelt bench large --capacity 4096 --json-out large.json";
const SYNC_HELP: &str = "Examples:\n  smelt bench sync --quick\n  \
    smelt bench sync --threads 8 --sizes 8,4096,65536 --topologies knomial:2,adaptive-shuffled";
const AM_HELP: &str =
    "Examples:\n  smelt bench am --quick\n  smelt bench am --timeout 30 --json-out am.json";
const AGGREGATION_HELP: &str =
    "Examples:\n  smelt bench aggregation --quick\n  smelt bench aggregation --json-out agg.json";
const OFFLOAD_HELP: &str =
    "Examples:\n  smelt bench offload --quick\n  smelt bench offload --plot rate.svg --json-out offload.json";
const TASKS_HELP: &str =
    "Examples:\n  smelt bench tasks --quick\n  smelt bench tasks --json-out tasks.json";

/// Where a report goes.
#[derive(clap::Args, Clone)]
pub struct OutputArgs {
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON report to this file.
    #[arg(long)]
    pub json_out: Option<PathBuf>,
}

/// The machine a benchmark of trees runs on.
#[derive(clap::Args, Clone)]
pub struct MachineArgs {
    /// Model to build the trees from; default: SMELT_MODEL, else this host's cached
    /// probe, else a quick probe of this machine.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// CPUs to use (e.g. `0-7,12`); default: every CPU of the model.
    #[arg(long)]
    pub cpus: Option<String>,
    /// Say on stderr where the model came from (--model, SMELT_MODEL, this host's
    /// cached probe, or a quick probe) and what `auto` picked for each headline row.
    #[arg(long, short = 'v')]
    pub verbose: bool,
}

/// Arguments of `smelt bench collectives` (and `processes`, and plain `smelt bench`).
#[derive(clap::Args, Clone)]
pub struct CollectivesArgs {
    #[command(flatten)]
    pub machine: MachineArgs,
    /// Members of the collective groups (threads); default: one per CPU. More members
    /// than CPUs are placed round-robin on the CPUs (1 to 1024).
    #[arg(long, value_parser = count(1, MAX_THREADS))]
    pub threads: Option<usize>,
    /// Operations: broadcast, reduce, allreduce, barrier, gather, scatter, 2pc
    /// (default: broadcast, reduce, barrier, 2pc).
    #[arg(long, value_delimiter = ',')]
    pub ops: Vec<String>,
    /// Topologies (`smelt tree --algo` names); default: every static tree and smelt's.
    #[arg(long, value_delimiter = ',')]
    pub topologies: Vec<String>,
    /// Also measure the tree in FILE (a tree file from `smelt tree --format json`,
    /// repeatable): its members are the CPUs it names (they must be CPUs of the
    /// model), its ranks, root and send order as saved. Rows are named `file:NAME`.
    #[arg(long = "tree", value_name = "FILE")]
    pub trees: Vec<PathBuf>,
    /// Rounds per collective figure (default 1000, 200 with --quick; 1 to 1000000).
    #[arg(long, value_parser = count(1, 1_000_000))]
    pub rounds: Option<usize>,
    /// Thread (and process, rank) counts for the comparison with the peers: barrier,
    /// broadcast and reduce at each (default 2,8,16; 2,8 with --quick; each 1 to
    /// 1024).
    #[arg(long, value_delimiter = ',', value_parser = count(1, MAX_THREADS))]
    pub peer_threads: Vec<usize>,
    /// Skip the peers (pthread, OpenMP, MPI, rtrb, crossbeam); smelt and the floor only.
    #[arg(long)]
    pub no_peers: bool,
    /// Shorter runs (the main job uses it; well under a minute on a small machine).
    #[arg(long)]
    pub quick: bool,
    /// Kill a peer (or give up on a figure) after this many seconds (default 60, 20
    /// with --quick).
    #[arg(long, value_name = "SECS", value_parser = seconds)]
    pub timeout: Option<f64>,
    /// Bound on the whole run, seconds (default 900, 300 with --quick): when it is
    /// reached, the figures not measured yet are left out, the report says so, and
    /// what was measured is printed.
    #[arg(long, value_name = "SECS", value_parser = seconds)]
    pub time_limit: Option<f64>,
    /// Print the collectives as CSV in the layout of the Smelt machine database's
    /// ab-bench.csv (µs, a _stderr column per topology).
    #[arg(long, conflicts_with = "json")]
    pub csv: bool,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// Arguments of `smelt bench mpi`.
#[derive(clap::Args)]
pub struct MpiArgs {
    /// MPI collectives: bcast, reduce, allreduce, barrier (default: all four).
    #[arg(long, value_delimiter = ',')]
    pub ops: Vec<String>,
    /// Message sizes in bytes (default powers of two from 8 to 65536; fewer with
    /// --quick; each 1 to 64 MiB).
    #[arg(long, value_delimiter = ',', value_parser = count(1, 1 << 26))]
    pub sizes: Vec<usize>,
    /// Rank counts (default 2,8; each 1 to 1024).
    #[arg(long, value_delimiter = ',', value_parser = count(1, MAX_THREADS))]
    pub ranks: Vec<usize>,
    /// Also run 2K ranks with smelt splitting them into emulated nodes of K ranks
    /// (SMELT_RANKS_PER_NODE=K; 1 to 512). Default 2 (4 ranks, 2 nodes); 0: none.
    #[arg(long, value_name = "K", default_value_t = 2, value_parser = count(0, 512))]
    pub nodes_of: usize,
    /// The interposer library (default: $SMELT_MPI_LIB, else libsmelt_mpi.so next to
    /// the smelt executable).
    #[arg(long, value_name = "PATH")]
    pub lib: Option<PathBuf>,
    /// CPUs the ranks run on (e.g. `0-7`); default: every CPU this process may use.
    #[arg(long)]
    pub cpus: Option<String>,
    /// Write a latency-against-size plot per operation and rank count (`FILE.svg`
    /// gives `FILE-bcast-2r.svg`, ...; .svg or .png).
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Fewer sizes and samples.
    #[arg(long)]
    pub quick: bool,
    /// Kill an mpirun after this many seconds (default 180, 60 with --quick).
    #[arg(long, value_name = "SECS", value_parser = seconds)]
    pub timeout: Option<f64>,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// Arguments of `smelt bench large`.
#[derive(clap::Args)]
pub struct LargeArgs {
    #[command(flatten)]
    pub machine: MachineArgs,
    /// Members (default 2; at most 64 per CPU).
    #[arg(long, value_parser = count(1, MAX_THREADS))]
    pub threads: Option<usize>,
    /// Message sizes in bytes, each a multiple of 8 (default 64 KiB to 16 MiB; fewer
    /// with --quick; each 8 B to 64 MiB).
    #[arg(long, value_delimiter = ',', value_parser = count(1, 1 << 26))]
    pub sizes: Vec<usize>,
    /// Slots per channel (each 48 payload bytes; 1 to 1048576). Larger channels carry
    /// larger fragments (half a channel each).
    #[arg(long, default_value_t = 1024, value_parser = count(1, 1 << 20))]
    pub capacity: usize,
    /// Skip Open MPI; smelt, memcpy and the combine only.
    #[arg(long)]
    pub no_peers: bool,
    /// Fewer sizes and rounds.
    #[arg(long)]
    pub quick: bool,
    /// Give up on a figure after this many seconds (default 60; Open MPI 120).
    #[arg(long, value_name = "SECS", value_parser = seconds)]
    pub timeout: Option<f64>,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// Arguments of `smelt bench sync`.
#[derive(clap::Args)]
pub struct SyncArgs {
    #[command(flatten)]
    pub machine: MachineArgs,
    /// Members (default: one per CPU; 1 to 1024).
    #[arg(long, value_parser = count(1, MAX_THREADS))]
    pub threads: Option<usize>,
    /// Message sizes in bytes, each a multiple of 8 (default 8 B to 64 KiB; fewer with
    /// --quick).
    #[arg(long, value_delimiter = ',', value_parser = count(1, 1 << 26))]
    pub sizes: Vec<usize>,
    /// Topologies (`smelt tree --algo` names); default: the flat tree, k-nomial radix
    /// 1, 2, 4, 8, 16 and smelt's tree.
    #[arg(long, value_delimiter = ',')]
    pub topologies: Vec<String>,
    /// Fewer sizes and rounds.
    #[arg(long)]
    pub quick: bool,
    /// Give up on a figure after this many seconds (default 60, 20 with --quick).
    #[arg(long, value_name = "SECS", value_parser = seconds)]
    pub timeout: Option<f64>,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// Arguments of `smelt bench am`.
#[derive(clap::Args)]
pub struct AmArgs {
    /// Fewer rounds and samples.
    #[arg(long)]
    pub quick: bool,
    /// Longest wait for a peer endpoint, seconds.
    #[arg(long, value_name = "SECS", value_parser = seconds)]
    pub timeout: Option<f64>,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// Arguments of `smelt bench aggregation` and `smelt bench tasks`.
#[derive(clap::Args)]
pub struct QuickArgs {
    /// Shorter runs (smaller problems, fewer repetitions).
    #[arg(long)]
    pub quick: bool,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// Arguments of `smelt bench offload`.
#[derive(clap::Args)]
pub struct OffloadArgs {
    /// Shorter runs.
    #[arg(long)]
    pub quick: bool,
    /// Draw the message rate against the number of queues in FILE (.svg or .png).
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// Runs `smelt bench`.
pub fn run(a: BenchArgs) -> Result<()> {
    match a.cmd {
        None => collectives(a.collectives, false),
        Some(BenchCmd::Collectives(c)) => collectives(c, false),
        Some(BenchCmd::Processes(c)) => collectives(c, true),
        Some(BenchCmd::Mpi(m)) => mpi(m),
        Some(BenchCmd::Large(l)) => large(l),
        Some(BenchCmd::Sync(s)) => sync(s),
        Some(BenchCmd::Am(m)) => {
            m.out.check(&[])?;
            let c = quick(m.quick, m.timeout);
            print_report(&m.out, &suite::am::measure(&c)?)
        }
        Some(BenchCmd::Aggregation(q)) => {
            q.out.check(&[])?;
            print_report(&q.out, &suite::aggregation::measure(&quick(q.quick, None))?)
        }
        Some(BenchCmd::Offload(o)) => offload(o),
        Some(BenchCmd::Tasks(q)) => {
            q.out.check(&[])?;
            print_report(&q.out, &suite::tasks::measure(&quick(q.quick, None))?)
        }
    }
}

/// `smelt bench collectives` (`processes`: `smelt bench processes`).
fn collectives(a: CollectivesArgs, processes: bool) -> Result<()> {
    let ops = suite::collectives::parse_ops(&a.ops)?;
    let topologies = suite::collectives::parse_topologies(&a.topologies)?;
    let cpus = cpu_list(a.machine.cpus.as_deref())?;
    // Before measuring: a run must never be thrown away because --json-out cannot be
    // written.
    a.out
        .check(&a.machine.model.as_deref().into_iter().collect::<Vec<_>>())?;
    let started = std::time::Instant::now();
    let (model, src) = machine(&a.machine, cpus.as_deref())?;
    let o = suite::collectives::Options {
        common: Common {
            quick: a.quick,
            timeout: a.timeout,
            time_limit: a.time_limit,
        },
        threads: a.threads,
        ops,
        topologies,
        trees: a.trees,
        rounds: a.rounds,
        peer_threads: a.peer_threads,
        no_peers: a.no_peers,
        processes,
        verbose: a.machine.verbose,
        started: Some(started),
    };
    let r = suite::collectives::measure(&o, &model, src)?;
    emit(&a.out, &r, || if a.csv { r.to_csv() } else { r.to_table() })?;
    if r.cut_short {
        crate::common::warn(&r.warnings[0]);
    }
    fail_if_any(r.failed())
}

/// `smelt bench mpi`.
fn mpi(a: MpiArgs) -> Result<()> {
    a.out.check(&[])?;
    // The plots are FILE-OP-Nr.EXT beside FILE: the same directory, checked again when
    // written.
    if let Some(p) = &a.plot {
        crate::common::check_output("--plot", p, &[])?;
    }
    let o = suite::mpi::Options {
        common: quick(a.quick, a.timeout),
        ops: a.ops,
        sizes: a.sizes,
        ranks: a.ranks,
        nodes_of: a.nodes_of,
        lib: a.lib,
        cpus: cpu_list(a.cpus.as_deref())?,
    };
    let r = suite::mpi::measure(&o)?;
    emit(&a.out, &r, || r.table())?;
    if let Some(p) = &a.plot {
        r.plot(p)?;
    }
    fail_if_any(r.failed())
}

/// `smelt bench large`.
fn large(a: LargeArgs) -> Result<()> {
    a.out.check(&[])?;
    let cpus = cpu_list(a.machine.cpus.as_deref())?;
    let (model, _) = machine(&a.machine, cpus.as_deref())?;
    let o = suite::large::Options {
        common: quick(a.quick, a.timeout),
        threads: a.threads,
        sizes: a.sizes,
        capacity: a.capacity,
        no_peers: a.no_peers,
    };
    print_report(&a.out, &suite::large::measure(&o, &model)?)
}

/// `smelt bench sync`.
fn sync(a: SyncArgs) -> Result<()> {
    a.out.check(&[])?;
    let cpus = cpu_list(a.machine.cpus.as_deref())?;
    let (model, _) = machine(&a.machine, cpus.as_deref())?;
    let members = a.threads.unwrap_or(model.len());
    let o = suite::sync::Options {
        common: quick(a.quick, a.timeout),
        sizes: a.sizes,
        topologies: a.topologies,
    };
    print_report(&a.out, &suite::sync::measure(&o, &model, members)?)
}

/// `smelt bench offload`.
fn offload(a: OffloadArgs) -> Result<()> {
    a.out.check(&[])?;
    if let Some(p) = &a.plot {
        crate::common::check_output("--plot", p, &[])?;
    }
    let r = suite::offload::measure(&quick(a.quick, None))?;
    if let Some(p) = &a.plot {
        r.plot(p)?;
    }
    print_report(&a.out, &r)
}

/// `--cpus`, parsed.
fn cpu_list(s: Option<&str>) -> Result<Option<Vec<u32>>> {
    s.map(|s| smelt_model::parse_cpu_list(s).context("option --cpus"))
        .transpose()
}

/// The model to build trees from ([`suite::bench_model`]) and where it came from.
fn machine(m: &MachineArgs, cpus: Option<&[u32]>) -> Result<(smelt_model::Model, String)> {
    suite::bench_model(m.model.as_deref(), cpus, m.verbose)
}

/// The common options of a benchmark with no time limit of its own.
fn quick(quick: bool, timeout: Option<f64>) -> Common {
    Common {
        quick,
        timeout,
        time_limit: None,
    }
}

impl OutputArgs {
    /// Before measuring: a run must never be thrown away because `--json-out` cannot
    /// be written, and it may replace none of `inputs`.
    fn check(&self, inputs: &[&Path]) -> Result<()> {
        match &self.json_out {
            Some(p) => crate::common::check_output("--json-out", p, inputs),
            None => Ok(()),
        }
    }
}

/// Prints (or writes) a report of the suite, then fails if any of its figures did.
fn print_report<R: BenchReport>(out: &OutputArgs, r: &R) -> Result<()> {
    emit(out, r, || r.table())?;
    fail_if_any(r.failed())
}

/// Writes a report: its JSON to `--json-out` (if given), and to standard output as
/// JSON (`--json`) or as `text()`.
fn emit<T: serde::Serialize>(
    out: &OutputArgs,
    report: &T,
    text: impl FnOnce() -> String,
) -> Result<()> {
    let json = serde_json::to_string_pretty(report).context("cannot serialise the report")?;
    if let Some(p) = &out.json_out {
        smelt_model::write_atomic(p, json.as_bytes()).map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    if out.json {
        println!("{json}");
    } else {
        crate::common::print_text(&text());
    }
    Ok(())
}

/// Ok, or the figures that failed as one error (exit status 1: the report was
/// printed, but incomplete).
fn fail_if_any(failed: Vec<String>) -> Result<()> {
    if failed.is_empty() {
        return Ok(());
    }
    Err(crate::common::Incomplete(format!(
        "{} figure{} failed: {}",
        failed.len(),
        if failed.len() == 1 { "" } else { "s" },
        failed.join("; ")
    ))
    .into())
}

/// The hidden `smelt bench-member`: one member process of `smelt bench processes`.
#[derive(clap::Args)]
pub struct BenchMemberArgs {
    #[arg(long)]
    op: String,
    #[arg(long)]
    rounds: usize,
    #[arg(long)]
    warmup: usize,
    #[arg(long)]
    batch_ns: u64,
}

/// Runs `smelt bench-member`.
pub fn bench_member(a: BenchMemberArgs) -> Result<()> {
    suite::processes::member(&a.op, a.rounds, a.warmup, a.batch_ns)
}

/// The hidden `smelt am-member`: the responding endpoint of `smelt bench am`
/// between processes.
#[derive(clap::Args)]
pub struct AmMemberArgs {
    /// Longest wait for the measurer, in seconds.
    #[arg(long, default_value_t = 60.0)]
    timeout: f64,
}

/// Runs `smelt am-member`.
pub fn am_member(a: AmMemberArgs) -> Result<()> {
    suite::am::member(a.timeout)
}

/// The hidden `smelt tasks-member`: one member process of `smelt bench tasks`'s
/// process rows (joins the job of its environment and serves `--runs` computations).
#[derive(clap::Args)]
pub struct TasksMemberArgs {
    /// Worker threads.
    #[arg(long, value_parser = count(1, 1024))]
    workers: usize,
    /// Computations to take part in.
    #[arg(long, value_parser = count(1, 1_000_000))]
    runs: usize,
}

/// Runs `smelt tasks-member`.
pub fn tasks_member(a: TasksMemberArgs) -> Result<()> {
    suite::tasks::member(a.workers, a.runs)
}
