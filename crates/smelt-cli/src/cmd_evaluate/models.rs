//! `smelt evaluate --models DIR`: every machine of a directory (the paper's Figure 9).

use super::*;

pub(super) fn evaluate_models(
    dir: &Path,
    a: &EvaluateArgs,
    topos: &[Topology],
    pl: Payload,
    op: Op,
) -> Result<()> {
    if a.model.is_some() || a.scaling || a.optimum || a.cpus.is_some() || a.root.is_some() {
        bail!("--models compares whole machines; it takes no --model, --cpus, --root, --scaling or --optimum");
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("{}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("json"))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        bail!(
            "{}: no model JSON files (*.json) in this directory",
            dir.display()
        );
    }
    let smelt: Vec<Topology> = topos.iter().copied().filter(|t| !t.is_static()).collect();
    if smelt.is_empty() || smelt.len() == topos.len() {
        bail!("--algos must name at least one static and one smelt (adaptive*/optimized) topology");
    }
    let machines = evaluate_machines(&files, topos, &smelt, pl)?;
    if let Some(plot) = &a.plot {
        plot_machines(&machines, &smelt, op, plot)?;
    }
    if a.json {
        return emit(
            None,
            &(serde_json::to_string_pretty(&machines_json(&machines, &smelt))? + "\n"),
        );
    }
    emit(None, &machines_text(&machines, &smelt))
}

/// One machine of the directory: name, CPUs, the best static tree per operation,
/// and each smelt topology's speedup over it per operation.
type Machine = (String, usize, Vec<String>, Vec<Vec<f64>>);

/// Every model file's machine, evaluated.
fn evaluate_machines(
    files: &[PathBuf],
    topos: &[Topology],
    smelt: &[Topology],
    pl: Payload,
) -> Result<Vec<Machine>> {
    let mut machines = Vec::new();
    for f in files {
        let m = load(f)?;
        let all: Vec<usize> = (0..m.len()).collect();
        let rows = evaluate_group(&m, &all, None, topos, pl)
            .map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?;
        let name = f
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let best: Vec<String> = Op::SIMULATED
            .iter()
            .map(|&o| {
                best_static(&rows, o)
                    .map(|b| b.topology.to_string())
                    .unwrap_or_default()
            })
            .collect();
        let sp: Vec<Vec<f64>> = smelt
            .iter()
            .map(|t| {
                let r = rows
                    .iter()
                    .find(|r| r.topology == TreeSource::Generated(*t))
                    .expect("evaluated");
                Op::SIMULATED
                    .iter()
                    .map(|&o| speedup(&rows, r, o).unwrap_or(f64::NAN))
                    .collect()
            })
            .collect();
        machines.push((name, m.len(), best, sp));
    }
    Ok(machines)
}

/// The mean over the machines of smelt topology `si`'s speedup for operation `o`.
fn mean(machines: &[Machine], si: usize, o: usize) -> f64 {
    let v: Vec<f64> = machines
        .iter()
        .map(|m| m.3[si][o])
        .filter(|x| x.is_finite())
        .collect();
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// `--plot`: `op`'s speedup per machine and smelt topology, and the mean.
fn plot_machines(machines: &[Machine], smelt: &[Topology], op: Op, plot: &Path) -> Result<()> {
    let oi = |o: Op| Op::SIMULATED.iter().position(|&x| x == o).unwrap_or(0);
    let chart = BarChart {
        title: format!("{} speedup over the best static tree", op.name()),
        y_label: "speedup".into(),
        groups: machines
            .iter()
            .map(|m| m.0.clone())
            .chain(["mean".to_string()])
            .collect(),
        series: smelt
            .iter()
            .enumerate()
            .map(|(si, t)| {
                (
                    t.to_string(),
                    machines
                        .iter()
                        .map(|m| m.3[si][oi(op)])
                        .chain([mean(machines, si, oi(op))])
                        .collect(),
                )
            })
            .collect(),
        reference: Some(1.0),
    };
    render(&chart, plot).map_err(|e| anyhow::anyhow!("--plot: {e}"))?;
    Ok(())
}

/// `--json`: every machine's figures and the mean speedups.
fn machines_json(machines: &[Machine], smelt: &[Topology]) -> Value {
    let ms: Vec<Value> = machines
        .iter()
        .map(|(name, n, best, sp)| {
            let mut b = Map::new();
            let mut s = Map::new();
            for (k, o) in Op::SIMULATED.iter().enumerate() {
                b.insert(o.name().into(), json!(best[k]));
            }
            for (si, t) in smelt.iter().enumerate() {
                let mut m = Map::new();
                for (k, o) in Op::SIMULATED.iter().enumerate() {
                    m.insert(o.name().into(), json!(sp[si][k]));
                }
                s.insert(t.to_string(), Value::Object(m));
            }
            json!({"machine": name, "cpus": n, "best_static": b, "speedup": s})
        })
        .collect();
    let mut means = Map::new();
    for (si, t) in smelt.iter().enumerate() {
        let mut m = Map::new();
        for (k, o) in Op::SIMULATED.iter().enumerate() {
            m.insert(o.name().into(), json!(mean(machines, si, k)));
        }
        means.insert(t.to_string(), Value::Object(m));
    }
    json!({"machines": ms, "mean_speedup": means})
}

/// The table: per operation, every machine's best static tree and speedups.
fn machines_text(machines: &[Machine], smelt: &[Topology]) -> String {
    let mut s = String::from(
        "Speedup of each smelt topology over the best static tree (>1 = faster), per operation\n",
    );
    for (k, o) in Op::SIMULATED.iter().enumerate() {
        let _ = write!(
            s,
            "\n[{}]\n{:<48}{:>5}{:>14}",
            o.name(),
            "machine",
            "cpus",
            "best static"
        );
        for t in smelt {
            let _ = write!(s, "{:>19}", t.to_string());
        }
        s.push('\n');
        for (name, n, best, sp) in machines {
            let _ = write!(s, "{:<48}{:>5}{:>14}", truncate(name, 47), n, best[k]);
            for row in sp {
                let _ = write!(s, "{:>19}", ratio(row[k]));
            }
            s.push('\n');
        }
        let _ = write!(s, "{:<67}", "mean");
        for si in 0..smelt.len() {
            let _ = write!(s, "{:>19}", ratio(mean(machines, si, k)));
        }
        s.push('\n');
    }
    s
}
