//! `smelt kvs`: the replicated key-value store (smelt-kvs) under load, with its
//! agreement protocol over smelt's tree, over sequential sending (the paper's
//! baseline) and as a plain atomic broadcast, in one run; histories for
//! linearizability checkers, and the checker itself.

use anyhow::{bail, Context as _, Result};
use clap::Args;
use serde_json::{json, Value};
use smelt_kvs::bench::{self, BenchConfig, BenchResult, OpStats, Victim};
use smelt_kvs::history::{check_history, read_history};
use smelt_kvs::{Protocol, StoreConfig, TreeSpec};
use smelt_model::Model;
use smelt_transport::allowed_cpus;
use smelt_tree::Topology;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args)]
#[command(
    about = "Run the replicated key-value store under load: agreement over smelt's tree vs sequential sending vs a plain broadcast vs Raft",
    long_about = "Starts a replicated key-value store (replicas and clients as threads; with \
    --processes each replica is a process of its own), runs \
    clients doing random gets and sets for --duration seconds, and reports set and get \
    throughput and latency (p50, p99) for four setups in one run: the protocol over smelt's \
    tree (--tree), the protocol over sequential sending (the acceptor sends to every replica in \
    turn, the paper's baseline), the plain atomic broadcast over the tree (no agreement \
    round; the paper's reference line), and the same store replicated with Raft (raft-rs in \
    memory, ReadIndex gets: the peer users would pick). Sets are ordered by the protocol and applied in the \
    same order at every replica; gets are answered by the client's home replica. Every set \
    writes a value never written before (client id and sequence number).\n\n\
    --history FILE writes every operation of the first setup as one JSON line \
    {\"client\", \"op\", \"key\", \"value\", \"call_ns\", \"return_ns\", \"ok\"} (one \
    monotonic clock; value null for a get of a key never set); --check runs smelt's \
    linearizability checker on it; --check-file FILE checks a history written before, \
    without running anything.\n\n\
    Examples:\n  smelt kvs --replicas 8 --clients 8 --duration 5\n  \
    smelt kvs --replicas 4 --clients 12 --keys 3 --get-ratio 0.5 --history h.jsonl --check\n  \
    smelt kvs --model model.json --protocol 2pc --json\n  smelt kvs --check-file h.jsonl"
)]
pub struct KvsArgs {
    /// Replicas; default: one per NUMA node (of --model, or of this machine). With
    /// --simulate a list (default 4,8,16,32,64, those the machine has CPUs for).
    #[arg(long, value_delimiter = ',', value_parser = crate::common::count(1, 1024))]
    pub replicas: Vec<usize>,
    /// Clients (load generators); default: two per replica. With --simulate a list.
    #[arg(long, value_delimiter = ',', value_parser = crate::common::count(1, 4096))]
    pub clients: Vec<usize>,
    /// Agreement protocol: 1paxos or 2pc (broadcast: the plain atomic broadcast alone).
    #[arg(long, default_value = "1paxos")]
    pub protocol: String,
    /// smelt's tree topology (as `smelt tree --algo`), rooted at the acceptor.
    #[arg(long, default_value = "adaptive-shuffled")]
    pub tree: String,
    /// Machine model to build the tree from and place replicas by (one per NUMA node
    /// first); without one, a uniform machine and unpinned threads.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Share of gets among operations.
    #[arg(long, default_value = "0.8", value_parser = crate::common::number(0.0, 1.0))]
    pub get_ratio: f64,
    /// Seconds each setup runs (at most 3600).
    #[arg(long, default_value = "2", value_parser = crate::common::number(0.01, 3600.0))]
    pub duration: f64,
    /// Keys are drawn from 0..KEYS.
    #[arg(long, default_value = "1000", value_parser = crate::common::count(1, 1 << 40))]
    pub keys: usize,
    /// Longest key, bytes (at least 8: the benchmark's keys are 8-byte numbers).
    #[arg(long, default_value = "8", value_parser = crate::common::count(8, 255))]
    pub key_len: usize,
    /// Longest value, bytes (at least 8).
    #[arg(long, default_value = "16", value_parser = crate::common::count(8, 1 << 20))]
    pub value_len: usize,
    /// Which setups to run, of tree, sequential, broadcast, raft (the same store
    /// replicated with raft-rs, in memory; its replicas are always threads).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "tree,sequential,broadcast,raft"
    )]
    pub setups: Vec<String>,
    /// Seed of the clients' random choices.
    #[arg(long, default_value = "1")]
    pub seed: u64,
    /// A client's wait for one attempt of an operation, seconds (then it retries with
    /// the same request id).
    #[arg(long, default_value = "2", value_parser = crate::common::seconds)]
    pub attempt_timeout: f64,
    /// Attempts per operation.
    #[arg(long, default_value = "3", value_parser = crate::common::count_u32(1, 1_000_000))]
    pub attempts: u32,
    /// Stop a replica mid-run (fail-stop), in every setup: WHAT@SECONDS with WHAT one of
    /// acceptor (the current view's root), leader, replica:N; may be given several
    /// times (e.g. --crash acceptor@1 --crash acceptor@2).
    #[arg(long, value_name = "WHAT@SECONDS")]
    pub crash: Vec<String>,
    /// 1Paxos without failover: no view change when a replica stops, and links only
    /// along the tree and to the leader (by default every two replicas are linked, so
    /// that the survivors can rebuild the tree).
    #[arg(long)]
    pub no_failover: bool,
    /// Write the first setup's operations to this file, one JSON object per line.
    #[arg(long)]
    pub history: Option<PathBuf>,
    /// Check the first setup's history for linearizability (smelt's checker).
    #[arg(long)]
    pub check: bool,
    /// Only check this history file for linearizability (nothing is run).
    #[arg(long, conflicts_with_all = ["history", "check"])]
    pub check_file: Option<PathBuf>,
    /// Run each replica in a process of its own (this `smelt` re-executed), linked by
    /// shared memory; clients stay threads of this process. --crash then kills the
    /// replica's process (SIGKILL).
    #[arg(long)]
    pub processes: bool,
    /// Predict instead of running: simulate the store on the --model machine
    /// (smelt_bench::kvs::sim) for each --replicas and --clients count.
    #[arg(long, requires = "model", conflicts_with_all = ["check_file", "history", "check", "crash"])]
    pub simulate: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The hidden `smelt kvs-replica`: one replica process of `smelt kvs --processes`.
pub fn replica_process() -> Result<()> {
    smelt_kvs::process::run_replica_from_env_with(&smelt_tree::shape::from_description)
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// The hint every usage mistake of `smelt kvs` ends with (as clap's own errors do).
const HELP_HINT: &str = "try 'smelt kvs --help'";

/// `--protocol` and `--tree`, parsed.
pub(crate) fn protocol_and_tree(a: &KvsArgs) -> Result<(Protocol, Topology)> {
    let protocol: Protocol = a
        .protocol
        .parse()
        .map_err(|e| anyhow::anyhow!("--protocol: {e}; {HELP_HINT}"))?;
    let tree: Topology = a
        .tree
        .trim()
        .parse()
        .map_err(|e| anyhow::anyhow!("--tree: {e}; {HELP_HINT}"))?;
    Ok((protocol, tree))
}

/// One setup of the comparison.
struct Setup {
    role: &'static str,
    protocol: Protocol,
    tree: Topology,
}

/// NUMA nodes of this machine (at least 1).
fn local_nodes() -> usize {
    std::fs::read_dir("/sys/devices/system/node")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| {
                    let n = e.file_name();
                    let n = n.to_string_lossy();
                    n.starts_with("node")
                        && n[4..].chars().all(|c| c.is_ascii_digit())
                        && n.len() > 4
                })
                .count()
        })
        .unwrap_or(1)
        .max(1)
}

fn stats_json(s: &OpStats) -> Value {
    json!({
        "ok": s.ok,
        "failed": s.failed,
        "per_sec": s.per_sec,
        "p50_ns": s.p50_ns,
        "p99_ns": s.p99_ns,
        "mean_ns": s.mean_ns,
    })
}

/// One line about a replica stopped during a setup's run.
fn t_crash_line(out: &mut String, role: &str, at: Duration, replica: usize, r: &BenchResult) {
    let vc = r
        .report
        .replicas
        .iter()
        .flatten()
        .map(|x| x.view_changes)
        .max()
        .unwrap_or(0);
    out.push_str(&format!(
        "{role}: replica {replica} stopped at {:.2} s{}\n",
        at.as_secs_f64(),
        if role == "raft" {
            format!(" (leader changes seen: {vc})")
        } else if vc > 0 {
            format!(" (survivors changed view {vc} times)")
        } else {
            " (no failover: sets fail from then on)".into()
        }
    ));
}

fn us(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1000.0)
}

pub fn run(a: KvsArgs) -> Result<()> {
    if a.simulate {
        return crate::cmd_kvs_sim::run(&a);
    }
    if a.replicas.len() > 1 || a.clients.len() > 1 {
        bail!("--replicas and --clients take one number each (lists need --simulate)");
    }
    if let Some(f) = &a.check_file {
        return check_file(f, a.json);
    }
    if let Some(h) = &a.history {
        crate::common::check_output("--history", h, &[])?;
    }
    let (protocol, tree) = protocol_and_tree(&a)?;
    let setups = parse_setups(&a.setups, protocol, tree)?;
    let crashes = parse_crashes(&a.crash, a.duration)?;
    let model = match &a.model {
        Some(p) => Some(Arc::new(
            Model::load(p).with_context(|| format!("--model {}", p.display()))?,
        )),
        None => None,
    };
    let place = Placement::new(&a, model.as_deref());
    if !a.json {
        crate::common::print_text(&format!(
            "smelt kvs: {} replicas, {} clients, {:.0}% gets, {} keys, {} s per setup; {}\n",
            place.replicas,
            place.clients,
            a.get_ratio * 100.0,
            a.keys,
            a.duration,
            place.note
        ));
        if place.replicas == 1 {
            crate::common::warn(
                "one replica: every setup is the same; use --replicas N to compare trees",
            );
        }
    }
    let mut runs = Runs::default();
    for (i, s) in setups.iter().enumerate() {
        let b = bench_config(&a, s, &place, model.as_ref(), i == 0, &crashes)?;
        let mut r = if s.role == "raft" {
            smelt_bench::kvs::run_raft(&b)
        } else {
            bench::run(&b)
        }
        .map_err(|e| anyhow::anyhow!("{}: {e}", s.role))?;
        if b.history {
            runs.keep_history(&a, &mut r)?;
        }
        if !a.json {
            crate::common::print_text(&format!(
                "  ran {:<34} {:>9.0} sets/s {:>9.0} gets/s\n",
                r.setup, r.sets.per_sec, r.gets.per_sec
            ));
        }
        runs.results.push((s, r));
    }
    if a.json {
        let out = json_report(&a, &runs, &place, protocol, tree);
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "{}", serde_json::to_string_pretty(&out)?);
    } else {
        crate::common::print_text(&text_report(&runs));
    }
    runs.finish()
}

/// `--check-file`: checks a history written before, running nothing.
fn check_file(f: &std::path::Path, as_json: bool) -> Result<()> {
    let text =
        smelt_model::files::read_input_text(f).map_err(|e| anyhow::anyhow!("--check-file: {e}"))?;
    let h =
        read_history(&text).map_err(|e| anyhow::anyhow!("--check-file {}: {e}", f.display()))?;
    let s = match check_history(&h) {
        Ok(s) => s,
        Err(e) => {
            if as_json {
                println!(
                    "{}",
                    json!({"file": f.display().to_string(), "linearizable": false, "why": e.to_string()})
                );
            }
            return Err(crate::common::Incomplete(format!(
                "{}: not linearizable: {e}",
                f.display()
            ))
            .into());
        }
    };
    if as_json {
        println!(
            "{}",
            json!({"file": f.display().to_string(), "linearizable": true, "keys": s.keys, "ops": s.ops, "left_out": s.left_out})
        );
    } else {
        crate::common::print_text(&format!(
            "{}: linearizable ({} operations on {} keys checked; {} incomplete left out)\n",
            f.display(),
            s.ops,
            s.keys,
            s.left_out
        ));
    }
    Ok(())
}

/// `--setups`: the setups to run, in order, each once.
fn parse_setups(names: &[String], protocol: Protocol, tree: Topology) -> Result<Vec<Setup>> {
    let mut setups = Vec::new();
    for s in names {
        let s = s.trim().to_ascii_lowercase();
        let setup = match s.as_str() {
            "tree" => Setup {
                role: "tree",
                protocol,
                tree,
            },
            "sequential" => Setup {
                role: "sequential",
                protocol,
                tree: Topology::Sequential,
            },
            "broadcast" => Setup {
                role: "broadcast",
                protocol: Protocol::Broadcast,
                tree,
            },
            // Raft elects its own leader; protocol and tree do not apply.
            "raft" => Setup {
                role: "raft",
                protocol,
                tree,
            },
            other => {
                bail!(
                    "--setups: unknown setup '{other}' (known: tree, sequential, broadcast, raft); {HELP_HINT}"
                )
            }
        };
        if setups.iter().any(|x: &Setup| x.role == setup.role) {
            bail!("--setups: '{s}' is listed twice; {HELP_HINT}");
        }
        setups.push(setup);
    }
    if setups.is_empty() {
        bail!("--setups: nothing to run; {HELP_HINT}");
    }
    Ok(setups)
}

/// `--crash WHAT@SECONDS`, in time order.
fn parse_crashes(specs: &[String], duration: f64) -> Result<Vec<(Duration, Victim)>> {
    let mut crashes: Vec<(Duration, Victim)> = Vec::new();
    for c in specs {
        let (what, at) = c.rsplit_once('@').ok_or_else(|| {
            anyhow::anyhow!("--crash '{c}': expected WHAT@SECONDS (e.g. acceptor@1.5)")
        })?;
        let v: Victim = what
            .parse()
            .map_err(|e| anyhow::anyhow!("--crash '{c}': {e}"))?;
        let at: f64 = crate::common::number(0.0, duration)(at).map_err(|e| {
            anyhow::anyhow!("--crash '{c}': the time {e} (the run lasts {duration} s)")
        })?;
        crashes.push((Duration::from_secs_f64(at), v));
    }
    crashes.sort_by_key(|c| c.0);
    Ok(crashes)
}

/// How many replicas and clients run where.
struct Placement {
    replicas: usize,
    clients: usize,
    replica_cpus: Option<Vec<u32>>,
    client_cpus: Option<Vec<u32>>,
    /// Pinned along the model (its CPUs are all this machine's).
    pinned: bool,
    /// The placement in words, for the report.
    note: String,
}

impl Placement {
    fn new(a: &KvsArgs, model: Option<&Model>) -> Placement {
        let replicas = a.replicas.first().copied().unwrap_or_else(|| match model {
            Some(m) => {
                let mut n = m.node_ids();
                n.sort_unstable();
                n.dedup();
                n.len().max(1)
            }
            None => local_nodes(),
        });
        let clients = a.clients.first().copied().unwrap_or(2 * replicas);
        // Placement: pinned along the model where its CPUs are this machine's.
        let allowed = allowed_cpus().unwrap_or_default();
        let (replica_cpus, client_cpus, pinned) = match model {
            Some(m) => {
                let (r, c) = smelt_bench::kvs::sim::placement(m, replicas, clients);
                let ok = r.iter().chain(c.iter()).all(|x| allowed.contains(x));
                (Some(r), Some(c), ok)
            }
            None => (None, None, false),
        };
        let threads = replicas + clients;
        let note = format!(
            "{}{} threads on {} CPUs{}; {}",
            if a.processes {
                format!("{replicas} replica processes + ")
            } else {
                String::new()
            },
            if a.processes { clients } else { threads },
            allowed.len(),
            if threads > allowed.len() {
                " (oversubscribed: tree levels cost scheduling rounds)"
            } else {
                ""
            },
            if pinned {
                "pinned per the model"
            } else if model.is_some() {
                "unpinned (the model's CPUs are not all available here)"
            } else {
                "unpinned, uniform machine"
            }
        );
        Placement {
            replicas,
            clients,
            replica_cpus,
            client_cpus,
            pinned,
            note,
        }
    }
}

/// The load of one setup: the store's configuration and the clients'. `first`: the
/// setup whose history is kept (`--history`, `--check`).
fn bench_config(
    a: &KvsArgs,
    s: &Setup,
    place: &Placement,
    model: Option<&Arc<Model>>,
    first: bool,
    crashes: &[(Duration, Victim)],
) -> Result<BenchConfig> {
    let tree_spec = match model {
        Some(m) => TreeSpec::shaped(smelt_tree::ModelShape {
            topology: s.tree,
            model: m.clone(),
            cpus: place.replica_cpus.clone().expect("placed with the model"),
        }),
        None => TreeSpec::shaped(s.tree),
    };
    let mut cfg = StoreConfig::new(place.replicas, place.clients)
        .protocol(s.protocol)
        .tree(tree_spec);
    cfg.key_len = a.key_len;
    cfg.value_len = a.value_len;
    cfg.attempt_timeout = Duration::from_secs_f64(a.attempt_timeout);
    cfg.attempts = a.attempts;
    cfg.failover = !a.no_failover;
    if a.processes {
        let exe = std::env::current_exe().context("cannot find the smelt executable")?;
        cfg.deployment = smelt_kvs::Deployment::Processes {
            program: exe,
            args: vec!["kvs-replica".into()],
        };
    }
    cfg.link.capacity = (cfg.link.capacity).max((a.key_len + a.value_len + 64).div_ceil(48) + 1);
    if place.pinned {
        cfg.replica_cpus = place.replica_cpus.clone();
    }
    let mut b = BenchConfig::new(cfg);
    b.get_ratio = a.get_ratio;
    b.duration = Duration::from_secs_f64(a.duration);
    b.keys = a.keys as u64;
    b.seed = a.seed;
    b.history = first && (a.history.is_some() || a.check);
    b.crashes = crashes.to_vec();
    if place.pinned {
        b.client_cpus = place.client_cpus.clone();
    }
    Ok(b)
}

/// The results of a run, the history written and its check.
#[derive(Default)]
struct Runs<'a> {
    results: Vec<(&'a Setup, BenchResult)>,
    history_written: Option<(PathBuf, usize)>,
    check_result:
        Option<std::result::Result<smelt_kvs::history::HistorySummary, smelt_kvs::KvsError>>,
}

impl Runs<'_> {
    /// Writes `r`'s history to `--history` and checks it (`--check`), then drops it.
    fn keep_history(&mut self, a: &KvsArgs, r: &mut BenchResult) -> Result<()> {
        if let Some(p) = &a.history {
            let mut text = String::with_capacity(r.history.len() * 100);
            for op in &r.history {
                text.push_str(&op.to_json());
                text.push('\n');
            }
            smelt_model::write_atomic(p, text.as_bytes())
                .map_err(|e| anyhow::anyhow!("--history {}: {e}", p.display()))?;
            self.history_written = Some((p.clone(), r.history.len()));
        }
        if a.check {
            self.check_result = Some(check_history(&r.history));
        }
        r.history = Vec::new();
        Ok(())
    }

    fn find(&self, role: &str) -> Option<&BenchResult> {
        self.results
            .iter()
            .find(|(s, _)| s.role == role)
            .map(|(_, r)| r)
    }

    /// Warns of failed operations; fails (exit status 1) where a replica's log
    /// differs or the history is not linearizable.
    fn finish(&self) -> Result<()> {
        let mut problems = Vec::new();
        for (s, r) in &self.results {
            if let Err(e) = r.report.check_logs() {
                problems.push(format!("{}: {e}", s.role));
            }
        }
        if let Some(Err(e)) = &self.check_result {
            problems.push(format!("history not linearizable: {e}"));
        }
        for (s, r) in &self.results {
            if let Some(e) = &r.first_error {
                crate::common::warn(&format!(
                    "{}: {} operations failed; the first: {e}",
                    s.role,
                    r.sets.failed + r.gets.failed
                ));
            }
        }
        if !problems.is_empty() {
            return Err(crate::common::Incomplete(problems.join("; ")).into());
        }
        Ok(())
    }
}

/// The `--json` report.
fn json_report(
    a: &KvsArgs,
    runs: &Runs,
    place: &Placement,
    protocol: Protocol,
    tree: Topology,
) -> Value {
    // Ratios of the tree to sequential sending.
    let ratios = match (runs.find("tree"), runs.find("sequential")) {
        (Some(t), Some(q)) => Some(json!({
            "set_throughput_tree_over_sequential": t.sets.per_sec / q.sets.per_sec.max(1e-9),
            "set_p50_tree_over_sequential": t.sets.p50_ns as f64 / (q.sets.p50_ns.max(1)) as f64,
            "set_p99_tree_over_sequential": t.sets.p99_ns as f64 / (q.sets.p99_ns.max(1)) as f64,
        })),
        _ => None,
    };
    // smelt's tree over the Raft peer.
    let vs_raft = match (runs.find("tree"), runs.find("raft")) {
        (Some(t), Some(q)) => Some(json!({
            "set_throughput_tree_over_raft": t.sets.per_sec / q.sets.per_sec.max(1e-9),
            "set_p50_tree_over_raft": t.sets.p50_ns as f64 / (q.sets.p50_ns.max(1)) as f64,
            "get_throughput_tree_over_raft": t.gets.per_sec / q.gets.per_sec.max(1e-9),
        })),
        _ => None,
    };
    let rows: Vec<Value> = runs
        .results
        .iter()
        .map(|(s, r)| {
            json!({
                "setup": s.role,
                "protocol": if s.role == "raft" { "raft" } else { s.protocol.name() },
                "tree": (s.role != "raft").then(|| s.tree.to_string()),
                "root": r.report.root,
                "leader": r.report.leader,
                "sets": stats_json(&r.sets),
                "gets": stats_json(&r.gets),
                "elapsed_s": r.elapsed.as_secs_f64(),
                "retries": r.retries,
                "first_error": r.first_error,
                "logs_identical": r.report.check_logs().is_ok(),
                "crashed": r.crashed.iter().map(|(t, x)| json!({"at_s": t.as_secs_f64(), "replica": x})).collect::<Vec<_>>(),
                "view_changes": r.report.replicas.iter().flatten().map(|x| x.view_changes).max().unwrap_or(0),
            })
        })
        .collect();
    json!({
        "replicas": place.replicas,
        "clients": place.clients,
        "protocol": protocol.name(),
        "tree": tree.to_string(),
        "get_ratio": a.get_ratio,
        "keys": a.keys,
        "duration_s": a.duration,
        "key_len": a.key_len,
        "value_len": a.value_len,
        "placement": place.note,
        "processes": a.processes,
        "failover": !a.no_failover && protocol == Protocol::OnePaxos,
        "rows": rows,
        "ratios": ratios,
        "ratios_vs_raft": vs_raft,
        "history": runs.history_written.as_ref().map(|(p, n)| json!({"file": p.display().to_string(), "ops": n})),
        "linearizable": runs.check_result.as_ref().map(|r| r.is_ok()),
    })
}

/// The human report: one row per setup, the ratios, crashes, logs and the check.
fn text_report(runs: &Runs) -> String {
    let mut t = String::new();
    let mut t_lines = String::new();
    t.push_str(&format!(
        "\n{:<36} {:>10} {:>9} {:>9} {:>10} {:>9} {:>9} {:>7}\n",
        "setup", "sets/s", "set p50", "set p99", "gets/s", "get p50", "get p99", "failed"
    ));
    t.push_str(&format!(
        "{:<36} {:>10} {:>9} {:>9} {:>10} {:>9} {:>9} {:>7}\n",
        "", "", "µs", "µs", "", "µs", "µs", ""
    ));
    for (_, r) in &runs.results {
        t.push_str(&format!(
            "{:<36} {:>10.0} {:>9} {:>9} {:>10.0} {:>9} {:>9} {:>7}\n",
            r.setup,
            r.sets.per_sec,
            us(r.sets.p50_ns),
            us(r.sets.p99_ns),
            r.gets.per_sec,
            us(r.gets.p50_ns),
            us(r.gets.p99_ns),
            r.sets.failed + r.gets.failed
        ));
    }
    if let (Some(tr), Some(q)) = (runs.find("tree"), runs.find("sequential")) {
        t.push_str(&format!(
            "\ntree vs sequential sending: set throughput {:.2}x, set p50 {:.2}x, set p99 {:.2}x\n",
            tr.sets.per_sec / q.sets.per_sec.max(1e-9),
            tr.sets.p50_ns as f64 / q.sets.p50_ns.max(1) as f64,
            tr.sets.p99_ns as f64 / q.sets.p99_ns.max(1) as f64
        ));
    }
    if let (Some(tr), Some(q)) = (runs.find("tree"), runs.find("raft")) {
        t.push_str(&format!(
            "tree vs raft: set throughput {:.2}x, set p50 {:.2}x, get throughput {:.2}x\n",
            tr.sets.per_sec / q.sets.per_sec.max(1e-9),
            tr.sets.p50_ns as f64 / q.sets.p50_ns.max(1) as f64,
            tr.gets.per_sec / q.gets.per_sec.max(1e-9)
        ));
    }
    for (s, r) in &runs.results {
        for (t, x) in &r.crashed {
            t_crash_line(&mut t_lines, s.role, *t, *x, r);
        }
    }
    t.push_str(&t_lines);
    let logs_ok = runs
        .results
        .iter()
        .all(|(_, r)| r.report.check_logs().is_ok());
    t.push_str(&format!(
        "replica logs identical after each run: {}\n",
        if logs_ok { "yes" } else { "NO" }
    ));
    if let Some((p, n)) = &runs.history_written {
        t.push_str(&format!("history: {n} operations in {}\n", p.display()));
    }
    match &runs.check_result {
        Some(Ok(s)) => t.push_str(&format!(
            "linearizable: yes ({} operations on {} keys; {} incomplete left out)\n",
            s.ops, s.keys, s.left_out
        )),
        Some(Err(e)) => t.push_str(&format!("linearizable: NO: {e}\n")),
        None => {}
    }
    t
}
