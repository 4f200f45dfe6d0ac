//! `smelt kvs --model FILE --simulate`: the store's set throughput and response
//! time predicted on a modelled machine (smelt_bench::kvs::sim) for several replica and
//! client counts, smelt's tree vs sequential sending vs the plain atomic broadcast.

use crate::cmd_kvs::KvsArgs;
use anyhow::{bail, Context as _, Result};
use serde_json::{json, Value};
use smelt_bench::kvs::sim::{self, SimConfig, SimResult};
use smelt_model::import::{import, ImportOptions};
use smelt_model::Model;
use std::io::Write as _;
use std::path::Path;

/// A model file, or anything `smelt import` reads (a machine database directory, a
/// core-to-core-latency `.csv`), imported on the fly.
pub fn load_model(path: &Path) -> Result<Model> {
    let importable = path.is_dir()
        || path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
    let m = if importable {
        import(path, &ImportOptions::default())
    } else {
        Model::load(path)
    };
    m.map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("--model {}", path.display()))
}

fn us(ns: f64) -> String {
    if ns.is_finite() {
        format!("{:.2}", ns / 1000.0)
    } else {
        "-".into()
    }
}

fn row_json(setup: &str, r: &SimResult) -> Value {
    let mut v = serde_json::to_value(r).unwrap_or(Value::Null);
    if let Value::Object(o) = &mut v {
        o.insert("setup".into(), json!(setup));
    }
    v
}

/// Tree over sequential sending for one replica and client count.
/// A simulated row: the setup's name and its figures.
type Row = (String, SimResult);

struct Ratio {
    replicas: usize,
    clients: usize,
    throughput: f64,
    mean: f64,
    p50: f64,
}

pub fn run(a: &KvsArgs) -> Result<()> {
    let Some(path) = &a.model else {
        bail!("--simulate needs --model FILE (a model file, or a file smelt import reads)");
    };
    let model = load_model(path)?;
    let (protocol, tree) = crate::cmd_kvs::protocol_and_tree(a)?;
    let setups = sim_setups(a, protocol, tree)?;
    if a.get_ratio >= 1.0 {
        bail!("--get-ratio {}: the simulation predicts sets, so some operations must be sets (below 1)", a.get_ratio);
    }
    let replica_counts = replica_counts(a, &model, path)?;
    let mut nodes = model.node_ids();
    nodes.sort_unstable();
    nodes.dedup();
    let (rows, ratios) = simulate(a, &model, &setups, &replica_counts, (protocol, tree))?;
    let cpus = model.len();
    if a.json {
        let out = json!({
            "simulated": true,
            "model": path.display().to_string(),
            "cpus": cpus,
            "nodes": nodes.len(),
            "protocol": protocol.name(),
            "tree": tree.to_string(),
            "get_ratio": a.get_ratio,
            "keys": a.keys,
            "key_len": a.key_len,
            "value_len": a.value_len,
            "seed": a.seed,
            "unit": "ns",
            "rows": rows.iter().map(|(s, r)| row_json(s, r)).collect::<Vec<_>>(),
            "ratios": ratios.iter().map(|x| json!({
                "replicas": x.replicas,
                "clients": x.clients,
                "set_throughput_tree_over_sequential": x.throughput,
                "set_mean_tree_over_sequential": x.mean,
                "set_p50_tree_over_sequential": x.p50,
            })).collect::<Vec<_>>(),
        });
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    let head = format!(
        "smelt kvs --simulate: {} ({cpus} CPUs, {} nodes), {} over {}, {:.0}% gets, {} keys\n\
         predicted by a discrete-event simulation of the model's send/receive costs \
         (replicas one per node in turn, clients beside their replica)\n\n",
        path.display(),
        nodes.len(),
        protocol.name(),
        tree,
        a.get_ratio * 100.0,
        a.keys
    );
    crate::common::print_text(&(head + &table(&rows, &ratios)));
    Ok(())
}

/// `--setups` of the simulation (raft is not simulated: left out with a warning).
fn sim_setups(
    a: &KvsArgs,
    protocol: smelt_kvs::Protocol,
    tree: smelt_tree::Topology,
) -> Result<Vec<sim::Setup>> {
    let all = sim::setups(protocol, tree);
    let mut setups = Vec::new();
    let mut raft_asked = false;
    for s in &a.setups {
        let s = s.trim().to_ascii_lowercase();
        if s == "raft" {
            raft_asked = true;
            continue;
        }
        let Some(x) = all.iter().find(|x| x.name == s) else {
            bail!("--setups: unknown setup '{s}' (known: tree, sequential, broadcast, raft)");
        };
        if setups.iter().any(|y: &sim::Setup| y.name == x.name) {
            bail!("--setups: '{s}' is listed twice");
        }
        setups.push(*x);
    }
    if setups.is_empty() {
        bail!("--setups: nothing to simulate (the simulated setups are tree, sequential, broadcast; raft is not simulated)");
    }
    if raft_asked && a.setups.len() < 4 {
        crate::common::warn("--setups raft: the Raft store is not simulated; left out");
    }
    Ok(setups)
}

/// `--replicas` (default: the model's), each at most one per CPU.
fn replica_counts(a: &KvsArgs, model: &Model, path: &Path) -> Result<Vec<usize>> {
    let cpus = model.len();
    let replica_counts = if a.replicas.is_empty() {
        sim::default_replica_counts(model)
    } else {
        a.replicas.clone()
    };
    for &r in &replica_counts {
        if r > cpus {
            bail!(
                "--replicas {r}: the machine of {} has {cpus} CPUs (at most one replica per CPU)",
                path.display()
            );
        }
    }
    Ok(replica_counts)
}

/// Simulates every setup for every replica count and client count: the rows, and the
/// tree over sequential sending where both ran.
fn simulate(
    a: &KvsArgs,
    model: &Model,
    setups: &[sim::Setup],
    replica_counts: &[usize],
    (protocol, tree): (smelt_kvs::Protocol, smelt_tree::Topology),
) -> Result<(Vec<Row>, Vec<Ratio>)> {
    let mut rows: Vec<Row> = Vec::new();
    let mut ratios = Vec::new();
    for &r in replica_counts {
        let clients: Vec<usize> = if a.clients.is_empty() {
            vec![2 * r]
        } else {
            a.clients.clone()
        };
        for m in clients {
            let mut base = SimConfig::new(r, m);
            base.protocol = protocol;
            base.topology = tree;
            base.get_ratio = a.get_ratio;
            base.keys = a.keys as u64;
            base.key_len = a.key_len;
            base.value_len = a.value_len;
            base.seed = a.seed;
            let mut here: Vec<Row> = Vec::new();
            for s in setups {
                let mut c = base.clone();
                c.protocol = s.protocol;
                c.topology = s.topology;
                let res = sim::simulate(model, &c)
                    .map_err(|e| anyhow::anyhow!("{} replicas, {m} clients, {}: {e}", r, s.name))?;
                here.push((s.name.to_string(), res));
            }
            let find = |n: &str| here.iter().find(|x| x.0 == n).map(|x| &x.1);
            if let (Some(t), Some(q)) = (find("tree"), find("sequential")) {
                ratios.push(Ratio {
                    replicas: r,
                    clients: m,
                    throughput: t.set_per_sec / q.set_per_sec,
                    mean: t.set_mean_ns / q.set_mean_ns,
                    p50: t.set_p50_ns / q.set_p50_ns,
                });
            }
            rows.extend(here);
        }
    }
    Ok((rows, ratios))
}

/// The table of the simulated rows and ratios.
fn table(rows: &[Row], ratios: &[Ratio]) -> String {
    let mut t = String::new();
    t.push_str(&format!(
        "{:>8} {:>7} {:<11} {:>12} {:>10} {:>10} {:>10} {:>12} {:>6}\n",
        "replicas",
        "clients",
        "setup",
        "sets/s",
        "set mean",
        "set p50",
        "set p99",
        "gets/s",
        "fanout"
    ));
    t.push_str(&format!(
        "{:>8} {:>7} {:<11} {:>12} {:>10} {:>10} {:>10} {:>12} {:>6}\n",
        "", "", "", "", "µs", "µs", "µs", "", ""
    ));
    for (s, r) in rows {
        t.push_str(&format!(
            "{:>8} {:>7} {:<11} {:>12.0} {:>10} {:>10} {:>10} {:>12.0} {:>6}\n",
            r.replicas,
            r.clients,
            s,
            r.set_per_sec,
            us(r.set_mean_ns),
            us(r.set_p50_ns),
            us(r.set_p99_ns),
            r.get_per_sec,
            r.max_fanout
        ));
    }
    if !ratios.is_empty() {
        t.push_str(&format!(
            "\ntree vs sequential sending\n{:>8} {:>7} {:>15} {:>14} {:>13}\n",
            "replicas", "clients", "set throughput", "set mean time", "set p50 time"
        ));
        for x in ratios {
            t.push_str(&format!(
                "{:>8} {:>7} {:>14.2}x {:>13.2}x {:>12.2}x\n",
                x.replicas, x.clients, x.throughput, x.mean, x.p50
            ));
        }
    }
    t
}
