//! Tuning files: which tree (and fragment size) to use for each operation, group size
//! and message size on one host, measured by `smelt tune` or predicted by the
//! simulator, and the resolution of the tree `auto` from them.
//!
//! # The file
//! JSON, in the spirit of MPICH's tuning files: mode → operation → group size →
//! message sizes, each with the algorithm chosen (a name of the
//! [`GENERATORS`](crate::topology::GENERATORS) registry) and its parameters:
//!
//! ```json
//! { "format": "smelt-tuning/1", "smelt_version": "0.1.0", "host": "node7",
//!   "cpu_model": "...", "cpus": "0-15", "created": "2026-11-23T10:00:00Z",
//!   "source": "measured", "modes": ["loose"],
//!   "rules": { "loose": { "reduce": { "16": [
//!       { "bytes": 8, "algo": "knomial:4", "median_ns": 412.0,
//!         "candidates": { "binary": 530.1, "knomial:4": 412.0 } },
//!       { "bytes": 4096, "algo": "knomial:1", "segment": 768, "median_ns": 2900.0 } ] } } } }
//! ```
//!
//! A file is used only for the host it was made on (`host`, with the same CPUs and
//! CPU model as the model asked about) and by the smelt version that wrote it; any
//! other file is refused with a message saying why, and the simulator's prediction is
//! used instead ([`resolve_auto`]).
//!
//! # Lookup
//! [`TuningFile::lookup`]: the rules of the largest group size not above the group's
//! (the smallest one when all are larger), then the message size nearest to the
//! message's on a log scale (ties: the smaller). `ab` uses the broadcast's rules.
//!
//! # `SMELT_TUNE`
//! An override for one run, [`Overrides::parse`]: rules separated by `;`, the first
//! matching one wins:
//!
//! ```text
//! RULE     = SELECTOR "=" ALGO [ "," "segment=" BYTES ]
//! SELECTOR = (OP | "*") [ ":" RANGE ] [ "@" ("loose" | "strict") ]
//! RANGE    = SIZE | SIZE "-" [SIZE] | "-" SIZE        (bounds included)
//! SIZE     = digits [ "k" | "K" | "KiB" | "M" | "MiB" ]   (k = 1024)
//! ```
//!
//! e.g. `reduce:0-1024=knomial:4;bcast=binary;*:64k-=knomial:1,segment=768`.

use crate::costs::Costs;
use crate::op::Op;
use crate::sim::{self, Payload};
use crate::topology::{Algorithm, NonTree, Topology};
use crate::Error;
use serde::{Deserialize, Serialize};
use smelt_model::Model;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// The `format` field of every tuning file.
pub const FORMAT: &str = "smelt-tuning/1";
/// The environment variable of the one-run override.
pub const TUNE_ENV: &str = smelt_settings::TUNE;
/// The smelt version writing and accepting tuning files.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// Bytes of one cache line, to turn a message size into the simulator's payload.
pub const LINE_BYTES: u64 = 64;

/// The candidates `smelt tune` and the prediction of `auto` compare, by default:
/// every static tree (k-nomial radix 1 to 16), Smelt's adaptive family, `optimized`
/// (scored by the operation tuned: `optimized:OP`), and the non-tree algorithms for
/// the operations they implement (`dissemination` for the barrier,
/// `recursive-doubling`, `rabenseifner` and `ring` for the allreduce).
pub const DEFAULT_CANDIDATES: &str = "sequential,binary,fibonacci,knomial:1-16,mst,cluster,\
adaptive,adaptive-sorted,adaptive-shuffled,optimized,dissemination,recursive-doubling,rabenseifner,ring";

/// How the collectives of a tuning are synchronized (loose or strict): it lives in
/// `smelt-plan` with the runtime's other plain data.
pub use smelt_plan::SyncMode;

/// Where a tuning file's times come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// `smelt tune`: medians measured on the host.
    Measured,
    /// `smelt tune predict`: the simulator's times from a model.
    Predicted,
}

/// One message size class of one operation and group size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Message size in bytes (per member; 0 for the barrier and 2PC).
    pub bytes: u64,
    /// The algorithm chosen, as the registry names it: a tree (`knomial:4`,
    /// `adaptive-shuffled`) or a non-tree algorithm of the operation
    /// (`dissemination`, `recursive-doubling`).
    pub algo: String,
    /// Fragment size of long messages chosen (bytes), if tuned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment: Option<usize>,
    /// Median time of the choice, ns (predicted: the simulator's time).
    pub median_ns: f64,
    /// Median of every candidate compared (name, with `,segment=N` where tuned → ns).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub candidates: BTreeMap<String, f64>,
}

impl Entry {
    /// The fastest static tree among the candidates compared (ns; infinite if none
    /// was): what `auto` must never be slower than.
    pub fn best_static_ns(&self) -> f64 {
        self.candidates
            .iter()
            .filter(|(n, _)| {
                n.split(',')
                    .next()
                    .and_then(|t| t.parse::<Topology>().ok())
                    .is_some_and(|t| t.is_static())
            })
            .map(|(_, v)| *v)
            .fold(f64::INFINITY, f64::min)
    }
}

/// Rules of one mode: operation name → group size → entries by message size.
pub type ModeRules = BTreeMap<String, BTreeMap<usize, Vec<Entry>>>;

/// A tuning file (see the module documentation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TuningFile {
    /// Always [`FORMAT`].
    pub format: String,
    /// The smelt version that wrote it ([`VERSION`]).
    pub smelt_version: String,
    /// Host the rules are for (the model's host for predicted files).
    pub host: String,
    /// CPU model string of that host, if known.
    #[serde(default)]
    pub cpu_model: String,
    /// The CPUs tuned over, as a CPU list (`0-15`).
    pub cpus: String,
    /// RFC 3339 time of creation.
    pub created: String,
    /// Measured or predicted.
    pub source: Source,
    /// The modes that have rules.
    pub modes: Vec<String>,
    /// SyncMode name → [`ModeRules`].
    pub rules: BTreeMap<String, ModeRules>,
}

/// What [`TuningFile::lookup`] and [`Overrides::find`] give: an algorithm (a tree,
/// or a non-tree algorithm for the barrier or allreduce) and its fragment size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Fragment size of long messages, bytes (`None`: the runtime's default).
    pub segment: Option<usize>,
}

impl Choice {
    /// The tree, if the choice is one.
    pub fn tree(&self) -> Option<Topology> {
        self.algorithm.tree()
    }
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.algorithm)?;
        if let Some(s) = self.segment {
            write!(f, ",segment={s}")?;
        }
        Ok(())
    }
}

/// The size class at which [`auto_table`]'s prediction hands an allreduce
/// to the group's tree (the lookup takes the nearest class on a log scale, so from
/// about 1 KiB on): 64 KiB.
pub const LARGE_VECTOR: u64 = 64 << 10;

/// The size class at which [`auto_table`]'s prediction runs the loose allreduce of
/// a group of two by Rabenseifner (each member combines the half it keeps, at once;
/// between threads the halves are lent from the runtime's loan threshold, 64 KiB):
/// 256 KiB, so above 32 KiB (the geometric middle of [`PAIR_TREE`] and this class).
/// A rule of thumb, measured (docs/tune.md), not the simulator's: it models neither
/// loans nor the combine.
pub const PAIR_HALVES: u64 = 256 << 10;

/// The size class of a group of two's loose allreduce on its tree (from about 181 B
/// up to 32 KiB, where [`PAIR_HALVES`] takes over): 4 KiB.
pub const PAIR_TREE: u64 = 4 << 10;

/// The one lookup rule of size classes, [`AlgorithmTable`]'s message size syntax and
/// `SMELT_TUNE`'s grammar live in `smelt-plan` (with the table, which the runtime
/// reads without this crate); re-exported here.
pub use smelt_plan::table::{nearest_class, parse_size, rules_op, Origin, Pick, TableError};
/// The algorithm table a group looks its calls up in: `smelt_plan::AlgorithmTable`
/// (plain data, read by the runtime), filled here by [`auto_table`].
pub use smelt_plan::AlgorithmTable;

/// [`AlgorithmTable::parse`] with every algorithm's name checked against this crate's
/// registry (`smelt-plan` checks a tree's name for its syntax only): rules in
/// `SMELT_TUNE`'s syntax, the first match wins.
pub fn table_from_rules(rules: &str) -> Result<AlgorithmTable, Error> {
    table_from_rules_why(rules).map_err(Error::Tuning)
}

fn table_from_rules_why(rules: &str) -> Result<AlgorithmTable, String> {
    Ok(AlgorithmTable::from_parts(
        table_rules(Overrides::parse(rules)?.rules),
        BTreeMap::new(),
        BTreeMap::new(),
        Some(Origin::Override),
    ))
}

/// `SMELT_TUNE`'s rules as a table holds them.
fn table_rules(rules: Vec<OverrideRule>) -> Vec<smelt_plan::table::Rule<Pick>> {
    rules
        .into_iter()
        .map(|r| smelt_plan::table::Rule {
            op: r.op,
            min: r.min,
            max: r.max,
            mode: r.mode,
            algorithm: r.choice.algorithm.into(),
            segment: r.choice.segment,
        })
        .collect()
}

/// A tree of the registry, or a non-tree algorithm, as a table names it.
impl From<Algorithm> for Pick {
    fn from(a: Algorithm) -> Pick {
        match a {
            Algorithm::Tree(t) => Pick::Tree(t.to_string()),
            Algorithm::NonTree(a) => Pick::NonTree(a),
        }
    }
}

impl TuningFile {
    /// An empty file for `host` (rules added by the tuner).
    pub fn new(host: &str, cpu_model: &str, cpus: &[u32], source: Source) -> TuningFile {
        TuningFile {
            format: FORMAT.into(),
            smelt_version: VERSION.into(),
            host: host.into(),
            cpu_model: cpu_model.into(),
            cpus: smelt_model::format_cpu_list(cpus),
            created: smelt_model::host::now_rfc3339(),
            source,
            modes: Vec::new(),
            rules: BTreeMap::new(),
        }
    }

    /// Parses and checks the structure (format, names, sizes); not the host.
    pub fn from_json(text: &str) -> Result<TuningFile, Error> {
        Self::from_json_why(text).map_err(Error::Tuning)
    }

    fn from_json_why(text: &str) -> Result<TuningFile, String> {
        let f: TuningFile = serde_json::from_str(text)
            .map_err(|e| format!("not a smelt tuning file ({e}); make one with 'smelt tune'"))?;
        f.validate()?;
        Ok(f)
    }

    /// Structural checks: [`FORMAT`], [`VERSION`], known modes, operations and
    /// algorithm names, finite times, group sizes ≥ 1, at least one entry per group.
    pub fn validate(&self) -> Result<(), Error> {
        self.validate_why().map_err(Error::Tuning)
    }

    fn validate_why(&self) -> Result<(), String> {
        if self.format != FORMAT {
            return Err(format!(
                "format '{}' is not {FORMAT}; make a new one with 'smelt tune'",
                self.format
            ));
        }
        if self.smelt_version != VERSION {
            return Err(format!(
                "it was written by smelt {}, this is smelt {VERSION}; run 'smelt tune' again",
                self.smelt_version
            ));
        }
        smelt_model::parse_cpu_list(&self.cpus)
            .map_err(|e| format!("bad CPU list '{}': {e}", self.cpus))?;
        for (mode, ops) in &self.rules {
            mode.parse::<SyncMode>()?;
            for (op, groups) in ops {
                op.parse::<Op>()?;
                for (g, entries) in groups {
                    if *g == 0 {
                        return Err(format!("{mode}/{op}: group size 0"));
                    }
                    if entries.is_empty() {
                        return Err(format!("{mode}/{op}/{g}: no entries"));
                    }
                    let o: Op = op.parse()?;
                    for e in entries {
                        let a: Algorithm = e
                            .algo
                            .parse()
                            .map_err(|why| format!("{mode}/{op}/{g}/{} B: {why}", e.bytes))?;
                        a.check_op(rules_op(o))
                            .map_err(|why| format!("{mode}/{op}/{g}/{} B: {why}", e.bytes))?;
                        if a == Algorithm::Tree(Topology::Auto) {
                            return Err(format!(
                                "{mode}/{op}/{g}/{} B: 'auto' cannot be a tuned choice",
                                e.bytes
                            ));
                        }
                        if !e.median_ns.is_finite() || e.median_ns < 0.0 {
                            return Err(format!(
                                "{mode}/{op}/{g}/{} B: bad median {}",
                                e.bytes, e.median_ns
                            ));
                        }
                        if e.segment == Some(0) {
                            return Err(format!("{mode}/{op}/{g}/{} B: segment 0", e.bytes));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Loads `path` and checks it ([`TuningFile::validate`]); errors name the file.
    pub fn load(path: &Path) -> Result<TuningFile, Error> {
        Self::load_why(path).map_err(Error::Tuning)
    }

    fn load_why(path: &Path) -> Result<TuningFile, String> {
        // Bounded, non-blocking, regular files only: a FIFO, a device or a huge file
        // in the cache directory is an error, never a hang or an exhausted memory.
        let text = smelt_model::files::read_input_text(path)
            .map_err(|e| format!("cannot read tuning file: {e}"))?;
        Self::from_json(&text).map_err(|e| format!("tuning file {} refused: {e}", path.display()))
    }

    /// Checks that the file is for `model`'s machine: the same host name, CPUs and
    /// (where both know it) CPU model.
    pub fn check_machine(&self, model: &Model) -> Result<(), Error> {
        self.check_machine_why(model).map_err(Error::Tuning)
    }

    fn check_machine_why(&self, model: &Model) -> Result<(), String> {
        self.check_for(model, false)
    }

    /// As [`check_machine`](Self::check_machine), but a model of some of the file's
    /// CPUs (a model restricted to a NUMA node, a package or any subset of the tuned
    /// host, `Model::restrict`) is accepted too: what looking a rule up for a subgroup
    /// needs ([`host_file`]).
    pub fn check_covers(&self, model: &Model) -> Result<(), Error> {
        self.check_covers_why(model).map_err(Error::Tuning)
    }

    fn check_covers_why(&self, model: &Model) -> Result<(), String> {
        self.check_for(model, true)
    }

    fn check_for(&self, model: &Model, subset: bool) -> Result<(), String> {
        let host = &model.provenance.host;
        if &self.host != host {
            return Err(format!(
                "it is for host '{}', not '{host}'; run 'smelt tune' on this host",
                self.host
            ));
        }
        let cpus = smelt_model::format_cpu_list(&{
            let mut v = model.cpus.clone();
            v.sort_unstable();
            v
        });
        let covered = || {
            smelt_model::parse_cpu_list(&self.cpus)
                .is_ok_and(|mine| model.cpus.iter().all(|c| mine.contains(c)))
        };
        if self.cpus != cpus && !(subset && covered()) {
            return Err(format!(
                "it was tuned over CPUs {}, the machine has CPUs {cpus}; run 'smelt tune' again",
                self.cpus
            ));
        }
        let cm = &model.provenance.cpu_model;
        if !self.cpu_model.is_empty() && !cm.is_empty() && &self.cpu_model != cm {
            return Err(format!(
                "it is for CPU model '{}', the machine has '{cm}'",
                self.cpu_model
            ));
        }
        Ok(())
    }

    /// JSON text (pretty, with a final newline).
    pub fn to_json_string(&self) -> String {
        serde_json::to_string_pretty(self).expect("a tuning file serializes") + "\n"
    }

    /// Writes the file atomically, creating its directory.
    pub fn save(&self, path: &Path) -> Result<(), Error> {
        self.save_why(path).map_err(Error::Tuning)
    }

    fn save_why(&self, path: &Path) -> Result<(), String> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        smelt_model::write_atomic(path, self.to_json_string().as_bytes()).map_err(|e| e.to_string())
    }

    /// Sets the entry of one cell (replacing one of the same size) and records the mode.
    pub fn insert(&mut self, mode: SyncMode, op: Op, group: usize, entry: Entry) {
        if !self.modes.iter().any(|m| m == mode.name()) {
            self.modes.push(mode.name().into());
        }
        let list = self
            .rules
            .entry(mode.name().into())
            .or_default()
            .entry(op.name().into())
            .or_default()
            .entry(group)
            .or_default();
        list.retain(|e| e.bytes != entry.bytes);
        list.push(entry);
        list.sort_by_key(|e| e.bytes);
    }

    /// The entry measured for exactly this cell, if any (for `--resume`).
    pub fn cell(&self, mode: SyncMode, op: Op, group: usize, bytes: u64) -> Option<&Entry> {
        self.rules
            .get(mode.name())?
            .get(op.name())?
            .get(&group)?
            .iter()
            .find(|e| e.bytes == bytes)
    }

    /// Every cell: (mode, op, group size, entry).
    pub fn cells(&self) -> impl Iterator<Item = (SyncMode, Op, usize, &Entry)> {
        self.rules.iter().flat_map(|(m, ops)| {
            let m: SyncMode = m.parse().unwrap_or_default();
            ops.iter().flat_map(move |(o, groups)| {
                let o: Op = o.parse().unwrap_or(Op::Broadcast);
                groups
                    .iter()
                    .flat_map(move |(g, es)| es.iter().map(move |e| (m, o, *g, e)))
            })
        })
    }

    /// The entries (by message size) for `op` over a group of `group` members in
    /// `mode`: those of the largest group size not above `group` (the smallest size
    /// when all are larger), so a subgroup (a NUMA node, a package, any subset) uses
    /// the rules of the nearest tuned group at or below its size.
    pub fn group_entries(&self, mode: SyncMode, op: Op, group: usize) -> Option<&[Entry]> {
        let groups = self.rules.get(mode.name())?.get(rules_op(op).name())?;
        groups
            .range(..=group)
            .next_back()
            .or_else(|| groups.iter().next())
            .map(|(_, e)| &e[..])
    }

    /// The choice for `op` over `group` members and `bytes` per member in `mode`
    /// (nearest classes, see the module documentation); `None` when the file has no
    /// rules for that mode and operation.
    pub fn lookup(&self, mode: SyncMode, op: Op, group: usize, bytes: u64) -> Option<Choice> {
        let entries = self.group_entries(mode, op, group)?;
        let e = &entries[nearest_class(entries.iter().map(|e| e.bytes), bytes)?];
        Some(Choice {
            algorithm: e.algo.parse().ok()?,
            segment: e.segment,
        })
    }
}

/// The per-host cache path of `host`'s tuning file
/// ([`smelt_model::host::cached_tune_path`]).
pub fn cached_path(host: &str) -> Option<PathBuf> {
    smelt_model::host::cached_tune_path(host)
}

/// One rule of [`Overrides`].
#[derive(Debug, Clone, PartialEq)]
pub struct OverrideRule {
    /// The operation, or `None` for every one (`*`).
    pub op: Option<Op>,
    /// Smallest message size (bytes) included.
    pub min: u64,
    /// Largest message size included.
    pub max: u64,
    /// The mode, or `None` for both.
    pub mode: Option<SyncMode>,
    /// What to use.
    pub choice: Choice,
}

/// `SMELT_TUNE`: rules for one run (see the module documentation for the grammar).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Overrides {
    /// In order; the first matching one wins.
    pub rules: Vec<OverrideRule>,
}

impl Overrides {
    /// Parses `SMELT_TUNE`'s value (`smelt_plan::table::parse_rules`, the one
    /// grammar, with this crate's algorithm names); an empty one has no rules.
    pub fn parse(text: &str) -> Result<Overrides, Error> {
        Self::parse_why(text).map_err(Error::Tuning)
    }

    fn parse_why(text: &str) -> Result<Overrides, String> {
        let rules = smelt_plan::table::parse_rules(text, |name, op| {
            let a: Algorithm = name.parse()?;
            smelt_plan::table::check_rule_algorithm(&a.into(), op)?;
            Ok(a)
        })?;
        Ok(Overrides {
            rules: rules
                .into_iter()
                .map(|r| OverrideRule {
                    op: r.op,
                    min: r.min,
                    max: r.max,
                    mode: r.mode,
                    choice: Choice {
                        algorithm: r.algorithm,
                        segment: r.segment,
                    },
                })
                .collect(),
        })
    }

    /// `SMELT_TUNE` from the environment: `Ok(None)` when unset or empty.
    pub fn from_env() -> Result<Option<Overrides>, Error> {
        match smelt_settings::text(TUNE_ENV).map_err(|e| Error::Tuning(e.to_string()))? {
            None => Ok(None),
            Some(v) => Self::parse(&v).map(Some),
        }
    }

    /// The first rule matching the operation (`ab` matches broadcast rules too),
    /// size and mode.
    pub fn find(&self, mode: SyncMode, op: Op, bytes: u64) -> Option<Choice> {
        first_match(&self.rules, mode, op, bytes)
    }
}

/// The choice of the first rule of `rules` that matches (the one rule of `SMELT_TUNE`).
fn first_match(rules: &[OverrideRule], mode: SyncMode, op: Op, bytes: u64) -> Option<Choice> {
    rules
        .iter()
        .find(|r| {
            r.op.is_none_or(|o| o == op || o == rules_op(op))
                && (r.min..=r.max).contains(&bytes)
                && r.mode.is_none_or(|m| m == mode)
        })
        .map(|r| r.choice)
}

/// The candidates of a list (`DEFAULT_CANDIDATES` syntax: tree and non-tree names of
/// the registry, and `knomial:A-B` for a range of radices); `auto` is refused.
/// Non-tree algorithms are candidates only for the operations they implement.
pub fn parse_candidates(list: &str) -> Result<Vec<Algorithm>, Error> {
    parse_candidates_why(list).map_err(Error::Tuning)
}

fn parse_candidates_why(list: &str) -> Result<Vec<Algorithm>, String> {
    let mut out: Vec<Algorithm> = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let lower = item.to_ascii_lowercase();
        let range = lower
            .strip_prefix("knomial:")
            .and_then(|r| r.split_once('-'));
        let ts: Vec<Algorithm> = match range {
            Some((a, b)) => {
                let p = |x: &str| {
                    x.trim()
                        .parse::<u32>()
                        .ok()
                        .filter(|k| (1..=crate::topology::MAX_RADIX).contains(k))
                        .ok_or_else(|| format!("bad radix range in '{item}'"))
                };
                let (a, b) = (p(a)?, p(b)?);
                if a > b {
                    return Err(format!("empty radix range in '{item}'"));
                }
                (a..=b)
                    .map(|k| Algorithm::Tree(Topology::Knomial(k)))
                    .collect()
            }
            None => vec![item.parse::<Algorithm>()?],
        };
        for t in ts {
            if t == Algorithm::Tree(Topology::Auto) {
                return Err("'auto' is what tuning chooses for, not a candidate".into());
            }
            if !out.contains(&t) {
                out.push(t);
            }
        }
    }
    if out.is_empty() {
        return Err("no candidates".into());
    }
    Ok(out)
}

/// The candidate as used for `op`: `optimized` is scored by the operation tuned.
pub fn for_op(t: Topology, op: Op) -> Topology {
    match t {
        Topology::Optimized | Topology::OptimizedFor(_) => match rules_op(op) {
            Op::Broadcast => Topology::Optimized,
            o => Topology::OptimizedFor(o),
        },
        t => t,
    }
}

/// The default groups of a machine (positions): the whole machine, then each NUMA
/// node when there are several, then each package when there are several and they are
/// not the NUMA nodes (a package of several NUMA nodes: AMD's NPS2/NPS4, Intel's SNC);
/// a model without either (imported measurements) gets the groups of
/// [`Model::node_ids`] (its outermost inferred level), named `node<i>`. Tuning keys
/// rules by group size, so the first group of each size is measured, and a subgroup
/// is looked up by the largest tuned size at or below its own.
pub fn default_groups(model: &Model) -> Vec<(String, Vec<usize>)> {
    let n = model.len();
    let mut out = vec![("all".to_string(), (0..n).collect::<Vec<_>>())];
    let split = |ids: &[usize], prefix: &str, out: &mut Vec<(String, Vec<usize>)>| {
        let groups = ids.iter().copied().max().map_or(0, |m| m + 1);
        if groups < 2 {
            return false;
        }
        for g in 0..groups {
            let members: Vec<usize> = (0..n).filter(|&p| ids[p] == g).collect();
            if !members.is_empty() && members.len() < n {
                out.push((format!("{prefix}{g}"), members));
            }
        }
        true
    };
    let level = |name: &str| {
        model
            .hierarchy
            .level(name)
            .filter(|l| l.groups.len() > 1)
            .map(|l| model.group_ids_of(l))
    };
    let numa = level("NUMANode");
    let package = level("Package");
    let mut any = false;
    if let Some(ids) = &numa {
        any |= split(ids, "numa", &mut out);
    }
    if let Some(ids) = &package {
        if numa.as_ref() != Some(ids) {
            any |= split(ids, "package", &mut out);
        }
    }
    if !any {
        split(&model.node_ids(), "node", &mut out);
    }
    out
}

/// The simulator's payload for `bytes` per member: whole 64-byte cache lines.
pub fn payload_for(bytes: u64) -> Payload {
    Payload::lines(bytes.div_ceil(LINE_BYTES).clamp(1, u32::MAX as u64) as u32)
}

/// Predicted time of `op` over a tree in `mode`: strict adds the two barriers around
/// it.
pub fn predicted_time(
    c: &Costs,
    root: usize,
    children: &[Vec<usize>],
    op: Op,
    mode: SyncMode,
    pl: Payload,
) -> f64 {
    let t = sim::simulate(c, root, children, op, pl);
    match mode {
        SyncMode::Loose => t,
        SyncMode::Strict => {
            t + 2.0 * sim::simulate(c, root, children, Op::Barrier, Payload::default())
        }
    }
}

/// The non-tree candidates among `candidates` that implement `op`.
pub fn non_tree_candidates(candidates: &[Algorithm], op: Op) -> Vec<NonTree> {
    candidates
        .iter()
        .filter_map(|a| a.non_tree())
        .filter(|a| a.applies_to(rules_op(op)))
        .collect()
}

/// The distinct trees of `candidates` over `c` from `root` (the first name of each
/// shape is kept), for `op`; non-tree candidates are left out.
pub fn distinct_trees(
    c: &Costs,
    root: usize,
    candidates: &[Algorithm],
    op: Op,
) -> Vec<(Topology, Vec<Vec<usize>>)> {
    distinct_trees_cached(c, root, candidates, op, &mut BTreeMap::new())
}

/// [`distinct_trees`] with the trees that do not depend on the operation (all but
/// `optimized`) kept in `cache` (by name) across operations of one group.
fn distinct_trees_cached(
    c: &Costs,
    root: usize,
    candidates: &[Algorithm],
    op: Op,
    cache: &mut BTreeMap<String, Vec<Vec<usize>>>,
) -> Vec<(Topology, Vec<Vec<usize>>)> {
    let mut out: Vec<(Topology, Vec<Vec<usize>>)> = Vec::new();
    for t in candidates.iter().filter_map(|a| a.tree()) {
        let t = for_op(t, op);
        if out.iter().any(|(u, _)| *u == t) {
            continue;
        }
        let ch = cache
            .entry(t.to_string())
            .or_insert_with(|| t.children(c, root))
            .clone();
        if !out.iter().any(|(_, o)| *o == ch) {
            out.push((t, ch));
        }
    }
    out
}

/// Predicted time of a non-tree algorithm over every member of `c` in `mode`
/// ([`sim::simulate_non_tree`]); strict adds two dissemination barriers (the fences
/// around it; a constant for every non-tree candidate of a cell).
pub fn predicted_non_tree_time(c: &Costs, a: NonTree, mode: SyncMode, pl: Payload) -> f64 {
    let t = sim::simulate_non_tree(c, a, pl.scale());
    match mode {
        SyncMode::Loose => t,
        SyncMode::Strict => t + 2.0 * sim::simulate_non_tree(c, NonTree::Dissemination, 1.0),
    }
}

/// The simulator's best candidate for one cell: (algorithm, predicted time, every
/// candidate's time by name). Ties go to the earlier candidate (trees before the
/// non-tree algorithms). `Err` when no candidate runs `op`.
pub fn predict_best(
    c: &Costs,
    root: usize,
    candidates: &[Algorithm],
    op: Op,
    mode: SyncMode,
    bytes: u64,
) -> Result<(Algorithm, f64, BTreeMap<String, f64>), Error> {
    predict_best_why(c, root, candidates, op, mode, bytes).map_err(Error::Tuning)
}

fn predict_best_why(
    c: &Costs,
    root: usize,
    candidates: &[Algorithm],
    op: Op,
    mode: SyncMode,
    bytes: u64,
) -> Result<(Algorithm, f64, BTreeMap<String, f64>), String> {
    let pl = payload_for(bytes);
    let mut all = BTreeMap::new();
    let mut best: Option<(Algorithm, f64)> = None;
    let mut consider = |a: Algorithm, v: f64| {
        all.insert(a.to_string(), v);
        if best.is_none_or(|(_, b)| v < b) {
            best = Some((a, v));
        }
    };
    for (t, ch) in distinct_trees(c, root, candidates, op) {
        consider(
            Algorithm::Tree(t),
            predicted_time(c, root, &ch, op, mode, pl),
        );
    }
    for a in non_tree_candidates(candidates, op) {
        consider(
            Algorithm::NonTree(a),
            predicted_non_tree_time(c, a, mode, pl),
        );
    }
    let (t, v) = best.ok_or_else(|| format!("no candidate runs {op}"))?;
    Ok((t, v, all))
}

/// The message sizes of an operation in a tuning: those given for data-carrying
/// operations, `[0]` for the barrier and 2PC.
pub fn sizes_for(op: Op, sizes: &[u64]) -> Vec<u64> {
    if op.carries_data() {
        sizes.to_vec()
    } else {
        vec![0]
    }
}

/// Powers of two from `lo` to `hi` bytes.
pub fn powers_of_two(lo: u64, hi: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut s = lo.max(1).next_power_of_two();
    while s <= hi {
        v.push(s);
        s = match s.checked_mul(2) {
            Some(x) => x,
            None => break,
        };
    }
    v
}

/// A tuning file from the simulator (`smelt tune predict`): for every mode,
/// operation, group (rules keyed by its size; the first group of a size wins) and
/// message size, the candidate with the lowest predicted time. Trees are built once
/// per group and operation from the group's default root.
pub fn tune_predicted(
    model: &Model,
    groups: &[Vec<usize>],
    ops: &[Op],
    sizes: &[u64],
    modes: &[SyncMode],
    candidates: &[Algorithm],
) -> Result<TuningFile, Error> {
    tune_predicted_why(model, groups, ops, sizes, modes, candidates).map_err(Error::Tuning)
}

fn tune_predicted_why(
    model: &Model,
    groups: &[Vec<usize>],
    ops: &[Op],
    sizes: &[u64],
    modes: &[SyncMode],
    candidates: &[Algorithm],
) -> Result<TuningFile, String> {
    let mut cpus = model.cpus.clone();
    cpus.sort_unstable();
    let mut f = TuningFile::new(
        &model.provenance.host,
        &model.provenance.cpu_model,
        &cpus,
        Source::Predicted,
    );
    let node_ids = model.node_ids();
    let mut seen_sizes = Vec::new();
    for members in groups {
        if seen_sizes.contains(&members.len()) {
            continue;
        }
        seen_sizes.push(members.len());
        let c = Costs::with_nodes(model, members, &node_ids).map_err(|e| e.to_string())?;
        let root = c.default_root();
        let mut cache = BTreeMap::new();
        for &op in ops {
            let trees = distinct_trees_cached(&c, root, candidates, op, &mut cache);
            let non_trees = non_tree_candidates(candidates, op);
            for &mode in modes {
                // One-line times; sizes scale every send and receive alike.
                let base: Vec<(Topology, f64)> = trees
                    .iter()
                    .map(|(t, ch)| {
                        (
                            *t,
                            predicted_time(&c, root, ch, op, mode, Payload::default()),
                        )
                    })
                    .collect();
                for bytes in sizes_for(op, sizes) {
                    let pl = payload_for(bytes);
                    let mut all = BTreeMap::new();
                    let mut best: Option<(Algorithm, f64)> = None;
                    for (t, ch) in &trees {
                        let v = if pl.lines == 1 {
                            base.iter().find(|(u, _)| u == t).map_or(f64::NAN, |x| x.1)
                        } else {
                            predicted_time(&c, root, ch, op, mode, pl)
                        };
                        all.insert(t.to_string(), v);
                        if best.is_none_or(|(_, b)| v < b) {
                            best = Some((Algorithm::Tree(*t), v));
                        }
                    }
                    for &a in &non_trees {
                        let v = predicted_non_tree_time(&c, a, mode, pl);
                        all.insert(a.to_string(), v);
                        if best.is_none_or(|(_, b)| v < b) {
                            best = Some((Algorithm::NonTree(a), v));
                        }
                    }
                    let (t, v) = best.ok_or("no candidates")?;
                    f.insert(
                        mode,
                        op,
                        members.len(),
                        Entry {
                            bytes,
                            algo: t.to_string(),
                            segment: None,
                            median_ns: v,
                            candidates: all,
                        },
                    );
                }
            }
        }
    }
    Ok(f)
}

/// An `auto` resolution.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// The tree and fragment size.
    pub choice: Choice,
    /// Where it came from.
    pub origin: Origin,
    /// Why a tuning file was not used (refused: malformed, other host or version), if
    /// one was there.
    pub warning: Option<String>,
}

/// The host's tuning file for `model` (`tune-<model's host>.json` in the cache
/// directory): `Ok(None)` when there is none, `Err(why)` when one is there but
/// refused.
pub fn host_file(model: &Model) -> Result<Option<(PathBuf, TuningFile)>, Error> {
    host_file_why(model).map_err(Error::Tuning)
}

fn host_file_why(model: &Model) -> Result<Option<(PathBuf, TuningFile)>, String> {
    let Some(path) = cached_path(&model.provenance.host) else {
        return Ok(None);
    };
    if !path.exists() {
        return Ok(None);
    }
    let f = TuningFile::load(&path)?;
    f.check_covers(model)
        .map_err(|e| format!("tuning file {} refused: {e}", path.display()))?;
    Ok(Some((path, f)))
}

/// The tuning file of `host` in the per-host cache (`tune-<host>.json`, the path the
/// CLI writes), for a group on `model` when one is known (checked with
/// [`TuningFile::check_covers`]), else checked for the host name only (a caller that
/// does not know the CPUs, e.g. MPI ranks not bound to one CPU each): `Ok(None)` when
/// there is none, `Err(why)` when one is there but refused.
pub fn host_file_of(
    host: &str,
    model: Option<&Model>,
) -> Result<Option<(PathBuf, TuningFile)>, Error> {
    host_file_of_why(host, model).map_err(Error::Tuning)
}

fn host_file_of_why(
    host: &str,
    model: Option<&Model>,
) -> Result<Option<(PathBuf, TuningFile)>, String> {
    let Some(path) = cached_path(host) else {
        return Ok(None);
    };
    if !path.exists() {
        return Ok(None);
    }
    let f = TuningFile::load(&path)?;
    let checked = match model {
        Some(m) => f.check_covers_why(m),
        None if f.host != host => Err(format!(
            "it is for host '{}', not '{host}'; run 'smelt tune' on this host",
            f.host
        )),
        None => Ok(()),
    };
    checked.map_err(|e| format!("tuning file {} refused: {e}", path.display()))?;
    Ok(Some((path, f)))
}

/// Resolves the tree `auto` for `op` with `bytes` per member in `mode` over `members`
/// (positions in `model`) from `root` (default: the group's default root):
/// `SMELT_TUNE` if a rule matches, else the host's tuning file, else the simulator's
/// best candidate ([`DEFAULT_CANDIDATES`]: every static tree and smelt's, so never
/// predicted slower than the best static tree). A malformed `SMELT_TUNE` is an error;
/// a refused tuning file falls back to the prediction with a warning.
pub fn resolve_auto(
    op: Op,
    bytes: u64,
    mode: SyncMode,
    model: &Model,
    members: &[usize],
    root: Option<usize>,
) -> Result<Resolved, Error> {
    resolve_auto_why(op, bytes, mode, model, members, root).map_err(Error::Tuning)
}

fn resolve_auto_why(
    op: Op,
    bytes: u64,
    mode: SyncMode,
    model: &Model,
    members: &[usize],
    root: Option<usize>,
) -> Result<Resolved, String> {
    if let Some(o) = Overrides::from_env()? {
        if let Some(choice) = o.find(mode, op, bytes) {
            return Ok(Resolved {
                choice,
                origin: Origin::Override,
                warning: None,
            });
        }
    }
    let mut warning = None;
    match host_file(model) {
        Ok(Some((path, f))) => {
            if let Some(choice) = f.lookup(mode, op, members.len(), bytes) {
                return Ok(Resolved {
                    choice,
                    origin: Origin::File(path),
                    warning: None,
                });
            }
        }
        Ok(None) => {}
        Err(e) => warning = Some(format!("{e}; using the simulator's prediction")),
    }
    let algorithm = predict_auto(op, bytes, mode, model, members, root)?;
    Ok(Resolved {
        choice: Choice {
            algorithm,
            segment: None,
        },
        origin: Origin::Predicted,
        warning,
    })
}

/// The [`AlgorithmTable`] of `auto` over `members` (positions in `model`), as
/// [`resolve_auto`] resolves it for each call: `SMELT_TUNE`'s rules, else the host's tuning file (the rules of
/// the largest tuned group size not above the group's), else the simulator's
/// choice. The second value says why a tuning file was refused, if one was.
pub fn auto_table(
    model: &Model,
    members: &[usize],
) -> Result<(AlgorithmTable, Option<String>), Error> {
    auto_table_why(model, members).map_err(Error::Tuning)
}

fn auto_table_why(
    model: &Model,
    members: &[usize],
) -> Result<(AlgorithmTable, Option<String>), String> {
    let overrides = table_rules(Overrides::from_env()?.map(|o| o.rules).unwrap_or_default());
    let mut warning = None;
    let mut classes = BTreeMap::new();
    let mut segments = BTreeMap::new();
    let mut origin = Origin::Predicted;
    match host_file(model) {
        Ok(Some((path, f))) => {
            for mode in SyncMode::ALL {
                for op in AlgorithmTable::OPS {
                    if let Some(es) = f.group_entries(mode, op, members.len()) {
                        let v: Vec<(u64, Pick)> = es
                            .iter()
                            .filter_map(|e| {
                                Some((e.bytes, e.algo.parse::<Algorithm>().ok()?.into()))
                            })
                            .collect();
                        classes.insert((mode, op), v);
                    }
                }
                for op in AlgorithmTable::SEGMENT_OPS {
                    if let Some(es) = f.group_entries(mode, op, members.len()) {
                        if es.iter().any(|e| e.segment.is_some()) {
                            let v = es.iter().map(|e| (e.bytes, e.segment)).collect();
                            segments.insert((mode, op), v);
                        }
                    }
                }
            }
            origin = Origin::File(path);
        }
        Ok(None) => {}
        Err(e) => warning = Some(format!("{e}; using the simulator's prediction")),
    }
    // The prediction where the file has no rules: each operation's candidate trees
    // are built once for both modes (`optimized` is a local search).
    let mut costs = None;
    for op in AlgorithmTable::OPS {
        let missing: Vec<SyncMode> = SyncMode::ALL
            .into_iter()
            .filter(|m| !classes.contains_key(&(*m, op)))
            .collect();
        if missing.is_empty() {
            continue;
        }
        if costs.is_none() {
            let c = Costs::new(model, members).map_err(|e| e.to_string())?;
            let root = c.default_root();
            costs = Some((c, root, parse_candidates(DEFAULT_CANDIDATES)?));
        }
        let (c, root, cands) = costs.as_ref().expect("just set");
        let bytes = if op.carries_data() { 8 } else { 0 };
        let pl = payload_for(bytes);
        let trees = distinct_trees(c, *root, cands, op);
        for mode in missing {
            let mut best: Option<(Algorithm, f64)> = None;
            let mut consider = |a: Algorithm, v: f64| {
                if best.is_none_or(|(_, b)| v < b) {
                    best = Some((a, v));
                }
            };
            for (t, ch) in &trees {
                consider(
                    Algorithm::Tree(*t),
                    predicted_time(c, *root, ch, op, mode, pl),
                );
            }
            for a in non_tree_candidates(cands, op) {
                consider(
                    Algorithm::NonTree(a),
                    predicted_non_tree_time(c, a, mode, pl),
                );
            }
            let (a, _) = best.ok_or_else(|| format!("no candidate runs {op}"))?;
            let mut cl = vec![(bytes, a)];
            // Large vectors: the group's tree, which lends the buffer between
            // members that share memory and pipelines fragments, where the simulator
            // (one cache line per message) would keep a non-tree algorithm that
            // copies every vector through rings. Measured (docs/tune.md): at
            // 64 KiB-16 MiB between 2 threads the tree ran 2.2-3.5x Open MPI,
            // recursive doubling 0.7-1.8x.
            let big = payload_for(LARGE_VECTOR);
            let large_tree = || {
                trees
                    .iter()
                    .map(|(t, ch)| (*t, predicted_time(c, *root, ch, op, mode, big)))
                    .min_by(|x, y| x.1.total_cmp(&y.1))
                    .map(|(t, _)| Algorithm::Tree(t))
            };
            if op == Op::Allreduce && members.len() == 2 && mode == SyncMode::Loose {
                // Two members, loose: the tree from PAIR_TREE's class, Rabenseifner from
                // PAIR_HALVES's (so above 32 KiB). Each member combines half the
                // vector, both at once, where the tree's root combines all of it while
                // the other waits. (Strict calls do not lend.)
                cl.push((PAIR_TREE, large_tree().unwrap_or(a)));
                cl.push((PAIR_HALVES, Algorithm::NonTree(NonTree::Rabenseifner)));
            } else if op == Op::Allreduce && matches!(a, Algorithm::NonTree(_)) {
                if let Some(t) = large_tree() {
                    cl.push((LARGE_VECTOR, t));
                }
            }
            classes.insert(
                (mode, op),
                cl.into_iter().map(|(b, a)| (b, a.into())).collect(),
            );
        }
    }
    let origin = Some(if overrides.is_empty() {
        origin
    } else {
        Origin::Override
    });
    Ok((
        AlgorithmTable::from_parts(overrides, classes, segments, origin),
        warning,
    ))
}

/// The simulator's choice for `auto` (see [`resolve_auto`]): a tree, or for the
/// barrier and allreduce possibly a non-tree algorithm.
pub fn predict_auto(
    op: Op,
    bytes: u64,
    mode: SyncMode,
    model: &Model,
    members: &[usize],
    root: Option<usize>,
) -> Result<Algorithm, Error> {
    predict_auto_why(op, bytes, mode, model, members, root).map_err(Error::Tuning)
}

fn predict_auto_why(
    op: Op,
    bytes: u64,
    mode: SyncMode,
    model: &Model,
    members: &[usize],
    root: Option<usize>,
) -> Result<Algorithm, String> {
    let c = Costs::new(model, members).map_err(|e| e.to_string())?;
    let root = root_position(&c, members, root)?;
    let cands = parse_candidates(DEFAULT_CANDIDATES)?;
    Ok(predict_best(&c, root, &cands, op, mode, bytes)?.0)
}

/// The position of `root` (a member; None: the costs' default root) among `members`.
fn root_position(c: &Costs, members: &[usize], root: Option<usize>) -> Result<usize, String> {
    match root {
        None => Ok(c.default_root()),
        Some(r) => members
            .iter()
            .position(|&m| m == r)
            .ok_or_else(|| "the root is not one of the members".to_string()),
    }
}

/// The tree `auto` builds for `op` (see [`resolve_auto`]): the resolution's tree, or,
/// where it chose a non-tree algorithm (which runs over links beyond the group's
/// tree), the simulator's best tree for the operation: the tree a group built with
/// `auto` runs its other collectives on.
pub fn resolve_auto_tree(
    op: Op,
    bytes: u64,
    mode: SyncMode,
    model: &Model,
    members: &[usize],
    root: Option<usize>,
) -> Result<(Topology, Resolved), Error> {
    resolve_auto_tree_why(op, bytes, mode, model, members, root).map_err(Error::Tuning)
}

fn resolve_auto_tree_why(
    op: Op,
    bytes: u64,
    mode: SyncMode,
    model: &Model,
    members: &[usize],
    root: Option<usize>,
) -> Result<(Topology, Resolved), String> {
    let r = resolve_auto(op, bytes, mode, model, members, root)?;
    if let Some(t) = r.choice.tree() {
        return Ok((t, r));
    }
    let trees: Vec<Algorithm> = parse_candidates(DEFAULT_CANDIDATES)?
        .into_iter()
        .filter(|a| a.tree().is_some())
        .collect();
    let c = Costs::new(model, members).map_err(|e| e.to_string())?;
    let root = root_position(&c, members, root)?;
    let (t, _, _) = predict_best(&c, root, &trees, op, mode, bytes)?;
    Ok((t.tree().unwrap_or(Topology::AdaptiveShuffled), r))
}

/// The predicted `auto` tree over costs alone (no host, so no tuning file): the
/// registry's builder of `auto` (broadcast of one line, loose).
pub(crate) fn auto_children(c: &Costs, root: usize) -> Vec<Vec<usize>> {
    let cands = parse_candidates(DEFAULT_CANDIDATES).expect("the default candidates parse");
    // Every tree runs a broadcast, so the best one is a tree.
    let t = predict_best(c, root, &cands, Op::Broadcast, SyncMode::Loose, LINE_BYTES)
        .ok()
        .and_then(|(a, _, _)| a.tree())
        .unwrap_or(Topology::AdaptiveShuffled);
    t.children(c, root)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tables from rules: the registry checks every name (smelt-plan's own parser
    /// checks a tree's name for its syntax only); the same rules give the same table.
    #[test]
    fn tables_from_rules_check_names_against_the_registry() {
        let rules = "barrier@strict=dissemination;allreduce:0-4k=rd,segment=1k;*:64k-=chain";
        let t = table_from_rules(rules).unwrap();
        assert_eq!(
            t.lookup(SyncMode::Loose, Op::Reduce, 1 << 20),
            Some(Pick::Tree("knomial:1".into()))
        );
        assert_eq!(
            t.non_tree(SyncMode::Strict, Op::Barrier, 0),
            Some(NonTree::Dissemination)
        );
        assert_eq!(t.segment(SyncMode::Loose, Op::Allreduce, 8), Some(1024));
        assert!(AlgorithmTable::parse("reduce=gossip").is_ok());
        let e = table_from_rules("reduce=gossip").unwrap_err().to_string();
        assert!(e.contains("unknown algorithm 'gossip'"), "{e}");
        assert!(table_from_rules("reduce=knomial:0").is_err());
        assert!(table_from_rules("*=dissemination").is_err());
    }

    #[test]
    fn a_flat_oversubscribed_group_runs_the_barrier_on_its_tree() {
        let t =
            AlgorithmTable::fixed(Op::Barrier, Algorithm::NonTree(NonTree::Dissemination)).unwrap();
        assert!(t.may_use(NonTree::Dissemination));
        let f = t.for_flat_oversubscribed();
        for mode in SyncMode::ALL {
            assert_eq!(f.non_tree(mode, Op::Barrier, 0), None);
            assert_eq!(
                f.lookup(mode, Op::Barrier, 0),
                Some(Algorithm::Tree(Topology::Sequential).into())
            );
        }
        assert!(!f.may_use(NonTree::Dissemination));
        // The allreduce's picks stay; an explicit SMELT_TUNE-style rule still wins.
        let r = AlgorithmTable::parse("barrier=dissemination;allreduce=recursive-doubling")
            .unwrap()
            .for_flat_oversubscribed();
        assert_eq!(
            r.non_tree(SyncMode::Loose, Op::Barrier, 0),
            Some(NonTree::Dissemination)
        );
        assert_eq!(
            r.non_tree(SyncMode::Loose, Op::Allreduce, 8),
            Some(NonTree::RecursiveDoubling)
        );
    }

    fn model() -> Model {
        let mut m = smelt_model::synthetic(2, 4, 50.0, 40.0, 3.0);
        m.provenance.host = "testhost".into();
        m.provenance.cpu_model = "Test CPU".into();
        m
    }

    fn file() -> TuningFile {
        let m = model();
        let groups: Vec<Vec<usize>> = default_groups(&m).into_iter().map(|g| g.1).collect();
        tune_predicted(
            &m,
            &groups,
            &Op::RUN,
            &powers_of_two(8, 4096),
            &SyncMode::ALL,
            &parse_candidates(DEFAULT_CANDIDATES).unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn round_trips_and_validates() {
        let f = file();
        let text = f.to_json_string();
        let g = TuningFile::from_json(&text).unwrap();
        assert_eq!(f, g);
        assert_eq!(
            g.rules["loose"]["reduce"]
                .keys()
                .copied()
                .collect::<Vec<_>>(),
            vec![4, 8]
        );
        assert_eq!(g.rules["strict"]["barrier"][&8].len(), 1);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/tune.json");
        f.save(&p).unwrap();
        assert_eq!(TuningFile::load(&p).unwrap(), f);
        f.check_machine(&model()).unwrap();
    }

    #[test]
    fn refuses_bad_files_with_a_reason() {
        let f = file();
        let e = TuningFile::from_json("{\"format\": 3")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a smelt tuning file"), "{e}");
        let mut v = f.clone();
        v.smelt_version = "0.0.0-old".into();
        let e = TuningFile::from_json(&v.to_json_string())
            .unwrap_err()
            .to_string();
        assert!(e.contains("0.0.0-old") && e.contains(VERSION), "{e}");
        let mut v = f.clone();
        v.rules
            .get_mut("loose")
            .unwrap()
            .get_mut("reduce")
            .unwrap()
            .get_mut(&8)
            .unwrap()[0]
            .algo = "nope".into();
        let e = TuningFile::from_json(&v.to_json_string())
            .unwrap_err()
            .to_string();
        assert!(e.contains("nope"), "{e}");
        let mut other = model();
        other.provenance.host = "elsewhere".into();
        let e = f.check_machine(&other).unwrap_err().to_string();
        assert!(e.contains("testhost") && e.contains("elsewhere"), "{e}");
        let small = smelt_model::synthetic(1, 4, 50.0, 40.0, 3.0);
        let mut small = small;
        small.provenance.host = "testhost".into();
        let e = f.check_machine(&small).unwrap_err().to_string();
        assert!(e.contains("CPUs"), "{e}");
        // A model of some of the tuned CPUs (a node) is covered by the file; one with
        // CPUs the file does not know is not.
        f.check_covers(&small).unwrap();
        let mut big = smelt_model::synthetic(4, 4, 50.0, 40.0, 3.0);
        big.provenance.host = "testhost".into();
        let e = f.check_covers(&big).unwrap_err().to_string();
        assert!(e.contains("CPUs"), "{e}");
    }

    #[test]
    fn lookup_takes_the_nearest_classes() {
        let mut f = TuningFile::new("h", "", &[0, 1, 2, 3], Source::Measured);
        let e = |bytes, algo: &str| Entry {
            bytes,
            algo: algo.into(),
            segment: None,
            median_ns: 1.0,
            candidates: BTreeMap::new(),
        };
        f.insert(SyncMode::Loose, Op::Reduce, 4, e(8, "binary"));
        f.insert(SyncMode::Loose, Op::Reduce, 4, e(1024, "knomial:1"));
        f.insert(SyncMode::Loose, Op::Reduce, 16, e(8, "sequential"));
        f.insert(SyncMode::Loose, Op::Broadcast, 4, e(8, "mst"));
        let t = |g, b| {
            f.lookup(SyncMode::Loose, Op::Reduce, g, b)
                .unwrap()
                .tree()
                .unwrap()
        };
        assert_eq!(t(4, 8), Topology::Binary);
        assert_eq!(t(4, 64), Topology::Binary); // log2 distance 3 vs 4
        assert_eq!(t(4, 256), Topology::Knomial(1));
        assert_eq!(t(4, 1 << 20), Topology::Knomial(1));
        assert_eq!(t(8, 8), Topology::Binary); // largest group size not above
        assert_eq!(t(2, 8), Topology::Binary); // none below: the smallest
        assert_eq!(t(100, 8), Topology::Sequential);
        assert_eq!(
            f.lookup(SyncMode::Loose, Op::AtomicBroadcast, 4, 8)
                .unwrap()
                .tree(),
            Some(Topology::Mst)
        );
        assert!(f.lookup(SyncMode::Strict, Op::Reduce, 4, 8).is_none());
        assert!(f.lookup(SyncMode::Loose, Op::Gather, 4, 8).is_none());
    }

    #[test]
    fn overrides_parse_and_match() {
        let o = Overrides::parse(
            "reduce:0-1024=knomial:4; bcast=binary;*:64k-=knomial:1,segment=768;barrier@strict=sequential",
        )
        .unwrap();
        assert_eq!(o.rules.len(), 4);
        let f = |m, op, b| o.find(m, op, b).map(|c| c.to_string());
        assert_eq!(
            f(SyncMode::Loose, Op::Reduce, 1024).as_deref(),
            Some("knomial:4")
        );
        assert_eq!(f(SyncMode::Loose, Op::Reduce, 1025), None);
        assert_eq!(
            f(SyncMode::Loose, Op::Reduce, 65536).as_deref(),
            Some("knomial:1,segment=768")
        );
        assert_eq!(
            f(SyncMode::Strict, Op::AtomicBroadcast, 9).as_deref(),
            Some("binary")
        );
        assert_eq!(
            f(SyncMode::Strict, Op::Barrier, 0).as_deref(),
            Some("sequential")
        );
        assert_eq!(f(SyncMode::Loose, Op::Barrier, 0), None);
        assert_eq!(Overrides::parse(" ; ").unwrap().rules.len(), 0);
        for (bad, says) in [
            ("reduce", "SELECTOR=ALGO"),
            ("gossip=binary", "gossip"),
            ("reduce:x-4=binary", "'x'"),
            ("reduce:9-4=binary", "empty range"),
            ("reduce=knomial:0", "radix"),
            ("reduce=auto", "auto"),
            ("reduce=binary,seg=4", "seg=4"),
            ("reduce@fast=binary", "fast"),
            ("bcast=binary;reduce", "rule 2"),
        ] {
            let e = Overrides::parse(bad).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains(TUNE_ENV), "{bad}: {e}");
        }
    }

    #[test]
    fn candidates_parse_with_radix_ranges() {
        let c = parse_candidates(DEFAULT_CANDIDATES).unwrap();
        assert!(c.contains(&Algorithm::Tree(Topology::Knomial(1))));
        assert!(c.contains(&Algorithm::NonTree(NonTree::Dissemination)));
        assert!(c.contains(&Algorithm::Tree(Topology::Knomial(16))));
        assert!(c.contains(&Algorithm::NonTree(NonTree::Rabenseifner)));
        assert!(c.contains(&Algorithm::NonTree(NonTree::Ring)));
        assert_eq!(c.len(), 4 + 16 + 2 + 3 + 1 - 1 + 4); // knomial:1-16 replaces one entry
        assert!(parse_candidates("auto").is_err());
        assert!(parse_candidates("knomial:4-2").is_err());
        assert!(parse_candidates("").is_err());
        assert_eq!(
            parse_candidates("chain,knomial:1,binary").unwrap(),
            vec![
                Algorithm::Tree(Topology::Knomial(1)),
                Algorithm::Tree(Topology::Binary)
            ]
        );
    }

    #[test]
    fn predicted_choice_is_never_slower_than_the_best_static_tree() {
        let m = model();
        let f = file();
        for (mode, op, g, e) in f.cells() {
            let chosen = e.median_ns;
            let best_static = e.best_static_ns();
            assert!(
                chosen <= best_static,
                "{mode} {op} {g} {}: {chosen} > {best_static}",
                e.bytes
            );
        }
        let all: Vec<usize> = (0..m.len()).collect();
        let t = predict_auto(Op::Reduce, 8, SyncMode::Loose, &m, &all, None).unwrap();
        assert!(!matches!(t, Algorithm::Tree(Topology::Auto)));
    }

    /// Groups: the whole machine, each NUMA node, and each package where packages are
    /// not the NUMA nodes; a predicted file then has rules for every such size and a
    /// subgroup finds them.
    #[test]
    fn default_groups_cover_numa_nodes_and_packages() {
        let mut m = model(); // 2 packages x 4 CPUs
        let g = default_groups(&m);
        let names: Vec<&str> = g.iter().map(|x| x.0.as_str()).collect();
        assert_eq!(names, ["all", "package0", "package1"]);
        // The same partition as NUMA nodes: listed once.
        let pk = m.hierarchy.level("Package").unwrap().clone();
        m.hierarchy.levels.push(smelt_model::Level {
            name: "NUMANode".into(),
            groups: pk.groups.clone(),
        });
        let names: Vec<String> = default_groups(&m).into_iter().map(|x| x.0).collect();
        assert_eq!(names, ["all", "numa0", "numa1"]);
        // Two NUMA nodes per package (NPS2): both kinds.
        let numa: Vec<Vec<u32>> = pk
            .groups
            .iter()
            .flat_map(|p| p.chunks(2).map(|c| c.to_vec()).collect::<Vec<_>>())
            .collect();
        m.hierarchy.levels.last_mut().unwrap().groups = numa;
        let g = default_groups(&m);
        let sizes: Vec<(String, usize)> = g.iter().map(|x| (x.0.clone(), x.1.len())).collect();
        assert_eq!(
            sizes,
            [
                ("all".to_string(), 8),
                ("numa0".into(), 2),
                ("numa1".into(), 2),
                ("numa2".into(), 2),
                ("numa3".into(), 2),
                ("package0".into(), 4),
                ("package1".into(), 4)
            ]
        );
        let groups: Vec<Vec<usize>> = g.into_iter().map(|x| x.1).collect();
        let f = tune_predicted(
            &m,
            &groups,
            &[Op::Barrier, Op::Allreduce],
            &[8],
            &[SyncMode::Loose],
            &parse_candidates("binary,knomial:1,dissemination,recursive-doubling").unwrap(),
        )
        .unwrap();
        let keys: Vec<usize> = f.rules["loose"]["barrier"].keys().copied().collect();
        assert_eq!(keys, [2, 4, 8]);
        for (n, want) in [(2, 2), (3, 2), (4, 4), (5, 4), (8, 8), (64, 8)] {
            let e = f.group_entries(SyncMode::Loose, Op::Allreduce, n).unwrap();
            let same = &f.rules["loose"]["allreduce"][&want];
            assert_eq!(e, &same[..], "group of {n} uses the rules of {want}");
        }
    }

    /// Without SMELT_TUNE or a file, a group's table is `auto`'s prediction for every
    /// mode and operation (what resolve_auto would say for the call).
    /// Without a tuning file, a large allreduce runs on the group's tree even where
    /// the word-sized one runs a non-tree algorithm.
    #[test]
    fn a_large_allreduce_runs_on_the_tree_by_default() {
        if smelt_settings::is_set(TUNE_ENV) {
            return;
        }
        let m = model();
        let members: Vec<usize> = (0..8).collect();
        let (t, _) = auto_table(&m, &members).unwrap();
        let mut checked = 0;
        for mode in SyncMode::ALL {
            if matches!(t.lookup(mode, Op::Allreduce, 8), Some(Pick::NonTree(_))) {
                for bytes in [4096, LARGE_VECTOR, 16 << 20] {
                    assert!(
                        matches!(t.lookup(mode, Op::Allreduce, bytes), Some(Pick::Tree(_))),
                        "{mode} {bytes} B"
                    );
                }
                checked += 1;
            }
        }
        assert!(
            checked > 0,
            "the model's 8-byte allreduce is a tree: nothing checked"
        );
    }

    /// Without a tuning file, a loose allreduce of two members runs Rabenseifner
    /// above 32 KiB, on the tree from about 181 B up to it, and never Rabenseifner
    /// in strict mode or for larger groups.
    #[test]
    fn two_members_halve_long_allreduces_by_default() {
        if smelt_settings::is_set(TUNE_ENV) {
            return;
        }
        let m = model();
        let rab = Some(Pick::NonTree(NonTree::Rabenseifner));
        let (t, _) = auto_table(&m, &[0, 5]).unwrap();
        let loose = |bytes| t.lookup(SyncMode::Loose, Op::Allreduce, bytes);
        for bytes in [8, 200, 4096, 32 << 10] {
            assert_ne!(loose(bytes), rab, "{bytes} B");
        }
        for bytes in [200, 4096, 32 << 10] {
            assert!(matches!(loose(bytes), Some(Pick::Tree(_))), "{bytes} B");
        }
        for bytes in [(32 << 10) + 1, LARGE_VECTOR, PAIR_HALVES, 16 << 20, 1 << 30] {
            assert_eq!(loose(bytes), rab, "{bytes} B");
        }
        assert_ne!(t.lookup(SyncMode::Strict, Op::Allreduce, 16 << 20), rab);
        let (t, _) = auto_table(&m, &[0, 1, 2, 5]).unwrap();
        for mode in SyncMode::ALL {
            for bytes in [8, PAIR_HALVES, 16 << 20] {
                assert_ne!(
                    t.lookup(mode, Op::Allreduce, bytes),
                    rab,
                    "{mode} {bytes} B"
                );
            }
        }
    }

    #[test]
    fn the_table_predicts_what_resolve_auto_predicts() {
        if smelt_settings::is_set(TUNE_ENV) {
            return; // the caller's override would win in both
        }
        let m = model();
        for members in [(0..8).collect::<Vec<usize>>(), vec![0, 1, 2, 5, 6]] {
            let (t, _) = auto_table(&m, &members).unwrap();
            for mode in SyncMode::ALL {
                for op in AlgorithmTable::OPS {
                    let bytes = if op.carries_data() { 8 } else { 0 };
                    let want = predict_auto(op, bytes, mode, &m, &members, None).unwrap();
                    assert_eq!(t.lookup(mode, op, bytes), Some(want.into()), "{mode} {op}");
                }
            }
        }
    }
}
