//! Replicas as processes: each replica is a member of the store's world (a process
//! job of [`smelt_mesh::world`]: one segment, the job's environment encoding
//! `SMELT_JOB`/`SMELT_JOB_KEY`/`SMELT_RANK`, the store's description in the world's
//! attribute [`WORLD_ATTRIBUTE`]), linked to the others, to the clients and to the
//! store's control member by the world's mesh ([`World::mesh`], one collective call
//! every member makes alike). The protocols, trees, failover and the client API are
//! those of thread replicas; the clients and the control member are members of the
//! same world in the process that started the store.
//!
//! A replica process is a program started with its member's environment and
//! [`ENV_REPLICA`]; it calls [`run_replica_from_env`] (or
//! [`run_replica_from_env_with`]), which joins the world as its member, serves until
//! the store closes (or its process is killed), and writes its
//! [`ReplicaReport`] to its standard output as one JSON line.
//! `smelt kvs-replica` (the hidden subcommand `smelt kvs --processes` uses) and the
//! `smelt-kvs-replica` binary of this crate are such programs; a program of your own
//! can be one by calling [`run_replica_from_env`] first thing when
//! [`is_replica_process`] says so.

use crate::client::{Client, ClientMesh, Limits};
use crate::config::{KvsError, Protocol, StoreConfig, TreeSpec};
use crate::replica::{Layout, Replica, ReplicaReport};
use serde::{Deserialize, Serialize};
use smelt_mesh::launch::Members;
use smelt_mesh::mesh::Mesh;
use smelt_mesh::world::{MeshSpec, World, WorldBuilder, WorldJob, WorldLink};
use smelt_mesh::{Rank, WaitPolicy};
use smelt_plan::Shape;
use smelt_transport::allowed_cpus;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// Environment variable set (to the replica's index) for a replica process.
pub const ENV_REPLICA: &str = smelt_settings::KVS_REPLICA;

/// The world attribute that carries the store's description to its replica members.
pub const WORLD_ATTRIBUTE: &str = "smelt-kvs";

/// Most replicas a store of processes may have.
pub const MAX_PROCESS_REPLICAS: usize = 256;
/// Most clients a store of processes may have (each holds a mapping and a file
/// descriptor of the segment in the store's process).
pub const MAX_PROCESS_CLIENTS: usize = 512;

/// Where a store's replicas run ([`StoreConfig::deployment`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Deployment {
    /// One thread per replica in this process (the default).
    #[default]
    Threads,
    /// One process per replica, started by the caller's [`Launcher`]: the store makes
    /// its world, joins its clients and control member, and hands the launcher what
    /// each replica member needs ([`ReplicaLaunch`]); the launcher starts them (with
    /// [`smelt_mesh::launch::Members`], as `smelt launch` starts its members: what
    /// `smelt kvs --processes` does) and gives their processes back. The store itself
    /// starts no process.
    Launched(Launcher),
    /// One process per replica: `program` started with `args` and the replica's
    /// environment by [`Launcher::program`] (the one launcher of member processes,
    /// [`smelt_mesh::launch::Members`]: pinned to its `replica_cpus` entry, in a
    /// process group of the store's replicas, killed when the thread that started the
    /// store ends, so start and keep a store of processes on a thread that outlives
    /// it). It must call [`run_replica_from_env`] or [`run_replica_from_env_with`]
    /// (the `smelt` binary with the argument `kvs-replica`, or this crate's
    /// `smelt-kvs-replica` for rank-based trees). Clients stay in this process.
    Processes {
        /// The replica program.
        program: PathBuf,
        /// Its arguments.
        args: Vec<String>,
    },
}

impl Deployment {
    /// Replicas as processes of `program` (no arguments).
    pub fn processes(program: impl Into<PathBuf>) -> Deployment {
        Deployment::Processes {
            program: program.into(),
            args: Vec::new(),
        }
    }

    /// True for replicas as processes ([`Deployment::Processes`],
    /// [`Deployment::Launched`]).
    pub fn is_processes(&self) -> bool {
        !matches!(self, Deployment::Threads)
    }

    /// The launcher of the replica processes (None for threads).
    fn launcher(&self) -> Option<Launcher> {
        match self {
            Deployment::Threads => None,
            Deployment::Launched(l) => Some(l.clone()),
            Deployment::Processes { program, args } => {
                Some(Launcher::program(program.clone(), args.clone()))
            }
        }
    }
}

/// What a [`Launcher`] is given: the store's world job and each replica member's
/// environment and CPU.
#[derive(Debug)]
pub struct ReplicaLaunch<'a> {
    job: &'a WorldJob,
    replicas: usize,
    cpus: Option<&'a [u32]>,
}

impl ReplicaLaunch<'_> {
    /// Number of replicas: start members `0..replicas()`, in order.
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// The environment replica `r`'s process needs: its member's variables of the
    /// store's world ([`WorldJob::env`]) and [`ENV_REPLICA`].
    pub fn env(&self, r: usize) -> Vec<(String, String)> {
        let mut env = self.job.env(Rank(r));
        env.push((ENV_REPLICA.into(), r.to_string()));
        env
    }

    /// The CPU to pin replica `r` to (`StoreConfig::replica_cpus`), if any.
    pub fn cpu(&self, r: usize) -> Option<u32> {
        self.cpus.and_then(|c| c.get(r).copied())
    }
}

/// How a launcher starts the replicas: given [`ReplicaLaunch`], it starts one process
/// per replica, in order (member `r` of the returned [`Members`] is replica `r`), each
/// with [`ReplicaLaunch::env`]`(r)` and its standard output and error piped (the
/// replica writes its report there); `Err` names the replica that could not start.
pub type LaunchFn = dyn Fn(&ReplicaLaunch) -> Result<Members, KvsError> + Send + Sync;

/// The launcher of a store's replica processes ([`Deployment::Launched`]).
#[derive(Clone)]
pub struct Launcher(Arc<LaunchFn>);

impl Launcher {
    /// A launcher that runs `f`.
    pub fn new(
        f: impl Fn(&ReplicaLaunch) -> Result<Members, KvsError> + Send + Sync + 'static,
    ) -> Launcher {
        Launcher(Arc::new(f))
    }

    /// `program args` once per replica through [`Members`] (what
    /// [`Deployment::Processes`] does; `smelt kvs --processes` does the same with the
    /// `smelt` binary and `kvs-replica`).
    pub fn program(program: PathBuf, args: Vec<String>) -> Launcher {
        Launcher::new(move |l| {
            let mut members = Members::new();
            for r in 0..l.replicas() {
                let mut cmd = Command::new(&program);
                cmd.args(&args)
                    .envs(l.env(r))
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                members
                    .spawn(&mut cmd, l.cpu(r).map(smelt_mesh::CpuId))
                    .map_err(|e| KvsError::Replica {
                        replica: r,
                        what: format!("cannot start {}: {e}", program.display()),
                    })?;
            }
            Ok(members)
        })
    }
}

impl std::fmt::Debug for Launcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Launcher(..)")
    }
}

/// Two launchers are equal when they are the same one.
impl PartialEq for Launcher {
    fn eq(&self, other: &Launcher) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Launcher {}

/// The tree as a replica process rebuilds it after a view change: its shape's
/// description ([`Shape::describe`]), or an explicit tree (whose replacement is the
/// star).
#[derive(Serialize, Deserialize)]
enum BlobTree {
    Shaped(String),
    Explicit,
}

/// What every replica process reads from the job's segment.
#[derive(Serialize, Deserialize)]
struct Blob {
    replicas: usize,
    clients: usize,
    root: usize,
    leader: usize,
    parent: Vec<Option<usize>>,
    children: Vec<Vec<usize>>,
    homes: Vec<usize>,
    backups: usize,
    protocol: String,
    tree: BlobTree,
    link_timeout_ns: u64,
    keep_log: bool,
    failover: bool,
    /// The wait policy of every member's links (spin, yield, first and longest park).
    wait: [u64; 4],
    cpus: Option<Vec<u32>>,
    /// The world mesh's links (rank pairs) and slots per ring: every member makes the
    /// same mesh.
    links: Vec<(usize, usize)>,
    capacity: usize,
    /// What a client process needs ([`connect_client`]): the longest key and value,
    /// and how long and how often it tries.
    key_len: usize,
    value_len: usize,
    attempt_timeout_ns: u64,
    attempts: u32,
}

impl Blob {
    /// The store's description, read from `world`'s attribute [`WORLD_ATTRIBUTE`];
    /// `bad` makes the error of a world that is not a store's.
    fn of(
        world: &World,
        bad: impl Fn(&dyn std::fmt::Display) -> KvsError,
    ) -> Result<Blob, KvsError> {
        let text = world.attribute(WORLD_ATTRIBUTE).ok_or_else(|| {
            bad(&format!(
                "the world has no '{WORLD_ATTRIBUTE}' attribute: it is not a store's"
            ))
        })?;
        serde_json::from_str(text)
            .map_err(|e| bad(&format!("the store's description is unreadable: {e}")))
    }

    /// The store's layout, its vectors taken out of the description.
    fn take_layout(&mut self) -> Layout {
        Layout {
            replicas: self.replicas,
            clients: self.clients,
            root: self.root,
            leader: self.leader,
            parent: std::mem::take(&mut self.parent),
            children: std::mem::take(&mut self.children),
            homes: std::mem::take(&mut self.homes),
            backups: self.backups,
        }
    }

    /// The mesh every member of the store's world makes.
    fn mesh_spec(&self) -> MeshSpec {
        let [s, y, pi, pm] = self.wait;
        MeshSpec::pairs(self.links.iter().map(|&(a, b)| (Rank(a), Rank(b))))
            .capacity(self.capacity)
            .wait_policy(WaitPolicy {
                spin_polls: s as u32,
                yield_polls: y as u32,
                park_initial: Duration::from_nanos(pi),
                park_max: Duration::from_nanos(pm),
            })
    }
}

/// True if this process was started as a store's replica ([`ENV_REPLICA`] is set).
pub fn is_replica_process() -> bool {
    smelt_settings::is_set(ENV_REPLICA)
}

/// Runs this process as the store's replica its environment names: joins the
/// store's mesh, serves until the store closes it, and prints its report (one JSON
/// line) on standard output. Rebuilds only `smelt-plan`'s rank-based trees after a
/// view change ([`smelt_plan::Ranked`]); a store over another tree (smelt's own trees,
/// from `smelt-tree`) needs [`run_replica_from_env_with`]. Errors: not started as a
/// replica, or the job cannot be joined (as [`KvsError::Config`]).
pub fn run_replica_from_env() -> Result<(), KvsError> {
    run_replica_from_env_with(&|text| {
        smelt_plan::shape::ranked_from_description(text)?.ok_or_else(|| {
            format!(
                "this replica program rebuilds rank-based trees only, not {text}: \
                 run it with run_replica_from_env_with(smelt_tree::shape::from_description)"
            )
        })
    })
}

/// Rebuilds a tree builder from its [`Shape::describe`] text, in a replica process
/// (`smelt_tree::shape::from_description` reads every one of smelt's); its error is
/// any displayable error type (`E`), whose text goes into [`KvsError::Config`].
pub type ShapeReader<'a, E> = &'a dyn Fn(&str) -> Result<Arc<dyn Shape>, E>;

/// [`run_replica_from_env`] with the reader of the store's tree builder: the store's
/// tree is rebuilt with it after a view change.
pub fn run_replica_from_env_with<E: std::fmt::Display>(
    shape: ShapeReader<'_, E>,
) -> Result<(), KvsError> {
    let bad = |e: &dyn std::fmt::Display| KvsError::Config(format!("replica process: {e}"));
    if !is_replica_process() {
        return Err(bad(&format!(
            "{ENV_REPLICA} is not set: replica processes are started by a store (Deployment::Processes, smelt kvs --processes)"
        )));
    }
    let world = World::from_env().map_err(|e| bad(&e))?;
    let report = run_replica(&world, shape)?;
    drop(world);
    let line = serde_json::to_string(&report).map_err(|e| bad(&e))?;
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|_| out.flush())
        .map_err(|e| bad(&format!("writing the report: {e}")))
}

/// Runs this member of a store's world as its replica: reads the store's description
/// (the world's attribute [`WORLD_ATTRIBUTE`]), makes the world's mesh (a collective
/// call, as every member of the store does), pins itself to its `replica_cpus` entry if
/// there is one, and serves until the store closes or stops it; returns the replica's
/// report (what [`run_replica_from_env`] prints). `shape` rebuilds the store's tree
/// builder for view changes. Errors: the world is not a store's, or this member is not
/// one of its replicas.
pub fn run_replica<E: std::fmt::Display>(
    world: &World,
    shape: ShapeReader<'_, E>,
) -> Result<ReplicaReport, KvsError> {
    let bad = |e: &dyn std::fmt::Display| KvsError::Config(format!("replica process: {e}"));
    let mut b = Blob::of(world, bad)?;
    let me = world.rank().index();
    if me >= b.replicas {
        return Err(bad(&format!(
            "rank {me} is not a replica (0..{})",
            b.replicas
        )));
    }
    let mesh = world.mesh(&b.mesh_spec()).map_err(|e| bad(&e))?;
    let protocol: Protocol = b.protocol.parse().map_err(|e: String| bad(&e))?;
    let spec = match &b.tree {
        BlobTree::Shaped(text) => TreeSpec::Shaped(shape(text).map_err(|e| bad(&e))?),
        // Only the shape of later views is built from the spec: for an explicit tree
        // that is the sequential star, whatever the tree.
        BlobTree::Explicit => TreeSpec::Explicit(
            smelt_plan::Tree::from_raw(
                (0..b.replicas as u32).collect(),
                b.root,
                b.children.clone(),
            )
            .map_err(|e| bad(&e))?,
        ),
    };
    let pinned = b
        .cpus
        .as_ref()
        .and_then(|c| c.get(me))
        .is_some_and(|&c| smelt_transport::pin_current_thread(smelt_mesh::CpuId(c)).is_ok());
    let lay = Arc::new(b.take_layout());
    let rep = Replica::new(
        me,
        mesh,
        lay,
        protocol,
        Duration::from_nanos(b.link_timeout_ns),
        None,
        b.keep_log,
        b.failover,
        Arc::new(spec),
    );
    let mut report = rep.run();
    report.pinned = pinned;
    Ok(report)
}

/// Connects this member of a store's world as its client (the store was started with
/// [`StoreConfig::client_processes`](crate::StoreConfig::client_processes), and this
/// process with [`Store::client_env`](crate::Store::client_env)`(c)`, or by hand with
/// the same variables): reads the store's description, makes the world's mesh (a
/// collective call, as every member of the store does) and returns client `c`, homed
/// as the store homes it. The store's [`close`](crate::Store::close) does not reach a
/// client of another process: once the replicas are gone its operations fail
/// ([`KvsError::HomeFailed`], [`KvsError::Unavailable`] or a timeout). Errors: the
/// world is not a store's, or this member is not one of its clients.
pub fn connect_client(world: &World) -> Result<Client, KvsError> {
    let bad = |e: &dyn std::fmt::Display| KvsError::Config(format!("client process: {e}"));
    let mut b = Blob::of(world, bad)?;
    let me = world.rank().index();
    let c = me
        .checked_sub(b.replicas)
        .filter(|&c| c < b.clients)
        .ok_or_else(|| {
            bad(&format!(
                "rank {me} is not a client ({}..{})",
                b.replicas,
                b.replicas + b.clients
            ))
        })?;
    let mesh = world.mesh(&b.mesh_spec()).map_err(|e| bad(&e))?;
    let lay = b.take_layout();
    Ok(Client {
        id: c,
        home: lay.homes[c],
        serve: lay.client_replicas(c),
        mesh: ClientMesh::Processes(mesh),
        seq: 0,
        limits: Limits {
            key_len: b.key_len,
            value_len: b.value_len,
            attempt_timeout: Duration::from_nanos(b.attempt_timeout_ns),
            attempts: b.attempts,
        },
        closed: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        body: Vec::new(),
        buf: vec![0; b.capacity * smelt_transport::PAYLOAD_PER_SLOT],
        retries: 0,
    })
}

/// The replica processes of a store, as the store's process holds them.
#[derive(Debug)]
pub(crate) struct Processes {
    /// The store's control member.
    pub(crate) control: Mesh<WorldLink>,
    /// Each replica's process (shared with the thread that reads its report).
    children: Vec<Arc<Mutex<Child>>>,
    job: WorldJob,
    /// The clients' and the control member's worlds (this process's members).
    _members: Vec<World>,
    readers: Vec<Option<std::thread::JoinHandle<()>>>,
}

/// A report for a replica process that ended without writing one.
fn no_report(
    replica: usize,
    status: Option<std::process::ExitStatus>,
    stderr: &str,
) -> ReplicaReport {
    use std::os::unix::process::ExitStatusExt as _;
    let killed = status.and_then(|s| s.signal());
    let tail: String = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .chars()
        .take(300)
        .collect();
    // Killed (SIGKILL, by Store::crash or anyone): a fail-stop crash.
    let exit = if killed.is_some() {
        "crashed".into()
    } else {
        "its process ended without a report".into()
    };
    let tail = if tail.is_empty() {
        String::new()
    } else {
        format!(": {tail}")
    };
    let fault = match (killed, status) {
        (Some(sig), _) => format!("its process was killed by signal {sig}"),
        (None, Some(s)) => format!("its process exited ({s}){tail}"),
        (None, None) => format!("its process did not exit{tail}"),
    };
    ReplicaReport::without_log(replica, exit, fault)
}

/// Reads replica `r`'s report from its standard output (and what it wrote to
/// standard error), waits for it to exit (bounded), and sends the report.
fn read_report(r: usize, child: Arc<Mutex<Child>>, tx: mpsc::Sender<ReplicaReport>) {
    let (out, err) = {
        let mut c = child.lock().unwrap_or_else(|e| e.into_inner());
        (c.stdout.take(), c.stderr.take())
    };
    let errs = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut e) = err {
            let _ = e.read_to_string(&mut s);
        }
        s
    });
    let mut report = None;
    if let Some(o) = out {
        for line in BufReader::new(o).lines() {
            let Ok(line) = line else { break };
            if let Ok(rep) = serde_json::from_str::<ReplicaReport>(line.trim()) {
                report = Some(rep);
            }
        }
    }
    // Standard output closed: the process is ending. Wait for it, a bounded time.
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        let st = child.lock().unwrap_or_else(|e| e.into_inner()).try_wait();
        match st {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
            _ => break None,
        }
    };
    let stderr = errs.join().unwrap_or_default();
    let rep = match report {
        Some(mut rep) => {
            rep.replica = r;
            rep
        }
        None => no_report(r, status, &stderr),
    };
    let _ = tx.send(rep);
}

/// The wait policy of a store's members: the one asked for, else dedicated when every
/// member may have a CPU of its own, oversubscribed otherwise.
fn wait_of(cfg: &StoreConfig, members: usize) -> WaitPolicy {
    cfg.link.wait.unwrap_or_else(|| {
        if allowed_cpus().map(|c| c.len()).unwrap_or(1) >= members {
            WaitPolicy::DEDICATED
        } else {
            WaitPolicy::OVERSUBSCRIBED
        }
    })
}

impl Processes {
    /// Creates the store's mesh job, joins the clients and the control member from this
    /// process, starts one process per replica and waits (at most `link_timeout`) until
    /// every one joined. Returns the processes and the clients' meshes; reports arrive
    /// on `tx`.
    pub(crate) fn start(
        cfg: &StoreConfig,
        lay: &Layout,
        links: &[(Rank, Rank)],
        tx: mpsc::Sender<ReplicaReport>,
        rx: &mpsc::Receiver<ReplicaReport>,
    ) -> Result<(Processes, Vec<Mesh<WorldLink>>), KvsError> {
        let Some(launcher) = cfg.deployment.launcher() else {
            return Err(KvsError::Config("not a store of processes".into()));
        };
        let what = match &cfg.deployment {
            Deployment::Processes { program, args } => {
                let mut w = program.display().to_string();
                for a in args {
                    w.push(' ');
                    w.push_str(a);
                }
                w
            }
            _ => "the launcher's replica program".to_string(),
        };
        if cfg.veto.is_some() {
            return Err(KvsError::Config(
                "a veto (a Rust closure) cannot run in replica processes: use Deployment::Threads"
                    .into(),
            ));
        }
        if lay.replicas > MAX_PROCESS_REPLICAS || lay.clients > MAX_PROCESS_CLIENTS {
            return Err(KvsError::Config(format!(
                "{} replicas and {} clients: replicas as processes allow at most {MAX_PROCESS_REPLICAS} replicas and {MAX_PROCESS_CLIENTS} clients",
                lay.replicas, lay.clients
            )));
        }
        let tree = match &cfg.tree {
            TreeSpec::Shaped(sh) => BlobTree::Shaped(sh.describe().ok_or_else(|| {
                KvsError::Config(format!(
                    "the tree '{}' cannot be sent to replica processes (its builder has no description)",
                    sh.name()
                ))
            })?),
            TreeSpec::Explicit(_) => BlobTree::Explicit,
        };
        let blob = Blob {
            replicas: lay.replicas,
            clients: lay.clients,
            root: lay.root,
            leader: lay.leader,
            parent: lay.parent.clone(),
            children: lay.children.clone(),
            homes: lay.homes.clone(),
            backups: lay.backups,
            protocol: cfg.protocol.name().into(),
            tree,
            link_timeout_ns: cfg.link.timeout.as_nanos().min(u64::MAX as u128) as u64,
            keep_log: cfg.keep_log,
            failover: cfg.failover,
            wait: {
                let w = wait_of(cfg, lay.size());
                [
                    w.spin_polls as u64,
                    w.yield_polls as u64,
                    w.park_initial.as_nanos() as u64,
                    w.park_max.as_nanos() as u64,
                ]
            },
            cpus: cfg.replica_cpus.clone(),
            links: links.iter().map(|&(a, b)| (a.index(), b.index())).collect(),
            capacity: cfg.link.capacity,
            key_len: cfg.key_len,
            value_len: cfg.value_len,
            attempt_timeout_ns: cfg.attempt_timeout.as_nanos().min(u64::MAX as u128) as u64,
            attempts: cfg.attempts,
        };
        let spec = blob.mesh_spec();
        let text = serde_json::to_string(&blob).map_err(|e| KvsError::Config(e.to_string()))?;
        let size = lay.size();
        let job = WorldBuilder::new(size)
            .attribute(WORLD_ATTRIBUTE, &text)
            .create_job(false)
            .map_err(|e| KvsError::Config(format!("replica processes: {e}")))?;
        // This process's members (the clients, then the control member) join the world
        // and make their part of its mesh.
        let mut members = Vec::with_capacity(lay.clients + 1);
        let mut join = |rank: Rank| {
            let bad = |e: &dyn std::fmt::Display| {
                KvsError::Config(format!("replica processes: member {rank}: {e}"))
            };
            let w = job.join(rank).map_err(|e| bad(&e))?;
            let mesh = w.mesh(&spec).map_err(|e| bad(&e))?;
            members.push(w);
            Ok::<_, KvsError>(mesh)
        };
        let mut clients = Vec::with_capacity(lay.clients);
        if !cfg.client_processes {
            for c in 0..lay.clients {
                clients.push(join(lay.client_rank(c))?);
            }
        }
        let control = join(lay.control())?;
        let mut procs = Processes {
            control,
            children: Vec::with_capacity(lay.replicas),
            job,
            _members: members,
            readers: Vec::new(),
        };
        // The caller's launcher starts the replicas (Deployment::Processes: the one
        // launcher of member processes, smelt_mesh::launch::Members, as `smelt launch`
        // starts its members: pinned, one process group, dying with their starter).
        let mut started = (launcher.0)(&ReplicaLaunch {
            job: &procs.job,
            replicas: lay.replicas,
            cpus: cfg.replica_cpus.as_deref(),
        })?;
        if started.len() != lay.replicas {
            return Err(KvsError::Config(format!(
                "the launcher started {} processes for {} replicas",
                started.len(),
                lay.replicas
            )));
        }
        for r in 0..lay.replicas {
            let child = started.take(Rank(r)).ok_or_else(|| KvsError::Replica {
                replica: r,
                what: "its process ended before the store took it".into(),
            })?;
            let child = Arc::new(Mutex::new(child));
            procs.children.push(child.clone());
            let tx = tx.clone();
            let h = std::thread::Builder::new()
                .name(format!("smelt-kvs-report-{r}"))
                .spawn(move || read_report(r, child, tx))
                .map_err(|e| KvsError::Replica {
                    replica: r,
                    what: format!("cannot start the thread reading its report: {e}"),
                })?;
            procs.readers.push(Some(h));
        }
        // Every replica joins (then the segment's name is gone), or start fails.
        let deadline = Instant::now() + cfg.link.timeout.max(Duration::from_secs(1));
        // (Client processes of your own join later: only the replicas are waited for.)
        let ready = |job: &WorldJob| {
            if cfg.client_processes {
                (0..lay.replicas).all(|r| job.has_joined(Rank(r)))
            } else {
                job.joined() >= size
            }
        };
        while !ready(&procs.job) {
            for r in 0..lay.replicas {
                let exited = procs.children[r]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .try_wait();
                if let Ok(Some(_)) = exited {
                    // Its reader ends now that the process closed its pipes.
                    if let Some(h) = procs.readers[r].take() {
                        let _ = h.join();
                    }
                    let why = rx
                        .try_iter()
                        .find(|x| x.replica == r)
                        .and_then(|x| x.fault)
                        .unwrap_or_default();
                    return Err(KvsError::Replica {
                        replica: r,
                        what: format!("its process ({what}) ended before joining the store: {why}"),
                    });
                }
            }
            if Instant::now() >= deadline {
                return Err(KvsError::Replica {
                    replica: (0..lay.replicas).next().unwrap_or(0),
                    what: format!(
                        "only {} of {size} members joined the store within {:?} (is {what} a replica program?)",
                        procs.job.joined(),
                        cfg.link.timeout,
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok((procs, clients))
    }

    /// The environment client `c`'s own process needs to join the store's world
    /// ([`connect_client`]).
    pub(crate) fn client_env(&self, rank: Rank) -> Vec<(String, String)> {
        self.job.env(rank)
    }

    /// Where the segment was made (its name is removed once every member joined).
    pub(crate) fn segment(&self) -> &Path {
        self.job.path()
    }

    /// The process id of replica `r`.
    pub(crate) fn pid(&self, r: usize) -> Option<u32> {
        self.children
            .get(r)
            .map(|c| c.lock().unwrap_or_else(|e| e.into_inner()).id())
    }

    /// Kills replica `r`'s process (SIGKILL: fail-stop, nothing of it runs any more).
    pub(crate) fn kill(&self, r: usize) -> Result<(), KvsError> {
        let Some(c) = self.children.get(r) else {
            return Ok(());
        };
        let mut c = c.lock().unwrap_or_else(|e| e.into_inner());
        match c.try_wait() {
            Ok(Some(_)) => Ok(()),
            _ => c.kill().map_err(|e| KvsError::Replica {
                replica: r,
                what: format!("cannot kill its process: {e}"),
            }),
        }
    }

    /// Kills every replica process still running.
    pub(crate) fn kill_all(&self) {
        for r in 0..self.children.len() {
            let _ = self.kill(r);
        }
    }

    /// Waits for the report readers (each ends once its process exited, bounded).
    pub(crate) fn reap(&mut self) {
        for h in self.readers.iter_mut() {
            if let Some(h) = h.take() {
                let _ = h.join();
            }
        }
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        // No replica process outlives its store.
        self.kill_all();
        self.reap();
        for c in &self.children {
            let _ = c.lock().unwrap_or_else(|e| e.into_inner()).wait();
        }
    }
}
