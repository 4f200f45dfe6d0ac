//! `smelt launch`: start N processes as one job on this host, like `mpirun` for one
//! machine.

use anyhow::{bail, Context as _, Result};
use clap::Args;
use smelt_model::{parse_cpu_list, Model};
use smelt_runtime::process::Job;
use smelt_runtime::{GroupConfig, Rank};
use smelt_transport::{allowed_cpus, signal_process};
use smelt_tree::tuning::AlgorithmTable;
use smelt_tree::{CpuId, Topology, Tree};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args)]
#[command(
    about = "Start N processes as one smelt job on this host",
    long_about = "Starts N copies of PROGRAM as one job: their queuepairs live in shared memory \
    (created 0600 under an unguessable name in /dev/shm, removed once every member joined), \
    each member is pinned to its CPU and joins with smelt_runtime::process::join_from_env \
    (Rust) or smelt_job_join (C). Members get SMELT_JOB, SMELT_JOB_KEY, SMELT_RANK, \
    SMELT_SIZE and SMELT_CPU in their environment. SIGINT, SIGTERM, SIGHUP and SIGQUIT are \
    forwarded to every member. If a member fails (non-zero exit, killed), the job is \
    aborted (the other members' collectives fail at once) and members still running after \
    --grace seconds are killed. Exit status: the first non-zero member status (128+signal \
    for a killed member), else 0.\n\n\
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
    /// Seconds members may take to finish after another member failed, before they are
    /// killed.
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
    let (table, refused) = AlgorithmTable::auto(m, pos).map_err(|e| anyhow::anyhow!(e))?;
    if let Some(why) = refused {
        eprintln!("smelt launch: {why}");
    }
    Ok(Some(Arc::new(table)))
}

/// The job's tree and each rank's CPU.
fn plan(a: &LaunchArgs) -> Result<Plan> {
    let topo = Topology::from_str(&a.tree).map_err(|e| anyhow::anyhow!("--tree: {e}"))?;
    let model = match &a.model {
        Some(p) => Some(Model::load(p).with_context(|| format!("--model {}", p.display()))?),
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
        if let Some(m) = &model {
            let pos = m
                .positions(&chosen)
                .map_err(|e| anyhow::anyhow!("--model: {e}"))?;
            let (topo, _) = crate::cmd_tree::resolve_auto_cli(
                topo,
                smelt_tree::Op::Broadcast,
                1,
                m,
                &pos,
                None,
            )?;
            let tree = topo.generate(m, &pos, None)?;
            // Ranks follow the tree's member order (OS CPU ids).
            let pins = tree.members.iter().map(|c| c.get()).collect();
            return Ok((tree, pins, table_for(topo, m, &pos)?));
        }
        let m = smelt_model::synthetic(1, n, 1.0, 1.0, 1.0);
        let pos: Vec<usize> = (0..n).collect();
        let t = topo.generate(&m, &pos, None)?;
        let tree = Tree::new(CpuId::list(chosen.iter().copied()), t.root, t.children)?;
        return Ok((tree, chosen, table_for(topo, &m, &pos)?));
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

pub fn run(a: LaunchArgs) -> Result<()> {
    let (tree, pins, algorithms) = plan(&a)?;
    let cfg = GroupConfig {
        timeout: Duration::from_secs_f64(a.timeout),
        algorithms,
        ..GroupConfig::default()
    };
    let job = Job::create(std::slice::from_ref(&tree), &cfg)?;
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGQUIT,
    ])
    .context("cannot install signal handlers")?;
    let mut children: Vec<Option<Child>> = Vec::with_capacity(a.n);
    for (rank, &cpu) in pins.iter().enumerate() {
        let mut cmd = Command::new(&a.program[0]);
        cmd.args(&a.program[1..]).envs(job.env(Rank(rank)));
        cmd.env(smelt_runtime::process::ENV_CPU, cpu.to_string());
        let spawned = crate::bench_processes::spawn_pinned(&mut cmd, Some(cpu));
        match spawned {
            Ok(c) => children.push(Some(c)),
            Err(e) => {
                job.fail(Rank(rank), &format!("could not be started: {e}"));
                for c in children.iter_mut().flatten() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                bail!("cannot start {}: {e}", a.program[0]);
            }
        }
    }
    let mut first_bad: Option<(usize, i32, String)> = None;
    let mut statuses: Vec<Option<(i32, String)>> = vec![None; a.n];
    let mut failed_at: Option<Instant> = None;
    let mut forwarded: Option<i32> = None;
    let grace = Duration::from_secs_f64(a.grace);
    loop {
        for sig in signals.pending() {
            forwarded.get_or_insert(sig);
            for c in children.iter().flatten() {
                let _ = signal_process(c.id(), sig);
            }
        }
        let mut running = 0;
        for (rank, slot) in children.iter_mut().enumerate() {
            let Some(c) = slot else { continue };
            match c.try_wait() {
                Ok(Some(st)) => {
                    *slot = None;
                    if !st.success() {
                        statuses[rank] = Some((status_code(&st), describe(&st)));
                    }
                    if !st.success() && first_bad.is_none() {
                        let what = format!("{} {}", a.program[0], describe(&st));
                        job.fail(Rank(rank), &what);
                        first_bad = Some((rank, status_code(&st), what));
                        failed_at = Some(Instant::now());
                    }
                }
                Ok(None) => running += 1,
                Err(_) => running += 1,
            }
        }
        if running == 0 {
            break;
        }
        if failed_at.is_some_and(|t| t.elapsed() > grace) {
            for c in children.iter_mut().flatten() {
                let _ = c.kill();
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // Members that saw a peer die exit too, maybe before the launcher noticed the
    // death: the job's own record names the member that failed first.
    if let Some((r, _)) = job.failure() {
        if let Some((code, what)) = statuses.get(r.index()).cloned().flatten() {
            first_bad = Some((r.index(), code, format!("{} {what}", a.program[0])));
        }
    }
    drop(job);
    if let Some((rank, code, what)) = first_bad {
        eprintln!("smelt launch: member {rank} {what}; the job was torn down");
        std::process::exit(if code == 0 { 1 } else { code });
    }
    if let Some(sig) = forwarded {
        std::process::exit(128 + sig);
    }
    Ok(())
}
