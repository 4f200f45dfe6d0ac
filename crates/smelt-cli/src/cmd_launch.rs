//! `smelt launch`: start N processes as one job on this host, like `mpirun` for one
//! machine.

use anyhow::{bail, Context as _, Result};
use clap::Args;
use signal_hook::iterator::Signals;
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

/// The members' environment: the job's world (each rank's CPU, where the launcher pins
/// it, and the model the tree came from, for the services members make from it) over
/// one guarded segment (even a launcher killed by SIGKILL leaves none in /dev/shm).
fn create_job(a: &LaunchArgs, tree: &Tree, pins: &[u32], cfg: &GroupConfig) -> Result<GroupJob> {
    let mut world =
        WorldBuilder::new(a.n).cpus(&pins.iter().map(|&c| CpuId(c)).collect::<Vec<_>>());
    if let Some(m) = &a.model {
        world = world.model(ModelRef::Path(
            std::path::absolute(m).unwrap_or_else(|_| m.clone()),
        ));
    }
    Ok(GroupJob::create_in(
        world,
        std::slice::from_ref(tree),
        cfg,
        true,
    )?)
}

/// Starts the members, each pinned to its CPU, with the variables of the world
/// (SMELT_JOB, SMELT_JOB_KEY, SMELT_RANK, SMELT_SIZE, SMELT_CPU).
fn start_members(a: &LaunchArgs, job: &GroupJob) -> Result<Members> {
    // Members run in a process group of their own, out of the terminal's foreground
    // group (a Ctrl-C reaches the launcher, which forwards it): one reading a terminal
    // would stop, so with a terminal on standard input they read /dev/null.
    let stdin_tty = std::io::stdin().is_terminal();
    let members = Members::start(job.world(), |_| {
        let mut cmd = Command::new(&a.program[0]);
        cmd.args(&a.program[1..]);
        if stdin_tty {
            cmd.stdin(Stdio::null());
        }
        cmd
    });
    match members {
        Ok(m) => Ok(m),
        Err((rank, e)) => {
            // The members already started were killed and reaped.
            job.fail(rank, &format!("could not be started: {e}"));
            bail!("cannot start {}: {e}", a.program[0]);
        }
    }
}

pub fn run(a: LaunchArgs) -> Result<()> {
    use signal_hook::consts::{SIGCONT, SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGTSTP};
    let (tree, pins, algorithms) = plan(&a)?;
    // The program as every message shows it: control characters escaped.
    let program = escape_line(&a.program[0]).into_owned();
    let cfg = GroupConfig {
        link: smelt_runtime::LinkConfig::default().timeout(Duration::from_secs_f64(a.timeout)),
        algorithms,
        ..GroupConfig::default()
    };
    let job = create_job(&a, &tree, &pins, &cfg)?;
    let signals = Signals::new([SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGCONT])
        .context("cannot install signal handlers")?;
    let members = start_members(&a, &job)?;
    let grace = Duration::from_secs_f64(a.grace);
    let end = Supervisor::new(&job, members, &program, grace).supervise(signals);
    drop(job);
    if let Some((rank, code, what)) = end.first_bad {
        eprintln!("smelt launch: member {rank} ({program}) {what}; the job was torn down");
        std::process::exit(if code == 0 { 1 } else { code });
    }
    if let Some(sig) = end.forwarded {
        std::process::exit(128 + sig);
    }
    Ok(())
}

/// How the job ended: the member it is blamed on (rank, the launcher's exit status,
/// what happened) and the first signal forwarded to the members.
struct Ending {
    first_bad: Option<(usize, i32, String)>,
    forwarded: Option<i32>,
}

/// The launcher's watch over the running members: forwards signals, notices members
/// that end, aborts the job when one fails, and kills those still running after the
/// grace period.
struct Supervisor<'a> {
    job: &'a GroupJob,
    members: Members,
    program: &'a str,
    grace: Duration,
    /// The member the job's end is blamed on: rank, the launcher's exit status, what
    /// happened.
    first_bad: Option<(usize, i32, String)>,
    statuses: Vec<Option<ExitStatus>>,
    /// The first member that exited successfully without having joined.
    unjoined: Option<usize>,
    /// When members still running are killed, and why.
    kill_at: Option<(Instant, String)>,
    killing: bool,
    forwarded: Option<i32>,
}

impl<'a> Supervisor<'a> {
    fn new(job: &'a GroupJob, members: Members, program: &'a str, grace: Duration) -> Self {
        let n = members.len();
        Supervisor {
            job,
            members,
            program,
            grace,
            first_bad: None,
            statuses: vec![None; n],
            unjoined: None,
            kill_at: None,
            killing: false,
            forwarded: None,
        }
    }

    /// Watches the members until every one has ended; they are reaped on return.
    fn supervise(mut self, mut signals: Signals) -> Ending {
        loop {
            for sig in signals.pending() {
                self.on_signal(sig);
            }
            self.on_exits();
            self.blame_unjoined();
            if self.members.running() == 0 {
                break;
            }
            self.kill_when_due();
            std::thread::sleep(Duration::from_millis(5));
        }
        self.blame_first_failure();
        Ending {
            first_bad: self.first_bad,
            forwarded: self.forwarded,
        }
    }

    /// Members still running are killed `grace` from now (or earlier if already due).
    fn deadline(&mut self, why: String) {
        let t = Instant::now() + self.grace;
        if self.kill_at.as_ref().is_none_or(|(old, _)| t < *old) {
            self.kill_at = Some((t, why));
        }
    }

    fn on_signal(&mut self, sig: i32) {
        use signal_hook::consts::{SIGCONT, SIGSTOP, SIGTSTP};
        match sig {
            SIGTSTP => {
                // Ctrl-Z: stop the members, then the launcher itself.
                self.members.signal(SIGSTOP);
                let _ = signal_hook::low_level::emulate_default_handler(SIGTSTP);
            }
            SIGCONT => self.members.signal(SIGCONT),
            _ if self.forwarded.is_none() => {
                self.forwarded = Some(sig);
                self.members.signal(sig);
                self.deadline(format!("signal {sig} was forwarded"));
            }
            _ => {
                // A second interrupt: kill at once, as mpirun does.
                self.kill_at = Some((Instant::now(), format!("a second signal ({sig})")));
            }
        }
    }

    /// Records the members that ended; the first that failed aborts the job.
    fn on_exits(&mut self) {
        for (rank, st) in self.members.poll() {
            self.statuses[rank] = Some(st);
            if st.success() {
                if !self.job.has_joined(Rank(rank)) && self.unjoined.is_none() {
                    self.unjoined = Some(rank);
                }
            } else if self.first_bad.is_none() {
                let what = describe(&st);
                self.job
                    .fail(Rank(rank), &format!("{} {what}", self.program));
                self.deadline(format!("member {rank} failed"));
                self.first_bad = Some((rank, status_code(&st), what));
            }
        }
    }

    /// A member that exited 0 without joining while others joined fails the job.
    fn blame_unjoined(&mut self) {
        if self.first_bad.is_some() {
            return;
        }
        if let Some(r) = self.unjoined.filter(|_| self.job.joined() > 0) {
            self.job
                .fail(Rank(r), &format!("{} {UNJOINED}", self.program));
            self.deadline(format!("member {r} failed"));
            self.first_bad = Some((r, 1, UNJOINED.to_string()));
        }
    }

    fn kill_when_due(&mut self) {
        let Some((t, why)) = &self.kill_at else {
            return;
        };
        if Instant::now() < *t {
            return;
        }
        if !self.killing {
            self.killing = true;
            eprintln!(
                "smelt launch: {why}; killing the {} member(s) still running",
                self.members.running()
            );
        }
        // Again at every turn: a member that ends is reaped, one that does not gets
        // SIGKILL once more.
        self.members.kill();
    }

    /// Members that saw a peer die exit too, maybe before the launcher noticed the
    /// death: the job's own record names the member that failed first.
    fn blame_first_failure(&mut self) {
        let Some((r, _)) = self.job.failure() else {
            return;
        };
        if let Some(st) = self.statuses.get(r.index()).copied().flatten() {
            if !st.success() {
                self.first_bad = Some((r.index(), status_code(&st), describe(&st)));
            }
        }
    }
}
