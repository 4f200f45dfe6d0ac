//! How a store is built, and its errors.

use smelt_plan::shape::Ranked;
use smelt_plan::{Shape, Tree};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// Each replica's parent and children in a tree (replica indices).
pub type ParentsChildren = (Vec<Option<usize>>, Vec<Vec<usize>>);

/// The agreement protocol that orders a store's sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// 1Paxos (paper §5.6): a set goes client → home replica → leader → acceptor; the
    /// acceptor assigns the next log slot and broadcasts it over the tree (rooted at
    /// the acceptor). Here every replica acknowledges up the tree and the acceptor
    /// broadcasts the commit point, so that reads at any replica are linearizable
    /// (see the crate documentation); the client's home replica answers it once the
    /// set is committed. Pipelined: many slots in flight.
    OnePaxos,
    /// Two-phase commit over the tree: the coordinator (the tree's root) broadcasts
    /// *prepare* with the set, the replicas' votes are reduced up the tree (any *no*
    /// aborts), then *commit* or *abort* is broadcast. One transaction at a time.
    TwoPc,
    /// The plain atomic broadcast (the paper's reference line in Figure 12): the root
    /// sequences sets and broadcasts them, replicas apply on delivery and the home
    /// replica answers at once. No agreement round: fast, but a read at one replica
    /// may miss a set another replica already answered (sequentially consistent, not
    /// linearizable across replicas). For benchmarks.
    Broadcast,
}

impl Protocol {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::OnePaxos => "1paxos",
            Protocol::TwoPc => "2pc",
            Protocol::Broadcast => "broadcast",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Protocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "1paxos" | "onepaxos" | "paxos" => Ok(Protocol::OnePaxos),
            "2pc" | "twopc" | "two-phase-commit" => Ok(Protocol::TwoPc),
            "broadcast" | "ab" | "atomic-broadcast" => Ok(Protocol::Broadcast),
            other => Err(format!(
                "unknown protocol '{other}' (known: 1paxos, 2pc, broadcast)"
            )),
        }
    }
}

/// The tree the acceptor (coordinator) broadcasts over; its root is the acceptor.
/// Tree position `i` is replica `i`.
///
/// The store builds no tree itself: it is handed a tree builder ([`Shape`]) or a
/// tree. smelt's generators are in `smelt-tree`: a `smelt_tree::Topology` is a shape
/// over a uniform machine (every two replicas equally far apart), a
/// `smelt_tree::ModelShape` one over a machine model (replica `i` on CPU `cpus[i]`):
/// `TreeSpec::shaped(Topology::AdaptiveShuffled)`. The rank-based trees of
/// `smelt-plan` ([`Ranked`]: the star, the binary and k-nomial trees) need no tree
/// crate; `Ranked::Sequential` is the paper's baseline, the acceptor sending to every
/// replica in turn.
#[derive(Debug, Clone)]
pub enum TreeSpec {
    /// Trees made by a builder: the first over every replica, and after a 1Paxos view
    /// change one over the survivors, rooted at the new acceptor (replica processes
    /// rebuild it from its [`Shape::describe`] text).
    Shaped(std::sync::Arc<dyn Shape>),
    /// A tree of your own over the replicas (member `i` is replica `i`; the CPU ids
    /// are not used). After a view change the tree over the survivors is the
    /// sequential star.
    Explicit(Tree),
}

impl Default for TreeSpec {
    /// The binomial tree (`knomial:2`) in replica order, rooted at replica 0.
    fn default() -> Self {
        TreeSpec::Shaped(std::sync::Arc::new(Ranked::Knomial(2)))
    }
}

impl<S: Shape + 'static> From<S> for TreeSpec {
    fn from(s: S) -> TreeSpec {
        TreeSpec::shaped(s)
    }
}

impl TreeSpec {
    /// Trees made by `shape` ([`TreeSpec::Shaped`]).
    pub fn shaped(shape: impl Shape + 'static) -> TreeSpec {
        TreeSpec::Shaped(std::sync::Arc::new(shape))
    }

    /// Builds the tree over `replicas` replicas.
    pub fn build(&self, replicas: usize) -> Result<Tree, KvsError> {
        let bad = |e: &dyn fmt::Display| KvsError::Config(format!("tree: {e}"));
        let t = match self {
            TreeSpec::Shaped(s) => {
                let all: Vec<usize> = (0..replicas).collect();
                let t = s.build(replicas, &all, None).map_err(|e| bad(&e))?;
                if t.len() != replicas {
                    return Err(KvsError::Config(format!(
                        "tree: {} members for {replicas} replicas",
                        t.len()
                    )));
                }
                t
            }
            TreeSpec::Explicit(t) => {
                if t.len() != replicas {
                    return Err(KvsError::Config(format!(
                        "tree: {} members for {replicas} replicas",
                        t.len()
                    )));
                }
                t.clone()
            }
        };
        t.validate().map_err(|e| bad(&e))?;
        Ok(t)
    }

    /// The tree over the replicas `members` (indices, in order) rooted at `root`, as
    /// each replica's parent and children (replica indices; `replicas` entries, the
    /// others empty). An explicit tree cannot be rebuilt over a subset: its
    /// replacement is the sequential star.
    pub fn build_over(
        &self,
        replicas: usize,
        members: &[usize],
        root: usize,
    ) -> Result<ParentsChildren, KvsError> {
        let bad = |e: &dyn fmt::Display| KvsError::Config(format!("tree: {e}"));
        let t = match self {
            TreeSpec::Shaped(s) => s.build(replicas, members, Some(root)),
            TreeSpec::Explicit(_) => Ranked::Sequential.build(replicas, members, Some(root)),
        }
        .map_err(|e| bad(&e))?;
        if t.len() != members.len() {
            return Err(KvsError::Config(format!(
                "tree: {} members for {} survivors",
                t.len(),
                members.len()
            )));
        }
        let mut parent = vec![None; replicas];
        let mut children = vec![Vec::new(); replicas];
        for (p, cs) in t.children.iter().enumerate() {
            for c in cs {
                children[members[p]].push(members[c.index()]);
                parent[members[c.index()]] = Some(members[p]);
            }
        }
        Ok((parent, children))
    }

    /// A short description for reports (`adaptive-shuffled`, `explicit`).
    pub fn name(&self) -> String {
        match self {
            TreeSpec::Shaped(s) => s.name(),
            TreeSpec::Explicit(_) => "explicit".into(),
        }
    }
}

/// A replica's veto on a set (two-phase commit's vote): called with the replica's
/// index, the key and the value; `false` votes *no* and the set is aborted everywhere.
pub type Veto = Arc<dyn Fn(usize, &[u8], &[u8]) -> bool + Send + Sync>;

/// How a store is built. `StoreConfig::new(replicas, clients)` gives the defaults.
#[derive(Clone)]
pub struct StoreConfig {
    /// Number of replicas (at least 1).
    pub replicas: usize,
    /// Number of clients (each attached to one replica, its home).
    pub clients: usize,
    /// The agreement protocol. Default [`Protocol::OnePaxos`].
    pub protocol: Protocol,
    /// The tree the acceptor broadcasts over (its root is the acceptor). Default
    /// the binomial tree ([`TreeSpec::default`]); smelt's trees come from
    /// `smelt-tree` ([`TreeSpec`]).
    pub tree: TreeSpec,
    /// The 1Paxos leader (a replica index); default: the lowest-numbered replica that
    /// is not the acceptor. Other protocols have no leader.
    pub leader: Option<usize>,
    /// Home replica of each client (replica indices); default: client `c` at replica
    /// `c % replicas`.
    pub homes: Option<Vec<usize>>,
    /// Longest key, in bytes (at most 255). Default 8.
    pub key_len: usize,
    /// Longest value, in bytes. Default 16.
    pub value_len: usize,
    /// The shared link settings: `capacity` is the slots per channel, each way, per
    /// link (default 64); `timeout` is the longest a replica waits to send one message
    /// (a full link; default 10 s, see [`StoreConfig::new`]); `wait` is how members
    /// wait (default `None`: dedicated when every member may have a CPU of its own,
    /// oversubscribed otherwise).
    pub link: smelt_mesh::LinkConfig,
    /// How long a client waits for one attempt of an operation. Default 2 s.
    pub attempt_timeout: Duration,
    /// Attempts per operation (a retry resends the same request id, so a set is applied
    /// once however often it is sent). Default 3.
    pub attempts: u32,
    /// How long [`Store::close`](crate::Store::close) waits for the replicas to finish
    /// what was accepted before stopping them: this plus 20 ms per replica (a large
    /// store's shutdown on few CPUs takes time in proportion to its size), longer
    /// while replicas keep finishing (until none has for this long), and at most four
    /// times that. Default 10 s.
    pub close_timeout: Duration,
    /// Keep every replica's applied log in memory (for tests; a digest is always
    /// kept). Default false.
    pub keep_log: bool,
    /// Two-phase commit only: a replica's vote on each set (default: always yes).
    pub veto: Option<Veto>,
    /// OS CPU of each replica's thread (by replica index): pinned where this process
    /// may use that CPU. Default: unpinned.
    pub replica_cpus: Option<Vec<u32>>,
    /// 1Paxos only: when a replica stops, the survivors change view (a new ballot, the
    /// tree rebuilt over the survivors, a backup acceptor if the acceptor stopped, a new
    /// leader if the leader stopped) and go on, losing no accepted set. Needs a link
    /// between every two replicas. Default true.
    pub failover: bool,
    /// Where the replicas run: threads of this process (default) or one process each
    /// ([`Deployment::Processes`](crate::Deployment)).
    pub deployment: crate::process::Deployment,
    /// Replicas as processes only: the clients are processes of your own too, members
    /// of the store's world that connect with
    /// [`process::connect_client`](crate::process::connect_client) (start client `c`
    /// with [`Store::client_env`](crate::Store::client_env)`(c)`);
    /// [`Store::take_clients`](crate::Store::take_clients) then gives none. Default
    /// false: the clients are this process's.
    pub client_processes: bool,
    /// 1Paxos with failover only: how many replicas after its home (in index order,
    /// wrapping) each client is also linked to. When its home stops, a client moves to
    /// the first of them that lives and retries there with the same request id (a set
    /// is still applied once); [`KvsError::HomeFailed`] only once none is left.
    /// Default 2 (0: clients stay with their home).
    pub client_backups: usize,
}

impl fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreConfig")
            .field("replicas", &self.replicas)
            .field("clients", &self.clients)
            .field("protocol", &self.protocol)
            .field("tree", &self.tree)
            .field("leader", &self.leader)
            .field("homes", &self.homes)
            .field("key_len", &self.key_len)
            .field("value_len", &self.value_len)
            .field("link", &self.link)
            .field("attempt_timeout", &self.attempt_timeout)
            .field("attempts", &self.attempts)
            .field("close_timeout", &self.close_timeout)
            .field("keep_log", &self.keep_log)
            .field("veto", &self.veto.as_ref().map(|_| "..."))
            .field("replica_cpus", &self.replica_cpus)
            .field("failover", &self.failover)
            .field("deployment", &self.deployment)
            .field("client_backups", &self.client_backups)
            .field("client_processes", &self.client_processes)
            .finish()
    }
}

impl StoreConfig {
    /// What every store (smelt's and the Raft peer) asks of the numbers of replicas
    /// and clients and of the key length.
    pub fn check_counts(&self) -> Result<(), KvsError> {
        let (r, m) = (self.replicas, self.clients);
        if r == 0 {
            return Err(KvsError::Config(
                "a store needs at least one replica".into(),
            ));
        }
        if r > 4096 || m > 65536 {
            return Err(KvsError::Config(format!(
                "{r} replicas and {m} clients: at most 4096 replicas and 65536 clients"
            )));
        }
        if self.key_len > 255 {
            return Err(KvsError::Config(format!(
                "keys of {} bytes: at most 255",
                self.key_len
            )));
        }
        Ok(())
    }

    /// `replica_cpus`, if given, names one CPU per replica.
    pub fn check_replica_cpus(&self) -> Result<(), KvsError> {
        if let Some(c) = &self.replica_cpus {
            if c.len() != self.replicas {
                return Err(KvsError::Config(format!(
                    "{} replica CPUs for {} replicas",
                    c.len(),
                    self.replicas
                )));
            }
        }
        Ok(())
    }

    /// Each client's home replica: `homes`, checked, or client `c` at replica
    /// `c % replicas`.
    pub fn client_homes(&self) -> Result<Vec<usize>, KvsError> {
        let (r, m) = (self.replicas, self.clients);
        match &self.homes {
            Some(h) => {
                if h.len() != m {
                    return Err(KvsError::Config(format!(
                        "{} homes for {m} clients",
                        h.len()
                    )));
                }
                if let Some(&bad) = h.iter().find(|&&x| x >= r) {
                    return Err(KvsError::Config(format!(
                        "home {bad} is not a replica (0..{r})"
                    )));
                }
                Ok(h.clone())
            }
            None => Ok((0..m).map(|c| c % r).collect()),
        }
    }

    /// The defaults for `replicas` replicas and `clients` clients.
    pub fn new(replicas: usize, clients: usize) -> StoreConfig {
        StoreConfig {
            replicas,
            clients,
            protocol: Protocol::OnePaxos,
            tree: TreeSpec::default(),
            leader: None,
            homes: None,
            key_len: 8,
            value_len: 16,
            // 10 s, not the shared 30 s: a send that finds a link full for that long
            // means a stopped or stuck replica, and failover and close should not wait
            // three times longer to find out.
            link: smelt_mesh::LinkConfig::default().timeout(Duration::from_secs(10)),
            attempt_timeout: Duration::from_secs(2),
            attempts: 3,
            close_timeout: Duration::from_secs(10),
            keep_log: false,
            veto: None,
            replica_cpus: None,
            failover: true,
            deployment: Default::default(),
            client_backups: 2,
            client_processes: false,
        }
    }

    /// With protocol `p`.
    pub fn protocol(mut self, p: Protocol) -> StoreConfig {
        self.protocol = p;
        self
    }

    /// With tree `t`.
    pub fn tree(mut self, t: TreeSpec) -> StoreConfig {
        self.tree = t;
        self
    }
}

/// What went wrong, for a store or one operation.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KvsError {
    /// The store cannot be built as configured.
    #[error("invalid store configuration: {0}")]
    Config(String),
    /// A key longer than the store's key length.
    #[error("key of {len} bytes is longer than this store's {max}-byte keys")]
    KeyTooLong {
        /// The key's length.
        len: usize,
        /// The store's key length.
        max: usize,
    },
    /// A value longer than the store's value length.
    #[error("value of {len} bytes is longer than this store's {max}-byte values")]
    ValueTooLong {
        /// The value's length.
        len: usize,
        /// The store's value length.
        max: usize,
    },
    /// The store was closed.
    #[error("the store is closed")]
    Closed,
    /// No answer within the client's attempts. A set that timed out may or may not
    /// have been applied (it is applied at most once).
    #[error("{op} got no answer after {attempts} attempts of {per_attempt:?}")]
    Timeout {
        /// "get" or "set".
        op: &'static str,
        /// Attempts made.
        attempts: u32,
        /// Wait per attempt.
        per_attempt: Duration,
    },
    /// The replica cannot serve this (a replica it depends on failed, the store is
    /// stopping). A set refused this way may have been applied (at most once).
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The client's home replica stopped (fail-stop), and so did its backups if it has
    /// any ([`StoreConfig::client_backups`]): the client cannot reach the store any
    /// more (a set in flight may have been applied, at most once).
    #[error("home replica {replica} failed")]
    HomeFailed {
        /// The home replica.
        replica: usize,
    },
    /// Two-phase commit aborted the set (a replica voted no); it was not applied.
    #[error("set rejected: {0}")]
    Rejected(String),
    /// A history file that cannot be read (`history::read_history`; the message names
    /// the line).
    #[error("{0}")]
    History(String),
    /// A replica thread or process could not be started, or failed.
    #[error("replica {replica}: {what}")]
    Replica {
        /// The replica.
        replica: usize,
        /// What happened.
        what: String,
    },
    /// A history that is not linearizable, or cannot be checked: why
    /// ([`history::check_history`](crate::history::check_history)).
    #[error("{0}")]
    NotLinearizable(String),
    /// The replicas that closed normally applied different logs, or none did
    /// ([`StoreReport::check_logs`](crate::StoreReport::check_logs)).
    #[error("{0}")]
    Logs(String),
}
