//! The Raft peer (issue 12; moved here from `smelt-kvs`, which no longer compiles
//! raft-rs): the same key-value store replicated with a well-kept
//! Raft library, tikv's `raft` crate (raft-rs), the way a user of raft-rs in one
//! process would build it: one thread per replica driving its `RawNode` over an
//! in-memory `MemStorage` (no disk), messages between replicas and to and from
//! clients over std channels, a timer tick.
//!
//! * Sets: the client's home replica proposes the set (client, request id, key,
//!   value); a follower forwards the proposal to the leader (raft-rs's proposal
//!   forwarding). Every replica applies committed entries in log order, skipping a
//!   request it applied already (a retry), and the home replica answers the client
//!   when it applies the set.
//! * Gets: linearizable reads by Raft's ReadIndex at the home replica: the gets that
//!   arrived since the last round share one `read_index` request; the leader confirms
//!   its leadership with a heartbeat round (`ReadOnlyOption::Safe`) and returns its
//!   commit index; the home replica answers the gets from its own copy once it has
//!   applied up to that index (a follower read).
//! * Clients, their homes, key and value lengths, timeouts and errors are the smelt
//!   store's ([`StoreConfig`], [`KvsError`], [`smelt_kvs::replicate`]);
//!   [`RaftStore::close`] reports like [`Store::close`](smelt_kvs::Store::close) so
//!   that [`StoreReport::check_logs`] compares what the replicas applied.

use raft::eraftpb::{ConfState, EntryType, Message};
use raft::storage::MemStorage;
use raft::{Config, RawNode, ReadOnlyOption, StateRole, Storage as _};
use smelt_kvs::replicate::{
    gone, replica_thread_failed, spawn_replica, Entry, Limits, ReplicaReport, StateMachine,
};
use smelt_kvs::{KvsError, StoreConfig, StoreReport};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The Raft timer: a tick every 10 ms, heartbeats every 2 ticks, elections after
/// 50–100 ticks without a leader (long enough that a replica thread descheduled on
/// an oversubscribed machine does not start elections).
const TICK: Duration = Duration::from_millis(10);
const HEARTBEAT_TICKS: usize = 2;
const ELECTION_TICKS: usize = 50;
/// A read-index request not answered within this many ticks is asked again (raft-rs
/// drops it at a follower that knows no leader, and at a new leader that has not yet
/// committed an entry of its term).
const REREAD_TICKS: u32 = 5;
/// Log entries kept below the lowest index every live replica applied (the rest is
/// compacted away, so long runs take bounded memory).
const KEEP_ENTRIES: u64 = 1 << 16;
/// Inputs a replica takes in before handling Raft's `Ready` (batching under load).
const BATCH: usize = 1024;

/// What reaches a replica thread.
enum Input {
    Raft(Box<Message>),
    Set {
        client: u32,
        seq: u64,
        data: Vec<u8>,
    },
    Get {
        client: u32,
        seq: u64,
        key: Vec<u8>,
    },
    /// Stop taking new operations (the store is closing).
    Close,
    /// Stop now; `timed_out`: the replicas did not converge within the close timeout.
    Stop {
        timed_out: bool,
    },
    /// Stop now, as a fail-stop crash.
    Crash,
}

/// What a client hears back.
struct Reply {
    seq: u64,
    what: Answer,
}

enum Answer {
    SetOk,
    Got(Option<Vec<u8>>),
    Closed,
}

/// What the replicas publish for the store (and for each other's log compaction).
struct Shared {
    applied_index: Vec<AtomicU64>,
    last_index: Vec<AtomicU64>,
    live: Vec<AtomicBool>,
    /// The replica that last became leader.
    leader: AtomicUsize,
}

/// A key-value store replicated with raft-rs: replicas as threads, and the clients
/// to hand to the threads that use them ([`take_clients`](RaftStore::take_clients)).
/// Built from the same [`StoreConfig`] as a [`Store`](smelt_kvs::Store) (replicas,
/// clients, homes, key and value lengths, attempts, timeouts, `keep_log`,
/// `replica_cpus`; the protocol, tree, leader, capacity, wait policy and failover
/// fields do not apply: Raft elects its leader and always fails over while a
/// majority lives).
///
/// ```
/// use smelt_bench::kvs::RaftStore;
/// use smelt_kvs::StoreConfig;
/// let mut store = RaftStore::start(StoreConfig::new(3, 2)).unwrap();
/// let mut clients = store.take_clients();
/// let (mut a, mut b) = (clients.remove(0), clients.remove(0));
/// a.set(b"answer", b"42").unwrap();
/// assert_eq!(b.get(b"answer").unwrap(), Some(b"42".to_vec())); // ReadIndex at b's home
/// let report = store.close().unwrap();
/// report.check_logs().unwrap();
/// ```
#[derive(Debug)]
pub struct RaftStore {
    replicas: usize,
    inputs: Vec<Sender<Input>>,
    clients: Vec<RaftClient>,
    threads: Vec<Option<JoinHandle<()>>>,
    reports: Receiver<ReplicaReport>,
    got: Vec<Option<ReplicaReport>>,
    shared: Arc<Shared>,
    closed: Arc<AtomicBool>,
    close_timeout: Duration,
    crashed: Vec<bool>,
    done: bool,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("leader", &self.leader.load(Ordering::Relaxed))
            .finish()
    }
}

impl RaftStore {
    /// Starts one thread per replica (raft ids `1..=replicas`); replica 0 campaigns at
    /// once, so that the store has a leader without waiting for an election timeout.
    pub fn start(cfg: StoreConfig) -> Result<RaftStore, KvsError> {
        let r = cfg.replicas;
        let m = cfg.clients;
        cfg.check_counts()?;
        if cfg.value_len > 1 << 24 {
            return Err(KvsError::Config(format!(
                "values of {} bytes: at most 16 MiB",
                cfg.value_len
            )));
        }
        if cfg.attempts == 0 {
            return Err(KvsError::Config("attempts must be at least 1".into()));
        }
        if cfg.attempt_timeout.is_zero() {
            return Err(KvsError::Config(
                "the attempt timeout must be above 0".into(),
            ));
        }
        cfg.check_replica_cpus()?;
        let homes = cfg.client_homes()?;
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let voters: Vec<u64> = (1..=r as u64).collect();
        let mut nodes = Vec::with_capacity(r);
        for i in 0..r {
            let config = Config {
                id: i as u64 + 1,
                election_tick: ELECTION_TICKS,
                heartbeat_tick: HEARTBEAT_TICKS,
                max_size_per_msg: 1 << 20,
                max_inflight_msgs: 256,
                pre_vote: true,
                read_only_option: ReadOnlyOption::Safe,
                ..Default::default()
            };
            let storage =
                MemStorage::new_with_conf_state(ConfState::from((voters.clone(), vec![])));
            let node = RawNode::new(&config, storage, &logger)
                .map_err(|e| KvsError::Config(format!("raft: {e}")))?;
            nodes.push(node);
        }
        let shared = Arc::new(Shared {
            applied_index: (0..r).map(|_| AtomicU64::new(0)).collect(),
            last_index: (0..r).map(|_| AtomicU64::new(0)).collect(),
            live: (0..r).map(|_| AtomicBool::new(true)).collect(),
            leader: AtomicUsize::new(0),
        });
        let (inputs, inboxes): (Vec<Sender<Input>>, Vec<Receiver<Input>>) =
            (0..r).map(|_| mpsc::channel()).unzip();
        let (reply_tx, reply_rx): (Vec<Sender<Reply>>, Vec<Receiver<Reply>>) =
            (0..m).map(|_| mpsc::channel()).unzip();
        let (rtx, reports) = mpsc::channel();
        let mut threads = Vec::with_capacity(r);
        for (i, (node, inbox)) in nodes.into_iter().zip(inboxes).enumerate() {
            let rep = RaftReplica {
                me: i,
                node,
                inbox,
                peers: inputs.clone(),
                replies: (0..m)
                    .map(|c| (homes[c] == i).then(|| reply_tx[c].clone()))
                    .collect(),
                shared: shared.clone(),
                sm: StateMachine::new(cfg.keep_log),
                waiting_sets: HashMap::new(),
                unproposed: Vec::new(),
                new_gets: Vec::new(),
                reads: HashMap::new(),
                next_read: 0,
                ready_reads: Vec::new(),
                applied_index: 0,
                closing: false,
                fault: None,
                leader: 0,
                leader_changes: 0,
                ticks: 0,
                since_compact: 0,
            };
            // A panic inside raft-rs (a broken invariant) ends this replica with a
            // report saying so instead of leaving the store waiting.
            let run = move || {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rep.run())).unwrap_or_else(
                    |p| {
                        let what = p
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default();
                        panicked_report(i, what)
                    },
                )
            };
            let name = format!("smelt-raft-{i}");
            let cpus = cfg.replica_cpus.as_ref();
            match spawn_replica(i, name, cpus, rtx.clone(), run) {
                Ok(h) => threads.push(Some(h)),
                Err(e) => {
                    for tx in &inputs {
                        let _ = tx.send(Input::Crash);
                    }
                    return Err(replica_thread_failed(i, e, threads));
                }
            }
        }
        drop(reply_tx);
        let closed = Arc::new(AtomicBool::new(false));
        let clients = reply_rx
            .into_iter()
            .enumerate()
            .map(|(c, replies)| RaftClient {
                id: c,
                home: homes[c],
                to_home: inputs[homes[c]].clone(),
                replies,
                seq: 0,
                limits: Limits::of(&cfg),
                closed: closed.clone(),
                retries: 0,
            })
            .collect();
        Ok(RaftStore {
            replicas: r,
            inputs,
            clients,
            threads,
            reports,
            got: vec![None; r],
            shared,
            closed,
            close_timeout: cfg.close_timeout,
            crashed: vec![false; r],
            done: false,
        })
    }

    /// The clients (once; later calls return none). Client `c` is `clients[c]`.
    pub fn take_clients(&mut self) -> Vec<RaftClient> {
        std::mem::take(&mut self.clients)
    }

    /// Number of replicas.
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// The replica that last became leader (it may have stopped since).
    pub fn leader(&self) -> usize {
        self.shared.leader.load(Ordering::Acquire)
    }

    /// The replicas stopped by [`crash`](RaftStore::crash).
    pub fn crashed(&self) -> Vec<usize> {
        (0..self.replicas).filter(|&r| self.crashed[r]).collect()
    }

    /// Stops replica `replica` as a fail-stop crash: it sends nothing more, and its
    /// clients get [`KvsError::HomeFailed`]. The others go on while a majority lives
    /// (electing a new leader if it was the leader).
    pub fn crash(&mut self, replica: usize) -> Result<(), KvsError> {
        if replica >= self.replicas {
            return Err(KvsError::Config(format!(
                "replica {replica} does not exist (0..{})",
                self.replicas
            )));
        }
        if self.done {
            return Err(KvsError::Closed);
        }
        if self.crashed[replica] {
            return Ok(());
        }
        self.crashed[replica] = true;
        self.shared.live[replica].store(false, Ordering::Release);
        let _ = self.inputs[replica].send(Input::Crash);
        let deadline = Instant::now() + self.close_timeout;
        while self.got[replica].is_none() && Instant::now() < deadline {
            match self.reports.recv_timeout(Duration::from_millis(10)) {
                Ok(rep) => {
                    let i = rep.replica;
                    self.got[i] = Some(rep);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        Ok(())
    }

    /// Closes the store: clients' later operations fail with [`KvsError::Closed`]; the
    /// replicas go on until every live one applied the whole log (at most
    /// `close_timeout`; replicas stopped then report `exit: "timed out"`), then stop.
    /// Returns every replica's report (`decided` is the Raft index applied, `delivered`
    /// the last index in its log, `view_changes` the leader changes it saw).
    pub fn close(mut self) -> Result<StoreReport, KvsError> {
        Ok(self.shutdown())
    }

    fn shutdown(&mut self) -> StoreReport {
        self.done = true;
        self.closed.store(true, Ordering::Release);
        let live: Vec<usize> = (0..self.replicas)
            .filter(|&r| !self.crashed[r] && self.got[r].is_none())
            .collect();
        for &r in &live {
            let _ = self.inputs[r].send(Input::Close);
        }
        // Wait until every live replica applied all it holds (the leader's last entry
        // committed and applied everywhere).
        let deadline = Instant::now() + self.close_timeout;
        let timed_out = loop {
            let last = live
                .iter()
                .map(|&r| self.shared.last_index[r].load(Ordering::Acquire))
                .max()
                .unwrap_or(0);
            if live
                .iter()
                .all(|&r| self.shared.applied_index[r].load(Ordering::Acquire) == last)
            {
                break false;
            }
            if Instant::now() >= deadline {
                break true;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        for &r in &live {
            let _ = self.inputs[r].send(Input::Stop { timed_out });
        }
        let deadline = Instant::now() + self.close_timeout;
        while self
            .got
            .iter()
            .enumerate()
            .any(|(r, g)| g.is_none() && !self.crashed[r])
        {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match self
                .reports
                .recv_timeout(left.min(Duration::from_millis(100)))
            {
                Ok(rep) => {
                    let i = rep.replica;
                    self.got[i] = Some(rep);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        for (r, h) in self.threads.iter_mut().enumerate() {
            if self.got[r].is_some() {
                if let Some(h) = h.take() {
                    let _ = h.join();
                }
            }
        }
        let leader = self.leader();
        StoreReport {
            setup: "raft".into(),
            root: leader,
            leader,
            replicas: std::mem::take(&mut self.got),
        }
    }
}

impl Drop for RaftStore {
    fn drop(&mut self) {
        if !self.done {
            self.shutdown();
        }
    }
}

/// One client of a [`RaftStore`], attached to one replica (its home), as
/// [`Client`](smelt_kvs::Client) is to a smelt store: one operation at a time, each
/// carrying a request id, retried with the same id after `attempt_timeout`.
#[derive(Debug)]
pub struct RaftClient {
    id: usize,
    home: usize,
    to_home: Sender<Input>,
    replies: Receiver<Reply>,
    seq: u64,
    limits: Limits,
    closed: Arc<AtomicBool>,
    retries: u64,
}

impl std::fmt::Debug for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Input")
    }
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Reply({})", self.seq)
    }
}

impl RaftClient {
    /// This client's id (0-based, as in histories).
    pub fn id(&self) -> usize {
        self.id
    }

    /// Retries made so far (attempts beyond the first).
    pub fn retries(&self) -> u64 {
        self.retries
    }

    /// The request id the next operation will carry.
    pub fn next_request_id(&self) -> u64 {
        self.seq + 1
    }

    /// Index of the client's home replica.
    pub fn home(&self) -> usize {
        self.home
    }

    /// Sets `key` to `value`; returns once the set is committed (a majority has it)
    /// and applied at the home replica.
    pub fn set(&mut self, key: &[u8], value: &[u8]) -> Result<(), KvsError> {
        self.limits.check(key, Some(value))?;
        let client = self.id as u32;
        let e = |seq| {
            let mut data = Vec::with_capacity(13 + key.len() + value.len());
            Entry {
                client,
                seq,
                key: key.to_vec(),
                value: value.to_vec(),
            }
            .encode(&mut data);
            Input::Set { client, seq, data }
        };
        match self.call(e, "set")? {
            Answer::SetOk => Ok(()),
            _ => Err(KvsError::Unavailable("a get's answer to a set".into())),
        }
    }

    /// The value of `key` (`None` for a key never set), read linearizably at the home
    /// replica through Raft's ReadIndex.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, KvsError> {
        self.limits.check(key, None)?;
        let client = self.id as u32;
        match self.call(
            |seq| Input::Get {
                client,
                seq,
                key: key.to_vec(),
            },
            "get",
        )? {
            Answer::Got(v) => Ok(v),
            _ => Err(KvsError::Unavailable("a set's answer to a get".into())),
        }
    }

    fn gone(&self) -> KvsError {
        gone(&self.closed, self.home)
    }

    fn call(&mut self, make: impl Fn(u64) -> Input, op: &'static str) -> Result<Answer, KvsError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(KvsError::Closed);
        }
        self.seq += 1;
        let seq = self.seq;
        for attempt in 0..self.limits.attempts() {
            if attempt > 0 {
                self.retries += 1;
            }
            if self.to_home.send(make(seq)).is_err() {
                return Err(self.gone());
            }
            let deadline = Instant::now() + self.limits.attempt_timeout();
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                match self.replies.recv_timeout(left) {
                    // The answer to an earlier attempt of an operation that gave up.
                    Ok(r) if r.seq != seq => continue,
                    Ok(r) => {
                        return match r.what {
                            Answer::Closed => Err(KvsError::Closed),
                            a => Ok(a),
                        }
                    }
                    Err(RecvTimeoutError::Timeout) => break,
                    Err(RecvTimeoutError::Disconnected) => return Err(self.gone()),
                }
            }
            if self.closed.load(Ordering::Acquire) {
                return Err(KvsError::Closed);
            }
        }
        Err(self.limits.timed_out(op))
    }
}

fn panicked_report(replica: usize, what: String) -> ReplicaReport {
    ReplicaReport::without_log(
        replica,
        "panicked".into(),
        format!("raft-rs panicked: {what}"),
    )
}

/// A get waiting at its home replica.
struct Get {
    client: u32,
    seq: u64,
    key: Vec<u8>,
}

/// One replica: its Raft node, its copy of the store, and the operations of its
/// clients in flight.
struct RaftReplica {
    me: usize,
    node: RawNode<MemStorage>,
    inbox: Receiver<Input>,
    peers: Vec<Sender<Input>>,
    /// Reply channel of each client homed here (by client id).
    replies: Vec<Option<Sender<Reply>>>,
    shared: Arc<Shared>,
    /// The store, and what it applied.
    sm: StateMachine,
    /// Sets of this replica's clients not applied yet: client → (request id, entry).
    waiting_sets: HashMap<u32, (u64, Vec<u8>)>,
    /// Clients whose set could not be proposed (no leader known yet).
    unproposed: Vec<u32>,
    /// Gets that came in since the last read-index request.
    new_gets: Vec<Get>,
    /// Read-index requests in flight: id → (ticks when asked, its gets).
    reads: HashMap<u64, (u64, Vec<Get>)>,
    next_read: u64,
    /// Gets whose read index is known, waiting for it to be applied here.
    ready_reads: Vec<(u64, Vec<Get>)>,
    applied_index: u64,
    closing: bool,
    fault: Option<String>,
    /// Raft id of the leader last known (0: none).
    leader: u64,
    leader_changes: u64,
    ticks: u64,
    since_compact: u64,
}

impl RaftReplica {
    fn run(mut self) -> ReplicaReport {
        if self.me == 0 {
            // Start with a leader at once rather than after an election timeout.
            let _ = self.node.campaign();
        }
        let mut next_tick = Instant::now() + TICK;
        let exit = 'run: loop {
            let wait = next_tick.saturating_duration_since(Instant::now());
            match self.inbox.recv_timeout(wait) {
                Ok(m) => {
                    if let Some(exit) = self.handle(m) {
                        break 'run exit;
                    }
                    for _ in 0..BATCH {
                        match self.inbox.try_recv() {
                            Ok(m) => {
                                if let Some(exit) = self.handle(m) {
                                    break 'run exit;
                                }
                            }
                            Err(TryRecvError::Empty) => break,
                            Err(TryRecvError::Disconnected) => break 'run "closed",
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break 'run "closed",
            }
            let now = Instant::now();
            if now >= next_tick {
                self.node.tick();
                self.ticks += 1;
                next_tick = (next_tick + TICK).max(now);
                self.on_tick();
            }
            self.ask_reads();
            self.on_ready();
        };
        let last = self.node.store().last_index().unwrap_or(0);
        ReplicaReport {
            delivered: last,
            decided: self.applied_index,
            exit: exit.into(),
            fault: self.fault.take(),
            view_changes: self.leader_changes,
            // The leader it knew last.
            root: (self.leader as usize).saturating_sub(1),
            ..self.sm.report(self.me)
        }
    }

    /// Takes one input; `Some(exit)` when the replica stops.
    fn handle(&mut self, m: Input) -> Option<&'static str> {
        match m {
            Input::Raft(msg) => {
                // Errors are messages of another term or from an unknown peer: dropped,
                // as Raft expects of a lossy network.
                let _ = self.node.step(*msg);
            }
            Input::Set { client, seq, data } => {
                if self.closing {
                    self.reply(client, seq, Answer::Closed);
                } else if self.sm.last_applied(client).is_some_and(|l| l >= seq) {
                    // A retry of a set applied already.
                    self.reply(client, seq, Answer::SetOk);
                } else {
                    self.waiting_sets.insert(client, (seq, data));
                    self.propose(client);
                }
            }
            Input::Get { client, seq, key } => {
                if self.closing {
                    self.reply(client, seq, Answer::Closed);
                } else {
                    self.new_gets.push(Get { client, seq, key });
                }
            }
            Input::Close => {
                self.closing = true;
                for c in std::mem::take(&mut self.unproposed) {
                    if let Some((seq, _)) = self.waiting_sets.remove(&c) {
                        self.reply(c, seq, Answer::Closed);
                    }
                }
                for g in std::mem::take(&mut self.new_gets) {
                    self.reply(g.client, g.seq, Answer::Closed);
                }
            }
            Input::Stop { timed_out } => {
                return Some(if timed_out { "timed out" } else { "closed" })
            }
            Input::Crash => return Some("crashed"),
        }
        None
    }

    /// Proposes client `c`'s waiting set (a follower forwards it to the leader).
    fn propose(&mut self, c: u32) {
        let Some((_, data)) = self.waiting_sets.get(&c) else {
            return;
        };
        if self.node.propose(Vec::new(), data.clone()).is_err() {
            // No leader known (an election is on): proposed again on a tick.
            if !self.unproposed.contains(&c) {
                self.unproposed.push(c);
            }
        }
    }

    fn on_tick(&mut self) {
        if self.closing || self.node.raft.leader_id == raft::INVALID_ID {
            return;
        }
        for c in std::mem::take(&mut self.unproposed) {
            self.propose(c);
        }
        let now = self.ticks;
        let stale: Vec<u64> = self
            .reads
            .iter()
            .filter(|(_, (at, _))| now - at >= REREAD_TICKS as u64)
            .map(|(&id, _)| id)
            .collect();
        for id in stale {
            self.reads.get_mut(&id).expect("listed").0 = now;
            self.node.read_index(self.read_ctx(id));
        }
    }

    fn read_ctx(&self, id: u64) -> Vec<u8> {
        let mut ctx = (self.me as u64).to_le_bytes().to_vec();
        ctx.extend_from_slice(&id.to_le_bytes());
        ctx
    }

    /// One read-index request for the gets that came in since the last one.
    fn ask_reads(&mut self) {
        if self.new_gets.is_empty() {
            return;
        }
        self.next_read += 1;
        let id = self.next_read;
        let gets = std::mem::take(&mut self.new_gets);
        self.reads.insert(id, (self.ticks, gets));
        self.node.read_index(self.read_ctx(id));
    }

    fn send_all(&mut self, msgs: Vec<Message>) {
        for m in msgs {
            let to = m.to as usize;
            if to >= 1 && to <= self.peers.len() {
                // A stopped replica's inbox is gone: the message is lost, as on a
                // network (Raft retries).
                let _ = self.peers[to - 1].send(Input::Raft(Box::new(m)));
            }
        }
    }

    fn reply(&self, client: u32, seq: u64, what: Answer) {
        if let Some(Some(tx)) = self.replies.get(client as usize) {
            let _ = tx.send(Reply { seq, what });
        }
    }

    fn note_fault(&mut self, f: String) {
        self.fault.get_or_insert(f);
    }

    /// Handles Raft's `Ready`: send, persist (to `MemStorage`), apply, advance.
    fn on_ready(&mut self) {
        if !self.node.has_ready() {
            return;
        }
        let mut rd = self.node.ready();
        // Acted on after `advance` (nothing may be proposed between `ready` and it).
        let soft = rd.ss().map(|ss| (ss.leader_id, ss.raft_state));
        if !rd.messages().is_empty() {
            let m = rd.take_messages();
            self.send_all(m);
        }
        if !rd.snapshot().is_empty() {
            // Never sent while every live replica keeps the entries it lacks (see
            // KEEP_ENTRIES); a snapshot here would carry no data.
            self.note_fault("received a Raft snapshot (the log was compacted too far)".into());
            let s = rd.snapshot().clone();
            let r = self.node.mut_store().wl().apply_snapshot(s);
            if let Err(e) = r {
                self.note_fault(format!("raft snapshot: {e}"));
            }
        }
        let committed = rd.take_committed_entries();
        self.apply(committed);
        if !rd.entries().is_empty() {
            let r = self.node.mut_store().wl().append(rd.entries());
            if let Err(e) = r {
                self.note_fault(format!("raft append: {e}"));
            }
        }
        if let Some(hs) = rd.hs() {
            self.node.mut_store().wl().set_hardstate(hs.clone());
        }
        for rs in rd.take_read_states() {
            let ctx = &rs.request_ctx;
            if ctx.len() == 16 && ctx[..8] == (self.me as u64).to_le_bytes() {
                let id = u64::from_le_bytes(ctx[8..].try_into().expect("8 bytes"));
                if let Some((_, gets)) = self.reads.remove(&id) {
                    self.ready_reads.push((rs.index, gets));
                }
            }
        }
        if !rd.persisted_messages().is_empty() {
            let m = rd.take_persisted_messages();
            self.send_all(m);
        }
        let mut light = self.node.advance(rd);
        if let Some(commit) = light.commit_index() {
            self.node
                .mut_store()
                .wl()
                .mut_hard_state()
                .set_commit(commit);
        }
        let m = light.take_messages();
        self.send_all(m);
        let committed = light.take_committed_entries();
        self.apply(committed);
        self.node.advance_apply();
        if let Some((leader, role)) = soft {
            self.leader_seen(leader, role);
        }
        self.answer_reads();
        let last = self.node.store().last_index().unwrap_or(0);
        self.shared.last_index[self.me].store(last, Ordering::Release);
        self.shared.applied_index[self.me].store(self.applied_index, Ordering::Release);
        self.compact();
    }

    fn leader_seen(&mut self, leader: u64, role: StateRole) {
        if role == StateRole::Leader {
            self.shared.leader.store(self.me, Ordering::Release);
        }
        if leader == raft::INVALID_ID || leader == self.leader {
            return;
        }
        if self.leader != raft::INVALID_ID {
            self.leader_changes += 1;
        }
        self.leader = leader;
        if self.closing {
            return;
        }
        // A new leader: what was sent to the old one may be lost; send it again (a
        // set applied twice is skipped the second time).
        let waiting: Vec<u32> = self.waiting_sets.keys().copied().collect();
        self.unproposed.clear();
        for c in waiting {
            self.propose(c);
        }
        let ids: Vec<u64> = self.reads.keys().copied().collect();
        for id in ids {
            self.reads.get_mut(&id).expect("listed").0 = self.ticks;
            self.node.read_index(self.read_ctx(id));
        }
    }

    fn apply(&mut self, entries: Vec<raft::eraftpb::Entry>) {
        for ent in entries {
            self.applied_index = ent.index;
            if ent.get_entry_type() != EntryType::EntryNormal || ent.data.is_empty() {
                // The empty entry a new leader appends; no configuration changes here.
                continue;
            }
            let Some(e) = Entry::decode(&ent.data) else {
                self.note_fault(format!("raft entry {} is not a set", ent.index));
                continue;
            };
            let (client, seq) = (e.client, e.seq);
            self.sm.apply(ent.index, e);
            if self.waiting_sets.get(&client).is_some_and(|w| w.0 == seq) {
                self.waiting_sets.remove(&client);
                self.unproposed.retain(|&c| c != client);
                self.reply(client, seq, Answer::SetOk);
            }
        }
    }

    /// Answers the gets whose read index is applied here.
    fn answer_reads(&mut self) {
        if self.ready_reads.is_empty() {
            return;
        }
        let applied = self.applied_index;
        let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.ready_reads)
            .into_iter()
            .partition(|(index, _)| *index <= applied);
        self.ready_reads = later;
        for (_, gets) in now {
            for g in gets {
                let v = self.sm.get(&g.key).cloned();
                self.reply(g.client, g.seq, Answer::Got(v));
            }
        }
    }

    /// Drops log entries every live replica applied long ago (bounded memory).
    fn compact(&mut self) {
        self.since_compact += 1;
        if self.since_compact < 1024 {
            return;
        }
        self.since_compact = 0;
        let low = (0..self.peers.len())
            .filter(|&r| self.shared.live[r].load(Ordering::Acquire))
            .map(|r| self.shared.applied_index[r].load(Ordering::Acquire))
            .min()
            .unwrap_or(0)
            .min(self.applied_index);
        let upto = low.saturating_sub(KEEP_ENTRIES);
        if upto > 1 {
            let r = self.node.mut_store().wl().compact(upto);
            if let Err(e) = r {
                self.note_fault(format!("raft compact: {e}"));
            }
        }
    }
}
