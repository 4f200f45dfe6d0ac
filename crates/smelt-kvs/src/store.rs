//! Starting, driving and closing a store.

use crate::client::{Client, ClientMesh, Limits};
use crate::config::{KvsError, Protocol, StoreConfig};
use crate::process::Processes;
use crate::replica::{self, Layout, Replica, ReplicaReport};
use crate::wire::{tag, Entry, Kind};
use smelt_mesh::mesh::{Mesh, MeshBuilder, MeshError};
use smelt_mesh::Rank;
use smelt_transport::{Abort, PAYLOAD_PER_SLOT};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A replicated key-value store: replicas as threads (or as processes, with
/// [`Deployment::Processes`](crate::Deployment)), and the clients to hand to the
/// threads that use them ([`take_clients`](Store::take_clients)).
///
/// ```
/// use smelt_kvs::{Store, StoreConfig, Protocol};
/// let mut store = Store::start(StoreConfig::new(3, 2).protocol(Protocol::OnePaxos)).unwrap();
/// let mut clients = store.take_clients();
/// let (mut a, mut b) = (clients.remove(0), clients.remove(0));
/// a.set(b"answer", b"42").unwrap();
/// // Committed at every replica before `set` returned: b's home replica has it.
/// assert_eq!(b.get(b"answer").unwrap(), Some(b"42".to_vec()));
/// assert_eq!(b.get(b"other").unwrap(), None);
/// let report = store.close().unwrap();
/// report.check_logs().unwrap();
/// ```
#[derive(Debug)]
pub struct Store {
    cfg_name: String,
    lay: Arc<Layout>,
    /// The replicas and the control member; None once closed.
    members: Option<Members>,
    clients: Vec<Client>,
    reports: mpsc::Receiver<ReplicaReport>,
    got: Vec<Option<ReplicaReport>>,
    closed: Arc<AtomicBool>,
    close_timeout: Duration,
    link_timeout: Duration,
    /// 1Paxos with failover: the root and leader follow the survivors.
    failover: bool,
    crashed: Vec<bool>,
    /// The clients are processes of the caller's ([`StoreConfig::client_processes`]).
    client_processes: bool,
}

/// Where the replicas run, with the store's control member linked to each.
#[derive(Debug)]
enum Members {
    Threads {
        control: Mesh,
        threads: Vec<Option<JoinHandle<()>>>,
        abort: Abort,
    },
    Processes(Processes),
}

impl Members {
    fn send(&mut self, r: usize, t: u64, timeout: Duration) -> Result<(), MeshError> {
        match self {
            Members::Threads { control, .. } => control.send(Rank(r), t, &[], timeout),
            Members::Processes(p) => p.control.send(Rank(r), t, &[], timeout),
        }
    }
}

/// What every replica reported when the store closed.
#[derive(Debug, Clone)]
pub struct StoreReport {
    /// The protocol and tree (`1paxos over adaptive-shuffled`).
    pub setup: String,
    /// The tree's root (acceptor, coordinator, sequencer).
    pub root: usize,
    /// The 1Paxos leader.
    pub leader: usize,
    /// One per replica, by index (None for a replica that never reported).
    pub replicas: Vec<Option<ReplicaReport>>,
}

impl StoreReport {
    /// Checks that every replica that closed normally applied the same log (same
    /// count and digest, and the same entries where logs were kept). Crashed replicas
    /// are left out (they hold a prefix), and so are replicas cut off by a crash where
    /// the protocol has no failover (they stopped where they were); if that leaves
    /// none after a crash, there is nothing to compare.
    pub fn check_logs(&self) -> Result<(), KvsError> {
        self.logs_why().map_err(KvsError::Logs)
    }

    fn logs_why(&self) -> Result<(), String> {
        let all: Vec<&ReplicaReport> = self.replicas.iter().flatten().collect();
        let live: Vec<&ReplicaReport> = all
            .iter()
            .copied()
            .filter(|r| r.exit == "closed" && r.fault.is_none())
            .collect();
        let crash = all.iter().any(|r| r.exit == "crashed");
        let Some(first) = live.first() else {
            if crash
                && all
                    .iter()
                    .all(|r| r.exit == "closed" || r.exit == "crashed")
            {
                return Ok(());
            }
            return Err("no replica closed normally".into());
        };
        for r in &live[1..] {
            if (r.applied, r.digest, r.decided) != (first.applied, first.digest, first.decided) {
                return Err(format!(
                    "replica logs differ: replica {} applied {} sets (digest {:#x}, {} slots decided), replica {} applied {} (digest {:#x}, {} slots)",
                    first.replica, first.applied, first.digest, first.decided, r.replica, r.applied, r.digest, r.decided
                ));
            }
            if let (Some(a), Some(b)) = (&first.log, &r.log) {
                if a != b {
                    return Err(format!(
                        "replica logs differ: replicas {} and {} kept different logs",
                        first.replica, r.replica
                    ));
                }
            }
        }
        // Replicas stopped by force at the close deadline are a timeout, not a
        // divergence: their logs were not compared (they did not finish).
        let stopped: Vec<usize> = all
            .iter()
            .filter(|r| r.exit == "aborted" || r.exit == "timed out")
            .map(|r| r.replica)
            .collect();
        if !stopped.is_empty() {
            return Err(format!(
                "shutdown timed out: {} of {} replicas (first: replica {}) did not finish \
                 within the close timeout and were stopped; the {} that finished agree",
                stopped.len(),
                self.replicas.len(),
                stopped[0],
                live.len()
            ));
        }
        for r in self.replicas.iter().flatten() {
            if r.exit != "closed" && r.exit != "crashed" {
                return Err(format!("replica {} ended: {}", r.replica, r.exit));
            }
        }
        Ok(())
    }
}

impl Store {
    /// Builds the tree and the links, and starts one thread per replica.
    pub fn start(cfg: StoreConfig) -> Result<Store, KvsError> {
        let r = cfg.replicas;
        let m = cfg.clients;
        cfg.check_counts()?;
        if cfg.attempts == 0 {
            return Err(KvsError::Config("attempts must be at least 1".into()));
        }
        if cfg.link.capacity == 0 || cfg.link.capacity > 1 << 20 {
            return Err(KvsError::Config(format!(
                "channel capacity {} (1 to 1048576 slots)",
                cfg.link.capacity
            )));
        }
        let need = Entry::max_encoded(cfg.key_len, cfg.value_len) + 1;
        let max = cfg.link.capacity * PAYLOAD_PER_SLOT;
        if need > max {
            return Err(KvsError::Config(format!(
                "{}-byte keys and {}-byte values need {need}-byte messages; channels of {} slots carry {max} (raise the capacity)",
                cfg.key_len, cfg.value_len, cfg.link.capacity
            )));
        }
        if cfg.veto.is_some() && cfg.protocol != Protocol::TwoPc {
            return Err(KvsError::Config(
                "a veto (vote) needs the 2pc protocol".into(),
            ));
        }
        cfg.check_replica_cpus()?;
        if cfg.client_processes && !cfg.deployment.is_processes() {
            return Err(KvsError::Config(
                "client processes join a store of processes: set a Deployment of processes".into(),
            ));
        }
        let tree = cfg.tree.build(r)?;
        let root = tree.root.index();
        let leader = match cfg.leader {
            Some(l) if l >= r => {
                return Err(KvsError::Config(format!(
                    "leader {l} is not a replica (0..{r})"
                )))
            }
            Some(l) => l,
            None => (0..r).find(|&x| x != root).unwrap_or(root),
        };
        let homes = cfg.client_homes()?;
        let mut parent = vec![None; r];
        for (p, cs) in tree.children.iter().enumerate() {
            for c in cs {
                parent[c.index()] = Some(p);
            }
        }
        let lay = Arc::new(Layout {
            replicas: r,
            clients: m,
            root,
            leader,
            parent,
            children: tree
                .children
                .iter()
                .map(|cs| cs.iter().map(|c| c.index()).collect())
                .collect(),
            homes: homes.clone(),
            backups: if cfg.failover && cfg.protocol == Protocol::OnePaxos {
                cfg.client_backups
            } else {
                0
            },
        });
        let links = lay.links(
            cfg.protocol,
            cfg.failover && cfg.protocol == Protocol::OnePaxos,
        );
        let closed = Arc::new(AtomicBool::new(false));
        let client = |c: usize, mesh: ClientMesh| Client {
            id: c,
            home: homes[c],
            serve: lay.client_replicas(c),
            mesh,
            seq: 0,
            limits: Limits::of(&cfg),
            closed: closed.clone(),
            body: Vec::new(),
            buf: vec![0; max],
            retries: 0,
        };
        let (tx, rx) = mpsc::channel();
        let (members, clients) = if cfg.deployment.is_processes() {
            let (p, meshes) = Processes::start(&cfg, &lay, &links, tx, &rx)?;
            let clients = meshes
                .into_iter()
                .enumerate()
                .map(|(c, m)| client(c, ClientMesh::Processes(m)))
                .collect();
            (Members::Processes(p), clients)
        } else {
            Self::start_threads(&cfg, &lay, links, tx, |c, m| {
                client(c, ClientMesh::Threads(m))
            })?
        };
        Ok(Store {
            cfg_name: format!("{} over {}", cfg.protocol, cfg.tree.name()),
            lay,
            members: Some(members),
            clients,
            reports: rx,
            got: vec![None; r],
            closed,
            close_timeout: cfg.close_timeout,
            link_timeout: cfg.link.timeout,
            failover: cfg.failover && cfg.protocol == Protocol::OnePaxos,
            crashed: vec![false; r],
            client_processes: cfg.client_processes && cfg.deployment.is_processes(),
        })
    }

    /// One thread per replica, linked by in-process queuepairs.
    fn start_threads(
        cfg: &StoreConfig,
        lay: &Arc<Layout>,
        links: Vec<(Rank, Rank)>,
        tx: mpsc::Sender<ReplicaReport>,
        client: impl Fn(usize, Mesh) -> Client,
    ) -> Result<(Members, Vec<Client>), KvsError> {
        let r = lay.replicas;
        let m = lay.clients;
        let spec = Arc::new(cfg.tree.clone());
        let mut b = MeshBuilder::new(lay.size())
            .links(links)
            .capacity(cfg.link.capacity);
        if let Some(w) = cfg.link.wait {
            b = b.wait_policy(w);
        }
        let mut meshes = b
            .build()
            .map_err(|e| KvsError::Config(e.to_string()))?
            .into_iter();
        let mut threads = Vec::with_capacity(r);
        let mut replica_meshes: Vec<Mesh> =
            (0..r).map(|_| meshes.next().expect("r meshes")).collect();
        let abort_of = replica_meshes[0].abort_handle();
        for (i, mesh) in replica_meshes.drain(..).enumerate() {
            let rep = Replica::new(
                i,
                mesh,
                lay.clone(),
                cfg.protocol,
                cfg.link.timeout,
                cfg.veto.clone(),
                cfg.keep_log,
                cfg.failover,
                spec.clone(),
            );
            let name = format!("smelt-kvs-{i}");
            let cpus = cfg.replica_cpus.as_ref();
            match replica::spawn_replica(i, name, cpus, tx.clone(), move || rep.run()) {
                Ok(h) => threads.push(Some(h)),
                Err(e) => {
                    abort_of.trigger();
                    return Err(replica::replica_thread_failed(i, e, threads));
                }
            }
        }
        let clients: Vec<Client> = (0..m)
            .map(|c| client(c, meshes.next().expect("m meshes")))
            .collect();
        let control = meshes.next().expect("control mesh");
        Ok((
            Members::Threads {
                control,
                threads,
                abort: abort_of,
            },
            clients,
        ))
    }

    /// The clients (once; later calls return none). Client `c` is `clients[c]`.
    pub fn take_clients(&mut self) -> Vec<Client> {
        std::mem::take(&mut self.clients)
    }

    /// Number of replicas.
    pub fn replicas(&self) -> usize {
        self.lay.replicas
    }

    /// The tree's root (1Paxos acceptor, 2PC coordinator). With 1Paxos failover, the
    /// root of the current view after the crashes made with [`crash`](Store::crash):
    /// the first root while it lives, else the lowest-numbered survivor.
    pub fn root(&self) -> usize {
        if !self.failover || !self.crashed[self.lay.root] {
            return self.lay.root;
        }
        (0..self.lay.replicas)
            .find(|&x| !self.crashed[x])
            .unwrap_or(self.lay.root)
    }

    /// The 1Paxos leader (with failover, of the current view: the first leader while it
    /// lives and is not the root, else the lowest-numbered survivor that is not the
    /// root).
    pub fn leader(&self) -> usize {
        if !self.failover {
            return self.lay.leader;
        }
        let root = self.root();
        if !self.crashed[self.lay.leader] && self.lay.leader != root {
            return self.lay.leader;
        }
        (0..self.lay.replicas)
            .find(|&x| !self.crashed[x] && x != root)
            .unwrap_or(root)
    }

    /// Replicas stopped with [`crash`](Store::crash).
    pub fn crashed(&self) -> Vec<usize> {
        (0..self.lay.replicas)
            .filter(|&x| self.crashed[x])
            .collect()
    }

    /// Each replica's children in the first tree.
    pub fn tree_children(&self) -> &[Vec<usize>] {
        &self.lay.children
    }

    /// Where the replicas' shared memory was made (replicas as processes; None for
    /// threads). Its name is removed once every replica joined, before
    /// [`start`](Store::start) returns, so nothing is left behind whatever happens
    /// later.
    pub fn segment(&self) -> Option<&std::path::Path> {
        match &self.members {
            Some(Members::Processes(p)) => Some(p.segment()),
            _ => None,
        }
    }

    /// The environment client `c`'s own process needs to join the store's world and
    /// [`connect_client`](crate::process::connect_client) (a store of processes with
    /// [`StoreConfig::client_processes`]; None otherwise, or for a client that does
    /// not exist).
    pub fn client_env(&self, c: usize) -> Option<Vec<(String, String)>> {
        match &self.members {
            Some(Members::Processes(p)) if self.client_processes && c < self.lay.clients => {
                Some(p.client_env(self.lay.client_rank(c)))
            }
            _ => None,
        }
    }

    /// The process id of replica `replica` (replicas as processes; None for threads).
    pub fn replica_pid(&self, replica: usize) -> Option<u32> {
        match &self.members {
            Some(Members::Processes(p)) => p.pid(replica),
            _ => None,
        }
    }

    /// Keeps a replica's report.
    fn take(&mut self, mut rep: ReplicaReport) {
        let i = rep.replica;
        if i >= self.got.len() {
            return;
        }
        if self.crashed[i] {
            // A replica process killed by `crash` reports as a crashed thread does.
            rep.exit = "crashed".into();
        }
        self.got[i] = Some(rep);
    }

    /// Stops replica `replica` at once, as a fail-stop crash: its thread ends and its
    /// links close (a replica process is killed with `SIGKILL`); what it held is gone.
    /// With 1Paxos failover the survivors change view and go on; otherwise the
    /// replicas linked to it stop taking part in ordering (sets then fail; reads of
    /// keys without undecided sets are still answered). Its clients move to their
    /// next backup replica (1Paxos failover, [`StoreConfig::client_backups`]) or, with
    /// none left, get [`KvsError::HomeFailed`].
    pub fn crash(&mut self, replica: usize) -> Result<(), KvsError> {
        if replica >= self.lay.replicas {
            return Err(KvsError::Config(format!(
                "replica {replica} does not exist (0..{})",
                self.lay.replicas
            )));
        }
        if self.crashed[replica] {
            return Ok(());
        }
        let t = self.link_timeout;
        match self.members.as_mut().ok_or(KvsError::Closed)? {
            Members::Processes(p) => p.kill(replica)?,
            m => m
                .send(replica, tag(Kind::Crash, 0), t)
                .map_err(|e| KvsError::Replica {
                    replica,
                    what: e.to_string(),
                })?,
        }
        self.crashed[replica] = true;
        // Wait for it to be gone (bounded).
        let deadline = Instant::now() + self.close_timeout;
        while self.got[replica].is_none() && Instant::now() < deadline {
            match self.reports.recv_timeout(Duration::from_millis(10)) {
                Ok(rep) => self.take(rep),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        Ok(())
    }

    /// Closes the store: clients' later operations fail with [`KvsError::Closed`]; the
    /// root finishes deciding what it ordered and tells every replica to stop (after
    /// `close_timeout`, replicas still running are stopped by force). Returns every
    /// replica's report.
    pub fn close(mut self) -> Result<StoreReport, KvsError> {
        Ok(self.shutdown())
    }

    fn shutdown(&mut self) -> StoreReport {
        self.closed.store(true, Ordering::Release);
        let t = self.link_timeout.min(self.close_timeout);
        // Every live replica hears it: whichever is the root of the current view (the
        // acceptor may have changed) finishes and tells the others.
        if let Some(c) = self.members.as_mut() {
            for r in 0..self.lay.replicas {
                if self.got[r].is_none() {
                    let _ = c.send(r, tag(Kind::Fin, 0), t);
                }
            }
        }
        // Shutdown of a large store takes time in proportion to its size (every
        // replica hears the end down the tree and must be scheduled, with hundreds of
        // replicas on a few CPUs): the close timeout grows with it.
        // The close timeout bounds the time *without progress*: while replicas keep
        // finishing, the wait goes on, up to an absolute bound that grows with the
        // store (so a busy machine slows shutdown down but never fails it).
        let start = Instant::now();
        let hard = start + close_deadline(self.close_timeout, self.lay.replicas) * 4;
        let mut deadline = start + close_deadline(self.close_timeout, self.lay.replicas);
        let mut forced = false;
        // Replica processes killed because they did not finish in time.
        let mut stopped = vec![false; self.lay.replicas];
        while self.got.iter().any(|g| g.is_none()) {
            let now = Instant::now();
            if now >= deadline && !forced {
                // What did not finish in time is stopped.
                match &self.members {
                    Some(Members::Threads { abort, .. }) => abort.trigger(),
                    Some(Members::Processes(p)) => {
                        for (r, st) in stopped.iter_mut().enumerate() {
                            if self.got[r].is_none() {
                                let _ = p.kill(r);
                                *st = true;
                            }
                        }
                    }
                    None => {}
                }
                forced = true;
            }
            let wait = if forced {
                Duration::from_secs(5)
            } else {
                deadline - now
            };
            match self
                .reports
                .recv_timeout(wait.min(Duration::from_millis(100)))
            {
                Ok(mut rep) => {
                    if stopped.get(rep.replica) == Some(&true) {
                        rep.exit = "aborted".into();
                    }
                    self.take(rep);
                    if !forced {
                        deadline = deadline.max(Instant::now() + self.close_timeout).min(hard);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if forced && Instant::now() > deadline + Duration::from_secs(5) {
                        break;
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        match self.members.take() {
            Some(Members::Threads { mut threads, .. }) => {
                for h in threads.iter_mut() {
                    if let Some(h) = h.take() {
                        if h.is_finished() || !forced {
                            let _ = h.join();
                        }
                    }
                }
            }
            // Reaps every process (killing any still running).
            Some(Members::Processes(p)) => drop(p),
            None => {}
        }
        StoreReport {
            setup: self.cfg_name.clone(),
            root: self.lay.root,
            leader: self.lay.leader,
            replicas: std::mem::take(&mut self.got),
        }
    }
}

/// The close timeout of a store of `replicas`: the configured one plus
/// [`CLOSE_TIME_PER_REPLICA`] per replica. Closing waits at least this long, longer
/// while replicas keep finishing (until none has for the configured close timeout),
/// and at most four times this.
pub(crate) fn close_deadline(close_timeout: Duration, replicas: usize) -> Duration {
    close_timeout + CLOSE_TIME_PER_REPLICA * replicas.min(1 << 20) as u32
}

/// The close timeout's allowance per replica ([`close_deadline`]).
pub(crate) const CLOSE_TIME_PER_REPLICA: Duration = Duration::from_millis(20);

impl Drop for Store {
    fn drop(&mut self) {
        if self.members.is_some() {
            self.shutdown();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(replica: usize, exit: &str, applied: u64) -> ReplicaReport {
        let mut r = ReplicaReport::without_log(replica, exit.into(), String::new());
        r.fault = None;
        r.applied = applied;
        r.decided = applied;
        r.digest = applied * 7;
        r
    }

    /// A replica stopped by force at the close deadline (a large store on few CPUs)
    /// is a timeout, named as one; the replicas that finished are still compared.
    #[test]
    fn a_replica_stopped_at_the_deadline_is_a_timeout_not_diverging_logs() {
        let rep = StoreReport {
            setup: "test".into(),
            root: 0,
            leader: 0,
            replicas: vec![
                Some(report(0, "closed", 5)),
                Some(report(1, "closed", 5)),
                Some(report(2, "aborted", 3)),
            ],
        };
        let e = rep.check_logs().unwrap_err().to_string();
        assert!(e.starts_with("shutdown timed out"), "{e}");
        assert!(e.contains("replica 2"), "{e}");
        assert!(!e.contains("differ"), "{e}");
        // Divergence among finished replicas is still divergence.
        let rep = StoreReport {
            replicas: vec![Some(report(0, "closed", 5)), Some(report(1, "closed", 4))],
            ..rep
        };
        assert!(rep
            .check_logs()
            .unwrap_err()
            .to_string()
            .starts_with("replica logs differ"));
    }

    #[test]
    fn the_close_deadline_grows_with_the_store() {
        let t = Duration::from_secs(10);
        assert_eq!(close_deadline(t, 0), t);
        assert!(close_deadline(t, 1024) >= t + Duration::from_secs(20));
        assert!(close_deadline(t, 1024) > close_deadline(t, 16));
    }
}
