//! The report of `smelt bench collectives`: its data (serialised as `--json`), the human table, and
//! the CSV in the layout of the Smelt machine database's `ab-bench.csv`.

use serde::Serialize;
use smelt_probe::figure::{Metric, PeerResult, Status};
use smelt_tree::stats::Summary;
use std::fmt::Write as _;

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// "smelt VERSION".
    pub tool: String,
    /// RFC 3339 date of the run.
    pub date: String,
    /// Host name.
    pub host: String,
    /// CPU model string.
    pub cpu_model: String,
    /// Where the model came from (a path, or `probe --quick`).
    pub model: String,
    /// OS CPU ids used.
    pub cpus: Vec<u32>,
    /// Members of every collective group (threads).
    pub members: usize,
    /// Measurement rounds per collective figure.
    pub rounds: usize,
    /// Whether `--quick` was given.
    pub quick: bool,
    /// The raw cache-line floor over the whole run.
    pub floor: FloorInfo,
    /// smelt's collectives over every topology.
    pub collectives: Vec<Collective>,
    /// Transport figures: smelt's queuepair, the floor and the channel peers.
    pub transport: Vec<Figure>,
    /// Collective figures of smelt and of the peers at the peer thread counts.
    pub peers: Vec<Figure>,
    /// The ratios the run was made for (same run, so drift cancels).
    pub ratios: Vec<Ratio>,
    /// Warnings about the run (e.g. an unoptimised build).
    pub warnings: Vec<String>,
    /// The run's time limit was reached: the figures not measured by then are left
    /// out (the first warning says so).
    #[serde(skip)]
    pub cut_short: bool,
}

/// The floor: one-way cache-line latency with plain atomics, measured right before
/// and after every figure.
#[derive(Debug, Clone, Serialize)]
pub struct FloorInfo {
    /// The two CPUs bouncing the line.
    pub cpus: [u32; 2],
    /// Median of all floor measurements of the run, ns.
    pub median_ns: f64,
    /// Smallest floor measured, ns.
    pub min_ns: f64,
    /// Largest floor measured, ns.
    pub max_ns: f64,
    /// Number of floor measurements.
    pub probes: usize,
}

/// One topology × operation figure.
#[derive(Debug, Clone, Serialize)]
pub struct Collective {
    /// Topology name (`smelt tree --algo` spelling).
    pub topology: String,
    /// Operation: `broadcast`, `reduce`, `barrier`, `2pc`.
    pub op: String,
    /// Group size.
    pub members: usize,
    /// The tree ran flat (`GroupConfig::flatten_oversubscribed`, more members than
    /// CPUs); the topology name then ends in `(flattened: oversubscribed)`.
    pub flattened: bool,
    /// The measured time per operation, ns (robust summary over rounds), or why not.
    #[serde(flatten)]
    pub status: Status,
    /// The simulator's prediction from the model, ns.
    pub predicted_ns: Option<f64>,
    /// Floor measured right before and after, ns (mean of the two).
    pub floor_ns: Option<f64>,
    /// measured median / floor.
    pub vs_floor: Option<f64>,
}

/// One transport or peer figure with its floor.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    /// The measurement.
    #[serde(flatten)]
    pub peer: PeerResult,
    /// Floor measured right before and after, ns (mean of the two).
    pub floor_ns: Option<f64>,
    /// median / floor.
    pub vs_floor: Option<f64>,
    /// smelt's figure ran its tree flat (more threads than CPUs; the name says
    /// `flattened: oversubscribed`); false for every other figure.
    pub flattened: bool,
    /// `"threads"` (members are threads of one process) or `"processes"` (smelt's
    /// process members, and Open MPI's ranks).
    pub mode: &'static str,
    /// smelt's headline rows: what `auto` (the default) picked and where from; the
    /// name says the algorithm too (`smelt (auto: dissemination)`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto: Option<super::smelt::AutoPick>,
    /// The median of each round of an interleaved measurement, ns, in round order
    /// (the figure is their median; a ratio between two figures of one set is the
    /// median of the per-round ratios). Empty for a figure measured once.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<f64>,
}

/// A ratio between two figures of the same run.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    /// What is compared, e.g. `qp latency / floor`.
    pub what: String,
    /// The ratio of the medians.
    pub value: f64,
    /// The same ratio after dividing each figure by the cache-line floor measured
    /// right around it: on a VM whose core-to-core latency drifts during the run,
    /// this is the comparison that survives the drift.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_floor: Option<f64>,
    /// The figures it came from.
    pub detail: String,
}

fn fmt_ns(ns: f64) -> String {
    if !ns.is_finite() {
        "-".into()
    } else if ns >= 10_000.0 {
        format!("{:.1} µs", ns / 1000.0)
    } else if ns >= 1000.0 {
        format!("{:.2} µs", ns / 1000.0)
    } else {
        format!("{ns:.1} ns")
    }
}

fn metric_name(m: Metric) -> &'static str {
    match m {
        Metric::Latency => "one-way latency",
        Metric::Throughput => "streaming (ns/message)",
        Metric::Barrier => "barrier",
        Metric::Broadcast => "broadcast",
        Metric::Reduce => "reduce",
    }
}

fn status_text(s: &Status) -> String {
    match s {
        Status::Ok { ns } => format!("{} ± {}", fmt_ns(ns.median), fmt_ns(ns.mad)),
        Status::Skipped { reason } => format!("skipped ({reason})"),
        Status::Failed { reason } => format!("FAILED ({reason})"),
    }
}

/// A section of transport or peer figures, grouped by metric and thread count.
fn section(o: &mut String, title: &str, figs: &[Figure]) {
    if figs.is_empty() {
        return;
    }
    let _ = writeln!(o, "{title}");
    let nw = figs
        .iter()
        .map(|f| f.peer.name.len())
        .max()
        .unwrap_or(0)
        .max(34);
    let mut last = None;
    for f in figs {
        let key = (f.peer.metric, f.peer.threads);
        if last != Some(key) {
            let _ = writeln!(
                o,
                "  {} ({} threads):",
                metric_name(f.peer.metric),
                f.peer.threads
            );
            last = Some(key);
        }
        let _ = writeln!(
            o,
            "    {:<nw$} {:<28} {}",
            f.peer.name,
            status_text(&f.peer.status),
            f.vs_floor
                .map(|v| format!("{v:.2}x floor"))
                .unwrap_or_default()
        );
    }
    o.push('\n');
}

impl Report {
    /// The human-readable report.
    pub fn to_table(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "smelt bench on {} ({}), CPUs {}, {} members, model: {}{}",
            self.host,
            self.cpu_model,
            smelt_model::format_cpu_list(&self.cpus),
            self.members,
            self.model,
            if self.quick { ", --quick" } else { "" }
        );
        let _ = writeln!(
            o,
            "floor = raw cache-line one-way latency CPU {} <-> CPU {}: median {} over {} probes (range {} .. {}); ratios below use the floor taken right before/after each figure\n",
            self.floor.cpus[0],
            self.floor.cpus[1],
            fmt_ns(self.floor.median_ns),
            self.floor.probes,
            fmt_ns(self.floor.min_ns),
            fmt_ns(self.floor.max_ns)
        );
        self.collectives_table(&mut o);
        section(&mut o, "Transport", &self.transport);
        section(&mut o, "Collectives vs peers", &self.peers);
        for w in &self.warnings {
            let _ = writeln!(o, "warning: {w}");
        }
        if !self.ratios.is_empty() {
            let _ = writeln!(
                o,
                "Ratios (same run)                                          raw  per floor"
            );
            for r in &self.ratios {
                let pf = r
                    .per_floor
                    .map(|v| format!("{v:>7.2}x"))
                    .unwrap_or_else(|| format!("{:>8}", "-"));
                let _ = writeln!(o, "  {:<52} {:>7.2}x  {pf}   {}", r.what, r.value, r.detail);
            }
        }
        o
    }

    /// The topology table: per topology and operation, the median, the prediction and
    /// the ratio to the floor.
    fn collectives_table(&self, o: &mut String) {
        if self.collectives.is_empty() {
            return;
        }
        let mut ops: Vec<&str> = Vec::new();
        for c in &self.collectives {
            if !ops.contains(&c.op.as_str()) {
                ops.push(&c.op);
            }
        }
        let mut tops: Vec<&str> = Vec::new();
        for c in &self.collectives {
            if !tops.contains(&c.topology.as_str()) {
                tops.push(&c.topology);
            }
        }
        let _ = writeln!(
            o,
            "Collectives, {} members: measured median (predicted by the simulator) [x floor]",
            self.members
        );
        let tw = tops.iter().map(|t| t.len()).max().unwrap_or(0).max(18);
        let _ = write!(o, "{:<tw$}", "topology");
        for op in &ops {
            let _ = write!(o, " {op:<32}");
        }
        o.push('\n');
        for t in &tops {
            let _ = write!(o, "{t:<tw$}");
            for op in &ops {
                let cell = self
                    .collectives
                    .iter()
                    .find(|c| c.topology == *t && c.op == *op)
                    .map(|c| match &c.status {
                        Status::Ok { ns } => format!(
                            "{} ({}) [{:.1}x]",
                            fmt_ns(ns.median),
                            c.predicted_ns.map(fmt_ns).unwrap_or_else(|| "-".into()),
                            c.vs_floor.unwrap_or(f64::NAN)
                        ),
                        Status::Skipped { reason } => format!("skipped: {reason}"),
                        Status::Failed { reason } => format!("FAILED: {reason}"),
                    })
                    .unwrap_or_default();
                let _ = write!(o, " {cell:<32}");
            }
            o.push('\n');
        }
        o.push('\n');
    }

    /// CSV in the layout of the Smelt machine database's `ab-bench.csv`: rows
    /// `barriers`, `reduction`, `ab` (broadcast), `agreement` (2pc); a column and a
    /// `_stderr` column per topology; values in µs. Operations not measured are left out,
    /// and so are the non-tree rows (the database's columns are trees).
    pub fn to_csv(&self) -> String {
        let mut tops: Vec<&str> = Vec::new();
        for c in &self.collectives {
            if c.topology.parse::<smelt_tree::NonTree>().is_ok() {
                continue;
            }
            if !tops.contains(&c.topology.as_str()) {
                tops.push(&c.topology);
            }
        }
        let mut o = String::from("algorithm");
        for t in &tops {
            let name = machinedb_name(t);
            let _ = write!(o, ",{name},{name}_stderr");
        }
        o.push('\n');
        for (row, op) in [
            ("barriers", "barrier"),
            ("reduction", "reduce"),
            ("ab", "broadcast"),
            ("agreement", "2pc"),
        ] {
            if !self.collectives.iter().any(|c| c.op == op) {
                continue;
            }
            o.push_str(row);
            for t in &tops {
                match self
                    .collectives
                    .iter()
                    .find(|c| c.topology == *t && c.op == op)
                    .map(|c| &c.status)
                {
                    Some(Status::Ok { ns }) => {
                        let _ = write!(o, ",{:.6},{:.6}", ns.median / 1000.0, stderr(ns) / 1000.0);
                    }
                    _ => o.push_str(",,"),
                }
            }
            o.push('\n');
        }
        o
    }
}

fn stderr(s: &Summary) -> f64 {
    s.stderr()
}

/// Column names of the Smelt machine database for the topologies it has.
pub fn machinedb_name(t: &str) -> &str {
    match t {
        "binary" => "bintree",
        "bad" => "badtree",
        "adaptive" => "AT",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(m: f64) -> Summary {
        Summary {
            median: m,
            mad: 1.0,
            p10: m - 1.0,
            p90: m + 1.0,
            min: m - 2.0,
            max: m + 2.0,
            n: 9,
            rejected: 0,
        }
    }

    fn report() -> Report {
        let col = |t: &str, op: &str, m: f64| Collective {
            topology: t.into(),
            op: op.into(),
            members: 2,
            flattened: false,
            status: Status::Ok { ns: summary(m) },
            predicted_ns: Some(m / 2.0),
            floor_ns: Some(50.0),
            vs_floor: Some(m / 50.0),
        };
        Report {
            tool: "smelt test".into(),
            date: "2026-01-01T00:00:00Z".into(),
            host: "h".into(),
            cpu_model: "c".into(),
            model: "m.json".into(),
            cpus: vec![0, 1],
            members: 2,
            rounds: 10,
            quick: true,
            floor: FloorInfo {
                cpus: [0, 1],
                median_ns: 50.0,
                min_ns: 40.0,
                max_ns: 60.0,
                probes: 4,
            },
            collectives: vec![
                col("binary", "barrier", 2000.0),
                col("adaptive", "barrier", 1500.0),
                col("binary", "broadcast", 500.0),
            ],
            transport: vec![],
            peers: vec![Figure {
                peer: PeerResult {
                    name: "mpi_barrier (Open MPI)".into(),
                    metric: Metric::Barrier,
                    threads: 2,
                    status: Status::Skipped {
                        reason: "no mpicc".into(),
                    },
                },
                floor_ns: None,
                vs_floor: None,
                mode: "processes",
                auto: None,
                flattened: false,
                rounds: Vec::new(),
            }],
            ratios: vec![],
            warnings: vec![],
            cut_short: false,
        }
    }

    #[test]
    fn csv_has_the_machinedb_layout() {
        let csv = report().to_csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[0], "algorithm,bintree,bintree_stderr,AT,AT_stderr");
        assert!(lines[1].starts_with("barriers,2.000000,"), "{csv}");
        assert!(lines[2].starts_with("ab,0.500000,"), "{csv}");
        assert!(lines[2].ends_with(",,"), "{csv}");
        assert_eq!(lines.len(), 3);
    }

    #[test]
    fn table_and_json_name_everything() {
        let r = report();
        let t = r.to_table();
        assert!(
            t.contains("adaptive") && t.contains("skipped (no mpicc)"),
            "{t}"
        );
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["collectives"][0]["status"], "ok");
        assert_eq!(j["peers"][0]["status"], "skipped");
        assert_eq!(j["peers"][0]["reason"], "no mpicc");
    }
}
