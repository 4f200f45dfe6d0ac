//! `smelt launch`: start N processes as one job on this host, like `mpirun` for one
//! machine.

use anyhow::{bail, Context as _, Result};
use clap::Args;
use smelt_model::text::escape_line;
use smelt_model::{parse_cpu_list, Model};
use smelt_runtime::launch::Members;
use smelt_runtime::process::GroupJob;
use smelt_runtime::world::{ModelRef, WorldBuilder};
use smelt_runtime::{CpuId, GroupConfig, Rank};
use smelt_transport::allowed_cpus;
use smelt_tree::tuning::AlgorithmTable;
use smelt_tree::{Topology, Tree};
use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args)]
#[command(
    about = "Start N processes as one smelt job on this host",
    long_about = "Starts N copies of PROGRAM as one job: their queuepairs live in shared memory \
    (one segment per job, created 0600 under an unguessable name in /dev/shm, removed once \
    every member joined), each member is pinned to its CPU and joins the job's world with \
    smelt_mesh::World::from_env (Rust; every service is made from the world), \
    smelt_runtime::process::join_from_env (the job's tree collectives) or smelt_job_join (C). \
    Members get SMELT_JOB, SMELT_JOB_KEY, SMELT_RANK, SMELT_SIZE and SMELT_CPU in their \
    environment; the world also tells them the tree, the CPU of every rank and --model. \
    Members run in a process group of their own and die with the launcher (even one \
    killed by SIGKILL, which leaves no segment either). SIGINT, SIGTERM, SIGHUP and \
    SIGQUIT are forwarded to the members (and their children); members still running --grace seconds later are killed, and a second \
    interrupt kills them at once. If a member fails (non-zero exit, killed, or exit 0 \
    before joining while others joined), the job is aborted (the other members' \
    collectives fail at once) and members still running after --grace seconds are \
    killed. Exit status: the status of the member that failed first (128+signal for a \
    killed member, 1 for one that exited 0 before joining), else 128+signal after a \
    forwarded signal, else 0.\n\n\
    Examples:\n  smelt launch -n 4 -- ./my_program arg\n  \
    smelt launch -n 8 --model model.json --tree adaptive-shuffled -- ./my_program\n  \
    smelt launch -n 16 --cpus 0-1 -- python3 worker.py     (oversubscribed: a flat tree)"
)]
pub struct LaunchArgs {
    /// Number of member processes.
    #[arg(short = 'n', long = "np", value_parser = crate::common::count(1, 4096))]
    pub n: usize,
    /// CPUs to run on (e.g. 0-7,12); default: every CPU this process may use. With more
    /// members than CPUs, members share CPUs round-robin.
    #[arg(long)]
    pub cpus: Option<String>,
    /// Model file (from `smelt probe` or `smelt import`) to build the tree from;
    /// without one, the tree is built from a uniform model.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Tree topology (as `smelt tree --algo`); `auto` (the default): the tuned tree
    /// for a broadcast (SMELT_TUNE, this host's tuning file, else the prediction).
    #[arg(long, default_value = "auto")]
    pub tree: String,
    /// Longest a collective waits for a peer, in seconds.
    #[arg(long, default_value = "30", value_parser = crate::common::seconds)]
    pub timeout: f64,
    /// Seconds members may take to finish after another member failed or after a
    /// forwarded signal, before they are killed (SIGKILL; a second interrupt kills at
    /// once).
    #[arg(long, default_value = "2", value_parser = crate::common::seconds)]
    pub grace: f64,
    /// The program and its arguments.
    #[arg(required = true, last = true)]
    pub program: Vec<String>,
}

/// The job's tree, each rank's CPU, and with `auto` the algorithm table the members
/// run (non-tree barrier and allreduce, tuned fragment sizes).
type Plan = (Tree, Vec<u32>, Option<Arc<AlgorithmTable>>);

/// `auto`'s algorithm table over `pos` of `m` (None for another tree).
fn table_for(topo: Topology, m: &Model, pos: &[usize]) -> Result<Option<Arc<AlgorithmTable>>> {
    if topo != Topology::Auto {
        return Ok(None);
    }
    let (table, refused) =
        smelt_tree::tuning::auto_table(m, pos).map_err(|e| anyhow::anyhow!(e))?;
    if let Some(why) = refused {
        eprintln!("smelt launch: {}", escape_line(&why.to_string()));
    }
    Ok(Some(Arc::new(table)))
}

/// The job's tree and each rank's CPU.
fn plan(a: &LaunchArgs) -> Result<Plan> {
    let topo = Topology::from_str(&a.tree).map_err(|e| anyhow::anyhow!("--tree: {e}"))?;
    // An explicit model is read (and a bad one refused) whatever the job's size.
    let explicit = match &a.model {
        // The model's error names the file and its reason once (with_context would
        // repeat the reason, which the error also carries as its source).
        Some(p) => Some(Model::load(p).map_err(|e| anyhow::anyhow!("--model: {e}"))?),
        None => None,
    };
    let avail = allowed_cpus().unwrap_or_default();
    let cpus: Vec<u32> = match &a.cpus {
        Some(s) => {
            let list = parse_cpu_list(s).map_err(|e| anyhow::anyhow!("--cpus: {e}"))?;
            if let Some(c) = list.iter().find(|c| !avail.contains(c)) {
                bail!(
                    "--cpus: CPU {c} is not available: this process may use CPUs {}",
                    smelt_model::format_cpu_list(&avail)
                );
            }
            list
        }
        None => avail.clone(),
    };
    if cpus.is_empty() {
        bail!("no CPU to run on");
    }
    let n = a.n;
    if n <= cpus.len() {
        let chosen: Vec<u32> = cpus[..n].to_vec();
        // The default model (smelt_model::default_model): --model, else SMELT_MODEL,
        // else this host's cached probe, else a uniform model (with a notice;
        // SMELT_VERBOSE=1 says which).
        let model = match explicit {
            Some(m) => m,
            None => smelt_model::default_model(None, Some(&chosen))?.0,
        };
        let m = &model;
        let pos = m
            .positions(&chosen)
            .map_err(|e| anyhow::anyhow!("--model: {e}"))?;
        let (topo, _) =
            crate::cmd_tree::resolve_auto_cli(topo, smelt_tree::Op::Broadcast, 1, m, &pos, None)?;
        let tree = topo.generate(m, &pos, None)?;
        // Ranks follow the tree's member order (OS CPU ids).
        let pins = tree.members.iter().map(|c| c.get()).collect();
        return Ok((tree, pins, table_for(topo, m, &pos)?));
    }
    // More members than CPUs: a flat tree over made-up ids (one scheduling round per
    // tree level is what an oversubscribed tree costs), members spread round-robin.
    let mut children = vec![Vec::new(); n];
    children[0] = (1..n).collect();
    let tree = Tree::from_raw((0..n as u32).collect(), 0, children)?;
    let pins = (0..n).map(|r| cpus[r % cpus.len()]).collect();
    Ok((tree, pins, None))
}

fn status_code(s: &ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
}

fn describe(s: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (_, Some(sig)) => format!("was killed by signal {sig}"),
        _ => "ended".into(),
    }
}

/// What a member that exits successfully without joining did: the others wait for it
/// in vain (as `mpirun` does with a process that never called `MPI_Init`, the job
/// fails once any member joined).
const UNJOINED: &str = "exited with status 0 before joining the job";

pub fn run(a: LaunchArgs) -> Result<()> {
    use signal_hook::consts::{SIGCONT, SIGHUP, SIGINT, SIGQUIT, SIGSTOP, SIGTERM, SIGTSTP};
    let (tree, pins, algorithms) = plan(&a)?;
    // The program as every message shows it: control characters escaped.
    let program = escape_line(&a.program[0]).into_owned();
    let cfg = GroupConfig {
        timeout: Duration::from_secs_f64(a.timeout),
        algorithms,
        ..GroupConfig::default()
    };
    // The world every member joins: each rank's CPU (where the launcher pins it) and
    // the model the tree came from, for the services members make from it.
    let mut world =
        WorldBuilder::new(a.n).cpus(&pins.iter().map(|&c| CpuId(c)).collect::<Vec<_>>());
    if let Some(m) = &a.model {
        world = world.model(ModelRef::Path(
            std::path::absolute(m).unwrap_or_else(|_| m.clone()),
        ));
    }
    // Guarded: even a launcher killed by SIGKILL leaves no segment in /dev/shm.
    let job = GroupJob::create_in(world, std::slice::from_ref(&tree), &cfg, true)?;
    let mut signals =
        signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGCONT])
            .context("cannot install signal handlers")?;
    // Members run in a process group of their own, out of the terminal's foreground
    // group (a Ctrl-C reaches the launcher, which forwards it): one reading a terminal
    // would stop, so with a terminal on standard input they read /dev/null.
    let stdin_tty = std::io::stdin().is_terminal();
    // Each member pinned to its CPU, with the variables of the world (SMELT_JOB,
    // SMELT_JOB_KEY, SMELT_RANK, SMELT_SIZE, SMELT_CPU).
    let members = Members::start(job.world(), |_| {
        let mut cmd = Command::new(&a.program[0]);
        cmd.args(&a.program[1..]);
        if stdin_tty {
            cmd.stdin(Stdio::null());
        }
        cmd
    });
    let mut members = match members {
        Ok(m) => m,
        Err((rank, e)) => {
            // The members already started were killed and reaped.
            job.fail(rank, &format!("could not be started: {e}"));
            bail!("cannot start {}: {e}", a.program[0]);
        }
    };
    // The member the job's end is blamed on: rank, the launcher's exit status, what
    // happened.
    let mut first_bad: Option<(usize, i32, String)> = None;
    let mut statuses: Vec<Option<ExitStatus>> = vec![None; a.n];
    // The first member that exited successfully without having joined.
    let mut unjoined: Option<usize> = None;
    // When members still running are killed, and why.
    let mut kill_at: Option<(Instant, String)> = None;
    let mut killing = false;
    let mut forwarded: Option<i32> = None;
    let grace = Duration::from_secs_f64(a.grace);
    let deadline = |why: String, at: &mut Option<(Instant, String)>| {
        let t = Instant::now() + grace;
        if at.as_ref().is_none_or(|(old, _)| t < *old) {
            *at = Some((t, why));
        }
    };
    loop {
        for sig in signals.pending() {
            match sig {
                SIGTSTP => {
                    // Ctrl-Z: stop the members, then the launcher itself.
                    members.signal(SIGSTOP);
                    let _ = signal_hook::low_level::emulate_default_handler(SIGTSTP);
                }
                SIGCONT => members.signal(SIGCONT),
                _ if forwarded.is_none() => {
                    forwarded = Some(sig);
                    members.signal(sig);
                    deadline(format!("signal {sig} was forwarded"), &mut kill_at);
                }
                _ => {
                    // A second interrupt: kill at once, as mpirun does.
                    kill_at = Some((Instant::now(), format!("a second signal ({sig})")));
                }
            }
        }
        for (rank, st) in members.poll() {
            statuses[rank] = Some(st);
            if st.success() {
                if !job.has_joined(Rank(rank)) && unjoined.is_none() {
                    unjoined = Some(rank);
                }
            } else if first_bad.is_none() {
                let what = describe(&st);
                job.fail(Rank(rank), &format!("{program} {what}"));
                deadline(format!("member {rank} failed"), &mut kill_at);
                first_bad = Some((rank, status_code(&st), what));
            }
        }
        if first_bad.is_none() {
            if let Some(r) = unjoined.filter(|_| job.joined() > 0) {
                job.fail(Rank(r), &format!("{program} {UNJOINED}"));
                deadline(format!("member {r} failed"), &mut kill_at);
                first_bad = Some((r, 1, UNJOINED.to_string()));
            }
        }
        if members.running() == 0 {
            break;
        }
        if let Some((t, why)) = &kill_at {
            if Instant::now() >= *t {
                if !killing {
                    killing = true;
                    eprintln!(
                        "smelt launch: {why}; killing the {} member(s) still running",
                        members.running()
                    );
                }
                // Again at every turn: a member that ends is reaped, one that does not
                // gets SIGKILL once more.
                members.kill();
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // Members that saw a peer die exit too, maybe before the launcher noticed the
    // death: the job's own record names the member that failed first.
    if let Some((r, _)) = job.failure() {
        if let Some(st) = statuses.get(r.index()).copied().flatten() {
            if !st.success() {
                first_bad = Some((r.index(), status_code(&st), describe(&st)));
            }
        }
    }
    drop(members);
    drop(job);
    if let Some((rank, code, what)) = first_bad {
        eprintln!("smelt launch: member {rank} ({program}) {what}; the job was torn down");
        std::process::exit(if code == 0 { 1 } else { code });
    }
    if let Some(sig) = forwarded {
        std::process::exit(128 + sig);
    }
    Ok(())
}
