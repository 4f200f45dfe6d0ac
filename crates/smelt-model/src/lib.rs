//! The machine model: which CPUs exist, how they group (hwloc vocabulary: `Package`,
//! `NUMANode`, `L3Cache`, `L2Cache`, `Core`), and the measured cost of sending to and
//! receiving from every other CPU (the Smelt paper's `t_send` / `t_receive`, §3.1–3.2).
//!
//! The model is plain data. It knows nothing of trees or threads. It is stored as
//! versioned JSON (see [`Model::load`] / [`Model::save`]); every matrix is square and
//! indexed by *position* in [`Model::cpus`], never by OS CPU id.

#![forbid(unsafe_code)]

pub mod cpuset;
pub mod default_model;
pub mod files;
#[cfg(feature = "plot")]
pub mod heatmap;
pub mod host;
pub mod import;
pub mod infer;
pub mod place;
pub mod stats;
pub mod text;
#[cfg(feature = "hwloc")]
pub mod topology;

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub use cpuset::{format_cpu_list, parse_cpu_list};
pub use default_model::{default_model, ModelSource};
pub use files::{write_atomic, write_atomic_with};
pub use infer::infer_hierarchy;
/// OS CPU ids as the tree and runtime crates type them. This crate's own lists
/// (`Model::cpus`, hierarchy groups) stay plain `u32`s by design: they are the model
/// file's numbers, and every API that takes a CPU across crates takes a `CpuId`
/// (`CpuId(model.cpus[i])`).
pub use smelt_ids::CpuId;

/// The value of the `format` field of every model file.
pub const FORMAT: &str = "smelt-model";
/// The model file version this crate writes and reads.
pub const VERSION: u32 = 1;

/// The largest cost a model may hold, ns (one second per message). Real machines
/// measure a few ns to a few µs; anything near this bound is a unit or parsing
/// mistake, and keeping costs below it keeps every prediction finite.
pub const MAX_COST_NS: f64 = 1e9;

/// Errors of the model stage. Each names the file and, where known, the line.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}{}: {why}", line.map(|l| format!(":{l}")).unwrap_or_default())]
    Parse {
        path: PathBuf,
        line: Option<usize>,
        why: String,
    },
    #[error("invalid model{}: {why}", path.as_ref().map(|p| format!(" {}", p.display())).unwrap_or_default())]
    Invalid { path: Option<PathBuf>, why: String },
    #[error("invalid CPU list '{input}': {why}")]
    CpuList { input: String, why: String },
    #[error("CPU {cpu} is not {where_}")]
    UnknownCpu { cpu: u32, where_: String },
    /// An output that cannot or must not be written (same as an input, not a
    /// regular file, missing or read-only directory).
    #[error("cannot write {path}: {why}")]
    Output { path: PathBuf, why: String },
    #[error("{0}")]
    Other(String),
}

impl ModelError {
    /// The same error, naming the file `path` if it is an invalid model's that names
    /// none.
    pub fn at(self, path: impl Into<PathBuf>) -> Self {
        match self {
            ModelError::Invalid { path: None, why } => ModelError::Invalid {
                path: Some(path.into()),
                why,
            },
            e => e,
        }
    }

    /// A parse error at `path`, optionally at a 1-based `line`.
    pub fn parse(path: impl Into<PathBuf>, line: Option<usize>, why: impl Into<String>) -> Self {
        ModelError::Parse {
            path: path.into(),
            line,
            why: why.into(),
        }
    }
}

/// Where a model came from and how its numbers were obtained.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// Host name of the machine measured (or the source's name for imports).
    pub host: String,
    /// CPU model string, e.g. "Intel(R) Xeon(R) CPU E5-2690".
    pub cpu_model: String,
    /// RFC 3339 date of measurement or import.
    pub date: String,
    /// "smelt <version>".
    pub tool: String,
    /// How the costs were obtained: `probe`, `import:smelt-machinedb`,
    /// `import:core-to-core-latency`, `synthetic`.
    pub method: String,
    /// Unit of every cost matrix. Always "ns".
    pub units: String,
    /// The file or directory imported from, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// How `send` and `receive` were derived when the source did not measure them apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub derivation: Option<String>,
    /// Clock rate used to turn cycles into nanoseconds, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_ghz: Option<f64>,
    /// Free-form notes (probe parameters, filled gaps, warnings).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// One level of a hierarchy: a partition of (a subset of) the CPUs into groups.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Level {
    /// hwloc object type name: `Package`, `NUMANode`, `Die`, `L3Cache`, `L2Cache`,
    /// `Core`; inferred levels are named `Cluster1`, `Cluster2`, ... (outermost first).
    pub name: String,
    /// Groups of OS CPU ids. Every CPU of the model is in exactly one group.
    pub groups: Vec<Vec<u32>>,
}

/// A hierarchy of levels, outermost (e.g. `Package`) first, innermost (`Core`) last.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Hierarchy {
    /// Where it came from: `hwloc`, `lscpu`, `likwid`, `inferred`, `none`.
    pub source: String,
    pub levels: Vec<Level>,
}

impl Hierarchy {
    /// The level with this name, if present.
    pub fn level(&self, name: &str) -> Option<&Level> {
        self.levels.iter().find(|l| l.name == name)
    }
}

/// The machine model. See the crate docs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Model {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`VERSION`] for files this crate writes.
    pub version: u32,
    pub provenance: Provenance,
    /// OS CPU ids (hwloc PU os_index), in matrix order.
    pub cpus: Vec<u32>,
    /// Hierarchy reported by the OS / the source's topology files.
    pub hierarchy: Hierarchy,
    /// Hierarchy inferred from the measured costs, if computed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inferred_hierarchy: Option<Hierarchy>,
    /// NUMA distances as given by the OS (SLIT), indexed by NUMA node order in the
    /// `NUMANode` level, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_distances: Option<Vec<Vec<f64>>>,
    /// `send[i][j]`: ns the sender at position i is blocked per message to position j.
    pub send: Vec<Vec<f64>>,
    /// `receive[i][j]`: ns the receiver at position j needs to take an already-queued
    /// message sent by position i.
    pub receive: Vec<Vec<f64>>,
    /// Round-trip time in ns between i and j, if measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt: Option<Vec<Vec<f64>>>,
}

impl Model {
    /// A model with the given CPUs and cost matrices and an empty provenance and
    /// hierarchy; fill those in afterwards. Not validated.
    pub fn new(cpus: Vec<u32>, send: Vec<Vec<f64>>, receive: Vec<Vec<f64>>) -> Self {
        Model {
            format: FORMAT.to_string(),
            version: VERSION,
            provenance: Provenance {
                tool: format!("smelt {}", env!("CARGO_PKG_VERSION")),
                units: "ns".into(),
                ..Default::default()
            },
            cpus,
            hierarchy: Hierarchy {
                source: "none".into(),
                levels: vec![],
            },
            inferred_hierarchy: None,
            numa_distances: None,
            send,
            receive,
            rtt: None,
        }
    }

    /// Number of CPUs.
    pub fn len(&self) -> usize {
        self.cpus.len()
    }

    /// True when the model has no CPU (never true for a validated model).
    pub fn is_empty(&self) -> bool {
        self.cpus.is_empty()
    }

    /// Position of an OS CPU id in the matrices.
    pub fn position(&self, cpu: u32) -> Option<usize> {
        self.cpus.iter().position(|&c| c == cpu)
    }

    /// Positions of the given OS CPU ids; error naming the first unknown one.
    pub fn positions(&self, cpus: &[u32]) -> Result<Vec<usize>, ModelError> {
        cpus.iter()
            .map(|&c| {
                self.position(c).ok_or_else(|| ModelError::UnknownCpu {
                    cpu: c,
                    where_: format!("in the model (it has CPUs {})", format_cpu_list(&self.cpus)),
                })
            })
            .collect()
    }

    /// `t_send` from position i to position j, ns.
    #[inline]
    pub fn send(&self, i: usize, j: usize) -> f64 {
        self.send[i][j]
    }

    /// `t_receive` at position j of a message from position i, ns.
    #[inline]
    pub fn receive(&self, i: usize, j: usize) -> f64 {
        self.receive[i][j]
    }

    /// For a named level, the group index of every position (`None` if the level is
    /// absent). Looks in the OS hierarchy first, then the inferred one.
    pub fn group_ids(&self, level: &str) -> Option<Vec<usize>> {
        let lvl = self.hierarchy.level(level).or_else(|| {
            self.inferred_hierarchy
                .as_ref()
                .and_then(|h| h.level(level))
        })?;
        Some(self.group_ids_of(lvl))
    }

    /// Group index of every position in `level` (which must partition the CPUs).
    pub fn group_ids_of(&self, level: &Level) -> Vec<usize> {
        let mut ids = vec![0usize; self.len()];
        for (g, members) in level.groups.iter().enumerate() {
            for &c in members {
                if let Some(p) = self.position(c) {
                    ids[p] = g;
                }
            }
        }
        ids
    }

    /// The grouping the tree generators treat as "nodes" (the paper's NUMA nodes), as a
    /// group index per position: the OS `NUMANode` level if it has more than one group,
    /// else `Package`, else the outermost inferred level, else one node for all.
    pub fn node_ids(&self) -> Vec<usize> {
        let os = |name: &str| {
            self.hierarchy
                .level(name)
                .filter(|l| l.groups.len() > 1)
                .map(|l| self.group_ids_of(l))
        };
        os("NUMANode")
            .or_else(|| os("Package"))
            .or_else(|| {
                self.inferred_hierarchy
                    .as_ref()
                    .and_then(|h| h.levels.iter().find(|l| l.groups.len() > 1))
                    .map(|l| self.group_ids_of(l))
            })
            .unwrap_or_else(|| vec![0; self.len()])
    }

    /// A model restricted to the given OS CPU ids (in that order), with hierarchy
    /// groups filtered to them. Errors on an unknown CPU or an empty list.
    pub fn restrict(&self, cpus: &[u32]) -> Result<Model, ModelError> {
        if cpus.is_empty() {
            return Err(ModelError::Other("the CPU set is empty".into()));
        }
        let pos = self.positions(cpus)?;
        let sub = |m: &Vec<Vec<f64>>| -> Vec<Vec<f64>> {
            pos.iter()
                .map(|&i| pos.iter().map(|&j| m[i][j]).collect())
                .collect()
        };
        let filt = |h: &Hierarchy| Hierarchy {
            source: h.source.clone(),
            levels: h
                .levels
                .iter()
                .map(|l| Level {
                    name: l.name.clone(),
                    groups: l
                        .groups
                        .iter()
                        .map(|g| g.iter().copied().filter(|c| cpus.contains(c)).collect())
                        .filter(|g: &Vec<u32>| !g.is_empty())
                        .collect(),
                })
                .collect(),
        };
        let mut m = self.clone();
        m.cpus = cpus.to_vec();
        m.send = sub(&self.send);
        m.receive = sub(&self.receive);
        m.rtt = self.rtt.as_ref().map(sub);
        m.hierarchy = filt(&self.hierarchy);
        m.inferred_hierarchy = self.inferred_hierarchy.as_ref().map(filt);
        Ok(m)
    }

    /// Checks every invariant a model file must satisfy: format and version, unique
    /// CPUs, square `n×n` matrices of finite costs between 0 and [`MAX_COST_NS`],
    /// hierarchy levels that partition the CPUs. The error is [`ModelError::Invalid`]
    /// without a path ([`ModelError::at`] names the file).
    pub fn validate(&self) -> Result<(), ModelError> {
        self.why_invalid()
            .map_err(|why| ModelError::Invalid { path: None, why })
    }

    fn why_invalid(&self) -> Result<(), String> {
        if self.format != FORMAT {
            return Err(format!(
                "field 'format' is '{}', expected '{FORMAT}'",
                self.format
            ));
        }
        if self.version != VERSION {
            return Err(format!(
                "model version {} is not supported (this smelt reads version {VERSION})",
                self.version
            ));
        }
        let n = self.cpus.len();
        if n == 0 {
            return Err("the model has no CPU".into());
        }
        let mut seen = std::collections::HashSet::new();
        for &c in &self.cpus {
            if !seen.insert(c) {
                return Err(format!("CPU {c} is listed twice in 'cpus'"));
            }
        }
        let check = |name: &str, m: &Vec<Vec<f64>>| -> Result<(), String> {
            if m.len() != n {
                return Err(format!(
                    "matrix '{name}' has {} rows, expected {n} (one per CPU)",
                    m.len()
                ));
            }
            for (i, row) in m.iter().enumerate() {
                if row.len() != n {
                    return Err(format!(
                        "matrix '{name}' row {i} has {} columns, expected {n}",
                        row.len()
                    ));
                }
                for (j, &v) in row.iter().enumerate() {
                    if !v.is_finite() || !(0.0..=MAX_COST_NS).contains(&v) {
                        return Err(format!(
                            "matrix '{name}' [{i}][{j}] (CPU {} -> CPU {}) is {v:e}: costs must be finite, >= 0 and at most {MAX_COST_NS:e} ns",
                            self.cpus[i], self.cpus[j]
                        ));
                    }
                }
            }
            Ok(())
        };
        check("send", &self.send)?;
        check("receive", &self.receive)?;
        if let Some(r) = &self.rtt {
            check("rtt", r)?;
        }
        let check_h = |what: &str, h: &Hierarchy| -> Result<(), String> {
            for l in &h.levels {
                let mut count = 0;
                let mut seen = std::collections::HashSet::new();
                for g in &l.groups {
                    for &c in g {
                        if !self.cpus.contains(&c) {
                            return Err(format!(
                                "{what} level '{}' names CPU {c}, which is not in 'cpus'",
                                l.name
                            ));
                        }
                        if !seen.insert(c) {
                            return Err(format!(
                                "{what} level '{}' lists CPU {c} in two groups",
                                l.name
                            ));
                        }
                        count += 1;
                    }
                }
                if count != n {
                    return Err(format!(
                        "{what} level '{}' covers {count} of the {n} CPUs",
                        l.name
                    ));
                }
            }
            Ok(())
        };
        check_h("hierarchy", &self.hierarchy)?;
        if let Some(h) = &self.inferred_hierarchy {
            check_h("inferred_hierarchy", h)?;
        }
        Ok(())
    }

    /// Reads and validates a model file. The file must be a regular file no larger
    /// than [`files::max_input_bytes`] (64 MiB unless `SMELT_MAX_INPUT_BYTES` says
    /// otherwise).
    pub fn load(path: impl AsRef<Path>) -> Result<Model, ModelError> {
        let path = path.as_ref();
        let text = files::read_input_text(path)?;
        Self::from_json(&text, Some(path))
    }

    /// Parses and validates model JSON; `path` is used in error messages only.
    pub fn from_json(text: &str, path: Option<&Path>) -> Result<Model, ModelError> {
        let p = path
            .map(Path::to_path_buf)
            .unwrap_or_else(|| "<model>".into());
        if text.trim().is_empty() {
            return Err(ModelError::parse(p, None, "the file is empty"));
        }
        let m: Model = serde_json::from_str(text).map_err(|e| {
            ModelError::parse(p.clone(), Some(e.line()), format!("not a smelt model: {e}"))
        })?;
        m.validate().map_err(|e| e.at(p))?;
        Ok(m)
    }

    /// Pretty JSON text of the model.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a model always serializes")
    }

    /// Validates, then writes the model atomically (temporary file in the same
    /// directory, then rename), so a failure never leaves a partial file.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), ModelError> {
        let path = path.as_ref();
        self.validate().map_err(|e| e.at(path))?;
        write_atomic(path, self.to_json().as_bytes())
    }
}

/// An `n×n` cost matrix with 0 on the diagonal and `off_diagonal(i, j)` everywhere
/// else, filled row by row (so a stateful `off_diagonal`, e.g. one drawing random
/// numbers, is called in row-major order, never for `i == j`).
pub fn cost_matrix(n: usize, mut off_diagonal: impl FnMut(usize, usize) -> f64) -> Vec<Vec<f64>> {
    (0..n)
        .map(|i| {
            (0..n)
                .map(|j| if i == j { 0.0 } else { off_diagonal(i, j) })
                .collect()
        })
        .collect()
}

/// A synthetic model for tests and benchmarks: `sockets × cores_per_socket` CPUs,
/// local costs `local_send`/`local_recv`, remote costs scaled by `remote_factor`.
/// The hierarchy has `Package` and `Core` levels.
pub fn synthetic(
    sockets: usize,
    cores_per_socket: usize,
    local_send: f64,
    local_recv: f64,
    remote_factor: f64,
) -> Model {
    let n = sockets * cores_per_socket;
    let cpus: Vec<u32> = (0..n as u32).collect();
    let sock = |i: usize| i / cores_per_socket;
    let mat = |base: f64| {
        cost_matrix(n, |i, j| {
            if sock(i) == sock(j) {
                base
            } else {
                base * remote_factor
            }
        })
    };
    let mut m = Model::new(cpus, mat(local_send), mat(local_recv));
    m.provenance.method = "synthetic".into();
    m.provenance.host = format!("synthetic-{sockets}x{cores_per_socket}");
    m.hierarchy = Hierarchy {
        source: "synthetic".into(),
        levels: vec![
            Level {
                name: "Package".into(),
                groups: (0..sockets)
                    .map(|s| {
                        ((s * cores_per_socket) as u32..((s + 1) * cores_per_socket) as u32)
                            .collect()
                    })
                    .collect(),
            },
            Level {
                name: "Core".into(),
                groups: (0..n as u32).map(|c| vec![c]).collect(),
            },
        ],
    };
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_is_valid_and_round_trips() {
        let m = synthetic(2, 4, 50.0, 100.0, 3.0);
        m.validate().unwrap();
        let back = Model::from_json(&m.to_json(), None).unwrap();
        assert_eq!(back, m);
        assert_eq!(m.node_ids(), vec![0, 0, 0, 0, 1, 1, 1, 1]);
    }

    #[test]
    fn cost_matrix_has_a_zero_diagonal_and_fills_rows_in_order() {
        let mut calls = Vec::new();
        let m = cost_matrix(3, |i, j| {
            calls.push((i, j));
            (10 * i + j) as f64
        });
        assert_eq!(
            m,
            vec![
                vec![0.0, 1.0, 2.0],
                vec![10.0, 0.0, 12.0],
                vec![20.0, 21.0, 0.0]
            ]
        );
        assert_eq!(calls, [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]);
        assert!(cost_matrix(0, |_, _| 1.0).is_empty());
    }

    #[test]
    fn rejects_bad_matrices() {
        let mut m = synthetic(1, 3, 1.0, 1.0, 1.0);
        m.send[1][2] = f64::NAN;
        assert!(m.validate().unwrap_err().to_string().contains("finite"));
        let mut m = synthetic(1, 3, 1.0, 1.0, 1.0);
        m.receive.pop();
        assert!(m.validate().unwrap_err().to_string().contains("rows"));
        let mut m = synthetic(1, 3, 1.0, 1.0, 1.0);
        m.cpus[2] = 0;
        assert!(m.validate().unwrap_err().to_string().contains("twice"));
        let mut m = synthetic(1, 3, 1.0, 1.0, 1.0);
        m.send[0][1] = -1.0;
        assert!(m.validate().is_err());
    }

    #[test]
    fn restrict_keeps_costs_and_groups() {
        let m = synthetic(2, 2, 10.0, 20.0, 5.0);
        let r = m.restrict(&[3, 0]).unwrap();
        assert_eq!(r.cpus, vec![3, 0]);
        assert_eq!(r.send[0][1], 50.0);
        r.validate().unwrap();
        assert!(m.restrict(&[9]).is_err());
        assert!(m.restrict(&[]).is_err());
    }

    #[test]
    fn load_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.json");
        std::fs::write(&p, "").unwrap();
        let e = Model::load(&p).unwrap_err().to_string();
        assert!(e.contains("m.json") && e.contains("empty"), "{e}");
        std::fs::write(&p, "{\"format\": 3").unwrap();
        let e = Model::load(&p).unwrap_err().to_string();
        assert!(e.contains("m.json:1"), "{e}");
    }

    #[test]
    fn save_is_atomic_and_refuses_invalid() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.json");
        let mut m = synthetic(1, 2, 1.0, 1.0, 1.0);
        m.send[0][1] = f64::INFINITY;
        assert!(m.save(&p).is_err());
        assert!(!p.exists());
        let m = synthetic(1, 2, 1.0, 1.0, 1.0);
        m.save(&p).unwrap();
        assert_eq!(Model::load(&p).unwrap(), m);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
