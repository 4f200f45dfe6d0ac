//! One replica: its event loop, its share of the ordering protocol, its copy of the
//! store, and the clients it is home to.

use crate::config::{Protocol, TreeSpec, Veto};
use crate::wire::{self, bslot, split_bslot, tag, untag, Entry, Kind};
use serde::{Deserialize, Serialize};
use smelt_mesh::mesh::{Mesh, MeshError};
use smelt_mesh::Rank;
use smelt_transport::{Link, QueuePairEnd};
use std::collections::BTreeMap;
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

/// Who is where: ranks of the store's mesh are replicas `0..R`, clients `R..R+M`, and
/// the store's control member `R+M`.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub(crate) replicas: usize,
    pub(crate) clients: usize,
    /// The tree's root: 1Paxos's acceptor, 2PC's coordinator, the broadcast's
    /// sequencer.
    pub(crate) root: usize,
    /// The 1Paxos leader.
    pub(crate) leader: usize,
    pub(crate) parent: Vec<Option<usize>>,
    pub(crate) children: Vec<Vec<usize>>,
    pub(crate) homes: Vec<usize>,
    /// How many replicas after its home (in index order, wrapping) each client is also
    /// linked to, to move to when its home stops (1Paxos failover; 0 otherwise).
    pub(crate) backups: usize,
}

impl Layout {
    pub(crate) fn client_rank(&self, c: usize) -> Rank {
        Rank(self.replicas + c)
    }
    pub(crate) fn control(&self) -> Rank {
        Rank(self.replicas + self.clients)
    }
    /// The client id of a rank, if it is a client's.
    pub(crate) fn client_of(&self, r: Rank) -> Option<u32> {
        let i = r.index();
        (i >= self.replicas && i < self.replicas + self.clients).then(|| (i - self.replicas) as u32)
    }
    pub(crate) fn size(&self) -> usize {
        self.replicas + self.clients + 1
    }
    /// The replicas client `c` may be served by, in the order it tries them: its
    /// home, then its backups.
    pub(crate) fn client_replicas(&self, c: usize) -> Vec<usize> {
        let h = self.homes[c];
        let n = self.backups.min(self.replicas.saturating_sub(1));
        (0..=n).map(|k| (h + k) % self.replicas).collect()
    }
    /// Every link the store needs (replica pairs along tree edges, homes to the leader
    /// or root, leader to acceptor, clients to homes, control to every replica).
    pub(crate) fn links(&self, protocol: Protocol, failover: bool) -> Vec<(Rank, Rank)> {
        let mut v = Vec::new();
        if failover {
            // Any two replicas may become tree neighbours after a view change.
            for a in 0..self.replicas {
                for b in a + 1..self.replicas {
                    v.push((Rank(a), Rank(b)));
                }
            }
        }
        for (c, ps) in self.children.iter().enumerate() {
            for &p in ps {
                v.push((Rank(c), Rank(p)));
            }
        }
        for r in 0..self.replicas {
            // Where a home sends a set: the leader (1Paxos), or the root.
            let to = match protocol {
                Protocol::OnePaxos => self.leader,
                Protocol::TwoPc | Protocol::Broadcast => self.root,
            };
            if r != to {
                v.push((Rank(r), Rank(to)));
            }
            v.push((Rank(r), self.control()));
        }
        if protocol == Protocol::OnePaxos && self.leader != self.root {
            v.push((Rank(self.leader), Rank(self.root)));
        }
        for c in 0..self.clients {
            for r in self.client_replicas(c) {
                v.push((self.client_rank(c), Rank(r)));
            }
        }
        v
    }
}

/// One applied set, as kept with [`StoreConfig::keep_log`](crate::StoreConfig).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    /// The log slot it was ordered at.
    pub slot: u64,
    /// The set.
    pub entry: Entry,
}

/// How a replica ended, and what it applied (a replica process sends it to the store
/// as one JSON line).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplicaReport {
    /// The replica.
    pub replica: usize,
    /// Slots delivered (ordered sets received, duplicates and aborted ones included).
    pub delivered: u64,
    /// Slots decided (committed or aborted).
    pub decided: u64,
    /// Sets applied (a retried set's later copies are skipped).
    pub applied: u64,
    /// Copies of sets skipped because their request was applied already.
    pub duplicates: u64,
    /// Slots aborted (two-phase commit).
    pub aborted: u64,
    /// A digest of the applied sets in order (client, request id, key, value): equal
    /// digests and counts mean equal applied logs.
    pub digest: u64,
    /// The applied log, if kept.
    pub log: Option<Vec<Applied>>,
    /// Slots delivered here but not decided when the replica stopped, if logs are
    /// kept (a fail-stop survivor holds what was acknowledged here or in `log`).
    pub undecided: Option<Vec<Applied>>,
    /// Number of keys in the replica's copy.
    pub keys: usize,
    /// Why the replica stopped: "closed", "crashed", "aborted", ...
    pub exit: String,
    /// The first fault it saw (a replica it depends on failed, a protocol error).
    pub fault: Option<String>,
    /// Its thread was pinned to its CPU.
    pub pinned: bool,
    /// View changes it took part in (1Paxos failover).
    pub view_changes: u64,
    /// The root (acceptor) of its last view.
    pub root: usize,
}

impl ReplicaReport {
    /// The report of a replica that ended without one of its own (it panicked, or its
    /// process died): nothing applied, no log, its own root.
    pub fn without_log(replica: usize, exit: String, fault: String) -> ReplicaReport {
        ReplicaReport {
            replica,
            delivered: 0,
            decided: 0,
            applied: 0,
            duplicates: 0,
            aborted: 0,
            digest: 0,
            log: None,
            undecided: None,
            keys: 0,
            exit,
            fault: Some(fault),
            pinned: false,
            view_changes: 0,
            root: replica,
        }
    }
}

/// Starts replica `i`'s thread, `name`, pinned to its CPU of `replica_cpus` if
/// given: it sends the report of `run` (saying whether it was pinned) to `tx`.
pub fn spawn_replica(
    i: usize,
    name: String,
    replica_cpus: Option<&Vec<u32>>,
    tx: std::sync::mpsc::Sender<ReplicaReport>,
    run: impl FnOnce() -> ReplicaReport + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let pin = replica_cpus.map(|c| c[i]);
    std::thread::Builder::new().name(name).spawn(move || {
        let pinned =
            pin.is_some_and(|c| smelt_transport::pin_current_thread(smelt_mesh::CpuId(c)).is_ok());
        let mut report = run();
        report.pinned = pinned;
        let _ = tx.send(report);
    })
}

/// Replica `i`'s thread could not start (`e`): waits for the `started` ones (told to
/// stop already) and says so.
pub fn replica_thread_failed(
    i: usize,
    e: std::io::Error,
    started: Vec<Option<std::thread::JoinHandle<()>>>,
) -> crate::config::KvsError {
    for t in started.into_iter().flatten() {
        let _ = t.join();
    }
    crate::config::KvsError::Replica {
        replica: i,
        what: format!("cannot start its thread: {e}"),
    }
}

/// Why the loop ended.
enum Exit {
    Closed,
    Crashed,
    Aborted,
    Alone,
    /// The store's control member left (its process died): nobody will close this
    /// replica.
    Orphaned,
}

/// One delivered, undecided slot.
struct Pending {
    slot: u64,
    entry: Entry,
    /// This replica votes no (two-phase commit).
    no: bool,
}

/// A view change this replica leads (it is the new root): what it learned so far.
struct Vc {
    ballot: u64,
    /// Survivors whose state has not arrived.
    awaiting: Vec<usize>,
    /// Undecided slots reported (its own included).
    entries: BTreeMap<u64, Entry>,
    min_delivered: u64,
    max_delivered: u64,
}

pub(crate) struct Replica<L: Link = QueuePairEnd> {
    me: usize,
    mesh: Mesh<L>,
    lay: std::sync::Arc<Layout>,
    protocol: Protocol,
    link_timeout: Duration,
    veto: Option<Veto>,
    // The view: ballot, who is root (acceptor) and leader, the tree over the survivors.
    failover: bool,
    spec: std::sync::Arc<TreeSpec>,
    ballot: u64,
    max_ballot: u64,
    root: usize,
    leader: usize,
    /// The leader asked for (it leads whenever it is alive and not the root).
    want_leader: usize,
    dead: Vec<bool>,
    parent: Option<Rank>,
    children: Vec<Rank>,
    /// False between adopting a view and its `Resume`: no acknowledgements are sent.
    resumed: bool,
    vc: Option<Vc>,
    /// Sets that reached the new root while it changed view.
    vc_queue: Vec<Entry>,
    view_changes: u64,
    /// Departures found while sending, to handle between messages.
    gone: Vec<Rank>,
    // The store, and what it applied.
    sm: StateMachine,
    // The log.
    delivered: u64,
    decided: u64,
    pending: VecDeque<Pending>,
    /// Keys with delivered, undecided sets: how many, and the last slot.
    pending_keys: HashMap<Vec<u8>, (u32, u64)>,
    // Acknowledgements up the tree: per child (up to, a no vote for that slot).
    child_up: Vec<(u64, bool)>,
    sent_up: u64,
    // The root.
    next_slot: u64,
    queue: VecDeque<Entry>,
    /// Requests in `queue`.
    queued: std::collections::HashSet<(u32, u64)>,
    inflight: Option<u64>,
    closing: bool,
    /// The last slot of a store that is closing (from a `Fin`): stop once decided.
    fin_upto: Option<u64>,
    /// Replicas that said they are stopping (their departure is no failure).
    fin_from: Vec<bool>,
    // Home duties.
    waiting_sets: HashMap<u32, u64>,
    waiting_gets: Vec<(Rank, u64, Vec<u8>, u64)>,
    fault: Option<String>,
    /// The control member left.
    orphaned: bool,
    // Report.
    aborted: u64,
    out: Vec<u8>,
}

/// FNV-1a, folded over the applied log.
fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

const FNV_START: u64 = 0xcbf29ce484222325;

/// A replica's copy of the store and what it applied (the smelt replicas' and the
/// Raft peer's alike): each request's set is applied once, folded into the digest and,
/// if kept, the log.
#[derive(Debug)]
pub struct StateMachine {
    pub(crate) kv: HashMap<Vec<u8>, Vec<u8>>,
    /// Per client, the last request applied (a later copy of it is skipped).
    pub(crate) last_applied: HashMap<u32, u64>,
    pub(crate) applied: u64,
    pub(crate) duplicates: u64,
    pub(crate) digest: u64,
    pub(crate) keep_log: bool,
    pub(crate) log: Vec<Applied>,
}

impl StateMachine {
    /// An empty store; `keep_log`: keep every applied set (see
    /// [`StoreConfig::keep_log`](crate::StoreConfig)).
    pub fn new(keep_log: bool) -> StateMachine {
        StateMachine {
            kv: HashMap::new(),
            last_applied: HashMap::new(),
            applied: 0,
            duplicates: 0,
            digest: FNV_START,
            keep_log,
            log: Vec::new(),
        }
    }

    /// Applies set `e`, ordered at `slot`, unless its request was applied already (a
    /// duplicate, counted).
    pub fn apply(&mut self, slot: u64, e: Entry) {
        let last = self.last_applied.entry(e.client).or_insert(0);
        if *last >= e.seq {
            self.duplicates += 1;
        } else {
            *last = e.seq;
            self.applied += 1;
            let mut h = fnv(self.digest, &e.client.to_le_bytes());
            h = fnv(h, &e.seq.to_le_bytes());
            h = fnv(h, &[e.key.len() as u8]);
            h = fnv(h, &e.key);
            h = fnv(h, &(e.value.len() as u32).to_le_bytes());
            self.digest = fnv(h, &e.value);
            if self.keep_log {
                self.log.push(Applied {
                    slot,
                    entry: e.clone(),
                });
            }
            self.kv.insert(e.key, e.value);
        }
    }
    /// The value of `key`, `None` for a key never set.
    pub fn get(&self, key: &[u8]) -> Option<&Vec<u8>> {
        self.kv.get(key)
    }

    /// The last request of `client` applied, if any.
    pub fn last_applied(&self, client: u32) -> Option<u64> {
        self.last_applied.get(&client).copied()
    }

    /// What this copy applied so far, as a [`ReplicaReport`] of replica `replica`
    /// (the log moved out of it if kept; `delivered`, `decided`, `exit`, `fault`,
    /// `view_changes` and `root` for the caller to fill in).
    pub fn report(&mut self, replica: usize) -> ReplicaReport {
        ReplicaReport {
            applied: self.applied,
            duplicates: self.duplicates,
            digest: self.digest,
            log: self.keep_log.then(|| std::mem::take(&mut self.log)),
            keys: self.kv.len(),
            fault: None,
            ..ReplicaReport::without_log(replica, String::new(), String::new())
        }
    }
}

impl<L: Link> Replica<L> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        me: usize,
        mesh: Mesh<L>,
        lay: std::sync::Arc<Layout>,
        protocol: Protocol,
        link_timeout: Duration,
        veto: Option<Veto>,
        keep_log: bool,
        failover: bool,
        spec: std::sync::Arc<TreeSpec>,
    ) -> Replica<L> {
        let children: Vec<Rank> = lay.children[me].iter().map(|&c| Rank(c)).collect();
        let replicas = lay.replicas;
        Replica {
            me,
            failover: failover && protocol == Protocol::OnePaxos,
            spec,
            ballot: 0,
            max_ballot: 0,
            root: lay.root,
            leader: lay.leader,
            want_leader: lay.leader,
            dead: vec![false; replicas],
            resumed: true,
            vc: None,
            vc_queue: Vec::new(),
            view_changes: 0,
            gone: Vec::new(),
            parent: lay.parent[me].map(Rank),
            child_up: vec![(0, false); children.len()],
            children,
            mesh,
            lay,
            protocol,
            link_timeout,
            veto,
            sm: StateMachine::new(keep_log),
            delivered: 0,
            decided: 0,
            pending: VecDeque::new(),
            pending_keys: HashMap::new(),
            sent_up: 0,
            next_slot: 1,
            queue: VecDeque::new(),
            queued: Default::default(),
            inflight: None,
            closing: false,
            fin_upto: None,
            fin_from: vec![false; replicas],
            waiting_sets: HashMap::new(),
            waiting_gets: Vec::new(),
            fault: None,
            orphaned: false,
            aborted: 0,
            out: Vec::new(),
        }
    }

    /// The event loop: take every message that is there (up to a batch), then send
    /// the acknowledgements and commits they made possible (so that they coalesce under
    /// load), and wait for more.
    pub(crate) fn run(mut self) -> ReplicaReport {
        self.update_quiet();
        // Links of clients homed elsewhere (this replica is their backup) stay idle
        // until their home stops.
        for c in 0..self.lay.clients {
            if self.lay.homes[c] != self.me {
                let _ = self.mesh.set_quiet(self.lay.client_rank(c), true);
            }
        }
        let mut buf = vec![0u8; self.mesh.max_message_len_all().max(64)];
        let exit = 'outer: loop {
            let mut ev = Some(self.mesh.recv_any(&mut buf, Duration::from_secs(1)));
            let mut n = 0;
            while let Some(e) = ev.take() {
                match e {
                    Ok((from, t, len)) => {
                        if let Some(x) = self.handle(from, t, &buf[..len]) {
                            break 'outer x;
                        }
                        while let Some(p) = self.gone.pop() {
                            self.peer_gone(p);
                        }
                    }
                    Err(MeshError::Timeout { .. }) => {}
                    Err(MeshError::PeerGone { peer, .. }) => self.peer_gone(peer),
                    Err(MeshError::Aborted { .. }) => break 'outer Exit::Aborted,
                    Err(MeshError::NoPeers { .. }) => break 'outer Exit::Alone,
                    Err(e) => self.note_fault(format!("receiving: {e}")),
                }
                n += 1;
                if n < 64 {
                    ev = match self.mesh.try_recv_any(&mut buf) {
                        Ok(Some(m)) => Some(Ok(m)),
                        Ok(None) => None,
                        Err(e) => Some(Err(e)),
                    };
                }
            }
            let x = self.flush();
            while let Some(p) = self.gone.pop() {
                self.peer_gone(p);
            }
            if let Some(x) = x {
                break x;
            }
            if self.orphaned {
                break Exit::Orphaned;
            }
        };
        self.report(exit)
    }

    fn report(self, exit: Exit) -> ReplicaReport {
        ReplicaReport {
            replica: self.me,
            delivered: self.delivered,
            decided: self.decided,
            applied: self.sm.applied,
            duplicates: self.sm.duplicates,
            aborted: self.aborted,
            digest: self.sm.digest,
            undecided: self.sm.keep_log.then(|| {
                self.pending
                    .iter()
                    .map(|p| Applied {
                        slot: p.slot,
                        entry: p.entry.clone(),
                    })
                    .collect()
            }),
            log: self.sm.keep_log.then_some(self.sm.log),
            keys: self.sm.kv.len(),
            exit: match exit {
                Exit::Closed => "closed",
                Exit::Crashed => "crashed",
                Exit::Aborted => "aborted",
                Exit::Alone => "every peer left",
                Exit::Orphaned => "the store's control member left",
            }
            .into(),
            fault: self.fault,
            pinned: false,
            view_changes: self.view_changes,
            root: self.root,
        }
    }

    fn note_fault(&mut self, what: String) {
        if self.fault.is_none() {
            self.fault = Some(what);
        }
    }

    /// Sends, noting a failure instead of stopping (fail-stop peers: the replica keeps
    /// serving what it can).
    fn send(&mut self, to: Rank, t: u64, body: &[u8]) {
        match self.mesh.send(to, t, body, self.link_timeout) {
            Ok(()) => {}
            // Handled after the message being processed (a departure may change the
            // view, and with it the tree being sent down).
            Err(MeshError::PeerGone { peer, .. }) => self.gone.push(peer),
            Err(e) => {
                if self.lay.client_of(to).is_none() {
                    self.note_fault(format!("sending to member {to}: {e}"));
                }
            }
        }
    }

    fn send_down(&mut self, t: u64, body: &[u8]) {
        for i in 0..self.children.len() {
            let c = self.children[i];
            self.send(c, t, body);
        }
    }

    fn reply_error(&mut self, client: Rank, seq: u64, code: u8, what: &str) {
        let mut b = vec![code];
        b.extend_from_slice(what.as_bytes());
        self.send(client, tag(Kind::Error, seq), &b);
    }

    /// A peer left: a client (normal), or a replica (this replica can no longer take
    /// part in ordering: it fails what waits and what comes, but still answers reads of
    /// keys without undecided sets).
    fn peer_gone(&mut self, peer: Rank) {
        if let Some(c) = self.lay.client_of(peer) {
            self.waiting_sets.remove(&c);
            self.waiting_gets.retain(|g| g.0 != peer);
            return;
        }
        if peer == self.lay.control() {
            // The store closes its control link only once every replica reported, or
            // when its process died: either way nobody will close this replica.
            self.orphaned = true;
            return;
        }
        if self.fin_from.get(peer.index()) == Some(&true) {
            return;
        }
        if self.failover && peer.index() < self.lay.replicas {
            self.replica_stopped(peer.index());
            return;
        }
        self.note_fault(format!("replica {peer} failed (fail-stop)"));
        let what = self.fault.clone().unwrap_or_default();
        let sets: Vec<(u32, u64)> = self.waiting_sets.drain().collect();
        for (c, seq) in sets {
            let r = self.lay.client_rank(c as usize);
            self.reply_error(r, seq, wire::ERR_UNAVAILABLE, &what);
        }
        let gets = std::mem::take(&mut self.waiting_gets);
        for (r, seq, _, _) in gets {
            self.reply_error(r, seq, wire::ERR_UNAVAILABLE, &what);
        }
    }

    fn handle(&mut self, from: Rank, t: u64, body: &[u8]) -> Option<Exit> {
        let Some((kind, num)) = untag(t) else {
            self.note_fault(format!("an unknown message ({t:#x}) from member {from}"));
            return None;
        };
        match kind {
            Kind::Get => self.on_get(from, num, body),
            Kind::Set => self.on_set(from, num, body),
            Kind::Propose => match Entry::decode(body) {
                Some(e) => self.route(e, true),
                None => self.note_fault(format!("a bad proposal from member {from}")),
            },
            // Tree messages of another view (from before a view change) are stale.
            Kind::Accept | Kind::Up | Kind::Commit | Kind::Abort | Kind::Resume
                if split_bslot(num).0 != self.ballot & 0xffff => {}
            Kind::Accept => {
                // Forward first: the subtree's latency is what the tree is for.
                self.send_down(t, body);
                let slot = split_bslot(num).1;
                if slot <= self.delivered {
                    // Sent again by a new root after a view change: held already.
                    return None;
                }
                match Entry::decode(body) {
                    Some(e) => self.deliver(slot, e),
                    None => self.note_fault(format!("a bad accept from member {from}")),
                }
            }
            Kind::Up => {
                if let Some(i) = self.children.iter().position(|&c| c == from) {
                    self.child_up[i] = (split_bslot(num).1, body.first() == Some(&0));
                }
            }
            Kind::Commit => {
                self.send_down(t, &[]);
                self.decide_to(split_bslot(num).1);
            }
            Kind::Abort => {
                self.send_down(t, &[]);
                self.abort_slot(split_bslot(num).1);
            }
            Kind::Resume => {
                self.send_down(t, &[]);
                self.resumed = true;
                self.sent_up = 0;
            }
            Kind::ViewChange => self.on_view_change(from, body),
            Kind::StateEntry => {
                let (b, slot) = split_bslot(num);
                if let (Some(vc), Some(e)) = (self.vc.as_mut(), Entry::decode(body)) {
                    if vc.ballot & 0xffff == b {
                        vc.entries.entry(slot).or_insert(e);
                    }
                }
            }
            Kind::StateEnd => self.on_state_end(from, num, body),
            Kind::Nack => {
                let b = body
                    .get(..8)
                    .map_or(0, |x| u64::from_le_bytes(x.try_into().expect("8 bytes")));
                self.max_ballot = self.max_ballot.max(b);
                if self.vc.is_some() {
                    self.start_view_change();
                }
            }
            Kind::Fin => {
                if from == self.lay.control() {
                    self.closing = true;
                } else if from.index() < self.lay.replicas {
                    self.fin_from[from] = true;
                    self.fin_upto = Some(split_bslot(num).1);
                }
            }
            Kind::Crash => return Some(Exit::Crashed),
            Kind::GetOk | Kind::SetOk | Kind::Error => {
                self.note_fault(format!("a reply sent to a replica by member {from}"));
            }
        }
        None
    }

    /// A client homed elsewhere that moved here: its link is polled as the others.
    fn moved_in(&mut self, from: Rank, c: u32) {
        if self.lay.homes[c as usize] != self.me {
            let _ = self.mesh.set_quiet(from, false);
        }
    }

    fn on_get(&mut self, from: Rank, seq: u64, key: &[u8]) {
        let Some(c) = self.lay.client_of(from) else {
            return;
        };
        self.moved_in(from, c);
        if let Some(&(n, last)) = self.pending_keys.get(key) {
            if n > 0 {
                if let Some(f) = self.fault.clone() {
                    self.reply_error(from, seq, wire::ERR_UNAVAILABLE, &f);
                } else {
                    // A set of this key was delivered here but is not decided: the read
                    // waits for it, so that no read anywhere returns an older value
                    // after one returned the newer.
                    self.waiting_gets.push((from, seq, key.to_vec(), last));
                }
                return;
            }
        }
        self.answer_get(from, seq, key);
    }

    fn answer_get(&mut self, to: Rank, seq: u64, key: &[u8]) {
        self.out.clear();
        match self.sm.kv.get(key) {
            Some(v) => {
                self.out.push(1);
                self.out.extend_from_slice(v);
            }
            None => self.out.push(0),
        }
        let b = std::mem::take(&mut self.out);
        self.send(to, tag(Kind::GetOk, seq), &b);
        self.out = b;
    }

    fn on_set(&mut self, from: Rank, seq: u64, body: &[u8]) {
        let Some(c) = self.lay.client_of(from) else {
            return;
        };
        self.moved_in(from, c);
        let Some((key, value)) = wire::decode_set(body) else {
            self.reply_error(from, seq, wire::ERR_UNAVAILABLE, "malformed set");
            return;
        };
        if let Some(f) = self.fault.clone() {
            self.reply_error(from, seq, wire::ERR_UNAVAILABLE, &f);
            return;
        }
        self.waiting_sets.insert(c, seq);
        let e = Entry {
            client: c,
            seq,
            key: key.to_vec(),
            value: value.to_vec(),
        };
        self.route(e, false);
    }

    /// Moves a set on towards the root: home → leader → acceptor for 1Paxos, home →
    /// root otherwise; the root orders it.
    fn route(&mut self, e: Entry, forwarded: bool) {
        let next = match self.protocol {
            Protocol::OnePaxos if self.me == self.root => None,
            Protocol::OnePaxos if self.me == self.leader => Some(self.root),
            Protocol::OnePaxos => Some(self.leader),
            _ if self.me == self.root => None,
            _ => Some(self.root),
        };
        match next {
            None => self.order(e),
            Some(to) => {
                if forwarded
                    && !(self.protocol == Protocol::OnePaxos && self.me == self.leader)
                    && !self.failover
                {
                    self.note_fault("a proposal reached a replica that does not order".into());
                    return;
                }
                // (With failover, a proposal sent under an older view is passed on.)
                self.out.clear();
                e.encode(&mut self.out);
                let b = std::mem::take(&mut self.out);
                self.send(Rank(to), tag(Kind::Propose, 0), &b);
                self.out = b;
            }
        }
    }

    /// The root: assigns the next slot and broadcasts it (2PC: one at a time).
    fn order(&mut self, e: Entry) {
        if self.closing {
            return;
        }
        if self.vc.is_some() {
            self.vc_queue.push(e);
            return;
        }
        match self.protocol {
            Protocol::TwoPc => {
                // A retry of a request still waiting here is dropped (one transaction
                // at a time: copies would only lengthen the queue). A retry of one
                // already decided is ordered again and skipped when applied.
                if self.queued.insert((e.client, e.seq)) {
                    self.queue.push_back(e);
                    self.start_next();
                }
            }
            _ => self.accept(e),
        }
    }

    fn accept(&mut self, e: Entry) {
        let slot = self.next_slot;
        self.next_slot += 1;
        self.out.clear();
        e.encode(&mut self.out);
        let b = std::mem::take(&mut self.out);
        self.send_down(tag(Kind::Accept, bslot(self.ballot, slot)), &b);
        self.out = b;
        self.deliver(slot, e);
    }

    fn start_next(&mut self) {
        if self.inflight.is_none() {
            if let Some(e) = self.queue.pop_front() {
                self.queued.remove(&(e.client, e.seq));
                self.inflight = Some(self.next_slot);
                self.accept(e);
            }
        }
    }

    fn deliver(&mut self, slot: u64, e: Entry) {
        if slot != self.delivered + 1 {
            self.note_fault(format!(
                "slot {slot} delivered after slot {}",
                self.delivered
            ));
            return;
        }
        self.delivered = slot;
        if self.protocol == Protocol::Broadcast {
            // No agreement round: applied on delivery.
            self.decided = slot;
            self.apply(slot, e);
            return;
        }
        let no = self.protocol == Protocol::TwoPc
            && self
                .veto
                .as_ref()
                .is_some_and(|v| !v(self.me, &e.key, &e.value));
        let k = self.pending_keys.entry(e.key.clone()).or_insert((0, 0));
        k.0 += 1;
        k.1 = slot;
        self.pending.push_back(Pending { slot, entry: e, no });
    }

    /// Removes the oldest pending slot, which must be `slot`.
    fn pop_pending(&mut self, slot: u64) -> Option<Pending> {
        if self.pending.front().map(|p| p.slot) != Some(slot) {
            self.note_fault(format!("slot {slot} decided but not delivered here"));
            return None;
        }
        let p = self.pending.pop_front()?;
        if let Some(k) = self.pending_keys.get_mut(&p.entry.key) {
            k.0 -= 1;
            if k.0 == 0 {
                self.pending_keys.remove(&p.entry.key);
            }
        }
        Some(p)
    }

    fn decide_to(&mut self, upto: u64) {
        while self.decided < upto {
            let s = self.decided + 1;
            let Some(p) = self.pop_pending(s) else {
                return;
            };
            self.decided = s;
            self.apply(s, p.entry);
        }
        self.answer_waiting_gets();
    }

    fn abort_slot(&mut self, slot: u64) {
        if slot != self.decided + 1 {
            self.note_fault(format!("slot {slot} aborted after slot {}", self.decided));
            return;
        }
        let Some(p) = self.pop_pending(slot) else {
            return;
        };
        self.decided = slot;
        self.aborted += 1;
        let e = p.entry;
        // The replica the client sent it to answers (its home, or the one it moved to).
        if self.waiting_sets.get(&e.client) == Some(&e.seq) {
            self.waiting_sets.remove(&e.client);
            let r = self.lay.client_rank(e.client as usize);
            self.reply_error(r, e.seq, wire::ERR_REJECTED, "a replica voted no");
        }
        self.answer_waiting_gets();
    }

    fn apply(&mut self, slot: u64, e: Entry) {
        let (client, seq) = (e.client, e.seq);
        self.sm.apply(slot, e);
        // The replica the client sent it to answers (its home, or the one it moved to;
        // a retry's later copy, skipped above, is answered too).
        if self.waiting_sets.get(&client) == Some(&seq) {
            self.waiting_sets.remove(&client);
            let r = self.lay.client_rank(client as usize);
            self.send(r, tag(Kind::SetOk, seq), &[]);
        }
    }

    fn answer_waiting_gets(&mut self) {
        // In arrival order, moving each ready get out (no copy of its key).
        let mut i = 0;
        while i < self.waiting_gets.len() {
            if self.waiting_gets[i].3 <= self.decided {
                let (r, seq, key, _) = self.waiting_gets.remove(i);
                self.answer_get(r, seq, &key);
            } else {
                i += 1;
            }
        }
    }

    // ---- View change (1Paxos failover) ----

    /// Replica `r` stopped: the root of the view (or, if the root stopped, the
    /// lowest-numbered survivor) starts a new view over the survivors.
    fn replica_stopped(&mut self, r: usize) {
        if self.dead[r] {
            return;
        }
        self.dead[r] = true;
        let root = if self.dead[self.root] {
            (0..self.lay.replicas).find(|&x| !self.dead[x])
        } else {
            Some(self.root)
        };
        if root == Some(self.me) {
            self.start_view_change();
        }
    }

    fn survivors(&self) -> Vec<usize> {
        (0..self.lay.replicas).filter(|&x| !self.dead[x]).collect()
    }

    /// Adopts a view: ballot, root, leader, the stopped replicas, and the tree over
    /// the survivors. Acknowledgements wait for the view's `Resume`.
    fn adopt(&mut self, ballot: u64, root: usize, leader: usize, dead: &[usize]) {
        for &d in dead {
            if d < self.dead.len() {
                self.dead[d] = true;
            }
        }
        self.ballot = ballot;
        self.max_ballot = self.max_ballot.max(ballot);
        self.root = root;
        self.leader = leader;
        self.view_changes += 1;
        let members = self.survivors();
        match self.spec.build_over(self.lay.replicas, &members, root) {
            Ok((parent, children)) => {
                self.parent = parent[self.me].map(Rank);
                self.children = children[self.me].iter().map(|&c| Rank(c)).collect();
            }
            Err(e) => {
                self.note_fault(format!("view change: {e}"));
                self.parent = (self.me != root).then_some(Rank(root));
                self.children = if self.me == root {
                    members
                        .iter()
                        .filter(|&&x| x != root)
                        .map(|&x| Rank(x))
                        .collect()
                } else {
                    Vec::new()
                };
            }
        }
        self.child_up = vec![(0, false); self.children.len()];
        self.sent_up = 0;
        self.resumed = false;
        self.update_quiet();
    }

    /// Marks quiet the links this replica does not use in its view (with failover every
    /// two replicas are linked; only a view change uses the others) and the control
    /// link, so that polling them costs little.
    pub(crate) fn update_quiet(&mut self) {
        let control = self.lay.control();
        let _ = self.mesh.set_quiet(control, true);
        if !self.failover {
            return;
        }
        for r in 0..self.lay.replicas {
            if r == self.me {
                continue;
            }
            let used = self.me == self.leader
                || r == self.leader
                || r == self.root
                || self.parent == Some(Rank(r))
                || self.children.contains(&Rank(r));
            let _ = self.mesh.set_quiet(Rank(r), !used);
        }
    }

    /// The leader of a view rooted at `root`: the one asked for if it is alive and
    /// not the root, else the lowest-numbered survivor that is not the root (the root
    /// itself when it is alone).
    fn leader_for(&self, root: usize) -> usize {
        if !self.dead[self.want_leader] && self.want_leader != root {
            return self.want_leader;
        }
        (0..self.lay.replicas)
            .find(|&x| !self.dead[x] && x != root)
            .unwrap_or(root)
    }

    /// This replica becomes the root of a new view: a higher ballot, told to every
    /// survivor with the stopped replicas; each answers with its undecided slots.
    fn start_view_change(&mut self) {
        let round = (self.max_ballot >> 16) + 1;
        let ballot = (round << 16) | self.me as u64;
        let dead: Vec<usize> = (0..self.lay.replicas).filter(|&x| self.dead[x]).collect();
        let leader = self.leader_for(self.me);
        // Sets that were waiting here for a view that is now replaced.
        let mut queued = std::mem::take(&mut self.vc_queue);
        self.adopt(ballot, self.me, leader, &dead);
        let mut vc = Vc {
            ballot,
            awaiting: Vec::new(),
            entries: BTreeMap::new(),
            min_delivered: self.delivered,
            max_delivered: self.delivered,
        };
        for p in &self.pending {
            vc.entries.insert(p.slot, p.entry.clone());
        }
        let mut body = Vec::new();
        body.extend_from_slice(&ballot.to_le_bytes());
        body.extend_from_slice(&(self.me as u32).to_le_bytes());
        body.extend_from_slice(&(leader as u32).to_le_bytes());
        for &d in &dead {
            body.extend_from_slice(&(d as u32).to_le_bytes());
        }
        vc.awaiting = self
            .survivors()
            .into_iter()
            .filter(|&x| x != self.me)
            .collect();
        self.vc = Some(vc);
        self.vc_queue.append(&mut queued);
        for r in self.survivors() {
            if r != self.me {
                self.send(Rank(r), tag(Kind::ViewChange, 0), &body);
            }
        }
        self.maybe_finish_view_change();
    }

    fn on_view_change(&mut self, from: Rank, body: &[u8]) {
        if body.len() < 16 || (body.len() - 16) & 3 != 0 {
            self.note_fault(format!("a bad view change from member {from}"));
            return;
        }
        let u = |i: usize| u32::from_le_bytes(body[i..i + 4].try_into().expect("4 bytes")) as usize;
        let ballot = u64::from_le_bytes(body[..8].try_into().expect("8 bytes"));
        if ballot <= self.ballot {
            let b = self.ballot.to_le_bytes();
            self.send(from, tag(Kind::Nack, 0), &b);
            return;
        }
        let (root, leader) = (u(8), u(12));
        let dead: Vec<usize> = (16..body.len()).step_by(4).map(u).collect();
        if root >= self.lay.replicas || leader >= self.lay.replicas {
            self.note_fault(format!("a bad view change from member {from}"));
            return;
        }
        // A view change of our own is superseded: its waiting sets go to the new root.
        let queued = std::mem::take(&mut self.vc_queue);
        self.vc = None;
        self.adopt(ballot, root, leader, &dead);
        // Our state: every undecided slot, then where we are.
        let b = self.ballot;
        let pend: Vec<(u64, Entry)> = self
            .pending
            .iter()
            .map(|p| (p.slot, p.entry.clone()))
            .collect();
        for (slot, e) in pend {
            self.out.clear();
            e.encode(&mut self.out);
            let o = std::mem::take(&mut self.out);
            self.send(Rank(root), tag(Kind::StateEntry, bslot(b, slot)), &o);
            self.out = o;
        }
        let mut end = self.decided.to_le_bytes().to_vec();
        end.extend_from_slice(&b.to_le_bytes());
        self.send(
            Rank(root),
            tag(Kind::StateEnd, bslot(b, self.delivered)),
            &end,
        );
        for e in queued {
            self.route(e, false);
        }
    }

    fn on_state_end(&mut self, from: Rank, num: u64, body: &[u8]) {
        let (b, delivered) = split_bslot(num);
        let full = body
            .get(8..16)
            .map_or(0, |x| u64::from_le_bytes(x.try_into().expect("8 bytes")));
        let Some(vc) = self.vc.as_mut() else { return };
        if vc.ballot & 0xffff != b || vc.ballot != full {
            return;
        }
        if let Some(i) = vc.awaiting.iter().position(|&x| x == from.index()) {
            vc.awaiting.swap_remove(i);
            vc.min_delivered = vc.min_delivered.min(delivered);
            vc.max_delivered = vc.max_delivered.max(delivered);
        }
        self.maybe_finish_view_change();
    }

    /// Once every survivor's state is in: send every slot some survivor lacks down the
    /// new tree (the longest log any survivor delivered: every log is a prefix of the
    /// old acceptor's, and a set was acknowledged only once every replica had it), then
    /// `Resume`, then the sets that waited.
    fn maybe_finish_view_change(&mut self) {
        let done = self
            .vc
            .as_ref()
            .is_some_and(|vc| vc.awaiting.iter().all(|&x| self.dead[x]));
        if !done {
            return;
        }
        let vc = self.vc.take().expect("checked");
        let b = self.ballot;
        for s in vc.min_delivered + 1..=vc.max_delivered {
            let Some(e) = vc.entries.get(&s).cloned() else {
                self.note_fault(format!("view change: no survivor reported slot {s}"));
                break;
            };
            self.out.clear();
            e.encode(&mut self.out);
            let o = std::mem::take(&mut self.out);
            self.send_down(tag(Kind::Accept, bslot(b, s)), &o);
            self.out = o;
            if s == self.delivered + 1 {
                self.deliver(s, e);
            }
        }
        self.next_slot = self
            .next_slot
            .max(vc.max_delivered + 1)
            .max(self.delivered + 1);
        self.resumed = true;
        self.send_down(tag(Kind::Resume, bslot(b, 0)), &[]);
        for e in std::mem::take(&mut self.vc_queue) {
            self.order(e);
        }
    }

    /// After a batch of messages: acknowledge up the tree (or, on the root, decide and
    /// announce), and on the root, finish a close once everything ordered is decided.
    fn flush(&mut self) -> Option<Exit> {
        if self.protocol != Protocol::Broadcast {
            loop {
                let mut up = self.delivered;
                for &(u, _) in &self.child_up {
                    up = up.min(u);
                }
                let own_no = self
                    .pending
                    .iter()
                    .rev()
                    .find(|p| p.slot == up)
                    .is_some_and(|p| p.no);
                let no = own_no || self.child_up.iter().any(|&(u, n)| u == up && n);
                if self.me != self.root {
                    if up > self.sent_up && self.resumed {
                        self.sent_up = up;
                        if let Some(p) = self.parent {
                            let body: &[u8] = if no { &[0] } else { &[] };
                            self.send(p, tag(Kind::Up, bslot(self.ballot, up)), body);
                        }
                    }
                    break;
                }
                if self.vc.is_some() {
                    break;
                }
                let b = self.ballot;
                match self.protocol {
                    Protocol::OnePaxos => {
                        if up > self.decided {
                            self.send_down(tag(Kind::Commit, bslot(b, up)), &[]);
                            self.decide_to(up);
                        }
                        break;
                    }
                    Protocol::TwoPc => match self.inflight {
                        Some(s) if up >= s => {
                            if no {
                                self.send_down(tag(Kind::Abort, bslot(b, s)), &[]);
                                self.abort_slot(s);
                            } else {
                                self.send_down(tag(Kind::Commit, bslot(b, s)), &[]);
                                self.decide_to(s);
                            }
                            self.inflight = None;
                            self.start_next();
                            // A single replica decides the next one at once.
                        }
                        _ => break,
                    },
                    Protocol::Broadcast => break,
                }
            }
        }
        // Closing: the root stops once all it ordered is decided (or at once if a
        // replica failed, when that may never happen), and says so to every replica it
        // is linked to; a replica stops once it decided as far, and passes it on. A
        // replica hears `Fin` from a peer before it sees that peer leave (FIFO links).
        if self.me == self.root
            && self.closing
            && self.fin_upto.is_none()
            && self.vc.is_none()
            && ((self.inflight.is_none() && self.decided + 1 == self.next_slot)
                || self.fault.is_some())
        {
            self.fin_upto = Some(self.decided);
        }
        // A replica cut off by a failure (no failover) cannot expect the root's `Fin`:
        // it stops when the store closes, with what it decided.
        if self.closing && self.fault.is_some() && self.me != self.root {
            return Some(Exit::Closed);
        }
        if let Some(u) = self.fin_upto {
            if self.decided >= u {
                for p in self.mesh.peers() {
                    if p.index() < self.lay.replicas && !self.fin_from[p] && !self.dead[p] {
                        self.send(p, tag(Kind::Fin, bslot(self.ballot, u)), &[]);
                    }
                }
                return Some(Exit::Closed);
            }
        }
        None
    }
}
