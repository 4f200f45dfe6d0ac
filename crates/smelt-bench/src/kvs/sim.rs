//! Simulated mode: predicts the store's set throughput and response time on a
//! modelled machine (paper §5.6–5.7, Figures 12 and 13) with a discrete-event
//! simulation of its message pattern.
//!
//! # What is simulated
//! Replicas and clients are members on the CPUs the real store puts them on with a
//! model ([`placement`]: replicas on the first CPU of each NUMA node in turn, clients
//! on the other CPUs of their home replica's node). Each member is one thread: it
//! takes one message at a time, in arrival order, and sends one message at a time.
//! Costs are those of smelt's tree simulator ([`smelt_tree::sim`], the paper's model):
//! a send blocks the sender for `t_send(from, to)`, the message is available to the
//! receiver when the send ends, and taking it blocks the receiver for
//! `t_receive(from, to)`; both scaled by the message's cache lines ([`Payload`]).
//!
//! The messages are those of the store's replicas (`smelt-kvs`'s `replica.rs`) in normal operation:
//! * closed-loop clients (no think time) issue gets (share `get_ratio`) and sets on
//!   uniformly drawn keys to their home replica (client `c` at replica `c % R`);
//! * a get is answered by the home replica at once, unless a set of its key was
//!   delivered there and is not decided yet: then when that set is decided;
//! * 1Paxos: home → leader → acceptor (`Propose`), the acceptor assigns the next
//!   slot and sends `Accept` down the tree; every replica forwards it to its children
//!   first, then delivers it. A replica's event loop takes up to 64 messages, then
//!   *flushes*: it sends `Up` (the highest slot its whole subtree delivered) to its
//!   parent; the acceptor, once every replica has a slot, sends `Commit` down the
//!   tree; a replica applies up to the commit point and answers its own clients'
//!   sets (`SetOk`). Acknowledgements and commits coalesce under load as in the
//!   real loop;
//! * the plain atomic broadcast: home → root, `Accept` down the tree, applied and
//!   answered on delivery;
//! * two-phase commit: as 1Paxos without the leader, one set at a time at the root.
//!
//! Not simulated: contention on the interconnect, members sharing a CPU (a client
//! placed on its replica's CPU when the node has no free CPU runs as if it had its
//! own, and their messages cost the model's cost of that CPU to itself or, where that
//! is 0, its cheapest transfer to another CPU), time spent outside messaging (hashing, the store's map), polling several
//! links, retries, crashes and view changes.

use serde::Serialize;
use smelt_ids::rng::SplitMix64;
use smelt_kvs::{KvsError, Protocol};
use smelt_model::Model;
use smelt_tree::{Costs, Payload, Topology};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, VecDeque};

/// Messages a replica takes before it flushes (as the real event loop).
const BATCH: usize = 64;
/// Payload bytes per cache-line slot of a channel (`smelt_transport`'s channels).
const LINE_PAYLOAD: usize = 48;

/// One simulated run: a store, its load, and how long to measure.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Replicas (at most the model's CPUs).
    pub replicas: usize,
    /// Closed-loop clients.
    pub clients: usize,
    /// The agreement protocol.
    pub protocol: Protocol,
    /// The tree the acceptor broadcasts over (built from the model, as the store does
    /// with `smelt_tree::ModelShape`).
    pub topology: Topology,
    /// Share of gets among operations, in `[0, 1)`.
    pub get_ratio: f64,
    /// Keys are drawn uniformly from `0..keys`.
    pub keys: u64,
    /// Key length in bytes (message sizes).
    pub key_len: usize,
    /// Value length in bytes (message sizes).
    pub value_len: usize,
    /// Cost of each extra cache line of a message as a fraction of one line's
    /// (as [`Payload::extra_line_factor`]).
    pub extra_line_factor: f64,
    /// Seed of the clients' choices.
    pub seed: u64,
    /// Sets completed before measuring starts.
    pub warmup_sets: u64,
    /// Sets measured.
    pub sets: u64,
}

impl SimConfig {
    /// Defaults: 1Paxos over `adaptive-shuffled`, 80 % gets, 1000 keys, 8-byte keys
    /// and 16-byte values, 500 sets of warm-up then 4000 measured.
    pub fn new(replicas: usize, clients: usize) -> SimConfig {
        SimConfig {
            replicas,
            clients,
            protocol: Protocol::OnePaxos,
            topology: Topology::AdaptiveShuffled,
            get_ratio: 0.8,
            keys: 1000,
            key_len: 8,
            value_len: 16,
            extra_line_factor: 1.0,
            seed: 1,
            warmup_sets: 500,
            sets: 4000,
        }
    }
}

/// The prediction of one simulated run. Times in the model's unit (ns).
#[derive(Debug, Clone, Serialize)]
pub struct SimResult {
    /// Replicas.
    pub replicas: usize,
    /// Clients.
    pub clients: usize,
    /// Protocol name.
    pub protocol: String,
    /// Tree topology name.
    pub tree: String,
    /// The acceptor (tree root), a replica index.
    pub root: usize,
    /// The 1Paxos leader (`None` for other protocols).
    pub leader: Option<usize>,
    /// The largest number of children of any replica in the tree.
    pub max_fanout: usize,
    /// The tree's depth (edges from the root to the deepest replica).
    pub depth: usize,
    /// OS CPU of each replica.
    pub replica_cpus: Vec<u32>,
    /// OS CPU of each client.
    pub client_cpus: Vec<u32>,
    /// Completed sets per second (all clients).
    pub set_per_sec: f64,
    /// Completed gets per second (all clients).
    pub get_per_sec: f64,
    /// Mean set response time (call to answer), ns.
    pub set_mean_ns: f64,
    /// Median set response time, ns.
    pub set_p50_ns: f64,
    /// 99th percentile set response time, ns.
    pub set_p99_ns: f64,
    /// Mean get response time, ns (NaN without gets).
    pub get_mean_ns: f64,
    /// Median get response time, ns (NaN without gets).
    pub get_p50_ns: f64,
    /// Sets measured.
    pub sets: u64,
    /// Gets completed while measuring.
    pub gets: u64,
    /// Simulated time measured over, ns.
    pub window_ns: f64,
    /// Events simulated (whole run).
    pub events: u64,
}

/// One setup of the comparison (as `smelt kvs` runs them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setup {
    /// `tree`, `sequential` or `broadcast`.
    pub name: &'static str,
    /// Its protocol.
    pub protocol: Protocol,
    /// Its tree.
    pub topology: Topology,
}

/// The three setups of `smelt kvs`: `protocol` over `tree`, `protocol` over
/// sequential sending, the plain atomic broadcast over `tree`.
pub fn setups(protocol: Protocol, tree: Topology) -> [Setup; 3] {
    [
        Setup {
            name: "tree",
            protocol,
            topology: tree,
        },
        Setup {
            name: "sequential",
            protocol,
            topology: Topology::Sequential,
        },
        Setup {
            name: "broadcast",
            protocol: Protocol::Broadcast,
            topology: tree,
        },
    ]
}

/// The replica counts predicted by default: 4, 8, 16, 32, 64, those the model has
/// CPUs for (the model's CPU count alone if it has fewer than 4).
pub fn default_replica_counts(model: &Model) -> Vec<usize> {
    let n = model.len();
    let v: Vec<usize> = [4, 8, 16, 32, 64].into_iter().filter(|&r| r <= n).collect();
    if v.is_empty() {
        vec![n.max(1)]
    } else {
        v
    }
}

/// Replica and client CPUs from a model, as `smelt kvs --model` places them:
/// replicas on the first CPU of each NUMA node ([`Model::node_ids`]) in turn (then the
/// second, ...), client `c` (home replica `c % replicas`) on the other CPUs of its
/// home's node in turn, or on its home's CPU when the node has no other. CPUs are
/// reused when there are more replicas than CPUs.
pub fn placement(model: &Model, replicas: usize, clients: usize) -> (Vec<u32>, Vec<u32>) {
    let nodes = model.node_ids();
    let mut by_node: Vec<Vec<u32>> = Vec::new();
    for (pos, &n) in nodes.iter().enumerate() {
        if by_node.len() <= n {
            by_node.resize(n + 1, Vec::new());
        }
        by_node[n].push(model.cpus[pos]);
    }
    by_node.retain(|v| !v.is_empty());
    if by_node.is_empty() || replicas == 0 {
        return (Vec::new(), Vec::new());
    }
    let mut rep = Vec::with_capacity(replicas);
    let mut rep_node = Vec::with_capacity(replicas);
    let mut round = 0;
    while rep.len() < replicas {
        let before = rep.len();
        for (n, cpus) in by_node.iter().enumerate() {
            if rep.len() < replicas && round < cpus.len() {
                rep.push(cpus[round]);
                rep_node.push(n);
            }
        }
        if rep.len() == before {
            // More replicas than CPUs: reuse them.
            let k = rep.len();
            rep.push(rep[k % before.max(1)]);
            rep_node.push(rep_node[k % before.max(1)]);
        }
        round += 1;
    }
    let mut next = vec![0usize; by_node.len()];
    let cli = (0..clients)
        .map(|c| {
            let home = c % replicas;
            let n = rep_node[home];
            let others: Vec<u32> = by_node[n]
                .iter()
                .copied()
                .filter(|x| !rep.contains(x))
                .collect();
            if others.is_empty() {
                rep[home]
            } else {
                let x = others[next[n] % others.len()];
                next[n] += 1;
                x
            }
        })
        .collect();
    (rep, cli)
}

/// A set as ordered: who asked, its request id, its key.
#[derive(Debug, Clone, Copy)]
struct Ent {
    client: u32,
    seq: u64,
    key: u64,
}

#[derive(Debug, Clone, Copy)]
enum Body {
    Get { key: u64 },
    Set { seq: u64, key: u64 },
    GetOk,
    SetOk,
    Propose(Ent),
    Accept(u64, Ent),
    Up(u64),
    Commit(u64),
}

#[derive(Debug, Clone, Copy)]
struct Msg {
    from: usize,
    body: Body,
}

#[derive(Debug)]
enum EvKind {
    Arrive(usize, Msg),
    Wake(usize),
}

#[derive(Debug)]
struct Ev {
    t: f64,
    seq: u64,
    kind: EvKind,
}

impl Ev {
    fn prio(&self) -> u8 {
        // Arrivals at a time come before the wake-ups at that time: a member that
        // looks for messages at `t` sees every one sent by then.
        match self.kind {
            EvKind::Arrive(..) => 0,
            EvKind::Wake(_) => 1,
        }
    }
}

impl PartialEq for Ev {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Ev {}
impl Ord for Ev {
    fn cmp(&self, o: &Self) -> Ordering {
        // A min-heap on (t, prio, seq).
        o.t.total_cmp(&self.t)
            .then(o.prio().cmp(&self.prio()))
            .then(o.seq.cmp(&self.seq))
    }
}
impl PartialOrd for Ev {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// One replica's protocol state (the fields of `replica.rs` normal operation uses).
#[derive(Default)]
struct Rep {
    parent: Option<usize>,
    children: Vec<usize>,
    child_up: Vec<u64>,
    sent_up: u64,
    delivered: u64,
    decided: u64,
    pending: VecDeque<(u64, Ent)>,
    pending_keys: HashMap<u64, (u32, u64)>,
    next_slot: u64,
    queue: VecDeque<Ent>,
    inflight: Option<u64>,
    waiting_sets: HashMap<u32, u64>,
    /// (client member, slot that must be decided first).
    waiting_gets: Vec<(usize, u64)>,
}

struct Cli {
    home: usize,
    seq: u64,
    is_set: bool,
    call_t: f64,
    rng: SplitMix64,
    started: bool,
}

struct Member {
    /// Index into the cost matrices.
    local: usize,
    inbox: VecDeque<Msg>,
    /// A wake-up is scheduled (or the member is working).
    busy: bool,
    /// Messages taken since the last flush.
    batch: usize,
}

/// Message sizes, as the cost factor of each kind.
struct Scales {
    get: f64,
    set: f64,
    get_ok: f64,
    entry: f64,
    word: f64,
}

impl Scales {
    fn new(cfg: &SimConfig) -> Scales {
        let f = |bytes: usize| {
            Payload {
                lines: bytes.div_ceil(LINE_PAYLOAD).max(1) as u32,
                extra_line_factor: cfg.extra_line_factor,
            }
            .scale()
        };
        Scales {
            get: f(cfg.key_len),
            // [key length] key value
            set: f(1 + cfg.key_len + cfg.value_len),
            // [found] value
            get_ok: f(1 + cfg.value_len),
            // client, request id, key length, key, value (wire::Entry)
            entry: f(13 + cfg.key_len + cfg.value_len),
            word: f(0),
        }
    }

    fn of(&self, b: &Body) -> f64 {
        match b {
            Body::Get { .. } => self.get,
            Body::Set { .. } => self.set,
            Body::GetOk => self.get_ok,
            Body::Propose(_) | Body::Accept(..) => self.entry,
            Body::SetOk | Body::Up(_) | Body::Commit(_) => self.word,
        }
    }
}

struct Sim<'a> {
    cfg: &'a SimConfig,
    costs: Costs,
    /// Send and receive cost between two members on one CPU, by local index.
    self_cost: Vec<(f64, f64)>,
    scales: Scales,
    r: usize,
    root: usize,
    leader: usize,
    members: Vec<Member>,
    reps: Vec<Rep>,
    clis: Vec<Cli>,
    heap: BinaryHeap<Ev>,
    seq: u64,
    events: u64,
    // Measurement.
    sets_done: u64,
    t0: Option<f64>,
    t1: Option<f64>,
    set_lat: Vec<f64>,
    get_lat: Vec<f64>,
}

fn bad(what: String) -> KvsError {
    KvsError::Config(format!("simulation: {what}"))
}

/// Simulates `cfg` on `model` and predicts its throughput and response times.
/// Deterministic: the same model and configuration give the same result.
pub fn simulate(model: &Model, cfg: &SimConfig) -> Result<SimResult, KvsError> {
    let r = cfg.replicas;
    if r == 0 {
        return Err(bad("at least one replica is needed".into()));
    }
    if r > model.len() {
        return Err(bad(format!(
            "{r} replicas, but the machine has {} CPUs (one replica per CPU at most)",
            model.len()
        )));
    }
    if cfg.clients == 0 {
        return Err(bad("at least one client is needed".into()));
    }
    if !(0.0..1.0).contains(&cfg.get_ratio) {
        return Err(bad(format!(
            "the get ratio {} must be at least 0 and below 1 (there must be sets to predict)",
            cfg.get_ratio
        )));
    }
    if cfg.keys == 0 {
        return Err(bad("at least one key is needed".into()));
    }
    if cfg.sets == 0 {
        return Err(bad("at least one set must be measured".into()));
    }
    if !(cfg.extra_line_factor.is_finite() && cfg.extra_line_factor >= 0.0) {
        return Err(bad(format!(
            "the extra line factor {} must be a finite number ≥ 0",
            cfg.extra_line_factor
        )));
    }
    if cfg.key_len > 255 {
        return Err(bad(format!("keys of {} bytes: at most 255", cfg.key_len)));
    }
    let (rep_cpus, cli_cpus) = placement(model, r, cfg.clients);
    // The tree, as the store builds it with a `smelt_tree::ModelShape`: over the
    // replicas' CPUs, rooted at the topology's default root.
    let rep_pos = model.positions(&rep_cpus).map_err(|e| bad(e.to_string()))?;
    let tree = cfg
        .topology
        .generate(model, &rep_pos, None)
        .map_err(|e| bad(format!("tree: {e}")))?;
    tree.validate().map_err(|e| bad(format!("tree: {e}")))?;
    let root = tree.root.index();
    let children = tree.child_indices();
    let leader = (0..r).find(|&x| x != root).unwrap_or(root);
    // Costs among the distinct CPUs of replicas and clients.
    let cli_pos = model.positions(&cli_cpus).map_err(|e| bad(e.to_string()))?;
    let mut uniq: Vec<usize> = Vec::new();
    let mut local_of: HashMap<usize, usize> = HashMap::new();
    let mut local = |p: usize, uniq: &mut Vec<usize>| {
        *local_of.entry(p).or_insert_with(|| {
            uniq.push(p);
            uniq.len() - 1
        })
    };
    let rep_local: Vec<usize> = rep_pos.iter().map(|&p| local(p, &mut uniq)).collect();
    let cli_local: Vec<usize> = cli_pos.iter().map(|&p| local(p, &mut uniq)).collect();
    let costs = Costs::new(model, &uniq).map_err(|e| bad(e.to_string()))?;
    // A client on its replica's CPU (a node without a free CPU): its messages cost
    // what the model says for the CPU to itself, or, where that is 0 (not measured),
    // the cheapest transfer to another CPU (a lower bound).
    let nearest = |m: &Vec<Vec<f64>>, p: usize| {
        if m[p][p] > 0.0 {
            return m[p][p];
        }
        m[p].iter()
            .enumerate()
            .filter(|&(j, &v)| j != p && v > 0.0)
            .map(|(_, &v)| v)
            .fold(f64::INFINITY, f64::min)
    };
    let self_cost: Vec<(f64, f64)> = uniq
        .iter()
        .map(|&p| {
            let (s, r) = (nearest(&model.send, p), nearest(&model.receive, p));
            (
                if s.is_finite() { s } else { 0.0 },
                if r.is_finite() { r } else { 0.0 },
            )
        })
        .collect();

    let mut reps: Vec<Rep> = (0..r)
        .map(|_| Rep {
            next_slot: 1,
            ..Default::default()
        })
        .collect();
    for (p, cs) in children.iter().enumerate() {
        reps[p].children = cs.clone();
        reps[p].child_up = vec![0; cs.len()];
        for &c in cs {
            reps[c].parent = Some(p);
        }
    }
    let depth = {
        let mut d = vec![0usize; r];
        let mut stack = vec![root];
        let mut max = 0;
        while let Some(p) = stack.pop() {
            for &c in &children[p] {
                d[c] = d[p] + 1;
                max = max.max(d[c]);
                stack.push(c);
            }
        }
        max
    };
    let members: Vec<Member> = rep_local
        .iter()
        .chain(cli_local.iter())
        .map(|&l| Member {
            local: l,
            inbox: VecDeque::new(),
            busy: false,
            batch: 0,
        })
        .collect();
    let clis: Vec<Cli> = (0..cfg.clients)
        .map(|c| {
            let mut rng =
                SplitMix64::new(cfg.seed ^ (c as u64 + 1).wrapping_mul(0xa076_1d64_78bd_642f));
            rng.next_u64();
            Cli {
                home: c % r,
                seq: 0,
                is_set: false,
                call_t: 0.0,
                rng,
                started: false,
            }
        })
        .collect();
    let mut sim = Sim {
        cfg,
        costs,
        self_cost,
        scales: Scales::new(cfg),
        r,
        root,
        leader,
        members,
        reps,
        clis,
        heap: BinaryHeap::new(),
        seq: 0,
        events: 0,
        sets_done: 0,
        t0: None,
        t1: None,
        set_lat: Vec::with_capacity(cfg.sets as usize),
        get_lat: Vec::new(),
    };
    if cfg.warmup_sets == 0 {
        sim.t0 = Some(0.0);
    }
    for c in 0..cfg.clients {
        sim.members[r + c].busy = true;
        sim.push(0.0, EvKind::Wake(r + c));
    }
    // Generous: a set costs a few messages per replica, a get four events.
    let per_set = 16 * (r as u64 + 4) * (1 + (4.0 / (1.0 - cfg.get_ratio)) as u64);
    let limit = (cfg.warmup_sets + cfg.sets)
        .saturating_mul(per_set)
        .saturating_add(1_000_000);
    while sim.t1.is_none() {
        let Some(ev) = sim.heap.pop() else {
            return Err(bad(
                "no more events before the measured sets completed".into()
            ));
        };
        sim.events += 1;
        if sim.events > limit {
            return Err(bad(format!(
                "{} events without completing the measured sets",
                sim.events
            )));
        }
        match ev.kind {
            EvKind::Arrive(to, m) => {
                let mem = &mut sim.members[to];
                mem.inbox.push_back(m);
                if !mem.busy {
                    mem.busy = true;
                    sim.push(ev.t, EvKind::Wake(to));
                }
            }
            EvKind::Wake(e) => sim.wake(e, ev.t),
        }
    }
    let (t0, t1) = (sim.t0.unwrap_or(0.0), sim.t1.unwrap_or(0.0));
    let window = t1 - t0;
    if !(window > 0.0 && window.is_finite()) {
        return Err(bad(format!(
            "the measured sets took no time ({window} ns): the model's costs among these \
             CPUs are 0, so there is no throughput to predict"
        )));
    }
    let (set_mean, set_p50, set_p99) = summary(&mut sim.set_lat);
    let (get_mean, get_p50, _) = summary(&mut sim.get_lat);
    let sets = sim.set_lat.len() as u64;
    Ok(SimResult {
        replicas: r,
        clients: cfg.clients,
        protocol: cfg.protocol.name().into(),
        tree: cfg.topology.to_string(),
        root,
        leader: (cfg.protocol == Protocol::OnePaxos).then_some(leader),
        max_fanout: children.iter().map(Vec::len).max().unwrap_or(0),
        depth,
        replica_cpus: rep_cpus,
        client_cpus: cli_cpus,
        set_per_sec: sets as f64 / window * 1e9,
        get_per_sec: sim.get_lat.len() as f64 / window * 1e9,
        set_mean_ns: set_mean,
        set_p50_ns: set_p50,
        set_p99_ns: set_p99,
        get_mean_ns: get_mean,
        get_p50_ns: get_p50,
        sets,
        gets: sim.get_lat.len() as u64,
        window_ns: window,
        events: sim.events,
    })
}

/// Mean, median and 99th percentile (NaN for none).
fn summary(v: &mut [f64]) -> (f64, f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    v.sort_by(f64::total_cmp);
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    (mean, q(0.5), q(0.99))
}

impl Sim<'_> {
    fn push(&mut self, t: f64, kind: EvKind) {
        self.seq += 1;
        self.heap.push(Ev {
            t,
            seq: self.seq,
            kind,
        });
    }

    /// Member `from` sends `body` to `to` starting at `*now`; `*now` moves past the
    /// send.
    fn send(&mut self, from: usize, to: usize, body: Body, now: &mut f64) {
        let (a, b) = (self.members[from].local, self.members[to].local);
        let c = if a == b {
            self.self_cost[a].0
        } else {
            self.costs.s(a, b)
        };
        *now += c * self.scales.of(&body);
        let m = Msg { from, body };
        self.push(*now, EvKind::Arrive(to, m));
    }

    /// Member `e` looks for work at `t`.
    fn wake(&mut self, e: usize, t: f64) {
        let mut now = t;
        if e >= self.r {
            let c = e - self.r;
            if !self.clis[c].started {
                self.clis[c].started = true;
                self.issue(c, &mut now);
            } else if let Some(m) = self.members[e].inbox.pop_front() {
                now += self.recv_cost(&m, e);
                self.on_reply(c, now);
                self.issue(c, &mut now);
            }
            self.next(e, now);
            return;
        }
        let mem = &mut self.members[e];
        if mem.batch < BATCH {
            if let Some(m) = mem.inbox.pop_front() {
                mem.batch += 1;
                now += self.recv_cost(&m, e);
                self.handle(e, m, &mut now);
                self.push(now, EvKind::Wake(e));
                return;
            }
        }
        if self.members[e].batch > 0 {
            self.members[e].batch = 0;
            self.flush(e, &mut now);
        }
        self.next(e, now);
    }

    /// After work that ended at `now`: wake again if messages wait, else idle.
    fn next(&mut self, e: usize, now: f64) {
        if self.members[e].inbox.is_empty() {
            self.members[e].busy = false;
        } else {
            self.push(now, EvKind::Wake(e));
        }
    }

    fn recv_cost(&self, m: &Msg, to: usize) -> f64 {
        let (a, b) = (self.members[m.from].local, self.members[to].local);
        let c = if a == b {
            self.self_cost[a].1
        } else {
            self.costs.r(a, b)
        };
        c * self.scales.of(&m.body)
    }

    // ---- Clients ----

    fn issue(&mut self, c: usize, now: &mut f64) {
        let cl = &mut self.clis[c];
        let u = cl.rng.next_f64();
        let key = cl.rng.below(self.cfg.keys);
        cl.seq += 1;
        cl.is_set = u >= self.cfg.get_ratio;
        cl.call_t = *now;
        let (seq, home) = (cl.seq, cl.home);
        let body = if cl.is_set {
            Body::Set { seq, key }
        } else {
            Body::Get { key }
        };
        self.send(self.r + c, home, body, now);
    }

    fn on_reply(&mut self, c: usize, now: f64) {
        let cl = &self.clis[c];
        let lat = now - cl.call_t;
        let measuring = self.t0.is_some() && self.t1.is_none();
        if cl.is_set {
            self.sets_done += 1;
            if measuring {
                self.set_lat.push(lat);
                if self.set_lat.len() as u64 >= self.cfg.sets {
                    self.t1 = Some(now);
                }
            }
            if self.sets_done == self.cfg.warmup_sets {
                self.t0 = Some(now);
            }
        } else if measuring {
            self.get_lat.push(lat);
        }
    }

    // ---- Replicas (replica.rs, normal operation) ----

    fn handle(&mut self, me: usize, m: Msg, now: &mut f64) {
        match m.body {
            Body::Set { seq, key } => {
                let client = (m.from - self.r) as u32;
                self.reps[me].waiting_sets.insert(client, seq);
                self.route(me, Ent { client, seq, key }, now);
            }
            Body::Get { key, .. } => {
                let wait = self.reps[me]
                    .pending_keys
                    .get(&key)
                    .filter(|k| k.0 > 0)
                    .map(|k| k.1);
                match wait {
                    Some(last) => self.reps[me].waiting_gets.push((m.from, last)),
                    None => self.send(me, m.from, Body::GetOk, now),
                }
            }
            Body::Propose(e) => self.route(me, e, now),
            Body::Accept(slot, e) => {
                // Forward first, then deliver.
                self.send_down(me, Body::Accept(slot, e), now);
                self.deliver(me, slot, e, now);
            }
            Body::Up(slot) => {
                let rep = &mut self.reps[me];
                if let Some(i) = rep.children.iter().position(|&c| c == m.from) {
                    rep.child_up[i] = slot;
                }
            }
            Body::Commit(slot) => {
                self.send_down(me, Body::Commit(slot), now);
                self.decide_to(me, slot, now);
            }
            Body::GetOk | Body::SetOk => {}
        }
    }

    fn send_down(&mut self, me: usize, body: Body, now: &mut f64) {
        for i in 0..self.reps[me].children.len() {
            let c = self.reps[me].children[i];
            self.send(me, c, body, now);
        }
    }

    fn route(&mut self, me: usize, e: Ent, now: &mut f64) {
        let next = match self.cfg.protocol {
            _ if me == self.root => None,
            Protocol::OnePaxos if me == self.leader => Some(self.root),
            Protocol::OnePaxos => Some(self.leader),
            _ => Some(self.root),
        };
        match next {
            None => self.order(me, e, now),
            Some(to) => self.send(me, to, Body::Propose(e), now),
        }
    }

    fn order(&mut self, me: usize, e: Ent, now: &mut f64) {
        if self.cfg.protocol == Protocol::TwoPc {
            self.reps[me].queue.push_back(e);
            self.start_next(me, now);
        } else {
            self.accept(me, e, now);
        }
    }

    fn accept(&mut self, me: usize, e: Ent, now: &mut f64) {
        let slot = self.reps[me].next_slot;
        self.reps[me].next_slot += 1;
        self.send_down(me, Body::Accept(slot, e), now);
        self.deliver(me, slot, e, now);
    }

    fn start_next(&mut self, me: usize, now: &mut f64) {
        let rep = &mut self.reps[me];
        if rep.inflight.is_none() {
            if let Some(e) = rep.queue.pop_front() {
                rep.inflight = Some(rep.next_slot);
                self.accept(me, e, now);
            }
        }
    }

    fn deliver(&mut self, me: usize, slot: u64, e: Ent, now: &mut f64) {
        let rep = &mut self.reps[me];
        rep.delivered = slot;
        if self.cfg.protocol == Protocol::Broadcast {
            rep.decided = slot;
            self.apply(me, e, now);
            return;
        }
        let k = rep.pending_keys.entry(e.key).or_insert((0, 0));
        k.0 += 1;
        k.1 = slot;
        rep.pending.push_back((slot, e));
    }

    fn decide_to(&mut self, me: usize, upto: u64, now: &mut f64) {
        while self.reps[me].decided < upto {
            let rep = &mut self.reps[me];
            let Some((slot, e)) = rep.pending.pop_front() else {
                break;
            };
            if let Some(k) = rep.pending_keys.get_mut(&e.key) {
                k.0 -= 1;
                if k.0 == 0 {
                    rep.pending_keys.remove(&e.key);
                }
            }
            rep.decided = slot;
            self.apply(me, e, now);
        }
        // Gets that waited for a set of their key.
        let decided = self.reps[me].decided;
        if !self.reps[me].waiting_gets.is_empty() {
            let mut ready = Vec::new();
            self.reps[me].waiting_gets.retain(|&(c, last)| {
                if last <= decided {
                    ready.push(c);
                    false
                } else {
                    true
                }
            });
            for c in ready {
                self.send(me, c, Body::GetOk, now);
            }
        }
    }

    fn apply(&mut self, me: usize, e: Ent, now: &mut f64) {
        if e.client as usize % self.r == me
            && self.reps[me].waiting_sets.get(&e.client) == Some(&e.seq)
        {
            self.reps[me].waiting_sets.remove(&e.client);
            self.send(me, self.r + e.client as usize, Body::SetOk, now);
        }
    }

    /// After a batch: acknowledge up the tree, or (the root) decide and announce.
    fn flush(&mut self, me: usize, now: &mut f64) {
        if self.cfg.protocol == Protocol::Broadcast {
            return;
        }
        loop {
            let rep = &self.reps[me];
            let up = rep.child_up.iter().fold(rep.delivered, |a, &u| a.min(u));
            if me != self.root {
                if up > rep.sent_up {
                    self.reps[me].sent_up = up;
                    if let Some(p) = self.reps[me].parent {
                        self.send(me, p, Body::Up(up), now);
                    }
                }
                return;
            }
            match self.cfg.protocol {
                Protocol::TwoPc => match self.reps[me].inflight {
                    Some(s) if up >= s => {
                        self.send_down(me, Body::Commit(s), now);
                        self.decide_to(me, s, now);
                        self.reps[me].inflight = None;
                        self.start_next(me, now);
                    }
                    _ => return,
                },
                _ => {
                    if up > self.reps[me].decided {
                        self.send_down(me, Body::Commit(up), now);
                        self.decide_to(me, up, now);
                    }
                    return;
                }
            }
        }
    }
}

/// The three setups' predictions for one replica and client count, and the tree's
/// ratios to sequential sending.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// Replicas.
    pub replicas: usize,
    /// Clients.
    pub clients: usize,
    /// One result per setup, in [`setups`] order, with its name.
    pub rows: Vec<(String, SimResult)>,
    /// Set throughput, tree over sequential sending.
    pub throughput_ratio: f64,
    /// Mean set response time, tree over sequential sending.
    pub response_ratio: f64,
    /// Median set response time, tree over sequential sending.
    pub response_p50_ratio: f64,
}

/// Simulates the three [`setups`] of `base` (its protocol, over its topology) and
/// compares the tree with sequential sending.
pub fn compare(model: &Model, base: &SimConfig) -> Result<Comparison, KvsError> {
    let mut rows = Vec::new();
    for s in setups(base.protocol, base.topology) {
        let mut c = base.clone();
        c.protocol = s.protocol;
        c.topology = s.topology;
        rows.push((s.name.to_string(), simulate(model, &c)?));
    }
    let (t, q) = (&rows[0].1, &rows[1].1);
    Ok(Comparison {
        replicas: base.replicas,
        clients: base.clients,
        throughput_ratio: t.set_per_sec / q.set_per_sec,
        response_ratio: t.set_mean_ns / q.set_mean_ns,
        response_p50_ratio: t.set_p50_ns / q.set_p50_ns,
        rows,
    })
}
