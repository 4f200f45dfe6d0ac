//! The algorithm table a group looks each call up in: which algorithm runs a barrier
//! or an allreduce (a tree, or a [`NonTree`] algorithm) and which fragment size long
//! messages cross the tree in, per mode and message size. The runtime looks it up at
//! every call; the tree crate fills it (`smelt_tree::tuning::auto_table`: `SMELT_TUNE`,
//! else the host's tuning file, else the simulator's prediction) and re-exports it as
//! `smelt_tree::tuning::AlgorithmTable`. It is plain data: a table names trees by
//! their registry names only (a tree in the table means "the group's own tree").
//!
//! It also owns the grammar of `SMELT_TUNE`'s rules ([`parse_rules`], generic over
//! what an algorithm's name parses to), the message size syntax ([`parse_size`]) and
//! the one lookup rule of size classes ([`nearest_class`]).

use crate::algorithm::{NonTree, SyncMode};
use crate::op::Op;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// Why a rule, a size, an algorithm table, a pick or a shape's description cannot be
/// used (the message names the rule or the field).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TableError(pub String);

impl From<TableError> for String {
    fn from(e: TableError) -> String {
        e.0
    }
}

/// The environment variable of the one-run override, `SMELT_TUNE`.
pub const TUNE_ENV: &str = smelt_settings::TUNE;

/// What a table picks for a call: a tree, by its registry name (the group's own tree
/// runs the call), or a non-tree algorithm (only for the operations it implements).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Pick {
    /// A tree (`knomial:4`, `adaptive-shuffled`): the group's tree runs the call.
    Tree(String),
    /// A non-tree algorithm.
    NonTree(NonTree),
}

impl Pick {
    /// The non-tree algorithm, if this is one.
    pub fn non_tree(&self) -> Option<NonTree> {
        match self {
            Pick::NonTree(a) => Some(*a),
            Pick::Tree(_) => None,
        }
    }

    /// `Ok` if it can run `op` (trees run every operation), else an error naming
    /// what it runs.
    pub fn check_op(&self, op: Op) -> Result<(), TableError> {
        self.check_op_why(op).map_err(TableError)
    }

    fn check_op_why(&self, op: Op) -> Result<(), String> {
        match self {
            Pick::NonTree(a) if !a.applies_to(op) => Err(format!(
                "'{a}' runs {} only, not {op}",
                a.entry()
                    .ops
                    .iter()
                    .map(|o| o.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            _ => Ok(()),
        }
    }
}

impl From<NonTree> for Pick {
    fn from(a: NonTree) -> Pick {
        Pick::NonTree(a)
    }
}

impl fmt::Display for Pick {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pick::Tree(t) => f.write_str(t),
            Pick::NonTree(a) => a.fmt(f),
        }
    }
}

/// A non-tree algorithm's name (or alias), else a tree's name as the tree registry
/// writes them (`name` or `name:param`, letters, digits and `-`; the registry itself is
/// the tree crate's, which checks names where it parses them).
impl FromStr for Pick {
    type Err = TableError;
    fn from_str(s: &str) -> Result<Pick, TableError> {
        if let Ok(a) = s.parse::<NonTree>() {
            return Ok(Pick::NonTree(a));
        }
        let name = s.trim().to_ascii_lowercase();
        let word = |w: &str| {
            !w.is_empty()
                && w.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        };
        let ok = match name.split_once(':') {
            Some((n, p)) => word(n) && word(p),
            None => word(&name),
        };
        if !ok {
            return Err(TableError(format!(
                "'{s}' is not an algorithm's name (a tree's, such as knomial:4, or a non-tree \
                 algorithm's: {})",
                crate::algorithm::non_tree_names()
            )));
        }
        Ok(Pick::Tree(name))
    }
}

/// One rule of `SMELT_TUNE`'s grammar: the calls it matches and what it picks.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule<A> {
    /// The operation, or `None` for every one (`*`).
    pub op: Option<Op>,
    /// Smallest message size (bytes) included.
    pub min: u64,
    /// Largest message size included.
    pub max: u64,
    /// The mode, or `None` for both.
    pub mode: Option<SyncMode>,
    /// What to use.
    pub algorithm: A,
    /// Fragment size of long messages (`segment=BYTES`), if given.
    pub segment: Option<usize>,
}

impl<A> Rule<A> {
    /// True if the rule matches a call of `op` (`ab` matches broadcast rules too) with
    /// `bytes` per member in `mode`.
    pub fn matches(&self, mode: SyncMode, op: Op, bytes: u64) -> bool {
        self.op.is_none_or(|o| o == op || o == rules_op(op))
            && (self.min..=self.max).contains(&bytes)
            && self.mode.is_none_or(|m| m == mode)
    }
}

/// The operation whose rules `op` uses (`ab` is measured as the broadcast).
pub fn rules_op(op: Op) -> Op {
    match op {
        Op::AtomicBroadcast => Op::Broadcast,
        o => o,
    }
}

/// A message size: digits with an optional `k`/`KiB` or `M`/`MiB` suffix (powers of
/// 1024).
pub fn parse_size(s: &str) -> Result<u64, TableError> {
    parse_size_why(s).map_err(TableError)
}

fn parse_size_why(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let (digits, mult) = if let Some(d) = lower
        .strip_suffix("kib")
        .or_else(|| lower.strip_suffix('k'))
    {
        (d, 1u64 << 10)
    } else if let Some(d) = lower
        .strip_suffix("mib")
        .or_else(|| lower.strip_suffix('m'))
    {
        (d, 1u64 << 20)
    } else {
        (lower.as_str(), 1)
    };
    digits
        .trim()
        .parse::<u64>()
        .ok()
        .and_then(|v| v.checked_mul(mult))
        .ok_or_else(|| format!("bad size '{t}' (expected bytes, e.g. 512, 4k, 1MiB)"))
}

/// Parses rules in `SMELT_TUNE`'s grammar (separated by `;`, empty ones skipped):
///
/// ```text
/// RULE     = SELECTOR "=" ALGO [ "," "segment=" BYTES ]
/// SELECTOR = (OP | "*") [ ":" RANGE ] [ "@" ("loose" | "strict") ]
/// RANGE    = SIZE | SIZE "-" [SIZE] | "-" SIZE        (bounds included)
/// SIZE     = digits [ "k" | "K" | "KiB" | "M" | "MiB" ]   (k = 1024)
/// ```
///
/// `algo(name, op)` parses an `ALGO` of a rule of operation `op` (`None` for `*`) and
/// says whether it may run there. Errors name the rule.
pub fn parse_rules<A>(
    text: &str,
    algo: impl Fn(&str, Option<Op>) -> Result<A, String>,
) -> Result<Vec<Rule<A>>, TableError> {
    parse_rules_why(text, algo).map_err(TableError)
}

fn parse_rules_why<A>(
    text: &str,
    algo: impl Fn(&str, Option<Op>) -> Result<A, String>,
) -> Result<Vec<Rule<A>>, String> {
    let mut rules = Vec::new();
    for (i, raw) in text.split(';').enumerate() {
        let r = raw.trim();
        if r.is_empty() {
            continue;
        }
        let bad = |why: String| format!("{TUNE_ENV} rule {} '{r}': {why}", i + 1);
        let (sel, name) = r
            .split_once('=')
            .ok_or_else(|| bad("expected SELECTOR=ALGO, e.g. reduce:0-1024=knomial:4".into()))?;
        let (sel, mode) = match sel.split_once('@') {
            Some((s, m)) => (s, Some(m.parse::<SyncMode>().map_err(bad)?)),
            None => (sel, None),
        };
        let (op, range) = match sel.split_once(':') {
            Some((o, r)) => (o.trim(), Some(r.trim())),
            None => (sel.trim(), None),
        };
        let op = match op {
            "*" | "all" => None,
            o => Some(o.parse::<Op>().map_err(bad)?),
        };
        let (min, max) = match range {
            None => (0, u64::MAX),
            Some(r) => match r.split_once('-') {
                None => {
                    let v = parse_size_why(r).map_err(bad)?;
                    (v, v)
                }
                Some((lo, hi)) => {
                    let lo = if lo.trim().is_empty() {
                        0
                    } else {
                        parse_size_why(lo).map_err(bad)?
                    };
                    let hi = if hi.trim().is_empty() {
                        u64::MAX
                    } else {
                        parse_size_why(hi).map_err(bad)?
                    };
                    if lo > hi {
                        return Err(bad(format!("empty range {lo}-{hi}")));
                    }
                    (lo, hi)
                }
            },
        };
        let mut parts = name.split(',');
        let algorithm = algo(parts.next().unwrap_or("").trim(), op).map_err(bad)?;
        let mut segment = None;
        for p in parts {
            match p.trim().split_once('=') {
                Some((k, v)) if k.trim() == "segment" => {
                    let v = parse_size_why(v).map_err(bad)?;
                    if v == 0 {
                        return Err(bad("segment must be at least 1 byte".into()));
                    }
                    segment = Some(v as usize);
                }
                _ => {
                    return Err(bad(format!(
                        "unknown parameter '{}' (known: segment=BYTES)",
                        p.trim()
                    )))
                }
            }
        }
        rules.push(Rule {
            op,
            min,
            max,
            mode,
            algorithm,
            segment,
        });
    }
    Ok(rules)
}

/// The checks every rule's algorithm passes whatever parses it: `auto` is no choice,
/// and a non-tree algorithm names the operation it runs.
pub fn check_rule_algorithm(pick: &Pick, op: Option<Op>) -> Result<(), TableError> {
    check_rule_algorithm_why(pick, op).map_err(TableError)
}

fn check_rule_algorithm_why(pick: &Pick, op: Option<Op>) -> Result<(), String> {
    if *pick == Pick::Tree("auto".into()) {
        return Err("'auto' cannot be an override's choice".into());
    }
    if let Pick::NonTree(a) = pick {
        match op {
            None => {
                return Err(format!(
                    "'{a}' is not a tree: name the operation it runs ({})",
                    a.entry()
                        .ops
                        .iter()
                        .map(|o| format!("{o}={a}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            }
            Some(o) => pick.check_op(rules_op(o))?,
        }
    }
    Ok(())
}

/// log2 distance between two message sizes (0 counts as 1 byte).
fn size_distance(a: u64, b: u64) -> f64 {
    ((a.max(1) as f64).log2() - (b.max(1) as f64).log2()).abs()
}

/// The index of the class nearest to `bytes` on a log scale (ties: the smaller
/// size) among `sizes`: the one lookup rule of tuning files and of
/// [`AlgorithmTable::lookup`]. `None` for no classes.
pub fn nearest_class(sizes: impl IntoIterator<Item = u64>, bytes: u64) -> Option<usize> {
    let mut best: Option<(usize, u64)> = None;
    for (i, b) in sizes.into_iter().enumerate() {
        let better = match best {
            None => true,
            Some((_, c)) => {
                let (de, db) = (size_distance(b, bytes), size_distance(c, bytes));
                de < db || (de == db && b < c)
            }
        };
        if better {
            best = Some((i, b));
        }
    }
    best.map(|(i, _)| i)
}

/// Where a table's rules (or an `auto` resolution) came from.
#[derive(Debug, Clone, PartialEq)]
pub enum Origin {
    /// `SMELT_TUNE`.
    Override,
    /// The host's tuning file.
    File(PathBuf),
    /// The simulator (no usable tuning file).
    Predicted,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Override => write!(f, "{TUNE_ENV}"),
            Origin::File(p) => write!(f, "tuning file {}", p.display()),
            Origin::Predicted => f.write_str("the simulator's prediction"),
        }
    }
}

/// Size classes of one (mode, operation): (bytes, algorithm), ascending.
pub type Classes = BTreeMap<(SyncMode, Op), Vec<(u64, Pick)>>;
/// Size classes of tuned fragment sizes: (bytes, fragment size or `None` for the
/// group's own), per (mode, operation).
pub type SegmentClasses = BTreeMap<(SyncMode, Op), Vec<(u64, Option<usize>)>>;

/// The algorithms a group runs for the operations that have non-tree algorithms
/// (barrier and allreduce, [`AlgorithmTable::OPS`]) and the fragment sizes of long
/// messages, per mode and message size: resolved once when the group is built and
/// looked up by the runtime at every call (`GroupConfig::algorithms`). A tree in the
/// table (or no rule) means "the group's tree".
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AlgorithmTable {
    /// `SMELT_TUNE`-style rules, first match wins.
    overrides: Vec<Rule<Pick>>,
    /// Then, per (mode, operation), size classes (bytes, algorithm), ascending: the
    /// tuning file's entries for the group's size, or the prediction.
    classes: Classes,
    /// Per (mode, operation) of [`SEGMENT_OPS`](Self::SEGMENT_OPS), size classes
    /// (bytes, fragment size) where the tuning file tuned a fragment size.
    segments: SegmentClasses,
    /// Where the classes came from, for reports.
    origin: Option<Origin>,
}

impl AlgorithmTable {
    /// The operations that have non-tree algorithms.
    pub const OPS: [Op; 2] = [Op::Barrier, Op::Allreduce];
    /// The operations whose long messages cross the tree in fragments of a tuned size.
    pub const SEGMENT_OPS: [Op; 3] = [Op::Broadcast, Op::Reduce, Op::Allreduce];

    /// No rule: every collective runs on the group's tree.
    pub fn trees_only() -> AlgorithmTable {
        AlgorithmTable::default()
    }

    /// A table of these parts (what the tree crate's `auto_table` resolves): rules
    /// first (the first match wins), then the size classes of each (mode, operation).
    pub fn from_parts(
        overrides: Vec<Rule<Pick>>,
        classes: Classes,
        segments: SegmentClasses,
        origin: Option<Origin>,
    ) -> AlgorithmTable {
        AlgorithmTable {
            overrides,
            classes,
            segments,
            origin,
        }
    }

    /// Rules in `SMELT_TUNE`'s syntax (the first match wins), e.g.
    /// `barrier=dissemination;allreduce:0-4k=recursive-doubling`; rules of other
    /// operations are accepted and have no effect on the table (they pick trees). A
    /// tree's name is checked for its syntax only (the registry is the tree crate's:
    /// `smelt_tree::tuning::table_from_rules` checks it there).
    pub fn parse(rules: &str) -> Result<AlgorithmTable, TableError> {
        let overrides = parse_rules(rules, |name, op| {
            let p: Pick = name.parse()?;
            check_rule_algorithm(&p, op)?;
            Ok(p)
        })?;
        Ok(AlgorithmTable {
            overrides,
            classes: BTreeMap::new(),
            segments: BTreeMap::new(),
            origin: Some(Origin::Override),
        })
    }

    /// `alg` for `op` at every size and in both modes (`Err` if it does not run `op`).
    pub fn fixed(op: Op, alg: impl Into<Pick>) -> Result<AlgorithmTable, TableError> {
        let alg = alg.into();
        alg.check_op(op)?;
        let mut t = AlgorithmTable::default();
        for mode in SyncMode::ALL {
            t.classes.insert((mode, op), vec![(0, alg.clone())]);
        }
        Ok(t)
    }

    /// The first override rule matching the call, if any.
    fn first_match(&self, mode: SyncMode, op: Op, bytes: u64) -> Option<&Rule<Pick>> {
        self.overrides.iter().find(|r| r.matches(mode, op, bytes))
    }

    /// The algorithm for `op` of `bytes` per member in `mode`; `None` when no rule
    /// says (the group's tree).
    pub fn lookup(&self, mode: SyncMode, op: Op, bytes: u64) -> Option<Pick> {
        if let Some(r) = self.first_match(mode, op, bytes) {
            return Some(r.algorithm.clone());
        }
        let cl = self.classes.get(&(mode, op))?;
        Some(cl[nearest_class(cl.iter().map(|c| c.0), bytes)?].1.clone())
    }

    /// The fragment size for `op` (one of [`SEGMENT_OPS`](Self::SEGMENT_OPS)) of
    /// `bytes` per member in `mode`: a matching `SMELT_TUNE` rule's `segment=`, else the
    /// tuning file's for the nearest size class; `None`: the group's own.
    pub fn segment(&self, mode: SyncMode, op: Op, bytes: u64) -> Option<usize> {
        if let Some(r) = self.first_match(mode, op, bytes) {
            return r.segment;
        }
        let cl = self.segments.get(&(mode, op))?;
        cl[nearest_class(cl.iter().map(|c| c.0), bytes)?].1
    }

    /// True if some rule sets a fragment size (the runtime then asks
    /// [`segment`](Self::segment) at every long message).
    pub fn tunes_segments(&self) -> bool {
        self.overrides.iter().any(|r| r.segment.is_some())
            || self.segments.values().flatten().any(|c| c.1.is_some())
    }

    /// The non-tree algorithm for the call, if the table picks one (else the tree).
    #[inline]
    pub fn non_tree(&self, mode: SyncMode, op: Op, bytes: u64) -> Option<NonTree> {
        let nt = match self.first_match(mode, op, bytes) {
            Some(r) => r.algorithm.non_tree(),
            None => {
                let cl = self.classes.get(&(mode, op))?;
                cl[nearest_class(cl.iter().map(|c| c.0), bytes)?]
                    .1
                    .non_tree()
            }
        };
        nt.filter(|a| a.applies_to(op))
    }

    /// The table for a group with more members than CPUs that runs a flat tree
    /// (`GroupConfig::flatten_oversubscribed`, `smelt launch` with more members than
    /// CPUs): the barrier runs on the flat tree (`sequential`) in every mode, whatever
    /// the file or the prediction said. There every step costs a scheduling round, and
    /// the flat tree's barrier takes two (everyone to the root, the root to everyone)
    /// where dissemination takes ⌈log2 n⌉ rounds in each of which every member must run;
    /// the simulator does not model scheduling, and tuning files are measured with one
    /// member per CPU. Measured, 8 threads on 2 CPUs: the flat tree's barrier
    /// 3.7–5.9 µs against 7.0–10.1 µs by dissemination (docs/tune.md). `SMELT_TUNE`
    /// rules still win (an explicit choice).
    pub fn for_flat_oversubscribed(&self) -> AlgorithmTable {
        let mut t = self.clone();
        for mode in SyncMode::ALL {
            t.classes.insert(
                (mode, Op::Barrier),
                vec![(0, Pick::Tree("sequential".into()))],
            );
        }
        t
    }

    /// True if some rule may pick `a` (the runtime then builds its links).
    pub fn may_use(&self, a: NonTree) -> bool {
        let nt = Pick::NonTree(a);
        self.overrides.iter().any(|r| r.algorithm == nt)
            || self.classes.values().any(|v| v.iter().any(|c| c.1 == nt))
    }

    /// Where the rules came from (`None` for [`fixed`](Self::fixed) and
    /// [`trees_only`](Self::trees_only)).
    pub fn origin(&self) -> Option<&Origin> {
        self.origin.as_ref()
    }
}

/// [`AlgorithmTable`] as a process job's description carries it (JSON), so every
/// member process runs the creator's table exactly.
#[derive(Serialize, Deserialize)]
#[allow(clippy::type_complexity)] // plain JSON rows; a type per row would say no more
struct TableRepr {
    overrides: Vec<RuleRepr>,
    /// (mode, operation, size classes of algorithm names).
    classes: Vec<(String, String, Vec<(u64, String)>)>,
    /// (mode, operation, size classes of fragment sizes).
    segments: Vec<(String, String, Vec<(u64, Option<usize>)>)>,
}

#[derive(Serialize, Deserialize)]
struct RuleRepr {
    op: Option<String>,
    min: u64,
    max: u64,
    mode: Option<String>,
    algo: String,
    segment: Option<usize>,
}

impl AlgorithmTable {
    /// The table as JSON ([`from_json`](Self::from_json) gives it back; where it came
    /// from is not kept).
    pub fn to_json(&self) -> String {
        let repr = TableRepr {
            overrides: self
                .overrides
                .iter()
                .map(|r| RuleRepr {
                    op: r.op.map(|o| o.name().to_string()),
                    min: r.min,
                    max: r.max,
                    mode: r.mode.map(|m| m.name().to_string()),
                    algo: r.algorithm.to_string(),
                    segment: r.segment,
                })
                .collect(),
            classes: self
                .classes
                .iter()
                .map(|((m, o), v)| {
                    let v = v.iter().map(|(b, a)| (*b, a.to_string())).collect();
                    (m.name().to_string(), o.name().to_string(), v)
                })
                .collect(),
            segments: self
                .segments
                .iter()
                .map(|((m, o), v)| (m.name().to_string(), o.name().to_string(), v.clone()))
                .collect(),
        };
        serde_json::to_string(&repr).expect("plain data serializes")
    }

    /// The table [`to_json`](Self::to_json) wrote; anything else is an error.
    pub fn from_json(text: &str) -> Result<AlgorithmTable, TableError> {
        Self::from_json_why(text).map_err(TableError)
    }

    fn from_json_why(text: &str) -> Result<AlgorithmTable, String> {
        let r: TableRepr =
            serde_json::from_str(text).map_err(|e| format!("algorithm table: {e}"))?;
        let mode = |m: &str| m.parse::<SyncMode>();
        let op = |o: &str| o.parse::<Op>();
        let algo = |a: &str| a.parse::<Pick>();
        let mut t = AlgorithmTable::default();
        for x in r.overrides {
            t.overrides.push(Rule {
                op: x.op.as_deref().map(op).transpose()?,
                min: x.min,
                max: x.max,
                mode: x.mode.as_deref().map(mode).transpose()?,
                algorithm: algo(&x.algo)?,
                segment: x.segment,
            });
        }
        for (m, o, v) in r.classes {
            let v = v
                .iter()
                .map(|(b, a)| Ok((*b, algo(a)?)))
                .collect::<Result<Vec<_>, String>>()?;
            t.classes.insert((mode(&m)?, op(&o)?), v);
        }
        for (m, o, v) in r.segments {
            t.segments.insert((mode(&m)?, op(&o)?), v);
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_parse_and_print() {
        assert_eq!("rd".parse(), Ok(Pick::NonTree(NonTree::RecursiveDoubling)));
        assert_eq!("Knomial:4".parse(), Ok(Pick::Tree("knomial:4".into())));
        assert_eq!(Pick::Tree("binary".into()).to_string(), "binary");
        for bad in ["", "a b", "x:", ":4", "knomial:4:2", "tree!"] {
            assert!(bad.parse::<Pick>().is_err(), "{bad}");
        }
        let e = Pick::NonTree(NonTree::Dissemination)
            .check_op(Op::Allreduce)
            .unwrap_err()
            .0;
        assert!(
            e.contains("barrier only") || e.contains("runs barrier"),
            "{e}"
        );
    }

    #[test]
    fn rules_parse_match_and_refuse() {
        let t = AlgorithmTable::parse(
            "barrier@strict=dissemination;allreduce:0-4k=rd,segment=1k;*:64k-=knomial:1",
        )
        .unwrap();
        assert_eq!(
            t.non_tree(SyncMode::Strict, Op::Barrier, 0),
            Some(NonTree::Dissemination)
        );
        assert_eq!(t.non_tree(SyncMode::Loose, Op::Barrier, 0), None);
        assert_eq!(
            t.non_tree(SyncMode::Loose, Op::Allreduce, 4096),
            Some(NonTree::RecursiveDoubling)
        );
        assert_eq!(t.segment(SyncMode::Loose, Op::Allreduce, 8), Some(1024));
        assert_eq!(
            t.lookup(SyncMode::Loose, Op::Reduce, 1 << 20),
            Some(Pick::Tree("knomial:1".into()))
        );
        assert!(t.may_use(NonTree::RecursiveDoubling) && !t.may_use(NonTree::Rabenseifner));
        assert!(t.tunes_segments());
        assert_eq!(t.origin(), Some(&Origin::Override));
        let back = AlgorithmTable::from_json(&t.to_json()).unwrap();
        assert_eq!(back.to_json(), t.to_json());
        for (rules, want) in [
            ("barrier", "expected SELECTOR=ALGO"),
            ("*=dissemination", "is not a tree"),
            ("allreduce=dissemination", "not allreduce"),
            ("reduce=auto", "'auto' cannot"),
            ("reduce:9-1=binary", "empty range"),
            ("reduce=binary,colour=1", "unknown parameter"),
            ("reduce=binary,segment=0", "at least 1 byte"),
            ("gossip=binary", "unknown operation"),
        ] {
            let e = AlgorithmTable::parse(rules).unwrap_err().0;
            assert!(e.contains(want) && e.contains(TUNE_ENV), "{rules}: {e}");
        }
        assert!(AlgorithmTable::from_json("{}").is_err());
    }

    #[test]
    fn fixed_flat_and_classes() {
        let t = AlgorithmTable::fixed(Op::Barrier, NonTree::Dissemination).unwrap();
        assert!(t.may_use(NonTree::Dissemination));
        let f = t.for_flat_oversubscribed();
        assert_eq!(
            f.lookup(SyncMode::Strict, Op::Barrier, 0),
            Some(Pick::Tree("sequential".into()))
        );
        assert!(!f.may_use(NonTree::Dissemination));
        assert!(AlgorithmTable::fixed(Op::Reduce, NonTree::Dissemination).is_err());
        assert_eq!(nearest_class([8, 4096], 100), Some(0));
        assert_eq!(nearest_class([8, 4096], 300), Some(1));
        assert_eq!(nearest_class([], 7), None);
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert!(parse_size("4x").is_err());
    }
}
