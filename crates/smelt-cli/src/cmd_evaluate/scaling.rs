//! `smelt evaluate --scaling`: predicted time by group size (the paper's Figure 10).

use super::*;

pub(super) fn evaluate_scaling(
    model: &Model,
    members: &[usize],
    topos: &[Topology],
    pl: Payload,
    op: Op,
    a: &EvaluateArgs,
) -> Result<()> {
    let (as_json, plot) = (a.json, a.plot.as_deref());
    let groups = round_robin_groups(model, members);
    if groups.is_empty() {
        bail!("--scaling needs at least 2 CPUs");
    }
    // Bigger groups cost more: count progress in members simulated, not in groups.
    let work: u64 = groups.iter().map(|g| g.len() as u64).sum();
    let progress = smelt_probe::progress::Progress::new(true, work, "CPUs simulated")
        .with_label("smelt evaluate --scaling");
    let limit = Duration::from_secs_f64(a.time_limit);
    let start = std::time::Instant::now();
    let mut table: Vec<(usize, Vec<f64>)> = Vec::new();
    for g in &groups {
        if start.elapsed() >= limit {
            break;
        }
        progress.step(format!("{} CPUs", g.len()));
        let rows = evaluate_group(model, g, None, topos, pl).map_err(|e| anyhow::anyhow!("{e}"))?;
        for r in &rows {
            check_finite(&r.prediction, &format!("the {} tree", r.topology))?;
        }
        table.push((g.len(), rows.iter().map(|r| r.prediction.get(op)).collect()));
        progress.inc_by(g.len() as u64);
    }
    progress.finish();
    let cut_short = (table.len() < groups.len()).then(|| {
        format!(
            "cut short by --time-limit {}: group sizes {} to {} of {} were computed in {:.1} s, the larger ones were not (raise --time-limit for all)",
            a.time_limit,
            groups[0].len(),
            table.last().map_or(0, |t| t.0),
            groups.last().map_or(0, |g| g.len()),
            start.elapsed().as_secs_f64()
        )
    });
    if let Some(w) = &cut_short {
        crate::common::warn(w);
    }
    if table.is_empty() {
        bail!(
            "--time-limit {} s passed before the first group size was computed",
            a.time_limit
        );
    }
    if let Some(p) = plot {
        plot_scaling(model, topos, op, &table, p)?;
    }
    if as_json {
        let v: Vec<Value> = table
            .iter()
            .map(|(n, t)| {
                let mut m = Map::new();
                m.insert("cpus".into(), json!(n));
                for (tp, x) in topos.iter().zip(t) {
                    m.insert(tp.to_string(), json!(x));
                }
                Value::Object(m)
            })
            .collect();
        let out = json!({"operation": op.name(), "units": units(model), "sizes": v, "cut_short": cut_short});
        return emit(None, &(serde_json::to_string_pretty(&out)? + "\n"));
    }
    let mut s = format!(
        "Predicted {} time ({}) by group size, CPUs added round-robin over nodes\n{:>5}",
        op.name(),
        units(model),
        "cpus"
    );
    for t in topos {
        let _ = write!(s, "{:>19}", t.to_string());
    }
    s.push('\n');
    for (n, t) in &table {
        let _ = write!(s, "{n:>5}");
        for x in t {
            let _ = write!(s, "{:>19}", t1(*x));
        }
        s.push('\n');
    }
    if let Some(w) = &cut_short {
        let _ = writeln!(s, "({w})");
    }
    emit(None, &s)
}

/// `--plot`: each topology's predicted time against the group size.
fn plot_scaling(
    model: &Model,
    topos: &[Topology],
    op: Op,
    table: &[(usize, Vec<f64>)],
    p: &Path,
) -> Result<()> {
    let chart = LineChart {
        title: format!(
            "{}: predicted {} time by group size",
            model.provenance.host,
            op.name()
        ),
        x_label: "CPUs (round-robin over nodes)".into(),
        y_label: units(model),
        x: table.iter().map(|(n, _)| *n as f64).collect(),
        series: topos
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), table.iter().map(|(_, v)| v[i]).collect()))
            .collect(),
    };
    render_lines(&chart, p).map_err(|e| anyhow::anyhow!("--plot: {e}"))
}
